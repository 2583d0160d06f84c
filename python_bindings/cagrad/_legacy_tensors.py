"""The legacy tensor types torch.FloatTensor, DoubleTensor, LongTensor and BoolTensor, as
older example programs use them (the gcn example's torch.FloatTensor(array),
torch.LongTensor(labels)): called with data they copy it into a tensor of their dtype,
called with sizes they make an uninitialised tensor, `isinstance(t, torch.FloatTensor)`
tests the dtype, and `t.type(torch.DoubleTensor)` converts (_tensor_misc.type_).
"""

import numbers

import numpy as np

from . import _C
from ._dtype import Size

_TensorBase = _C.TensorBase


class _LegacyTensorType(type):
    """The metaclass: calls make tensors of the class's dtype; isinstance checks it."""

    def __instancecheck__(cls, obj):
        return isinstance(obj, _TensorBase) and obj.dtype is cls.dtype

    def __repr__(cls):
        return f"<class 'torch.{cls.__name__}'>"

    def __call__(cls, *args, device=None):
        import cagrad

        if device is not None and str(cagrad.device(device)) != "cpu":
            raise RuntimeError(f"cagrad runs on the CPU only: {cls.__name__}(device={device!r})")
        if not args:
            return cagrad.empty(0, dtype=cls.dtype)
        if len(args) == 1 and isinstance(args[0], Size):
            args = tuple(args[0])
        if all(isinstance(a, numbers.Integral) and not isinstance(a, bool) for a in args):
            return cagrad.empty(*args, dtype=cls.dtype)  # new(*sizes): uninitialised
        if len(args) > 1:
            raise TypeError(f"new() received an invalid combination of arguments - got "
                            f"({', '.join(type(a).__name__ for a in args)}): pass one "
                            f"sequence of data, or integer sizes")
        data = args[0]
        if isinstance(data, _TensorBase):
            if data.dtype is not cls.dtype:
                raise TypeError(f"expected {cls.dtype} (got {data.dtype})")
            return data.detach()  # an alias of the same data, as in PyTorch
        if isinstance(data, numbers.Number):
            raise TypeError(f"new(): data must be a sequence (got {type(data).__name__})")
        if isinstance(data, np.ndarray) and data.dtype.kind in "iub":
            data = data.astype(np.int64)  # int32 arrays too: cagrad reads int64
        return cagrad.tensor(data, dtype=cls.dtype)


def _make(name, dtype):
    return _LegacyTensorType(name, (), {"dtype": dtype, "__module__": "torch",
                                        "is_sparse": False})


def legacy_types():
    """{name: class} for the four legacy tensor types."""
    from ._dtype import bool as bool_dtype
    from ._dtype import float32, float64, int64

    return {name: _make(name, d) for name, d in (
        ("FloatTensor", float32), ("DoubleTensor", float64), ("LongTensor", int64),
        ("BoolTensor", bool_dtype))}
