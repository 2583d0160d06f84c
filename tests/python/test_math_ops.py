"""The everyday math ops (ops_math.c) against PyTorch 2.13 where the generic registry tests
(test_registry_ops.py) do not reach: special values (inf, nan, -0.0), rounding ties,
erfinv near +-1, round's decimals, int64 inputs, the aliases and the in-place methods."""

import numpy as np
import pytest
import torch

from helpers import STANDIN, assert_close, ca, to_np

pytestmark = pytest.mark.skipif(STANDIN, reason="checks cagrad's own kernels")

UNARY = ("log1p expm1 log2 log10 exp2 erf erfc erfinv sinh cosh tan asin acos atan asinh "
         "acosh atanh sinc deg2rad rad2deg square reciprocal floor ceil trunc round frac "
         "sgn logit").split()
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 1.0, -1.0, 0.5, -0.5, 1.5, -2.5, 1e-30,
           -1e-30, 1e30, -1e30, 88.0, -88.0, 710.0, 3.0e-8]


def both(values, dtype):
    arr = np.array(values, dtype=dtype)
    return ca.tensor(arr), torch.tensor(arr)


def assert_same_bits_of_sign(c, t, msg):
    """-0.0 against 0.0 as well as the values (assert_close treats them as equal)."""
    a, b = to_np(c), to_np(t)
    finite = ~np.isnan(b)
    np.testing.assert_array_equal(np.signbit(a[finite]), np.signbit(b[finite]), err_msg=msg)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", UNARY)
def test_special_values_match_torch(name, dtype):
    cx, tx = both(SPECIAL, dtype)
    cy, ty = getattr(ca, name)(cx), getattr(torch, name)(tx)
    assert_close(cy, ty, msg=f"{name} at {SPECIAL}")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "frac", "sgn", "square",
                                  "sinh", "tan", "asin", "atan", "asinh", "atanh", "erf",
                                  "erfinv", "expm1", "log1p", "deg2rad", "reciprocal"])
def test_signs_of_zero_match_torch(name, dtype):
    values = [0.0, -0.0, -0.25, 0.25, -0.5, 0.5, -0.75, -1e-30, 1e-30]
    cx, tx = both(values, dtype)
    cy, ty = getattr(ca, name)(cx), getattr(torch, name)(tx)
    assert_close(cy, ty, msg=name)
    assert_same_bits_of_sign(cy, ty, f"{name}: signs of zero")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_breaks_ties_to_even(dtype):
    values = [-3.5, -2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 3.5, 4.5, 2.4999, -2.5001]
    cx, tx = both(values, dtype)
    assert_close(ca.round(cx), torch.round(tx))
    assert_close(cx.round(), tx.round())


@pytest.mark.parametrize("decimals", [1, 2, 3, -1, -2])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_round_decimals_match_torch(decimals, dtype, rng):
    values = np.concatenate([rng.standard_normal(40) * 300, [0.25, 1.25, 0.125, 150.0, 250.0]])
    cx, tx = both(values, dtype)
    assert_close(ca.round(cx, decimals=decimals), torch.round(tx, decimals=decimals))


def test_round_decimals_of_int64_is_refused():
    # PyTorch raises NotImplementedError ("round_cpu" not implemented for 'Long')
    with pytest.raises(RuntimeError, match="decimals=1 needs a float tensor"):
        ca.round(ca.tensor([1, 2]), decimals=1)


def test_round_gradient_is_zero():
    cx = ca.tensor([0.4, 1.6, -2.5], requires_grad=True)
    tx = torch.tensor([0.4, 1.6, -2.5], requires_grad=True)
    ca.round(cx, decimals=1).sum().backward()
    torch.round(tx, decimals=1).sum().backward()
    assert_close(cx.grad, tx.grad)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_erfinv_near_its_ends_matches_torch(dtype):
    ends = [1 - 1e-7, 1 - 1e-6, 0.999999, 0.99999, 0.9999, 0.999, 0.99, 0.9, 0.5 - 1e-9,
            0.5, 0.5 + 1e-9, 1e-5, 1e-12, 1.0, 1.0 + 1e-6, 2.0]
    values = ends + [-v for v in ends]
    cx, tx = both(values, dtype)
    rtol = 1e-5 if dtype == "float32" else 1e-12
    assert_close(ca.erfinv(cx), torch.erfinv(tx), rtol=rtol, atol=0)


def test_erfinv_gradient_near_its_ends_matches_torch():
    values = [0.999999, -0.9999, 0.99, 1e-8]
    cx = ca.tensor(values, dtype=ca.float64, requires_grad=True)
    tx = torch.tensor(values, dtype=torch.float64, requires_grad=True)
    ca.erfinv(cx).sum().backward()
    torch.erfinv(tx).sum().backward()
    assert_close(cx.grad, tx.grad, rtol=1e-10, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_sinc_and_its_gradient_near_zero_match_torch(dtype):
    values = [0.0, 1e-8, -1e-4, 0.01, 0.3, 0.318, -0.5, 1.0, 2.0, 7.25]
    cx = ca.tensor(np.array(values, dtype=dtype), requires_grad=True)
    tx = torch.tensor(np.array(values, dtype=dtype), requires_grad=True)
    cy, ty = ca.sinc(cx), torch.sinc(tx)
    assert_close(cy, ty)
    cy.sum().backward()
    # PyTorch's (u cos u - sin u) / (pi x^2) loses digits for small u = pi x (in float32 up
    # to 4e-5 at x = 0.01), where cagrad sums the Taylor series: compare against PyTorch's
    # float64 gradient, and below 1e-3 against the series' float64 value
    x64 = torch.tensor(np.array(values, dtype=dtype).astype(np.float64), requires_grad=True)
    torch.sinc(x64).sum().backward()
    want = to_np(x64.grad)
    near = np.abs(to_np(x64)) < 1e-3
    u = np.pi * to_np(x64)
    want[near] = np.pi * (-u[near] / 3 + u[near] ** 3 / 30)
    np.testing.assert_allclose(to_np(cx.grad), want, rtol=2e-6 if dtype == "float32" else 1e-12,
                               atol=1e-30)


@pytest.mark.parametrize("name", ["floor", "ceil", "trunc", "round", "sgn"])
def test_int64_keeps_its_dtype_as_in_torch(name):
    values = [-3, 0, 2, 7]
    cy = getattr(ca, name)(ca.tensor(values))
    ty = getattr(torch, name)(torch.tensor(values))
    assert_close(cy, ty)


PROMOTED = [n for n in UNARY if n not in ("floor", "ceil", "trunc", "round", "sgn", "square",
                                           "frac")]


@pytest.mark.parametrize("name", PROMOTED)
def test_int64_is_promoted_to_the_default_float_as_in_torch(name):
    values = [0, 1, 2, -1, 5]
    cy, ty = getattr(ca, name)(ca.tensor(values)), getattr(torch, name)(torch.tensor(values))
    assert_close(cy, ty, msg=name)  # float32, the default dtype, in both


def test_int64_follows_the_default_dtype():
    ca.set_default_dtype(ca.float64)
    try:
        assert ca.erf(ca.tensor([1, 2])).dtype == ca.float64
    finally:
        ca.set_default_dtype(ca.float32)


@pytest.mark.parametrize("name", PROMOTED)
def test_inplace_on_int64_is_refused_as_in_torch(name):
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired "
                                           "output type Long"):
        getattr(ca.tensor([1, 2]), f"{name}_")()
    with pytest.raises(RuntimeError, match="result type Float can't be cast"):
        getattr(torch.tensor([1, 2]), f"{name}_")()


def test_frac_of_int64_is_refused():
    # PyTorch raises NotImplementedError ("frac_cpu" not implemented for 'Long')
    with pytest.raises(RuntimeError, match="frac: int64 inputs are not supported"):
        ca.frac(ca.tensor([1, 2]))


@pytest.mark.parametrize("eps", [None, 0.05, 1e-6, 0.0, -0.5, 0.5])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_logit_eps_matches_torch(eps, dtype):
    """values and gradients, inside, on and outside [eps, 1 - eps] and [0, 1]"""
    x = np.array([0.0, 1e-7, 0.01, 0.05, 0.3, 0.5, 0.95, 0.999, 1.0, -0.25, 1.5], dtype=dtype)
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    cy, ty = ca.logit(cx, eps), torch.logit(tx, eps)
    assert_close(cy, ty, msg=f"logit(eps={eps})")
    assert cy.grad_fn.name() == ty.grad_fn.name()
    cy.sum().backward()
    ty.sum().backward()
    inside = (x >= 0) & (x <= 1)  # PyTorch's gradient is NaN outside [0, 1] without eps
    assert_close(to_np(cx.grad)[inside], to_np(tx.grad)[inside], msg=f"logit(eps={eps}) grad")


def test_logit_eps_by_keyword_and_method():
    cx, tx = both([0.001, 0.5, 0.9999], "float64")
    assert_close(cx.logit(eps=0.01), tx.logit(eps=0.01))
    assert_close(ca.logit(cx, eps=None), torch.logit(tx, eps=None))


ALIASES = {"arcsin": "asin", "arccos": "acos", "arctan": "atan", "arcsinh": "asinh",
           "arccosh": "acosh", "arctanh": "atanh", "fix": "trunc"}


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_aliases_are_torchs(alias):
    assert getattr(ca, alias) is getattr(ca, ALIASES[alias])
    assert hasattr(torch, alias) and hasattr(torch.Tensor, alias)
    x = [1.2, 1.5, 2.0] if alias == "arccosh" else [-0.5, 0.25, 0.75]
    cx, tx = both(x, "float64")
    assert_close(getattr(cx, alias)(), getattr(tx, alias)())


INPLACE = UNARY + sorted(ALIASES)


@pytest.mark.parametrize("name", INPLACE)
def test_inplace_methods_match_torch(name):
    assert hasattr(torch.Tensor, f"{name}_")
    x = [1.2, 1.5, 2.0] if name in ("acosh", "arccosh") else [-0.5, 0.25, 0.75]
    cx, tx = both(x, "float32")
    version = cx._version
    assert getattr(cx, f"{name}_")() is cx
    getattr(tx, f"{name}_")()
    assert_close(cx, tx)
    assert cx._version > version


def test_inplace_method_is_refused_on_a_leaf_that_requires_grad():
    cx = ca.tensor([0.5], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        cx.log1p_()


def test_inplace_method_inside_the_graph_is_recorded():
    """In the autograd graph an in-place method is recorded, as torch's (gradient through
    it); without grad it runs in place."""
    grads = []
    for L in (ca, torch):
        leaf = L.tensor([0.1, 0.2], requires_grad=True)
        y = leaf * 2
        y.log1p_()  # torch has no in-place derivative for some (atanh_)
        y.sum().backward()
        grads.append(leaf.grad.tolist())
    np.testing.assert_allclose(grads[0], grads[1], rtol=1e-6)
    with ca.no_grad():
        cz = ca.tensor([0.2, 0.5]) * 2
        cz.atanh_()
    assert_close(cz, torch.tensor([0.4, 1.0]).atanh())


def test_round_inplace_takes_decimals():
    cx, tx = both([1.234, -5.678], "float64")
    cx.round_(decimals=2)
    tx.round_(decimals=2)
    assert_close(cx, tx)
