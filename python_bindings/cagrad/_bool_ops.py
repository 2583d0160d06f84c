"""torch's type promotion for the ops that take two or more tensors (result_type, and the
public cagrad.result_type / promote_types / can_cast), the cast check of in-place ops, and
the errors torch raises where it refuses bools (in arithmetic and in the unary ops with no
bool kernel).

_C computes in one dtype per op (comparisons excepted, which promote in C), so operands of
different dtypes are converted here first, to torch's result_type: categories rank bool <
integer < float; a tensor with dims outranks a 0-d tensor of the same category (float32 [3]
+ float64 0-d is float32) and a 0-d tensor a Python number; a higher category always wins
(int64 [3] + float64 0-d is float64). The conversion is a differentiable to(dtype), so each
input's gradient comes back in its own dtype, as in torch.

Bools: a bool operand beside a Python int becomes int64, beside a Python float the default
float dtype. Two bools stay bool for the logical forms (add and maximum are or, mul and
minimum are and); sub and neg raise as in torch.
"""

from . import _C
from ._creation import get_default_dtype

BOOL = 3  # _C dtype code of cagrad.bool
_INT64 = 2
_FLOAT32, _FLOAT64 = 0, 1
_FLOATS = (_FLOAT32, _FLOAT64)
_TensorBase = _C.TensorBase
# torch's promote_types order of the dtypes cagrad has
_RANK = {BOOL: 0, _INT64: 1, _FLOAT32: 2, _FLOAT64: 3}

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
    """fn(a, b) for two tensors whose dtypes differ or of which at least one is bool, each
    converted to torch's result dtype first (a count from `mask.sum()` divides a float sum;
    a float32 model output meets a float64 target)."""
    da, db = a._dtype, b._dtype
    if da != BOOL and db != BOOL:
        code = result_code(a, b)
        return fn(as_code(a, code), as_code(b, code))
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


# ------------------------------------------------------------------------------ result_type
def _promote(c1, c2):
    """promote_types on two dtype codes (None: no operand of that kind)."""
    if c1 is None or c2 is None:
        return c2 if c1 is None else c1
    return c1 if _RANK[c1] >= _RANK[c2] else c2


def _combine(higher, lower):
    """The result of the operands in `higher` (tensors with dims, or 0-d ones) beside those
    in `lower` (0-d tensors, or Python numbers): lower counts only where its category is
    above higher's."""
    if higher is None or lower is None:
        return lower if higher is None else higher
    if higher in _FLOATS:
        return higher
    if higher == BOOL or lower in _FLOATS:
        return _promote(higher, lower)
    return higher


def _number_code(value):
    """The dtype torch gives a Python number in promotion (a float: the default dtype)."""
    kind = type(value)
    if kind is bool:
        return BOOL
    if kind is int:
        return _INT64
    if kind is float:
        return _float_code()
    raise TypeError(f"result_type(): expected a Tensor or a Python number (bool, int or "
                    f"float), not {kind.__name__}; cagrad has no complex dtypes (see "
                    f"docs/python-api.md)")


def result_code(*operands):
    """torch.result_type of tensors and Python numbers, as a dtype code."""
    dims = zero = wrapped = None
    for x in operands:
        if isinstance(x, _TensorBase):
            if x._shape:
                dims = _promote(dims, x._dtype)
            else:
                zero = _promote(zero, x._dtype)
        elif x is not None:
            wrapped = _promote(wrapped, _number_code(x))
    return _combine(dims, _combine(zero, wrapped))


def promoted(*operands):
    """operands with each tensor converted to the tensors' result dtype (numbers and None
    pass through, and do not count): how an op of several tensors takes them."""
    code = result_code(*(x for x in operands if isinstance(x, _TensorBase)))
    return tuple(as_code(x, code) if isinstance(x, _TensorBase) else x for x in operands)


def promoted_pair(input, other):
    """(input, other) in their result dtype when both are tensors of different dtypes."""
    if (isinstance(input, _TensorBase) and isinstance(other, _TensorBase)
            and input._dtype != other._dtype):
        code = result_code(input, other)
        return as_code(input, code), as_code(other, code)
    return input, other


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


_CATEGORY = {BOOL: 0, _INT64: 1, _FLOAT32: 2, _FLOAT64: 2}  # torch's can_cast order
TYPE_NAME = {BOOL: "Bool", _INT64: "Long", _FLOAT32: "Float", _FLOAT64: "Double"}


def check_cast(result, out):
    """torch's error where an in-place op's result dtype code may not be cast into out's
    (a lower category: a float result into an int64 tensor); float64 into float32 may."""
    if _CATEGORY[result] > _CATEGORY[out]:
        raise RuntimeError(f"result type {TYPE_NAME[result]} can't be cast to the desired "
                           f"output type {TYPE_NAME[out]}")


def copy_result(self, result):
    """self with result's values copied in, as torch's in-place ops write a result computed
    in the promoted dtype."""
    check_cast(result._dtype, self._dtype)
    _C.copy_(self, as_code(result, self._dtype))
    return self


def inplace(self, other, alpha, fname):
    """self.add_(other, alpha=alpha) or self.mul_(other) (alpha None) where self or other is
    bool or their dtypes differ: the promoted result, copied in when torch may cast it to
    self's dtype."""
    from . import _functions as F

    result = F.mul(self, other) if alpha is None else F.add(self, other, alpha=alpha)
    return copy_result(self, result)


_C_TYPE_NAME = {BOOL: "bool", _INT64: "long int", _FLOAT32: "float", _FLOAT64: "double"}


def lerp_operands(input, end, weight):
    """lerp's operands in their result dtype, after torch's checks: end must have input's
    dtype, and so must a weight tensor with dims (a 0-d weight promotes)."""
    for name, other in (("end", end), ("weight", weight)):
        if (isinstance(other, _TensorBase) and other._dtype != input._dtype
                and (name == "end" or other._shape)):
            raise RuntimeError(f"expected dtype {_C_TYPE_NAME[input._dtype]} for `{name}` "
                               f"but got dtype {_C_TYPE_NAME[other._dtype]}")
    return promoted(input, end, weight)


# ------------------------------------------------------------------------------ public API
def _dtype_of(code):
    from ._dtype import DTYPES
    return DTYPES[code]


def _code_of(dtype, what):
    from ._dtype import check_dtype
    return check_dtype(dtype, what)._code


def result_type(tensor, other):
    """The dtype torch's arithmetic gives tensor and other (tensors or Python numbers)."""
    return _dtype_of(result_code(_operand(tensor), _operand(other)))


def _operand(x):
    if isinstance(x, _TensorBase):
        return x
    if hasattr(x, "dtype") and hasattr(x, "item") and getattr(x, "ndim", None) == 0:
        return x.item()  # a numpy scalar counts as the Python number it holds
    _number_code(x)  # a TypeError for anything else
    return x


def promote_types(type1, type2):
    """The smallest dtype of cagrad's to which both type1 and type2 convert without a loss
    of category (bool < int64 < float32 < float64)."""
    return _dtype_of(_promote(_code_of(type1, "type1"), _code_of(type2, "type2")))


def can_cast(from_, to):
    """Whether torch's casting rules allow from_ into to: never into a lower category."""
    return _CATEGORY[_code_of(from_, "from_")] <= _CATEGORY[_code_of(to, "to")]


# ------------------------------------------------------------------------------ unary ops
# The unary ops torch has no bool kernel for, with torch's exception type and message.
def _no_kernel(kernel):
    return (NotImplementedError, f"\"{kernel}\" not implemented for 'Bool'")


UNARY_REFUSALS = {
    "abs": _no_kernel("abs_cpu"), "frac": _no_kernel("frac_cpu"),
    "floor": _no_kernel("floor_vml_cpu"), "ceil": _no_kernel("ceil_vml_cpu"),
    "round": _no_kernel("round_vml_cpu"), "trunc": _no_kernel("trunc_vml_cpu"),
    "elu": _no_kernel("elu_cpu"), "celu": _no_kernel("elu_cpu"), "selu": _no_kernel("elu_cpu"),
    "gelu": _no_kernel("GeluKernelImpl"), "silu": _no_kernel("silu_cpu"),
    "softplus": _no_kernel("softplus_cpu"), "leaky_relu": _no_kernel("leaky_relu_cpu"),
    "logsigmoid": _no_kernel("log_sigmoid_cpu"), "mish": _no_kernel("mish_cpu"),
    "hardswish": _no_kernel("hardswish_cpu"), "hardsigmoid": _no_kernel("hardsigmoid_cpu"),
    "softsign": _no_kernel("abs_cpu"),
    "relu": (RuntimeError, "Boolean inputs not supported for relu"),
    "hardtanh": (RuntimeError, "Bool inputs not supported for hardtanh"),
    "relu6": (RuntimeError, "Bool inputs not supported for hardtanh"),
    "neg": (RuntimeError, NEG_ERROR),
}
