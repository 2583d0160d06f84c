"""masked_scatter, index_copy and scatter_reduce with PyTorch's signatures.

All three are composites of differentiable cagrad ops (scatter, index_select, cat, sum,
prod, where), so they have gradients in eager and compiled autograd for free; the index
bookkeeping (which element lands where) is constant data computed with numpy.

scatter_reduce gathers, for every element of input, the values that reduce into it (itself
when include_self, then the src entries whose index names it) into a padded (n, K) table and
reduces its rows: sum/prod/mean/amax/amin then get their gradients from those ops. amax/amin
split the gradient evenly among tied values, as PyTorch does.
"""

import numpy as np

from . import _C
from . import _functions as F
from . import _scatter as S

_TensorBase = _C.TensorBase
_BOOL_NAME = "bool"
_FLOAT_CODES = (0, 1)
_INT64 = 2
_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long", 3: "Bool"}
_REDUCTIONS = ("sum", "prod", "mean", "amax", "amin")


def _type_name(t):
    return _TYPE_NAMES.get(t._dtype, str(t.dtype))


def _const(arr):
    """A constant cagrad tensor holding a numpy array (int64 or float)."""
    return _C.copy_from_buffer(np.array(arr, order="C"))  # keeps 0-d (ascontiguousarray does not)


def _is_bool(t):
    return str(t.dtype).endswith(_BOOL_NAME)


# ------------------------------------------------------------------------------ masked_scatter
def masked_scatter(input, mask, source):
    """input with the positions where mask (broadcast to input) is True filled, in row-major
    order, by the leading elements of source; gradients: input g where mask is False,
    source g's masked values in its first elements (zeros after)."""
    S._check_tensor(mask, "masked_scatter", "mask", 1)
    S._check_tensor(source, "masked_scatter", "source", 2)
    if not _is_bool(mask):
        raise RuntimeError(f"masked_scatter_ only supports boolean masks, but got mask with "
                           f"dtype {_type_name(mask)}")
    if source._dtype != input._dtype:
        raise RuntimeError(f"masked_scatter: expected self and source to have same dtypes but "
                           f"got{_type_name(input)} and {_type_name(source)}")
    shape = np.broadcast_shapes(tuple(input._shape), tuple(mask._shape))
    base = _C.expand(input, tuple(shape)) if tuple(shape) != tuple(input._shape) else input
    positions = np.flatnonzero(np.broadcast_to(mask.numpy(), shape))
    if positions.size > source.numel():
        raise RuntimeError("Number of elements of source < number of ones in mask")
    flat = _C.reshape(base, (-1,)) if base.ndim != 1 else base
    if positions.size == 0:
        return _C.to_dtype(base, base._dtype)
    taken = _C.narrow(_C.reshape(source, (-1,)), 0, 0, positions.size)
    out = S.scatter(flat, 0, _const(positions.astype(np.int64)), taken)
    return _C.reshape(out, tuple(shape))


def masked_scatter_(self, mask, source):
    out = masked_scatter(self, mask, source)
    if tuple(out._shape) != tuple(self._shape):
        raise RuntimeError(f"masked_scatter_: mask of shape {list(mask._shape)} does not "
                           f"broadcast to self's shape {list(self._shape)}")
    _C.copy_(self, out)
    return self


# ------------------------------------------------------------------------------ index_copy
def _check_index_copy(input, dim, index, source):
    S._check_tensor(index, "index_copy", "index", 2)
    S._check_tensor(source, "index_copy", "source", 3)
    dim = S._wrap_dim(dim, input.ndim)
    if index.ndim > 1:
        raise IndexError(f"index_copy_(): Index should have dimension 1 or 0 (got {index.ndim})")
    if index._dtype != _INT64:
        raise RuntimeError(f"index_copy_(): Expected a long tensor for index, but got "
                           f"{_type_name(index)}")
    if source._dtype != input._dtype:
        raise RuntimeError(f"index_copy_(): self and source expected to have the same dtype, "
                           f"but got (self) {_type_name(input)} and (source) "
                           f"{_type_name(source)}")
    n_source = S._shape_1d(source)[dim] if dim < max(source.ndim, 1) else 1
    if index.numel() != n_source:
        raise IndexError(f"index_copy_(): Number of indices ({index.numel()}) should be equal "
                         f"to source.size(dim) ({n_source})")
    xs, ss = S._shape_1d(input), S._shape_1d(source)
    if len(xs) != len(ss) or any(a != b for d, (a, b) in enumerate(zip(xs, ss)) if d != dim):
        raise RuntimeError(f"index_copy_(): Source/destination tensor must have same slice "
                           f"shapes. Destination slice shape: {_slice_str(xs, dim)} at "
                           f"dimension {dim} and source slice shape: {_slice_str(ss, dim)} "
                           f"at dimension 0.")
    idx = index.numpy().reshape(-1)
    bad = (idx < 0) | (idx >= xs[dim])
    if bad.any():
        raise IndexError(f"index_copy_(): index {idx[np.argmax(bad)]} is out of bounds for "
                         f"dimension {dim} with size {xs[dim]}")
    return dim, idx


def _slice_str(shape, dim):
    rest = [n for d, n in enumerate(shape) if d != dim]
    return " ".join(map(str, rest)) if rest else "1"


def index_copy(input, dim, index, source):
    """input with source's slices copied to the positions index names along dim
    (out[:, index[j]] = source[:, j] for dim 1); gradients: input g with the copied
    slices zeroed, source g.index_select(dim, index)."""
    dim, idx = _check_index_copy(input, dim, index, source)
    if idx.size == 0:
        return _C.to_dtype(input, input._dtype)
    shape = S._shape_1d(source)
    view = [1] * len(shape)
    view[dim] = idx.size
    full_index = np.broadcast_to(idx.reshape(view), shape).astype(np.int64)
    x = S._as_1d(input)
    out = S.scatter(x, dim, _const(full_index), S._as_1d(source))
    return _C.reshape(out, input._shape)


def index_copy_(self, dim, index, source):
    out = index_copy(self, dim, index, source)
    _C.copy_(self, out)
    return self


# ------------------------------------------------------------------------------ scatter_reduce
def _identity(reduce, dtype_code):
    """The padding value that does not change a reduction."""
    if reduce in ("sum", "mean"):
        return 0
    if reduce == "prod":
        return 1
    if dtype_code == _INT64:
        info = np.iinfo(np.int64)
        return info.min if reduce == "amax" else info.max
    return -np.inf if reduce == "amax" else np.inf


def _gather_table(n_self, targets, include_self):
    """(table, valid): row t lists the pool positions reducing into element t (self's own
    position t first when include_self, then the src entries n_self + j targeting t), padded
    with the pad position n_self + len(targets); valid marks the real entries."""
    order = np.argsort(targets, kind="stable")
    counts = np.bincount(targets, minlength=n_self)
    width = int(counts.max(initial=0)) + int(include_self)
    pad = n_self + targets.size
    table = np.full((n_self, max(width, 1)), pad, dtype=np.int64)
    valid = np.zeros(table.shape, dtype=bool)
    if include_self:
        table[:, 0] = np.arange(n_self)
        valid[:, 0] = True
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    rank = np.arange(targets.size) - starts[targets[order]]
    column = rank + int(include_self)
    table[targets[order], column] = n_self + order
    valid[targets[order], column] = True
    return table, valid


def _check_scatter_reduce(input, dim, index, src, reduce):
    S._check_tensor(index, "scatter_reduce", "index", 2)
    S._check_tensor(src, "scatter_reduce", "src", 3)
    if reduce not in _REDUCTIONS:
        raise RuntimeError(f"reduce argument must be either sum, prod, mean, amax or amin, got "
                           f"{reduce}")
    return S._check_scatter_args("scatter", input, dim, index, src)


def scatter_reduce(input, dim, index, src, reduce, *, include_self=True):
    """input with src's values reduced (sum, prod, mean, amax or amin) into the positions
    index names along dim, together with input's own value when include_self. Gradients as
    PyTorch's (ties of amax/amin share the gradient evenly)."""
    dim = _check_scatter_reduce(input, dim, index, src, reduce)
    if index.numel() == 0:
        return _C.to_dtype(input, input._dtype)
    x, idx = S._as_1d(input), S._as_1d(index)
    part = S._narrow_to(S._as_1d(src), idx._shape)
    idx_np = idx.numpy()
    targets = np.ravel_multi_index(S._numpy_targets(dim, idx_np), S._shape_1d(input))
    x_flat = _C.reshape(x, (-1,))
    table, valid = _gather_table(x_flat.numel(), targets.reshape(-1), include_self)
    pad = _C.full(x._dtype, (1,), float(_identity(reduce, x._dtype)))
    if x._dtype == _INT64:
        pad = _const(np.array([_identity(reduce, _INT64)], dtype=np.int64))
    pool = F.cat([x_flat, _C.reshape(part, (-1,)), pad])
    rows = _C.reshape(_C.index_select(pool, 0, _const(table.reshape(-1))), table.shape)
    reduced = _reduce_rows(rows, valid, reduce, None if include_self else x_flat)
    untouched = ~valid.any(axis=1)
    if untouched.any():  # include_self=False: elements no index names keep their value
        reduced = F.where(_const(untouched), x_flat, reduced)
    return _C.reshape(reduced, input._shape)


def _reduce_rows(rows, valid, reduce, excluded_self):
    if reduce == "sum":
        return F.sum(rows, 1)
    if reduce == "prod":
        from ._more_ops import prod
        return prod(rows, 1)
    if reduce == "mean":
        count = np.maximum(valid.sum(axis=1), 1)
        total = F.sum(rows, 1)
        if rows._dtype == _INT64:
            return F.div(total, _const(count.astype(np.int64)), rounding_mode="floor")
        return F.div(total, _C.to_dtype(_const(count.astype(np.float64)), rows._dtype))
    return _extreme_rows(rows, valid, reduce, excluded_self)


def _extreme_rows(rows, valid, reduce, excluded_self):
    """amax/amin of each row; the gradient is split evenly among the entries equal to the
    result (PyTorch's rule), via result + (weighted sum - its detached value). Like PyTorch,
    an excluded self (include_self=False) equal to the result still counts as a tie: it
    takes its share, which then goes nowhere."""
    values = rows.numpy() if not rows.requires_grad else _C.detach(rows).numpy()
    best = values.max(axis=1) if reduce == "amax" else values.min(axis=1)
    if rows._dtype == _INT64 or not rows.requires_grad:
        return _const(best.astype(values.dtype))
    ties = (values == best[:, None]) & valid
    count = ties.sum(axis=1, keepdims=True)
    if excluded_self is not None:
        own = _C.detach(excluded_self).numpy()
        count = count + ((own == best) & valid.any(axis=1))[:, None]
    weights = ties / np.maximum(count, 1)
    # the padding (+-inf) is zeroed first: inf * 0 would be NaN
    padding = _C.to_dtype(_const((~valid).astype(np.float64)), rows._dtype)
    finite = _C.masked_fill(rows, padding, 0.0)
    share = F.sum(F.mul(finite, _C.to_dtype(_const(weights), rows._dtype)), 1)
    exact = _C.to_dtype(_const(best), rows._dtype)
    return F.add(exact, F.sub(share, _C.detach(share)))


def scatter_reduce_(self, dim, index, src, reduce, *, include_self=True):
    out = scatter_reduce(self, dim, index, src, reduce, include_self=include_self)
    _C.copy_(self, out)
    return self
