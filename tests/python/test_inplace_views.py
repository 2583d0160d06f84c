"""In-place ops on views of tensors in the autograd graph, as PyTorch's CopySlices records
them: `y[:, 0] += b`, `h[..., :k].mul_(s)`, `out[i] = f(x)` into a buffer, `y.t().relu_()`.
The base takes the update's history and every view of it sees the change (C:
view_inplace.c). Compared with torch 2.13 in float32 and float64, eagerly and under compiled
autograd; gradcheck in float64; torch's errors for the cases it refuses."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, counters, error_of

# each statement runs with x [4, 3] (a leaf), w [3] (a leaf), y = x * 2 + 0.25 in the graph;
# the loss reads y and, where it names one, the view v
STATEMENTS = [
    "y[1:3].mul_(3)",
    "y[:, 0] += w[0]",
    "y[:, 1:].add_(w[1:], alpha=2)",
    "y[0].copy_(w * w)",
    "y[2] = w.exp()",
    "y[1][1:] *= w[:2]",
    "y.t()[2].clamp_(min=1.0)",
    "y.t().relu_()",
    "y[::2].sub_(1)",
    "y.view(12)[3:9].div_(4)",
    "y[:, 2].zero_()",
    "y[1].fill_(0.5)",
    "y[0].masked_fill_(y[0] > 1, 0.0)",
    "y[1:].tanh_()",
    "y.unsqueeze(0)[0, 1].mul_(w)",
    "y.narrow(1, 0, 2).mul_(2).add_(1)",
    "v = y[1:3]; v.mul_(w)",
    "v = y[:, 1]; y.mul_(2)",
    "v = y[:, 1]; u = y[1]; u.mul_(w)",
    "v = y[0]; v += 1; y *= w",
    "y[0][0] = w.sum()",
    "y[1].pow_(2); y[:, 1].sigmoid_()",
]


def _run(L, stmt, dtype, compiled):
    rng = np.random.default_rng(0)
    dt = getattr(L, dtype)
    x = L.tensor(rng.standard_normal((4, 3)), dtype=dt, requires_grad=True)
    w = L.tensor(rng.standard_normal(3), dtype=dt, requires_grad=True)
    ns = {"x": x, "w": w, "y": x * 2 + 0.25, "L": L}
    with compiled_ctx(compiled and L is ca):
        exec(stmt, ns)  # noqa: S102 - the statement under test
        y = ns["y"]
        loss = (y * L.arange(12, dtype=dt).reshape(4, 3)).sum()
        if "v" in ns:
            loss = loss + (ns["v"] ** 2).sum()
        loss.backward()
    return y.detach(), x.grad, w.grad


@pytest.mark.parametrize("stmt", STATEMENTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_view_inplace_matches_torch(stmt, dtype, compiled):
    got, want = _run(ca, stmt, dtype, compiled), _run(torch, stmt, dtype, False)
    for c, t in zip(got, want):
        if t is None:
            assert c is None
        else:
            assert_close(c, t)


def test_buffer_filled_row_by_row():
    """out = zeros(T, H); out[t] = cell(...) in a loop: the buffer takes each step's history."""
    def run(L, compiled):
        rng = np.random.default_rng(1)
        w = L.tensor(rng.standard_normal((3, 3)), requires_grad=True)
        h = L.tensor(rng.standard_normal(3))
        out = L.zeros(5, 3)
        with compiled_ctx(compiled and L is ca):
            for t in range(5):
                h = L.tanh(h @ w)
                out[t] = h
            assert out.requires_grad
            (out * out).sum().backward()
        return out.detach(), w.grad
    want = run(torch, False)
    for compiled in (False, True):
        for c, t in zip(run(ca, compiled), want):
            assert_close(c, t)


def test_compiled_captures_once_and_hits():
    """the where/scatter history is an ordinary graph: one capture, then cache hits."""
    x = ca.randn(4, 4, requires_grad=True)
    grads = []
    before = counters()
    for _ in range(3):
        with ca.compiled_autograd.enable():
            y = x.clone()
            y[1:3].mul_(3.0)
            y.exp().sum().backward()
        grads.append(x.grad.clone())
        x.grad = None
    after = counters()
    assert after["captures"] - before["captures"] == 1
    assert after["cache_hits"] - before["cache_hits"] == 2
    assert_close(grads[0], grads[2])


def test_gradcheck_float64():
    def f(x, w):
        y = x * 1.5
        y[:, 1].mul_(w)
        y.t()[0].add_(w.sin())
        y[2:].tanh_()
        return y
    x = ca.randn(4, 4, dtype=ca.float64, requires_grad=True)
    w = ca.randn(4, dtype=ca.float64, requires_grad=True)
    assert ca.autograd.gradcheck(f, (x, w))
    assert ca.autograd.gradgradcheck(f, (x, w))


def test_view_grad_fn_and_requires_grad_follow_the_base():
    for L in (ca, torch):
        out = L.zeros(3)
        v = out[1:]
        assert not v.requires_grad
        out[0] = L.ones((), requires_grad=True) * 2  # the base joins the graph
        assert v.requires_grad and v.grad_fn is not None
        assert not v.is_leaf


@pytest.mark.parametrize("case", ["leaf_view", "expanded", "saved_output"])
def test_errors_match_torch(case):
    def make(L):
        x = L.ones(3, requires_grad=True)
        if case == "leaf_view":
            x[:2].mul_(2)
        elif case == "expanded":
            (x[:1] * 1).expand(3).mul_(2)
        else:
            y = x.exp()
            y[:1].mul_(2)
            y.sum().backward()
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    key = {"leaf_view": "a view of a leaf Variable that requires grad",
           "expanded": "more than one element of the written-to tensor",
           "saved_output": "modified by an inplace operation"}[case]
    assert key in tmsg and key in cmsg


def test_base_and_is_view_match_torch():
    def make(L):
        x = L.ones(4, 3)
        v = x[1:].t()
        with L.no_grad():
            u = x[0]
        return (v._base is x, v._is_view(), x._base is None, u._base is x,
                x.detach()._is_view(), x.reshape(12)._base is x, (x * 1)._is_view())
    assert make(ca) == make(torch)


def test_view_made_without_grad_refuses_an_update_in_the_graph():
    def make(L):
        y = L.ones(3, requires_grad=True) * 2
        with L.no_grad():
            w = y[:2]
        w.mul_(L.ones(2, requires_grad=True))
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    key = "A view was created in no_grad mode and is being modified inplace with grad mode"
    assert key in cmsg and key in tmsg


def test_view_made_without_grad_refuses_even_a_constant_update():
    def make(L):
        y = L.ones(3, requires_grad=True) * 2
        with L.no_grad():
            w = y[:2]
        w.mul_(2)
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    assert "created in no_grad mode" in cmsg and "created in no_grad mode" in tmsg


@pytest.mark.parametrize("case", ["unbind", "split", "split_sizes", "chunk", "view_of_output",
                                  "leaf", "base_outside_graph"])
def test_outputs_of_multi_view_functions_refuse_as_torch(case):
    def make(L):
        y = L.ones(4, 3, requires_grad=True)
        if case == "base_outside_graph":
            L.ones(4, 3).unbind(0)[1].copy_(L.ones(3, requires_grad=True))
            return
        if case != "leaf":
            y = y * 1
        {"unbind": lambda: y.unbind(0)[1].mul_(2), "split": lambda: y.split(2)[1].mul_(2),
         "split_sizes": lambda: y.split([1, 3])[1].mul_(2),
         "chunk": lambda: y.chunk(2)[1].mul_(2), "leaf": lambda: y.unbind(0)[1].mul_(2),
         "view_of_output": lambda: y.unbind(0)[1].view(3)[0:2].mul_(2)}[case]()
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    assert cmsg.startswith(tmsg), (cmsg, tmsg)


def test_outputs_of_multi_view_functions_still_write_outside_the_graph():
    for L in (ca, torch):
        y = L.ones(4, 3, requires_grad=True) * 1
        with L.no_grad():
            y.unbind(0)[1].mul_(2)
        z = L.ones(4, 3)
        z.split(2)[1].add_(1)
        assert y.sum().item() == 15 and z.sum().item() == 18
