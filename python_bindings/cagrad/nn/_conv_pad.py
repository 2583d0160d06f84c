"""conv1d (through conv2d on a height-1 image) and pad, for nn.functional.

conv1d adds a unit height dim to input and weight and calls conv2d with stride, padding
and dilation (1, s): the C convolution and its backward do the work. pad builds its
output from narrow (cropping) and cat (padding), so it is differentiable like them.
"""

import operator

from .. import _functions
from .._creation import full, tensor
from .._dtype import int64
from . import functional as F

__all__ = ["conv1d", "pad"]


def _single(name, value):
    """An int or a one-int sequence as an int (conv1d's stride/padding/dilation)."""
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"conv1d(): argument '{name}' must be an int or a tuple of ints, not "
                        f"{type(value).__name__}")
    if isinstance(value, int):
        return value
    if len(value) != 1 or not isinstance(value[0], int) or isinstance(value[0], bool):
        raise RuntimeError(f"expected {name} to be a single integer value or a list of 1 "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(value)}")
    return value[0]


def conv1d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-D cross-correlation of input [N, C, L] (or [C, L]) with weight
    [out_channels, C/groups, k]; padding may be an int, 'valid' or 'same'."""
    F._tensor("conv1d", "input", input)
    F._tensor("conv1d", "weight", weight)
    if weight.ndim != 3:
        raise RuntimeError(f"Expected 3-dimensional weight for 3-dimensional input, but got "
                           f"weight of size {list(weight.shape)} instead")
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2D (unbatched) or 3D (batched) input to conv1d, but got "
                           f"input of size: {list(input.shape)}")
    if not isinstance(padding, str):
        padding = (0, _single("padding", padding))
    # the height dim goes just before the length: [N, C, 1, L], [O, C/g, 1, k]
    out = F.conv2d(input.unsqueeze(-2), weight.unsqueeze(-2), bias,
                   (1, _single("stride", stride)), padding, (1, _single("dilation", dilation)),
                   groups)
    return out.squeeze(-2)


def _pad_widths(pad, ndim):
    """[(dim, before, after)] from pad's flat (last-dim-first) pairs."""
    if isinstance(pad, int) or not hasattr(pad, "__len__"):
        raise TypeError(f"pad(): argument 'pad' must be tuple of ints, not "
                        f"{type(pad).__name__}")
    pad = [operator.index(p) for p in pad]
    if len(pad) % 2:
        raise RuntimeError("Padding length must be divisible by 2")
    if len(pad) // 2 > ndim:
        raise RuntimeError("Padding length should be less than or equal to two times the "
                           "input dimension but got padding length "
                           f"{len(pad)} and input of dimension {ndim}")
    return [(ndim - 1 - i, pad[2 * i], pad[2 * i + 1]) for i in range(len(pad) // 2)]


def pad(input, pad, mode="constant", value=None):
    """Pads (or, with negative widths, crops) the last len(pad)//2 dims; pad lists
    (before, after) for the last dim first. Modes: 'constant' (value, default 0), and
    'reflect', 'replicate', 'circular' on the last 1-3 dims, as PyTorch."""
    F._tensor("pad", "input", input)
    widths = _pad_widths(pad, input.ndim)
    if mode == "constant":
        fill = 0.0 if value is None else value
        for dim, before, after in widths:
            input = _pad_dim(input, dim, before, after, fill)
        return input
    if mode not in _INDEX_MAPS:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None:
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    _check_non_constant(input, len(widths))
    for dim, before, after in widths:
        input = _INDEX_MAPS[mode](input, dim, before, after)
    return input


def _check_non_constant(input, pairs):
    if pairs > 3 or input.ndim not in (pairs + 1, pairs + 2):
        raise NotImplementedError(
            f"Padding size {2 * pairs} is not supported for {input.ndim}D input tensor.\n"
            "Supported combinations for non-constant padding:\n"
            "  - 2D or 3D input: padding size = 2 (pads last dimension)\n"
            "  - 3D or 4D input: padding size = 4 (pads last 2 dimensions)\n"
            "  - 4D or 5D input: padding size = 6 (pads last 3 dimensions)")


def _gather(t, dim, positions):
    # output position i reads input entry positions[i]: index_select is differentiable
    return t.index_select(dim, tensor(positions, dtype=int64))


def _reflect(t, dim, before, after):
    """Mirror at the edges, not repeating them; negative widths crop the result."""
    n = t.shape[dim]
    if before >= n or after >= n:
        raise RuntimeError(f"Argument #4: Padding size should be less than the corresponding "
                           f"input dimension, but got: padding ({before}, {after}) at "
                           f"dimension {dim} of input {list(t.shape)}")
    return _gather(t, dim, [abs(j) if j < n else 2 * (n - 1) - j
                            for j in range(-before, n + after)])


def _replicate(t, dim, before, after):
    """Repeat the edge entries; negative widths crop."""
    n = t.shape[dim]
    return _gather(t, dim, [min(max(j, 0), n - 1) for j in range(-before, n + after)])


def _circular(t, dim, before, after):
    """Wrap around (after cropping any negative widths), at most once."""
    start, stop = max(-before, 0), t.shape[dim] - max(-after, 0)
    before, after = max(before, 0), max(after, 0)
    n = stop - start
    if before > n or after > n:
        raise RuntimeError("Padding value causes wrapping around more than once.")
    return _gather(t, dim, [start + j % n for j in range(-before, n + after)])


_INDEX_MAPS = {"reflect": _reflect, "replicate": _replicate, "circular": _circular}


def _pad_dim(t, dim, before, after, fill):
    size = t.shape[dim]
    # crop first (negative widths), then add the constant blocks
    start, stop = max(-before, 0), size - max(-after, 0)
    if stop < start:  # cropped away more than the dim holds (PyTorch's message)
        raise RuntimeError("narrow(): length must be non-negative.")
    if start or stop != size:
        t = t.narrow(dim, start, stop - start)
    parts = []
    for width in (before, after):
        shape = list(t.shape)
        shape[dim] = max(width, 0)
        parts.append(full(shape, fill, dtype=t.dtype) if width > 0 else None)
    pieces = [p for p in (parts[0], t, parts[1]) if p is not None]
    return pieces[0] if len(pieces) == 1 else _functions.cat(pieces, dim)

