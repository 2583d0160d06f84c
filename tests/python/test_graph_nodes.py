"""Graph nodes (cagrad.autograd.graph) against torch.autograd.graph: grad_fn identity and
names, next_functions, AccumulateGrad nodes, metadata, node pre-hooks and post-hooks (on
built-in nodes, AccumulateGrad and custom Functions), hook errors with PyTorch's messages,
handles. Every gradient is compared with torch 2.13's, eager and compiled (no eager
fallback), in float32 and float64."""

import numpy as np
import pytest
import torch

import cagrad
from helpers import assert_close, backward_checked, compiled_ctx, needs_cagrad

pytestmark = needs_cagrad


def pair(shape, dtype="float32", seed=0):
    arr = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return (cagrad.tensor(arr.copy(), requires_grad=True),
            torch.tensor(arr.copy(), requires_grad=True))


def test_grad_fn_identity_names_and_next_functions():
    for L in (cagrad, torch):
        x = L.randn(3, requires_grad=True)
        y = (x * 2).sigmoid()
        assert y.grad_fn is y.grad_fn
        assert isinstance(y.grad_fn, L.autograd.graph.Node)
        assert y.grad_fn.name() == "SigmoidBackward0"
        (mul, nr), = y.grad_fn.next_functions
        assert type(mul).__name__ == "MulBackward0" and nr == 0
        acc = mul.next_functions[0][0]
        assert type(acc).__name__ == "AccumulateGrad"
        assert acc.name() == "torch::autograd::AccumulateGrad"
        assert acc.next_functions == ()
        assert mul.next_functions[1] == (None, 0)  # the number 2 needs no gradient
        assert y.grad_fn.metadata == {}
        y.grad_fn.metadata["k"] = 1
        assert y.grad_fn.metadata == {"k": 1}
        assert x.grad_fn is None


def test_accumulate_grad_node_is_shared_while_alive():
    x = cagrad.randn(3, requires_grad=True)
    a = x.expand_as(x).grad_fn.next_functions[0][0]
    b = (x * 1).grad_fn.next_functions[0][0]
    assert a is b
    assert tuple(a.variable.shape) == (3,)


HOOK_CASES = ["prehook", "posthook", "both", "acc_pre", "acc_post", "custom"]


class Twice:
    """A custom Function y = 2x, for both libraries."""

    @staticmethod
    def make(L):
        class TwiceFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        return TwiceFn


TWICE = {cagrad: Twice.make(cagrad), torch: Twice.make(torch)}


def run_case(L, x, case, log):
    z = (x * 3).exp()
    y = z.tanh()
    if case == "custom":
        y = TWICE[L].apply(z)
        y.grad_fn.register_prehook(lambda go: (go[0] * 3,))
        y.grad_fn.register_hook(lambda gi, go: (gi[0] + go[0],))
    if case in ("prehook", "both"):
        y.grad_fn.register_prehook(lambda go: (go[0] * 10,))
    if case in ("posthook", "both"):
        z.grad_fn.register_hook(lambda gi, go: (gi[0] * 2 + 1,))
    acc = (x * 1).grad_fn.next_functions[0][0]
    if case == "acc_pre":
        acc.register_prehook(lambda go: (go[0] / 5,))
    if case == "acc_post":
        def after(gi, go):
            log.append(len(gi))
            with L.no_grad():
                x.grad.mul_(0.5)
        acc.register_hook(after)
    return y.sum()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("case", HOOK_CASES)
def test_node_hooks_match_torch(case, dtype, compiled):
    cx, tx = pair((4,), dtype)
    logs = {cagrad: [], torch: []}
    for rep in range(2):  # a capture, then a cache hit
        cx.grad = tx.grad = None
        with compiled_ctx(compiled):
            backward_checked(run_case(cagrad, cx, case, logs[cagrad]), compiled)
        run_case(torch, tx, case, logs[torch]).backward()
        assert_close(cx.grad, tx.grad, msg=f"{case} rep {rep}")
    assert logs[cagrad] == logs[torch]


def test_hook_errors_like_torch():
    def wrong_count(gi, go):
        return (gi[0], gi[0])

    def wrong_size(gi, go):
        return (gi[0][:2],)

    for fn, message in ((wrong_count, "hook 'wrong_count' has returned an incorrect number of "
                                      r"values \(got 2, but expected 1\)"),
                        (wrong_size, "hook 'wrong_size' has changed the size of value")):
        for L in (cagrad, torch):
            x = L.randn(3, requires_grad=True)
            y = (x * 3).exp()
            y.grad_fn.register_hook(fn)
            with pytest.raises(RuntimeError, match=message):
                y.sum().backward()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_hook_exception_propagates_and_next_backward_works(compiled):
    x = cagrad.randn(3, requires_grad=True)

    def boom(go):
        raise ValueError("node hook failed")

    with compiled_ctx(compiled):
        y = (x * 3).exp()
        y.grad_fn.register_prehook(boom)
        with pytest.raises(ValueError, match="node hook failed"):
            y.sum().backward()
        x.grad = None
        (x * 3).exp().sum().backward()
    assert x.grad is not None


def test_handle_remove():
    for L in (cagrad, torch):
        x = L.ones(3, requires_grad=True)
        y = x * 2
        h = y.grad_fn.register_prehook(lambda go: (go[0] * 100,))
        h.remove()
        y.sum().backward()
        np.testing.assert_allclose(np.asarray(x.grad.detach()), np.full(3, 2.0))


def test_custom_function_ctx_is_a_node():
    x = cagrad.randn(3, requires_grad=True)
    y = TWICE[cagrad].apply(x * 1)
    assert isinstance(y.grad_fn, cagrad.autograd.graph.Node)
    (mul, nr), = y.grad_fn.next_functions
    assert type(mul).__name__ == "MulBackward0"
    z = y.exp()
    assert z.grad_fn.next_functions[0][0] is y.grad_fn


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("bias", [False, True])
def test_conv_node_hook_sees_three_inputs(bias, compiled):
    """PyTorch's ConvolutionBackward0 has input, weight and bias inputs, bias or not."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)
    w = rng.standard_normal((3, 2, 3, 3)).astype(np.float32)
    grads = []
    for L in (cagrad, torch):
        conv = L.nn.Conv2d(2, 3, 3, bias=bias)
        with L.no_grad():
            conv.weight.copy_(L.tensor(w.copy()))
            if bias:
                conv.bias.zero_()
        xi = L.tensor(x.copy(), requires_grad=True)
        y = conv(xi)
        assert len(y.grad_fn.next_functions) == 3
        y.grad_fn.register_hook(lambda gi, go: (gi[0], gi[1] * 2, gi[2]))
        with compiled_ctx(compiled and L is cagrad):
            y.sum().backward()
        grads.append((xi.grad, conv.weight.grad))
    assert_close(grads[0][0], grads[1][0], rtol=1e-5, atol=1e-5)
    assert_close(grads[0][1], grads[1][1], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_backward_inputs(compiled):
    """backward(inputs=...) accumulates into the given tensors only, leaves or not."""
    cx, tx = pair((3,), "float64")
    cw, tw = pair((3,), "float64", seed=1)
    results = []
    for L, x, w in ((cagrad, cx, cw), (torch, tx, tw)):
        y = x * 2 + w
        z = (y * y).sum()
        with compiled_ctx(compiled and L is cagrad):
            z.backward(inputs=[y], retain_graph=True)
            z.backward(inputs=y, retain_graph=True)
            z.backward(inputs=[x])
        assert w.grad is None
        results.append((y.grad, x.grad))
        with pytest.raises(RuntimeError, match="cannot be empty"):
            (x * 1).sum().backward(inputs=[])
    assert_close(results[0][0], results[1][0])
    assert_close(results[0][1], results[1][1])


def test_compiled_disable_inside_enable_and_out_of_order_exit():
    x = cagrad.randn(3, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        with cagrad.compiled_autograd.disable():
            (x * 2).sum().backward()
        assert cagrad.compiled_autograd.counters["captures"] == 0  # ran eagerly
        (x * 2).sum().backward()
    assert cagrad.compiled_autograd.counters["captures"] == 1
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 4.0))
    outer = cagrad.compiled_autograd.enable()
    inner = cagrad.compiled_autograd.enable()
    outer.__enter__()
    inner.__enter__()
    with pytest.raises(AssertionError, match="Nested Compiled Autograd Contexts must return"):
        outer.__exit__(None, None, None)
    inner.__exit__(None, None, None)
    assert cagrad._C.compiled_autograd_depth() == 0


def test_enable_works_as_a_decorator():
    x = cagrad.randn(3, requires_grad=True)

    @cagrad.compiled_autograd.enable()
    def step():
        (x * 2).sum().backward()

    step()
    step()
    assert cagrad.compiled_autograd.counters["captures"] == 1
    assert cagrad.compiled_autograd.counters["cache_hits"] == 1
    assert cagrad._C.compiled_autograd_depth() == 0


def saved_hooks_run(L, compiled, scale):
    x = L.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    w = L.tensor(np.full((3, 2), 0.5), requires_grad=True)
    log = []

    def pack(t):
        log.append(("pack", tuple(t.shape)))
        return t * scale  # a hook that changes what backward sees

    def unpack(p):
        log.append(("unpack", tuple(p.shape)))
        return p

    with L.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = (x.matmul(w).tanh() * x.sum()).sum()
    with compiled_ctx(compiled and L is cagrad):
        y.backward(retain_graph=True)
        y.backward()
    return x.grad, w.grad, sorted(log)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("scale", [1.0, 2.0])
def test_saved_tensors_hooks_match_torch(scale, compiled):
    got = saved_hooks_run(cagrad, compiled, scale)
    ref = saved_hooks_run(torch, False, scale)
    assert_close(got[0], ref[0].double() if got[0].dtype == cagrad.float64 else ref[0])
    assert_close(got[1], ref[1].double() if got[1].dtype == cagrad.float64 else ref[1])
    assert got[2] == ref[2]


def test_saved_tensors_hooks_on_custom_functions_and_errors():
    log = []
    with cagrad.autograd.graph.saved_tensors_hooks(lambda t: log.append("pack") or t,
                                                   lambda t: log.append("unpack") or t):
        x = cagrad.randn(3, requires_grad=True)
        y = TWICE[cagrad].apply(x)

        class Save(cagrad.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * 3

            @staticmethod
            def backward(ctx, g):
                (a,) = ctx.saved_tensors
                return g * 3

        z = Save.apply(y)
    z.sum().backward()
    assert log == ["pack", "unpack"]
    with cagrad.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t[:1]):
        bad = (x * x).sum()
    with pytest.raises(RuntimeError, match="unpack hook gave back"):
        bad.backward()

    def boom(t):
        raise KeyError("pack failed")

    with cagrad.autograd.graph.saved_tensors_hooks(boom, lambda t: t):
        with pytest.raises(KeyError, match="pack failed"):
            x * x
