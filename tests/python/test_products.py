"""dot, vdot, inner, ger, addr, tensordot and chain_matmul against torch: values, gradients
in float32 and float64 (eager and compiled), gradcheck, and torch's errors."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, error_of

SHAPES = {
    "dot": ((5,), (5,)),
    "vdot": ((4,), (4,)),
    "inner": ((2, 3, 4), (5, 4)),
    "inner_0d": ((), (3, 2)),
    "ger": ((3,), (4,)),
    "addr": ((3, 4), (3,), (4,)),
    "addr_bcast": ((4,), (3,), (4,)),
    "tensordot2": ((2, 3, 4), (3, 4, 5)),
    "tensordot_lists": ((2, 3, 4), (4, 2, 6)),
    "tensordot0": ((2, 3), (4,)),
    "chain": ((2, 3), (3, 4), (4, 2)),
}


def _call(L, name, xs):
    if name in ("dot", "vdot", "ger"):
        return getattr(L, name)(*xs)
    if name.startswith("inner"):
        return L.inner(*xs)
    if name.startswith("addr"):
        return L.addr(*xs, beta=0.5, alpha=2.0)
    if name == "tensordot2":
        return L.tensordot(*xs)
    if name == "tensordot_lists":
        return L.tensordot(*xs, dims=([0, 2], [1, 0]))
    if name == "tensordot0":
        return L.tensordot(*xs, dims=0)
    return L.chain_matmul(*xs)


def _inputs(L, name, dtype, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for s in SHAPES[name]:
        a = rng.standard_normal(s).astype(dtype)
        out.append(L.tensor(a, requires_grad=True))
    return out


@pytest.mark.parametrize("name", sorted(SHAPES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_values_and_gradients_match_torch(name, dtype, compiled):
    xc, xt = _inputs(ca, name, dtype), _inputs(torch, name, dtype)
    yc, yt = _call(ca, name, xc), _call(torch, name, xt)
    assert tuple(yc.shape) == tuple(yt.shape)
    assert_close(yc, yt)
    w = np.random.default_rng(1).standard_normal(tuple(yt.shape)).astype(dtype)
    with compiled_ctx(compiled):
        (yc * ca.tensor(w)).sum().backward()
    (yt * torch.tensor(w)).sum().backward()
    for a, b in zip(xc, xt):
        assert_close(a.grad, b.grad)


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_gradcheck(name):
    xs = _inputs(ca, name, "float64", seed=3)
    assert ca.autograd.gradcheck(lambda *a: _call(ca, name, a), xs)


@pytest.mark.parametrize("name", ["dot", "vdot", "inner", "ger", "addr"])
def test_methods(name):
    xs = _inputs(ca, "addr" if name == "addr" else ("inner" if name == "inner" else name),
                 "float64")
    f = getattr(xs[0], name)
    ref = getattr(ca, name)(*xs)
    assert_close(f(*xs[1:]), ref)


def test_integer_dot_and_tensordot_are_exact():
    for L in (ca, torch):
        a, b = L.tensor([1, 2, 3]), L.tensor([4, -5, 6])
        assert L.dot(a, b).item() == 12
        m = L.tensor([[1, 2], [3, 4]])
        assert L.tensordot(m, m, dims=1).tolist() == [[7, 10], [15, 22]]


ERRORS = {
    "dot size": lambda L: L.dot(L.ones(3), L.ones(4)),
    "dot 2d": lambda L: L.dot(L.ones(3, 1), L.ones(3)),
    "dot dtype": lambda L: L.dot(L.ones(3), L.ones(3, dtype=L.float64)),
    "vdot 2d": lambda L: L.vdot(L.ones(2, 2), L.ones(2)),
    "inner": lambda L: L.inner(L.ones(2, 3), L.ones(4)),
    "tensordot size": lambda L: L.tensordot(L.ones(2, 3), L.ones(4, 5), dims=1),
    "tensordot negative": lambda L: L.tensordot(L.ones(2, 3), L.ones(3, 5), dims=-1),
    "tensordot lists": lambda L: L.tensordot(L.ones(2, 3, 4), L.ones(3, 4, 5),
                                             dims=([1, 2], [0])),
    "addr shape": lambda L: L.addr(L.ones(2, 3), L.ones(2), L.ones(4)),
    "ger 2d": lambda L: L.ger(L.ones(2, 1), L.ones(3)),
    "chain 1d": lambda L: L.chain_matmul(L.ones(2, 3), L.ones(3)),
}


@pytest.mark.filterwarnings("ignore:torch.chain_matmul is deprecated")
@pytest.mark.parametrize("case", sorted(ERRORS))
def test_errors_match_torch(case):
    c, t = error_of(ca, ERRORS[case]), error_of(torch, ERRORS[case])
    assert t[0] is not None
    assert c == t
