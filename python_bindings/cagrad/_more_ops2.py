"""The long tail of torch's shape, index and counting functions, as composites.

Shape/index helpers (movedim, unflatten, take_along_dim, meshgrid, diff, kron, cross, ...)
are built from differentiable cagrad ops, so autograd (eager and compiled) differentiates
them without a dedicated backward. The counting and searching functions (unique, bincount,
searchsorted, bucketize, histc, ...) have no gradient in PyTorch either: they are computed
exactly with numpy on a detached copy and return int64 counts and indices.
"""

import operator
import warnings

import numpy as np

from . import _C
from . import _functions as F
from ._dtype import float32, float64, int64
from ._more_ops import broadcast_shapes, broadcast_tensors, flip
from ._scatter import _from_numpy as _from_buffer

_TensorBase = _C.TensorBase


def _from_numpy(arr):
    """A tensor copy of a numpy array, 0-d arrays included."""
    arr = np.asarray(arr)
    return _from_buffer(arr).reshape(arr.shape)


def _wrap(dim, ndim):
    """A dim in [-ndim, ndim) as a non-negative int; IndexError like torch otherwise."""
    d = operator.index(dim)
    top = ndim if ndim else 1
    if not -top <= d < top:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-top}, "
                         f"{top - 1}], but got {d})")
    return d + top if d < 0 else d


def _no_out(fname, out):
    if out is not None:
        raise NotImplementedError(f"cagrad's {fname}() does not support out=; use the "
                                  f"returned tensor (see docs/python-api.md)")


def _int_list(value):
    if isinstance(value, (tuple, list)):
        return [operator.index(v) for v in value]
    return [operator.index(value)]


# ------------------------------------------------------------------------ shape helpers
def movedim(input, source, destination):
    if isinstance(source, int) != isinstance(destination, int):
        raise TypeError("movedim() received an invalid combination of arguments: source and "
                        "destination must both be ints or both be tuples of ints")
    ndim = input.dim()
    src = [_wrap(d, ndim) for d in _int_list(source)]
    dst = [_wrap(d, ndim) for d in _int_list(destination)]
    if len(src) != len(dst):
        raise RuntimeError(f"movedim: Invalid source or destination dims: source ({src} dims)"
                           f" should contain the same number of dims as destination ({dst} "
                           f"dims)")
    if len(set(src)) != len(src) or len(set(dst)) != len(dst):
        raise RuntimeError("movedim: repeated dim in `source` or `destination`")
    order = [None] * ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(d for d in range(ndim) if d not in src)
    order = [next(rest) if o is None else o for o in order]
    return F.permute(input, order)


moveaxis = movedim


def unflatten(input, dim, sizes):
    d = _wrap(dim, input.dim())
    sizes = _int_list(sizes)
    if not sizes:
        raise RuntimeError("unflatten: sizes must be non-empty")
    shape = list(input.shape)
    if sizes.count(-1) == 1:
        known = int(np.prod([s for s in sizes if s != -1]))
        sizes[sizes.index(-1)] = shape[d] // known if known else 0
    if int(np.prod(sizes)) != shape[d]:
        raise RuntimeError(f"unflatten: Provided sizes {sizes} don't multiply up to the size "
                           f"of dim {dim} ({shape[d]}) in the input tensor")
    return F.reshape(input, shape[:d] + sizes + shape[d + 1:])


def take_along_dim(input, indices, dim=None):
    if dim is None:
        return F.gather(input.reshape(-1), 0, indices.reshape(-1))
    d = _wrap(dim, input.dim())
    if input.dim() != indices.dim():
        raise RuntimeError(f"torch.take_along_dim(): input and indices should have the same "
                           f"number of dimensions, but got {input.dim()} dimensions for "
                           f"input, and {indices.dim()} dimensions for indices")
    in_shape, ix_shape = list(input.shape), list(indices.shape)
    in_shape[d] = ix_shape[d] = 1
    common = list(broadcast_shapes(in_shape, ix_shape))
    input = input.expand(common[:d] + [input.shape[d]] + common[d + 1:])
    indices = indices.expand(common[:d] + [indices.shape[d]] + common[d + 1:])
    return F.gather(input, d, indices)


def take(input, index):
    count = input.numel()
    flat_index = index.reshape(-1)
    positions = flat_index.detach().numpy()
    if positions.size and (positions.min() < -count or positions.max() >= count):
        bad = positions[(positions < -count) | (positions >= count)][0]
        raise IndexError(f"out of range: tried to access index {bad} on a tensor of "
                         f"{count} elements.")
    wrapped = _from_numpy(np.where(positions < 0, positions + count, positions))
    return F.index_select(input.reshape(-1), 0, wrapped).reshape(index.shape)


def argwhere(input):
    """The index of each nonzero element, one row each (a 0-d input gives shape (k, 0))."""
    return _from_numpy(np.argwhere(_values(input)).astype(np.int64))


def meshgrid(*tensors, indexing=None):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        tensors = tuple(tensors[0])
    if indexing is None:
        warnings.warn("torch.meshgrid: in an upcoming release, it will be required to pass "
                      "the indexing argument.", UserWarning, stacklevel=2)
        indexing = "ij"
    if indexing not in ("ij", "xy"):
        raise RuntimeError(f"torch.meshgrid: indexing must be one of \"xy\" or \"ij\", but "
                           f"received: {indexing}")
    for t in tensors:
        if t.dim() > 1:
            raise RuntimeError(f"torch.meshgrid: Expected 0D or 1D tensor in the tensor list "
                               f"but got: {t.dim()}D")
    flat = [t.reshape(-1) for t in tensors]
    swap = indexing == "xy" and len(flat) >= 2
    if swap:  # 'xy' is 'ij' with the first two inputs (and outputs) swapped
        flat[0], flat[1] = flat[1], flat[0]
    shape = [t.shape[0] for t in flat]
    grids = []
    for i, t in enumerate(flat):
        lifted = [1] * len(flat)
        lifted[i] = shape[i]
        grids.append(t.reshape(lifted).expand(shape))
    if swap:
        grids[0], grids[1] = grids[1], grids[0]
    return tuple(grids)


def cartesian_prod(*tensors):
    if len(tensors) == 1:
        return tensors[0]
    grids = meshgrid(*tensors, indexing="ij")
    return F.stack([g.reshape(-1) for g in grids], 1)


def _triangle_indices(fname, upper, row, col, offset, dtype, device, layout):
    from ._creation import _check_options
    _check_options(fname, device, layout)
    if dtype is not None and dtype != int64:
        raise NotImplementedError(f"cagrad: {fname} returns int64 only (cagrad has no int32);"
                                  f" see docs/python-api.md")
    if row < 0 or col < 0:
        raise RuntimeError(f"row must be non-negative, got{row}" if row < 0 else
                           f"col must be non-negative, got{col}")
    rows, cols = np.indices((row, col))
    keep = cols - rows >= offset if upper else cols - rows <= offset
    return _from_numpy(np.stack([rows[keep], cols[keep]]).astype(np.int64).reshape(2, -1))


def triu_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _triangle_indices("triu_indices", True, row, col, offset, dtype, device, layout)


def tril_indices(row, col, offset=0, *, dtype=None, device=None, layout=None):
    return _triangle_indices("tril_indices", False, row, col, offset, dtype, device, layout)


def diff(input, n=1, dim=-1, prepend=None, append=None):
    if input.dim() == 0:
        raise RuntimeError("diff expects input to be at least one-dimensional")
    if n < 0:
        raise RuntimeError(f"order must be non-negative but got {n}")
    d = _wrap(dim, input.dim())
    pieces = [p for p in (prepend, input, append) if p is not None]
    result = F.cat(pieces, d) if len(pieces) > 1 else input
    for _ in range(n):
        length = result.shape[d]
        if length == 0:
            break
        result = F.narrow(result, d, 1, length - 1) - F.narrow(result, d, 0, length - 1)
    return result


def kron(input, other):
    ndim = max(input.dim(), other.dim())
    a_shape = [1] * (ndim - input.dim()) + list(input.shape)
    b_shape = [1] * (ndim - other.dim()) + list(other.shape)
    # interleave the dims (a0, b0, a1, b1, ...): the product then folds pairwise
    a = input.reshape([v for s in a_shape for v in (s, 1)])
    b = other.reshape([v for s in b_shape for v in (1, s)])
    return (a * b).reshape([x * y for x, y in zip(a_shape, b_shape)])


def _cross(input, other, dim):
    if input.dim() != other.dim():
        raise RuntimeError("linalg.cross: inputs must have the same number of dimensions.")
    input, other = broadcast_tensors(input, other)
    if dim is None:
        raise RuntimeError("no dimension of size 3 in input")
    d = _wrap(dim, input.dim())
    if input.shape[d] != 3:
        raise RuntimeError(f"linalg.cross: inputs dimension {dim} must have length 3. Got "
                           f"{input.shape[d]} and {other.shape[d]}")
    a = F.unbind(input, d)
    b = F.unbind(other, d)
    parts = [a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0]]
    return F.stack(parts, d)


def cross(input, other, dim=None):
    if dim is None:
        warnings.warn("Using torch.cross without specifying the dim arg is deprecated.\n"
                      "Please either pass the dim explicitly or simply use "
                      "torch.linalg.cross.", UserWarning, stacklevel=2)
        shape = broadcast_shapes(input.shape, other.shape)
        dim = next((i for i, s in enumerate(shape) if s == 3), None)
    return _cross(input, other, dim)


def block_diag(*tensors):
    if not tensors:
        from ._creation import zeros
        return zeros(1, 0)
    blocks = []
    for i, t in enumerate(tensors):
        if t.dim() > 2:
            raise RuntimeError(f"torch.block_diag: Input tensors must have 2 or fewer "
                               f"dimensions. Input {i} has {t.dim()} dimensions")
        blocks.append(t.reshape(1, -1) if t.dim() < 2 else t)
    kinds = {b.dtype for b in blocks}
    dtype = float64 if float64 in kinds else float32 if float32 in kinds else int64
    blocks = [b.to(dtype) for b in blocks]
    total_cols = sum(b.shape[1] for b in blocks)
    from ._creation import zeros
    rows, left = [], 0
    for b in blocks:
        right = total_cols - left - b.shape[1]
        parts = [zeros(b.shape[0], left, dtype=dtype), b, zeros(b.shape[0], right, dtype=dtype)]
        rows.append(F.cat(parts, 1))
        left += b.shape[1]
    return F.cat(rows, 0)


def vander(x, N=None, increasing=False):
    if x.dim() != 1:
        raise RuntimeError("x must be a one-dimensional tensor.")
    count = x.shape[0] if N is None else N
    if count < 0:
        raise RuntimeError("N must be non-negative.")
    if count == 0:
        return x.reshape(-1, 1)[:, 0:0]
    column = x.reshape(-1, 1)
    # powers as running products (x^0 = 1 has zero gradient, even at x = 0)
    powers = [column * 0 + 1]
    for _ in range(count - 1):
        powers.append(powers[-1] * column)
    result = F.cat(powers, 1)
    return result if increasing else flip(result, [1])


def rot90(input, k=1, dims=(0, 1)):
    dims = _int_list(dims)
    if len(dims) != 2:
        raise RuntimeError(f"expected total rotation dims == 2, but got dims = {len(dims)}")
    if input.dim() < 2:
        raise RuntimeError(f"expected total dims >= 2, but got total dims = {input.dim()}")
    d0, d1 = _wrap(dims[0], input.dim()), _wrap(dims[1], input.dim())
    if d0 == d1:
        raise RuntimeError(f"expected rotation dims to be different, but got dim0 = {d0} and "
                           f"dim1 = {d1}")
    k %= 4
    if k == 1:
        return F.transpose(flip(input, [d1]), d0, d1)
    if k == 2:
        return flip(input, [d0, d1])
    if k == 3:
        return flip(F.transpose(input, d0, d1), [d1])
    return input.clone()


def narrow_copy(input, dim, start, length):
    size = input.shape[_wrap(dim, input.dim())]
    if 0 <= start <= size and start + length > size:
        raise RuntimeError(f"start ({start}) + length ({length}) exceeds dimension size "
                           f"({size}).")
    return F.narrow(input, dim, start, length).clone()


# ------------------------------------------------------------------------ counting
def _values(t):
    """A numpy copy of a tensor's values (no gradient: counting has none)."""
    return np.array(t.detach().numpy(), copy=True)


def _unique_axis(values, dim):
    return None if dim is None else _wrap(dim, values.ndim)


def unique(input, sorted=True, return_inverse=False, return_counts=False, dim=None):
    """Sorted distinct values (or slices along dim); sorted=False sorts too, which torch
    allows on CPU."""
    values = _values(input)
    axis = _unique_axis(values, dim)
    found, inverse, counts = np.unique(values, return_inverse=True, return_counts=True,
                                       axis=axis, equal_nan=False)
    if axis is None:
        inverse = inverse.reshape(values.shape)
    return _unique_result(found, inverse.reshape(-1) if axis is not None else inverse, counts,
                          return_inverse, return_counts)


def _unique_result(found, inverse, counts, return_inverse, return_counts):
    out = [_from_numpy(found)]
    if return_inverse:
        out.append(_from_numpy(inverse.astype(np.int64)))
    if return_counts:
        out.append(_from_numpy(counts.astype(np.int64)))
    return out[0] if len(out) == 1 else tuple(out)


def unique_consecutive(input, return_inverse=False, return_counts=False, dim=None):
    values = _values(input)
    axis = _unique_axis(values, dim)
    slices = values.reshape(-1) if axis is None else np.moveaxis(values, axis, 0)
    count = slices.shape[0]
    if count:
        flat = slices.reshape(count, -1)
        starts = np.ones(count, dtype=bool)
        starts[1:] = np.any(flat[1:] != flat[:-1], axis=1)
    else:
        starts = np.zeros(0, dtype=bool)
    found = slices[starts]
    if axis is not None:
        found = np.moveaxis(found, 0, axis)
    inverse = np.cumsum(starts) - 1
    if axis is None:
        inverse = inverse.reshape(values.shape)
    counts = np.diff(np.append(np.flatnonzero(starts), count))
    return _unique_result(found, inverse, counts, return_inverse, return_counts)


def bincount(input, weights=None, minlength=0):
    if input.dim() != 1:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if input.is_floating_point():
        raise NotImplementedError("\"bincount_cpu\" not implemented for "
                           f"'{'Float' if input.dtype.itemsize == 4 else 'Double'}'")
    if minlength < 0:
        raise RuntimeError("minlength should be >= 0")
    values = _values(input)
    if values.size and values.min() < 0:
        raise RuntimeError("bincount only supports 1-d non-negative integral inputs.")
    if weights is None:
        return _from_numpy(np.bincount(values, minlength=minlength).astype(np.int64))
    if tuple(weights.shape) != tuple(input.shape):
        raise RuntimeError("weights should be 1-d and have the same length as input")
    w = _values(weights)
    out_type = w.dtype if w.dtype.kind == "f" else np.float64
    return _from_numpy(np.bincount(values, weights=w, minlength=minlength).astype(out_type))


def _search_side(right, side):
    if side is not None:
        if side not in ("left", "right"):
            raise RuntimeError(f"torch.searchsorted(): side can only be 'left' or 'right' but "
                               f"got {side}")
        if right and side == "left":
            raise RuntimeError("torch.searchsorted(): side and right can't be set to opposites,"
                               " got side of left while right was True")
        return side
    return "right" if right else "left"


def _check_int64_out(fname, out_int32):
    if out_int32:
        raise NotImplementedError(f"cagrad: {fname}(out_int32=True) is not supported (cagrad "
                                  f"has no int32); see docs/python-api.md")


def searchsorted(sorted_sequence, input, *, out_int32=False, right=False, side=None,
                 sorter=None, out=None):
    _check_int64_out("searchsorted", out_int32)
    _no_out("searchsorted", out)
    side = _search_side(right, side)
    boundaries = _values(sorted_sequence)
    if sorter is not None:
        boundaries = np.take_along_axis(boundaries, _values(sorter), -1)
    scalar = not isinstance(input, _TensorBase)
    queries = np.asarray(input) if scalar else _values(input)
    if boundaries.ndim == 1:
        return _from_numpy(np.searchsorted(boundaries, queries, side=side).astype(np.int64))
    if scalar or tuple(boundaries.shape[:-1]) != tuple(queries.shape[:-1]):
        raise RuntimeError("torch.searchsorted(): boundaries tensor should be 1 dimension or "
                           "the first N-1 dimensions of boundaries tensor and input value "
                           "tensor must match")
    rows_b = boundaries.reshape(-1, boundaries.shape[-1])
    rows_q = queries.reshape(-1, queries.shape[-1])
    found = [np.searchsorted(b, q, side=side) for b, q in zip(rows_b, rows_q)]
    return _from_numpy(np.asarray(found, dtype=np.int64).reshape(queries.shape))


def bucketize(input, boundaries, *, out_int32=False, right=False, out=None):
    if boundaries.dim() != 1:
        raise RuntimeError(f"boundaries tensor must be 1 dimension, but got dim("
                           f"{boundaries.dim()})")
    _no_out("bucketize", out)
    return searchsorted(boundaries, input, out_int32=out_int32, right=right)


def histc(input, bins=100, min=0, max=0):
    if not input.is_floating_point():
        raise NotImplementedError("\"histogram_cpu\" not implemented for 'Long'")
    if bins <= 0:
        raise RuntimeError("torch.histc(): bins must be > 0, but got " f"{bins} for bins")
    values = _values(input).reshape(-1)
    low, high = float(min), float(max)
    if low == high and values.size:
        low, high = float(values.min()), float(values.max())
    if low == high:
        low, high = low - 1, high + 1
    if low > high:
        raise RuntimeError("torch.histc(): max must be larger than min")
    inside = values[(values >= low) & (values <= high)].astype(np.float64)
    # bin = floor((x - min) * bins / (max - min)), the last edge counted in the last bin
    index = np.floor((inside - low) * bins / (high - low)).astype(np.int64)
    index = np.minimum(index, bins - 1)
    return _from_numpy(np.bincount(index, minlength=bins).astype(values.dtype))


# --- Tensor.unfold ---------------------------------------------------------------------------
# The sliding windows of one dimension, as ViT patchify code (x.unfold(2, p, p).unfold(3, p,
# p)) and windowed time series use them: a view of self's memory (as_strided), as torch's,
# whose gradient sums where windows overlap.
def tensor_unfold(self, dimension, size, step):
    """[.., L, ..] -> [.., (L - size) // step + 1, .., size]: window i holds elements
    i*step .. i*step+size-1 of `dimension`; a 0-d tensor counts as one element."""
    size, step = operator.index(size), operator.index(step)
    zero_dim = self.ndim == 0
    x = self.reshape(1) if zero_dim else self
    d = _wrap(dimension, self.ndim)
    length = x.shape[d]
    if size > length:
        raise RuntimeError(f"maximum size for tensor at dimension {d} is {length} but size "
                           f"is {size}")
    if size < 0:
        raise RuntimeError(f"size is {size} but must be >= 0")
    if step <= 0:
        raise RuntimeError(f"step is {step} but must be > 0")
    windows = (length - size) // step + 1
    strides, shape = tuple(x.stride()), tuple(x.shape)
    out = x.as_strided(shape[:d] + (windows,) + shape[d + 1:] + (size,),
                       strides[:d] + (strides[d] * step,) + strides[d + 1:] + (strides[d],),
                       x.storage_offset())
    return out.reshape(size) if zero_dim else out
