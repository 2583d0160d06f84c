"""The pickle half of cagrad.save/cagrad.load: PyTorch's pickled names, both ways.

Saving writes tensors as torch.save does: ``torch._utils._rebuild_tensor_v2(storage,
storage_offset, size, stride, requires_grad, OrderedDict())`` with the storage a persistent
id ``('storage', torch.FloatStorage, key, 'cpu', numel)``; Parameters wrap that in
``torch._utils._rebuild_parameter``. The names are written as GLOBAL opcodes by a pure-Python
pickler, because the C pickler would import torch to check them. Loading maps the same names
onto cagrad's rebuild functions (torch_global).
"""

import ctypes
import pickle
from collections import OrderedDict

import numpy as np

from . import _C, _dtype
from ._tensor import Tensor
from .nn.parameter import Parameter

_TensorBase = _C.TensorBase
_API_DOC = "docs/python-api.md"


class TorchName:
    """A stand-in for the global torch.<module>.<name>: pickled as that name, unimported."""

    __slots__ = ("module", "name")

    def __init__(self, module, name):
        self.module = module
        self.name = name

    def __call__(self, *args):  # pickle's save_reduce insists on a callable
        raise TypeError(f"{self.module}.{self.name} is a name to pickle, not a function")


REBUILD_TENSOR_V2 = TorchName("torch._utils", "_rebuild_tensor_v2")
REBUILD_PARAMETER = TorchName("torch._utils", "_rebuild_parameter")
REBUILD_PARAMETER_WITH_STATE = TorchName("torch._utils", "_rebuild_parameter_with_state")
REBUILD_FROM_TYPE_V2 = TorchName("torch._tensor", "_rebuild_from_type_v2")
TORCH_TENSOR = TorchName("torch", "Tensor")
TORCH_SIZE = TorchName("torch", "Size")
TORCH_DEVICE = TorchName("torch", "device")


class StorageType:
    """A torch storage class (torch.FloatStorage, ...) as named in a checkpoint: the dtype of
    its elements, None when cagrad has no such dtype."""

    def __init__(self, name, torch_dtype, dtype):
        self.name = name
        self.torch_dtype = torch_dtype
        self.dtype = dtype
        self.pickled_name = TorchName("torch", name)


_STORAGE_TYPES = [StorageType(name, torch_dtype, dtype) for name, torch_dtype, dtype in (
    ("FloatStorage", "float32", _dtype.float32), ("DoubleStorage", "float64", _dtype.float64),
    ("LongStorage", "int64", _dtype.int64), ("HalfStorage", "float16", None),
    ("BFloat16Storage", "bfloat16", None), ("IntStorage", "int32", None),
    ("ShortStorage", "int16", None), ("CharStorage", "int8", None),
    ("ByteStorage", "uint8", None), ("BoolStorage", "bool", _dtype.bool),
    ("ComplexFloatStorage", "complex64", None), ("ComplexDoubleStorage", "complex128", None),
    ("UntypedStorage", "uint8", None))]
STORAGE_TYPES = {s.name: s for s in _STORAGE_TYPES}
_STORAGE_OF_CODE = {d._code: STORAGE_TYPES[n] for d, n in (
    (_dtype.float32, "FloatStorage"), (_dtype.float64, "DoubleStorage"),
    (_dtype.int64, "LongStorage"), (_dtype.bool, "BoolStorage"))}


# ----------------------------------------------------------------- storages of a save
class StorageRef:
    """One storage to write: the bytes from address `base` for `nbytes`, shared by every
    tensor whose elements lie in that range. Its persistent id names it in data.pkl."""

    __slots__ = ("key", "storage_type", "base", "nbytes", "itemsize")

    def __init__(self, storage_type, base, nbytes, itemsize):
        self.key = None
        self.storage_type = storage_type
        self.base = base
        self.nbytes = nbytes
        self.itemsize = itemsize

    def persistent_id(self):
        return ("storage", self.storage_type.pickled_name, self.key, "cpu",
                self.nbytes // self.itemsize)

    def payload(self):
        # the tensors that live in this range are alive (the object being saved holds them)
        return ctypes.string_at(self.base, self.nbytes) if self.nbytes else b""


class StoragePlan:
    """Which storage, at which element offset, each saved tensor is written to."""

    def __init__(self):
        self.placement = {}  # id(tensor) -> (StorageRef, offset in elements)
        self.storages = []
        self.late = []  # tensors first met in the writing pass, kept alive until written

    def place(self, tensor, storage, offset):
        self.placement[id(tensor)] = (storage, offset)

    def where(self, tensor):
        """(storage, offset) of tensor. A tensor the recording pass did not meet (one that
        a __reduce__ made afresh) gets a storage of its own, numbered after the others."""
        if id(tensor) not in self.placement:
            storage = _own_storage(tensor)
            storage.key = str(len(self.storages))
            self.storages.append(storage)
            self.late.append(tensor)
            self.place(tensor, storage, (tensor._data_ptr - storage.base) // storage.itemsize)
        return self.placement[id(tensor)]

    def in_key_order(self):
        return sorted(self.storages, key=lambda s: int(s.key))


def _element_span(t):
    """[first byte, end byte) of the memory t's elements occupy."""
    itemsize = _dtype.DTYPES[t._dtype].itemsize
    low = sum(min(0, s * (n - 1)) for n, s in zip(t._shape, t._strides))
    high = sum(max(0, s * (n - 1)) for n, s in zip(t._shape, t._strides))
    return t._data_ptr + low * itemsize, t._data_ptr + (high + 1) * itemsize


def _own_storage(t):
    itemsize = _dtype.DTYPES[t._dtype].itemsize
    if t.numel() == 0:
        return StorageRef(_STORAGE_OF_CODE[t._dtype], t._data_ptr, 0, itemsize)
    low, high = _element_span(t)
    return StorageRef(_STORAGE_OF_CODE[t._dtype], low, high - low, itemsize)


def plan_storages(tensors):
    """Group the tensors (in the order pickling meets them) into storages: tensors of one
    dtype whose memory ranges overlap are views of one buffer and share a storage, as in
    torch.save; keys number the storages in order of first use, as torch does."""
    plan = StoragePlan()
    first_use = {}  # id(storage) -> index of its first tensor
    spans = []
    for order, t in enumerate(tensors):
        if t.numel() == 0:  # no memory to share: an empty storage of its own
            storage = _own_storage(t)
            plan.storages.append(storage)
            plan.place(t, storage, 0)
            first_use[id(storage)] = order
        else:
            spans.append((t._dtype, *_element_span(t), order, t))
    spans.sort(key=lambda span: span[:3])  # by dtype, then address
    group, group_high = [], None
    for span in spans:
        code, low, high, _, t = span
        if group and not (code == group[0][0] and low < group_high
                          and (t._data_ptr - group[0][1]) % _dtype.DTYPES[code].itemsize == 0):
            _close_group(plan, group, group_high, first_use)
            group = []
        group_high = high if not group else max(group_high, high)
        group.append(span)
    if group:
        _close_group(plan, group, group_high, first_use)
    plan.storages.sort(key=lambda s: first_use[id(s)])
    for key, storage in enumerate(plan.storages):
        storage.key = str(key)
    return plan


def _close_group(plan, group, high, first_use):
    code, base = group[0][0], group[0][1]
    itemsize = _dtype.DTYPES[code].itemsize
    storage = StorageRef(_STORAGE_OF_CODE[code], base, high - base, itemsize)
    plan.storages.append(storage)
    first_use[id(storage)] = min(span[3] for span in group)
    for span in group:
        plan.place(span[4], storage, (span[4]._data_ptr - base) // itemsize)


# ------------------------------------------------------------------------ the pickler
class _TensorData:
    """A Parameter's data: pickled as a plain tensor that does not require grad."""

    __slots__ = ("tensor",)

    def __init__(self, tensor):
        self.tensor = tensor


def _user_attributes(t):
    """The Python attributes a user set on t (torch saves them); cagrad's own start with an
    underscore and stay behind."""
    attrs = getattr(t, "__dict__", None) or {}
    return {k: v for k, v in attrs.items() if not k.startswith("_")}


def _save_torch_name(pickler, obj):
    pickler.write(pickle.GLOBAL + f"{obj.module}\n{obj.name}\n".encode("utf-8"))
    pickler.memoize(obj)


def _save_dtype(pickler, obj):
    # torch pickles a dtype as the global torch.<name> (torch.float32, ...)
    pickler.write(pickle.GLOBAL + f"torch\n{obj._name}\n".encode("utf-8"))
    pickler.memoize(obj)


class TorchPickler(pickle._Pickler):
    """A pickler that writes cagrad tensors, Parameters, dtypes, Sizes and devices as the
    torch objects they stand for. With plan None it only records the tensors it meets."""

    dispatch = dict(pickle._Pickler.dispatch)
    dispatch[TorchName] = _save_torch_name
    dispatch[_dtype.dtype] = _save_dtype

    def __init__(self, file, protocol, plan):
        super().__init__(file, protocol)
        self.plan = plan
        self.seen = {}  # id -> tensor, in the order they are met (recording pass)

    def persistent_id(self, obj):
        if type(obj) is StorageRef:
            return obj.persistent_id()
        return None

    def reducer_override(self, obj):
        if isinstance(obj, _TensorBase):
            state = _user_attributes(obj)
            if isinstance(obj, Parameter):
                args = (_TensorData(obj), obj.requires_grad, OrderedDict())
                if state:
                    return (REBUILD_PARAMETER_WITH_STATE, (*args, state))
                return (REBUILD_PARAMETER, args)
            rebuild = self._tensor_reduction(obj, obj.requires_grad)
            if state:  # as torch: the rebuild call, the class and the attributes
                return (REBUILD_FROM_TYPE_V2, (rebuild[0], TORCH_TENSOR, rebuild[1], state))
            return rebuild
        if type(obj) is _TensorData:
            return self._tensor_reduction(obj.tensor, False)
        if type(obj) is _dtype.Size:
            return (TORCH_SIZE, (tuple(obj),))
        if type(obj) is _dtype.device:
            return (TORCH_DEVICE, ("cpu",))
        return NotImplemented

    def _tensor_reduction(self, t, requires_grad):
        if self.plan is None:
            self.seen.setdefault(id(t), t)
            return (REBUILD_TENSOR_V2, ())
        storage, offset = self.plan.where(t)
        return (REBUILD_TENSOR_V2, (storage, offset, tuple(t._shape), tuple(t._strides),
                                    bool(requires_grad), OrderedDict()))


class _NullFile:
    def write(self, data):
        return len(data)


def collect_tensors(obj, protocol):
    """The distinct tensors inside obj, in the order pickling meets them."""
    recorder = TorchPickler(_NullFile(), protocol, None)
    recorder.dump(obj)
    return list(recorder.seen.values())


# ------------------------------------------------------------------------ loading
def _tensor_view(storage, storage_offset, size, stride):
    """A cagrad tensor viewing the loaded storage's buffer (views of one storage share it)."""
    array = storage.array
    size, stride = tuple(size), tuple(stride)
    if any(n == 0 for n in size):
        return _C.from_buffer(np.empty(size, array.dtype))
    last = storage_offset + sum((n - 1) * s for n, s in zip(size, stride))
    if storage_offset < 0 or min(stride, default=0) < 0 or last >= array.size:
        raise RuntimeError(f"corrupt checkpoint: a tensor of size {list(size)} and stride "
                           f"{list(stride)} at offset {storage_offset} does not fit its "
                           f"storage of {array.size} elements")
    view = np.lib.stride_tricks.as_strided(array[storage_offset:], size,
                                           tuple(s * array.itemsize for s in stride))
    return _C.from_buffer(view)


def _rebuild_tensor(storage, storage_offset, size, stride):
    return _tensor_view(storage, storage_offset, size, stride)


def _rebuild_tensor_v2(storage, storage_offset, size, stride, requires_grad=False,
                       backward_hooks=None, metadata=None):
    t = _tensor_view(storage, storage_offset, size, stride)
    t.requires_grad = bool(requires_grad)
    return t


def _set_state(obj, state):
    # torch pickles a tensor's Python attributes as a dict, or (dict, slots dict)
    dicts = state if isinstance(state, tuple) else (state,)
    for attrs in dicts:
        for name, value in (attrs or {}).items():
            setattr(obj, name, value)


def _rebuild_parameter(data, requires_grad, backward_hooks):
    return Parameter(data, requires_grad)


def _rebuild_parameter_with_state(data, requires_grad, backward_hooks, state):
    param = Parameter(data, requires_grad)
    _set_state(param, state)
    return param


def _rebuild_from_type_v2(func, new_type, args, state):
    """A tensor saved with Python attributes (or as a Tensor subclass) in torch."""
    t = func(*args)
    if new_type is Parameter and not isinstance(t, Parameter):
        t = Parameter(t, t.requires_grad)
    elif new_type not in (Tensor, Parameter):
        raise pickle.UnpicklingError(f"cagrad.load(): the checkpoint holds a tensor of class "
                                     f"{new_type!r}; cagrad rebuilds Tensors and Parameters "
                                     f"only (see {_API_DOC})")
    _set_state(t, state)
    return t


_TORCH_FUNCTIONS = {
    ("torch._utils", "_rebuild_tensor"): _rebuild_tensor,
    ("torch._utils", "_rebuild_tensor_v2"): _rebuild_tensor_v2,
    ("torch._utils", "_rebuild_parameter"): _rebuild_parameter,
    ("torch._utils", "_rebuild_parameter_with_state"): _rebuild_parameter_with_state,
    ("torch._tensor", "_rebuild_from_type_v2"): _rebuild_from_type_v2,
    ("torch", "Size"): _dtype.Size,
    ("torch", "device"): _dtype.device,
    ("torch", "Tensor"): Tensor,
    ("torch.nn.parameter", "Parameter"): Parameter,
}
# torch's dtype names, and their aliases, that have a cagrad dtype object
_TORCH_DTYPE_ALIASES = {"float": "float32", "double": "float64", "long": "int64",
                        "half": "float16"}


def _torch_dtype(name):
    name = _TORCH_DTYPE_ALIASES.get(name, name)
    found = getattr(_dtype, name, None)
    return found if type(found) is _dtype.dtype else None


def torch_global(module, name):
    """The cagrad object for a torch name in a checkpoint; an honest error for others."""
    found = _TORCH_FUNCTIONS.get((module, name))
    if found is None and module in ("torch", "torch.storage"):
        found = STORAGE_TYPES.get(name) if module == "torch" or name == "UntypedStorage" \
            else None
        found = found or (_torch_dtype(name) if module == "torch" else None)
    if found is not None:
        return found
    raise pickle.UnpicklingError(f"cagrad.load(): the checkpoint names {module}.{name}, which "
                                 f"cagrad does not have; cagrad loads tensors, Parameters, "
                                 f"state_dicts and containers of them (see {_API_DOC})")
