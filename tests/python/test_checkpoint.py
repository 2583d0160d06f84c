"""torch.utils.checkpoint's behaviour in cagrad.utils.checkpoint: gradients equal to the
block run without checkpointing and to torch 2.13's, eager and compiled (no eager
fallback), with parameters inside the block, a parameter shared across the block's
boundary, non-tensor and keyword arguments, several outputs, dropout replayed with the same
mask, checkpoint_sequential, and the use_reentrant warning. The non-reentrant variant:
autograd.grad reaches parameters inside the block, its nodes are part of the compiled
graph (no call-out; one recomputation per backward), retain_graph recomputes each time,
and a recomputation that saves fewer tensors or an input changed in place is refused."""

import warnings

import numpy as np
import pytest
import torch
import torch.utils.checkpoint  # noqa: F401

import cagrad
import cagrad.utils.checkpoint  # noqa: F401
from helpers import assert_close, backward_checked, compiled_ctx, needs_cagrad

pytestmark = needs_cagrad

RNG = np.random.default_rng(11)
W1 = RNG.standard_normal((6, 4)).astype(np.float32)
W2 = RNG.standard_normal((4, 6)).astype(np.float32)
X = RNG.standard_normal((3, 4)).astype(np.float32)


def model(L):
    lin1, lin2 = L.nn.Linear(4, 6), L.nn.Linear(6, 4)
    with L.no_grad():
        lin1.weight.copy_(L.tensor(W1))
        lin2.weight.copy_(L.tensor(W2))
        lin1.bias.zero_()
        lin2.bias.zero_()
    return lin1, lin2


def run(L, use_checkpoint, compiled, reentrant=False, shared=False):
    lin1, lin2 = model(L)
    x = L.tensor(X.copy(), requires_grad=True)

    def block(h, scale, *, shift=0.0):
        return lin2(L.tanh(lin1(h) * scale + shift)), h.sum()

    ck = L.utils.checkpoint.checkpoint
    with compiled_ctx(compiled and L is cagrad):
        if use_checkpoint:
            out, s = ck(block, x, 2.0, use_reentrant=reentrant, shift=0.5) if not reentrant else \
                ck(lambda h, k: block(h, k, shift=0.5), x, 2.0, use_reentrant=True)
        else:
            out, s = block(x, 2.0, shift=0.5)
        loss = (out * out).sum() + s
        if shared:  # lin1's weight is also used outside the block
            loss = loss + (lin1.weight * lin1.weight).sum()
        if L is cagrad:
            backward_checked(loss, compiled)
        else:
            loss.backward()
    return x.grad, lin1.weight.grad, lin2.weight.grad


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("reentrant", [False, True])
@pytest.mark.parametrize("shared", [False, True])
def test_checkpoint_matches_plain_and_torch(shared, reentrant, compiled):
    got = run(cagrad, True, compiled, reentrant, shared)
    plain = run(cagrad, False, False, reentrant, shared)
    ref = run(torch, True, False, reentrant, shared)
    for g, p, r in zip(got, plain, ref):
        assert_close(g, p, rtol=1e-5, atol=1e-5)
        assert_close(g, r, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_dropout_is_replayed_with_the_same_mask(compiled):
    grads = []
    for use_checkpoint in (True, False):
        cagrad.manual_seed(5)
        x = cagrad.ones(64, requires_grad=True)
        f = lambda h: cagrad.nn.functional.dropout(h * 3, p=0.5, training=True)  # noqa: E731
        with compiled_ctx(compiled and use_checkpoint):
            y = cagrad.utils.checkpoint.checkpoint(f, x, use_reentrant=False) \
                if use_checkpoint else f(x)
            y.sum().backward()
        grads.append(x.grad.numpy())
    np.testing.assert_array_equal(grads[0], grads[1])
    assert 0 < (grads[0] == 0).sum() < 64


def test_checkpoint_sequential_matches_torch():
    outs = []
    for L in (cagrad, torch):
        lin1, lin2 = model(L)
        seq = L.nn.Sequential(lin1, L.nn.ReLU(), lin2, L.nn.Tanh())
        x = L.tensor(X.copy(), requires_grad=True)
        y = L.utils.checkpoint.checkpoint_sequential(seq, 2, x, use_reentrant=False)
        y.sum().backward()
        outs.append((x.grad, lin1.weight.grad))
    assert_close(outs[0][0], outs[1][0], rtol=1e-5, atol=1e-5)
    assert_close(outs[0][1], outs[1][1], rtol=1e-5, atol=1e-5)


def test_use_reentrant_must_be_passed_explicitly_or_warns():
    x = cagrad.randn(3, requires_grad=True)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cagrad.utils.checkpoint.checkpoint(lambda a: a.sin(), x)
    assert any("use_reentrant parameter should be passed explicitly" in str(m.message) for m in w)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_parameter_used_before_inside_and_after_the_block(compiled):
    """The block's backward runs a backward of its own through lin1's AccumulateGrad node
    while the outer one still holds a gradient for it there (from (w * w).sum())."""
    grads = []
    for L in (cagrad, torch):
        lin1, _ = model(L)
        w = lin1.weight
        x = L.tensor(X.copy(), requires_grad=True)
        with compiled_ctx(compiled and L is cagrad):
            h = x @ w[:, :4].t()  # w before the block
            out = L.utils.checkpoint.checkpoint(lambda a: lin1(a[:, :4]).tanh(), h,
                                                use_reentrant=False)
            loss = out.sum() + (w * w).sum()  # and after it
            loss.backward()
        grads.append((x.grad, w.grad))
    assert_close(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-5)
    assert_close(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-5)


# ---------------------------------------------------------------------------------------
# use_reentrant=False: the ordinary graph, its saved tensors recomputed on unpack
# ---------------------------------------------------------------------------------------
def test_non_reentrant_autograd_grad_reaches_parameters_inside():
    grads = []
    for L in (cagrad, torch):
        lin1, lin2 = model(L)
        x = L.tensor(X.copy(), requires_grad=True)
        out = L.utils.checkpoint.checkpoint(lambda a: lin2(lin1(a).tanh()), x,
                                            use_reentrant=False)
        grads.append(L.autograd.grad((out * out).sum(), [lin1.weight, x]))
    for g, r in zip(*grads):
        assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_non_reentrant_block_is_part_of_the_compiled_graph(tmp_path):
    lin1, lin2 = model(cagrad)
    calls = []

    def block(a):
        calls.append(1)
        return lin2(lin1(a).tanh())

    for step in range(3):
        x = cagrad.tensor(X.copy(), requires_grad=True)
        out = cagrad.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        with cagrad.compiled_autograd.enable():
            backward_checked((out * out).sum(), True)
    assert len(calls) == 6, "the forward, then one recomputation per backward"
    c = dict(cagrad.compiled_autograd.counters)
    assert (c["captures"], c["cache_hits"], c["custom_callouts"]) == (1, 2, 0)
    path = tmp_path / "g.dot"
    cagrad.compiled_autograd.write_graph(path)
    dot = path.read_text()
    assert "TanhBackward0 (NodeCall" in dot and "callout" not in dot


def test_non_reentrant_retain_graph_recomputes_each_backward():
    results = []
    for L in (cagrad, torch):
        lin1, lin2 = model(L)
        x = L.tensor(X.copy(), requires_grad=True)
        out = L.utils.checkpoint.checkpoint(lambda a: lin2(lin1(a).tanh()), x,
                                            use_reentrant=False)
        loss = (out * out).sum()
        loss.backward(retain_graph=True)
        loss.backward()
        results.append((x.grad, lin1.weight.grad))
    for g, r in zip(*results):
        assert_close(g, r, rtol=1e-5, atol=1e-5)


def test_non_reentrant_recomputation_that_saves_differently_is_refused():
    for L in (cagrad, torch):
        flips = []

        def block(a):
            flips.append(1)
            return a.sin().exp() if len(flips) == 1 else a.sin()  # fewer saves the 2nd time

        x = L.tensor(X.copy(), requires_grad=True)
        out = L.utils.checkpoint.checkpoint(block, x, use_reentrant=False)
        with pytest.raises(RuntimeError, match="A different number of tensors was saved") as e:
            out.sum().backward()
        assert type(e.value).__name__ == "CheckpointError"


def test_non_reentrant_input_changed_in_place_is_refused():
    x = cagrad.tensor(X.copy(), requires_grad=True)
    h = x * 1
    out = cagrad.utils.checkpoint.checkpoint(lambda a: a.sin(), h, use_reentrant=False)
    with cagrad.no_grad():
        h.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.sum().backward()
