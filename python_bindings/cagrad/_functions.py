"""Every core op as a function with PyTorch's name and signature (cagrad.exp(x), ...).

Most of these are also Tensor methods: _tensor.py binds the same function objects into the
class, so `x.exp()` and `cagrad.exp(x)` run one code path. Functions whose method form
has another signature (reshape(*shape), permute(*dims), ...) live in _tensor.py instead.

Dispatch is kept flat because it runs on every op: a Tensor operand goes straight to the
_C tensor op, a Python number to the _C scalar op, and only other kinds (numpy scalars and
arrays, wrong types) take the slow path.
"""

import builtins
import math
import operator
from collections import namedtuple

import numpy as np

from . import _C
from . import _bool_ops
from . import _int_ops
from ._creation import get_default_dtype
from ._creation import tensor as _tensor_from_data
from ._dtype import check_dtype, check_memory_format
from ._ops import FUNCTIONS as _REGISTRY

_TensorBase = _C.TensorBase
_FLOAT32, _FLOAT64, _INT64 = 0, 1, 2  # _C dtype codes
_BOOL = _bool_ops.BOOL


# ------------------------------------------------------------------------------ operands
def _coerce(other):
    """A numpy scalar or array operand as a Python number or a tensor; None if unusable."""
    if isinstance(other, np.generic) and other.dtype.kind in "biuf":
        return other.item()
    if isinstance(other, np.ndarray) and other.dtype.kind in "biuf":
        return other.item() if other.ndim == 0 else _tensor_from_data(other)
    return None


def _operand_error(name, other):
    return TypeError(f"{name}(): 'other' must be a Tensor or a number, not "
                     f"{type(other).__name__}")


def _arith(name, tensor_fn, scalar_fn):
    """op(input, other) for an arithmetic op; NotImplemented for unusable operands (so the
    same function serves as a Python operator)."""

    def op(input, other):
        if isinstance(other, _TensorBase):
            if input._dtype == other._dtype != _BOOL:
                return tensor_fn(input, other)
            return _bool_ops.tensors(name, tensor_fn, input, other)  # torch's promotion
        t = type(other)
        if input._dtype == _BOOL and t in (bool, int, float):
            return _bool_ops.scalar(name, tensor_fn, scalar_fn, input, other)
        if t is float:
            if input._dtype == _INT64:  # torch's promotion: the default float dtype
                input = _C.to_dtype(input, get_default_dtype()._code)
            return scalar_fn(input, other)
        if t is int or t is bool:
            return scalar_fn(input, other)
        other = _coerce(other)
        return NotImplemented if other is None else op(input, other)

    op.__name__ = op.__qualname__ = name
    return op


def _compare(name, tensor_fn, scalar_fn):
    """op(input, other) for a comparison: a bool tensor (_C promotes mixed dtypes)."""

    def op(input, other):
        if isinstance(other, _TensorBase):
            return tensor_fn(input, other)
        if type(other) in (float, int, bool):  # int64 vs float compares exactly in _C
            return scalar_fn(input, other)
        other = _coerce(other)
        return NotImplemented if other is None else op(input, other)

    op.__name__ = op.__qualname__ = name
    return op


def _swap(fn):
    return lambda a, b: fn(b, a)


add_op = _arith("add", _C.add, _C.add_scalar)
sub_op = _arith("sub", _C.sub, _C.sub_scalar)
rsub_op = _arith("rsub", _swap(_C.sub), _C.rsub_scalar)
mul_op = _arith("mul", _C.mul, _C.mul_scalar)
div_op = _arith("div", _C.div, _C.div_scalar)
rdiv_op = _arith("rdiv", _swap(_C.div), _C.rdiv_scalar)
_INTEGER_POW_ERROR = "Integers to negative integer powers are not allowed."


def _integral_operand(x):
    """An int64 or bool tensor, or a Python int or bool: pow's integer cases."""
    return x._dtype in (_INT64, _BOOL) if isinstance(x, _TensorBase) else type(x) in (int, bool)


def _integer_pow(base, exponent):
    """torch's integer power: an int64 tensor, exact while the result fits in a double's 53
    bits (computed in float64 and rounded). A negative Python exponent is torch's error; a
    negative element of an exponent tensor gives what torch's integer kernel gives: 1 or -1
    for a base of 1 or -1, else 0."""
    def f64(x):
        return _C.to_dtype(x, _FLOAT64) if isinstance(x, _TensorBase) else float(x)
    if not isinstance(exponent, _TensorBase) and exponent < 0:
        raise RuntimeError(_INTEGER_POW_ERROR)
    b, e = f64(base), f64(exponent)
    if isinstance(b, _TensorBase) and isinstance(e, _TensorBase):
        r = _C.pow(b, e)
    elif isinstance(b, _TensorBase):
        r = _C.pow_scalar(b, e)
    else:
        r = _C.rpow_scalar(e, b)
    from ._indexing import _to_code  # float -> int64 (exact here: the values are rounded)
    r = _REGISTRY["round"](r)  # 0 ** -n is inf in floats, 0 in torch's integers
    r = _C.where(_C.lt_scalar(_REGISTRY["abs"](r), math.inf), r, _C.full(_FLOAT64, (), 0.0))
    return _to_code(r, _INT64)


def _powers(name, op, swapped):
    """pow with torch's promotion: integral base and exponent (an int64 or bool tensor, a
    Python int) give int64; an int64 tensor with a Python float gives the default float
    dtype. Anything else as the arithmetic op."""
    def power(input, other):
        base, exponent = (other, input) if swapped else (input, other)
        if _integral_operand(base) and _integral_operand(exponent):
            bools = [isinstance(x, _TensorBase) and x._dtype == _BOOL for x in (base, exponent)]
            if builtins.all(bools):
                raise NotImplementedError('"pow" not implemented for \'Bool\'')
            r = _integer_pow(base, exponent)
            # a bool tensor to a Python bool power stays bool, as torch's
            return _C.to_dtype(r, _BOOL) if bools[0] and type(exponent) is bool else r
        if input._dtype == _INT64 and type(other) is float:
            return op(_C.to_dtype(input, get_default_dtype()._code), other)
        return op(input, other)

    power.__name__ = power.__qualname__ = name
    return power


pow_op = _powers("pow", _arith("pow", _C.pow, _C.pow_scalar), False)
rpow_op = _powers("rpow", _arith("rpow", _swap(_C.pow), _C.rpow_scalar), True)
maximum_op = _arith("maximum", _C.maximum, _C.maximum_scalar)
minimum_op = _arith("minimum", _C.minimum, _C.minimum_scalar)

lt_op = _compare("lt", _C.lt, _C.lt_scalar)
le_op = _compare("le", _C.le, _C.le_scalar)
gt_op = _compare("gt", _C.gt, _C.gt_scalar)
ge_op = _compare("ge", _C.ge, _C.ge_scalar)
eq_op = _compare("eq", _C.eq, _C.eq_scalar)
ne_op = _compare("ne", _C.ne, _C.ne_scalar)


def _checked(name, op):
    """The function form of an operator: a TypeError instead of NotImplemented."""

    def fn(input, other):
        r = op(input, other)
        if r is NotImplemented:
            raise _operand_error(name, other)
        return r

    fn.__name__ = fn.__qualname__ = name
    return fn


lt = less = _checked("lt", lt_op)
le = less_equal = _checked("le", le_op)
gt = greater = _checked("gt", gt_op)
ge = greater_equal = _checked("ge", ge_op)
eq = _checked("eq", eq_op)
ne = not_equal = _checked("ne", ne_op)


def _scaled(input, other, alpha, name):
    """alpha * other, for add/sub's alpha=: computed in the dtype of input beside other, as
    torch scales in the result dtype, with torch's errors for an alpha of another kind."""
    if isinstance(other, _TensorBase):
        if name == "sub" and _BOOL in (input._dtype, other._dtype):
            return other  # sub_op raises torch's error for the bool
        code = _bool_ops.result_code(input, other)
        if code == _BOOL:
            if type(alpha) is not bool:
                raise RuntimeError("Boolean alpha only supported for Boolean results.")
            return _bool_ops.scalar("mul", _C.mul, _C.mul_scalar, other, alpha)
        if code == _INT64 and type(alpha) is float:
            raise RuntimeError("For integral input tensors, argument alpha must not be a "
                               "floating point number.")
        return _C.mul_scalar(_bool_ops.as_code(other, code), alpha)
    if isinstance(other, (int, float)):
        return other * alpha
    raise _operand_error(name, other)


def add(input, other, *, alpha=1):
    """input + alpha * other."""
    r = add_op(input, other if alpha == 1 else _scaled(input, other, alpha, "add"))
    if r is NotImplemented:
        raise _operand_error("add", other)
    return r


def sub(input, other, *, alpha=1):
    """input - alpha * other."""
    r = sub_op(input, other if alpha == 1 else _scaled(input, other, alpha, "sub"))
    if r is NotImplemented:
        raise _operand_error("sub", other)
    return r


subtract = sub
mul = multiply = _checked("mul", mul_op)
maximum = _checked("maximum", maximum_op)
minimum = _checked("minimum", minimum_op)


def div(input, other, *, rounding_mode=None):
    """input / other. rounding_mode 'trunc' rounds the quotient toward zero and 'floor'
    down; with a rounding mode, int64 operands give int64 and the gradient is zero, as in
    torch."""
    _check_rounding_mode(rounding_mode)
    if type(input) in (int, float, bool):  # torch.div(3, t), torch.div(3, 4)
        input = _number_like(input, other)
    if not isinstance(input, _TensorBase):
        raise TypeError(f"div(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if rounding_mode is not None:
        return _rounded_div(input, other, rounding_mode)
    if _is_int_tensor(input) or _is_int_tensor(other):
        input, other = _as_float_operands(input, other)  # true division of int64: floats
    r = div_op(input, other)
    if r is NotImplemented:
        raise _operand_error("div", other)
    return r


divide = div


def true_divide(input, other):
    """input / other (true division; torch's true_divide has no rounding_mode)."""
    return div(input, other)


def _check_rounding_mode(mode):
    if mode is None:
        return
    if not isinstance(mode, str):
        raise TypeError(f"div() received an invalid combination of arguments - got "
                        f"rounding_mode={type(mode).__name__}, but expected one of: "
                        f"(Tensor input, Tensor other, *, str rounding_mode)")
    if mode not in ("trunc", "floor"):
        raise RuntimeError(f"div expected rounding_mode to be one of None, 'trunc', or "
                           f"'floor' but found '{mode}'")


def _number_like(value, like):
    """A Python number as a 0-d tensor of torch's promoted dtype next to like (a tensor,
    else a number): like's dtype, except a float beside int64 (the default float dtype)."""
    code = like._dtype if isinstance(like, _TensorBase) else _INT64
    if code == _INT64 and type(value) is float:
        code = get_default_dtype()._code
    return _C.full(code, (), value)


def _is_int_tensor(x):
    return isinstance(x, _TensorBase) and x._dtype == _INT64


def _is_integral(x):
    if isinstance(x, _TensorBase):
        return x._dtype == _INT64
    return type(x) in (int, bool)


def _rounded_div(input, other, mode):
    if not isinstance(other, _TensorBase) and type(other) not in (int, float, bool):
        coerced = _coerce(other)
        if coerced is None:
            raise _operand_error("div", other)
        other = coerced
    if _is_integral(input) and _is_integral(other):
        return _integer_div(input, other, mode)
    input, other = _as_float_operands(input, other)
    if isinstance(input, _TensorBase) and isinstance(other, _TensorBase):
        broadcast_shape(input._shape, other._shape)  # torch's error for shapes that differ
    with _no_grad():
        if mode == "floor":
            values = _REGISTRY["floor_divide"](input, other)
        else:
            values = _REGISTRY["trunc"](div_op(input, other))
    return zero_grad_link(values, (input, other))


def _as_float_operands(input, other):
    """An int64 tensor becomes the float dtype of the float tensor beside it, else the
    default dtype, as torch promotes for a float result."""
    def float_code(x, beside):
        if isinstance(beside, _TensorBase) and beside._dtype < _INT64:  # a float
            return beside._dtype
        return get_default_dtype()._code

    if isinstance(input, _TensorBase) and input._dtype == _INT64:
        input = _C.to_dtype(input, float_code(input, other))
    if isinstance(other, _TensorBase) and other._dtype == _INT64:
        other = _C.to_dtype(other, float_code(other, input))
    return input, other


def _integer_div(input, other, mode):
    """Exact int64 division rounded down ('floor') or toward zero ('trunc'); torch's
    RuntimeError for a zero divisor."""
    return _int_ops.exact("floor_divide" if mode == "floor" else "trunc_divide", input, other)


def broadcast_shape(a, b):
    """The broadcast of shapes a and b, or torch's error for shapes that do not match."""
    a, b = tuple(a), tuple(b)
    for i in range(1, builtins.min(len(a), len(b)) + 1):  # this module shadows min/max
        if a[-i] != b[-i] and 1 not in (a[-i], b[-i]):
            raise RuntimeError(f"The size of tensor a ({a[-i]}) must match the size of "
                               f"tensor b ({b[-i]}) at non-singleton dimension "
                               f"{builtins.max(len(a), len(b)) - i}")
    return tuple(np.broadcast_shapes(a, b))


def zero_grad_link(values, sources):
    """values, joined to each source tensor that requires grad by a node whose gradient is
    zero: where torch's derivative of an op is zeros (div with a rounding mode, the
    samplers), and a where() with an all-false condition gives exactly zeros, even for
    inf/nan sources."""
    needs = [s for s in sources if isinstance(s, _TensorBase) and s.requires_grad]
    if not needs or not _C.is_grad_enabled():
        return values
    never = _C.full(values._dtype, (), 0)
    for source in needs:  # in values' dtype: a source of another float dtype is promoted
        values = _C.where(never, _bool_ops.as_code(source, values._dtype), values)
    return values


def _no_grad():
    from ._grad_mode import no_grad  # _grad_mode imports this module's siblings
    return no_grad()


def pow(input, exponent):
    """input ** exponent; input may be a Python number when exponent is a tensor."""
    if not isinstance(input, _TensorBase) and isinstance(exponent, _TensorBase):
        r = rpow_op(exponent, input)
    else:
        r = pow_op(input, exponent)
    if r is NotImplemented:
        raise _operand_error("pow", exponent)
    return r


_NO_VALUE = object()  # where()'s missing input/other: None is no valid value either


def where(condition, input=_NO_VALUE, other=_NO_VALUE):
    """input where condition is nonzero, else other. input or other may be numbers.
    where(condition) alone is nonzero(condition, as_tuple=True)."""
    if input is _NO_VALUE and other is _NO_VALUE:
        return _where_positions(condition)
    if input is _NO_VALUE or other is _NO_VALUE:
        raise TypeError("where() received an invalid combination of arguments: it takes "
                        "(condition) or (condition, input, other)")
    cond = as_mask(condition)
    if isinstance(input, _TensorBase):
        if isinstance(other, _TensorBase):
            if input._dtype != other._dtype:  # both branches in their result dtype
                return _bool_ops.tensors("where", lambda a, b: _C.where(cond, a, b), input,
                                         other)
            return _C.where(cond, input, other)
        return _C.where_scalar(cond, input, _number(other, "where"))
    if isinstance(other, _TensorBase):  # swap the branches by negating the condition
        return _C.where_scalar(_C.eq_scalar(cond, 0), other, _number(input, "where"))
    # two numbers: a tensor of cond's shape, with torch's dtype for the numbers
    kinds = {type(input), type(other)}
    code = (_BOOL if kinds == {bool} else _INT64 if kinds <= {int, bool}
            else get_default_dtype()._code)
    full = _C.full(code, cond._shape, _number(input, "where"))
    return _C.where_scalar(cond, full, _number(other, "where"))


def _where_positions(condition):
    """The indices of condition's nonzero elements, one int64 tensor per dimension (a 0-d
    condition counts as 1-d, as in torch)."""
    if not isinstance(condition, _TensorBase):
        raise TypeError(f"where(): argument 'condition' (position 1) must be Tensor, not "
                        f"{type(condition).__name__}")
    values = np.atleast_1d(condition.detach().numpy())
    return tuple(_tensor_from_data(axis.astype(np.int64)) for axis in np.nonzero(values))


def _number(value, fname):
    if isinstance(value, (int, float)):
        return value
    if isinstance(value, np.generic) and value.dtype.kind in "biuf":
        return value.item()
    raise TypeError(f"{fname}(): expected a Tensor or a number, not {type(value).__name__}")


def as_mask(mask):
    """A condition/mask argument as a tensor: tensors pass through; numpy bool arrays and
    lists of bools become 0/1 tensors."""
    if isinstance(mask, _TensorBase):
        return mask
    if isinstance(mask, (np.ndarray, list, tuple)):
        return _tensor_from_data(mask)
    raise TypeError(f"expected a Tensor (or a numpy bool array) as the mask/condition, not "
                    f"{type(mask).__name__}")


# ------------------------------------------------------------------------------ logical
# bool results; _C's bool kernels: mul is and, maximum is or, ne is xor.
def _truth(x):
    """x != 0 as a bool tensor (x: a tensor, or a number as a 0-d one)."""
    if not isinstance(x, _TensorBase):
        x = _C.full(_BOOL, (), _number(x, "logical"))
    return x if x._dtype == _BOOL else _C.ne_scalar(x, 0)


def logical_not(input):
    return _C.eq_scalar(input, 0)


def logical_and(input, other):
    return _C.mul(_truth(input), _truth(other))


def logical_or(input, other):
    return _C.maximum(_truth(input), _truth(other))


def logical_xor(input, other):
    return _C.ne(_truth(input), _truth(other))


# ------------------------------------------------------------------------------ unary
# neg, exp, log, ... come from the op registry (_ops.py); these are PyTorch's aliases.
negative = _REGISTRY["neg"]
absolute = _REGISTRY["abs"]


def clamp(input, min=None, max=None):
    """Values limited to [min, max]; min and max may be numbers, tensors or None."""
    if isinstance(min, _TensorBase) or isinstance(max, _TensorBase):
        # all three in their result dtype first, as torch (pairwise promotion can differ)
        input, min, max = _bool_ops.promoted(input, min, max)
        out = input if min is None else maximum(input, min)
        return out if max is None else minimum(out, max)
    if min is None and max is None:
        raise ValueError("clamp(): at least one of 'min' or 'max' must not be None")
    if input._dtype == _BOOL:  # torch clamps a bool tensor as int64 (with int bounds)
        input = _C.to_dtype(input, _INT64)
    if input._dtype == _INT64 and (type(min) is float or type(max) is float):
        input = _C.to_dtype(input, get_default_dtype()._code)  # torch's promotion
    if input._dtype == _INT64:  # no int64 clamp kernel: the scalar max / min are exact
        out = input if min is None else _C.maximum_scalar(input, min)
        return out if max is None else _C.minimum_scalar(out, max)
    return _C.clamp(input, math.nan if min is None else min, math.nan if max is None else max)


clip = clamp


# ------------------------------------------------------------------------------ reductions
def _dims(dim, fname):
    """dim=None/int/sequence of ints as the tuple _C takes (() = every dim)."""
    if dim is None:
        return ()
    if type(dim) is int:
        return (dim,)
    try:
        if isinstance(dim, (tuple, list)):
            return tuple(map(operator.index, dim))
        return (operator.index(dim),)
    except TypeError:
        raise TypeError(f"{fname}(): dim must be an int, a tuple of ints or None, not "
                        f"{dim!r}") from None


def _dim(dim, fname):
    """A single dim as an int."""
    if type(dim) is int:
        return dim
    try:
        return operator.index(dim)
    except TypeError:
        raise TypeError(f"{fname}(): dim must be an int, not {type(dim).__name__}") from None


def _cast(input, dtype):
    return input if dtype is None else _C.to_dtype(input, check_dtype(dtype)._code)


def sum(input, dim=None, keepdim=False, *, dtype=None):
    x = _cast(input, dtype)
    if x._dtype == _BOOL:  # torch counts bools into int64
        x = _C.to_dtype(x, _INT64)
    return _C.sum(x, _dims(dim, "sum"), keepdim)


def mean(input, dim=None, keepdim=False, *, dtype=None):
    x = _cast(input, dtype)
    _bool_ops.check_mean(x)
    return _C.mean(x, _dims(dim, "mean"), keepdim)


def logsumexp(input, dim, keepdim=False):
    return _C.logsumexp(input, _dims(dim, "logsumexp"), keepdim)


def _int_reduce(cfn, input, dims, keepdim):
    """(values, indices) of an int64 input, which _C reduces only as floats: the arg indices
    come from a float64 copy (exact below 2**53), the values are gathered from input."""
    shape = input._shape
    nd = len(shape)
    red = sorted({d % nd for d in dims}) if dims and nd else list(range(nd))
    keep = [d for d in range(nd) if d not in red]
    # reduced dims last, flattened into one, so one gather finds the values
    x = _C.reshape(_C.permute(input, tuple(keep + red)), tuple(shape[d] for d in keep) + (-1,))
    idx = cfn(_C.to_dtype(x, 1), (-1,), True)[1]
    values = _C.gather(x, -1, idx)
    out = tuple(1 if d in red else shape[d] for d in range(nd)) if keepdim else tuple(
        shape[d] for d in keep)
    return _C.reshape(values, out), _C.reshape(idx, out)


def _max(input, dims, keepdim):
    if input._dtype == _INT64:
        return _int_reduce(_C.max, input, dims, keepdim)
    if input._dtype == _BOOL:
        return _bool_ops.extreme(_max, input, dims, keepdim)
    return _C.max(input, dims, keepdim)


def _min(input, dims, keepdim):
    if input._dtype == _INT64:
        return _int_reduce(_C.min, input, dims, keepdim)
    if input._dtype == _BOOL:
        return _bool_ops.extreme(_min, input, dims, keepdim)
    return _C.min(input, dims, keepdim)


class _ValuesIndices:
    """Printed like torch.return_types.max: one field per line."""

    __slots__ = ()

    def __repr__(self):
        return (f"cagrad.return_types.{type(self).__name__}(\nvalues={self.values!r},"
                f"\nindices={self.indices!r})")


# torch.return_types.max / min: named (values, indices) pairs
class _MaxResult(_ValuesIndices, namedtuple("max", ["values", "indices"])):
    __slots__ = ()


class _MinResult(_ValuesIndices, namedtuple("min", ["values", "indices"])):
    __slots__ = ()


_MaxResult.__name__, _MinResult.__name__ = "max", "min"


def _tied_extreme(reduce, input, dims, keepdim):
    """amax/amin and max()/min() over every dim: the value, with the gradient split evenly
    among the elements equal to it, as torch's (the index-based rule of max(dim) gives it
    to one). value + (s - s.detach()) keeps the value bit for bit; s carries the split."""
    if not (input.requires_grad and _C.is_grad_enabled()):
        return reduce(input, dims, keepdim)[0]
    value = reduce(input, dims, True)[0]
    with _no_grad():
        ties = _C.to_dtype(_C.eq(input, value), input._dtype)
        share = ties / ties.sum(dims if dims else None, keepdim=True)
    spread = (input * share).sum(dims if dims else None, keepdim=True)
    out = value.detach() + (spread - spread.detach())
    return out if keepdim else _squeezed(out, dims, input.dim())


def _squeezed(t, dims, ndim):
    """t (reduced with keepdim) without the reduced dims."""
    gone = sorted((d % ndim for d in dims) if dims else range(ndim), reverse=True)
    for d in gone:
        t = t.squeeze(d)
    return t


def max(input, dim=None, keepdim=False):
    """max() -> the largest value; max(dim) -> (values, indices); max(other) -> maximum."""
    if dim is None:
        if input._dtype in (_INT64, _BOOL):
            return _max(input, (), False)[0]
        return _tied_extreme(_max, input, (), False)
    if isinstance(dim, _TensorBase):
        return maximum(input, dim)
    return _MaxResult(*_max(input, (_dim(dim, "max"),), keepdim))


def min(input, dim=None, keepdim=False):
    """min() -> the smallest value; min(dim) -> (values, indices); min(other) -> minimum."""
    if dim is None:
        if input._dtype in (_INT64, _BOOL):
            return _min(input, (), False)[0]
        return _tied_extreme(_min, input, (), False)
    if isinstance(dim, _TensorBase):
        return minimum(input, dim)
    return _MinResult(*_min(input, (_dim(dim, "min"),), keepdim))


def amax(input, dim=(), keepdim=False):
    if input._dtype in (_INT64, _BOOL):
        return _max(input, _dims(dim, "amax"), keepdim)[0]
    return _tied_extreme(_max, input, _dims(dim, "amax"), keepdim)


def amin(input, dim=(), keepdim=False):
    if input._dtype in (_INT64, _BOOL):
        return _min(input, _dims(dim, "amin"), keepdim)[0]
    return _tied_extreme(_min, input, _dims(dim, "amin"), keepdim)


def _no_bool_arg(input, fname):
    if input._dtype == _BOOL:
        raise RuntimeError(f"{fname}(): does not support bool input")


def argmax(input, dim=None, keepdim=False):
    """Index of the largest value along dim; with dim=None, into the flattened tensor."""
    _no_bool_arg(input, "argmax")
    return _max(input, _dims(dim, "argmax"), keepdim)[1]


def argmin(input, dim=None, keepdim=False):
    _no_bool_arg(input, "argmin")
    return _min(input, _dims(dim, "argmin"), keepdim)[1]


def any(input, dim=None, keepdim=False):
    """True where any value along dim is nonzero (a bool tensor): a count of the nonzeros,
    so that an empty reduction is False, as in torch."""
    nonzero = _C.to_dtype(_truth(input), _INT64)
    return _C.gt_scalar(_C.sum(nonzero, _dims(dim, "any"), keepdim), 0)


def all(input, dim=None, keepdim=False):
    """True where every value along dim is nonzero (a bool tensor): no zero counted, so an
    empty reduction is True, as in torch."""
    zeros = _C.to_dtype(_C.eq_scalar(input, 0), _INT64)
    return _C.eq_scalar(_C.sum(zeros, _dims(dim, "all"), keepdim), 0)


# ------------------------------------------------------------------------------ shapes
def reshape(input, shape):
    return _C.reshape(input, tuple(shape))


def permute(input, dims):
    return _C.permute(input, tuple(dims))


def transpose(input, dim0, dim1):
    return _C.transpose(input, dim0, dim1)


swapaxes = swapdims = transpose


def t(input):
    """The transpose of a 2-D tensor; 0-D and 1-D tensors come back as they are (a view)."""
    nd = input.ndim
    if nd <= 2:
        return _C.t(input)  # TBackward0, as PyTorch
    raise RuntimeError(f"t() expects a tensor with <= 2 dimensions, but the input is {nd}D; "
                       f"use transpose(dim0, dim1) or permute()")


def squeeze(input, dim=None):
    return _C.squeeze(input, _dims(dim, "squeeze"))


def unsqueeze(input, dim):
    return _C.unsqueeze(input, dim)


def flatten(input, start_dim=0, end_dim=-1):
    return _C.flatten(input, start_dim, end_dim)


def narrow(input, dim, start, length):
    return _C.narrow(input, dim, start, length)


def select(input, dim, index):
    return _C.select(input, dim, index)


def as_strided(input, size, stride, storage_offset=None):
    """A view of input's memory with these sizes, strides and storage offset (input's own
    by default). Its gradient sends each element's gradient to the input element it reads,
    summed where the view's elements overlap."""
    offset = -1 if storage_offset is None else operator.index(storage_offset)
    if storage_offset is not None and offset < 0:
        raise RuntimeError(f"Tensor: invalid storage offset {offset}")
    return _C.as_strided(input, tuple(size), tuple(stride), offset)


def _tensor_seq(tensors, fname):
    if isinstance(tensors, _TensorBase) or not isinstance(tensors, (tuple, list)):
        raise TypeError(f"{fname}(): expected a sequence of Tensors, not "
                        f"{type(tensors).__name__}")
    return tensors


# torch's promotion order of the dtypes cagrad has: bool < int64 < float32 < float64
_PROMOTION_RANK = {_BOOL: 0, _INT64: 1, _FLOAT32: 2, _FLOAT64: 3}


def _promoted(tensors, fname):
    """The tensors in their promoted dtype, as torch.cat and torch.stack take them."""
    seq = _tensor_seq(tensors, fname)
    codes = {t._dtype for t in seq if isinstance(t, _TensorBase)}
    if len(codes) < 2:
        return seq
    code = builtins.max(codes, key=_PROMOTION_RANK.__getitem__)
    return [_C.to_dtype(t, code) if isinstance(t, _TensorBase) and t._dtype != code else t
            for t in seq]


def cat(tensors, dim=0):
    return _C.cat(_promoted(tensors, "cat"), dim)


concat = concatenate = cat


def stack(tensors, dim=0):
    return _C.stack(_promoted(tensors, "stack"), dim)


def split(tensor, split_size_or_sections, dim=0):
    """Views of consecutive pieces along dim: of size split_size (the last may be smaller),
    or of the sizes listed."""
    n = tensor._shape[dim]
    if isinstance(split_size_or_sections, int):
        step = split_size_or_sections
        if step <= 0:
            raise ValueError(f"split(): split_size must be positive, got {step}")
        sizes = [step] * (n // step) + ([n % step] if n % step else [])
    else:
        sizes = list(split_size_or_sections)
        if builtins.sum(sizes) != n:
            raise RuntimeError(f"split(): split sizes {sizes} do not add up to the size "
                               f"{n} of dim {dim}")
    out, start = [], 0
    for size in sizes or [0]:
        out.append(_C.narrow(tensor, dim, start, size))
        start += size
    return _multi_output_views(out, "Split" if isinstance(split_size_or_sections, int)
                               else "SplitWithSizes")


def _multi_output_views(views, function):
    """views as the outputs of one function that returns several views: in the graph,
    in-place ops on them (or on views of them) are refused, as PyTorch refuses them."""
    if _C.is_grad_enabled():
        for i, v in enumerate(views):
            _C.mark_multi_output_view(v, function, i)
    return tuple(views)


def chunk(input, chunks, dim=0):
    """At most `chunks` views along dim, each of ceil(size / chunks) (the last smaller)."""
    if chunks <= 0:
        raise RuntimeError(f"chunk expects `chunks` to be greater than 0, got: {chunks}")
    n = input._shape[dim]
    if n == 0:  # torch: `chunks` empty views (split would give one)
        return tuple(narrow(input, dim, 0, 0) for _ in range(chunks))
    return split(input, -(-n // chunks), dim)


def unbind(input, dim=0):
    return _multi_output_views([_C.select(input, dim, i) for i in range(input._shape[dim])],
                               "Unbind")


# ------------------------------------------------------------------------------ indexing
def masked_fill(input, mask, value):
    """value where mask is nonzero (mask broadcasts to input); value: a number or 0-d Tensor."""
    mask = as_mask(mask)
    if isinstance(value, _TensorBase):  # in input's dtype, as torch; keeps value's gradient
        from ._indexing import _to_code  # float -> int64 truncates, as torch's cast
        return _C.where(mask, _to_code(value, input._dtype), input)
    return _C.masked_fill(input, mask, _number(value, "masked_fill"))


def _index_tensor(index):
    return index if isinstance(index, _TensorBase) else _tensor_from_data(index)


def index_select(input, dim, index):
    return _C.index_select(input, dim, _index_tensor(index))


def gather(input, dim, index):
    return _C.gather(input, dim, _index_tensor(index))


def index_fill(input, dim, index, value):
    """input with value at the positions index names along dim; value: a number or a 0-d
    Tensor (which then gets the gradient of the filled positions)."""
    index = _index_tensor(index)
    if isinstance(value, _TensorBase):
        return _C.index_fill_tensor(input, dim, index, value)
    return _C.index_fill(input, dim, index, _number(value, "index_fill"))


# ------------------------------------------------------------------------------ linalg / nn
def matmul(input, other):
    return _C.matmul(input, other)


def mm(input, mat2):
    return _C.mm(input, mat2)


def bmm(input, mat2):
    return _C.bmm(input, mat2)


def softmax(input, dim, dtype=None):
    return _C.softmax(_cast(input, dtype), dim)


def log_softmax(input, dim, dtype=None):
    return _C.log_softmax(_cast(input, dtype), dim)


# ------------------------------------------------------------------------------ misc
def clone(input, *, memory_format=None):
    """A contiguous copy with its own storage; gradients flow back to input (as
    CloneBackward0)."""
    check_memory_format("clone", memory_format, like=input)
    return _C.clone(input)


def detach(input):
    return _C.detach(input)


def numel(input):
    return input.numel()


def is_tensor(obj):
    return isinstance(obj, _TensorBase)


def is_floating_point(input):
    return input._dtype < _INT64  # codes 0, 1: float32, float64
