"""Bitwise ops on int64 and bool tensors: bitwise_and/or/xor/not, bitwise_left/right_shift
and the operators & | ^ ~ << >>.

Integers carry no gradient, so the values are computed exactly with numpy and come back as
new cagrad tensors (outside the autograd graph, as in PyTorch, where these ops have no
derivative). Dtypes follow PyTorch: bool op bool is bool, an int64 tensor or a Python int
makes the result int64, and float tensors raise PyTorch's NotImplementedError.

The operators keep cagrad's older behaviour for float 0/1 masks (`a & b` of two float
masks is their logical and); the named functions follow PyTorch strictly.
"""

import numpy as np

from . import _C
from . import _functions as F

_TensorBase = _C.TensorBase
_FLOATS = (0, 1)  # _C dtype codes of float32, float64
_INT64, _BOOL = 2, 3
_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long", 3: "Bool"}
_KERNELS = {"and": "bitwise_and_cpu", "or": "bitwise_or_cpu", "xor": "bitwise_xor_cpu",
            "lshift": "lshift_cpu", "rshift": "rshift_cpu", "not": "bitwise_not_cpu"}


def _const(arr):
    return _C.copy_from_buffer(np.array(arr, order="C"))  # keeps 0-d (ascontiguousarray does not)


def _operand(value, kernel):
    """(numpy array or Python int/bool, is_tensor) of one operand; floats raise."""
    if isinstance(value, _TensorBase):
        if value._dtype in _FLOATS:
            raise NotImplementedError(f'"{_KERNELS[kernel]}" not implemented for '
                                      f"'{_TYPE_NAMES[value._dtype]}'")
        return np.asarray(memoryview(value)), True
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float):
        raise NotImplementedError(f'"{_KERNELS[kernel]}" not implemented for \'Float\'')
    if not isinstance(value, int):  # bool is an int
        raise TypeError(f"bitwise ops take Tensors, ints or bools, not {type(value).__name__}")
    return value, False


def _result_is_bool(a, a_tensor, b, b_tensor):
    """bool op bool stays bool; an int64 tensor or a Python int (not bool) makes int64."""
    def is_bool(v, tensor):
        return v.dtype == np.bool_ if tensor else isinstance(v, bool)
    return is_bool(a, a_tensor) and is_bool(b, b_tensor)


def _binary(input, other, kernel, np_op):
    a, a_tensor = _operand(input, kernel)
    b, b_tensor = _operand(other, kernel)
    if not (a_tensor or b_tensor):
        raise TypeError("bitwise ops need at least one Tensor operand")
    if _result_is_bool(a, a_tensor, b, b_tensor):
        return _const(np_op(np.asarray(a, dtype=bool), np.asarray(b, dtype=bool)))
    return _const(np_op(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64)))


def bitwise_and(input, other):
    return _binary(input, other, "and", np.bitwise_and)


def bitwise_or(input, other):
    return _binary(input, other, "or", np.bitwise_or)


def bitwise_xor(input, other):
    return _binary(input, other, "xor", np.bitwise_xor)


def bitwise_not(input):
    a, _ = _operand(input, "not")
    return _const(np.logical_not(a) if a.dtype == np.bool_ else np.invert(a))


def _shift(a, b, left):
    """a << b or a >> b on int64 with PyTorch's results for shifts outside [0, 64): a left
    shift gives 0, a right shift the sign (0 or -1)."""
    a, b = np.broadcast_arrays(np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64))
    out_of_range = (b < 0) | (b >= 64)
    safe = np.where(out_of_range, 0, b)
    if left:
        return np.where(out_of_range, 0, np.left_shift(a, safe))
    return np.where(out_of_range, np.right_shift(a, 63), np.right_shift(a, safe))


def _shift_op(input, other, left):
    kernel = "lshift" if left else "rshift"
    a, a_tensor = _operand(input, kernel)
    b, b_tensor = _operand(other, kernel)
    if _result_is_bool(a, a_tensor, b, b_tensor):  # PyTorch has no bool shift kernel
        raise NotImplementedError(f'"{_KERNELS[kernel]}" not implemented for \'Bool\'')
    return _const(_shift(a, b, left))


def bitwise_left_shift(input, other):
    return _shift_op(input, other, True)


def bitwise_right_shift(input, other):
    return _shift_op(input, other, False)


# ------------------------------------------------------------------------------ in place
def _into(self, result):
    """Copy result into self, refusing what PyTorch refuses (int64 into bool)."""
    if result._dtype != self._dtype:
        raise RuntimeError(f"result type {_TYPE_NAMES[result._dtype]} can't be cast to the "
                           f"desired output type {_TYPE_NAMES[self._dtype]}")
    _C.copy_(self, result)
    return self


def _in_place(fn):
    def method(self, other):
        return _into(self, fn(self, other))
    method.__name__ = fn.__name__ + "_"
    return method


bitwise_and_ = _in_place(bitwise_and)
bitwise_or_ = _in_place(bitwise_or)
bitwise_xor_ = _in_place(bitwise_xor)
bitwise_left_shift_ = _in_place(bitwise_left_shift)
bitwise_right_shift_ = _in_place(bitwise_right_shift)


def bitwise_not_(self):
    return _into(self, bitwise_not(self))


# ------------------------------------------------------------------------------ operators
def _is_float_mask(value):
    return isinstance(value, _TensorBase) and value._dtype in _FLOATS


def _is_int64(value):
    return isinstance(value, _TensorBase) and value._dtype == _INT64


def _logical_or_bitwise(logical, bitwise, symbol):
    """An operator: cagrad's float-mask logical form when a float tensor takes part (its
    older behaviour), else PyTorch's bitwise op."""
    def op(self, other):
        if (_is_float_mask(self) or _is_float_mask(other)) and not (
                _is_int64(self) or _is_int64(other)):
            if isinstance(other, (_TensorBase, bool)) or (
                    isinstance(other, (int, float)) and other in (0, 1)):
                return logical(self, other)
        return bitwise(self, other)

    def reflected(self, other):
        return op(self, other)  # & | ^ commute
    op.__name__ = reflected.__name__ = symbol
    return op, reflected


__and__, __rand__ = _logical_or_bitwise(F.logical_and, bitwise_and, "__and__")
__or__, __ror__ = _logical_or_bitwise(F.logical_or, bitwise_or, "__or__")
__xor__, __rxor__ = _logical_or_bitwise(F.logical_xor, bitwise_xor, "__xor__")


def __invert__(self):
    if self._dtype in _FLOATS:
        raise TypeError("~ (operator.invert) is only implemented on integer and Boolean-type "
                        "tensors")
    return bitwise_not(self)


def __lshift__(self, other):
    return bitwise_left_shift(self, other)


def __rlshift__(self, other):
    return bitwise_left_shift(other, self)


def __rshift__(self, other):
    return bitwise_right_shift(self, other)


def __rrshift__(self, other):
    return bitwise_right_shift(other, self)


def __iand__(self, other):
    return _into(self, __and__(self, other))


def __ior__(self, other):
    return _into(self, __or__(self, other))


def __ixor__(self, other):
    return _into(self, __xor__(self, other))


__ilshift__ = bitwise_left_shift_
__irshift__ = bitwise_right_shift_

FUNCTIONS = ("bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "bitwise_left_shift",
             "bitwise_right_shift")
METHODS = FUNCTIONS + tuple(n + "_" for n in FUNCTIONS) + (
    "__and__", "__rand__", "__or__", "__ror__", "__xor__", "__rxor__", "__invert__",
    "__lshift__", "__rlshift__", "__rshift__", "__rrshift__", "__iand__", "__ior__",
    "__ixor__", "__ilshift__", "__irshift__")
