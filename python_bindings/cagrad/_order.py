"""Ops whose result depends on element order or position, with PyTorch's signatures:
cumsum, cumprod, sort, argsort and topk (tril and triu come from the op registry, cagrad/_ops.py).

sort and topk return torch.return_types-like named pairs (values, indices); the C ops
(ops_sort.c) always sort stably, which PyTorch allows for stable=False too.
"""

from collections import namedtuple

from . import _C
from ._bool_ops import reduce_input
from ._functions import _ValuesIndices, _cast, _dim

_TensorBase = _C.TensorBase


def _no_out(name):
    raise NotImplementedError(f"cagrad's {name}() does not support out=; use the returned "
                              f"tensor")


def _input(fname, input):
    if not isinstance(input, _TensorBase):
        raise TypeError(f"{fname}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")


def _flag(fname, name, value):
    if type(value) is not bool:
        raise TypeError(f"{fname}(): argument '{name}' must be bool, not "
                        f"{type(value).__name__}")
    return value


class _SortResult(_ValuesIndices, namedtuple("sort", ["values", "indices"])):
    __slots__ = ()


class _TopkResult(_ValuesIndices, namedtuple("topk", ["values", "indices"])):
    __slots__ = ()


_SortResult.__name__, _TopkResult.__name__ = "sort", "topk"


def cumsum(input, dim, *, dtype=None, out=None):
    """Running sums along dim; dtype= converts the input first, as PyTorch."""
    _input("cumsum", input)
    if out is not None:
        _no_out("cumsum")
    return _C.cumsum(reduce_input(_cast(input, dtype), "cumsum"), _dim(dim, "cumsum"))


def cumprod(input, dim, *, dtype=None, out=None):
    """Running products along dim; dtype= converts the input first, as PyTorch."""
    _input("cumprod", input)
    if out is not None:
        _no_out("cumprod")
    return _C.cumprod(reduce_input(_cast(input, dtype), "cumprod"), _dim(dim, "cumprod"))


def sort(input, dim=-1, descending=False, *, stable=False, out=None):
    _input("sort", input)
    if out is not None:
        _no_out("sort")
    values, indices = _C.sort(reduce_input(input, "sort"), _dim(dim, "sort"),
                              _flag("sort", "descending", descending),
                              _flag("sort", "stable", stable))
    if input._dtype != values._dtype:  # a bool input, sorted as int64 (0/1)
        values = _C.to_dtype(values, input._dtype)
    return _SortResult(values, indices)


def argsort(input, dim=-1, descending=False, *, stable=False):
    return sort(input, dim, descending, stable=stable).indices


def topk(input, k, dim=-1, largest=True, sorted=True, *, out=None):
    """The k largest (smallest) values along dim and their positions. The values always
    come in order, which PyTorch allows for sorted=False too."""
    _input("topk", input)
    if out is not None:
        _no_out("topk")
    return _TopkResult(*_C.topk(input, _dim(k, "topk"), _dim(dim, "topk"),
                                _flag("topk", "largest", largest),
                                _flag("topk", "sorted", sorted)))
