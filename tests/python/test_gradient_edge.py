"""GradientEdges (torch.autograd.graph.get_gradient_edge) as the inputs and outputs of
autograd.grad, compared with torch 2.13, eager and compiled."""

import pytest

from autograd_port_helpers import data, parity

MODES = ["eager", "compiled"]


@pytest.mark.parametrize("mode", MODES)
def test_grad_with_respect_to_an_edge(mode):
    def make(L):
        x = data(L, (2, 3), seed=1, requires_grad=True)
        y = x * 2
        edge = L.autograd.graph.get_gradient_edge(y)
        return L.autograd.grad((y * y).sum(), edge)
    parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_edges_and_tensors_mixed_as_inputs(mode):
    def make(L):
        x = data(L, (3,), seed=1, requires_grad=True)
        w = data(L, (3,), seed=2, requires_grad=True)
        h = (x * w).tanh()
        loss = (h * h).sum() + w.sum()
        return L.autograd.grad(loss, [L.autograd.graph.get_gradient_edge(h), w, x])
    parity(make, mode)


def test_a_leafs_edge_is_the_leaf():
    def make(L):
        x = data(L, (3,), seed=1, requires_grad=True)
        edge = L.autograd.graph.get_gradient_edge(x)
        return L.autograd.grad((x.exp()).sum(), [edge])
    parity(make)


def test_an_edge_as_the_output_with_its_gradient():
    def make(L):
        x = data(L, (3,), seed=1, requires_grad=True)
        y = x.sin()
        z = y * 3  # the graph goes on past y; grad starts at y's edge
        edge = L.autograd.graph.get_gradient_edge(y)
        return L.autograd.grad(edge, x, grad_outputs=L.ones(3)), z.requires_grad
    parity(make)


def test_an_edge_of_a_custom_function():
    def make(L):
        class Double(L.autograd.Function):
            @staticmethod
            def forward(ctx, a):
                return a * 2

            @staticmethod
            def backward(ctx, g):
                return g * 2

        x = data(L, (3,), seed=1, requires_grad=True)
        y = Double.apply(x)
        return L.autograd.grad((y * y).sum(), L.autograd.graph.get_gradient_edge(y))
    parity(make)
