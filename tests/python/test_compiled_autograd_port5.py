"""A port of PyTorch's TestCompiledAutograd to cagrad, part 5: more custom Function
shapes (mark_dirty, saved outputs, typed ctx attributes, tensors kept on ctx,
materialized None gradients), retain_grad beside hooks, checkpoint variants.

Run like part 1 (compiled_port_helpers.check: torch, cagrad eager, cagrad compiled).
"""

import pytest

from compiled_port_helpers import check
from helpers import needs_cagrad

pytestmark = needs_cagrad


def test_custom_fn_mark_dirty_inplace():
    def fn(d):
        L = d.L

        class MulInPlace(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, k):
                ctx.k = k
                x.mul_(k)
                ctx.mark_dirty(x)
                return x

            @staticmethod
            def backward(ctx, gO):
                return gO * ctx.k, None

        w = d.randn(4, requires_grad=True)
        for k in (2.0, 2.0):
            y = w * 1.0
            out = MulInPlace.apply(y, k)
            yield out is y
            (out * out).sum().backward()
            yield w.grad
            w.grad = None
    check(fn, captures=1, hits=1)


def test_custom_fn_saves_its_output():
    def fn(d):
        L = d.L

        class Exp(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                out = L.exp(x)
                ctx.save_for_backward(out)
                return out

            @staticmethod
            def backward(ctx, gO):
                (out,) = ctx.saved_tensors
                return gO * out

        for n in (3, 3, 5, 6):
            x = d.randn(n, requires_grad=True)
            (Exp.apply(x) * 2).sum().backward()
            yield x.grad
    check(fn, captures=2, hits=2)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_custom_fn_typed_ctx_attributes(dtype):
    # dtype, bool, tuple and string attributes on ctx key the cache by value
    def fn(d):
        L = d.L

        class Cast(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, flip):
                ctx.in_dtype = x.dtype
                ctx.flip = flip
                ctx.dims = (0,)
                ctx.tag = "cast"
                return (x * 2).to(L.float64)

            @staticmethod
            def backward(ctx, gO):
                g = (gO * 2).to(ctx.in_dtype)
                if ctx.flip:
                    g = g.flip(ctx.dims)
                return g, None

        for flip in (False, True, False):
            x = d.randn(5, requires_grad=True)
            (Cast.apply(x, flip) * d.randn(5).double()).sum().backward()
            yield x.grad
    check(fn, dtype=dtype, captures=2, hits=1)


def test_custom_fn_tensor_kept_on_ctx_is_a_callout():
    # A tensor on ctx (not saved) cannot be a graph input: the backward is called out,
    # still compiled (no eager fallback) and still right on the hits.
    def fn(d):
        L = d.L

        class ScaleBy(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, s):
                ctx.s = s
                return x * s

            @staticmethod
            def backward(ctx, gO):
                return gO * ctx.s, None

        for _ in range(3):
            x = d.randn(4, requires_grad=True)
            s = d.randn(4)
            ScaleBy.apply(x, s).sum().backward()
            yield x.grad
    c = check(fn, captures=1, hits=2)
    assert c["custom_callouts"] == 1


def test_custom_fn_unused_output_gets_materialized_zeros():
    def fn(d):
        L = d.L
        seen = []

        class Split(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                seen.append(float(g2.abs().sum()))
                return g1 * 2 + g2 * 3

        Split.traceable_backward = False  # it reads tensor data for `seen`
        for _ in range(2):
            x = d.randn(4, requires_grad=True)
            a, _ = Split.apply(x)
            a.sum().backward()
            yield x.grad
        yield from seen
    check(fn, captures=1, hits=1)


def test_custom_fn_int_input_needs_no_grad():
    def fn(d):
        L = d.L

        class Pow(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, n):
                ctx.save_for_backward(x)
                ctx.n = n
                return x ** n

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * ctx.n * x ** (ctx.n - 1), None

        for n in (2, 3, 2):
            x = d.randn(4, requires_grad=True)
            Pow.apply(x, n).sum().backward()
            yield x.grad
    # an int on ctx is a size slot: 2 -> 3 marks it dynamic (one recompile), then hits
    check(fn, captures=2, hits=1)


def test_custom_fn_chain_inside_module():
    def fn(d):
        L = d.L

        class Swish(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * L.sigmoid(x)

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                s = L.sigmoid(x)
                return gO * (s + x * s * (1 - s))

        class Block(L.nn.Module):
            def __init__(self):
                super().__init__()
                self.a = L.nn.Linear(4, 6)
                self.b = L.nn.Linear(6, 2)

            def forward(self, x):
                return self.b(Swish.apply(self.a(x)))

        model = d.init(Block())
        for b in (3, 3, 8):
            model(d.randn(b, 4)).pow(2).sum().backward()
            yield from (p.grad for p in model.parameters())
            model.zero_grad()
    c = check(fn, captures=2, hits=1)
    assert c["custom_traced"] >= 1


def test_retain_grad_sees_hooked_value():
    # test_retains_grad_can_always_observe_tensor_prehook: .grad of a retained tensor is
    # the value after its tensor hooks.
    def fn(d):
        L = d.L
        x = d.randn(3, requires_grad=True)
        for _ in range(2):
            y = L.sin(x)
            y.register_hook(lambda g: g * 4)
            y.retain_grad()
            (y * y).sum().backward()
            yield y.grad
            yield x.grad
            x.grad = None
    check(fn, captures=1, hits=1)


def test_checkpoint_sequential_in_training_loop():
    def fn(d):
        L = d.L
        model = d.init(L.nn.Sequential(L.nn.Linear(4, 4), L.nn.Tanh(), L.nn.Linear(4, 4),
                                       L.nn.Tanh(), L.nn.Linear(4, 2)))
        opt = L.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(3):
            opt.zero_grad()
            x = d.randn(3, 4, requires_grad=True)
            out = L.utils.checkpoint.checkpoint_sequential(model, 2, x, use_reentrant=False)
            out.pow(2).sum().backward()
            opt.step()
            yield x.grad
        yield from (p.detach() for p in model.parameters())
    check(fn, captures=1, hits=2)


def test_checkpoint_with_kwargs_and_non_tensor_args():
    def fn(d):
        L = d.L

        def block(x, w, *, scale, act):
            return act(x @ w) * scale

        w = d.randn(4, 4, requires_grad=True)
        for scale in (0.5, 2.0):
            x = d.randn(2, 4, requires_grad=True)
            out = L.utils.checkpoint.checkpoint(block, x, w, scale=scale, act=L.tanh,
                                                use_reentrant=False)
            out.sum().backward()
            yield x.grad
            yield w.grad
            w.grad = None
    check(fn, captures=2)


def test_autograd_grad_reaches_params_in_non_reentrant_checkpoint():
    def fn(d):
        L = d.L
        lin = d.init(L.nn.Linear(3, 3))
        for _ in range(2):
            x = d.randn(2, 3, requires_grad=True)
            out = L.utils.checkpoint.checkpoint(lambda t: L.relu(lin(t)), x,
                                                use_reentrant=False).sum()
            gw, gx = L.autograd.grad(out, [lin.weight, x])
            yield gw
            yield gx
    check(fn, captures=1, hits=1)


@pytest.mark.parametrize("how", ["grad", "inputs"])
def test_reentrant_checkpoint_refuses_backward_with_inputs(how):
    # torch.autograd._is_checkpoint_valid: the reentrant block's backward writes .grad of
    # what it reaches, which a backward with inputs must not do; same error in both
    # libraries, eager and compiled.
    def fn(d):
        L = d.L
        x = d.randn(4, requires_grad=True)
        out = L.utils.checkpoint.checkpoint(lambda t: t.sin() * t, x, use_reentrant=True)
        try:
            if how == "grad":
                L.autograd.grad(out.sum(), x)
            else:
                out.sum().backward(inputs=[x])
            yield False  # no error
        except RuntimeError as e:
            yield str(e).startswith("When use_reentrant=True, torch.utils.checkpoint is "
                                    "incompatible with .grad() or passing an `inputs` "
                                    "parameter to .backward().")
        out.sum().backward()  # without inputs it works
        yield x.grad
    check(fn, captures=2)


def test_reentrant_checkpoint_without_grad_inputs_has_no_history():
    # None of the block's tensor arguments requires grad: PyTorch warns and the output has
    # no history (the parameters inside get no gradient).
    def fn(d):
        L = d.L
        lin = d.init(L.nn.Linear(3, 3))
        with pytest.warns(UserWarning, match="None of the inputs have requires_grad=True"):
            out = L.utils.checkpoint.checkpoint(lin, d.randn(2, 3), use_reentrant=True)
        yield out
        yield out.requires_grad
        yield out.grad_fn is None
    check(fn, captures=0)


def test_selective_checkpoint_context_fn_is_refused_by_name():
    # test_checkpointing_sac: cagrad has no selective activation checkpointing; the error
    # names the option and points to the docs rather than ignoring it.
    import cagrad

    x = cagrad.randn(3, requires_grad=True)
    with pytest.raises(NotImplementedError, match=r"context_fn .*docs/python-api\.md"):
        cagrad.utils.checkpoint.checkpoint(lambda t: t.sin(), x, use_reentrant=False,
                                           context_fn=lambda: (None, None))


def test_tensor_hooks_around_an_inplace_op():
    # test_tensor_hooks_inplace: a hook registered before b.mul_(2) sees the gradient of
    # b's old value, one registered after sees the new value's; the newer runs first.
    def fn(d):
        seen = []
        a = d.randn(2, requires_grad=True)
        b = a.clone()
        b.register_hook(lambda g: (seen.append(g.clone()), g * 3)[1])
        b.mul_(2)
        b.register_hook(lambda g: (seen.append(g.clone()), g * 5)[1])
        (b * b).sum().backward()
        yield a.grad
        yield from seen
    check(fn)


def test_retain_grad_then_inplace():
    # test_retain_grad_inplace: retain_grad follows the tensor to its new version
    def fn(d):
        a = d.randn(2, requires_grad=True)
        b = a.clone()
        b.retain_grad()
        b.mul_(2)
        (b * b).sum().backward()
        yield a.grad
        yield b.grad
    check(fn)


def test_module_full_backward_pre_hook():
    def fn(d):
        L = d.L
        lin = d.init(L.nn.Linear(3, 3))
        lin.register_full_backward_pre_hook(lambda m, gO: (gO[0] * 2,))
        x = d.randn(2, 3, requires_grad=True)
        for _ in range(2):
            lin(x).pow(2).sum().backward()
            yield x.grad
            yield lin.weight.grad
            x.grad = None
            lin.zero_grad()
    check(fn, captures=1, hits=1)
