"""Tensor indexing as PyTorch does it: basic items (ints, slices, None, Ellipsis) become
views, advanced ones (int64 index tensors, lists, masks) gathers, and assignment through
either writes into the tensor (Tensor.__getitem__ / __setitem__)."""

import operator

import numpy as np

from . import _C
from . import _creation
from . import _functions as F
from ._graph_break import break_graph

_TensorBase = _C.TensorBase
_INT64 = 2  # _C dtype code
_NO_STOP = 2**63 - 1  # slice end for `start:` (C clamps it like Python)


# ------------------------------------------------------------------ values (Tensor uses them too)
def _scalar_value(self, value, fname):
    """value (a number) for self's dtype, as torch: an int64 tensor's in-place arithmetic
    refuses a float (its result would be a float), while fill_ and item assignment cast it,
    truncating toward zero."""
    if type(value) is not float and type(value) is not int and type(value) is not bool:
        value = F._number(value, fname)
    if type(value) is float and self._dtype == _INT64:
        if fname in ("add_", "mul_"):
            raise RuntimeError("result type Float can't be cast to the desired output type Long")
        return int(value)
    return value


def _to_code(t, code):
    """t converted to the dtype with _C code `code` (t itself if it has it already)."""
    if t._dtype == code:
        return t
    if code == _INT64 and t._dtype != 3:  # bool -> int64 is _C's (0/1)
        # _C converts int64 -> float only; float -> int64 truncates toward zero like torch
        # and carries no gradient, so numpy may do it.
        return _creation.tensor(np.trunc(np.asarray(t)).astype(np.int64))
    return _C.to_dtype(t, code)



# ------------------------------------------------------------------ indexing
def _slice(x, d, s):
    step = s.step
    if step is None:
        step = 1
    elif step <= 0:
        raise ValueError("step must be greater than zero (cagrad, like torch, has no negative "
                         "slice steps; use flip via index_select with a reversed arange)")
    start = 0 if s.start is None else s.start
    stop = _NO_STOP if s.stop is None else s.stop
    return _C.slice(x, d, start, stop, step)


# kinds of index items
_INT, _SLICE, _NONE, _ELLIPSIS, _MASK, _INDEX = range(6)


def _is_mask_item(item):
    if isinstance(item, _TensorBase):
        return item._dtype != _INT64
    if isinstance(item, np.ndarray):
        return item.dtype.kind == "b"
    return type(item) is bool or (isinstance(item, list) and item
                                  and np.asarray(item).dtype.kind == "b")


def _classify(item):
    """(kind, value) for one index item; masks and index lists become numpy arrays or
    tensors here."""
    t = type(item)
    if t is int:
        return _INT, item
    if t is slice:
        return _SLICE, item
    if item is None:
        return _NONE, None
    if item is Ellipsis:
        return _ELLIPSIS, None
    if isinstance(item, _TensorBase):
        if item._dtype != _INT64:  # bool masks (and, as cagrad always took, float 0/1)
            break_graph("indexing with a mask tensor needs the mask's values (graph break)")
            return _MASK, np.asarray(item) != 0
        return _INDEX, item
    if t is bool:
        return _MASK, np.array(item)
    if isinstance(item, (list, tuple, np.ndarray)):
        arr = np.asarray(item)
        if arr.dtype.kind == "b":
            return _MASK, arr
        if arr.dtype.kind in "iu" or arr.size == 0:
            return _INDEX, arr.astype(np.int64)
    elif hasattr(item, "__index__"):
        return _INT, operator.index(item)
    raise IndexError(f"only integers, slices (`:`), ellipsis (`...`), None, int64 index "
                     f"tensors or lists, and boolean masks are valid indices (got "
                     f"{type(item).__name__})")


_BASIC = frozenset((int, slice, type(None), type(Ellipsis)))


def _index(x, items, writable=False):
    """x[items] for a tuple of index items, following torch's rules for one advanced
    index (an index tensor/list or a mask). writable=True (for __setitem__) allows only
    basic items, whose result is a view."""
    for it in items:
        if type(it) not in _BASIC:
            return _index_advanced(x, items, writable)
    # the common case, only ints, slices, None and Ellipsis: no classification needed
    n_none = n_ellipsis = 0
    for it in items:
        if it is None:
            n_none += 1
        elif it is Ellipsis:
            n_ellipsis += 1
    consumed = len(items) - n_none - n_ellipsis
    ndim = x.ndim
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    if n_ellipsis > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    d = 0
    for it in items:
        t = type(it)
        if t is int:
            x = _C.select(x, d, it)
        elif t is slice:
            if it.start is not None or it.stop is not None or it.step is not None:
                x = _slice(x, d, it)
            d += 1
        elif it is None:
            x = _C.unsqueeze(x, d)
            d += 1
        else:
            d += ndim - consumed
    return x


def _index_advanced(x, items, writable):
    """_index() for items that include an index tensor/list, a mask or a numpy int."""
    parsed = [_classify(it) for it in items]
    if sum(k == _ELLIPSIS for k, _ in parsed) > 1:
        raise IndexError("an index can only have a single ellipsis ('...')")
    consumed = sum(v.ndim if k == _MASK else 1 for k, v in parsed if k not in (_NONE, _ELLIPSIS))
    ndim = x.ndim
    if consumed > ndim:
        raise IndexError(f"too many indices for tensor of dimension {ndim}")
    advanced = [i for i, (k, _) in enumerate(parsed) if k in (_MASK, _INDEX)]
    if writable and advanced:
        raise NotImplementedError("cagrad can assign through ints, slices, None, ... and a "
                                  "single boolean mask; not through an index tensor. Build "
                                  "the result out of place instead.")
    if len(advanced) > 1:
        raise IndexError("cagrad supports one index tensor or mask per indexing expression "
                         "(torch would pair several up elementwise); use gather(), or index "
                         "one dim at a time")
    # Ints select first, as in torch (numpy's rule of moving the indexed dims to the front
    # when an int and an index tensor are apart does not apply).
    d = 0  # the dim of the result the next item applies to
    for k, v in parsed:
        if k == _INT:
            x = _C.select(x, d, v)
        elif k == _SLICE:
            if v.start is not None or v.stop is not None or v.step is not None:
                x = _slice(x, d, v)
            d += 1
        elif k == _NONE:
            x = _C.unsqueeze(x, d)
            d += 1
        elif k == _ELLIPSIS:
            d += ndim - consumed  # the dims the Ellipsis stands for are left as they are
        elif k == _MASK:
            x = _index_mask(x, d, v)
            d += 1
        else:
            x, n = _index_tensor(x, d, v)
            d += n
    return x


def _index_mask(x, d, mask):
    """x with the mask.ndim dims from d replaced by one dim of the selected positions."""
    k = mask.ndim
    shape = x._shape[d:d + k]
    if mask.shape != shape:
        raise IndexError(f"the shape of the mask {list(mask.shape)} does not match the shape "
                         f"{list(shape)} of the indexed dims starting at dim {d}")
    if k == 0:
        x = _C.unsqueeze(x, d)
    elif k > 1:
        x = _C.flatten(x, d, d + k - 1)
    idx = _creation.from_numpy(np.flatnonzero(mask).astype(np.int64))
    return _C.index_select(x, d, idx)


def _index_tensor(x, d, idx):
    """x indexed along d by int64 indices (a tensor or numpy array); returns (result,
    number of dims the index put in place of dim d)."""
    if isinstance(idx, np.ndarray):
        if idx.size and idx.min() < 0:  # torch wraps negative indices
            idx = np.where(idx < 0, idx + x._shape[d], idx)
        idx = _creation.from_numpy(np.ascontiguousarray(idx))
    shape = idx._shape
    if len(shape) == 0:
        return _C.squeeze(_C.index_select(x, d, _C.reshape(idx, (1,))), (d,)), 0
    if len(shape) == 1:
        return _C.index_select(x, d, idx), 1
    out = _C.index_select(x, d, _C.reshape(idx, (-1,)))
    xs = x._shape
    return _C.reshape(out, xs[:d] + shape + xs[d + 1:]), len(shape)


def _assign_masked(x, mask_item, value):
    """x[mask] = value for a number or a one-element tensor value."""
    mask = mask_item if isinstance(mask_item, _TensorBase) else _creation.tensor(mask_item)
    k = mask.ndim
    if mask._shape != x._shape[:k]:
        raise IndexError(f"the shape of the mask {list(mask._shape)} does not match the shape "
                         f"{list(x._shape[:k])} of the indexed dims")
    mask = _C.reshape(mask, mask._shape + (1,) * (x.ndim - k))  # broadcast over the rest
    if isinstance(value, _TensorBase):
        if value.numel() != 1:
            raise NotImplementedError("cagrad assigns through a mask only a number or a "
                                      "one-element tensor; use where(mask, values, x)")
        _C.copy_(x, _C.where(mask, _to_code(_C.reshape(value, ()), x._dtype), x))
    else:
        _C.copy_(x, _C.masked_fill(x, mask, _scalar_value(x, value, "__setitem__")))
