"""Padding layers (ZeroPad, ConstantPad, ReflectionPad, ReplicationPad, CircularPad in
1, 2 and 3 dims) with torch.nn's names, arguments and reprs. Each is F.pad with a fixed
mode; F.pad (nn/_conv_pad.py) builds the output from differentiable cat / index_select,
so gradients and compiled capture come with it.

padding is an int (the same width on every side) or a sequence of widths listed last dim
first, (left, right[, top, bottom[, front, back]]), as PyTorch; a sequence is kept as
given, so its length decides how many dims are padded (again as PyTorch).
"""

from collections.abc import Iterable

from . import functional as F
from .module import Module

__all__ = [
    "CircularPad1d", "CircularPad2d", "CircularPad3d", "ConstantPad1d", "ConstantPad2d",
    "ConstantPad3d", "ReflectionPad1d", "ReflectionPad2d", "ReflectionPad3d",
    "ReplicationPad1d", "ReplicationPad2d", "ReplicationPad3d", "ZeroPad1d", "ZeroPad2d",
    "ZeroPad3d",
]


def _widths(padding, dims):
    """An int repeated for both sides of `dims` dims, or a sequence as a tuple."""
    if isinstance(padding, Iterable):
        return tuple(padding)
    return (padding,) * (2 * dims)


class _PadNd(Module):
    """F.pad(input, self.padding, mode); subclasses set _mode and _dims."""

    _mode = "constant"
    _dims = 1

    def __init__(self, padding):
        super().__init__()
        self.padding = _widths(padding, self._dims)

    def forward(self, input):
        return F.pad(input, self.padding, self._mode)

    def extra_repr(self):
        return f"{self.padding}"


class _ConstantPadNd(_PadNd):
    def __init__(self, padding, value):
        super().__init__(padding)
        self.value = value

    def forward(self, input):
        return F.pad(input, self.padding, "constant", self.value)

    def extra_repr(self):
        return f"padding={self.padding}, value={self.value}"


class ConstantPad1d(_ConstantPadNd):
    _dims = 1


class ConstantPad2d(_ConstantPadNd):
    _dims = 2


class ConstantPad3d(_ConstantPadNd):
    _dims = 3


class ZeroPad1d(ConstantPad1d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad2d(ConstantPad2d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ZeroPad3d(ConstantPad3d):
    def __init__(self, padding):
        super().__init__(padding, 0.0)

    def extra_repr(self):
        return f"{self.padding}"


class ReflectionPad1d(_PadNd):
    _mode, _dims = "reflect", 1


class ReflectionPad2d(_PadNd):
    _mode, _dims = "reflect", 2


class ReflectionPad3d(_PadNd):
    _mode, _dims = "reflect", 3


class ReplicationPad1d(_PadNd):
    _mode, _dims = "replicate", 1


class ReplicationPad2d(_PadNd):
    _mode, _dims = "replicate", 2


class ReplicationPad3d(_PadNd):
    _mode, _dims = "replicate", 3


class _CircularPadNd(_PadNd):
    """Circular padding; unlike the other modes, the module checks the input's rank itself
    (a ValueError, as PyTorch's CircularPad modules)."""

    _mode = "circular"

    def forward(self, input):
        F._tensor(type(self).__name__, "input", input)
        low = self._dims + 1
        if input.ndim not in (low, low + 1):
            raise ValueError(f"expected {low}D or {low + 1}D input (got {input.ndim}D input)")
        return super().forward(input)


class CircularPad1d(_CircularPadNd):
    _dims = 1


class CircularPad2d(_CircularPadNd):
    _dims = 2


class CircularPad3d(_CircularPadNd):
    _dims = 3
