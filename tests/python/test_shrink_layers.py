"""Softshrink, Hardshrink, Softmin and RReLU (functional and modules) against torch:
values and gradients in float32 and float64, eager and compiled, gradcheck, reprs and
errors. RReLU's training slopes are random (cagrad's generator): checked by their range
and by the gradient they give."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, error_of

X = np.array([-2.0, -0.7, -0.5, -0.2, 0.0, 0.3, 0.5, 0.9, 3.0])
CALLS = {
    "softshrink": lambda L, x: L.nn.functional.softshrink(x, 0.5),
    "hardshrink": lambda L, x: L.nn.functional.hardshrink(x, 0.4),
    "softmin": lambda L, x: L.nn.functional.softmin(x.reshape(3, 3), dim=1),
    "rrelu_eval": lambda L, x: L.nn.functional.rrelu(x, 0.1, 0.3, training=False),
    "Softshrink": lambda L, x: L.nn.Softshrink(0.25)(x),
    "Hardshrink": lambda L, x: L.nn.Hardshrink()(x),
    "Softmin": lambda L, x: L.nn.Softmin(dim=0)(x.reshape(3, 3)),
    "RReLU_eval": lambda L, x: L.nn.RReLU().eval()(x),
}


@pytest.mark.parametrize("name", sorted(CALLS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_values_and_gradients(name, dtype, compiled):
    out = []
    for L in (ca, torch):
        x = L.tensor(X, dtype=getattr(L, dtype), requires_grad=True)
        with compiled_ctx(compiled and L is ca):
            y = CALLS[name](L, x)
            (y * L.arange(1.0, y.numel() + 1, dtype=x.dtype).reshape(y.shape)).sum().backward()
        out.append((y.detach(), x.grad))
    assert_close(out[0][0], out[1][0])
    assert_close(out[0][1], out[1][1])


@pytest.mark.parametrize("name", ["softshrink", "softmin", "rrelu_eval"])
def test_gradcheck(name):
    x = ca.tensor(X + 0.01, dtype=ca.float64, requires_grad=True)
    assert ca.autograd.gradcheck(lambda t: CALLS[name](ca, t), (x,))


def test_rrelu_training_slopes():
    ca.manual_seed(0)
    x = ca.tensor(np.linspace(-3, 3, 400), dtype=ca.float64, requires_grad=True)
    y = ca.nn.RReLU(0.1, 0.3).train()(x)
    y.sum().backward()
    neg = x.detach().numpy() < 0
    slope = y.detach().numpy()[neg] / x.detach().numpy()[neg]
    assert slope.min() >= 0.1 and slope.max() <= 0.3 and slope.std() > 0.02
    np.testing.assert_allclose(x.grad.numpy()[neg], slope, rtol=1e-12)
    np.testing.assert_array_equal(y.detach().numpy()[~neg], x.detach().numpy()[~neg])


def test_rrelu_inplace_in_the_graph():
    x = ca.tensor(X, requires_grad=True)
    h = x * 1
    assert ca.nn.functional.rrelu(h, training=False, inplace=True) is h
    h.sum().backward()
    want = np.where(X > 0, 1.0, (1 / 8 + 1 / 3) / 2)  # slope at 0 too, as torch
    np.testing.assert_allclose(x.grad.numpy(), want, rtol=1e-6)


def test_reprs():
    for make in (lambda L: L.nn.Softshrink(), lambda L: L.nn.Hardshrink(0.3),
                 lambda L: L.nn.Softmin(1), lambda L: L.nn.RReLU(),
                 lambda L: L.nn.RReLU(0.1, 0.2, True)):
        assert repr(make(ca)) == repr(make(torch))


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.softshrink(L.ones(2), -1.0),
    lambda L: L.nn.functional.rrelu(L.ones(2), 0.5, 0.1),
], ids=["softshrink-negative", "rrelu-bounds"])
def test_errors(make):
    assert error_of(ca, make) == error_of(torch, make)


def test_softmin_without_dim_warns_like_torch():
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="Implicit dimension choice for softmin"):
            L.nn.functional.softmin(L.ones(2, 3))
