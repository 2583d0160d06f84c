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


def index_items(index):
    """The items of an index, read as torch reads them: a tuple is its items; a list under
    32 long that holds a sequence, a slice, a tensor, None or ... is a tuple too (the legacy
    numpy rule torch keeps: x[[rows, cols]] is x[rows, cols]); anything else, a list of
    ints or a numpy array among them, is one item."""
    if type(index) is tuple:
        return index
    if type(index) is list and len(index) < 32 and any(
            it is None or it is Ellipsis or isinstance(it, (slice, list, tuple, _TensorBase))
            for it in index):
        return tuple(index)
    return (index,)


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
    if isinstance(item, (list, tuple, np.ndarray, range)):
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
    if len(advanced) > 1:  # several advanced indices, paired up elementwise
        positions = _positions(tuple(x._shape), parsed, consumed)
        flat = _C.index_select(_C.reshape(x, (-1,)), 0, _int64_tensor(positions.reshape(-1)))
        return _C.reshape(flat, positions.shape)
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


def _int64_tensor(arr):
    return _creation.from_numpy(np.ascontiguousarray(arr, dtype=np.int64))


def _positions(shape, parsed, consumed):
    """The flat positions in a tensor of `shape` that the indexing expression picks, in the
    shape of its result. Ints select first (torch's rule, unlike numpy's), then numpy's
    advanced indexing pairs the index arrays and masks up elementwise and, as torch does,
    puts their dims first when slices stand between them."""
    ids = np.arange(int(np.prod(shape)), dtype=np.int64).reshape(shape)
    rest, d = [], 0
    for k, v in parsed:
        if k == _INT:
            size = ids.shape[d]
            if not -size <= v < size:
                raise IndexError(f"index {v} is out of range for dimension {d} with size "
                                 f"{size}")
            ids = np.take(ids, v, axis=d)
            continue
        if k == _INDEX and isinstance(v, _TensorBase):
            break_graph("indexing with several index tensors needs their values (graph break)")
            v = np.asarray(v)
        rest.append(v if k in (_INDEX, _MASK, _SLICE) else (None if k == _NONE else Ellipsis))
        d += {_SLICE: 1, _INDEX: 1, _MASK: getattr(v, "ndim", 0), _NONE: 0}.get(
            k, len(shape) - consumed)
    try:
        return ids[tuple(rest)]
    except IndexError as e:  # numpy's words for an index out of range, in torch's
        raise IndexError(str(e).replace("axis", "dimension")) from None


def _has_advanced(items):
    return any(type(it) not in _BASIC and (not hasattr(it, "__index__") or
                                            isinstance(it, (_TensorBase, np.ndarray)))
               for it in items)


def _assign_advanced(x, items, value):
    """x[items] = value where items hold index tensors, lists or masks (torch's index_put_
    without accumulate): the value, broadcast to the result's shape, is written at the
    positions the expression picks. Outside the autograd graph (x and value need no
    gradient here, see Tensor.__setitem__), so numpy writes it."""
    parsed = [_classify(it) for it in items]
    consumed = sum(v.ndim if k == _MASK else 1 for k, v in parsed if k not in (_NONE, _ELLIPSIS))
    if consumed > x.ndim:
        raise IndexError(f"too many indices for tensor of dimension {x.ndim}")
    positions = _positions(tuple(x._shape), parsed, consumed)
    if isinstance(value, _TensorBase):  # torch's index_put_: one dtype, even for one value
        values = np.asarray(_values_for(x, value, positions.shape))
    else:
        values = _scalar_value(x, value, "__setitem__")
    data = np.array(x.numpy(), copy=True)
    data.reshape(-1)[positions.reshape(-1)] = np.broadcast_to(values, positions.shape).reshape(-1)
    _C.copy_(x, _creation.from_numpy(data).reshape(tuple(x._shape)))


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
    """x[mask] = value for a number, a one-element tensor, or a tensor that broadcasts to
    the selected part x[mask] (as DQN code's next_values[non_final_mask] = q.max(1).values)."""
    mask = mask_item if isinstance(mask_item, _TensorBase) else _creation.tensor(mask_item)
    k = mask.ndim
    if mask._shape != x._shape[:k]:
        raise IndexError(f"the shape of the mask {list(mask._shape)} does not match the shape "
                         f"{list(x._shape[:k])} of the indexed dims")
    selected = (int(np.count_nonzero(mask.numpy())),) + tuple(x._shape[k:])
    mask = _C.reshape(mask, mask._shape + (1,) * (x.ndim - k))  # broadcast over the rest
    if isinstance(value, _TensorBase) and value.numel() != 1:
        from ._ops_extra3 import masked_scatter  # imports _indexing's users: import late

        # the values fill the selected positions in row-major order, as torch's index_put_
        _C.copy_(x, masked_scatter(x, mask, _values_for(x, value, selected)))
    elif isinstance(value, _TensorBase):
        _C.copy_(x, _C.where(mask, _to_code(_C.reshape(value, ()), x._dtype), x))
    else:
        _C.copy_(x, _C.masked_fill(x, mask, _scalar_value(x, value, "__setitem__")))


_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long", 3: "Bool"}


def _values_for(x, value, selected):
    """value broadcast to the shape of x[mask] (leading 1-dims dropped first), with torch's
    errors: the same dtype as x, and a shape that broadcasts."""
    if value._dtype != x._dtype:
        raise RuntimeError(f"Index put requires the source and destination dtypes match, got "
                           f"{_TYPE_NAMES[x._dtype]} for the destination and "
                           f"{_TYPE_NAMES[value._dtype]} for the source.")
    shape = list(value._shape)
    while len(shape) > len(selected) and shape[0] == 1:
        shape.pop(0)
    try:
        fits = np.broadcast_shapes(tuple(shape), selected) == selected
    except ValueError:
        fits = False
    if not fits:
        raise RuntimeError(f"shape mismatch: value tensor of shape {list(value._shape)} cannot "
                           f"be broadcast to indexing result of shape {list(selected)}")
    return _C.expand(_C.reshape(value, tuple(shape)), selected)
