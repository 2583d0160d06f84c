"""conv1d (through conv2d on a height-1 image) and pad, for nn.functional.

conv1d adds a unit height dim to input and weight and calls conv2d with stride, padding
and dilation (1, s): the C convolution and its backward do the work. pad builds its
output from narrow (cropping) and cat (padding), so it is differentiable like them.
"""

import operator

from .. import _C, _functions
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
        raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, not "
                        f"{type(pad).__name__}")
    # PyTorch's argument parser judges the first element strictly (no bool) and unpacks
    # the rest as integers (bools pass), with two different messages
    if len(pad) and (isinstance(pad[0], (bool, float)) or not hasattr(pad[0], "__index__")):
        raise TypeError(f"pad(): argument 'pad' (position 2) must be tuple of ints, but "
                        f"found element of type {type(pad[0]).__name__} at pos 0")
    for i, p in enumerate(pad):
        if isinstance(p, float) or not hasattr(p, "__index__"):
            raise TypeError(f"pad(): argument 'pad' failed to unpack the object at pos {i + 1} "
                            f"with error \"type must be tuple of ints,but got "
                            f"{type(p).__name__}\"")
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
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"pad(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    widths = _pad_widths(pad, input.ndim)
    if mode == "constant":
        fill = 0.0 if value is None else value
        for dim, before, after in widths:
            input = _pad_dim(input, dim, before, after, fill)
        return input
    if mode not in _INDEX_MAPS:
        raise NotImplementedError(f"Unrecognised padding mode {mode}")
    if value is not None and value != 0:  # PyTorch lets a zero value through
        raise RuntimeError(f'Padding mode "{mode}" doesn\'t take in value argument')
    _check_non_constant(input, len(widths))
    if mode != "circular":
        _check_kernel_sizes(input, widths, mode)
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


def _check_kernel_sizes(input, widths, mode):
    """The checks PyTorch's reflection / replication kernels make before padding, in their
    order and words: no empty non-batch dim, reflect widths below the dim's size (judged
    on the input, for every dim, before any is padded), and a non-empty output (all
    padded dims empty is an error; only some is allowed, as in PyTorch)."""
    pairs, shape = len(widths), list(input.shape)
    rest = shape[1:] if input.ndim == pairs + 2 else shape
    if 0 in rest:
        raise RuntimeError(f"Expected {pairs + 1}D or {pairs + 2}D (batch mode) tensor with "
                           f"possibly 0 batch size and other non-zero dimensions for input, "
                           f"but got: {shape}")
    if mode == "reflect":
        for i, (dim, before, after) in enumerate(widths):
            if before >= shape[dim] or after >= shape[dim]:
                raise RuntimeError(f"Argument #{4 + 2 * i}: Padding size should be less "
                                   f"than the corresponding input dimension, but got: "
                                   f"padding ({before}, {after}) at dimension {dim} of "
                                   f"input {shape}")
    # (input size, output size) of the padded dims, outermost first (D, H, W)
    sizes = [(shape[dim], shape[dim] + before + after) for dim, before, after in reversed(widths)]
    if all(out < 1 for _, out in sizes):
        raise RuntimeError(_too_small(sizes, mode))


def _too_small(sizes, mode):
    """PyTorch's message for an empty output (its spacing differs between kernels)."""
    w, ow = sizes[-1]
    if len(sizes) == 1:
        return f"input (W: {w}) is too small. Calculated output W: {ow}"
    h, oh = sizes[-2]
    if len(sizes) == 2:
        pad = " " if mode == "replicate" else ""
        return f"input (H: {h}, W: {w}{pad}) is too small. Calculated output H: {oh} W: {ow}"
    d, od = sizes[0]
    return (f"input (D: {d} H: {h}, W: {w}) is too small. Calculated output D: {od} H: {oh} "
            f"W: {ow}")


def _gather(t, dim, positions):
    # output position i reads input entry positions[i]: index_select is differentiable
    return t.index_select(dim, tensor(positions, dtype=int64))


def _reflect(t, dim, before, after):
    """Mirror at the edges, not repeating them; negative widths crop the result (widths
    are checked by _check_kernel_sizes)."""
    n = t.shape[dim]
    return _gather(t, dim, [abs(j) if j < n else 2 * (n - 1) - j
                            for j in range(-before, n + after)])


def _replicate(t, dim, before, after):
    """Repeat the edge entries; negative widths crop."""
    n = t.shape[dim]
    return _gather(t, dim, [min(max(j, 0), n - 1) for j in range(-before, n + after)])


def _circular(t, dim, before, after):
    """Wrap around (after cropping any negative widths), at most once."""
    size = t.shape[dim]
    if before > size or after > size:
        raise RuntimeError("Padding value causes wrapping around more than once.")
    start, stop = max(-before, 0), size - max(-after, 0)
    before, after = max(before, 0), max(after, 0)
    n = stop - start
    if n < 0:
        raise RuntimeError("Negative padding value is resulting in an empty dimension")
    if before > n or after > n:
        # PyTorch would copy from not-yet-written output here (a crop on one side and a
        # wider wrap on the other); cagrad refuses rather than return garbage
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

