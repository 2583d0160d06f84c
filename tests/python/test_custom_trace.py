"""Custom Function backwards traced into the compiled graph.

Under compiled autograd a Function's backward that only calls cagrad ops on its gradients
and saved tensors is recorded once, at capture, and its ops become part of the captured
graph (fused with the rest); anything else is an opaque call-out. Checked against torch
2.13 in float32 and float64: the gradients of traced Functions (a GELU, a fused linear, a
two-output function, ctx scalars, broadcast and other-dtype gradients); that a traced
backward does not run on cache hits; that each refusal (data reads, NumPy, in-place ops,
tensors on ctx, tensors from outside, ops with no graph form, saved-tensor hooks, a
backward that fails, traceable_backward = False, dynamic sizes) makes a call-out whose
reason is logged and whose gradients are right; that ctx state keys the cache (no stale
graph); and that the DOT picture shows traced ops in the Function's cluster.
"""

import numpy as np
import pytest
import torch

import cagrad
from helpers import assert_close, counters, needs_cagrad
from test_custom_function import functions as custom_function_library

pytestmark = needs_cagrad

DTYPES = ["float32", "float64"]


def functions(L):
    """test_custom_function's Functions, and a tanh GELU with its derivative by hand."""

    class Gelu(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return 0.5 * x * (1 + L.tanh(0.7978845608 * (x + 0.044715 * x ** 3)))

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            t = L.tanh(0.7978845608 * (x + 0.044715 * x ** 3))
            dt = (1 - t * t) * 0.7978845608 * (1 + 3 * 0.044715 * x * x)
            return g * (0.5 * (1 + t) + 0.5 * x * dt)

    return dict(custom_function_library(L), Gelu=Gelu)


CA_FN, TORCH_FN = functions(cagrad), functions(torch)


def both(arr, requires_grad=True):
    return (cagrad.tensor(arr, requires_grad=requires_grad),
            torch.tensor(arr, requires_grad=requires_grad))


def mlp_loss(L, F, x, w1, b1, w2, b2):
    h = F["Gelu"].apply(F["Linear"].apply(x, w1, b1))
    a, b = F["SinCos"].apply(F["Linear"].apply(h, w2, b2))
    return (F["ScaleAdd"].apply(a, 0.5, b) * b).sum() + F["Broadcasting"].apply(b2).sum()


def grads_of(L, F, arrs, compiled=False):
    args = [L.tensor(a, requires_grad=i > 0) for i, a in enumerate(arrs)]
    if compiled:
        with cagrad.compiled_autograd.enable():
            mlp_loss(L, F, *args).backward()
    else:
        mlp_loss(L, F, *args).backward()
    return [p.grad for p in args[1:]]


@pytest.mark.parametrize("dtype", DTYPES)
def test_traced_functions_match_torch_and_skip_python_on_hits(dtype, rng):
    """Compiled equals eager; both match torch. In float32 the chain through GELU's
    derivative cancels (1 - t*t), so float32 is judged against torch in float64, normwise
    (cagrad and torch in float32 are both ~5e-6 of the scale off it)."""
    arrs = [rng.standard_normal(s) for s in ((6, 5), (8, 5), (8,), (4, 8), (4,))]
    ref64 = [g.numpy() for g in grads_of(torch, TORCH_FN, arrs)]
    arrs = [a.astype(dtype) for a in arrs]
    eager = grads_of(cagrad, CA_FN, arrs)
    calls = []
    original = CA_FN["Gelu"].backward

    def counted(ctx, g):
        calls.append(1)
        return original(ctx, g)

    CA_FN["Gelu"].backward = staticmethod(counted)
    try:
        for step in range(3):
            for got, want, ref in zip(grads_of(cagrad, CA_FN, arrs, compiled=True), eager, ref64):
                assert_close(got, want)
                if dtype == "float64":
                    assert_close(got, torch.tensor(ref))
                else:
                    err = np.abs(got.numpy().astype(np.float64) - ref).max()
                    assert err <= 2e-5 * np.abs(ref).max(), err
    finally:
        CA_FN["Gelu"].backward = original
    assert calls == [1], "recorded once at the capture, not run on the two hits"
    c = counters()
    assert (c["captures"], c["cache_hits"], c["eager_fallbacks"]) == (1, 2, 0)
    assert (c["custom_traced"], c["custom_callouts"]) == (6, 0)


def test_traced_backward_is_fused_with_its_neighbours():
    x = cagrad.randn(16, 8, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        (CA_FN["Gelu"].apply(x.tanh()) * 3).sum().backward()
    c = counters()
    assert c["custom_traced"] == 1
    assert c["fused_kernels"] == 1, "the Function's pointwise work joins one fused loop"


def test_dot_shows_traced_ops_in_the_functions_cluster(tmp_path):
    x = cagrad.randn(4, 3, requires_grad=True)
    w = cagrad.randn(5, 3, requires_grad=True)
    b = cagrad.randn(5, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        CA_FN["Linear"].apply(x, w, b).sum().backward()
    path = tmp_path / "g.dot"
    cagrad.compiled_autograd.write_graph(path)
    dot = path.read_text()
    assert "LinearBackward (NodeCall" in dot and "matmul" in dot
    assert "callout" not in dot


# ---------------------------------------------------------------------------------------
# What cannot be traced becomes a call-out, with its reason in the verbose log
# ---------------------------------------------------------------------------------------
class Doubling(cagrad.autograd.Function):
    """y = 2 x; each subclass below backs it with a backward that cannot be traced."""

    @staticmethod
    def forward(ctx, x):
        return x * 2


class Item(Doubling):
    @staticmethod
    def backward(ctx, g):
        return g * (2.0 if float(g.sum()) == float(g.sum()) else 0.0)


class Numpy(Doubling):
    @staticmethod
    def backward(ctx, g):
        return cagrad.tensor(g.detach().numpy() * 2)


class InPlace(Doubling):
    @staticmethod
    def backward(ctx, g):
        r = g * 1
        r.mul_(2)
        return r


class CtxTensor(Doubling):
    @staticmethod
    def forward(ctx, x):
        ctx.two = cagrad.full_like(x, 2.0)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * ctx.two


class Softmaxed(Doubling):  # softmax has no graph form of its own
    @staticmethod
    def backward(ctx, g):
        return g.softmax(-1) * 0 + g * 2


class Raises(Doubling):
    @staticmethod
    def backward(ctx, g):
        raise ValueError("Raises.backward says no")


class Opaque(Doubling):
    traceable_backward = False

    @staticmethod
    def backward(ctx, g):
        return g * 2


OUTSIDE = cagrad.full((3, 4), 2.0)


class Outside(Doubling):  # multiplies by a module-level tensor
    @staticmethod
    def backward(ctx, g):
        return g * OUTSIDE


CA_REFUSED = {c.__name__: c for c in (Item, Numpy, InPlace, CtxTensor, Softmaxed, Raises, Opaque,
                                      Outside)}


REASONS = {
    "Item": "reads tensor data",
    "Numpy": "reads tensor data",
    "InPlace": "changes a tensor in place",
    "CtxTensor": "ctx.two is a Tensor: save it with ctx.save_for_backward()",
    "Softmaxed": "softmax",
    "Opaque": "Opaque.traceable_backward is False",
    "Outside": "neither a gradient nor a saved tensor",
}


def call_out_round(fn, monkeypatch, capfd):
    monkeypatch.setenv("CAGRAD_LOGS", "compiled_autograd_verbose")
    x = cagrad.randn(3, 4, requires_grad=True)
    for _ in range(2):
        x.grad = None
        with cagrad.compiled_autograd.enable():
            (fn.apply(x * 1) * 1).sum().backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full((3, 4), 2.0))
    c = counters()
    assert (c["captures"], c["cache_hits"], c["eager_fallbacks"]) == (1, 1, 0)
    assert (c["custom_traced"], c["custom_callouts"]) == (0, 1)
    return capfd.readouterr().err


@pytest.mark.parametrize("name", sorted(REASONS))
def test_refused_recording_is_a_call_out_with_its_reason(name, monkeypatch, capfd):
    err = call_out_round(CA_REFUSED[name], monkeypatch, capfd)
    assert f"{name}Backward (NodeCall" in err and "custom backward is an opaque call-out" in err
    assert REASONS[name] in err, err


def test_backward_that_raises_raises_for_real_and_the_next_works(monkeypatch, capfd):
    monkeypatch.setenv("CAGRAD_LOGS", "compiled_autograd_verbose")
    x = cagrad.randn(3, requires_grad=True)
    for _ in range(2):
        with cagrad.compiled_autograd.enable():
            with pytest.raises(ValueError, match="Raises.backward says no"):
                CA_REFUSED["Raises"].apply(x * 1).sum().backward()
    assert "its backward failed on zero gradients" in capfd.readouterr().err
    with cagrad.compiled_autograd.enable():
        CA_FN["Gelu"].apply(x * 1).sum().backward()
    assert x.grad is not None


def test_saved_tensors_hooks_make_a_call_out(monkeypatch, capfd):
    monkeypatch.setenv("CAGRAD_LOGS", "compiled_autograd_verbose")
    packed = []

    def pack(t):
        packed.append(1)
        return t

    x = cagrad.randn(5, requires_grad=True)
    with cagrad.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = CA_FN["Gelu"].apply(x)
    with cagrad.compiled_autograd.enable():
        y.sum().backward()
    assert packed
    assert "saved_tensors_hooks" in capfd.readouterr().err
    tx = torch.tensor(x.detach().numpy(), requires_grad=True)
    TORCH_FN["Gelu"].apply(tx).sum().backward()
    assert_close(x.grad, tx.grad)


def test_dynamic_sizes_make_a_call_out(monkeypatch, capfd):
    monkeypatch.setenv("CAGRAD_LOGS", "compiled_autograd_verbose")
    for n in (4, 6, 9):
        x = cagrad.randn(n, 3, requires_grad=True)
        with cagrad.compiled_autograd.enable():  # 6 marks the batch dim dynamic
            CA_FN["Gelu"].apply(x).sum().backward()
        tx = torch.tensor(x.detach().numpy(), requires_grad=True)
        TORCH_FN["Gelu"].apply(tx).sum().backward()
        assert_close(x.grad, tx.grad)
    c = counters()
    assert (c["captures"], c["cache_hits"]) == (2, 1)
    assert (c["custom_traced"], c["custom_callouts"]) == (1, 1)
    assert "its sizes are dynamic" in capfd.readouterr().err


# ---------------------------------------------------------------------------------------
# The key: ctx state, needs_input_grad, the backward itself
# ---------------------------------------------------------------------------------------
def test_ctx_scalars_key_the_trace():
    x, zeros = cagrad.randn(6, requires_grad=True), cagrad.zeros(6)
    for k, want_captures in ((2.0, 1), (3.0, 2), (2.0, 2), (3, 3), (-0.0, 4), (0.0, 5)):
        x.grad = None
        with cagrad.compiled_autograd.enable():
            CA_FN["ScaleAdd"].apply(x * 1, k, zeros).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(6, k, np.float32))
        assert counters()["captures"] == want_captures, k


def test_ctx_states_past_the_limit_become_call_outs():
    scale = functions(cagrad)["ScaleAdd"]  # a class of its own: states count per class
    x, zeros = cagrad.randn(3, requires_grad=True), cagrad.zeros(3)
    for k in range(12):
        x.grad = None
        with cagrad.compiled_autograd.enable():
            scale.apply(x * 1, float(k), zeros).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(3, k, np.float32))
    c = counters()
    assert c["custom_traced"] == 8
    assert c["custom_callouts"] == 1, "the 9th state on: one call-out graph, hit after"
    assert c["eager_fallbacks"] == 0


def test_needs_input_grad_keys_the_trace():
    w = cagrad.randn(5, 3, requires_grad=True)
    b = cagrad.randn(5, requires_grad=True)
    for x_grad in (False, True, False):
        x = cagrad.randn(4, 3, requires_grad=x_grad)
        w.grad = b.grad = None
        with cagrad.compiled_autograd.enable():
            CA_FN["Linear"].apply(x, w, b).sum().backward()
        tx, tw, tb = (torch.tensor(t.detach().numpy(), requires_grad=True) for t in (x, w, b))
        TORCH_FN["Linear"].apply(tx, tw, tb).sum().backward()
        assert_close(w.grad, tw.grad)
        if x_grad:
            assert_close(x.grad, tx.grad)
    assert counters()["captures"] == 2


def test_replacing_backward_is_not_served_a_stale_graph():
    class Twice(Doubling):
        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = cagrad.randn(4, requires_grad=True)
    for factor in (2.0, 5.0):
        if factor == 5.0:
            Twice.backward = staticmethod(lambda ctx, g: g * 5)
        x.grad = None
        with cagrad.compiled_autograd.enable():
            Twice.apply(x * 1).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(4, factor, np.float32))


FACTOR = 2.0


class ByGlobal(Doubling):
    @staticmethod
    def backward(ctx, g):
        return g * FACTOR


def test_globals_and_closure_values_key_the_trace():
    global FACTOR
    x = cagrad.randn(4, requires_grad=True)
    for factor in (2.0, 3.0, 2.0):
        FACTOR = factor
        x.grad = None
        with cagrad.compiled_autograd.enable():
            ByGlobal.apply(x * 1).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(4, factor, np.float32))
    FACTOR = 2.0
    assert counters()["captures"] == 2, "3.0 recompiles; 2.0 hits its graph again"
    for k in (5.0, 7.0):
        class ByClosure(Doubling):
            @staticmethod
            def backward(ctx, g):
                return g * k

        x.grad = None
        with cagrad.compiled_autograd.enable():
            ByClosure.apply(x * 1).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(4, k, np.float32))


@pytest.mark.parametrize("dtype", DTYPES)
def test_unused_output_and_fitted_gradients(dtype, rng):
    arr = rng.standard_normal(5).astype(dtype)
    cx, tx = both(arr)
    outs = []
    for L, F, x in ((cagrad, CA_FN, cx), (torch, TORCH_FN, tx)):
        a, _ = F["SinCos"].apply(x * 1)  # b unused: its gradient is materialised as zeros
        loss = a.sum() + F["Broadcasting"].apply(x).sum()
        if L is cagrad:
            with cagrad.compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        outs.append(x.grad)
    assert_close(outs[0], outs[1])
    assert counters()["eager_fallbacks"] == 0


# ---------------------------------------------------------------------------------------
# Which ops a traced backward may call: forward-only rows lower to graph ops, fills become
# constants; each compared with torch in float64
# ---------------------------------------------------------------------------------------
BACKWARD_BODIES = {
    "relu": lambda L, g, x: g * L.relu(x),
    "gelu": lambda L, g, x: g * L.nn.functional.gelu(x, approximate="tanh"),
    "silu": lambda L, g, x: g * L.nn.functional.silu(x),
    "clamp": lambda L, g, x: g * x.clamp(-0.5, 0.5),
    "where": lambda L, g, x: L.where(x > 0, g, g * 0.1),
    "mask_float": lambda L, g, x: g * (x > 0).double(),
    "cast_round_trip": lambda L, g, x: (g.float() * 2).double(),
    "clone_contiguous": lambda L, g, x: g.clone().t().contiguous().t(),
    "view_mean": lambda L, g, x: g.view(-1).view(g.shape) - g.mean(dim=1, keepdim=True),
    "select_slice": lambda L, g, x: g * x[0] + g * x[:, :1],
    "expand_transpose": lambda L, g, x: g * x.sum(1, keepdim=True).expand_as(x).transpose(0, 1)
    .transpose(0, 1),
    "zeros_ones_full": lambda L, g, x: (g + L.zeros_like(g)) * L.ones_like(g)
    + L.full_like(g, 0.25),
    "matmul": lambda L, g, x: (g @ x.t()) @ x,
}


def body_function(L, body):
    class Body(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * 1

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return body(L, g, x)

    return Body


@pytest.mark.parametrize("name", sorted(BACKWARD_BODIES))
def test_backward_ops_are_traced_and_match_torch(name, rng):
    arr = rng.standard_normal((3, 4))
    cx, tx = both(arr)
    with cagrad.compiled_autograd.enable():
        (body_function(cagrad, BACKWARD_BODIES[name]).apply(cx) * 1.5).sum().backward()
    (body_function(torch, BACKWARD_BODIES[name]).apply(tx) * 1.5).sum().backward()
    assert_close(cx.grad, tx.grad)
    c = counters()
    assert (c["custom_traced"], c["custom_callouts"], c["eager_fallbacks"]) == (1, 0, 0)


def test_unused_output_materialised_as_zeros_is_traced():
    x = cagrad.randn(5, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        a, _ = CA_FN["SinCos"].apply(x * 1)
        a.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.cos(x.detach().numpy()), rtol=1e-6)
    assert counters()["custom_traced"] == 1


def test_unhashable_backward_is_called_out():
    class Scaler:  # a callable object with __eq__ and no __hash__
        def __eq__(self, other):
            return isinstance(other, Scaler)

        def __call__(self, ctx, g):
            return g * 2

    class ByObject(Doubling):
        backward = Scaler()

    x = cagrad.randn(3, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        ByObject.apply(x * 1).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.full(3, 2.0, np.float32))
    assert counters()["custom_callouts"] == 1


class ByLength(cagrad.autograd.Function):
    """y = x * len(other); its backward reads only the saved tensor's size."""

    @staticmethod
    def forward(ctx, x, other):
        ctx.save_for_backward(other)
        return x * other.shape[0]

    @staticmethod
    def backward(ctx, g):
        (other,) = ctx.saved_tensors
        return g * other.shape[0], None


@pytest.mark.parametrize("first", ["function", "op"])
def test_size_of_a_saved_tensor_another_node_lifted_is_not_baked_in(first):
    """`other` is also saved by a MulBackward0; when only its size changes, the traced
    constant len(other) must not be reused (its dim is dynamic, so: a call-out)."""
    x = cagrad.randn(4, requires_grad=True)
    for m in (3, 5, 7):
        other, w2 = cagrad.randn(m), cagrad.randn(m, requires_grad=True)
        x.grad = None
        with cagrad.compiled_autograd.enable():
            a = ByLength.apply(x, other).sum()
            b = (other * w2).sum()
            (a + b if first == "function" else b + a).backward()
        np.testing.assert_allclose(x.grad.numpy(), np.full(4, m, np.float32))


# ---------------------------------------------------------------------------------------
# Ints a backward bakes in are sizes: a change marks them dynamic (one recompile, then the
# node is a call-out), as PyTorch's tests expect of ctx.shape and x.shape[0]
# ---------------------------------------------------------------------------------------
class KeepsShape(cagrad.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.shape = x.shape
        return x * 1

    @staticmethod
    def backward(ctx, g):
        return g * ctx.shape[0]


SavedShape = body_function(cagrad, lambda L, g, x: g * x.shape[0])


@pytest.mark.parametrize("fn", [KeepsShape, SavedShape], ids=["ctx_attr", "saved_tensor"])
def test_baked_sizes_recompile_once_as_sizes(fn):
    for n in (10, 100, 10, 15, 20, 25):
        x = cagrad.arange(0.0, n, requires_grad=True)
        with cagrad.compiled_autograd.enable():
            fn.apply(x).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(n, n, np.float32))
    c = counters()
    assert c["captures"] == 2, c
    assert (c["custom_traced"], c["custom_callouts"]) == (1, 1)
