"""Integer remainder, fmod and floor_divide, and true division of integers.

The C kernels for these ops are float only. PyTorch computes them exactly on int64
tensors: % and fmod keep the sign of the divisor and of the dividend respectively, //
rounds down, and a zero divisor raises RuntimeError("ZeroDivisionError"). An int64 tensor
beside a Python float, or `/` between integers, gives the default float dtype instead.
Integers never require grad, so the exact results are computed with NumPy.
"""
import functools

import numpy as np

from . import _dtype

def _trunc_divide(a, b):
    """a / b rounded toward zero: floor is one below it where the division is inexact and
    the signs differ."""
    q = np.floor_divide(a, b)
    return q + (((a - q * b) != 0) & ((a < 0) != (b < 0)))


_EXACT = {"remainder": np.remainder, "fmod": np.fmod, "floor_divide": np.floor_divide,
          "trunc_divide": _trunc_divide}


def _integral(x):
    if hasattr(x, "_dtype"):
        return x._dtype in (_dtype.int64._code, _dtype.bool._code)
    return type(x) in (int, bool)


def _as_array(x):
    return x.numpy().astype(np.int64) if hasattr(x, "_dtype") else np.int64(x)


def exact(name, input, other):
    """name (a key of _EXACT) of two integral tensors or numbers, exactly, as an int64
    tensor; torch's errors for shapes that differ and for a zero divisor."""
    from ._creation import tensor  # _creation imports the tensor class, which imports this
    from ._functions import broadcast_shape

    a, b = _as_array(input), _as_array(other)
    broadcast_shape(np.shape(a), np.shape(b))  # torch's error for shapes that differ
    if np.any(b == 0):
        raise RuntimeError("ZeroDivisionError")
    with np.errstate(over="ignore"):  # INT64_MIN // -1 wraps, as in torch
        return tensor(np.asarray(_EXACT[name](a, b), dtype=np.int64))


def exact_on_integers(name, fn):
    """fn (the registry's float op) with torch's exact int64 result when both operands are
    integral tensors or numbers, and the default float dtype for an int64 tensor beside a
    Python float (which the float op alone would truncate to an integer)."""
    def wrapper(input, other, *, out=None):
        tensors = [x for x in (input, other) if hasattr(x, "_dtype")]
        if tensors and all(_integral(x) for x in (input, other)) and out is None:
            return exact(name, input, other)
        if type(other) is float and _integral(input) and hasattr(input, "_dtype"):
            from ._creation import get_default_dtype

            input = input.to(get_default_dtype())
        return fn(input, other, out=out)

    functools.update_wrapper(wrapper, fn)
    return wrapper


def true_divide_operator(div, div_op):
    """Tensor.__truediv__: the fast float op, or div (which makes int64 operands floats,
    as torch's true division does) when an operand is integral."""
    def op(self, other):
        if _integral(self) or (hasattr(other, "_dtype") and _integral(other)) or \
                (type(other) is int and _integral(self)):
            return div(self, other)
        return div_op(self, other)

    return op


def reflected_true_divide(div, rdiv_op):
    """Tensor.__rtruediv__ (number / tensor), likewise."""
    def op(self, other):
        if _integral(self):
            return div(other, self) if type(other) in (int, float, bool) else NotImplemented
        return rdiv_op(self, other)

    return op
