"""lgamma, digamma, polygamma, mvlgamma and cagrad.special against torch 2.13: values and
gradients (float32/float64, eager and compiled), gradcheck and gradgradcheck in float64,
promotion of integer inputs, and errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch
from helpers import TOL_SUM, assert_close, ca, error_of

RNG = np.random.default_rng(2028)
POS = RNG.uniform(0.2, 6.0, (3, 4))
MIXED = np.array([[-2.5, -0.7, 0.3, 1.0], [2.7, 0.9, -3.3, 12.0], [0.05, 7.5, 30.0, -1.5]])
UNIT = RNG.uniform(0.05, 0.95, (3, 4))
ANY = RNG.standard_normal((3, 4)) * 2

# torch's float64 trigamma (polygamma(1, .), digamma's derivative) is accurate to ~5e-10
# relative only (cagrad's agrees with scipy to an ulp, see test_trigamma_matches_scipy)
TRIGAMMA_TOL = {"float32": dict(rtol=1e-5, atol=1e-5), "float64": dict(rtol=1e-9, atol=1e-9)}

CASES = {
    "lgamma": (lambda L, x: L.lgamma(x), MIXED, None),
    "lgamma method": (lambda L, x: x.lgamma(), POS, None),
    "gammaln": (lambda L, x: L.special.gammaln(x), POS, None),
    "digamma": (lambda L, x: L.digamma(x), MIXED, TRIGAMMA_TOL),
    "psi": (lambda L, x: L.special.psi(x), POS, TRIGAMMA_TOL),
    "digamma method": (lambda L, x: x.digamma(), POS, TRIGAMMA_TOL),
    "polygamma 1": (lambda L, x: L.polygamma(1, x), MIXED, TRIGAMMA_TOL),
    "polygamma 2": (lambda L, x: L.polygamma(2, x), POS, None),
    "polygamma 3 method": (lambda L, x: x.polygamma(3), POS, None),
    "special polygamma 4": (lambda L, x: L.special.polygamma(4, x), POS, None),
    "mvlgamma 1": (lambda L, x: L.mvlgamma(x, 1), POS, None),
    "mvlgamma 3": (lambda L, x: L.mvlgamma(x + 1, 3), POS, None),
    "multigammaln 2": (lambda L, x: L.special.multigammaln(x + 1, p=2), POS, None),
    "mvlgamma method": (lambda L, x: (x + 2).mvlgamma(p=4), POS, None),
    "erf": (lambda L, x: L.special.erf(x), ANY, None),
    "erfc": (lambda L, x: L.special.erfc(x), ANY, None),
    "erfinv": (lambda L, x: L.special.erfinv(x * 2 - 1), UNIT, None),
    "expit": (lambda L, x: L.special.expit(x), ANY, None),
    "logit": (lambda L, x: L.special.logit(x), UNIT, None),
    "logit eps": (lambda L, x: L.special.logit(x, eps=0.1), UNIT, None),
    "xlogy": (lambda L, x: L.special.xlogy(x, x + 1), POS, None),
    "xlog1py": (lambda L, x: L.special.xlog1py(x - 1, x), POS, None),
    "ndtr": (lambda L, x: L.special.ndtr(x), ANY, None),
    "entr": (lambda L, x: L.special.entr(x), POS, None),
    "exp2": (lambda L, x: L.special.exp2(x), ANY, None),
    "expm1": (lambda L, x: L.special.expm1(x), ANY, None),
    "log1p": (lambda L, x: L.special.log1p(x), POS, None),
    "sinc": (lambda L, x: L.special.sinc(x), ANY, None),
    "softmax": (lambda L, x: L.special.softmax(x, 1), ANY, None),
    "log_softmax": (lambda L, x: L.special.log_softmax(x, dim=0), ANY, None),
    "logsumexp": (lambda L, x: L.special.logsumexp(x, 1, keepdim=True), ANY, None),
    "i0": (lambda L, x: L.special.i0(x), ANY, None),
    "i0 function": (lambda L, x: L.i0(x), ANY, None),
    "i1": (lambda L, x: L.special.i1(x), ANY, None),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_values_and_gradients_match_torch(name, dtype, compiled):
    fn, x, tol = CASES[name]
    check_against_torch(fn, [x], dtype, compiled=compiled, tol=tol or TOL_SUM, msg=name)


GRADCHECK = ["lgamma", "digamma", "polygamma 2", "mvlgamma 3", "i0", "i1", "xlog1py",
             "entr", "ndtr"]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_and_gradgradcheck_float64(name):
    fn, x, _ = CASES[name]
    t = ca.tensor(x[:2, :3].copy(), requires_grad=True)
    assert ca.autograd.gradcheck(lambda v: fn(ca, v), (t,))
    assert ca.autograd.gradgradcheck(lambda v: fn(ca, v), (t,))


def test_trigamma_matches_scipy():
    special = pytest.importorskip("scipy.special")
    x = np.concatenate([MIXED.ravel(), [1e-8, 100.0, 1e5]])
    for n in (0, 1, 2, 5):
        np.testing.assert_allclose(ca.polygamma(n, ca.tensor(x)).numpy(),
                                   special.polygamma(n, x), rtol=1e-14)
    np.testing.assert_allclose(ca.lgamma(ca.tensor(x)).numpy(), special.gammaln(x), rtol=1e-14)


def test_mvlgamma_outside_its_domain_matches_torch():
    x = np.array([0.5, 3.0, 0.7, -0.2])
    assert_close(ca.mvlgamma(ca.tensor(x), 3), torch.mvlgamma(torch.tensor(x), 3))


def test_poles_match_torch():
    x = np.array([0.0, -0.0, -1.0, -4.0, np.inf, np.nan])
    for fn in (lambda L, t: L.lgamma(t), lambda L, t: L.digamma(t),
               lambda L, t: L.polygamma(2, t), lambda L, t: L.polygamma(3, t)):
        assert_close(fn(ca, ca.tensor(x[:4])), fn(torch, torch.tensor(x[:4])))
    assert_close(ca.lgamma(ca.tensor(x[4:])), torch.lgamma(torch.tensor(x[4:])))


def test_integer_inputs_promote_to_the_default_dtype():
    for fn in (lambda L, t: L.lgamma(t), lambda L, t: L.digamma(t),
               lambda L, t: L.polygamma(1, t), lambda L, t: L.special.i0(t),
               lambda L, t: L.mvlgamma(t, 2)):
        c, t = fn(ca, ca.tensor([1, 2, 5])), fn(torch, torch.tensor([1, 2, 5]))
        assert_close(c, t, **TRIGAMMA_TOL["float32"])


def test_in_place_forms_match_torch():
    def run(L):
        a, b, c = L.tensor(POS.copy()), L.tensor(POS.copy()), L.tensor(POS.copy())
        same = a.lgamma_() is a
        b.digamma_()
        c.polygamma_(2)
        return same, a, b, c
    c, t = run(ca), run(torch)
    assert c[0] and t[0]
    for x, y in zip(c[1:], t[1:]):
        assert_close(x, y, **TRIGAMMA_TOL["float32"])


ERRORS = {
    "negative n": lambda L: L.polygamma(-1, L.ones(2)),
    "mvlgamma p": lambda L: L.mvlgamma(L.tensor([0.5, 3.0]), 0),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    assert error_of(ca, ERRORS[name]) == error_of(torch, ERRORS[name])


def test_missing_special_names_point_to_the_docs():
    with pytest.raises(AttributeError, match="docs/python-api.md"):
        ca.special.bessel_j0  # noqa: B018
