"""lgamma, digamma, polygamma, mvlgamma, i0 and i1 with gradients.

libcagrad has no kernels for these, so each forward is computed in float64 with numpy (the
series below) and wrapped in a custom autograd Function whose backward calls the next
function of the family (lgamma' = digamma, digamma' = polygamma(1, .), polygamma(n, .)' =
polygamma(n + 1, .), i0' = i1, i1' = i0 - i1 / x): those are Functions themselves, so
double backward works. Under compiled autograd their backwards run as call-outs (opaque
steps of the compiled graph), not as fused kernels.

Accuracy: float64 results are within a few ulps of PyTorch's away from the poles. At the
poles (0 and the negative integers) lgamma is inf, digamma is -inf / nan as in PyTorch;
polygamma(n >= 1) is (-1)^(n+1) inf at all of them (PyTorch's polygamma(1, .) returns
large finite values at the negative integers).
"""

import math

import numpy as np

from . import _C
from .autograd.function import Function

_TensorBase = _C.TensorBase
_FLOATS = (0, 1)
# B_2j / (2j)! for the Euler-Maclaurin tail of the Hurwitz zeta function
_BERNOULLI = [1 / 6, -1 / 30, 1 / 42, -1 / 30, 5 / 66, -691 / 2730, 7 / 6, -3617 / 510,
              43867 / 798, -174611 / 330]
_B_OVER_FACT = [b / math.factorial(2 * (j + 1)) for j, b in enumerate(_BERNOULLI)]


def _values(x):
    return np.asarray(memoryview(x)).astype(np.float64)


def _float_input(x, fname):
    """x as a float tensor: int64 and bool become the default float dtype (PyTorch's
    promotion for these ops)."""
    if not isinstance(x, _TensorBase):
        raise TypeError(f"{fname}(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(x).__name__}")
    if x._dtype in _FLOATS:
        return x
    from ._creation import get_default_dtype
    return _C.to_dtype(x, get_default_dtype()._code)


def _like(values, x):
    out = _C.copy_from_buffer(np.array(values, dtype=np.float64, order="C"))  # keeps 0-d
    return _C.to_dtype(out, x._dtype)


# ------------------------------------------------------------------------------ numpy kernels
def _lgamma_one(v):
    if math.isinf(v) or (v <= 0 and v == math.floor(v)):
        return math.inf  # the poles, and lgamma(+-inf) = inf as in PyTorch
    return math.lgamma(v) if v == v else v  # NaN stays NaN


# math.lgamma (libm's, correctly rounded in practice) per element: numpy has no lgamma
_LGAMMA_UFUNC = np.frompyfunc(_lgamma_one, 1, 1)


def _lgamma_np(x):
    with np.errstate(invalid="ignore"):  # NaN in, NaN out
        # asarray: on a 0-d array frompyfunc returns a bare float, not an array
        return np.asarray(_LGAMMA_UFUNC(x), dtype=np.float64)


def _digamma_np(x):
    """psi(x): reflection below 0.5, the recurrence up to 10, then the asymptotic series."""
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _digamma_series(np.asarray(x, dtype=np.float64))


def _digamma_series(x):
    pole = (x <= 0) & (x == np.floor(x))
    reflect = (x < 0.5) & ~pole
    z = np.where(reflect, 1.0 - x, x)
    z = np.where(pole, 1.0, z)
    acc = np.where(reflect, -np.pi / np.tan(np.pi * np.where(reflect, x, 0.5)), 0.0)
    for _ in range(10):
        small = z < 10.0
        acc = acc - np.where(small, 1.0 / z, 0.0)
        z = np.where(small, z + 1.0, z)
    inv2 = 1.0 / (z * z)
    series = inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (1 / 252 - inv2 * (
        1 / 240 - inv2 * (1 / 132 - inv2 * (691 / 32760 - inv2 / 12))))))
    out = acc + np.log(z) - 0.5 / z - series
    # PyTorch: -inf at +0, +inf at -0, nan at the negative integers
    at_zero = np.where(np.signbit(x), np.inf, -np.inf)
    return np.where(pole, np.where(x == 0, at_zero, np.nan), out)


def _hurwitz_zeta_np(s, q):
    """zeta(s, q) = sum_k (q + k)^-s for an integer s >= 2: the terms below a = q + N >= 15 + s
    summed directly, the rest by Euler-Maclaurin."""
    q = np.asarray(q, dtype=np.float64)
    threshold = 15.0 + s
    a = q.copy()
    acc = np.zeros_like(q)
    steps = int(max(0.0, math.ceil(threshold - np.nanmin(q, initial=threshold)))) if \
        q.size else 0
    for _ in range(min(steps, 100000)):
        low = a < threshold
        if not low.any():
            break
        acc = acc + np.where(low, np.power(np.where(low, a, 1.0), -float(s)), 0.0)
        a = np.where(low, a + 1.0, a)
    tail = np.power(a, 1.0 - s) / (s - 1) + 0.5 * np.power(a, -float(s))
    rising = float(s)  # s (s + 1) ... (s + 2j - 2)
    power = np.power(a, -s - 1.0)
    for j, coef in enumerate(_B_OVER_FACT):
        tail = tail + coef * rising * power
        rising *= (s + 2 * j + 1) * (s + 2 * j + 2)
        power = power / (a * a)
    return acc + tail


def _polygamma_np(n, x):
    if n == 0:
        return _digamma_np(x)
    x = np.asarray(x, dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _polygamma_poles(n, x)


def _polygamma_poles(n, x):
    sign = 1.0 if n % 2 else -1.0
    out = sign * math.factorial(n) * _hurwitz_zeta_np(n + 1, x)
    pole = (x <= 0) & (x == np.floor(x))
    return np.where(pole, sign * np.inf, out)


def _i1_np(x):
    """Modified Bessel I1 by its power series (converges for every x; fine for |x| < 700)."""
    x = np.asarray(x, dtype=np.float64)
    half = x / 2.0
    term = half.copy()
    total = term.copy()
    sq = half * half
    for k in range(1, 1000):
        term = term * sq / (k * (k + 1))
        total = total + term
        if np.all(np.abs(term) <= 1e-17 * np.abs(total)):
            break
    return total


# ------------------------------------------------------------------------------ Functions
# Named after PyTorch's ops, so that grad_fn prints as LgammaBackward, PolygammaBackward, ...
class Lgamma(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _like(_lgamma_np(_values(x)), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _C.mul(grad, digamma(x))


class Polygamma(Function):
    """polygamma(n, x) (n = 0: digamma)."""

    @staticmethod
    def forward(ctx, x, n):
        ctx.n = n
        ctx.save_for_backward(x)
        return _like(_polygamma_np(n, _values(x)), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _C.mul(grad, Polygamma.apply(x, ctx.n + 1)), None


class Digamma(Polygamma):
    """polygamma(0, x), with its own node name (DigammaBackward, as PyTorch's)."""


class I0(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _like(np.i0(_values(x)), x)

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return _C.mul(grad, i1(x))


class SpecialI1(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _like(_i1_np(_values(x)), x)

    @staticmethod
    def backward(ctx, grad):
        # i1'(x) = i0(x) - i1(x) / x, and 1/2 at x = 0
        (x,) = ctx.saved_tensors
        at_zero = _C.eq_scalar(x, 0)
        safe_x = _C.where(at_zero, _C.full(x._dtype, (), 1.0), x)
        ratio = _C.where(at_zero, _C.full(x._dtype, (), 0.5), _C.div(SpecialI1.apply(x), safe_x))
        return _C.mul(grad, _C.sub(I0.apply(x), ratio))


# ------------------------------------------------------------------------------ the functions
def lgamma(input, *, out=None):
    """log |Gamma(x)|; gradient digamma(x)."""
    _no_out("lgamma", out)
    return Lgamma.apply(_float_input(input, "lgamma"))


def digamma(input, *, out=None):
    """psi(x) = d/dx lgamma(x); gradient polygamma(1, x)."""
    _no_out("digamma", out)
    return Digamma.apply(_float_input(input, "digamma"), 0)


def polygamma(n, input, *, out=None):
    """The n-th derivative of digamma; gradient polygamma(n + 1, x)."""
    _no_out("polygamma", out)
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"polygamma(): argument 'n' (position 1) must be int, not "
                        f"{type(n).__name__}")
    if n < 0:
        raise RuntimeError("polygamma(n, x) does not support negative n.")
    return Polygamma.apply(_float_input(input, "polygamma"), n)


def mvlgamma(input, p, *, out=None):
    """The multivariate log-gamma of dimension p: p(p-1)/4 log(pi) + sum_i lgamma(x - i/2)."""
    _no_out("mvlgamma", out)
    x = _float_input(input, "mvlgamma")
    if p < 1:
        raise RuntimeError("p has to be greater than or equal to 1")
    # PyTorch 2.13 no longer checks x > (p - 1) / 2: outside it the values are inf/nan
    total = None
    for i in range(p):
        term = lgamma(_C.add(x, _C.full(x._dtype, (), -i / 2.0)) if i else x)
        total = term if total is None else _C.add(total, term)
    return _C.add(total, _C.full(x._dtype, (), p * (p - 1) / 4 * math.log(math.pi)))


def i0(input, *, out=None):
    """The modified Bessel function of the first kind, order 0; gradient i1(x)."""
    _no_out("i0", out)
    return I0.apply(_float_input(input, "i0"))


def i1(input, *, out=None):
    """The modified Bessel function of the first kind, order 1; gradient i0(x) - i1(x)/x."""
    _no_out("i1", out)
    return SpecialI1.apply(_float_input(input, "i1"))


def _no_out(name, out):
    if out is not None:
        raise NotImplementedError(f"cagrad's {name}() does not support out=; use the returned "
                                  f"tensor")


# ------------------------------------------------------------------------------ methods
def polygamma_method(self, n):
    return polygamma(n, self)


def _in_place(fn):
    def method(self, *args):
        result = fn(self, *args)
        _C.copy_(self, result)
        return self
    method.__name__ = fn.__name__ + "_"
    return method


lgamma_ = _in_place(lgamma)
digamma_ = _in_place(digamma)
mvlgamma_ = _in_place(mvlgamma)
i0_ = _in_place(i0)


def polygamma_(self, n):
    result = polygamma(n, self)
    _C.copy_(self, result)
    return self
