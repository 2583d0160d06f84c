"""A port of the behaviours PyTorch's test/test_autograd.py (TestAutograd) checks, run
against cagrad and compared with torch (autograd_port_helpers.parity): grad mode,
requires_grad and leaves, .grad, backward() and autograd.grad(). Where a backward runs,
the test also runs with the whole call under cagrad.compiled_autograd.enable(). Hooks,
graph nodes, detach and version counters are in test_autograd_port_hooks.py; custom
Functions, saved-tensor hooks and the known gaps in test_autograd_port_function.py."""

import threading

import pytest
import torch

from autograd_port_helpers import DTYPES, MODES, data, parity, warning_categories
from helpers import ca


# ---------------------------------------------------------------------------------------
# grad mode
# ---------------------------------------------------------------------------------------
def test_no_grad_context_and_restore_after_exception():
    def make(L):
        x = L.ones(3, requires_grad=True)
        with L.no_grad():
            y = x * 2
            inside = L.is_grad_enabled()
        try:
            with L.no_grad():
                raise ValueError("boom")
        except ValueError:
            pass
        return y.requires_grad, y.grad_fn is None, inside, L.is_grad_enabled()
    parity(make)


def test_grad_mode_decorators():
    def make(L):
        @L.no_grad()
        def f(x):
            return x * 2, L.is_grad_enabled()

        @L.no_grad
        def bare():
            return L.is_grad_enabled()

        @L.enable_grad()
        def g(x):
            return x * 2

        @L.set_grad_enabled(False)
        def h(x):
            return x * 2

        x = L.ones(3, requires_grad=True)
        y, mode = f(x)
        with L.no_grad():
            z = g(x)
        return y.requires_grad, mode, bare(), z.requires_grad, h(x).requires_grad, \
            L.is_grad_enabled()
    parity(make)


def test_set_grad_enabled_call_and_context():
    def make(L):
        x = L.ones(3, requires_grad=True)
        L.set_grad_enabled(False)
        a = (x * 2).requires_grad
        L.set_grad_enabled(True)
        with L.set_grad_enabled(False):
            b = (x * 2).requires_grad
            with L.set_grad_enabled(True):
                c = (x * 2).requires_grad
        return a, b, c, L.is_grad_enabled()
    parity(make)


def test_set_grad_enabled_rejects_non_bool():
    with pytest.raises(TypeError):
        torch.set_grad_enabled(1)
    with pytest.raises(TypeError):
        ca.set_grad_enabled(1)
    assert ca.is_grad_enabled()


def test_inference_mode():
    def make(L):
        x = L.ones(3, requires_grad=True)
        with L.inference_mode():
            y = x * 2
            inner = L.is_grad_enabled(), L.is_inference_mode_enabled()
            with L.inference_mode(False):
                off = L.is_grad_enabled(), L.is_inference_mode_enabled()
        @L.inference_mode()
        def f(t):
            return t * 2
        return y.requires_grad, inner, off, f(x).requires_grad, L.is_inference_mode_enabled()
    parity(make)


def test_grad_mode_is_per_thread():
    def make(L):
        seen = []
        with L.no_grad():
            t = threading.Thread(target=lambda: seen.append(L.is_grad_enabled()))
            t.start()
            t.join()
        return seen
    parity(make)


def test_autograd_grad_mode_module():
    def make(L):
        gm = L.autograd.grad_mode
        with L.autograd.set_multithreading_enabled(False):
            pass
        return (gm.no_grad is L.no_grad, gm.enable_grad is L.enable_grad,
                gm.set_grad_enabled is L.set_grad_enabled,
                gm.inference_mode is L.inference_mode,
                L.autograd.inference_mode is L.inference_mode)
    parity(make)


# ---------------------------------------------------------------------------------------
# requires_grad and leaves
# ---------------------------------------------------------------------------------------
def test_requires_grad_and_leaves():
    def make(L):
        x = L.randn(2, requires_grad=True)
        z = L.randn(2)
        y, w = x * 2, z * 2
        r = z.requires_grad_()
        return (r is z, x.is_leaf, y.is_leaf, w.is_leaf, y.requires_grad, (x + z).requires_grad,
                x.detach().is_leaf, x.grad_fn is None, y.requires_grad_(True) is y)
    parity(make)


@pytest.mark.parametrize("case", ["nonleaf_false", "int_dtype", "attr_non_bool", "method_non_bool",
                                  "delete"])
def test_requires_grad_errors(case):
    def make(L):
        x = L.ones(2, requires_grad=True)
        if case == "nonleaf_false":
            (x * 2).requires_grad_(False)
        elif case == "int_dtype":
            L.ones(2, dtype=L.long).requires_grad_()
        elif case == "attr_non_bool":
            x.requires_grad = 1
        elif case == "method_non_bool":
            x.requires_grad_(1)
        else:
            del x.requires_grad
    parity(make)


def test_requires_grad_factories():
    def make(L):
        out = [f(2, 3, requires_grad=True).requires_grad for f in (L.randn, L.ones, L.zeros,
                                                                    L.rand, L.empty)]
        return out + [L.full((2,), 1.0, requires_grad=True).is_leaf,
                      L.arange(3.0, requires_grad=True).requires_grad,
                      L.zeros_like(L.ones(2), requires_grad=True).requires_grad]
    parity(make)


@pytest.mark.parametrize("attr", ["grad_fn", "is_leaf"])
def test_graph_attributes_are_read_only(attr):
    x = ca.ones(2, requires_grad=True) * 2
    with pytest.raises(AttributeError):
        setattr(x, attr, None)
    with pytest.raises(AttributeError):
        setattr(torch.ones(2, requires_grad=True) * 2, attr, None)


# ---------------------------------------------------------------------------------------
# .grad
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("value", ["wrong_shape", "wrong_dtype", "int_dtype", "not_tensor",
                                   "itself"])
def test_grad_setter_errors(value):
    def make(L):
        x = L.ones(3, requires_grad=True)
        x.grad = {"wrong_shape": lambda: L.ones(4),
                  "wrong_dtype": lambda: L.ones(3, dtype=L.float64),
                  "int_dtype": lambda: L.ones(3, dtype=L.long),
                  "not_tensor": lambda: 3, "itself": lambda: x}[value]()
    parity(make)


@MODES
def test_grad_setter_then_accumulate_and_delete(mode):
    def make(L):
        x = L.ones(3, requires_grad=True)
        x.grad = L.full((3,), 2.0)
        (x * x).sum().backward()
        first = x.grad.clone()
        del x.grad
        cleared = x.grad
        x.grad = None
        return first, cleared
    parity(make, mode)


def test_reading_grad_of_non_leaf_warns():
    def make(L):
        x = L.ones(3, requires_grad=True)
        y = x * 2
        leaf = warning_categories(lambda: x.grad)
        non_leaf = warning_categories(lambda: y.grad)
        y.retain_grad()
        retained = warning_categories(lambda: y.grad)
        return leaf, non_leaf, retained
    parity(make)


def _accumulate_twice(L, create_graph):
    x = data(L, (5, 5), "float64", requires_grad=True)
    y = x + 2
    y.backward(L.ones(5, 5), retain_graph=True)
    first, first_copy = x.grad, x.grad.clone()
    y.backward(L.ones(5, 5), create_graph=create_graph)
    return first, first_copy, x.grad is first, x.grad


def _assigned_then_backward(L, create_graph):
    p = L.tensor([1.5, 1.5]).requires_grad_()
    p.grad = L.tensor([1.5, 1.5])
    saved = p.grad
    p.backward(L.tensor([1.5, 1.5]), create_graph=create_graph)
    return saved is p.grad, p.grad


@MODES
def test_accumulate_in_place(mode):
    parity(lambda L: _accumulate_twice(L, False), mode)
    parity(lambda L: _assigned_then_backward(L, False), mode)


@MODES
def test_accumulate_out_of_place_under_create_graph(mode):
    # torch makes a new tensor (grad + new) whenever create_graph=True
    parity(lambda L: _accumulate_twice(L, True), mode)
    parity(lambda L: _assigned_then_backward(L, True), mode)


@MODES
def test_zero_numel_gradients(mode):
    def make(L):
        a = L.rand(4, 0, requires_grad=True)
        b = L.rand(4, 1, requires_grad=True)
        (a + b).sum().backward()
        return a.grad, b.grad
    parity(make, mode)


@MODES
def test_grad_keeps_the_leafs_dtype(mode):
    def make(L):
        x = L.ones(2, requires_grad=True, dtype=L.float64)
        (x.float() * 2).sum().backward()
        return x.grad
    parity(make, mode)


# ---------------------------------------------------------------------------------------
# backward()
# ---------------------------------------------------------------------------------------
@MODES
@pytest.mark.parametrize("case", ["twice", "retained", "no_saved_values"])
def test_backward_twice(mode, case):
    def make(L):
        x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
        y = (x + 1).sum() if case == "no_saved_values" else (x * x).sum()
        y.backward(retain_graph=case == "retained")
        y.backward()
        return x.grad
    parity(make, mode)


@MODES
@pytest.mark.parametrize("case", ["non_scalar", "no_grad_output", "gradient_shape",
                                  "gradient_not_tensor"])
def test_backward_bad_calls(mode, case):
    def make(L):
        x = L.ones(2, 2, requires_grad=True)
        if case == "non_scalar":
            (x * 2).backward()
        elif case == "no_grad_output":
            L.ones(1).backward()
        elif case == "gradient_shape":
            (x * 2).backward(L.ones(3))
        else:
            L.autograd.backward((x * 2).sum(), grad_tensors=[3])
    parity(make, mode)


@MODES
@DTYPES
def test_backward_converts_the_gradients_dtype(mode, dt):
    def make(L):
        x = data(L, (3,), dt, requires_grad=True)
        other = "float64" if dt == "float32" else "float32"
        (x * x).backward(data(L, (3,), other, seed=1))
        return x.grad
    parity(make, mode)


@MODES
def test_backward_inputs(mode):
    def make(L):
        x = L.ones(3, requires_grad=True)
        w = L.ones(3, requires_grad=True)
        (x * w * 2).sum().backward(inputs=[x])
        y = x * 3
        (y * y).sum().backward(inputs=[y, w])
        (x * 2).sum().backward(inputs=x)
        return x.grad, w.grad, y.grad
    parity(make, mode)


def test_backward_empty_inputs_is_an_error():
    parity(lambda L: (L.ones(3, requires_grad=True) * 2).sum().backward(inputs=[]))


@MODES
def test_autograd_backward_several_roots(mode):
    def make(L):
        x = data(L, (3,), requires_grad=True)
        L.autograd.backward([(x * 2).sum(), (x * x).sum()])
        L.autograd.backward([x * 2, x * 3], [L.ones(3), L.full((3,), 2.0)])
        return x.grad
    parity(make, mode)


def test_autograd_backward_too_few_gradients():
    parity(lambda L: L.autograd.backward([L.ones(2, requires_grad=True) * 2] * 2,
                                         grad_tensors=[L.ones(2)]))


@MODES
def test_hessian_vector_product_through_backward(mode):
    def make(L):
        x = data(L, (2, 2), "float64", requires_grad=True)
        y = data(L, (2, 2), "float64", seed=1, requires_grad=True)
        z = x ** 2 + y * x + y ** 2
        z.backward(L.ones(2, 2), create_graph=True)
        first = x.grad.detach().clone(), y.grad.detach().clone()
        (2 * x.grad + y.grad).backward(L.ones(2, 2))
        return first, x.grad, y.grad
    parity(make, mode)


@MODES
def test_sharded_grad_then_backward(mode):
    def make(L):
        leaves = [L.zeros(5, 5, requires_grad=True) for _ in range(4)]
        inter = [leaf * i + leaf * leaf for i, leaf in enumerate(leaves)]
        loss = sum(v * i for i, v in enumerate(inter)).sum()
        d = [g for k in range(0, 4, 2)
             for g in L.autograd.grad(loss, inter[k:k + 2], retain_graph=True)]
        L.autograd.backward(inter, d)
        return [leaf.grad for leaf in leaves]
    parity(make, mode)


# ---------------------------------------------------------------------------------------
# autograd.grad()
# ---------------------------------------------------------------------------------------
@MODES
@DTYPES
def test_grad_returns_gradients_and_leaves_grad_alone(mode, dt):
    def make(L):
        x = data(L, (2, 2), dt, requires_grad=True)
        y = data(L, (2, 2), dt, seed=1, requires_grad=True)
        z = x ** 2 + y * x + y ** 2
        gx, gy = L.autograd.grad(z, (x, y), grad_outputs=L.ones(2, 2))
        return gx, gy, x.grad, y.grad
    parity(make, mode)


@MODES
@pytest.mark.parametrize("case", ["unused", "input_without_grad", "output_without_grad",
                                  "shape", "implicit", "empty_inputs", "too_few_gradients",
                                  "materialize_and_not_allow_unused",
                                  "twice"])
def test_grad_errors(mode, case):
    def make(L):
        x = L.ones(2, 2, requires_grad=True)
        y = L.ones(2, 2, requires_grad=True)
        if case == "unused":
            L.autograd.grad((x * 2).sum(), [x, y])
        elif case == "input_without_grad":
            L.autograd.grad((x * 2).sum(), [x, L.ones(2)])
        elif case == "output_without_grad":
            L.autograd.grad(L.ones(1) ** 2, x)
        elif case == "shape":
            L.autograd.grad(x * 2, x, grad_outputs=L.ones(2))
        elif case == "implicit":
            L.autograd.grad(x * 2, x)
        elif case == "empty_inputs":
            L.autograd.grad((x * 2).sum(), [])
        elif case == "too_few_gradients":
            L.autograd.grad([x * 2, x * 3], x, grad_outputs=[L.ones(2, 2)])
        elif case == "materialize_and_not_allow_unused":
            L.autograd.grad((x * 2).sum(), x, allow_unused=False, materialize_grads=True)
        else:
            z = (x * x).sum()
            L.autograd.grad(z, x)
            L.autograd.grad(z, x)
    parity(make, mode)


def test_grad_shape_mismatch_message_names_both_shapes():
    x = ca.ones(2, 2, requires_grad=True)
    grad_out = ca.ones(2)
    with pytest.raises(RuntimeError) as info:
        ca.autograd.grad([x * 2], [x], grad_outputs=[grad_out])
    assert str(info.value) == (f"Mismatch in shape: grad_output[0] has a shape of "
                               f"{grad_out.shape} and output[0] has a shape of {x.shape}.")


@MODES
def test_grad_allow_unused_and_materialize(mode):
    def make(L):
        x = L.tensor(0.5, requires_grad=True)
        a = L.tensor(1.0, requires_grad=True)
        z = L.ones(1, requires_grad=True)
        d1, = L.autograd.grad(x * a, x, create_graph=True)
        none, = L.autograd.grad(d1, x, create_graph=True, allow_unused=True)
        zero, = L.autograd.grad(d1, x, create_graph=True, materialize_grads=True)
        gx, gz = L.autograd.grad((x * 2).sum(), [x, z], materialize_grads=True)
        return none, zero, zero.requires_grad, gx, gz, gz.requires_grad
    parity(make, mode)


@MODES
def test_grad_outputs_entries_and_dict_inputs(mode):
    def make(L):
        x = data(L, (2,), requires_grad=True)
        a = L.autograd.grad([(x * 2).sum(), x * 3], x, grad_outputs=[None, L.ones(2)])
        b = L.autograd.grad([x * 2, x * x], [x], grad_outputs=[L.ones(2), L.ones(2)])
        c = L.autograd.grad((x * x).sum(), {"x": x})
        return a, b, c
    parity(make, mode)


def test_grad_only_inputs_false_is_deprecated():
    def make(L):
        x = L.ones(2, requires_grad=True)
        return warning_categories(lambda: L.autograd.grad((x * 2).sum(), x, only_inputs=False))
    parity(make)


@MODES
def test_grad_is_grads_batched(mode):
    def make(L):
        x = L.ones(2, 2, requires_grad=True)
        batched = L.arange(3).expand(2, 2, 3).transpose(0, 2)
        g, = L.autograd.grad(x.clone() * 3, (x,), (batched,), is_grads_batched=True)
        s, = L.autograd.grad(x.sum(), (x,), (L.arange(3.0),), is_grads_batched=True)
        return g, s
    parity(make, mode)


@pytest.mark.parametrize("shape", [(2, 2), (2, 1)])
def test_grad_is_grads_batched_shape_error(shape):
    def make(L):
        x = L.ones(2, 2, requires_grad=True)
        out = x.clone() if shape == (2, 2) else x.sum()
        L.autograd.grad(out, (x,), (L.ones(*shape),), is_grads_batched=True)
    parity(make)


@MODES
def test_grad_of_non_leaves(mode):
    def make(L):
        x = data(L, (4, 2), requires_grad=True)
        a, b = x.chunk(2)
        called = []
        x.register_hook(lambda g: called.append(1))
        go = data(L, (2, 2), seed=3)
        ga, gb = L.autograd.grad(a + 2 * b, [a, b], grad_outputs=go, create_graph=True)
        return ga, gb, called, x.grad
    parity(make, mode)


@MODES
def test_grad_nonleaf_steps_then_backward(mode):
    def make(L):
        x0 = data(L, (2, 2), "float64", requires_grad=True)
        y = data(L, (2, 2), "float64", seed=1, requires_grad=True)
        x = x0
        for _ in range(3):
            gx, = L.autograd.grad(x ** 2 + y * x + y ** 2, x, grad_outputs=L.ones(2, 2),
                                  create_graph=True)
            x = x + 0.05 * gx
        x.backward(L.ones(2, 2))
        return x, y.grad, x0.grad
    parity(make, mode)


@MODES
@DTYPES
def test_double_backward(mode, dt):
    def make(L):
        x = data(L, (3,), dt, requires_grad=True)
        g, = L.autograd.grad((x ** 3).sum(), x, create_graph=True)
        g2, = L.autograd.grad(g.sum(), x)
        return g, g2, g.requires_grad
    parity(make, mode)
