"""torch.func.jvp, linearize and stack_module_state against torch 2.13: values in float32
and float64, pytrees and has_aux, nesting (jvp of grad: a Hessian-vector product), the
errors torch raises, and an ensemble run with vmap over functional_call."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, error_of


def _data(L, shape, seed, dtype="float64"):
    return L.tensor(np.random.default_rng(seed).standard_normal(shape), dtype=getattr(L, dtype))


def _mlp(x, w, b):
    return (x @ w + b).tanh().sum(0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_jvp_matches_torch(dtype):
    def run(L):
        x, w, b = (_data(L, s, k, dtype) for k, s in enumerate([(4, 3), (3, 2), (2,)]))
        tx, tw, tb = (_data(L, s, 9 + k, dtype) for k, s in enumerate([(4, 3), (3, 2), (2,)]))
        return L.func.jvp(_mlp, (x, w, b), (tx, tw, tb))
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_jvp_pytrees_aux_and_several_outputs():
    def run(L):
        x = _data(L, (3,), 0)

        def f(d):
            return (d["a"].sin(), d["a"] * d["b"]), {"aux": d["a"].exp()}
        primals = ({"a": x, "b": 2 * x},)
        tangents = ({"a": _data(L, (3,), 1), "b": _data(L, (3,), 2)},)
        (o1, o2), (j1, j2), aux = L.func.jvp(f, primals, tangents, has_aux=True)
        return o1, o2, j1, j2, aux["aux"]
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_jvp_of_grad_is_a_hessian_vector_product():
    def run(L):
        x, v = _data(L, (5,), 0), _data(L, (5,), 1)

        def loss(x):
            return (x.sin() * x).sum() + (x ** 3).sum()
        return L.func.jvp(L.func.grad(loss), (x,), (v,))
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_jvp_of_an_output_that_ignores_the_primal():
    def run(L):
        x = _data(L, (3,), 0)
        return L.func.jvp(lambda x: L.ones(2, dtype=x.dtype), (x,), (x,))
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_jvp_float64_tangent_of_a_float32_primal():
    """torch's product is float64; cagrad's too, but computed in the primal's float32 and
    widened (docs/python-api.md), so it agrees to float32 precision."""
    def run(L):
        x = _data(L, (3,), 0, "float32")
        return L.func.jvp(L.sin, (x,), (_data(L, (3,), 1, "float64"),))[1]
    c, t = run(ca), run(torch)
    assert c.dtype == ca.float64 and t.dtype == torch.float64
    np.testing.assert_allclose(c.numpy(), t.numpy(), rtol=1e-6)


@pytest.mark.parametrize("case", ["list_primals", "structure", "count", "size", "empty"])
def test_jvp_errors_match_torch(case):
    def make(L):
        x = L.ones(3)
        args = {"list_primals": ([x], (x,)), "structure": ((x,), [x]),
                "count": ((x,), (x, x)), "size": ((x,), (L.ones(2),)), "empty": ((), ())}[case]
        L.func.jvp(L.sin, *args)
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    prefix = tmsg.split(" Got primals")[0]  # torch then prints its pytree spec
    assert cmsg.startswith(prefix), (cmsg, tmsg)


def test_linearize_matches_jvp_and_torch():
    def run(L):
        x = _data(L, (4,), 0)
        out, fn = L.func.linearize(lambda x: x.sin() * x, x)
        return out, fn(_data(L, (4,), 1)), fn(_data(L, (4,), 2))
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)
    (_, cmsg), (_, tmsg) = (error_of(L, lambda L: L.func.linearize(L.sin, L.ones(3))[1](
        L.ones(2))) for L in (ca, torch))
    assert cmsg.replace("cagrad.", "torch.") == tmsg


def test_stack_module_state_ensemble():
    def run(L):
        L.manual_seed(0)
        models = [L.nn.Linear(3, 2) for _ in range(4)]
        for k, m in enumerate(models):  # same weights in both libraries
            with L.no_grad():
                m.weight.copy_(_data(L, (2, 3), 10 + k, "float32"))
                m.bias.copy_(_data(L, (2,), 20 + k, "float32"))
        params, buffers = L.func.stack_module_state(models)
        assert list(params) == ["weight", "bias"] and buffers == {}
        assert params["weight"].shape == (4, 2, 3)
        assert params["weight"].requires_grad and params["weight"].is_leaf
        x = _data(L, (5, 3), 1, "float32")

        def call(p, b, x):
            return L.func.functional_call(models[0], (p, b), (x,))
        out = L.func.vmap(call, in_dims=(0, 0, None))(params, buffers, x)
        out.sum().backward()
        return out, params["weight"].grad, params["bias"].grad
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_stack_module_state_errors_match_torch():
    def empty(L):
        L.func.stack_module_state([])

    def modes(L):
        a, b = L.nn.Linear(2, 2), L.nn.Linear(2, 2)
        b.eval()
        L.func.stack_module_state([a, b])
    for make in (empty, modes):
        assert error_of(ca, make) == error_of(torch, make)
