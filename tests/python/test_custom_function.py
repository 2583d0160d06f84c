"""Custom autograd Functions (cagrad.autograd.Function) against torch.autograd.Function.

Each Function is written once against the library module L and defined for cagrad and for
torch 2.13; values and gradients are compared in float32 and float64, eager and under
compiled autograd (where the custom backward must be a call-out of the one compiled graph:
a capture or a hit, no eager fallback). Covered: saved inputs and outputs, non-tensor
arguments, needs_input_grad, several outputs (one unused), setup_context, None gradients,
mark_non_differentiable, set_materialize_grads, mark_dirty, an input returned as is,
once_differentiable, broadcast and other-dtype gradients, grad_fn identity and names,
autograd.grad through Functions, finite-difference checks in float64, and PyTorch's errors
(wrong gradient count, shape, type; saved tensors freed or changed in place; exceptions
in backward leave the cache usable).
"""

import numpy as np
import pytest
import torch

import cagrad
from helpers import assert_close, backward_checked, compiled_ctx, counters, needs_cagrad

pytestmark = needs_cagrad

DTYPES = ["float32", "float64"]
RNG = np.random.default_rng(7)


def functions(L):
    """The test Functions, built against library L (cagrad or torch)."""

    class Exp(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, g):
            (y,) = ctx.saved_tensors
            return g * y

    class ScaleAdd(L.autograd.Function):  # x * k + y, k a Python number
        @staticmethod
        def forward(ctx, x, k, y):
            ctx.k = k
            ctx.record = ctx.needs_input_grad
            return x * k + y

        @staticmethod
        def backward(ctx, g):
            return g * ctx.k if ctx.needs_input_grad[0] else None, None, g

    class SinCos(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x.sin(), x.cos()

        @staticmethod
        def backward(ctx, gs, gc):
            (x,) = ctx.saved_tensors
            return gs * x.cos() - gc * x.sin()

    class MulSetup(L.autograd.Function):  # the setup_context style
        @staticmethod
        def forward(x, w):
            return x * w

        @staticmethod
        def setup_context(ctx, inputs, output):
            ctx.save_for_backward(*inputs)

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g * w, (g * x).sum(0)

    class Linear(L.autograd.Function):  # a fused linear: x @ w.T + b
        @staticmethod
        def forward(ctx, x, w, b):
            ctx.save_for_backward(x, w)
            return x.matmul(w.t()) + b

        @staticmethod
        def backward(ctx, g):
            x, w = ctx.saved_tensors
            return g.matmul(w), g.t().matmul(x), g.sum(0)

    class MaxIdx(L.autograd.Function):  # a non-differentiable int64 output
        @staticmethod
        def forward(ctx, x):
            v, i = x.max(1)
            ctx.mark_non_differentiable(i)
            ctx.save_for_backward(x, i)
            return v, i

        @staticmethod
        def backward(ctx, gv, gi):
            x, i = ctx.saved_tensors
            onehot = (L.arange(x.shape[1]).reshape(1, -1) == i.reshape(-1, 1)).to(x.dtype)
            return onehot * gv.reshape(-1, 1)

    class NoMaterialize(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.set_materialize_grads(False)
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            ctx.seen = (g1 is None, g2 is None)
            out = None
            for g, k in ((g1, 2), (g2, 3)):
                if g is not None:
                    out = g * k if out is None else out + g * k
            return out

    class DoubleInPlace(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            x.mul_(2)
            ctx.mark_dirty(x)
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 2

    class Identity(L.autograd.Function):  # returns its input as is
        @staticmethod
        def forward(ctx, x):
            return x

        @staticmethod
        def backward(ctx, g):
            return g * 5

    class Once(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        @L.autograd.function.once_differentiable
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * x * g

    class Broadcasting(L.autograd.Function):  # backward returns a broadcast gradient
        @staticmethod
        def forward(ctx, x):
            return x * 1

        @staticmethod
        def backward(ctx, g):
            return g.expand(3, *g.shape) / 3

    class GradNone(L.autograd.Function):  # no gradient for an input that wants one
        @staticmethod
        def forward(ctx, x, y):
            return x + y

        @staticmethod
        def backward(ctx, g):
            return g, None

    return {c.__name__: c for c in (Exp, ScaleAdd, SinCos, MulSetup, Linear, MaxIdx,
                                    NoMaterialize, DoubleInPlace, Identity, Once,
                                    Broadcasting, GradNone)}


CA_FN, TORCH_FN = functions(cagrad), functions(torch)


def pair(shape, dtype, requires_grad=True):
    arr = RNG.standard_normal(shape).astype(dtype)
    return (cagrad.tensor(arr.copy(), requires_grad=requires_grad),
            torch.tensor(arr.copy(), requires_grad=requires_grad))


def run_both(build, shapes, dtype, compiled, grad_inputs=None):
    """build(L, F, *inputs) -> loss, for both libraries; compares losses and gradients."""
    ins = [pair(s, dtype) for s in shapes]
    losses = []
    for k, (L, F) in enumerate(((cagrad, CA_FN), (torch, TORCH_FN))):
        xs = [p[k] for p in ins]
        with compiled_ctx(compiled and L is cagrad):
            loss = build(L, F, *xs)
            if L is cagrad:
                backward_checked(loss, compiled)
            else:
                loss.backward()
        losses.append(loss)
    assert_close(losses[0], losses[1], msg="loss")
    for i, (c, t) in enumerate(ins):
        assert_close(c.grad, t.grad, msg=f"grad of input {i}")


CASES = {
    "exp": (lambda L, F, x: (F["Exp"].apply(x) * 2).sum(), [(4, 3)]),
    "scale_add": (lambda L, F, x, y: F["ScaleAdd"].apply(x, 1.5, y).pow(2).sum(), [(3,), (3,)]),
    "sincos": (lambda L, F, x: sum(o.sum() for o in F["SinCos"].apply(x)), [(5,)]),
    "sincos_one_used": (lambda L, F, x: F["SinCos"].apply(x)[1].sum(), [(5,)]),
    "setup_context": (lambda L, F, x, w: F["MulSetup"].apply(x, w).tanh().sum(), [(4, 3), (3,)]),
    "linear_mlp": (lambda L, F, x, w, b: F["Linear"].apply(F["Linear"].apply(x, w, b).relu(), w,
                                                           b).sum(), [(5, 3), (3, 3), (3,)]),
    "max_nondiff": (lambda L, F, x: F["MaxIdx"].apply(x)[0].pow(2).sum(), [(4, 6)]),
    "identity": (lambda L, F, x: F["Identity"].apply(x).sum(), [(3,)]),
    "once": (lambda L, F, x: F["Once"].apply(x).sum(), [(3,)]),
    "broadcast_grad": (lambda L, F, x: (F["Broadcasting"].apply(x) * 3).sum(), [(2, 3)]),
    "dirty": (lambda L, F, x: (F["DoubleInPlace"].apply(x * 1) * x).sum(), [(4,)]),
    "two_calls_shared_input": (lambda L, F, x: (F["Exp"].apply(x) * F["Exp"].apply(x * 2)).sum(),
                               [(3,)]),
}


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", sorted(CASES))
def test_matches_torch(case, dtype, compiled):
    build, shapes = CASES[case]
    run_both(build, shapes, dtype, compiled)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_compiled_caches_and_recompiles_once(compiled):
    cagrad.compiled_autograd.reset()
    w = cagrad.randn(3, 3, requires_grad=True)
    b = cagrad.randn(3, requires_grad=True)
    for batch in (4, 4, 4, 8, 16):
        x = cagrad.randn(batch, 3)
        with compiled_ctx(compiled):
            loss = CA_FN["Linear"].apply(x, w, b).sum()
            backward_checked(loss, compiled)
    c = counters()
    if compiled:
        assert (c["captures"], c["cache_hits"], c["eager_fallbacks"]) == (2, 3, 0), c


def test_grad_fn_is_the_ctx():
    x = cagrad.randn(3, requires_grad=True)
    a, b = CA_FN["SinCos"].apply(x)
    assert a.grad_fn is b.grad_fn
    assert type(a.grad_fn).__name__ == "SinCosBackward"
    assert a.grad_fn.name() == "SinCosBackward"
    assert isinstance(a.grad_fn, cagrad.autograd.function.BackwardCFunction)
    assert len(a.grad_fn.saved_tensors) == 1 and a.grad_fn.saved_tensors[0] is x


def test_needs_input_grad_and_no_grad_mode():
    x = cagrad.randn(3, requires_grad=True)
    y = cagrad.randn(3)
    out = CA_FN["ScaleAdd"].apply(x, 2.0, y)
    assert out.grad_fn.record == (True, False, False)
    with cagrad.no_grad():
        out = CA_FN["ScaleAdd"].apply(x, 2.0, y)
    assert out.grad_fn is None and not out.requires_grad
    z = CA_FN["Exp"].apply(y)
    assert not z.requires_grad  # no input requires grad: no node


def test_nondiff_output_does_not_require_grad():
    x = cagrad.randn(2, 4, requires_grad=True)
    v, i = CA_FN["MaxIdx"].apply(x)
    assert v.requires_grad and not i.requires_grad and i.dtype == cagrad.int64


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_materialize_grads_false_passes_none(compiled):
    x = cagrad.randn(3, requires_grad=True)
    with compiled_ctx(compiled):
        a, b = CA_FN["NoMaterialize"].apply(x)
        ctx = a.grad_fn
        b.sum().backward()
    assert ctx.seen == (True, False)
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 3.0))


def test_dirty_leaf_is_refused_like_torch():
    for L, F in ((cagrad, CA_FN), (torch, TORCH_FN)):
        x = L.randn(3, requires_grad=True)
        with pytest.raises(RuntimeError, match="a leaf Variable that requires grad"):
            F["DoubleInPlace"].apply(x)


def test_none_gradient_for_a_leaf_eager():
    for L, F in ((cagrad, CA_FN), (torch, TORCH_FN)):
        x, y = L.randn(3, requires_grad=True), L.randn(3, requires_grad=True)
        F["GradNone"].apply(x, y).sum().backward()
        assert x.grad is not None and y.grad is None


def test_autograd_grad_through_function():
    for compiled in (False, True):
        (cx, tx), = [pair((4,), "float64")]
        with compiled_ctx(compiled):
            ca_out = cagrad.autograd.grad(CA_FN["Exp"].apply(cx).sum(), [cx])
        t_out = torch.autograd.grad(TORCH_FN["Exp"].apply(tx).sum(), [tx])
        assert_close(ca_out[0], t_out[0])
        a, b = CA_FN["SinCos"].apply(cx)
        with compiled_ctx(compiled):
            gb, = cagrad.autograd.grad((a * b).sum(), [b])  # a custom output as the input
        assert_close(gb, a.detach())


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_finite_differences_float64(compiled):
    """The Functions' gradients against central differences, in float64."""
    arr = RNG.standard_normal((3, 2))
    for name, f in (("Exp", lambda F, x: F["Exp"].apply(x)),
                    ("SinCos", lambda F, x: F["SinCos"].apply(x)[0] * F["SinCos"].apply(x)[1]),
                    ("Once", lambda F, x: F["Once"].apply(x))):
        x = cagrad.tensor(arr.copy(), requires_grad=True)
        with compiled_ctx(compiled):
            f(CA_FN, x).sum().backward()
        num = np.zeros_like(arr)
        for idx in np.ndindex(arr.shape):
            for sign in (1, -1):
                p = arr.copy()
                p[idx] += sign * 1e-6
                num[idx] += sign * f(CA_FN, cagrad.tensor(p)).sum().item() / 2e-6
        np.testing.assert_allclose(x.grad.numpy(), num, rtol=1e-6, atol=1e-8, err_msg=name)


# ---------------------------------------------------------------------------------- errors
def bad(backward):
    class Bad(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

    Bad.backward = staticmethod(backward)
    return Bad


ERRORS = [
    (lambda ctx, g: g, r"function BadBackward returned an incorrect number of gradients "
                       r"\(expected 2, got 1\)"),
    (lambda ctx, g: (g, g), r"function BadBackward returned a gradient different than None at "
                            r"position 2, but the corresponding forward input was not a Variable"),
    (lambda ctx, g: (g[:2], None), r"Function BadBackward returned an invalid gradient at index "
                                   r"0 - got \[2\] but expected shape compatible with \[3\]"),
    (lambda ctx, g: (3, None), r"expected Variable or None \(got int\)"),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("which", range(len(ERRORS)))
def test_bad_backward_errors_like_torch(which, compiled):
    backward, message = ERRORS[which]
    x = cagrad.randn(3, requires_grad=True)
    with compiled_ctx(compiled), pytest.raises(RuntimeError, match=message):
        bad(backward).apply(x, 2.0).sum().backward()
    # the same mistake in torch gives the same message
    tx = torch.randn(3, requires_grad=True)

    class Bad(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, k):
            return x * k

    Bad.backward = staticmethod(backward)
    with pytest.raises(RuntimeError, match=message):
        Bad.apply(tx, 2.0).sum().backward()


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_exception_in_backward_propagates_and_cache_stays_usable(compiled):
    class Boom(cagrad.autograd.Function):
        fail = True

        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            if Boom.fail:
                raise KeyError("boom")
            return g * 2

    x = cagrad.randn(3, requires_grad=True)
    with compiled_ctx(compiled):
        with pytest.raises(KeyError, match="boom"):
            Boom.apply(x).sum().backward()
        Boom.fail = False
        Boom.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full(3, 2.0))


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_saved_tensors_freed_after_backward(compiled):
    x = cagrad.randn(3, requires_grad=True)
    with compiled_ctx(compiled):
        y = CA_FN["Exp"].apply(x)
        y.sum().backward(retain_graph=True)
        y.sum().backward()  # retain_graph kept them
        with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
            y.sum().backward()
    with pytest.raises(RuntimeError, match="Trying to backward through the graph a second"):
        y.grad_fn.saved_tensors


def test_saved_tensor_changed_in_place():
    for L, F in ((cagrad, CA_FN), (torch, TORCH_FN)):
        x = L.randn(3, requires_grad=True)
        h = x * 1
        y = F["Once"].apply(h)
        with L.no_grad():
            h.mul_(3)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            y.sum().backward()


def test_legacy_non_static_forward_is_refused():
    with pytest.raises(RuntimeError, match="Legacy autograd function with non-static forward"):
        CA_FN["Exp"]()


def test_compiled_log_shows_the_call_out(tmp_path):
    class OpaqueExp(CA_FN["Exp"]):
        traceable_backward = False

    x = cagrad.randn(3, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        OpaqueExp.apply(x * 2).sum().backward()
    path = tmp_path / "g.dot"
    cagrad.compiled_autograd.write_graph(path)
    dot = path.read_text()
    assert "callout (opaque)" in dot and "OpaqueExpBackward (NodeCall" in dot


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_returned_gradient_becomes_grad_without_a_copy(compiled):
    """A gradient the backward returns and no one else holds becomes the leaf's .grad
    itself, eager and compiled (no copy of a weight-sized gradient)."""
    seen = {}

    class Scale(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 3

        @staticmethod
        def backward(ctx, g):
            out = g * 3
            seen["ptr"] = out.data_ptr()
            return out

    x = cagrad.randn(64, 32, requires_grad=True)
    for _ in range(2):  # a capture, then a hit
        x.grad = None
        with compiled_ctx(compiled):
            Scale.apply(x).sum().backward()
        assert x.grad.data_ptr() == seen["ptr"]
        np.testing.assert_allclose(x.grad.numpy(), np.full((64, 32), 3.0))
    with compiled_ctx(compiled):  # accumulating onto a .grad that is there adds
        Scale.apply(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.full((64, 32), 6.0))


def test_a_failing_call_that_frees_a_function_node_keeps_its_error():
    # The temporary's FBackward node goes while copy_'s error is pending; its release
    # must neither swallow that error (SystemError before) nor fail itself.
    class Twice(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    target = cagrad.zeros(3)
    with pytest.raises(RuntimeError, match="copy_"):
        cagrad._C.copy_(target, Twice.apply(cagrad.ones(4, requires_grad=True)))


def test_a_function_collected_with_its_own_ctx_frees_it_quietly():
    # A Function class defined in a function, holding its own output: the class, the
    # output, its node and the ctx are one cycle. The collector may clear the class before
    # the node goes; ctx's release then finds no _release method. It must say nothing
    # (it printed "Exception ignored ... has no attribute '_release'") and free the saved
    # input with the rest.
    import gc
    import sys
    import weakref

    def make():
        class Twice(cagrad.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        x = cagrad.randn(3, requires_grad=True)
        Twice.keep = Twice.apply(x)
        return weakref.ref(x)

    caught, hook = [], sys.unraisablehook
    sys.unraisablehook = caught.append
    try:
        refs = []
        # Whether the class goes first depends on where the collector's automatic passes
        # fall: from a fresh count, some of these batch sizes hit it (50-70 in a fresh
        # interpreter did, before the fix).
        for n in (40, 50, 60, 70, 90):
            gc.collect()
            refs += [make() for _ in range(n)]
        gc.collect()
    finally:
        sys.unraisablehook = hook
    assert [repr(u.exc_value) for u in caught] == []
    assert all(r() is None for r in refs)
