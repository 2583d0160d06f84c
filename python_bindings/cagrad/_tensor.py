"""cagrad.Tensor: the Python face of a C tensor (_C.TensorBase), with PyTorch's members.

The op methods are the functions of _functions.py bound into the class (x.exp() is
cagrad.exp(x)); this module adds what only a tensor object has: properties, autograd
methods, conversions, operators, and indexing and repr, whose work is in _indexing.py and
_tensor_repr.py.
"""

import copy as _copy
import operator
import warnings
import weakref

import numpy as np

from . import _C
from . import _bool_ops
from . import _creation
from . import _ops
from ._ops import FUNCTIONS as _REGISTRY
from . import _functions as F
from . import _int_ops
from . import _order
from . import _scatter
from . import _more_ops
from . import _more_ops2
from . import _more_stats
from . import _random
from . import _sampling
from ._dtype import (CPU, DTYPES, Size, check_device, check_dtype, check_memory_format,
                     contiguous_format, float32, float64, int64, preserve_format,
                     suggests_channels_last)
from ._dtype import device as _device_type
from ._dtype import dtype as _dtype_type
from ._dtype import bfloat16 as _bfloat16_dtype
from ._dtype import bool as _bool_dtype
from ._dtype import float16 as _half_dtype
from ._graph_break import break_graph
from ._grad_mode import no_grad as _no_grad
from ._indexing import _BASIC as _BASIC_ITEMS
from ._indexing import index_items as _index_items
from ._indexing import (_assign_advanced, _assign_masked, _has_advanced, _index,
                        _is_mask_item, _scalar_value, _slice, _to_code)
from ._tensor_repr import _repr
from . import autograd as _autograd
from .autograd import graph as _graph

_TensorBase = _C.TensorBase
_INT64 = 2  # _C dtype code
_BOOL = _bool_ops.BOOL
_NO_STOP = 2**63 - 1  # slice end for `start:` (C clamps it like Python)

_NEG, _ABS = _REGISTRY["neg"], _REGISTRY["abs"]


# ------------------------------------------------------------------------------ hooks
class RemovableHandle:
    """Returned by register_hook(); remove() unregisters the hook (also as `with` block).

    It holds the tensor weakly: once the tensor object is gone, remove() does nothing.
    remove() switches the hook off at once (`live`, read by its wrapper) and unlinks it
    once no backward runs (autograd.variable._after_backwards): a hook may remove itself.
    """

    __slots__ = ("_tensor", "id", "_live", "__weakref__")

    def __init__(self, tensor, hook_id, live):
        self._tensor = weakref.ref(tensor)
        self.id = hook_id
        self._live = live

    def remove(self):
        t = self._tensor and self._tensor()
        self._tensor = None  # a second remove() is a no-op
        if t is not None:
            self._live[0] = False
            ref, hook_id = weakref.ref(t), self.id
            _autograd.variable._after_backwards(
                lambda: ref() is not None and _C.remove_hook(ref(), hook_id))

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        self.remove()


# ------------------------------------------------------------------------------ helpers
def _shape_args(shape):
    """reshape(2, 3) / reshape((2, 3)) / reshape([2, 3]) -> (2, 3)."""
    if len(shape) == 1 and type(shape[0]) is not int:
        return tuple(shape[0])
    return shape


def _legacy_new(args, kwargs):
    """torch.Tensor(...) without a source tensor: Tensor(2, 3) and Tensor(Size) are
    uninitialised, Tensor(data) copies data as the default float dtype."""
    if kwargs:
        raise TypeError(f"Tensor() takes no keyword arguments, got {sorted(kwargs)}; use "
                        f"cagrad.tensor(data, dtype=..., requires_grad=...)")
    if len(args) == 1 and not isinstance(args[0], (int, Size)):
        return _creation.tensor(args[0], dtype=_creation.get_default_dtype())
    return _creation.empty(*args) if args else _creation.empty(0)


_GRAPH_BREAK_REASONS = {
    name: f"Tensor.{name}() needs a concrete value (graph break)"
    for name in ("item", "tolist", "numpy", "__bool__", "__float__", "__int__", "__index__")
}


# ------------------------------------------------------------------------------ the class
class Tensor(_TensorBase):
    """A multi-dimensional array that records the ops run on it for backward(), like
    torch.Tensor. Create tensors with cagrad.tensor(), zeros(), randn(), from_numpy()..."""

    __module__ = "cagrad"
    __array_priority__ = 1000  # numpy defers `array OP tensor` to the tensor's operators
    __hash__ = object.__hash__  # identity, since __eq__ is elementwise

    def __new__(cls, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], _TensorBase):
            return super().__new__(cls, args[0])  # a detached alias (used by nn.Parameter)
        return super().__new__(cls, _legacy_new(args, kwargs))

    # ---------------------------------------------------------------- metadata
    @property
    def shape(self):
        return Size(self._shape)

    @property
    def dtype(self):
        return DTYPES[self._dtype]

    device = CPU
    is_cuda = False
    is_cpu = True

    def dim(self):
        return self.ndim

    ndimension = dim

    def size(self, dim=None):
        if dim is None:
            return Size(self._shape)
        return self._shape[_dim_index(self, dim)]

    def stride(self, dim=None):
        if dim is None:
            return self._strides
        return self._strides[_dim_index(self, dim)]

    nelement = _TensorBase.numel

    def element_size(self):
        return DTYPES[self._dtype].itemsize

    def is_floating_point(self):
        return self._dtype < _INT64  # codes 0, 1: float32, float64

    def data_ptr(self):
        return self._data_ptr

    def _is_view(self):
        """Whether view ops made this tensor over another's memory (that one is _base)."""
        return self._base is not None

    # ---------------------------------------------------------------- autograd
    # (requires_grad and grad: properties with torch's checks, set after the class)
    def requires_grad_(self, requires_grad=True):
        if not isinstance(requires_grad, bool):
            raise TypeError(f"requires_grad_(): argument 'requires_grad' (position 1) must be "
                            f"bool, not {type(requires_grad).__name__}")
        self.requires_grad = requires_grad
        return self

    @property
    def grad_fn(self):
        return _graph.grad_fn_of(self)

    @property
    def retains_grad(self):
        return self._retains_grad

    def backward(self, gradient=None, retain_graph=None, create_graph=False, inputs=None):
        """Accumulate d(self)/d(leaf) into every leaf's .grad. gradient is needed unless
        self has one element; retain_graph=True keeps the graph for another backward."""
        if inputs is not None or create_graph:
            _autograd.backward(self, gradient, retain_graph, create_graph, inputs=inputs)
            return
        gradient = _autograd._make_grad(self, gradient, 0)
        _autograd._check_outputs((self,))
        # grad mode off while it runs, as in torch; queue_callback's callbacks run at the
        # scope's end; anomaly mode checks for NaNs
        with _autograd._engine_grad_mode(False), _autograd.variable._BackwardScope((self,)), \
                _autograd.anomaly_mode.checking((self,)):
            _C.backward(self, gradient, bool(retain_graph))

    def detach(self):
        return _C.detach(self)

    def detach_(self):
        """In place: the tensor leaves its graph and becomes a leaf that does not require
        grad (a view made by a view op refuses, as in torch)."""
        if self.grad_fn is not None:
            _C.detach_(self)
        else:
            self.requires_grad = False
        return self

    def retain_grad(self):
        if not self.requires_grad:
            raise RuntimeError("can't retain_grad on Tensor that has requires_grad=False")
        _C.retain_grad(self)

    def register_hook(self, hook):
        """hook(grad) runs when self's gradient is computed; it may return a replacement
        gradient (same shape and dtype) or None. Returns a RemovableHandle."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        if not callable(hook):
            raise TypeError(f"register_hook() takes a callable, not {type(hook).__name__}")
        live = [True]
        return RemovableHandle(self, _C.register_hook(self, _checked_hook(hook, live)), live)

    def register_post_accumulate_grad_hook(self, hook):
        """hook(tensor) runs after a leaf's .grad has been updated by backward()."""
        if not self.requires_grad:
            raise RuntimeError("cannot register a hook on a tensor that doesn't require "
                               "gradient")
        if self.grad_fn is not None:
            raise RuntimeError("post accumulate grad hooks cannot be registered on non-leaf "
                               "tensors")
        if not callable(hook):
            raise TypeError(f"register_post_accumulate_grad_hook() takes a callable, not "
                            f"{type(hook).__name__}")
        live = [True]
        return RemovableHandle(self, _C.register_post_accumulate_grad_hook(
            self, _post_accumulate_hook(hook, self, live)), live)

    @property
    def data(self):
        """A detached alias: same storage, outside the autograd graph."""
        return _C.detach(self)

    @data.setter
    def data(self, value):
        # torch swaps in value's storage; cagrad copies the values into the existing one.
        if not isinstance(value, _TensorBase) or value._shape != self._shape:
            raise RuntimeError("cagrad supports `t.data = other` only for a Tensor of the same "
                               "shape (it copies the values); to change the shape make a new "
                               "tensor instead")
        alias = _C.detach(self)
        _C.copy_(alias, _to_code(_C.detach(value), self._dtype))

    # ---------------------------------------------------------------- values (graph breaks)
    def item(self):
        break_graph(_GRAPH_BREAK_REASONS["item"])
        return self._item()

    def tolist(self):
        break_graph(_GRAPH_BREAK_REASONS["tolist"])
        return np.asarray(self).tolist()

    def numpy(self, *, force=False):
        """A numpy array sharing memory with the tensor."""
        if not force and self.requires_grad:
            raise RuntimeError("Can't call numpy() on Tensor that requires grad. Use "
                               "tensor.detach().numpy() instead.")
        break_graph(_GRAPH_BREAK_REASONS["numpy"])
        return np.asarray(self)

    def __array__(self, dtype=None, copy=None):
        arr = np.asarray(memoryview(self))  # zero-copy through the buffer protocol
        if dtype is not None and np.dtype(dtype) != arr.dtype:
            if copy is False:
                raise ValueError(f"converting a {self.dtype} tensor to numpy {dtype} needs a "
                                 f"copy, but copy=False was given")
            return arr.astype(dtype)
        return arr.copy() if copy else arr

    def __bool__(self):
        n = self.numel()
        if n != 1:
            raise RuntimeError(f"Boolean value of Tensor with "
                               f"{'no values' if n == 0 else 'more than one value'} is "
                               f"ambiguous; reduce it first, e.g. with .any() or .all()")
        break_graph(_GRAPH_BREAK_REASONS["__bool__"])
        return bool(self._item())

    def __float__(self):
        break_graph(_GRAPH_BREAK_REASONS["__float__"])
        return float(self._item())

    def __int__(self):
        break_graph(_GRAPH_BREAK_REASONS["__int__"])
        return int(self._item())

    def __index__(self):
        if self._dtype != _INT64 or self.numel() != 1:
            raise TypeError("only integer tensors of a single element can be converted to an "
                            "index")
        break_graph(_GRAPH_BREAK_REASONS["__index__"])
        return self._item()

    def __format__(self, format_spec):
        # torch formats the Python number of every 0-d tensor, empty spec included
        # (f"{tensor(1.0)}" is "1.0"); other tensors format as their repr
        if self.ndim == 0:
            return format(self.item(), format_spec)
        return object.__format__(self, format_spec)

    def __len__(self):
        shape = self._shape
        if not shape:
            raise TypeError("len() of a 0-d tensor")
        return shape[0]

    def __iter__(self):
        if not self._shape:
            raise TypeError("iteration over a 0-d tensor")
        return iter(F.unbind(self, 0))

    def __contains__(self, element):
        return bool(F.any(F.eq(self, element)))

    def __repr__(self):
        return _repr(self)

    # ---------------------------------------------------------------- copies and dtypes
    def contiguous(self, memory_format=contiguous_format):
        # PyTorch returns a contiguous self even for preserve_format, and refuses it otherwise
        if not (memory_format is preserve_format and self.is_contiguous()):
            check_memory_format("contiguous", memory_format)
        return _C.contiguous(self)

    def _convert(self, fname, dtype, copy, memory_format):
        """self in dtype (None: its own), a new tensor if copy. A new tensor is contiguous,
        and when self itself comes back PyTorch's default preserve_format holds trivially.
        contiguous_format copies only what PyTorch copies: channels-last strides."""
        same = dtype is None or dtype._code == self._dtype
        if memory_format is not preserve_format or copy or not same:
            check_memory_format(fname, memory_format, like=self)
        if same and (copy or (memory_format is contiguous_format and
                              suggests_channels_last(self))):
            return F.clone(self)
        return self if same else _to_code(self, dtype._code)

    def float(self, memory_format=None):
        return self._convert("float", float32, False, memory_format)

    def double(self, memory_format=None):
        return self._convert("double", float64, False, memory_format)

    def long(self, memory_format=None):
        return self._convert("long", int64, False, memory_format)

    def bool(self, memory_format=None):
        return self._convert("bool", _bool_dtype, False, memory_format)

    def half(self, memory_format=None):  # a name-only dtype too: the same TypeError
        return self._convert("half", _half_dtype, False, memory_format)

    def bfloat16(self, memory_format=None):
        return self._convert("bfloat16", _bfloat16_dtype, False, memory_format)

    def to(self, *args, dtype=None, device=None, non_blocking=False, copy=False,
           memory_format=None):
        """to(dtype), to(device), to(other_tensor) or to(device, dtype), then optionally
        non_blocking and copy: converts the dtype; the device can only be the CPU, where
        non_blocking is a no-op (as in PyTorch)."""
        flags = []
        for a in args:
            if type(a) is _dtype_type or a is bool:  # Python's bool names cagrad.bool
                dtype = check_dtype(a)
            elif isinstance(a, _TensorBase):
                dtype = DTYPES[a._dtype]
            elif isinstance(a, (str, _device_type)):
                check_device(a)
            elif type(a) is bool:  # to(dtype, non_blocking, copy)
                flags.append(a)
            else:
                raise TypeError(f"to() takes a cagrad dtype, a device or a Tensor, not {a!r}")
        if len(flags) > 2:
            raise TypeError(f"to() takes at most two bools (non_blocking, copy), got {len(flags)}")
        if len(flags) == 2:
            copy = flags[1]
        check_device(device)
        if dtype is not None:
            dtype = check_dtype(dtype)
        return self._convert("to", dtype, copy, memory_format)

    # new_*: tensors with self's dtype unless told otherwise
    def new_zeros(self, *size, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
        _creation._check_options("new_zeros", device, layout, pin_memory)
        return _creation.zeros(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_ones(self, *size, dtype=None, layout=None, device=None, requires_grad=False,
                 pin_memory=False):
        _creation._check_options("new_ones", device, layout, pin_memory)
        return _creation.ones(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_empty(self, *size, dtype=None, layout=None, device=None, requires_grad=False,
                  pin_memory=False):
        _creation._check_options("new_empty", device, layout, pin_memory)
        return _creation.empty(*size, dtype=dtype or self.dtype, requires_grad=requires_grad)

    def new_full(self, size, fill_value, *, dtype=None, layout=None, device=None,
                 requires_grad=False, pin_memory=False):
        _creation._check_options("new_full", device, layout, pin_memory)
        return _creation.full(size, fill_value, dtype=dtype or self.dtype,
                              requires_grad=requires_grad)

    def new_tensor(self, data, dtype=None, device=None, requires_grad=False):
        return _creation.tensor(data, dtype=dtype or self.dtype, device=device,
                                requires_grad=requires_grad)

    def type_as(self, other):
        return _to_code(self, other._dtype)

    def cpu(self, memory_format=None):
        return self._convert("cpu", None, False, memory_format)

    def cuda(self, *args, **kwargs):
        raise RuntimeError("cagrad runs on the CPU only; .cuda() is not available")

    @property
    def T(self):
        return _C.permute(self, tuple(range(self.ndim - 1, -1, -1)))

    @property
    def mT(self):
        return _C.transpose(self, -2, -1)

    def __deepcopy__(self, memo):
        if not self.is_leaf:
            raise RuntimeError("Only Tensors created explicitly by the user (graph leaves) "
                               "support the deepcopy protocol at the moment.  If you were "
                               "attempting to deepcopy a module, this may be because of a "
                               "torch.nn.utils.weight_norm usage, see "
                               "https://github.com/pytorch/pytorch/pull/103001")
        new = Tensor.__new__(type(self), F.clone(_C.detach(self)))
        new.requires_grad = self.requires_grad
        memo[id(self)] = new
        if self.grad is not None:
            new.grad = _copy.deepcopy(self.grad, memo)
        new.__dict__.update(_copy.deepcopy(self.__dict__, memo))
        return new

    def __reduce_ex__(self, protocol):
        data = np.array(memoryview(self))  # a copy of the values
        return (_rebuild, (type(self), data, self.requires_grad, self.__dict__))

    # ---------------------------------------------------------------- shape methods
    def view(self, *shape):
        if len(shape) == 1 and type(shape[0]) is _dtype_type:
            raise NotImplementedError("cagrad has no view(dtype) (reinterpreting the bytes); "
                                      "convert values with .to(dtype)")
        return _C.view(self, _shape_args(shape))

    def reshape(self, *shape):
        return _C.reshape(self, _shape_args(shape))

    def permute(self, *dims):
        return _C.permute(self, _shape_args(dims))

    def expand(self, *sizes):
        return _C.expand(self, _shape_args(sizes))

    def expand_as(self, other):
        return _C.expand(self, other._shape)

    def view_as(self, other):
        return _C.view(self, other._shape)

    def as_strided(self, size, stride, storage_offset=None):
        return F.as_strided(self, size, stride, storage_offset)

    def reshape_as(self, other):
        return _C.reshape(self, other._shape)

    def where(self, condition, other):
        return F.where(condition, self, other)

    # ---------------------------------------------------------------- in-place ops
    # They bump the version counter, so backward notices a changed saved tensor.
    def add_(self, other, *, alpha=1):
        # a bool, or another dtype: torch computes in the promoted dtype and casts into self
        if self._dtype == _BOOL or getattr(other, "_dtype", self._dtype) != self._dtype:
            return _bool_ops.inplace(self, other, alpha, "add_")
        if isinstance(other, _TensorBase):
            _C.add_(self, other, alpha)
        else:
            value = _scalar_value(self, other, "add_") * alpha
            _C.add_(self, _C.full(self._dtype, (), value), 1)
        return self

    def sub_(self, other, *, alpha=1):
        if self._dtype == _BOOL or getattr(other, "_dtype", None) == _BOOL:
            F.sub(self, other, alpha=alpha)  # torch's errors for bools in a subtraction
        return self.add_(other, alpha=-alpha)

    def mul_(self, other):
        if self._dtype == _BOOL or getattr(other, "_dtype", self._dtype) != self._dtype:
            return _bool_ops.inplace(self, other, None, "mul_")
        if isinstance(other, _TensorBase):
            _C.mul_(self, other)
        else:
            _C.mul_scalar_(self, _scalar_value(self, other, "mul_"))
        return self

    def div_(self, other, *, rounding_mode=None):
        # computed out of place so the values equal div() exactly, then copied in
        result = F.div(self, other, rounding_mode=rounding_mode)
        # int64 / x is float: torch's error (copy_ would truncate); float64 into float32 casts
        return _bool_ops.copy_result(self, result)

    divide_ = div_

    def true_divide_(self, other):
        return self.div_(other)

    def index_fill_(self, dim, index, value):
        # computed out of place, then copied in (like div_)
        _C.copy_(self, F.index_fill(self, dim, index, value))
        return self

    def tril_(self, diagonal=0):
        # computed out of place, then copied in (like div_)
        _C.copy_(self, _REGISTRY["tril"](self, diagonal))
        return self

    def triu_(self, diagonal=0):
        _C.copy_(self, _REGISTRY["triu"](self, diagonal))
        return self

    def cumsum_(self, dim, *, dtype=None):
        _C.copy_(self, _to_code(_order.cumsum(self, dim, dtype=dtype), self._dtype))
        return self

    def cumprod_(self, dim, *, dtype=None):
        _C.copy_(self, _to_code(_order.cumprod(self, dim, dtype=dtype), self._dtype))
        return self

    def zero_(self):
        _C.zero_(self)
        return self

    def fill_(self, value):
        if isinstance(value, _TensorBase):
            _C.copy_(self, _to_code(value, self._dtype))
        else:
            _C.fill_(self, _scalar_value(self, value, "fill_"))
        return self

    def copy_(self, src, non_blocking=False):
        """Copy src's values (broadcast to self's shape, converted to self's dtype)."""
        if not isinstance(src, _TensorBase):
            raise TypeError(f"copy_(): src must be a Tensor, not {type(src).__name__}")
        _C.copy_(self, _to_code(src, self._dtype))
        return self

    def __iadd__(self, other):
        return self.add_(other)

    def __isub__(self, other):
        return self.sub_(other)

    def __imul__(self, other):
        return self.mul_(other)

    def __itruediv__(self, other):
        return self.div_(other)

    # ---------------------------------------------------------------- operators
    __add__ = __radd__ = F.add_op
    __sub__ = F.sub_op
    __rsub__ = F.rsub_op
    __mul__ = __rmul__ = F.mul_op
    __truediv__ = _int_ops.true_divide_operator(F.div, F.div_op)
    __rtruediv__ = _int_ops.reflected_true_divide(F.div, F.rdiv_op)
    __pow__ = F.pow_op
    __rpow__ = F.rpow_op
    __lt__ = F.lt_op
    __le__ = F.le_op
    __gt__ = F.gt_op
    __ge__ = F.ge_op
    __eq__ = F.eq_op
    __ne__ = F.ne_op

    def __matmul__(self, other):
        if isinstance(other, _TensorBase):
            return _C.matmul(self, other)
        if isinstance(other, np.ndarray):
            return _C.matmul(self, _creation.tensor(other))
        return NotImplemented

    def __rmatmul__(self, other):
        if isinstance(other, np.ndarray):
            return _C.matmul(_creation.tensor(other), self)
        return NotImplemented

    def __neg__(self):
        return _NEG(self)

    def __pos__(self):
        if self._dtype == _bool_dtype._code:
            raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
        return self

    def __abs__(self):
        return _ABS(self)

    # Logical operators on bool tensors (and, as cagrad always allowed, float 0/1 masks);
    # cagrad has no bitwise ops on int64.
    def __invert__(self):
        _check_mask(self, "~")
        return F.logical_not(self)

    def __and__(self, other):
        _check_mask(self, "&")
        _check_mask(other, "&")
        return F.logical_and(self, other)

    def __or__(self, other):
        _check_mask(self, "|")
        _check_mask(other, "|")
        return F.logical_or(self, other)

    def __xor__(self, other):
        _check_mask(self, "^")
        _check_mask(other, "^")
        return F.logical_xor(self, other)

    __rand__, __ror__, __rxor__ = __and__, __or__, __xor__

    # ---------------------------------------------------------------- indexing
    def __getitem__(self, index):
        t = type(index)
        if t is int:
            return _C.select(self, 0, index)
        if t is slice:
            return _slice(self, 0, index)
        return _index(self, _index_items(index))

    def __setitem__(self, index, value):
        items = _index_items(index)
        # basic items (ints, slices, None, ...) give a view: writing through it, in the
        # graph too (the C library rebases self's history, as PyTorch's CopySlices)
        basic = all(type(it) in _BASIC_ITEMS for it in items)
        if not basic and _ops.in_graph(self, (value,)):
            _setitem_in_graph(self, index, value)
            return
        if len(items) == 1 and _is_mask_item(items[0]):
            _assign_masked(self, items[0], value)
            return
        if _has_advanced(items):  # index tensors, lists, ranges: torch's index_put_
            _assign_advanced(self, items, value)
            return
        target = _index(self, items, writable=True)
        if isinstance(value, _TensorBase):
            _C.copy_(target, _to_code(_drop_leading_ones(value, target.ndim), self._dtype))
        elif isinstance(value, (list, tuple, np.ndarray)):
            _C.copy_(target, _creation.tensor(value, dtype=DTYPES[self._dtype]))
        else:
            _C.fill_(target, _scalar_value(self, value, "__setitem__"))


def _drop_leading_ones(value, ndim):
    """value without the leading 1-dims it has beyond ndim: torch's item assignment takes a
    [1, n] value for an [n] target."""
    while value.ndim > ndim and value.shape[0] == 1:
        value = _C.reshape(value, tuple(value.shape[1:]))
    return value


def _setitem_in_graph(self, index, value):
    """self[index] = value for a tensor in the autograd graph, as torch records it (its
    CopySlices): the selected elements take value, so their gradient goes to value (summed
    over what value was broadcast to) and not to self's old values."""
    if self.is_leaf and self.requires_grad:
        raise RuntimeError("a leaf Variable that requires grad is being used in an in-place "
                           "operation.")
    with _no_grad():
        selected = _creation.zeros(tuple(self.shape), dtype=_bool_dtype)
        selected[index] = True
    if not isinstance(value, _TensorBase) or not value.requires_grad:
        with _no_grad():
            placed = _creation.zeros(tuple(self.shape), dtype=self.dtype)
            placed[index] = value.detach() if isinstance(value, _TensorBase) else value
        _ops.graph_inplace(self, lambda x: F.where(selected, placed, x))
        return
    _ops.graph_inplace(self, lambda x: _AssignSlices.apply(x, value, index, selected))


def _sum_to(g, shape):
    """g summed over the dims it has beyond shape and those shape broadcasts (size 1)."""
    while g.dim() > len(shape):
        g = g.sum(0)
    if g.dim() < len(shape):  # value had leading 1-dims, which the assignment dropped
        g = g.reshape((1,) * (len(shape) - g.dim()) + tuple(g.shape))
    for d, n in enumerate(shape):
        if n == 1 and g.shape[d] != 1:
            g = g.sum(d, keepdim=True)
    return g


class _AssignSlices(_autograd.Function):
    """out = x with out[index] = value: torch's CopySlices for a value that requires grad."""

    @staticmethod
    def forward(ctx, x, value, index, selected):
        ctx.index, ctx.selected = index, selected
        ctx.value_shape, ctx.value_dtype = tuple(value.shape), value.dtype
        out = x.detach().clone()
        out[index] = value.detach()
        return out

    @staticmethod
    def backward(ctx, g):
        gx = F.where(ctx.selected, _creation.zeros((), dtype=g.dtype), g)
        gv = _sum_to(g[ctx.index], ctx.value_shape).reshape(ctx.value_shape)
        return gx, gv.to(ctx.value_dtype), None, None


# ------------------------------------------------------------------------------ autograd checks
# torch's checks and messages for the attributes and hooks of Tensor's autograd section.
_C_GRAD = _TensorBase.grad
_C_REQUIRES_GRAD = _TensorBase.requires_grad
_NON_LEAF_GRAD_WARNING = (
    "The .grad attribute of a Tensor that is not a leaf Tensor is being accessed. Its .grad "
    "attribute won't be populated during autograd.backward(). If you indeed want the .grad "
    "field to be populated for a non-leaf Tensor, use .retain_grad() on the non-leaf Tensor. "
    "If you access the non-leaf Tensor by mistake, make sure you access the leaf Tensor "
    "instead. See github.com/pytorch/pytorch/pull/30531 for more information.")
# names of dtypes in torch's messages: (the C++ type's name, the ScalarType's)
_GRAD_DTYPE_NAMES = {"float32": ("float", "Float"), "float64": ("double", "Double"),
                     "int64": ("long int", "Long"), "bool": ("bool", "Bool")}


def _get_grad(t):
    g = _C_GRAD.__get__(t)
    if g is None and not t.is_leaf and not t._retains_grad:
        warnings.warn(_NON_LEAF_GRAD_WARNING, UserWarning, stacklevel=2)
    return g


def _set_grad(t, value):
    if value is not None:
        if not isinstance(value, _TensorBase):
            raise TypeError(f"assigned grad expected to be a Tensor or None but got grad of "
                            f"type {type(value).__name__}")
        if value is t:
            raise RuntimeError("can't assign Variable as its own grad")
        if value._dtype != t._dtype:
            got = _GRAD_DTYPE_NAMES.get(str(value.dtype).split(".")[-1], ("?", "?"))[0]
            want = _GRAD_DTYPE_NAMES.get(str(t.dtype).split(".")[-1], ("?", "?"))[1]
            raise RuntimeError(
                f"attempting to assign a gradient with dtype '{got}' to a tensor with "
                f"grad_dtype '{want}'. The gradient must match the tensor's grad_dtype "
                f"(defaults to the tensor's dtype). You can set the tensor's grad_dtype "
                f"attribute with a specific dtype, or None to allow any dtype. Set grad_dtype "
                f"with caution. Diverging the dtypes of a tensor and its gradient may break "
                f"downstream systems that assume they match.")
        if value._shape != t._shape:
            raise RuntimeError(f"attempting to assign a gradient of size '{list(value._shape)}' "
                               f"to a tensor of size '{list(t._shape)}'. Please ensure that "
                               f"the gradient and the tensor are the same size")
    _C_GRAD.__set__(t, value)


def _set_requires_grad(t, value):
    if not isinstance(value, bool):  # None: `del t.requires_grad`
        raise RuntimeError("requires_grad must be a bool")
    if not t.is_leaf and not value:
        raise RuntimeError("you can only change requires_grad flags of leaf variables. If you "
                           "want to use a computed variable in a subgraph that doesn't require "
                           "differentiation use var_no_grad = var.detach().")
    if value and not t.is_floating_point():
        raise RuntimeError("only Tensors of floating point dtype can require gradients")
    _C_REQUIRES_GRAD.__set__(t, value)


def _delete_grad(t):
    _set_grad(t, None)


def _delete_requires_grad(t):
    _set_requires_grad(t, None)


# The C attributes, wrapped with torch's checks and messages; reading requires_grad stays
# a C call.
Tensor.requires_grad = property(_C_REQUIRES_GRAD.__get__, _set_requires_grad,
                                _delete_requires_grad, _C_REQUIRES_GRAD.__doc__)
Tensor.grad = property(_get_grad, _set_grad, _delete_grad, _C_GRAD.__doc__)


def _hook_name(hook):
    return getattr(hook, "__name__", "<unknown>")


def _legacy_type_name(t):
    return {"float32": "torch.FloatTensor", "float64": "torch.DoubleTensor",
            "int64": "torch.LongTensor", "bool": "torch.BoolTensor"}.get(
                str(t.dtype).split(".")[-1], str(t.dtype))


def _checked_hook(hook, live):
    """hook, with torch's checks of what it returns: None, or a tensor of the gradient's
    dtype and shape. live: [False] once removed (RemovableHandle)."""
    def run(grad):
        if not live[0]:
            return None
        result = hook(grad)
        if result is None:
            return None
        if not isinstance(result, _TensorBase):
            raise TypeError(f"expected Variable, but hook returned "
                            f"'{type(result).__name__}'")
        if result._dtype != grad._dtype:
            raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the type of value (was "
                               f"{_legacy_type_name(grad)} got {_legacy_type_name(result)})")
        if result._shape != grad._shape:
            raise RuntimeError(f"hook '{_hook_name(hook)}' has changed the size of value")
        return result
    return run


def _post_accumulate_hook(hook, leaf, live):
    """hook, called with the leaf's own Python object (the library passes a new one over
    the same tensor, and code such as an optimizer step per parameter keys dicts by the
    parameter), and torch's checks of its result: None, or the leaf itself. live: [False]
    once removed (RemovableHandle)."""
    ref = weakref.ref(leaf)  # weak: the hook lives in the C tensor the leaf holds

    def run(tensor):
        if not live[0]:
            return None
        leaf = ref()
        leaf = tensor if leaf is None else leaf
        result = hook(leaf)
        if result is None or result is leaf:
            return
        if not isinstance(result, _TensorBase):
            raise TypeError(f"expected Variable, but hook returned '{type(result).__name__}'")
        raise RuntimeError("Tensor post accumulate grad hooks should return None.")
    return run


# ------------------------------------------------------------------------------ methods
# Ops whose method is exactly the function of _functions.py (self is the input).
for _name in (
        "add sub subtract mul multiply div divide true_divide pow maximum minimum "
        "lt less le less_equal gt greater ge greater_equal eq ne not_equal "
        "logical_not logical_and logical_or logical_xor "
        "negative absolute "
        "clamp clip sum mean logsumexp max min amax amin argmax argmin any all "
        "transpose swapaxes swapdims t squeeze unsqueeze flatten narrow select split chunk "
        "unbind masked_fill index_select index_fill gather matmul mm bmm softmax log_softmax "
        "clone"
).split():
    setattr(Tensor, _name, getattr(F, _name))
del _name
for _name in ("cumsum", "cumprod", "sort", "argsort", "topk"):  # position and order (_order.py)
    setattr(Tensor, _name, getattr(_order, _name))
del _name
for _name in ("scatter", "scatter_", "scatter_add", "scatter_add_", "index_add",
              "index_add_"):  # the scatter family (_scatter.py)
    setattr(Tensor, _name, getattr(_scatter, _name))
del _name
for _name in (  # the composites of _more_ops.py that PyTorch has as methods
        "var std prod norm count_nonzero flip roll repeat tile broadcast_to outer diag "
        "diagonal trace repeat_interleave isnan isinf isfinite nan_to_num isclose allclose "
        "equal masked_select nonzero sign addcmul addcdiv lerp clamp_ masked_fill_ "
        "addcmul_ addcdiv_ lerp_ uniform_ normal_"
).split():
    setattr(Tensor, _name, getattr(_more_ops, _name))
del _name
for _name in (  # the composites of _more_ops2.py / _more_stats.py that are methods in torch
        "movedim moveaxis unflatten take_along_dim take argwhere diff kron cross rot90 "
        "narrow_copy unique unique_consecutive bincount histc"
).split():
    setattr(Tensor, _name, getattr(_more_ops2, _name))
for _name in (
        "median nanmedian kthvalue mode quantile nanquantile nansum nanmean aminmax cov "
        "corrcoef cummax cummin logcumsumexp"
).split():
    setattr(Tensor, _name, getattr(_more_stats, _name))
del _name
# the samplers of _sampling.py (draws from cagrad's Generators) and multinomial
for _name in "random_ bernoulli_ exponential_ geometric_ cauchy_ log_normal_".split():
    setattr(Tensor, _name, getattr(_sampling, _name))
Tensor.bernoulli = _sampling.bernoulli_method
Tensor.multinomial = _random.multinomial
# ...and the ops of the C registry that PyTorch has as methods (relu, tanh, ...)
for _name, _fn in _ops.namespace(_ops.PY_TENSOR).items():
    setattr(Tensor, _name, _fn)
# ...with their other names (arcsin, ...), in-place forms (log1p_, ...) and % and //
for _name, _fn in _ops.tensor_extras().items():
    setattr(Tensor, _name, _fn)
del _name, _fn

_C._set_tensor_class(Tensor)


def _rebuild(cls, data, requires_grad, state):
    t = Tensor.__new__(cls, _creation.tensor(data))
    t.requires_grad = requires_grad
    t.__dict__.update(state)
    return t


def _dim_index(t, dim):
    nd = len(t._shape)
    d = operator.index(dim)
    if not -nd <= d < nd:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[{-nd}, {nd - 1}], but got {d})" if nd else
                         f"Dimension specified as {d} but tensor has no dimensions")
    return d + nd if d < 0 else d


def _check_mask(t, op):
    if isinstance(t, _TensorBase) and t._dtype == _INT64:
        raise TypeError(f"cagrad has no bitwise `{op}` on int64 tensors; `{op}` works on bool "
                        f"tensors (results of comparisons) and float 0/1 masks. For integer "
                        f"bit operations use numpy.")
