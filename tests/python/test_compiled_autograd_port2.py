"""A port of PyTorch's TestCompiledAutograd to cagrad, part 2: custom autograd.Function
(saved tensors, ctx attributes, non-tensor arguments, several outputs,
mark_non_differentiable, needs_input_grad, once_differentiable, set_materialize_grads),
classes that key the cache, backwards and callbacks inside a custom backward.

Run like part 1 (compiled_port_helpers.check: torch, cagrad eager, cagrad compiled). The
size sequence 10, 100, 10, 15, 20, 25 of PyTorch's cases is two captures: 10 first, then
the change to 100 makes the size symbolic and every later size hits that graph.
"""

import contextlib

import pytest
import torch

import cagrad
from compiled_port_helpers import check
from helpers import needs_cagrad

pytestmark = needs_cagrad

SIZES = [10, 100, 10, 15, 20, 25]
DTYPES = ["float32", "float64"]


@pytest.mark.parametrize("dtype", DTYPES)
def test_custom_fn_saved_tensors(dtype):
    def fn(d):
        L = d.L

        class MySin(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return L.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * L.cos(x)

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            MySin.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2, dtype=dtype)


def test_custom_fn_saved_multiple_tensors():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                ctx.save_for_backward(x, y)
                return L.sin(x), L.sin(y)

            @staticmethod
            def backward(ctx, gO_x, gO_y):
                (x, y) = ctx.saved_tensors
                return gO_x * L.cos(x), gO_y * L.cos(y)

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            y = d.arange(i, requires_grad=True)
            out1, out2 = MyFn.apply(x, y)
            (out1 * out2).sum().backward()
            yield x.grad
            yield y.grad
    check(fn, captures=2)


def test_custom_fn_saved_multiple_tensors_dedup():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x, x)
                return L.sin(x)

            @staticmethod
            def backward(ctx, gO):
                (x1, x2) = ctx.saved_tensors
                return gO * L.cos(x1) * L.cos(x2)

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            MyFn.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2)


def test_custom_fn_saved_shape_tensor():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x.clone()

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * x.shape[0]

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            MyFn.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2)


def test_custom_fn_saved_attr():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.shape = x.shape
                return x.clone()

            @staticmethod
            def backward(ctx, gO):
                return gO * ctx.shape[0]

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            MyFn.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2)


def test_custom_fn_multiple_grads():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x + y, y.clone()

            @staticmethod
            def backward(ctx, gO_1, gO_2):
                return gO_1, gO_2

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            y = d.arange(i, requires_grad=True)
            out1, out2 = MyFn.apply(x, y)
            (out1 + out2).sum().backward()
            yield x.grad
            yield y.grad
    check(fn, captures=2)


def test_custom_fn_non_variable_input():
    def fn(d):
        L = d.L

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y, z):
                return x * 2, y * 3, z * 4

            @staticmethod
            def backward(ctx, gO_1, gO_2, gO_3):
                return gO_1, gO_2, gO_3

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            y = 1
            z = d.arange(i, requires_grad=True)
            out1, out2, out3 = MyFn.apply(x, y, z)
            (out1 + out2 + out3).sum().backward()
            yield x
            yield y
            yield z
            yield x.grad
            yield z.grad
    check(fn, captures=2)


def test_custom_fn_non_tensor_args_keyed_by_value():
    # A float and a string passed to forward and kept on ctx: each new value is a new key.
    def fn(d):
        L = d.L

        class Scale(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, alpha, mode):
                ctx.alpha = alpha
                ctx.mode = mode
                return x * alpha

            @staticmethod
            def backward(ctx, gO):
                g = gO * ctx.alpha
                if ctx.mode == "neg":
                    g = -g
                return g, None, None

        for alpha, mode in [(2.0, "pos"), (3.0, "pos"), (2.0, "neg"), (2.0, "pos")]:
            x = d.randn(4, requires_grad=True)
            Scale.apply(x, alpha, mode).sum().backward()
            yield x.grad
    check(fn, captures=3, hits=1)


def test_custom_fn_with_same_graph():
    # Two classes with the same code are two keys; each is hit on its second use.
    def fn(d):
        L = d.L

        def make():
            class MyFn(L.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x.clone()

                @staticmethod
                def backward(ctx, gO):
                    return gO

            return MyFn

        fn1, fn2 = make(), make()
        for myfn in [fn1, fn2, fn1, fn2]:
            x = d.arange(10, requires_grad=True)
            myfn.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2, hits=2)


def test_custom_fn_dynamically_defined_class():
    def fn(d):
        L = d.L

        def create_class(multiplier):
            class DynamicFn(L.autograd.Function):
                @staticmethod
                def forward(ctx, x):
                    return x * multiplier

                @staticmethod
                def backward(ctx, gO):
                    return gO * multiplier

            return DynamicFn

        for multiplier in [10, 20, 30]:
            x = d.arange(10, requires_grad=True)
            create_class(multiplier).apply(x).sum().backward()
            yield x.grad
    check(fn, captures=3)


def test_custom_fn_bw_prints_still_two_captures(capsys):
    # test_custom_fn_bw_graph_break: print() in backward is a graph break for Dynamo; in
    # cagrad the backward is recorded at capture, so it prints only at captures.
    def fn(d):
        L = d.L

        class MySin(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return L.sin(x)

            @staticmethod
            def backward(ctx, gO):
                print("in backward")
                (x,) = ctx.saved_tensors
                return gO * L.cos(x)

        for i in SIZES:
            x = d.arange(i, requires_grad=True)
            MySin.apply(x).sum().backward()
            yield x.grad
    check(fn, captures=2)
    # torch and cagrad eager print at every backward; the compiled run prints when it
    # records the backward at the first capture, then at every run of the second graph,
    # where the size is symbolic and the backward a call-out
    printed = capsys.readouterr().out.count("in backward")
    assert printed == len(SIZES) * 3


def test_custom_fn_backward_reads_item_is_a_callout():
    # A backward that reads tensor data cannot be recorded: it is called out at each run,
    # still with no eager fallback.
    def fn(d):
        L = d.L

        class ItemScale(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * 2 * x * float(x.abs().max().item() > 0)

        for _ in range(3):
            x = d.randn(5, requires_grad=True)
            ItemScale.apply(x).sum().backward()
            yield x.grad
    c = check(fn, captures=1, hits=2)
    assert c["custom_callouts"] == 1


def test_custom_fn_mark_non_differentiable():
    def fn(d):
        L = d.L

        class SortWithIndex(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                values, idx = x.sort()
                ctx.mark_non_differentiable(idx)
                ctx.save_for_backward(idx)
                return values, idx

            @staticmethod
            def backward(ctx, g_values, g_idx):
                (idx,) = ctx.saved_tensors
                grad = L.zeros_like(g_values)
                grad.scatter_(0, idx, g_values)
                return grad

        for _ in range(2):
            x = d.randn(6, requires_grad=True)
            values, idx = SortWithIndex.apply(x)
            yield idx.requires_grad
            (values * L.arange(6, dtype=values.dtype)).sum().backward()
            yield x.grad
    check(fn, captures=1, hits=1)


def test_custom_fn_needs_input_grad():
    def fn(d):
        L = d.L
        seen = []

        class Mul(L.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                ctx.save_for_backward(a, b)
                return a * b

            @staticmethod
            def backward(ctx, gO):
                a, b = ctx.saved_tensors
                seen.append(tuple(ctx.needs_input_grad))
                ga = gO * b if ctx.needs_input_grad[0] else None
                gb = gO * a if ctx.needs_input_grad[1] else None
                return ga, gb

        for b_grad in (False, True, False):
            a = d.randn(3, requires_grad=True)
            b = d.randn(3, requires_grad=b_grad)
            Mul.apply(a, b).sum().backward()
            yield a.grad
            yield b.grad
        # the compiled run records the backward at its two captures only, so compare the
        # first two calls: (True, False) then (True, True)
        yield from (flag for pair in seen[:2] for flag in pair)
    # needs_input_grad is in the cache key: two graphs
    c = check(fn, captures=2, hits=1)
    assert c["custom_traced"] == 2


def test_custom_fn_once_differentiable():
    def fn(d):
        L = d.L

        class Cube(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x ** 3

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, gO):
                (x,) = ctx.saved_tensors
                return gO * 3 * x * x

        for _ in range(3):
            x = d.randn(4, requires_grad=True)
            (Cube.apply(x) * 2).sum().backward()
            yield x.grad
    check(fn, captures=1, hits=2)


@pytest.mark.parametrize("lib", ["torch", "cagrad"])
def test_custom_fn_once_differentiable_refuses_double_backward(lib):
    # The gradient of a once_differentiable backward whose incoming gradient requires grad
    # carries a node that refuses a second differentiation, in torch and in cagrad
    # (where a create_graph backward through a custom Function runs eagerly: one eager
    # fallback).
    L = torch if lib == "torch" else cagrad

    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @L.autograd.function.once_differentiable
        def backward(ctx, gO):
            (x,) = ctx.saved_tensors
            return gO * 3 * x * x

    x = L.randn(4, requires_grad=True)
    v = L.randn(4, requires_grad=True)
    ctx = cagrad.compiled_autograd.enable() if lib == "cagrad" else contextlib.nullcontext()
    with ctx:
        (g,) = L.autograd.grad(Cube.apply(x), x, grad_outputs=v, create_graph=True)
        assert g.requires_grad
        with pytest.raises(RuntimeError, match="trying to differentiate twice a function "
                                               "that was marked with @once_differentiable"):
            g.sum().backward()


def test_custom_fn_set_materialize_grads_false():
    def fn(d):
        L = d.L

        class TwoOut(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.set_materialize_grads(False)
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                out = L.zeros_like(g1) if g1 is not None else L.zeros_like(g2)
                if g1 is not None:
                    out = out + g1 * 2
                if g2 is not None:
                    out = out + g2 * 3
                return out

        for _ in range(2):
            x = d.randn(4, requires_grad=True)
            a, _ = TwoOut.apply(x)
            a.sum().backward()
            yield x.grad
    check(fn, captures=1, hits=1)


def test_custom_fn_setup_context_style():
    def fn(d):
        L = d.L

        class Exp(L.autograd.Function):
            @staticmethod
            def forward(x, scale):
                return L.exp(x) * scale

            @staticmethod
            def setup_context(ctx, inputs, output):
                ctx.scale = inputs[1]
                ctx.save_for_backward(output)

            @staticmethod
            def backward(ctx, gO):
                (out,) = ctx.saved_tensors
                return gO * out, None

        for _ in range(3):
            x = d.randn(3, 2, requires_grad=True)
            Exp.apply(x, 0.5).sum().backward()
            yield x.grad
    check(fn, captures=1, hits=2)


def test_custom_fn_returns_none_for_input_that_needs_no_grad():
    def fn(d):
        L = d.L

        class Partial(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, y):
                return x * y

            @staticmethod
            def backward(ctx, gO):
                return gO * 2, None

        x = d.randn(3, requires_grad=True)
        y = d.randn(3)
        Partial.apply(x, y).sum().backward()
        yield x.grad
        yield y.grad is None
    check(fn)


def test_custom_fn_output_is_view_of_input():
    def fn(d):
        L = d.L

        class Identity(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, gO):
                return gO

        x = d.arange(9, requires_grad=True)
        x_view = x.view(3, 3)
        (Identity.apply(x_view) * d.randn(3, 3)).sum().backward()
        yield x.grad
    check(fn)


def test_custom_fn_mixed_with_modules_and_broadcast_grad():
    # a backward that returns a gradient of a broadcast shape: summed down to the input's
    def fn(d):
        L = d.L

        class AddBias(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, b):
                return x + b

            @staticmethod
            def backward(ctx, gO):
                return gO, gO

        lin = d.init(L.nn.Linear(4, 3))
        b = d.randn(3, requires_grad=True)
        for _ in range(2):
            L.tanh(AddBias.apply(lin(d.randn(5, 4)), b)).sum().backward()
            yield b.grad
            yield lin.weight.grad
    check(fn, captures=1, hits=1)


def test_queue_callback_from_custom_backward():
    # test_callback_graph_break_throws_error's callback half: a callback queued in a
    # backward runs once that backward is done, eager and compiled.
    def fn(d):
        L = d.L
        calls = []

        class MyFunc(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, grad):
                L.autograd.Variable._execution_engine.queue_callback(
                    lambda: calls.append("done"))
                return grad * 2

        MyFunc.traceable_backward = False  # a side effect that must happen every run
        for _ in range(2):
            a = d.rand(3, 3, requires_grad=True)
            MyFunc.apply(a).sum().backward()
            yield a.grad
        yield len(calls)
    check(fn, captures=1, hits=1)


def test_no_nested_compiled_autograd():
    # A backward run from inside a custom backward runs eagerly in that step; only the
    # outer backward is captured.
    def fn(d):
        L = d.L
        inner_grads = []

        class MyFn(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x.clone()

            @staticmethod
            def backward(ctx, gO):
                a = d.randn(5, 5, requires_grad=True)
                b = d.randn(5, 5, requires_grad=True)
                with L.enable_grad():  # a backward runs with grad mode off
                    L.matmul(a, b).sum().backward()
                inner_grads.append(a.grad)
                return gO

        # the backward draws inputs: keep cagrad from also running it once at capture to
        # record it (it would be a call-out anyway, since it starts a backward)
        MyFn.traceable_backward = False
        x = d.randn(5, 5, requires_grad=True)
        MyFn.apply(x).sum().backward()
        yield x.grad
        yield from inner_grads
    check(fn, captures=1)


def test_custom_fn_exception_then_next_backward_works():
    class Boom(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, gO):
            raise ValueError("boom in backward")

    x = cagrad.randn(3, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        with pytest.raises(ValueError, match="boom in backward"):
            Boom.apply(x).sum().backward()
        (x * 3).sum().backward()
    assert x.grad.numpy().tolist() == [3.0, 3.0, 3.0]


def test_custom_fn_wrong_number_of_grads_is_torch_error():
    class Bad(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.clone()

        @staticmethod
        def backward(ctx, gO):
            return gO, gO

    x = cagrad.randn(3, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        with pytest.raises(RuntimeError, match="function BadBackward returned an incorrect "
                                               "number of gradients"):
            Bad.apply(x).sum().backward()
