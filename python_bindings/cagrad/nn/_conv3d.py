"""conv3d, conv_transpose3d and adaptive_avg_pool3d as composites, for nn.functional.

conv3d is one conv2d: every output depth position reads kD input depth slices (after
zero padding in depth), so those slices are gathered with one index_select and stacked
into the channel dim, next to the kernel's depth taps folded into the weight's channels
(per group, so grouped convolutions stay grouped). conv2d then does height and width,
with their own stride, padding and dilation. Every step is differentiable, so input,
weight and bias get gradients, eager and compiled.

conv_transpose3d is conv3d of the input spread by the stride (zeros between entries) and
padded by dilation*(k-1) - padding, with the weight flipped and its channels swapped, as
conv_transpose2d (_conv_transpose.py). adaptive_avg_pool3d averages each output cell's
window, one window table (a matrix) per dim, as torch picks the windows.
"""

import numpy as np

from .. import _C
from .._creation import tensor
from .._dtype import float32
from . import functional as F
from ._conv_transpose import _check_channels, _flipped_swapped, _spread

__all__ = ["conv3d", "conv_transpose3d", "adaptive_avg_pool3d"]


def _triple(fn, name, value):
    """An int or a sequence of 1 or 3 ints as a (depth, height, width) triple."""
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}' must be an int or a tuple of ints, not "
                        f"{type(value).__name__}")
    if isinstance(value, int):
        return (value,) * 3
    value = tuple(value)
    if len(value) == 1:
        value = value * 3
    if len(value) != 3 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RuntimeError(f"expected {name} to be a single integer value or a list of 3 "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(value)}")
    return value


def _check_conv3d(input, weight, bias, stride, padding, dilation, groups):
    """PyTorch's checks and messages, on the shapes as the caller passed them."""
    if weight.ndim != 5:
        raise RuntimeError(f"Expected 5-dimensional weight for conv3d, but got weight of "
                           f"size {list(weight.shape)} instead")
    if input.ndim not in (4, 5):
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to conv3d, but got "
                           f"input of size: {list(input.shape)}")
    if input.dtype != weight.dtype:
        raise RuntimeError(f"expected scalar type {_scalar_name(input)} but found "
                           f"{_scalar_name(weight)}")
    if any(s <= 0 for s in stride):
        raise RuntimeError("non-positive stride is not supported")
    if any(p < 0 for p in padding):
        raise RuntimeError("negative padding is not supported")
    if any(d <= 0 for d in dilation):
        raise RuntimeError("dilation should be greater than zero")
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    out_channels = weight.shape[0]
    if out_channels % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by "
                           f"{groups} at dimension 0, but got weight of size "
                           f"[{list(weight.shape)}] instead")
    channels = input.shape[-4]
    if channels != weight.shape[1] * groups:
        raise RuntimeError(f"Given groups={groups}, weight of size {list(weight.shape)}, "
                           f"expected input{list(input.shape)} to have "
                           f"{weight.shape[1] * groups} channels, but got {channels} "
                           f"channels instead")
    if bias is not None and (bias.ndim != 1 or bias.shape[0] != out_channels):
        raise RuntimeError(f"Given weight of size {list(weight.shape)}, expected bias to be "
                           f"1-dimensional with {out_channels} elements, but got bias of size "
                           f"{list(bias.shape)} instead")


def _scalar_name(x):
    return {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}.get(
        str(x.dtype).rsplit(".", 1)[-1], str(x.dtype))


def _padding_pairs(padding, dilation, kernel, stride):
    """(start, end) zero padding per spatial dim, for a number or 'valid' / 'same'."""
    if not isinstance(padding, str):
        return [(p, p) for p in padding]
    if padding == "valid":
        return [(0, 0)] * 3
    if padding != "same":
        raise RuntimeError(f"Invalid padding string: {padding!r}")
    if stride != (1, 1, 1):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    # the total d*(k-1) per dim, the odd one at the end, as torch
    totals = [d * (k - 1) for d, k in zip(dilation, kernel)]
    return [(t // 2, t - t // 2) for t in totals]


def conv3d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """3-D cross-correlation of input [N, C, D, H, W] (or [C, D, H, W]) with weight
    [out_channels, C/groups, kD, kH, kW]; padding may be numbers, 'valid' or 'same'."""
    F._tensor("conv3d", "input", input)
    F._tensor("conv3d", "weight", weight)
    F._optional_tensor("conv3d", "bias", bias)
    stride = _triple("conv3d", "stride", stride)
    dilation = _triple("conv3d", "dilation", dilation)
    if not isinstance(padding, str):
        padding = _triple("conv3d", "padding", padding)
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv3d(): argument 'groups' must be int, not {type(groups).__name__}")
    _check_conv3d(input, weight, bias, stride, padding if not isinstance(padding, str)
                  else (0, 0, 0), dilation, groups)
    kernel = tuple(weight.shape[2:])
    pads = _padding_pairs(padding, dilation, kernel, stride)
    batched = input.ndim == 5
    x = input if batched else input.unsqueeze(0)
    padded = [n + a + b for n, (a, b) in zip(x.shape[2:], pads)]
    if any(n < d * (k - 1) + 1 for n, d, k in zip(padded, dilation, kernel)):
        raise RuntimeError(f"Calculated padded input size per channel: "
                           f"({' x '.join(map(str, padded))}). Kernel size: "
                           f"({' x '.join(map(str, kernel))}). Kernel size can't be greater "
                           f"than actual input size")
    out = _conv3d(x, weight, bias, stride, pads, dilation, groups)
    return out if batched else out.squeeze(0)


def _conv3d(x, weight, bias, stride, pads, dilation, groups):
    """The core on a batched input, after the checks."""
    n, channels = x.shape[:2]
    out_channels, per_group, k_depth = weight.shape[:3]
    if pads[0] != (0, 0):
        x = F.pad(x, (0, 0, 0, 0) + pads[0])
    depth_out = (x.shape[2] - dilation[0] * (k_depth - 1) - 1) // stride[0] + 1
    # input depth of (output depth o, tap k): o*stride + k*dilation, row-major in (o, k)
    taps = (np.arange(depth_out)[:, None] * stride[0]
            + np.arange(k_depth)[None, :] * dilation[0]).reshape(-1)
    h, w = x.shape[3:]
    cols = x.index_select(2, tensor(taps))  # [N, C, Do*kD, H, W]
    cols = cols.reshape(n, groups, per_group, depth_out, k_depth, h, w)
    # -> [N*Do, (group, tap, channel), H, W]: each group's channels stay contiguous
    cols = cols.permute(0, 3, 1, 4, 2, 5, 6).reshape(n * depth_out, channels * k_depth, h, w)
    w2 = weight.permute(0, 2, 1, 3, 4).reshape(out_channels, k_depth * per_group,
                                               *weight.shape[3:])
    out = _C.conv2d(cols, w2, bias, tuple(stride[1:]), (pads[1][0], pads[2][0]),
                    (pads[1][1], pads[2][1]), tuple(dilation[1:]), groups)
    out = out.reshape(n, depth_out, out_channels, *out.shape[2:])
    return out.permute(0, 2, 1, 3, 4)


def conv_transpose3d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 3-D convolution of input [N, C_in, D, H, W] (or [C_in, D, H, W]) with
    weight [C_in, C_out/groups, kD, kH, kW]: output size (n-1)*stride - 2*padding +
    dilation*(k-1) + output_padding + 1 per spatial dim."""
    fn = "conv_transpose3d"
    F._tensor(fn, "input", input)
    F._tensor(fn, "weight", weight)
    F._optional_tensor(fn, "bias", bias)
    if weight.ndim != 5:
        raise RuntimeError(f"Expected 5-dimensional weight for {fn}, but got weight of size "
                           f"{list(weight.shape)} instead")
    if input.ndim not in (4, 5):
        raise RuntimeError(f"Expected 4D (unbatched) or 5D (batched) input to {fn}, but got "
                           f"input of size: {list(input.shape)}")
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"{fn}(): argument 'groups' must be int, not {type(groups).__name__}")
    stride, padding, output_padding, dilation = (
        _triple(fn, name, v) for name, v in (("stride", stride), ("padding", padding),
                                             ("output_padding", output_padding),
                                             ("dilation", dilation)))
    _check_channels(input, weight, groups, 3)
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            raise RuntimeError(f"output padding must be smaller than either stride or "
                               f"dilation, but got output_padding={list(output_padding)}, "
                               f"stride={list(stride)}, dilation={list(dilation)}")
    x = input
    for dim, s in zip((-3, -2, -1), stride):
        x = _spread(x, dim, s)
    widths = []  # F.pad's order: last dim first; a negative width crops
    for k, p, d, op in zip(reversed(weight.shape[2:]), reversed(padding), reversed(dilation),
                           reversed(output_padding)):
        edge = d * (k - 1) - p
        widths += [edge, edge + op]
    spatial = [n + widths[2 * i] + widths[2 * i + 1]
               for i, n in enumerate(reversed(x.shape[-3:]))][::-1]
    if any(n - d * (k - 1) < 1 for n, d, k in zip(spatial, dilation, weight.shape[2:])):
        sizes = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
                 zip(input.shape[-3:], stride, padding, dilation, weight.shape[2:],
                     output_padding)]
        raise RuntimeError(f"Given input size per channel: "
                           f"({' x '.join(map(str, input.shape[-3:]))}). Calculated output "
                           f"size per channel: ({' x '.join(map(str, sizes))}). Output size "
                           f"is too small")
    x = F.pad(x, tuple(widths))
    return conv3d(x, _flipped_swapped(weight, groups), bias, 1, 0, dilation, groups)


# --- adaptive average pooling ------------------------------------------------------------

def _window_matrix(size, out):
    """[out, size] averaging weights: cell i covers [floor(i*n/o), ceil((i+1)*n/o)), as
    torch's adaptive pooling picks its windows."""
    m = np.zeros((out, size))
    for i in range(out):
        start = (i * size) // out
        end = -(-((i + 1) * size) // out)
        m[i, start:end] = 1.0 / (end - start)
    return m


def _output_size(input, output_size):
    if isinstance(output_size, int) or output_size is None:
        output_size = (output_size,) * 3
    output_size = tuple(output_size)
    if len(output_size) != 3:
        raise RuntimeError(f"adaptive_avg_pool3d: output_size must be 3, but got "
                           f"{len(output_size)}")
    # None keeps the input's size in that dim, as torch
    return tuple(n if o is None else o for n, o in zip(input.shape[-3:], output_size))


def adaptive_avg_pool3d(input, output_size):
    """Average of input [N, C, D, H, W] (or [C, D, H, W]) over adaptive windows, giving
    output_size (an int, or a triple whose None entries keep the input's size)."""
    F._tensor("adaptive_avg_pool3d", "input", input)
    if input.ndim not in (4, 5):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected 4D or 5D tensor, but got "
                           f"{list(input.shape)}")
    if any(n == 0 for n in input.shape[-3:]):
        raise RuntimeError(f"adaptive_avg_pool3d(): Expected input to have non-zero size for "
                           f"non-batch dimensions, but input has sizes {list(input.shape)} "
                           f"with dimension {list(input.shape).index(0)} being empty")
    sizes = _output_size(input, output_size)
    if any(o < 0 for o in sizes):
        raise RuntimeError(f"adaptive_avg_pool3d: elements of output_size must be greater "
                           f"than or equal to 0 but received {list(sizes)}")
    np_dtype = np.float32 if input.dtype == float32 else np.float64
    x = input
    # each dim in turn: move it last, multiply by its window matrix, move it back
    for dim, out in zip((-3, -2, -1), sizes):
        m = tensor(_window_matrix(x.shape[dim], out).T.astype(np_dtype))
        x = (x.movedim(dim, -1) @ m).movedim(-1, dim)
    return x
