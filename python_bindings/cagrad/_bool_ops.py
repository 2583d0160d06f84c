"""cagrad.bool in arithmetic: PyTorch's type promotion for the binary ops when an operand is
a bool tensor (and for an int64 tensor beside a float one), and the errors PyTorch raises
where it refuses bools.

_C computes in one dtype per op (comparisons excepted, which promote in C), so a bool
operand is converted here first: to the other tensor's dtype; to int64 beside a Python
int; to the default float dtype beside a Python float. Two bools stay bool for the logical
forms (add and maximum are or, mul and minimum are and); sub and neg raise as in torch.
"""

from . import _C
from ._creation import get_default_dtype

BOOL = 3  # _C dtype code of cagrad.bool
_INT64 = 2
_TensorBase = _C.TensorBase

# ops whose two bool operands give a bool result in _C's logical kernels
_LOGICAL = {"add", "mul", "maximum", "minimum"}
# ops that turn two bools into floats (true division)
_TO_FLOAT = {"div", "rdiv"}

SUB_ERROR = ("Subtraction, the `-` operator, with two bool tensors is not supported. Use the "
             "`^` or `logical_xor()` operator instead.")
SUB_SCALAR_ERROR = ("Subtraction, the `-` operator, with a bool tensor is not supported. If "
                    "you are trying to invert a mask, use the `~` or `logical_not()` operator "
                    "instead.")
NEG_ERROR = ("Negation, the `-` operator, on a bool tensor is not supported. If you are trying "
             "to invert a mask, use the `~` or `logical_not()` operator instead.")


def as_code(t, code):
    return t if t._dtype == code else _C.to_dtype(t, code)


def _float_code():
    return get_default_dtype()._code


def tensors(name, fn, a, b):
    """fn(a, b) for two tensors of which at least one is bool, or whose dtypes differ. An
    int64 tensor beside a float one takes its dtype too, as in torch (a count from
    `mask.sum()` divides a float sum). None for float32 beside float64: the caller keeps
    _C's error, cagrad does not promote between float dtypes."""
    da, db = a._dtype, b._dtype
    if da != BOOL and db != BOOL:
        if da == _INT64 and db != _INT64:
            return fn(as_code(a, db), b)
        if db == _INT64 and da != _INT64:
            return fn(a, as_code(b, da))
        return None
    if name in ("sub", "rsub"):
        raise RuntimeError(SUB_ERROR if da == db else SUB_SCALAR_ERROR)
    if da == BOOL and db == BOOL:
        if name in _LOGICAL:
            return fn(a, b)
        code = _float_code() if name in _TO_FLOAT else _INT64
        return fn(as_code(a, code), as_code(b, code))
    if da == BOOL:
        return fn(as_code(a, db), b)
    return fn(a, as_code(b, da))


def scalar(name, tensor_fn, scalar_fn, t, value):
    """op(t, value) for a bool tensor t and a Python number value (bool, int or float)."""
    kind = type(value)
    if name in ("sub", "rsub"):
        raise RuntimeError(SUB_ERROR if kind is bool else SUB_SCALAR_ERROR)
    if kind is bool:
        if name in _LOGICAL:
            return tensor_fn(t, _C.full(BOOL, (), value))
        code = _float_code() if name in _TO_FLOAT else _INT64
    elif kind is int:
        code = _float_code() if name in _TO_FLOAT else _INT64
    else:
        code = _float_code()
    return scalar_fn(as_code(t, code), value)


def neg(input):
    if input._dtype == BOOL:
        raise RuntimeError(NEG_ERROR)
    return None


def reduce_input(input, fname):
    """A bool input to sum/prod/cumsum as int64 (torch sums bools into int64)."""
    return as_code(input, _INT64) if input._dtype == BOOL else input


def check_mean(input):
    if input._dtype == BOOL:
        raise RuntimeError("mean(): could not infer output dtype. Input dtype must be either a "
                           "floating point or complex dtype. Got: Bool")


def extreme(cfn, input, dims, keepdim):
    """max/min of a bool input: reduced as int64, values back to bool, indices as they are."""
    values, indices = cfn(as_code(input, _INT64), dims, keepdim)
    return _C.to_dtype(values, BOOL), indices


_CATEGORY = {BOOL: 0, _INT64: 1, 0: 2, 1: 2}  # torch's can_cast: bool < integer < float
_TYPE_NAME = {BOOL: "Bool", _INT64: "Long", 0: "Float", 1: "Double"}


def inplace(self, other, alpha, fname):
    """self.add_(other, alpha=alpha) or self.mul_(other) (alpha None) where self or other is
    bool: the promoted result, copied in when torch may cast it to self's dtype."""
    from . import _functions as F

    result = F.mul(self, other) if alpha is None else F.add(self, other, alpha=alpha)
    if _CATEGORY[result._dtype] > _CATEGORY[self._dtype]:
        raise RuntimeError(f"result type {_TYPE_NAME[result._dtype]} can't be cast to the "
                           f"desired output type {_TYPE_NAME[self._dtype]}")
    _C.copy_(self, as_code(result, self._dtype))
    return self
