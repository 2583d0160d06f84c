"""cagrad.special: torch.special's names for cagrad's functions.

Most are other names of cagrad ops (expit is sigmoid, gammaln is lgamma, ...); gammaln,
digamma/psi, polygamma, multigammaln, i0 and i1 compute their forward with numpy and run
as call-outs in compiled graphs (see _special_fns.py). Names of torch.special that cagrad
lacks (bessel_j0, zeta, gammainc, ...) raise an AttributeError pointing to
docs/python-api.md.
"""

import math

from . import _C
from . import _functions as F
from ._special_fns import digamma, i0, i1, lgamma, mvlgamma, polygamma

_SQRT1_2 = 1.0 / math.sqrt(2.0)

__all__ = ["gammaln", "digamma", "psi", "polygamma", "multigammaln", "erf", "erfc",
           "erfinv", "expit", "logit", "xlogy", "xlog1py", "log_softmax", "softmax",
           "logsumexp", "i0", "i1", "exp2", "expm1", "log1p", "sinc", "round", "ndtr", "entr"]

gammaln = lgamma
psi = digamma


def multigammaln(input, p, *, out=None):
    return mvlgamma(input, p, out=out)


def _namespace():
    import cagrad
    return cagrad


def erf(input, *, out=None):
    return _namespace().erf(input, out=out)


def erfc(input, *, out=None):
    return _namespace().erfc(input, out=out)


def erfinv(input, *, out=None):
    return _namespace().erfinv(input, out=out)


def expit(input, *, out=None):
    """The logistic sigmoid 1 / (1 + exp(-x))."""
    _no_out("expit", out)
    return _namespace().sigmoid(input)


def logit(input, eps=None, *, out=None):
    return _namespace().logit(input, eps, out=out)


def xlogy(input, other, *, out=None):
    return _namespace().xlogy(input, other, out=out)


def xlog1py(input, other, *, out=None):
    """x * log1p(y), 0 where x is 0 (even where log1p(y) is infinite or NaN)."""
    _no_out("xlog1py", out)
    cagrad = _namespace()
    x, y = _tensors(input, other)
    product = cagrad.mul(x, cagrad.log1p(y))
    return cagrad.where(cagrad.eq(x, 0), cagrad.zeros_like(product), product)


def exp2(input, *, out=None):
    return _namespace().exp2(input, out=out)


def expm1(input, *, out=None):
    return _namespace().expm1(input, out=out)


def log1p(input, *, out=None):
    return _namespace().log1p(input, out=out)


def sinc(input, *, out=None):
    return _namespace().sinc(input, out=out)


def round(input, *, decimals=0, out=None):  # noqa: A001 (torch.special.round)
    return _namespace().round(input, decimals, out=out)


def ndtr(input, *, out=None):
    """The standard normal CDF, 0.5 * erfc(-x / sqrt(2))."""
    _no_out("ndtr", out)
    cagrad = _namespace()
    return cagrad.mul(cagrad.erfc(cagrad.mul(input, -_SQRT1_2)), 0.5)


def entr(input, *, out=None):
    """-x log x for x > 0, 0 at 0 and -inf for x < 0."""
    _no_out("entr", out)
    cagrad = _namespace()
    x = input
    inner = cagrad.neg(cagrad.xlogy(x, x))
    negative = cagrad.full_like(x, -math.inf)
    return cagrad.where(cagrad.lt(x, 0), negative, inner)


def softmax(input, dim, *, dtype=None):
    return F.softmax(input, dim, dtype)


def log_softmax(input, dim, *, dtype=None):
    return F.log_softmax(input, dim, dtype)


def logsumexp(input, dim, keepdim=False, *, out=None):
    _no_out("logsumexp", out)
    return F.logsumexp(input, dim, keepdim)


def _tensors(a, b):
    cagrad = _namespace()
    if not isinstance(a, _C.TensorBase):
        a = cagrad.full((), a, dtype=b.dtype)
    if not isinstance(b, _C.TensorBase):
        b = cagrad.full((), b, dtype=a.dtype)
    return a, b


def _no_out(name, out):
    if out is not None:
        raise NotImplementedError(f"cagrad's special.{name}() does not support out=; use the "
                                  f"returned tensor")


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.special' has no attribute {name!r}: cagrad.special "
                         f"has {', '.join(__all__)} (see docs/python-api.md)")

