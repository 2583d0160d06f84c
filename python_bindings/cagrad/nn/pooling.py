"""Pooling: nn.functional's max_pool2d, avg_pool2d, adaptive_avg_pool2d, max_pool1d and
avg_pool1d, and the modules MaxPool2d, AvgPool2d, AdaptiveAvgPool2d, MaxPool1d, AvgPool1d.

The 2-d functions are one C op each (ops_pool.c), batched [N, C, H, W] or unbatched
[C, H, W]. The 1-d ones run the 2-d op on a height-1 view of [N, C, L] or [C, L].
"""

from .. import _C
from .module import Module

__all__ = ["MaxPool2d", "AvgPool2d", "AdaptiveAvgPool2d", "MaxPool1d", "AvgPool1d"]


def _input(fn, value):
    if not isinstance(value, _C.TensorBase):
        raise TypeError(f"{fn}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(value).__name__}")
    return value


def _int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _pair(fn, name, value, n=2, what="either be a single int, or"):
    """An int or a sequence of 1 or n ints as an n-tuple, with PyTorch's message otherwise."""
    if _int(value):
        return (value,) * n
    if isinstance(value, (tuple, list)) and all(_int(v) for v in value):
        if len(value) == 1:
            return tuple(value) * n
        if len(value) == n:
            return tuple(value)
    count = "two ints" if n == 2 else "one int"
    raise RuntimeError(f"{fn}: {name} must {what} a tuple of {count}")


def _stride(fn, stride, kernel, n=2):
    if stride is None or (isinstance(stride, (tuple, list)) and len(stride) == 0):
        return kernel
    return _pair(fn, "stride", stride, n, "either be omitted, a single int, or")


def _flag(fn, name, value):
    if not isinstance(value, bool):
        raise TypeError(f"{fn}(): argument '{name}' must be bool, not {type(value).__name__}")
    return value


# ------------------------------------------------------------------------------ functions
def max_pool2d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    fn = "max_pool2d"
    kernel = _pair(fn, "kernel_size", kernel_size)
    out, indices = _C.max_pool2d(
        _input(fn, input), kernel, _stride(fn, stride, kernel),
        _pair(fn, "padding", padding), _pair(fn, "dilation", dilation, what="be either a single "
                                             "int, or"),
        _flag(fn, "ceil_mode", ceil_mode))
    return (out, indices) if return_indices else out


def avg_pool2d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    fn = "avg_pool2d"
    kernel = _pair(fn, "kernel_size", kernel_size)
    if divisor_override is not None and (not _int(divisor_override) or divisor_override == 0):
        raise RuntimeError("divisor must be not zero")
    return _C.avg_pool2d(_input(fn, input), kernel, _stride(fn, stride, kernel),
                         _pair(fn, "padding", padding), _flag(fn, "ceil_mode", ceil_mode),
                         _flag(fn, "count_include_pad", count_include_pad),
                         divisor_override or 0)


def adaptive_avg_pool2d(input, output_size):
    """output_size: an int or (height, width); None keeps the input's size there."""
    _input("adaptive_avg_pool2d", input)
    size = (output_size, output_size) if _int(output_size) or output_size is None \
        else tuple(output_size)
    if len(size) != 2 or not all(s is None or _int(s) for s in size):
        raise TypeError(f"adaptive_avg_pool2d(): argument 'output_size' must be an int or a "
                        f"tuple of two ints or None, not {output_size!r}")
    shape = input.shape
    if len(shape) >= 2:
        size = tuple(shape[len(shape) - 2 + k] if s is None else s for k, s in enumerate(size))
    if size == (1, 1) and len(shape) in (3, 4) and all(shape[1:]):
        # a global average is a mean, as in PyTorch (MeanBackward1, the mean's own sums)
        return _C.mean(input, (-2, -1), True)
    return _C.adaptive_avg_pool2d(input, size[0], size[1])


def _as_2d(fn, input):
    """[N, C, L] or [C, L] as [N, C, 1, L] or [C, 1, L]."""
    if len(_input(fn, input).shape) not in (2, 3):
        raise RuntimeError(f"{fn}: Expected 2D or 3D (batch mode) tensor for input, but got "
                           f"{list(input.shape)}")
    return _C.unsqueeze(input, -2)


def max_pool1d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    fn = "max_pool1d"
    kernel = _pair(fn, "kernel_size", kernel_size, 1)
    out, indices = _C.max_pool2d(
        _as_2d(fn, input), (1,) + kernel, (1,) + _stride(fn, stride, kernel, 1),
        (0,) + _pair(fn, "padding", padding, 1), (1,) + _pair(fn, "dilation", dilation, 1),
        _flag(fn, "ceil_mode", ceil_mode))
    out = _C.squeeze(out, (-2,))
    return (out, _C.squeeze(indices, (-2,))) if return_indices else out


def avg_pool1d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True):
    fn = "avg_pool1d"
    kernel = _pair(fn, "kernel_size", kernel_size, 1)
    out = _C.avg_pool2d(_as_2d(fn, input), (1,) + kernel, (1,) + _stride(fn, stride, kernel, 1),
                        (0,) + _pair(fn, "padding", padding, 1), _flag(fn, "ceil_mode", ceil_mode),
                        _flag(fn, "count_include_pad", count_include_pad), 0)
    return _C.squeeze(out, (-2,))


# ------------------------------------------------------------------------------ modules
class _MaxPoolNd(Module):
    def __init__(self, kernel_size, stride=None, padding=0, dilation=1, return_indices=False,
                 ceil_mode=False):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.dilation = dilation
        self.return_indices = return_indices
        self.ceil_mode = ceil_mode

    def extra_repr(self):
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}, "
                f"dilation={self.dilation}, ceil_mode={self.ceil_mode}")


class MaxPool2d(_MaxPoolNd):
    def forward(self, input):
        return max_pool2d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                          self.ceil_mode, self.return_indices)


class MaxPool1d(_MaxPoolNd):
    def forward(self, input):
        return max_pool1d(input, self.kernel_size, self.stride, self.padding, self.dilation,
                          self.ceil_mode, self.return_indices)


class AvgPool2d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True, divisor_override=None):
        super().__init__()
        self.kernel_size = kernel_size
        self.stride = stride if (stride is not None) else kernel_size
        self.padding = padding
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad
        self.divisor_override = divisor_override

    def forward(self, input):
        return avg_pool2d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad, self.divisor_override)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool1d(Module):
    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False,
                 count_include_pad=True):
        super().__init__()
        self.kernel_size = _pair("avg_pool1d", "kernel_size", kernel_size, 1)
        self.stride = _pair("avg_pool1d", "stride", stride if stride is not None else
                            kernel_size, 1)
        self.padding = _pair("avg_pool1d", "padding", padding, 1)
        self.ceil_mode = ceil_mode
        self.count_include_pad = count_include_pad

    def forward(self, input):
        return avg_pool1d(input, self.kernel_size, self.stride, self.padding, self.ceil_mode,
                          self.count_include_pad)

    def extra_repr(self):
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AdaptiveAvgPool2d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return adaptive_avg_pool2d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"
