"""cagrad.autograd.functional (vjp, jvp, hvp, vhp, jacobian, hessian) against
torch.autograd.functional 2.13: values and structure in float64 and float32, create_graph
(results differentiable again), strict mode and the argument errors."""

import numpy as np
import pytest
import torch

from helpers import ca

RNG = np.random.default_rng(3)
X0, Y0, V0 = RNG.standard_normal(3), RNG.standard_normal((2, 3)), RNG.standard_normal(3)
W0 = RNG.standard_normal((2, 3))


def scalar_f(L):
    def fn(x, y):
        return (L.tanh(y @ x) * (x[:2] ** 2)).sum() + (x * x * x).sum()
    return fn


def vector_f(L):
    def fn(x):
        return L.tanh(x) * x.sum()
    return fn


def two_out_f(L):
    def fn(x, y):
        return x.exp(), (y * x).sum(1)
    return fn


def call(L, name, dtype):
    F = L.autograd.functional
    x, y, v, w = (L.tensor(a.astype(dtype)) for a in (X0, Y0, V0, W0))
    if name == "vjp":
        return F.vjp(vector_f(L), x, v)
    if name == "jvp":
        return F.jvp(vector_f(L), x, v)
    if name == "hvp":
        return F.hvp(scalar_f(L), (x, y), (v, w))
    if name == "vhp":
        return F.vhp(scalar_f(L), (x, y), (v, w))
    if name == "jacobian":
        return F.jacobian(two_out_f(L), (x, y))
    return F.hessian(scalar_f(L), (x, y))


def flat(r):
    if isinstance(r, (tuple, list)):
        return [type(r).__name__] + [a for b in r for a in flat(b)]
    return [r.detach().numpy()]


@pytest.mark.parametrize("dtype", [np.float64, np.float32], ids=["f64", "f32"])
@pytest.mark.parametrize("name", ["vjp", "jvp", "hvp", "vhp", "jacobian", "hessian"])
def test_matches_torch(name, dtype):
    got, want = flat(call(ca, name, dtype)), flat(call(torch, name, dtype))
    assert len(got) == len(want)
    tol = 1e-12 if dtype == np.float64 else 1e-5
    for g, w in zip(got, want):
        if isinstance(w, str):
            assert g == w  # the same nesting of tuples
        else:
            assert g.shape == w.shape
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol)


def test_results_are_detached_unless_create_graph():
    x = ca.tensor(X0, requires_grad=True)
    out, h = ca.autograd.functional.vhp(lambda a: (a ** 4).sum(), x, ca.tensor(V0))
    assert not out.requires_grad and not h.requires_grad
    out, h = ca.autograd.functional.vhp(lambda a: (a ** 4).sum(), x, ca.tensor(V0),
                                        create_graph=True)
    assert h.requires_grad
    h.sum().backward()  # a third derivative through the caller's x
    t = torch.tensor(X0, requires_grad=True)
    _, th = torch.autograd.functional.vhp(lambda a: (a ** 4).sum(), t, torch.tensor(V0),
                                          create_graph=True)
    th.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), t.grad.numpy(), rtol=1e-12)


@pytest.mark.parametrize("strict", [False, True])
def test_an_unused_input_gives_zeros_or_strict_error(strict):
    def fn(L):
        return lambda a, b: (a * 2).sum()
    outs = []
    for L in (ca, torch):
        args = (L.tensor(X0), L.tensor(V0))
        try:
            outs.append(L.autograd.functional.vjp(fn(L), args, strict=strict)[1])
        except RuntimeError as e:
            outs.append(type(e))
    if strict:
        assert outs[0] is outs[1] is RuntimeError
    else:
        for g, w in zip(*outs):
            np.testing.assert_array_equal(g.numpy(), w.numpy())


@pytest.mark.parametrize("case", [
    lambda L: L.autograd.functional.vjp(lambda a: a * 2, L.tensor(X0)),  # v needed
    lambda L: L.autograd.functional.vjp(lambda a: a * 2, L.tensor(X0), L.tensor(W0)),
    lambda L: L.autograd.functional.hessian(lambda a: a * 2, L.tensor(X0)),  # not scalar
    lambda L: L.autograd.functional.jvp(lambda a: a, [1.0]),
], ids=["v-none", "v-shape", "hessian-vector-output", "not-a-tensor"])
def test_errors_match_torch(case):
    kinds = []
    for L in (ca, torch):
        with pytest.raises(Exception) as info:
            case(L)
        kinds.append(info.type)
    assert kinds[0] is kinds[1]


def test_vectorize_is_an_honest_refusal():
    with pytest.raises(NotImplementedError, match="vectorize"):
        ca.autograd.functional.jacobian(lambda a: a * 2, ca.tensor(X0), vectorize=True)
