"""conv_transpose1d / conv_transpose2d as a conv2d, for nn.functional.

A transposed convolution (the gradient of a convolution with respect to its input) equals
an ordinary convolution of the input with zeros inserted between its entries (stride - 1
per gap), zero-padded by dilation*(k-1) - padding on each side (a negative width crops)
plus output_padding at the end, using the weight flipped in space and with its in/out
channels swapped per group. Every step (cat, reshape, pad, flip, conv2d) is
differentiable, so gradients flow to input, weight and bias.
"""

from .. import _functions
from .._creation import zeros
from . import functional as F
from ._conv_pad import _single

__all__ = ["conv_transpose1d", "conv_transpose2d"]


def _spread(x, dim, stride):
    """x with stride - 1 zeros between consecutive entries along dim (a negative dim)."""
    if stride == 1 or x.shape[dim] == 0:
        return x
    axis = dim + x.ndim
    length = x.shape[axis]
    gaps = list(x.shape)
    gaps.insert(axis + 1, stride - 1)
    # [.., L, ..] -> [.., L, 1 + (s-1), ..] -> [.., L*s, ..] -> its first (L-1)*s+1
    interleaved = _functions.cat([x.unsqueeze(axis + 1), zeros(*gaps, dtype=x.dtype)],
                                 axis + 1)
    return interleaved.flatten(axis, axis + 1).narrow(axis, 0, (length - 1) * stride + 1)


def _flipped_swapped(weight, groups):
    """[in, out/g, *k] -> [out, in/g, *k] (per group), flipped in every spatial dim."""
    in_channels, out_per_group, *kernel = weight.shape
    w = weight.reshape(groups, in_channels // groups, out_per_group, *kernel)
    w = w.transpose(1, 2).reshape(groups * out_per_group, in_channels // groups, *kernel)
    return w.flip(tuple(range(2, 2 + len(kernel))))


def _check_channels(input, weight, groups, rank):
    """groups and channel counts against the weight (shapes as the caller passed them)."""
    if groups <= 0:
        raise RuntimeError("non-positive groups is not supported")
    if weight.shape[0] < groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be at least {groups} at "
                           f"dimension 0, but got weight of size {list(weight.shape)} instead")
    if weight.shape[0] % groups:
        raise RuntimeError(f"Given groups={groups}, expected weight to be divisible by "
                           f"{groups} at dimension 0, but got weight of size "
                           f"{list(weight.shape)} instead")
    channels = input.shape[-rank - 1]
    if channels != weight.shape[0]:
        raise RuntimeError(f"Given transposed=1, weight of size {list(weight.shape)}, expected "
                           f"input{list(input.shape)} to have {weight.shape[0]} channels, but "
                           f"got {channels} channels instead")


def _check_output_padding(stride, dilation, output_padding):
    for op, s, d in zip(output_padding, stride, dilation):
        if op >= s and op >= d:
            names = ("height", "width") if len(stride) == 2 else ("width",)
            parts = [f"output_padding_{n}: {v}" for n, v in zip(names, output_padding)]
            parts += [f"stride_{n}: {v}" for n, v in zip(names, stride)]
            parts += [f"dilation_{n}: {v}" for n, v in zip(names, dilation)]
            raise RuntimeError("output padding must be smaller than either stride or "
                               "dilation, but got " + " ".join(parts))


def _transposed_2d(input, weight, bias, stride, padding, output_padding, groups, dilation):
    """The shared core on [N, C, H, W] (or [C, H, W]) input and a 4-D weight."""
    _check_channels(input, weight, groups, 2)
    _check_output_padding(stride, dilation, output_padding)
    kernel = weight.shape[2:]
    x = _spread(_spread(input, -2, stride[0]), -1, stride[1])
    widths = []
    for k, p, d, op in zip(reversed(kernel), reversed(padding), reversed(dilation),
                           reversed(output_padding)):
        edge = d * (k - 1) - p
        widths += [edge, edge + op]
    spatial = [x.shape[-2] + widths[2] + widths[3], x.shape[-1] + widths[0] + widths[1]]
    if any(n - d * (k - 1) < 1 for n, d, k in zip(spatial, dilation, kernel)):
        raise RuntimeError(_too_small(input, stride, padding, output_padding, dilation,
                                      kernel))
    x = F.pad(x, tuple(widths))
    return F.conv2d(x, _flipped_swapped(weight, groups), bias, 1, 0, dilation, groups)


def _too_small(input, stride, padding, output_padding, dilation, kernel):
    spatial = input.shape[-len(kernel):]
    sizes = [(n - 1) * s - 2 * p + d * (k - 1) + op + 1 for n, s, p, d, k, op in
             zip(spatial, stride, padding, dilation, kernel, output_padding)]
    return (f"Given input size per channel: ({' x '.join(map(str, spatial))}). Calculated "
            f"output size per channel: ({' x '.join(map(str, sizes))}). Output size is too "
            f"small")


def _groups(fn, groups):
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"{fn}(): argument 'groups' must be int, not {type(groups).__name__}")
    return groups


def _check_args(fn, input, weight, bias, rank):
    """PyTorch's checks of a rank-d transposed convolution's tensors and their dims."""
    F._tensor(fn, "input", input)
    F._tensor(fn, "weight", weight)
    F._optional_tensor(fn, "bias", bias)
    if weight.ndim != rank + 2:
        raise RuntimeError(f"Expected {rank + 2}-dimensional weight for {fn}, but got "
                           f"weight of size {list(weight.shape)} instead")
    if input.ndim not in (rank + 1, rank + 2):
        raise RuntimeError(f"Expected {rank + 1}D (unbatched) or {rank + 2}D (batched) input "
                           f"to {fn}, but got input of size: {list(input.shape)}")


def conv_transpose2d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 2-D convolution of input [N, C_in, H, W] (or [C_in, H, W]) with weight
    [C_in, C_out/groups, kH, kW]: output size (H-1)*stride - 2*padding + dilation*(kH-1) +
    output_padding + 1 per spatial dim."""
    _check_args("conv_transpose2d", input, weight, bias, 2)
    return _transposed_2d(input, weight, bias, F._pair("stride", stride),
                          F._pair("padding", padding), F._pair("output_padding",
                                                               output_padding),
                          _groups("conv_transpose2d", groups), F._pair("dilation", dilation))


def conv_transpose1d(input, weight, bias=None, stride=1, padding=0, output_padding=0,
                     groups=1, dilation=1):
    """Transposed 1-D convolution of input [N, C_in, L] (or [C_in, L]) with weight
    [C_in, C_out/groups, k] (a height-1 conv_transpose2d)."""
    _check_args("conv_transpose1d", input, weight, bias, 1)
    groups = _groups("conv_transpose1d", groups)
    _check_channels(input, weight, groups, 1)  # (PyTorch names the 1-D shapes here)
    out = _transposed_2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                         (1, _single("stride", stride)), (0, _single("padding", padding)),
                         (0, _single("output_padding", output_padding)), groups,
                         (1, _single("dilation", dilation)))
    return out.squeeze(-2)
