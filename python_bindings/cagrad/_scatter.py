"""The scatter family: scatter, scatter_add and index_add, with PyTorch's signatures.

libcagrad's scatter-add kernels (the ops that gather's and index_select's derivatives use)
are reached as _C.scatter_add_zeros / _C.index_add_zeros: zeros(shape) with src added at the
index. Each op here is a custom autograd Function whose forward adds that to the input and
whose backward is the PyTorch derivative (gather / index_select of the gradient), so the
results are differentiable in eager and in compiled autograd.

int64 tensors never need gradients, and the float route would round int64 values past 2**53,
so they are computed exactly with numpy instead.
"""

import operator

import numpy as np

from . import _C
from .autograd.function import Function

_TensorBase = _C.TensorBase
_INT64 = 2  # _C dtype code
_TORCH_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long"}  # c10 ScalarType names


# ------------------------------------------------------------------------------ checks
def _wrap_dim(dim, ndim):
    """dim in [0, ndim); a 0-d tensor takes dims -1 and 0 as PyTorch does."""
    n = max(ndim, 1)
    dim = operator.index(dim)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], "
                         f"but got {dim})")
    return dim + n if dim < 0 else dim


def _check_tensor(value, fname, name, position):
    if not isinstance(value, _TensorBase):
        raise TypeError(f"{fname}(): argument '{name}' (position {position}) must be Tensor, "
                        f"not {type(value).__name__}")


def _check_bounds(index_np, size, dim):
    """PyTorch's message for the first index outside [0, size)."""
    bad = (index_np < 0) | (index_np >= size)
    if bad.any():
        value = index_np.reshape(-1)[np.argmax(bad.reshape(-1))]
        raise RuntimeError(f"index {value} is out of bounds for dimension {dim} with size {size}")


def _check_scatter_shapes(input, dim, index, src):
    """index's rank equals input's (and src's); index fits in src everywhere and in input
    outside dim."""
    ndim = max(input.ndim, 1)
    if max(index.ndim, 1) != ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as self tensor")
    if src is not None and max(src.ndim, 1) != ndim:
        raise RuntimeError("Index tensor must have the same number of dimensions as src tensor")
    ishape = _shape_1d(index)
    xshape = _shape_1d(input)
    sshape = _shape_1d(src) if src is not None else None
    for d in range(ndim):
        too_big = ishape[d] > sshape[d] if sshape is not None else False
        if too_big or (d != dim and ishape[d] > xshape[d]):
            msg = (f"Expected index {list(ishape)} to be no larger than self {list(xshape)} "
                   f"apart from dimension {dim}")
            if sshape is not None:
                msg += f" and to be no larger size than src {list(sshape)}"
            raise RuntimeError(msg)


def _check_scatter_args(fname, input, dim, index, src):
    """PyTorch's checks of scatter's arguments; returns dim in range. fname: the op its
    messages name ('scatter' for the whole family, as PyTorch's do)."""
    _check_tensor(index, fname, "index", 2)
    dim = _wrap_dim(dim, input.ndim)
    if index._dtype != _INT64:
        raise RuntimeError(f"{fname}(): Expected dtype int32/int64 for index")
    if src is not None and src._dtype != input._dtype:
        raise RuntimeError(f"{fname}(): Expected self.dtype to be equal to src.dtype")
    if index.numel() == 0:
        return dim
    _check_scatter_shapes(input, dim, index, src)
    _check_bounds(index.numpy(), _shape_1d(input)[dim], dim)
    return dim


def _shape_1d(t):
    """A tensor's shape, a 0-d tensor's as (1,): PyTorch treats it as one element."""
    return t._shape or (1,)


# ------------------------------------------------------------------------------ kernels
def _as_1d(t):
    return _C.reshape(t, (1,)) if t.ndim == 0 else t


def _narrow_to(src, shape):
    """src's leading block of the given shape (the part scatter reads), differentiably."""
    for d, n in enumerate(shape):
        if src._shape[d] != n:
            src = _C.narrow(src, d, 0, n)
    return src


def _sum_into_zeros(like, dim, index, src, picker):
    """zeros(like's shape) with src summed at the positions index names along dim: libcagrad's
    scatter_add (picker _C.gather, whose adjoint it is) or index_add (picker
    _C.index_select)."""
    make = _C.scatter_add_zeros if picker is _C.gather else _C.index_add_zeros
    return make(list(like._shape), dim, index, src)


def _numpy_targets(dim, index_np):
    """For each index element, the coordinates it addresses (gather-style: its own position
    in every dim but dim, its value along dim), as a tuple for numpy indexing."""
    coords = list(np.indices(index_np.shape))
    coords[dim] = index_np
    return tuple(coords)


def _int_scatter(input, dim, index, src, accumulate):
    """input with src written (or added) at index, for int64 tensors: exact, in numpy."""
    out = input.numpy().copy().reshape(_shape_1d(input))
    idx = index.numpy().reshape(_shape_1d(index))
    values = np.broadcast_to(src, idx.shape) if not isinstance(src, _TensorBase) else (
        src.numpy().reshape(_shape_1d(src))[tuple(slice(0, n) for n in idx.shape)])
    where = _numpy_targets(dim, idx)
    if accumulate:
        np.add.at(out, where, values)
    else:
        out[where] = values  # numpy: the last of duplicate indices wins
    return _from_numpy(out.reshape(input._shape))


def _from_numpy(arr):
    return _C.copy_from_buffer(np.ascontiguousarray(arr))


def _written_mask(input, dim, index):
    """1 where scatter writes in input, 0 elsewhere (input's shape and dtype)."""
    written = np.zeros(_shape_1d(input), dtype=bool)
    idx = index.numpy().reshape(_shape_1d(index))
    written[_numpy_targets(dim, idx)] = True
    mask = _from_numpy(written.reshape(input._shape).astype(np.float64))
    return _C.to_dtype(mask, input._dtype)


def _last_writer_mask(input, dim, index, src_dtype):
    """1 for the index entry that writes each target last in row-major order, 0 for the
    entries it overrides; None when no two entries share a target. PyTorch picks one of the
    duplicates arbitrarily; cagrad keeps the last, as PyTorch's CPU kernel does."""
    idx = index.numpy().reshape(_shape_1d(index))
    flat = np.ravel_multi_index(_numpy_targets(dim, idx),
                                _shape_1d(input)).reshape(-1)
    _, first_from_end = np.unique(flat[::-1], return_index=True)
    if first_from_end.size == flat.size:
        return None
    keep = np.zeros(flat.size)
    keep[flat.size - 1 - first_from_end] = 1.0
    return _C.to_dtype(_from_numpy(keep.reshape(index._shape)), src_dtype)


# ------------------------------------------------------------------------------ Functions
_PICKERS = {"gather": _C.gather, "index_select": _C.index_select}


class _AddScattered(Function):
    """input + (src summed at index along dim); backward: input gets g, src gets g picked
    at index (gather for scatter_add, index_select for index_add)."""

    @staticmethod
    def forward(ctx, input, dim, index, src, picker_name):
        # the picker by name: plain ctx values key the backward compiled autograd traces
        ctx.dim, ctx.picker_name = dim, picker_name
        ctx.save_for_backward(index)
        picker = _PICKERS[picker_name]
        return _C.add(input, _sum_into_zeros(input, dim, index, src, picker))

    @staticmethod
    def backward(ctx, grad):
        (index,) = ctx.saved_tensors
        picked = _PICKERS[ctx.picker_name](grad, ctx.dim, index)
        return grad, None, None, picked, None


class _ReplaceScattered(Function):
    """input with src written at index along dim. written: the 0/1 mask of the targets;
    keep: 0/1 on index's shape, 0 for duplicates that a later entry overrides (or None).
    Backward as PyTorch's: input's gradient is g with the written positions zeroed, src's
    is g gathered at index (for every duplicate too)."""

    @staticmethod
    def forward(ctx, input, dim, index, src, written, keep):
        ctx.dim = dim
        ctx.save_for_backward(index, written)
        once = src if keep is None else _C.mul(src, keep)
        scattered = _sum_into_zeros(input, dim, index, once, _C.gather)
        return _C.where(written, scattered, input)

    @staticmethod
    def backward(ctx, grad):
        index, written = ctx.saved_tensors
        grad_input = _C.masked_fill(grad, written, 0.0)
        return grad_input, None, None, _C.gather(grad, ctx.dim, index), None, None


class _NoDerivative(Function):
    """Passes its value through; backward raises PyTorch's error for ops without one."""

    @staticmethod
    def forward(ctx, value, *inputs):
        return _C.to_dtype(value, value._dtype)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("derivative for aten::scatter is not implemented")


# ------------------------------------------------------------------------------ the ops
def scatter_add(input, dim, index, src):
    """input with the values of src added at the positions index names along dim
    (out[i][index[i][j]] += src[i][j] for dim 1); gradients: input g, src g.gather(dim,
    index)."""
    _check_tensor(index, "scatter_add", "index", 2)
    _check_tensor(src, "scatter_add", "src", 3)
    dim = _check_scatter_args("scatter", input, dim, index, src)
    return _scatter_add_checked(input, dim, index, src)


def _scatter_add_checked(input, dim, index, src):
    if index.numel() == 0:
        return _C.to_dtype(input, input._dtype)
    if input._dtype == _INT64:
        return _int_scatter(input, dim, index, src, accumulate=True)
    x, idx = _as_1d(input), _as_1d(index)
    part = _narrow_to(_as_1d(src), idx._shape)
    return _C.reshape(_AddScattered.apply(x, dim, idx, part, "gather"), input._shape)


def scatter(input, dim, index, src=None, value=None, *, reduce=None):
    """input with src's values (or the number value) written at the positions index names
    along dim. reduce='add' sums instead (no gradient, as in PyTorch); 'multiply' is not
    supported."""
    src, value = _scatter_source(src, value)
    if reduce is not None:
        return _scatter_reduce(input, dim, index, src, value, reduce)
    dim = _check_scatter_args("scatter", input, dim, index, src)
    if index.numel() == 0:
        return _C.to_dtype(input, input._dtype)
    if src is None:
        return _scatter_value(input, dim, index, value)
    if input._dtype == _INT64:
        return _int_scatter(input, dim, index, src, accumulate=False)
    x, idx = _as_1d(input), _as_1d(index)
    part = _narrow_to(_as_1d(src), idx._shape)
    written = _written_mask(x, dim, idx)
    keep = _last_writer_mask(x, dim, idx, part._dtype)
    out = _ReplaceScattered.apply(x, dim, idx, part, written, keep)
    return _C.reshape(out, input._shape)


def _scatter_source(src, value):
    """(src tensor or None, number or None) from scatter's src/value arguments: the third
    positional argument may be either, as in PyTorch."""
    if src is not None and value is not None:
        raise TypeError("scatter(): pass either src or value, not both")
    if src is None and value is None:
        raise TypeError("scatter() missing required argument 'src' or 'value' (pos 3)")
    if src is not None and not isinstance(src, _TensorBase):
        src, value = None, src
    if value is not None:
        if isinstance(value, np.generic):
            value = value.item()
        if isinstance(value, _TensorBase) and value.ndim == 0:
            value = value.item()
        if not isinstance(value, (int, float)):
            raise TypeError(f"scatter(): argument 'value' must be a Number or a Tensor, not "
                            f"{type(value).__name__}")
    return src, value


def _scatter_value(input, dim, index, value):
    """input with the number value at the positions index names (checked already)."""
    if input._dtype == _INT64:
        return _int_scatter(input, dim, index, int(value), accumulate=False)
    x = _as_1d(input)
    written = _written_mask(x, dim, _as_1d(index))
    return _C.reshape(_C.masked_fill(x, written, float(value)), input._shape)


def _scatter_reduce(input, dim, index, src, value, reduce):
    """scatter's deprecated reduce= argument: 'add' only."""
    if reduce not in ("add", "multiply"):
        raise RuntimeError("reduce argument must be either add or multiply.")
    if reduce == "multiply":
        raise NotImplementedError("cagrad: scatter(..., reduce='multiply') is not supported "
                                  "(cagrad has no scatter-product kernel); see "
                                  "docs/python-api.md")
    dim = _check_scatter_args("scatter", input, dim, index, src)
    if src is None:
        if input._dtype == _INT64:
            value = int(value)
        src = _C.full(input._dtype, index._shape, float(value))
    out = _scatter_add_checked(input, dim, index, src)
    if not (input.requires_grad or src.requires_grad):
        return out
    return _NoDerivative.apply(_C.detach(out), input, src)


def index_add(input, dim, index, source, *, alpha=1):
    """input with alpha * source's slices added at the positions index names along dim
    (out[:, index[j]] += alpha * source[:, j] for dim 1); gradients: input g, source
    alpha * g.index_select(dim, index)."""
    _check_tensor(source, "index_add", "source", 3)
    dim = _check_index_add_args(input, dim, index, source)
    if not isinstance(alpha, (int, float)):  # a bool is an int, as in PyTorch
        raise TypeError(f"index_add(): argument 'alpha' must be Number, not "
                        f"{type(alpha).__name__}")
    if input._dtype == _INT64:
        return _int_index_add(input, dim, index, source, alpha)
    if alpha != 1:
        source = _C.mul_scalar(source, float(alpha))
    if index.numel() == 0:
        return _C.to_dtype(input, input._dtype)
    x, idx, src = _as_1d(input), _as_1d(index), _as_1d(source)
    return _C.reshape(_AddScattered.apply(x, dim, idx, src, "index_select"), input._shape)


def _int_index_add(input, dim, index, source, alpha):
    out = input.numpy().copy().reshape(_shape_1d(input))
    src = source.numpy().reshape(_shape_1d(source)) * int(alpha)
    where = [slice(None)] * out.ndim
    where[dim] = index.numpy().reshape(-1)
    np.add.at(out, tuple(where), src)
    return _from_numpy(out.reshape(input._shape))


def _check_index_add_args(input, dim, index, source):
    """PyTorch's checks of index_add's arguments; returns dim in range."""
    _check_tensor(index, "index_add", "index", 2)
    dim = _wrap_dim(dim, input.ndim)
    if index._dtype != _INT64:
        raise RuntimeError(f"index_add_(): Expected dtype int32/int64 for index but got: "
                           f"{_TORCH_TYPE_NAMES[index._dtype]}")
    if index.ndim > 1:
        raise IndexError(f"index_add_(): Index is supposed to be a vector, but got dim: "
                         f"{index.ndim} with type: Long and size: {list(index._shape)}")
    if dim >= max(source.ndim, 1):
        raise RuntimeError(f"index_add_(): Indexing dim {dim} is out of bounds of the source "
                           f"tensor with dim {source.ndim}")
    n_index, n_source = index.numel(), _shape_1d(source)[dim]
    if n_index != n_source:
        raise RuntimeError(f"index_add_(): Number of indices ({n_index}) should be equal to "
                           f"source.size(dim): ({n_source}), for dim: {dim}")
    _check_index_add_shapes(input, dim, source)
    if source._dtype != input._dtype:
        raise RuntimeError(f"index_add_(): self ({_TORCH_TYPE_NAMES[input._dtype]}) and source "
                           f"({_TORCH_TYPE_NAMES[source._dtype]}) must have the same scalar type")
    _check_bounds(index.numpy(), _shape_1d(input)[dim], dim)
    return dim


def _check_index_add_shapes(input, dim, source):
    xs, ss = _shape_1d(input), _shape_1d(source)
    others_differ = any(a != b for d, (a, b) in enumerate(zip(xs, ss)) if d != dim)
    if input.ndim != source.ndim or others_differ:
        raise RuntimeError(f"source tensor shape must match self tensor shape, excluding the "
                           f"specified dimension. Got self.shape = {list(input._shape)} "
                           f"source.shape = {list(source._shape)}")


# ------------------------------------------------------------------------------ methods
# Computed out of place, then copied in (like index_fill_). The result is held in a local:
# were it a temporary, a failing copy_ would free its custom-Function node while raising.
def scatter_(self, dim, index, src=None, value=None, *, reduce=None):
    out = scatter(self, dim, index, src, value, reduce=reduce)
    _C.copy_(self, out)
    return self


def scatter_add_(self, dim, index, src):
    out = scatter_add(self, dim, index, src)
    _C.copy_(self, out)
    return self


def index_add_(self, dim, index, source, *, alpha=1):
    out = index_add(self, dim, index, source, alpha=alpha)
    _C.copy_(self, out)
    return self
