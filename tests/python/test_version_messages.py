"""The version-counter error names the changed tensor's node as PyTorch does
(", which is output 0 of Mul,"): the node of the in-place op that changed it in the graph,
else its grad_fn when it was saved, or the saving node itself for a saved output; a leaf
gets no such clause. The message is compared with torch 2.13's, eager and compiled."""

import pytest

from autograd_port_helpers import parity

MODES = ["eager", "compiled"]


def _backward(y):
    y.sum().backward()


@pytest.mark.parametrize("mode", MODES)
def test_a_leaf_input_changed_in_place(mode):
    def make(L):
        w = L.ones(3, requires_grad=True)
        x = L.ones(3)
        y = x * w
        x.add_(1)
        _backward(y)
    parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_non_leaf_input_changed_in_the_graph_names_the_in_place_op(mode):
    def make(L):
        w = L.ones(3, requires_grad=True)
        x = w * 2
        y = x * w
        x.add_(1)
        _backward(y)
    parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_non_leaf_input_changed_without_grad_names_its_grad_fn(mode):
    def make(L):
        w = L.ones(3, requires_grad=True)
        x = w * 2
        y = x * w
        with L.no_grad():
            x.mul_(3)
        _backward(y)
    parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_saved_output_names_the_saving_node(mode):
    def make(L):
        a = L.ones(3, requires_grad=True)
        b = (a * 1).exp()
        b.mul_(2)
        _backward(b)
    parity(make, mode)


def test_a_double_type_is_named():
    def make(L):
        w = L.ones(2, 3, dtype=L.float64, requires_grad=True)
        x = w.sin()
        y = x * w
        with L.no_grad():
            x.zero_()
        _backward(y)
    parity(make)


@pytest.mark.parametrize("op", ["add_", "mul_", "sub_", "div_", "copy_", "zero_", "fill_",
                                "clamp_", "relu_", "exp_", "neg_", "sigmoid_"])
def test_an_in_place_op_on_a_leaf_that_requires_grad(op):
    def make(L):
        w = L.ones(3, requires_grad=True)
        args = {"add_": (1.0,), "mul_": (2.0,), "sub_": (1.0,), "div_": (2.0,),
                "copy_": (L.zeros(3),), "fill_": (0.5,), "clamp_": (0.0,)}.get(op, ())
        getattr(w, op)(*args)
    parity(make)


def _dirty_function(L, change):
    class F(L.autograd.Function):
        @staticmethod
        def forward(ctx, a):
            if change:
                a.mul_(2)
            ctx.mark_dirty(a)
            return a

        @staticmethod
        def backward(ctx, g):
            return g * 2
    return F


@pytest.mark.parametrize("change", [True, False])
@pytest.mark.parametrize("case", ["recorded", "input_without_grad", "no_grad_mode"])
def test_mark_dirty_moves_the_version_on(case, change):
    def make(L):
        F = _dirty_function(L, change)
        if case == "input_without_grad":
            y = L.tensor([1.0, 2.0])
            return F.apply(y)._version
        y = L.tensor([1.0, 2.0], requires_grad=True).clone()
        if case == "no_grad_mode":
            with L.no_grad():
                return F.apply(y)._version
        out = F.apply(y)
        out.sum().backward()
        return out._version
    parity(make)


def test_detach_in_place_cuts_a_non_leaf_from_its_graph():
    def make(L):
        a = L.ones(2, 3, requires_grad=True)
        y = a * 2
        same = y.detach_() is y
        z = a * 3
        v = z.view(6)  # a base with a view detaches; the view keeps its history
        z.detach_()
        w = a * 4
        w.retain_grad()
        w.detach_()
        return (same, y.requires_grad, y.grad_fn is None, y.is_leaf, y._version,
                z.requires_grad, v.grad_fn is not None, w.retains_grad)
    parity(make)


@pytest.mark.parametrize("view", ["select", "view", "transpose"])
def test_detach_in_place_refuses_a_view(view):
    def make(L):
        y = L.ones(2, 3, requires_grad=True) * 2
        v = {"select": lambda: y[0], "view": lambda: y.view(3, 2),
             "transpose": lambda: y.t()}[view]()
        v.detach_()
    parity(make)
