"""one_hot, pixel_shuffle / pixel_unshuffle and unfold / fold, for nn.functional.

All are composites of cagrad's differentiable ops: one_hot compares against an arange;
the pixel shuffles are a reshape, a permute and a reshape; unfold (im2col) is ONE
index_select over the flattened, zero-padded image (the positions every block reads),
and fold (col2im), its adjoint, is one index_add of the columns into a zero image at the
same positions, so their gradients are each other.
"""

import math

import numpy as np

from .._creation import arange, zeros
from .._creation import tensor as _as_tensor
from .._dtype import int64
from . import functional as F

__all__ = ["one_hot", "pixel_shuffle", "pixel_unshuffle", "unfold", "fold"]


def one_hot(tensor, num_classes=-1):
    """int64 [*, num_classes]: 1 at each index's class, 0 elsewhere (num_classes=-1: one
    more than the largest index)."""
    F._tensor("one_hot", "tensor", tensor)
    if tensor.dtype != int64:
        raise RuntimeError("one_hot is only applicable to index tensor of type LongTensor.")
    if num_classes == -1:
        if tensor.numel() == 0:
            raise RuntimeError("Can not infer total number of classes from empty tensor.")
        num_classes = int(tensor.max().item()) + 1
    if tensor.numel() > 0:
        if int(tensor.min().item()) < 0:
            raise RuntimeError("Class values must be non-negative.")
        if int(tensor.max().item()) >= num_classes:
            raise RuntimeError("Class values must be smaller than num_classes.")
    elif num_classes < 0:
        raise RuntimeError("Class values must be smaller than num_classes.")
    return tensor.unsqueeze(-1).eq(arange(num_classes, dtype=int64)).long()


# --- pixel shuffle -------------------------------------------------------------------------

def _check_factor(fn, name, factor, input):
    F._tensor(fn, "input", input)
    if input.ndim < 3:
        raise RuntimeError(f"{fn} expects input to have at least 3 dimensions, but got input "
                           f"with {input.ndim} dimension(s)")
    if factor <= 0:
        raise RuntimeError(f"{fn} expects a positive {name}, but got {factor}")


def pixel_shuffle(input, upscale_factor):
    """[*, C*r*r, H, W] -> [*, C, H*r, W*r]: each channel block of r*r fills an r x r tile."""
    r = upscale_factor
    _check_factor("pixel_shuffle", "upscale_factor", r, input)
    *batch, channels, height, width = input.shape
    if channels % (r * r):
        raise RuntimeError(f"pixel_shuffle expects its input's 'channel' dimension to be "
                           f"divisible by the square of upscale_factor, but input.size(-3)="
                           f"{channels} is not divisible by {r * r}")
    lead = len(batch)
    x = input.reshape(*batch, channels // (r * r), r, r, height, width)
    # [.., C, r_h, r_w, H, W] -> [.., C, H, r_h, W, r_w]
    order = list(range(lead)) + [lead + i for i in (0, 3, 1, 4, 2)]
    return x.permute(*order).reshape(*batch, channels // (r * r), height * r, width * r)


def pixel_unshuffle(input, downscale_factor):
    """The inverse of pixel_shuffle: [*, C, H*r, W*r] -> [*, C*r*r, H, W]."""
    r = downscale_factor
    _check_factor("pixel_unshuffle", "downscale_factor", r, input)
    *batch, channels, height, width = input.shape
    for axis, size in (("height", height), ("width", width)):
        if size % r:
            dim = -2 if axis == "height" else -1
            raise RuntimeError(f"pixel_unshuffle expects {axis} to be divisible by "
                               f"downscale_factor, but input.size({dim})={size} is not "
                               f"divisible by {r}")
    lead = len(batch)
    x = input.reshape(*batch, channels, height // r, r, width // r, r)
    # [.., C, H, r_h, W, r_w] -> [.., C, r_h, r_w, H, W]
    order = list(range(lead)) + [lead + i for i in (0, 2, 4, 1, 3)]
    return x.permute(*order).reshape(*batch, channels * r * r, height // r, width // r)


# --- unfold / fold ---------------------------------------------------------------------------

def _pair(fn, name, value):
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"{fn}(): argument '{name}' must be an int or a tuple of ints, not "
                        f"{type(value).__name__}")
    pair = (value, value) if isinstance(value, int) else tuple(value)
    if len(pair) != 2:
        raise RuntimeError(f"{fn}(): {name} must be an int or a pair of ints, got {value!r}")
    return pair


def _blocks(spatial, kernel, dilation, padding, stride):
    """The number of sliding blocks along each spatial dim."""
    return tuple((size + 2 * p - d * (k - 1) - 1) // s + 1
                 for size, k, d, p, s in zip(spatial, kernel, dilation, padding, stride))


def _block_positions(padded_width, kernel, dilation, stride, blocks):
    """int64 [kh*kw*bh*bw]: the flat position in the padded image that kernel tap (i, j) of
    block (y, x) reads, ordered (i, j, y, x) as the columns of im2col."""
    tap_rows = np.arange(kernel[0])[:, None, None, None] * dilation[0]
    tap_cols = np.arange(kernel[1])[None, :, None, None] * dilation[1]
    block_rows = np.arange(blocks[0])[None, None, :, None] * stride[0]
    block_cols = np.arange(blocks[1])[None, None, None, :] * stride[1]
    flat = (tap_rows + block_rows) * padded_width + tap_cols + block_cols
    return _as_tensor(flat.reshape(-1), dtype=int64)


def _fold_args(fn, kernel_size, dilation, padding, stride):
    return (_pair(fn, "kernel_size", kernel_size), _pair(fn, "dilation", dilation),
            _pair(fn, "padding", padding), _pair(fn, "stride", stride))


def unfold(input, kernel_size, dilation=1, padding=0, stride=1):
    """im2col: [N, C, H, W] (or [C, H, W]) -> [N, C*kh*kw, L], one column per sliding
    block, its rows ordered (channel, kernel row, kernel column)."""
    F._tensor("unfold", "input", input)
    kernel, dilation, padding, stride = _fold_args("unfold", kernel_size, dilation, padding,
                                                   stride)
    if input.ndim not in (3, 4):
        raise NotImplementedError(f"Input Error: Only 3D or 4D input Tensors are supported "
                                  f"(got {input.ndim}D)")
    spatial = tuple(input.shape[-2:])
    blocks = _blocks(spatial, kernel, dilation, padding, stride)
    if min(blocks) < 1:
        raise RuntimeError(f"Given input with spatial size {spatial}, kernel_size={kernel}, "
                           f"dilation={dilation}, padding={padding}, calculated shape of the "
                           f"array of sliding blocks as {blocks}, but its components must be "
                           f"at least one.")
    padded = F.pad(input, (padding[1], padding[1], padding[0], padding[0]))
    flat = padded.flatten(-2)
    positions = _block_positions(padded.shape[-1], kernel, dilation, stride, blocks)
    columns = flat.index_select(-1, positions)  # [.., C, kh*kw*bh*bw]
    lead = tuple(input.shape[:-3])
    return columns.reshape(*lead, input.shape[-3] * math.prod(kernel), math.prod(blocks))


def fold(input, output_size, kernel_size, dilation=1, padding=0, stride=1):
    """col2im, unfold's adjoint: [N, C*kh*kw, L] (or [C*kh*kw, L]) -> [N, C, H, W], adding
    up the entries that overlapping blocks put at the same pixel."""
    F._tensor("fold", "input", input)
    output_size = _pair("fold", "output_size", output_size)
    kernel, dilation, padding, stride = _fold_args("fold", kernel_size, dilation, padding,
                                                   stride)
    if input.ndim not in (2, 3):
        raise NotImplementedError(f"Input Error: Only unbatched (2D) or batched (3D) input "
                                  f"Tensors are supported (got {input.ndim}D)")
    taps = math.prod(kernel)
    if input.shape[-2] % taps:
        raise RuntimeError(f"Expected size of input's dimension {input.ndim - 2} to be "
                           f"divisible by the product of kernel_size, but got input.size("
                           f"{input.ndim - 2})={input.shape[-2]} and kernel_size={kernel}.")
    blocks = _blocks(output_size, kernel, dilation, padding, stride)
    if input.shape[-1] != math.prod(blocks):
        raise RuntimeError(f"Given output_size={output_size}, kernel_size={kernel}, "
                           f"dilation={dilation}, padding={padding}, stride={stride}, expected "
                           f"size of input's dimension {input.ndim - 1} to match the calculated "
                           f"number of sliding blocks {blocks[0]} * {blocks[1]} = "
                           f"{math.prod(blocks)}, but got input.size({input.ndim - 1})="
                           f"{input.shape[-1]}.")
    lead = tuple(input.shape[:-2])
    channels = input.shape[-2] // taps
    padded_shape = (output_size[0] + 2 * padding[0], output_size[1] + 2 * padding[1])
    positions = _block_positions(padded_shape[1], kernel, dilation, stride, blocks)
    columns = input.reshape(*lead, channels, taps * input.shape[-1])
    image = zeros(*lead, channels, math.prod(padded_shape), dtype=input.dtype)
    image = image.index_add(-1, positions, columns).unflatten(-1, padded_shape)
    return F.pad(image, (-padding[1], -padding[1], -padding[0], -padding[0]))
