"""The test_autograd port, part three: custom autograd Functions, in-place ops in the
graph and saved-tensor hooks (the gaps are in test_autograd_port_gaps.py). Every test
compares cagrad with torch through autograd_port_helpers.parity; where a backward runs, also with
the whole call under cagrad.compiled_autograd.enable()."""

import pytest

from autograd_port_helpers import DTYPES, MODES, data, parity, warning_categories


def _mul_add(L):
    """torch's test_function: forward(t1, pyscalar, t2), saving both tensors."""
    class MyFunction(L.autograd.Function):
        @staticmethod
        def forward(ctx, tensor1, pyscalar, tensor2):
            ctx.pyscalar = pyscalar
            ctx.save_for_backward(tensor1, tensor2)
            return tensor1 + pyscalar * tensor2 + tensor1 * tensor2

        @staticmethod
        def backward(ctx, grad_output):
            var1, var2 = ctx.saved_tensors
            return (grad_output + grad_output * var2, None,
                    grad_output * ctx.pyscalar + grad_output * var1)
    return MyFunction


# ---------------------------------------------------------------------------------------
# custom Functions
# ---------------------------------------------------------------------------------------
@MODES
@DTYPES
def test_function_values_gradients_and_double_backward(mode, dt):
    def make(L):
        x = data(L, (5, 5), dt, requires_grad=True)
        y = data(L, (5, 5), dt, seed=1, requires_grad=True)
        out = _mul_add(L).apply(x, 2, y)
        out.sum().backward(L.ones((), dtype=getattr(L, dt), requires_grad=True),
                           create_graph=True)
        return (out, x.grad, y.grad, x.grad.grad_fn is not None, type(out.grad_fn).__name__,
                out.grad_fn.name(), [type(f).__name__ for f, _ in out.grad_fn.next_functions])
    parity(make, mode)


def test_function_gradcheck():
    def make(L):
        x = data(L, (3, 3), "float64", requires_grad=True)
        y = data(L, (3, 3), "float64", seed=1, requires_grad=True)
        f = lambda a, b: _mul_add(L).apply(a, 2, b)  # noqa: E731
        return L.autograd.gradcheck(f, (x, y)), L.autograd.gradgradcheck(f, (x, y))
    parity(make)


@MODES
def test_once_differentiable(mode):
    def make(L):
        seen = []

        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * a

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, g):
                seen.append(L.is_grad_enabled())
                a, = ctx.saved_tensors
                return g * 2 * a
        x = L.tensor([1.0, 2.0], requires_grad=True)
        g, = L.autograd.grad(F.apply(x).sum(), x, create_graph=True)
        return g, seen
    parity(make, mode)


@MODES
def test_function_returning_its_input(mode):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, grad):
                return grad * 2
        out = []
        for shape in [(1,), ()]:
            v = L.ones(shape, requires_grad=True)
            F.apply(v).backward()
            out.append(v.grad.clone())
            with L.no_grad():
                v.grad.zero_()
            F.apply(v.clone()).backward()
            out.append(v.grad)
        return out
    parity(make, mode)


@MODES
def test_function_returning_none_gradients(mode):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, grad):
                return None
        x = L.ones(1, requires_grad=True)
        F.apply(x).backward()
        F.apply(x ** 2).backward()
        F.apply(x).sum().backward()
        return x.grad, L.autograd.grad(F.apply(x), x, allow_unused=True)
    parity(make, mode)


@MODES
@pytest.mark.parametrize("materialize", [True, False])
def test_set_materialize_grads(mode, materialize):
    def make(L):
        got = []

        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.set_materialize_grads(materialize)
                return a * 2, a * 3

            @staticmethod
            def backward(ctx, g1, g2):
                got.append(g2)
                return g1 * 2 if g2 is None else g1 * 2 + g2 * 3
        x = L.tensor([1.0, 2.0], requires_grad=True)
        F.apply(x)[0].sum().backward()
        return got, x.grad
    parity(make, mode)


@MODES
def test_function_errors_come_out_of_backward(mode):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a.clone()

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, g):
                raise ValueError("Simulate error on backward pass")
        t = L.rand(3, 3, requires_grad=True)
        F.apply((t + t) * (t + t)).sum().backward()
    parity(make, mode)


@pytest.mark.parametrize("case", ["legacy", "no_forward", "no_backward", "wrong_count",
                                  "grad_for_non_tensor", "wrong_shape", "not_a_tensor"])
def test_function_misuse_errors(case):
    def make(L):
        grads = {"wrong_count": lambda g: g, "grad_for_non_tensor": lambda g: (g, g),
                 "wrong_shape": lambda g: L.randn(10), "not_a_tensor": lambda g: (3, None)}

        class F(L.autograd.Function):
            if case != "no_forward":
                @staticmethod
                def forward(ctx, a, k=None):
                    return a * 2
            if case in grads:
                @staticmethod
                def backward(ctx, g):
                    return grads[case](g)
        if case == "legacy":
            class Legacy(L.autograd.Function):
                def forward(self, x):
                    return x
            Legacy()(L.ones(2))
        x = L.randn(5, 5, requires_grad=True)
        F.apply(x, 2 if case == "grad_for_non_tensor" else None).sum().backward()
    parity(make)


@MODES
def test_function_with_non_tensor_inputs_and_outputs(mode):
    def make(L):  # torch's test_custom_function_non_tensor_inputs_outputs
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, t1, t2, scale, t3):
                ctx.scale = scale
                ctx.save_for_backward(t1, t2, t3)
                return scale, (t1 + t2 * t3) * scale, None, True, (t1 * t2 + t3) * scale, \
                    "bar", t1

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, *g):
                assert len(g) == 7 and all(g[i] is None for i in (0, 2, 3, 5))
                s = ctx.scale
                v1, v2, v3 = ctx.saved_tensors
                return (g[1] * s + g[4] * v2 * s + g[6], g[1] * v3 * s + g[4] * v1 * s, None,
                        g[1] * v2 * s + g[4] * s)
        t1 = data(L, (10,), "float64", requires_grad=True)
        t2 = data(L, (10,), "float64", seed=1, requires_grad=True)
        t3 = data(L, (10,), "float64", seed=2)
        res = F.apply(t1, t2, 3, t3)
        L.autograd.backward([res[1].sum(), res[4].sum(), res[6].sum()])
        check = L.autograd.gradcheck(
            lambda a, b: tuple(F.apply(a, b, 3, t3)[i] for i in (1, 4, 6)),
            (t1.detach().requires_grad_(), t2.detach().requires_grad_()))
        return res[0], res[2], res[3], res[5], res[6] is t1, t1.grad, t2.grad, t3.grad, check
    parity(make, mode)


@MODES
@pytest.mark.parametrize("materialize", [True, False])
def test_function_returning_a_tensor_twice(mode, materialize):
    def make(L):  # torch's test_return_duplicate(_inplace): one output, at its last place
        got = []

        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.set_materialize_grads(materialize)
                out = a * 2
                return out, 3, out

            @staticmethod
            def backward(ctx, g1, g2, g3):
                got.append((g1, g2, g3 is None))
                return g3 * 3 if g1 is None else g1 * 2 + g3 * 3

        class Dirty(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                a.mul_(2)
                ctx.mark_dirty(a)
                return a, a

            @staticmethod
            def backward(ctx, g1, g2):
                return g1 + g2
        x = L.ones(2, requires_grad=True)
        a, k, b = F.apply(x)
        (a * 5).sum().backward()
        y = x.clone()
        c, d = Dirty.apply(y)
        (c * 5).sum().backward()
        return a is b, k, got, x.grad, c is d, c is y, a.grad_fn.name()
    parity(make, mode)


def test_function_without_tensors_just_returns():
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a, b):
                return a + b, "x"

            @staticmethod
            def backward(ctx, *g):
                return g
        return F.apply(1.5, 2)
    parity(make)


@MODES
def test_needs_input_grad(mode):
    def make(L):
        seen = []

        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a, b, c):
                seen.append(ctx.needs_input_grad)
                return a * b

            @staticmethod
            def backward(ctx, g):
                seen.append(ctx.needs_input_grad)
                return g, None, None
        x = L.tensor([1.0, 2.0], requires_grad=True)
        F.apply(x, L.ones(2), 3).sum().backward()
        return seen, x.grad
    parity(make, mode)


@MODES
def test_mark_dirty(mode):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                a.mul_(2)
                ctx.mark_dirty(a)
                return a

            @staticmethod
            def backward(ctx, g):
                return g * 2
        x = L.tensor([1.0, 2.0], requires_grad=True)
        y = x.clone()
        z = F.apply(y)
        z.sum().backward()
        return z is y, z, x.grad
    parity(make, mode)
    parity(lambda L: make_dirty_leaf(L))


def make_dirty_leaf(L):
    class F(L.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g
    F.apply(L.tensor([1.0, 2.0], requires_grad=True))


@MODES
def test_mark_non_differentiable(mode):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                r, s = a * 2, a * 3
                ctx.mark_non_differentiable(s)
                return r, s, a.argmax()

            @staticmethod
            def backward(ctx, gr, gs, gi):
                return gr * 2 + gs
        x = L.tensor([1.0, 2.0], requires_grad=True)
        r, s, i = F.apply(x)
        r.sum().backward()
        return s.requires_grad, r.requires_grad, i.requires_grad, x.grad
    parity(make, mode)


def test_mark_non_differentiable_only_output_cannot_backward():
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                s = a * 3
                ctx.mark_non_differentiable(s)
                return s

            @staticmethod
            def backward(ctx, g):
                return g
        F.apply(L.tensor([1.0, 2.0], requires_grad=True)).sum().backward()
    parity(make)


@pytest.mark.parametrize("case", ["non_tensor", "none_saved"])
def test_save_for_backward_arguments(case):
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a, 3 if case == "non_tensor" else None)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                a, n = ctx.saved_tensors
                return g * 2 if n is None else None
        x = L.ones(2, requires_grad=True)
        F.apply(x).sum().backward()
        return x.grad
    parity(make)


def _saving_function(L):
    class F(L.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            ctx.save_for_backward(b)
            return a * b

        @staticmethod
        def backward(ctx, g):
            b, = ctx.saved_tensors
            return g * b, None
    return F


@MODES
def test_saved_tensor_changed_in_place(mode):
    def make(L):
        w = L.tensor([1.0, 2.0], requires_grad=True)
        b = L.tensor([1.0, 2.0])
        y = _saving_function(L).apply(w, b)
        b.add_(1)
        y.sum().backward()
    parity(make, mode)
    parity(lambda L: make_saved_output_changed(L), mode)


def make_saved_output_changed(L):
    class F(L.autograd.Function):
        @staticmethod
        def forward(ctx, a, b):
            r = a * b
            ctx.save_for_backward(r, b)
            return r

        @staticmethod
        def backward(ctx, g):
            r, b = ctx.saved_tensors
            return g * r, None
    x = L.ones(2, requires_grad=True)
    b = L.ones(2, requires_grad=True) * 2
    y = F.apply(x, b)
    with L.no_grad():
        b.add_(1)
    y.sum().backward()


@MODES
def test_saved_tensors_after_backward(mode):
    def make(L):
        y = _saving_function(L).apply(L.ones(2, requires_grad=True), L.ones(2))
        y.sum().backward()
        return y.grad_fn.saved_tensors
    parity(make, mode)


def test_saved_variables_is_deprecated():
    def make(L):
        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                ctx.save_for_backward(a)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * ctx.saved_variables[0]
        x = L.ones(2, requires_grad=True)
        return warning_categories(lambda: F.apply(x).sum().backward())
    parity(make)


@MODES
def test_setup_context(mode):
    def make(L):
        class Square(L.autograd.Function):
            @staticmethod
            def forward(x):
                return x ** 2, x.item() * 2

            @staticmethod
            def setup_context(ctx, inputs, output):
                x, = inputs
                ctx.two_x = output[1]
                ctx.save_for_backward(x)

            @staticmethod
            def backward(ctx, g, _):
                x, = ctx.saved_tensors
                return g * 2 * x

        class Reshape(L.autograd.Function):
            @staticmethod
            def forward(x, shape, scale_forward, scale_backward):
                return x.reshape(shape) * scale_forward

            @staticmethod
            def setup_context(ctx, inputs, output):
                x, _, _, ctx.scale_backward = inputs
                ctx.x_shape = x.shape

            @staticmethod
            def backward(ctx, g):
                return g.reshape(ctx.x_shape) * ctx.scale_backward, None, None, None
        x = data(L, (), requires_grad=True)
        y, two_x = Square.apply(x)
        gx, = L.autograd.grad(y, x)
        z = data(L, (2, 3, 4), seed=1, requires_grad=True)
        gz, = L.autograd.grad(Reshape.apply(z, (6, 4), -1, 2).sum(), z)
        return y, two_x, gx, gz, Square.generate_vmap_rule, hasattr(Square, "vmap")
    parity(make, mode)


@MODES
def test_ctx_is_the_node(mode):
    def make(L):
        kept = []

        class F(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                kept.append(ctx)
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2
        x = L.ones(2, requires_grad=True)
        y = F.apply(x)
        with L.no_grad():
            z = F.apply(x)
        unrecorded = F.apply(L.ones(2))
        return (y.grad_fn is kept[0], z.requires_grad, z.grad_fn,
                unrecorded.requires_grad, [type(f).__name__ for f, _ in y.grad_fn.next_functions])
    parity(make, mode)


@MODES
def test_node_hooks_see_every_output_of_a_function(mode):
    def make(L):  # torch's DoubleMul2: a non-tensor output gets a None gradient slot
        class D(L.autograd.Function):
            @staticmethod
            def forward(ctx, x, a, y):
                ctx.a = a
                return a * x * 2, a, a * y * 2

            @staticmethod
            def backward(ctx, g1, _a, g2):
                return ctx.a * g1 * 2, None, ctx.a * g2 * 2
        seen = []

        def pre(go):
            seen.append(len(go))
            g1, ga, g2 = go
            return (g1 * 2, None, g2 * 2)
        a = L.ones(3, requires_grad=True)
        b = L.ones(3, requires_grad=True)
        c, _, d = D.apply(a, 3, b)
        c.grad_fn.register_prehook(pre)
        c.grad_fn.register_hook(lambda gi, go: seen.append((len(gi), len(go))))
        (c + d).sum().backward()
        return seen, a.grad, b.grad
    parity(make, mode)


@MODES
def test_reentrant_backward_inside_backward(mode):
    def make(L):
        class R(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * 1

            @staticmethod
            def backward(ctx, g):
                x, = ctx.saved_tensors
                with L.enable_grad():
                    inner = x.detach().requires_grad_()
                    (inner * inner).sum().backward()
                return g * inner.grad
        x = L.tensor([1.0, 2.0], requires_grad=True)
        R.apply(x).sum().backward()
        with L.no_grad():
            R.apply(x.detach().requires_grad_()).sum()  # forward only, under no_grad
        return x.grad, L.is_grad_enabled()
    parity(make, mode)


@MODES
def test_unreachable_function_is_not_run(mode):
    def make(L):
        class Never(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x

            @staticmethod
            def backward(ctx, g):
                raise AssertionError("This node should not be executed!")
        x = Never.apply(L.ones(1, requires_grad=True) * 2)
        y = L.ones(1, requires_grad=True)
        z = L.ones(1, requires_grad=True)
        a = L.autograd.grad(x, (y,), allow_unused=True)
        b = L.autograd.grad(Never.apply(L.ones(1, requires_grad=True) * 2) + z, (y, z),
                            allow_unused=True)
        L.autograd.backward(Never.apply(L.ones(1, requires_grad=True) * 2), inputs=(y,))
        return a, b, y.grad
    parity(make, mode)


# ---------------------------------------------------------------------------------------
# saved-tensor hooks
# ---------------------------------------------------------------------------------------
@MODES
def test_saved_tensors_hooks(mode):
    def make(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        store, log = {}, []

        def pack(t):
            store[len(store)] = t.detach().clone()
            return len(store) - 1

        def unpack(key):
            log.append(key)
            return store[key]
        with L.autograd.graph.saved_tensors_hooks(pack, unpack):
            y = (x * x).sin()
        y.sum().backward()
        return x.grad, len(store) > 0, len(log) > 0
    parity(make, mode)


@MODES
def test_saved_tensors_hooks_inner_wins_and_save_on_cpu(mode):
    def make(L):
        x = L.tensor([1.0, 2.0], requires_grad=True)
        log = []
        with L.autograd.graph.saved_tensors_hooks(lambda t: (log.append("outer"), t)[1],
                                                  lambda t: t):
            with L.autograd.graph.saved_tensors_hooks(lambda t: (log.append("inner"), t)[1],
                                                      lambda t: t):
                y = x * x
        y.sum().backward()
        with L.autograd.graph.save_on_cpu():
            z = (x * 3).tanh()
        z.sum().backward()
        return sorted(set(log)), x.grad
    parity(make, mode)


@pytest.mark.parametrize("case", ["enter_hooks_inside", "disable_inside_hooks", "no_hooks"])
def test_disable_saved_tensors_hooks(case):
    def make(L):
        g = L.autograd.graph
        x = L.tensor([1.0, 2.0], requires_grad=True)
        if case == "disable_inside_hooks":
            with g.saved_tensors_hooks(lambda t: t, lambda t: t):
                with g.disable_saved_tensors_hooks("no hooks here"):
                    pass
        with g.disable_saved_tensors_hooks("no hooks here"):
            y = x * x
            if case == "enter_hooks_inside":
                with g.saved_tensors_hooks(lambda t: t, lambda t: t):
                    pass
        with g.saved_tensors_hooks(lambda t: t, lambda t: t):  # allowed again
            pass
        y.sum().backward()
        return x.grad
    parity(make)


# ---------------------------------------------------------------------------------------
# in-place ops on tensors in the graph (torch's test_retain_grad_inplace and friends)
# ---------------------------------------------------------------------------------------
@MODES
def test_in_place_on_non_leaves(mode):
    def make(L):
        w = L.ones(3, requires_grad=True)
        y = w * 2
        y.add_(1)
        y.mul_(3)
        (y * y).sum().backward()
        a = L.randn(5, 5) * 1
        a += L.ones(5, 5, requires_grad=True)  # a now requires grad
        z = L.ones(2, 3, requires_grad=True) * 2
        z[:, 0] = 1.0
        z.sum().backward()
        return w.grad, y.grad_fn.name(), a.requires_grad, a.is_leaf
    parity(make, mode)


@MODES
def test_retain_grad_and_hooks_follow_in_place_ops(mode):
    def make(L):
        a = L.tensor([1.0], requires_grad=True).clone()
        a.retain_grad()
        a.mul_(2)
        a.mul_(2)
        a.sum().backward()
        first, second = [], []
        x = L.tensor([1.0], requires_grad=True)
        b = x.clone()
        b.register_hook(lambda g: (first.append(g.clone()), g * 2)[1])
        b.mul_(2)
        b.register_hook(lambda g: (second.append(g.clone()), g * 2)[1])
        b.sum().backward()
        return a.grad, first, second, x.grad
    parity(make, mode)


@MODES
def test_hooks_of_a_function_output_changed_in_place(mode):
    def make(L):
        class DoubleMul(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2, x * 3

            @staticmethod
            def backward(ctx, g1, g2):
                return g1 * 2 + g2 * 3
        counts = [0, 0, 0]

        def count(i):
            return lambda g: counts.__setitem__(i, counts[i] + 1)
        b = data(L, (3, 3), requires_grad=True)
        o1, o2 = DoubleMul.apply(b)
        o1.register_hook(count(0))
        o2.register_hook(count(1))
        o1.retain_grad()
        o1.mul_(2)
        o1.register_hook(count(2))
        (o1 + o2 * 3).sum().backward()
        return counts, o1.grad, b.grad
    parity(make, mode)


@MODES
def test_leaf_changed_under_no_grad_then_used(mode):
    def make(L):
        a = L.ones(2, requires_grad=True)
        with L.no_grad():
            a.add_(1)
        a.sum().backward()
        c = L.randn(2, 3)
        c.add_(5)
        c.requires_grad = True
        c.sum().backward()
        return a, a.grad, c.grad
    parity(make, mode)
