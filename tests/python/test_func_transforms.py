"""torch.func's grad, grad_and_value, vjp, jacrev, jacfwd, hessian and vmap against torch
2.13: values (float32/float64), nesting, pytrees, has_aux, argnums, gradients through vmap
(eager and compiled) and errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch
from helpers import TOL_SUM, assert_close, ca, compiled_ctx, error_of

RNG = np.random.default_rng(4)
X = RNG.standard_normal(4)
Y = RNG.standard_normal(4)
M = RNG.standard_normal((3, 4))
B = RNG.standard_normal((5, 4))


def _t(L, arr, dtype="float64", rg=False):
    return L.tensor(np.asarray(arr).astype(dtype), requires_grad=rg)


def _f(L, x):
    return (x.sin() * x).sum()


def _both(make, dtype="float64"):
    return make(ca, dtype), make(torch, dtype)


def _close_trees(c, t, dtype="float64"):
    if isinstance(t, (tuple, list)):
        assert isinstance(c, (tuple, list)) and len(c) == len(t)
        for a, b in zip(c, t):
            _close_trees(a, b, dtype)
    elif isinstance(t, dict):
        assert sorted(c) == sorted(t)
        for k in t:
            _close_trees(c[k], t[k], dtype)
    else:
        assert_close(c, t, **TOL_SUM[dtype])


CASES = {
    "grad": lambda L, d: L.func.grad(lambda x: _f(L, x))(_t(L, X, d)),
    "grad argnums tuple": lambda L, d: L.func.grad(lambda x, y: (x * y.exp()).sum(),
                                                   argnums=(0, 1))(_t(L, X, d), _t(L, Y, d)),
    "grad argnums 1": lambda L, d: L.func.grad(lambda x, y: (x * y.exp()).sum(),
                                               argnums=1)(_t(L, X, d), _t(L, Y, d)),
    "grad has_aux": lambda L, d: L.func.grad(lambda x: (_f(L, x), x.cos()),
                                             has_aux=True)(_t(L, X, d)),
    "grad dict argument": lambda L, d: L.func.grad(
        lambda p, x: (p["w"] @ x + p["b"]).tanh().sum())(
        {"w": _t(L, M, d), "b": _t(L, M[:, 0], d)}, _t(L, X, d)),
    "grad of grad": lambda L, d: L.func.grad(L.func.grad(lambda x: x.sin() * x ** 3))(
        _t(L, 0.7, d)),
    "grad unused input": lambda L, d: L.func.grad(lambda x, y: (y * 2).sum())(
        _t(L, X, d), _t(L, Y, d)),
    "grad_and_value": lambda L, d: L.func.grad_and_value(lambda x: _f(L, x))(_t(L, X, d)),
    "grad_and_value has_aux": lambda L, d: L.func.grad_and_value(
        lambda x: (_f(L, x), {"n": x.norm()}), has_aux=True)(_t(L, X, d)),
    "jacrev": lambda L, d: L.func.jacrev(lambda x: _t(L, M, d) @ x.tanh())(_t(L, X, d)),
    "jacrev matrix input": lambda L, d: L.func.jacrev(lambda m: m.exp().sum(0))(_t(L, M, d)),
    "jacrev argnums tuple": lambda L, d: L.func.jacrev(lambda x, y: x * y.sin(),
                                                       argnums=(0, 1))(_t(L, X, d), _t(L, Y, d)),
    "jacrev tuple output": lambda L, d: L.func.jacrev(lambda x: (x.exp(), x.sum()))(
        _t(L, X, d)),
    "jacrev has_aux": lambda L, d: L.func.jacrev(lambda x: (x.exp(), x.sum()), has_aux=True)(
        _t(L, X, d)),
    "jacfwd": lambda L, d: L.func.jacfwd(lambda x: _t(L, M, d) @ x.tanh())(_t(L, X, d)),
    "jacfwd of jacrev": lambda L, d: L.func.jacfwd(L.func.jacrev(lambda x: _f(L, x)))(
        _t(L, X, d)),
    "hessian": lambda L, d: L.func.hessian(lambda x: (x.exp() * x.roll(1)).sum())(
        _t(L, X, d)),
    "vmap": lambda L, d: L.func.vmap(lambda b: (_t(L, M, d) @ b).relu())(_t(L, B, d)),
    "vmap in_dims": lambda L, d: L.func.vmap(lambda m, b: m @ b, in_dims=(None, 0))(
        _t(L, M, d), _t(L, B, d)),
    "vmap in_dims 1 out_dims 1": lambda L, d: L.func.vmap(lambda c: c * 2 + c.sum(),
                                                          in_dims=1, out_dims=1)(_t(L, M, d)),
    "vmap tuple output": lambda L, d: L.func.vmap(lambda b: (b.sum(), b.exp()))(_t(L, B, d)),
    "vmap nested": lambda L, d: L.func.vmap(L.func.vmap(lambda a: a * a.exp()))(_t(L, M, d)),
    "vmap of grad": lambda L, d: L.func.vmap(L.func.grad(lambda x: _f(L, x)))(_t(L, B, d)),
    "torch.vmap": lambda L, d: L.vmap(lambda b: b.max())(_t(L, B, d)),
    "vmap kwargs": lambda L, d: L.func.vmap(lambda b, scale=1.0: b * scale)(
        _t(L, B, d), scale=3.0),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(CASES))
def test_transforms_match_torch(name, dtype):
    c, t = _both(CASES[name], dtype)
    _close_trees(c, t, dtype)


def test_results_leave_no_graph_unless_nested():
    g = ca.func.grad(lambda x: (x * x).sum())(ca.tensor(X))
    assert g.grad_fn is None and not g.requires_grad
    x = ca.tensor(X, requires_grad=True)
    g = ca.func.grad(lambda x: (x ** 3).sum())(x)  # inside a graph: differentiable
    g.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 6 * X, rtol=1e-12)


def test_vjp_matches_torch_and_can_be_called_twice():
    def run(L):
        out, fn, aux = L.func.vjp(lambda a, b: (a * b.exp(), a.sum()), _t(L, X), _t(L, Y),
                                  has_aux=True)
        first = fn(_t(L, M[0]))
        second = fn(_t(L, M[1]))
        return out, aux, first, second
    _close_trees(run(ca), run(torch))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gradients_through_vmap_match_torch(dtype, compiled):
    def fn(L, m, b):
        return L.func.vmap(lambda row: (m @ row).tanh() * row.sum(), in_dims=0)(b)
    check_against_torch(fn, [M, B], dtype, compiled=compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_grad_under_compiled_autograd_equals_eager(compiled):
    def run(L):
        return L.func.grad(lambda w: (w.exp() * _t(L, Y)).sum())(_t(L, X))
    with compiled_ctx(compiled):
        c = run(ca)
    assert_close(c, run(torch))


def test_functional_call_with_grad_matches_torch():
    def run(L):
        L.manual_seed(0)
        model = L.nn.Linear(4, 3).double()
        with L.no_grad():
            model.weight.copy_(_t(L, M))
            model.bias.fill_(0.25)
        params = {k: v.detach() for k, v in model.named_parameters()}

        def loss(p, x):
            return L.func.functional_call(model, p, (x,)).pow(2).sum()
        return L.func.grad(loss)(params, _t(L, X))
    _close_trees(run(ca), run(torch))


ERRORS = {
    "grad non-scalar": lambda L: L.func.grad(lambda x: x * 2)(L.ones(2)),
    "grad argnums": lambda L: L.func.grad(lambda x: x.sum(), argnums=1)(L.ones(2)),
    "grad tuple output": lambda L: L.func.grad(lambda x: (x.sum(), 3))(L.ones(2)),
    "grad has_aux not tuple": lambda L: L.func.grad(lambda x: x.sum(), has_aux=True)(
        L.ones(2)),
    "grad of a number": lambda L: L.func.grad(lambda x: x.sum())(3.0),
    "vmap sizes": lambda L: L.func.vmap(lambda x, y: x + y)(L.ones(2, 3), L.ones(3, 3)),
    "vmap nothing mapped": lambda L: L.func.vmap(lambda x: x, in_dims=(None,))(L.ones(2, 3)),
    "vmap in_dim range": lambda L: L.func.vmap(lambda x: x, in_dims=2)(L.ones(2, 3)),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    c, t = error_of(ca, ERRORS[name]), error_of(torch, ERRORS[name])
    assert c[0] is t[0] and c[1] == t[1].replace("torch.", "cagrad.")
