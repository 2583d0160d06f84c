"""max_pool3d, avg_pool3d, adaptive_max_pool1d/2d and max_unpool1d/2d as composites.

A pooling window is a row of a [positions, taps] table of flat input indices (numpy,
built once per call from the sizes); index_select gathers every window at once from the
flattened input with one extra sentinel element for the taps that fall in the padding
(-inf for max, 0 for sums). Max then takes the first largest tap of each row, as torch's
kernels do (row-major scan, strict >), so ties and returned indices match; its gradient
goes to that one element. Averages divide by torch's divisor per position.
"""

import math

import numpy as np

from .. import _functions
from .._creation import full, tensor, zeros
from .pooling import _input, _int, _pair

__all__ = ["max_pool3d", "avg_pool3d", "max_pool3d_with_indices", "adaptive_max_pool1d",
           "adaptive_max_pool2d", "adaptive_max_pool1d_with_indices",
           "adaptive_max_pool2d_with_indices", "max_unpool1d", "max_unpool2d"]


# --- window tables -------------------------------------------------------------------------

def _table(sizes, taps_per_dim):
    """(flat indices [P, K], valid [P, K]) from per-dim tap coordinates [out_d, k_d] and
    their validity; positions and taps both in row-major order. Invalid taps (padding,
    or past an adaptive window's end) hold the sentinel index prod(sizes)."""
    n = len(sizes)
    strides = [int(np.prod(sizes[d + 1:])) for d in range(n)]
    grid = [c.shape[0] for c, _ in taps_per_dim] + [c.shape[1] for c, _ in taps_per_dim]
    flat = np.zeros(grid, dtype=np.int64)
    valid = np.ones(grid, dtype=bool)
    for d, (coords, ok) in enumerate(taps_per_dim):
        shape = [1] * (2 * n)
        shape[d], shape[n + d] = coords.shape
        flat = flat + coords.reshape(shape) * strides[d]
        valid = valid & ok.reshape(shape)
    positions = int(np.prod(grid[:n]))
    flat, valid = flat.reshape(positions, -1), valid.reshape(positions, -1)
    return np.where(valid, flat, int(np.prod(sizes))), valid


def _strided_taps(length, out, kernel, stride, padding, dilation):
    coords = (np.arange(out)[:, None] * stride - padding + np.arange(kernel)[None, :] * dilation)
    return coords, (coords >= 0) & (coords < length)


def _adaptive_taps(length, out):
    starts = [math.floor(o * length / out) for o in range(out)]
    ends = [math.ceil((o + 1) * length / out) for o in range(out)]
    width = max(e - s for s, e in zip(starts, ends))
    coords = np.array(starts)[:, None] + np.arange(width)[None, :]
    return coords, coords < np.array(ends)[:, None]


def _gather(x, index, fill):
    """x [B, C, *spatial] -> [B, C, P, K]: x's flat elements at index, fill at the
    sentinel index (one past the end)."""
    b, c = x.shape[:2]
    flat = x.reshape(b, c, -1)
    flat = _functions.cat([flat, full((b, c, 1), fill, dtype=x.dtype)], 2)
    picked = flat.index_select(2, tensor(index.reshape(-1), dtype=_int64()))
    return picked.reshape(b, c, *index.shape)


def _int64():
    from .._dtype import int64
    return int64


def _window_max(x, index):
    """(max of each window [B, C, P], flat input index of the first max [B, C, P])."""
    values, arg = _gather(x, index, float("-inf")).max(-1)
    table = tensor(index, dtype=_int64()).reshape(1, 1, *index.shape).expand(
        *arg.shape, index.shape[1])
    return values, table.gather(3, arg.unsqueeze(-1)).squeeze(-1)


def _batched(fn, input, spatial):
    """input as [B, C, *spatial dims] and whether it had the batch dim."""
    _input(fn, input)
    if input.ndim == spatial + 2:
        return input, True
    if input.ndim == spatial + 1:
        return input.unsqueeze(0), False
    raise RuntimeError(f"{fn}: Expected {spatial + 1}D or {spatial + 2}D (batch mode) tensor "
                       f"for input, but got: {list(input.shape)}")


def _restore(out, batched):
    return out if batched else out.squeeze(0)


# --- 3-d pooling ---------------------------------------------------------------------------

def _pool_out(fn, length, kernel, stride, padding, dilation, ceil_mode):
    span = length + 2 * padding - dilation * (kernel - 1) - 1
    out = (-(-span // stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= length + padding:
        out -= 1
    return out


def _pool_args(fn, input, kernel_size, stride, padding, dilation, ceil_mode):
    kernel = _pair(fn, "kernel_size", kernel_size, 3, "either be a single int, or")
    stride = kernel if stride is None or stride == [] or stride == () else _pair(
        fn, "stride", stride, 3, "either be omitted, a single int, or")
    padding = _pair(fn, "padding", padding, 3, "either be a single int, or")
    dilation = _pair(fn, "dilation", dilation, 3, "either be a single int, or")
    x, batched = _batched(fn, input, 3)
    sizes = tuple(x.shape[2:])
    for k, p, d in zip(kernel, padding, dilation):
        if p > (d * (k - 1) + 1) // 2:
            raise RuntimeError(f"pad should be at most half of effective kernel size, but got "
                               f"pad={p}, kernel_size={k} and dilation={d}")
    outs = tuple(_pool_out(fn, n, k, s, p, d, ceil_mode)
                 for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation))
    if min(outs) < 1:
        raise RuntimeError(f"Given input size: ({'x'.join(map(str, x.shape[1:]))}). "
                           f"Calculated output size: ({x.shape[1]}x{'x'.join(map(str, outs))}). "
                           f"Output size is too small")
    return x, batched, sizes, kernel, stride, padding, dilation, outs


def max_pool3d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    x, batched, sizes, kernel, stride, padding, dilation, outs = _pool_args(
        "max_pool3d", input, kernel_size, stride, padding, dilation, ceil_mode)
    taps = [_strided_taps(*args) for args in zip(sizes, outs, kernel, stride, padding,
                                                 dilation)]
    values, indices = _window_max(x, _table(sizes, taps)[0])
    shape = (*x.shape[:2], *outs)
    return _restore(values.reshape(shape), batched), _restore(indices.reshape(shape), batched)


def max_pool3d(input, kernel_size, stride=None, padding=0, dilation=1, ceil_mode=False,
               return_indices=False):
    out, indices = max_pool3d_with_indices(input, kernel_size, stride, padding, dilation,
                                           ceil_mode)
    return (out, indices) if return_indices else out


def avg_pool3d(input, kernel_size, stride=None, padding=0, ceil_mode=False,
               count_include_pad=True, divisor_override=None):
    if divisor_override is not None and (not _int(divisor_override) or divisor_override == 0):
        raise RuntimeError("divisor must be not zero")
    x, batched, sizes, kernel, stride, padding, _, outs = _pool_args(
        "avg_pool3d", input, kernel_size, stride, padding, 1, ceil_mode)
    taps, divisors = [], []
    for n, out, k, s, p in zip(sizes, outs, kernel, stride, padding):
        taps.append(_strided_taps(n, out, k, s, p, 1))
        start = np.arange(out) * s - p
        end = np.minimum(start + k, n + p)
        inside = np.minimum(end, n) - np.maximum(start, 0)
        divisors.append(end - start if count_include_pad else inside)
    index = _table(sizes, taps)[0]
    total = _gather(x, index, 0.0).sum(-1)
    if divisor_override:
        out = total / divisor_override
    else:
        grid = np.ix_(*divisors)
        divisor = (grid[0] * grid[1] * grid[2]).reshape(-1).astype(np.float64)
        out = total / tensor(divisor, dtype=x.dtype)
    return _restore(out.reshape(*x.shape[:2], *outs), batched)


# --- adaptive max ----------------------------------------------------------------------------

def _adaptive_sizes(fn, output_size, sizes):
    n = len(sizes)
    size = (output_size,) * n if _int(output_size) or output_size is None else tuple(output_size)
    if len(size) != n or not all(s is None or _int(s) for s in size):
        raise TypeError(f"{fn}(): argument 'output_size' must be an int or a tuple of {n} "
                        f"ints, not {output_size!r}")
    return tuple(sizes[d] if s is None else s for d, s in enumerate(size))


def _adaptive_max(fn, input, output_size, spatial):
    x, batched = _batched(fn, input, spatial)
    sizes = tuple(x.shape[2:])
    outs = _adaptive_sizes(fn, output_size, sizes)
    if min(sizes) == 0 or min(outs) < 0:
        raise RuntimeError(f"{fn}(): Expected input to have non-zero size for non-batch "
                           f"dimensions, but input has sizes {list(input.shape)} with dimension "
                           f"{list(x.shape[2:]).index(0) + (2 if batched else 1)} being empty")
    taps = [_adaptive_taps(n, out) for n, out in zip(sizes, outs)]
    values, indices = _window_max(x, _table(sizes, taps)[0])
    shape = (*x.shape[:2], *outs)
    return _restore(values.reshape(shape), batched), _restore(indices.reshape(shape), batched)


def adaptive_max_pool1d_with_indices(input, output_size, return_indices=True):
    return _adaptive_max("adaptive_max_pool1d", input, output_size, 1)


def adaptive_max_pool2d_with_indices(input, output_size, return_indices=True):
    return _adaptive_max("adaptive_max_pool2d", input, output_size, 2)


def adaptive_max_pool1d(input, output_size, return_indices=False):
    out, indices = adaptive_max_pool1d_with_indices(input, output_size)
    return (out, indices) if return_indices else out


def adaptive_max_pool2d(input, output_size, return_indices=False):
    out, indices = adaptive_max_pool2d_with_indices(input, output_size)
    return (out, indices) if return_indices else out


# --- unpooling -----------------------------------------------------------------------------

def _unpool_size(input, kernel, stride, padding, output_size):
    n = len(kernel)
    default = [(input.shape[-n + d] - 1) * stride[d] + kernel[d] - 2 * padding[d]
               for d in range(n)]
    if output_size is None:
        return default
    if len(output_size) == n + 2:
        output_size = output_size[2:]
    if len(output_size) != n:
        raise ValueError(f"output_size should be a sequence containing {n} or {n + 2} elements, "
                         f"but it has a length of '{len(output_size)}'")
    for d in range(n):
        low, high = default[d] - stride[d], default[d] + stride[d]
        if not low < output_size[d] < high:
            raise ValueError(f'invalid output_size "{output_size}" (dim {d} must be between '
                             f'{low} and {high})')
    return list(output_size)


def _max_unpool(fn, input, indices, kernel_size, stride, padding, output_size, n):
    what = "either be a single int, or"
    kernel = _pair(fn, "kernel_size", kernel_size, n, what)
    stride = kernel if stride is None else _pair(fn, "stride", stride, n, what)
    padding = _pair(fn, "padding", padding, n, what)
    size = _unpool_size(input, kernel, stride, padding, output_size)
    x, batched = _batched(fn, input, n)
    idx = indices if batched else indices.unsqueeze(0)
    b, c = x.shape[:2]
    volume = int(np.prod(size))
    flat_idx = idx.reshape(b, c, -1)
    if flat_idx.numel() and (int(flat_idx.max()) >= volume or int(flat_idx.min()) < 0):
        bad = int(flat_idx.max()) if int(flat_idx.max()) >= volume else int(flat_idx.min())
        raise RuntimeError(f"Found an invalid max index: {bad} (output volumes are of size "
                           f"{'x'.join(map(str, size))})")
    out = zeros(b, c, volume, dtype=x.dtype).scatter(2, flat_idx, x.reshape(b, c, -1))
    return _restore(out.reshape(b, c, *size), batched)


def max_unpool1d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool1d", input, indices, kernel_size, stride, padding,
                       output_size, 1)


def max_unpool2d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    return _max_unpool("max_unpool2d", input, indices, kernel_size, stride, padding,
                       output_size, 2)
