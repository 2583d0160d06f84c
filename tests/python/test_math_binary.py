"""The binary math ops (ops_math.c: atan2, hypot, fmod, remainder, copysign, logaddexp,
logaddexp2, xlogy, floor_divide) against PyTorch 2.13: values and gradients in float32 and
float64 with broadcasting, eager and compiled, gradcheck, special values (signs of zero,
inf, NaN, zero divisors), Python numbers as operands, aliases and in-place forms."""

import numpy as np
import pytest
import torch

from helpers import (STANDIN, assert_close, backward_checked, ca, compiled_ctx, numeric_gradient,
                     to_np)

pytestmark = pytest.mark.skipif(STANDIN, reason="checks cagrad's own kernels")

DIFFERENTIABLE = ["atan2", "hypot", "fmod", "remainder", "copysign", "logaddexp",
                  "logaddexp2", "xlogy"]
NODE = {"atan2": "Atan2Backward0", "hypot": "HypotBackward0", "fmod": "FmodBackward1",
        "remainder": "RemainderBackward1", "copysign": "CopysignBackward0",
        "logaddexp": "LogaddexpBackward0", "logaddexp2": "Logaddexp2Backward0",
        "xlogy": "XlogyBackward0"}


def operands(rng, name, dtype):
    """a (4, 5) and b (1, 5), which broadcasts; b away from 0 for the divisions, positive
    for xlogy, and a with zeros for xlogy"""
    a = rng.standard_normal((4, 5)) * 3
    b = rng.standard_normal((1, 5)) * 2
    if name in ("fmod", "remainder"):
        b = np.sign(b) * (np.abs(b) + 0.5)
        a = np.round(a * 8) / 8 + 1 / 64  # off the jumps at multiples of b
    if name == "xlogy":
        b = np.abs(b) + 0.25
        a[0, :2] = 0
    if name == "copysign":
        a[1, 0] = 0.0
    return a.astype(dtype), b.astype(dtype)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", DIFFERENTIABLE)
def test_values_and_gradients_match_torch(name, dtype, compiled, rng):
    a, b = operands(rng, name, dtype)
    g = rng.standard_normal((4, 5)).astype(dtype)
    ca_a, ca_b = ca.tensor(a, requires_grad=True), ca.tensor(b, requires_grad=True)
    t_a, t_b = torch.tensor(a, requires_grad=True), torch.tensor(b, requires_grad=True)
    cy, ty = getattr(ca, name)(ca_a, ca_b), getattr(torch, name)(t_a, t_b)
    assert_close(cy, ty, msg=f"{name} values")
    assert cy.grad_fn.name() == ty.grad_fn.name() == NODE[name]
    with compiled_ctx(compiled):
        backward_checked((cy * ca.tensor(g)).sum(), compiled)
    (ty * torch.tensor(g)).sum().backward()
    assert_close(ca_a.grad, t_a.grad, msg=f"{name} gradient of input")
    assert_close(ca_b.grad, t_b.grad, msg=f"{name} gradient of other")


@pytest.mark.parametrize("name", [n for n in DIFFERENTIABLE if n != "copysign"])
def test_gradcheck_float64(name, rng):
    a, b = operands(rng, name, "float64")
    if name == "xlogy":
        a[0, :2] = 0.5  # xlogy's gradient at a == 0 is one-sided
    g = rng.standard_normal((4, 5))
    ca_a, ca_b = ca.tensor(a, requires_grad=True), ca.tensor(b, requires_grad=True)
    (getattr(ca, name)(ca_a, ca_b) * ca.tensor(g)).sum().backward()

    def loss(x, y):
        return float((getattr(ca, name)(ca.tensor(x), ca.tensor(y)) * ca.tensor(g)).sum())

    np.testing.assert_allclose(to_np(ca_a.grad), numeric_gradient(lambda x: loss(x, b), a),
                               rtol=1e-4, atol=1e-6)
    np.testing.assert_allclose(to_np(ca_b.grad), numeric_gradient(lambda y: loss(a, y), b),
                               rtol=1e-4, atol=1e-6)


SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.5, -2.5, 7.0, -7.0, np.inf, -np.inf, np.nan, 1e-30]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", DIFFERENTIABLE + ["floor_divide"])
def test_special_values_match_torch(name, dtype):
    """every pair of special values, with the signs of zeros compared too"""
    a, b = np.meshgrid(np.array(SPECIAL, dtype=dtype), np.array(SPECIAL, dtype=dtype))
    cy = getattr(ca, name)(ca.tensor(a), ca.tensor(b))
    ty = getattr(torch, name)(torch.tensor(a), torch.tensor(b))
    assert_close(cy, ty, msg=name)
    ours, theirs = to_np(cy), to_np(ty)
    zeros = theirs == 0
    np.testing.assert_array_equal(np.signbit(ours[zeros]), np.signbit(theirs[zeros]),
                                  err_msg=f"{name}: signs of zero")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ["fmod", "remainder", "floor_divide"])
def test_divisions_match_torch_across_signs(name, dtype, rng):
    a = np.concatenate([rng.standard_normal(200) * 50, [5.0, -5.0, 0.3, -0.3, 1e6]])
    b = np.concatenate([rng.standard_normal(200) * 3, [2.5, 2.5, -0.1, 0.1, 7e-3]])
    cy = getattr(ca, name)(ca.tensor(a.astype(dtype)), ca.tensor(b.astype(dtype)))
    ty = getattr(torch, name)(torch.tensor(a.astype(dtype)), torch.tensor(b.astype(dtype)))
    assert_close(cy, ty, msg=name)


def test_floor_divide_records_no_gradient():
    x = ca.tensor([1.5, -2.5], requires_grad=True)
    y = ca.floor_divide(x, ca.tensor([0.7, 0.7]))
    assert not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize("name, args", [("fmod", (None, -1.5)), ("remainder", (None, -1.5)),
                                        ("remainder", (None, 2)), ("copysign", (None, -0.0)),
                                        ("floor_divide", (None, 0.75)), ("xlogy", (None, 3.0)),
                                        ("xlogy", (2.5, None))])
def test_a_number_operand_matches_torch(name, args):
    x = np.array([[1.25, -2.5, 0.0], [3.5, -0.75, 6.0]])
    if name == "xlogy" and args[0] is not None:
        x = np.abs(x) + 0.5
    ca_args = [ca.tensor(x) if a is None else a for a in args]
    t_args = [torch.tensor(x) if a is None else a for a in args]
    assert_close(getattr(ca, name)(*ca_args), getattr(torch, name)(*t_args))


def test_number_operand_keeps_float32_and_takes_gradient():
    cx = ca.tensor([1.25, -2.5], requires_grad=True)
    tx = torch.tensor([1.25, -2.5], requires_grad=True)
    cy, ty = ca.remainder(cx, 1.0), torch.remainder(tx, 1.0)
    assert_close(cy, ty)
    cy.sum().backward()
    ty.sum().backward()
    assert_close(cx.grad, tx.grad)


def test_arctan2_is_atan2():
    assert ca.arctan2 is ca.atan2
    a, b = np.array([1.0, -1.0, 0.5]), np.array([-2.0, -0.0, 0.5])
    assert_close(ca.tensor(a).arctan2(ca.tensor(b)), torch.tensor(a).arctan2(torch.tensor(b)))


@pytest.mark.parametrize("name", ["atan2", "arctan2", "hypot", "fmod", "remainder", "copysign",
                                  "xlogy", "floor_divide"])
def test_inplace_methods_match_torch(name):
    a, b = np.array([1.25, -2.5, 0.75]), np.array([0.5, 2.0, 1.5])
    cx, tx = ca.tensor(a), torch.tensor(a)
    assert getattr(cx, f"{name}_")(ca.tensor(b)) is cx
    getattr(tx, f"{name}_")(torch.tensor(b))
    assert_close(cx, tx)


@pytest.mark.parametrize("name", ["atan2", "copysign", "xlogy"])
def test_int64_is_promoted_as_in_torch(name):
    a, b = [1, -2, 0, 3], [2, 3, -1, 1]
    assert_close(getattr(ca, name)(ca.tensor(a), ca.tensor(b)),
                 getattr(torch, name)(torch.tensor(a), torch.tensor(b)))
    fb = np.array(b, dtype=np.float64)  # int64 with float64: float64
    assert_close(getattr(ca, name)(ca.tensor(a), ca.tensor(fb)),
                 getattr(torch, name)(torch.tensor(a), torch.tensor(fb)))


@pytest.mark.parametrize("name", ["hypot", "logaddexp"])
def test_other_int64_is_refused_by_name(name):
    """PyTorch: NotImplementedError for hypot and logaddexp (fmod, remainder and
    floor_divide of integers are exact int64: test_int_arith.py)"""
    with pytest.raises(RuntimeError, match=f"{name}: int64 inputs are not supported"):
        getattr(ca, name)(ca.tensor([1, 2]), ca.tensor([3, 4]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_mod_and_floordiv_operators_match_torch(dtype):
    a = np.array([5.5, -7.25, 3.0, -0.0, 1e-3], dtype=dtype)
    b = np.array([2.0, 2.0, -1.5, 3.0, -0.5], dtype=dtype)
    results = []
    for L in (ca, torch):
        x, y = L.tensor(a), L.tensor(b)
        inplace_mod, inplace_div = x.clone(), x.clone()
        inplace_mod %= 2.0
        inplace_div //= y
        results.append([x % 2, 7 % x, x // 2, 7.5 // x, x % y, x // y, inplace_mod,
                        inplace_div])
    for i, (ours, theirs) in enumerate(zip(*results)):
        assert_close(ours, theirs, msg=f"operator {i}")


def test_mod_operator_takes_gradient():
    cx = ca.tensor([5.5, -7.25], requires_grad=True)
    tx = torch.tensor([5.5, -7.25], requires_grad=True)
    (cx % 2.0).sum().backward()
    (tx % 2.0).sum().backward()
    assert_close(cx.grad, tx.grad)
