"""torch.addmm / addmv / baddbmm / addbmm / mv, tensor_split, index_put(_), and the memory
methods of a CPU-only library (pin_memory, is_pinned, share_memory_, is_shared).

The products are compositions of the recorded matmul ops, scaled and added (so autograd
and the compiled backward differentiate them). index_put writes through index_add on a
[positions, rest] view of the tensor, which is differentiable in both the tensor and the
values. Importing this module adds the Tensor methods.
"""

import numpy as np

from . import _C, _functions
from ._grad_mode import no_grad
from ._more_ops import broadcast_to, nonzero
from ._scatter import index_add
from ._tensor import Tensor

__all__ = ["addmm", "addmv", "baddbmm", "addbmm", "mv", "tensor_split", "index_put"]


def _scaled_sum(input, product, beta, alpha):
    """beta * input + alpha * product; beta == 0 ignores input's values (nan and inf
    included), as torch does, but its shape still broadcasts."""
    if alpha != 1:
        product = product * alpha
    if beta == 0:
        from ._creation import zeros
        shape = np.broadcast_shapes(tuple(input.shape), tuple(product.shape))
        if shape == tuple(product.shape):
            return product
        return product + zeros(shape, dtype=product.dtype)
    return (input if beta == 1 else input * beta) + product


def _check_dims(fname, **tensors):
    for name, (value, ndim) in tensors.items():
        if value.dim() != ndim:
            raise RuntimeError(f"{name} must be a {ndim}D tensor")


def addmm(input, mat1, mat2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat1 @ mat2)."""
    _no_out("addmm", out)
    if mat1.dim() != 2 or mat2.dim() != 2:
        raise RuntimeError(f"{'mat1' if mat1.dim() != 2 else 'mat2'} must be a matrix, got "
                           f"{(mat1 if mat1.dim() != 2 else mat2).dim()}-D tensor")
    return _scaled_sum(input, _functions.mm(mat1, mat2), beta, alpha)


def mv(input, vec, *, out=None):
    """input [n, m] @ vec [m] -> [n]."""
    _no_out("mv", out)
    if input.dim() != 2 or vec.dim() != 1:
        raise RuntimeError(f"vector + matrix @ vector expected, got {vec.dim()}, "
                           f"{input.dim()}, {vec.dim()}")
    if input.shape[1] != vec.shape[0]:
        raise RuntimeError(f"size mismatch, got input ({input.shape[0]}), mat "
                           f"({input.shape[0]}x{input.shape[1]}), vec ({vec.shape[0]})")
    return _functions.matmul(input, vec)


def addmv(input, mat, vec, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * (mat @ vec)."""
    _no_out("addmv", out)
    if mat.dim() != 2 or vec.dim() != 1 or mat.shape[1] != vec.shape[0] or \
            input.dim() > 1 or (input.dim() == 1 and input.shape[0] not in (1, mat.shape[0])):
        raise RuntimeError(f"size mismatch, got input ({input.shape[0] if input.dim() else 1}),"
                           f" mat ({mat.shape[0]}x{mat.shape[1] if mat.dim() > 1 else 1}), "
                           f"vec ({vec.shape[0] if vec.dim() else 1})")
    return _scaled_sum(input, _functions.matmul(mat, vec), beta, alpha)


def baddbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * bmm(batch1, batch2), batch by batch."""
    _no_out("baddbmm", out)
    _check_dims("baddbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _scaled_sum(input, _functions.bmm(batch1, batch2), beta, alpha)


def addbmm(input, batch1, batch2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * sum over b of batch1[b] @ batch2[b]."""
    _no_out("addbmm", out)
    _check_dims("addbmm", batch1=(batch1, 3), batch2=(batch2, 3))
    return _scaled_sum(input, _functions.bmm(batch1, batch2).sum(0), beta, alpha)


def _no_out(fname, out):
    if out is not None:
        raise NotImplementedError(f"cagrad's {fname}() does not support out=...; use the "
                                  f"returned tensor (see docs/python-api.md)")


# --- tensor_split -------------------------------------------------------------------------

def _split_points(size, indices_or_sections):
    """The [start, end) of each piece along the split dim, as torch cuts them."""
    if isinstance(indices_or_sections, _C.TensorBase):
        if indices_or_sections.dim() == 0:
            indices_or_sections = int(indices_or_sections._item())
        else:
            indices_or_sections = [int(i) for i in indices_or_sections.tolist()]
    if isinstance(indices_or_sections, int):
        sections = indices_or_sections
        if sections <= 0:
            raise RuntimeError(f"number of sections must be larger than 0, got {sections}")
        base, extra = divmod(size, sections)
        lengths = [base + 1] * extra + [base] * (sections - extra)
        starts = np.cumsum([0] + lengths[:-1])
        return [(int(s), int(s + n)) for s, n in zip(starts, lengths)]
    cuts = [int(i) for i in indices_or_sections]
    bounds = [0] + [min(max(c if c >= 0 else c + size, 0), size) for c in cuts] + [size]
    return [(start, max(start, end)) for start, end in zip(bounds[:-1], bounds[1:])]


def tensor_split(input, indices_or_sections, dim=0):
    """Views of input cut along dim into `sections` near-equal pieces (the first
    size % sections one longer) or at the given indices."""
    if input.dim() == 0:
        raise RuntimeError("tensor_split expected at least a 1-dimensional tensor, but got a "
                           "tensor with 0 dims")
    dim = dim + input.dim() if dim < 0 else dim
    size = input.shape[dim]
    return tuple(_functions.narrow(input, dim, start, end - start)
                 for start, end in _split_points(size, indices_or_sections))


# --- index_put ----------------------------------------------------------------------------

def _index_arrays(input, indices):
    """The index tensors as int64 numpy arrays, one per leading dim (a bool mask of k
    dims gives k), bounds-checked and made non-negative."""
    if not isinstance(indices, (tuple, list)):
        raise TypeError(f"index_put_(): argument 'indices' (position 1) must be tuple of "
                        f"Tensors, not {type(indices).__name__}")
    arrays = []
    for index in indices:
        if index.dtype == _bool_dtype():
            arrays.extend(np.asarray(nonzero(index).numpy()).T)
        else:
            arrays.append(np.asarray(index.numpy(), dtype=np.int64))
    if len(arrays) > input.dim():
        raise IndexError(f"too many indices for tensor of dimension {input.dim()} (got "
                         f"{len(arrays)})")
    for d, array in enumerate(arrays):
        size = input.shape[d]
        bad = array[(array >= size) | (array < -size)]
        if bad.size:
            raise IndexError(f"index {bad.flat[0]} is out of bounds for dimension {d} with "
                             f"size {size}")
        arrays[d] = np.where(array < 0, array + size, array)
    return np.broadcast_arrays(*arrays) if arrays else arrays


def _bool_dtype():
    from ._dtype import bool as bool_dtype
    return bool_dtype


def index_put(input, indices, values, accumulate=False):
    """input with values written (or, with accumulate, added) at the positions the index
    tensors name along the leading dims; a differentiable, out-of-place result."""
    from ._creation import tensor
    arrays = _index_arrays(input, indices)
    lead = len(arrays)
    rest = tuple(input.shape[lead:])
    rows = int(np.prod(input.shape[:lead], dtype=np.int64))
    flat = np.ravel_multi_index(tuple(a.reshape(-1) for a in arrays), tuple(input.shape[:lead])) \
        if lead else np.zeros(1, dtype=np.int64)
    target_shape = (tuple(arrays[0].shape) if lead else ()) + rest
    values = broadcast_to(values, target_shape).reshape((-1,) + rest)
    table = input.reshape((rows,) + rest)
    if accumulate:
        return index_add(table, 0, tensor(flat), values).reshape(tuple(input.shape))
    # torch (on the CPU) keeps the last value written at a repeated position
    last = len(flat) - 1 - np.unique(flat[::-1], return_index=True)[1]
    kept = tensor(flat[last])
    written = np.zeros(rows, dtype=bool)
    written[flat] = True
    placed = index_add(_C.mul_scalar(table.detach(), 0.0), 0, kept, values.index_select(
        0, tensor(last)))
    mask = tensor(written).reshape((rows,) + (1,) * len(rest))
    return _functions.where(mask, placed, table).reshape(tuple(input.shape))


def index_put_(self, indices, values, accumulate=False):
    """In place: self[indices] = values (or += with accumulate)."""
    if self.requires_grad and self.is_leaf and _C.is_grad_enabled():
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    if values.dtype != self.dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_type_name(self)} for the destination and {_type_name(values)} "
                           f"for the source.")
    if _C.is_grad_enabled() and (self.requires_grad or values.requires_grad):
        raise NotImplementedError("cagrad's Tensor.index_put_() cannot record a gradient "
                                  "(cagrad has no in-place autograd); use the out-of-place "
                                  "index_put(), or write under no_grad() (see "
                                  "docs/python-api.md)")
    with no_grad():
        _C.copy_(self, index_put(self, indices, values, accumulate))
    return self


def _type_name(t):
    return {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}.get(
        str(t.dtype).replace("cagrad.", ""), str(t.dtype))


# --- memory placement: a CPU-only library ------------------------------------------------

def pin_memory(self, device=None):
    # torch built without an accelerator raises exactly this
    raise RuntimeError("Cannot access accelerator device when none is available.")


def is_pinned(self, device=None):
    return False


def share_memory_(self):
    """Move this tensor's memory (and so every view of it) to memory shared with other
    processes: one forked afterwards, or one it is sent to through cagrad.multiprocessing,
    writes the same memory (Hogwild training). Returns self."""
    _C.share_memory_(self)
    return self


def is_shared(self):
    return _C.is_shared(self)


def _index_put_method(self, indices, values, accumulate=False):
    return index_put(self, indices, values, accumulate)


def _attach_methods():
    for name, fn in (("addmm", addmm), ("addmv", addmv), ("baddbmm", baddbmm),
                     ("addbmm", addbmm), ("mv", mv), ("tensor_split", tensor_split),
                     ("index_put", _index_put_method), ("index_put_", index_put_),
                     ("pin_memory", pin_memory), ("is_pinned", is_pinned),
                     ("share_memory_", share_memory_), ("is_shared", is_shared)):
        setattr(Tensor, name, fn)


_attach_methods()
