"""Calling a node, grad_fn(grad): its derivative rule on the output's gradient, compared
with torch 2.13 (values, which inputs get None, differentiability of the results, errors)."""

import pytest

from autograd_port_helpers import data, parity


def _x(L, shape=(3,)):
    return data(L, shape, seed=1, requires_grad=True)


def _w(L, shape=(3,)):
    return data(L, shape, seed=2, low=0.5, high=1.5, requires_grad=True)


CASES = {
    "pow": lambda L: ((_x(L) ** 2), L.ones(3)),
    "mul": lambda L: (_x(L) * _w(L), data(L, (3,), seed=3)),
    "mul_scalar": lambda L: (_x(L) * 2, L.ones(3)),
    "mul_constant": lambda L: (_x(L) * data(L, (3,), seed=4), L.ones(3)),
    "exp": lambda L: (_x(L).exp(), data(L, (3,), seed=3)),
    "mm": lambda L: (_x(L, (2, 3)) @ _w(L, (3, 2)), data(L, (2, 2), seed=3)),
    "sum": lambda L: (_x(L, (2, 3)).sum(1), data(L, (2,), seed=3)),
    "softmax": lambda L: (_x(L, (2, 3)).softmax(-1), data(L, (2, 3), seed=3)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_calling_a_node_runs_its_rule(case):
    def make(L):
        y, g = CASES[case](L)
        return y.grad_fn(g)
    parity(make)


def test_the_results_are_differentiable_under_grad_mode():
    def make(L):
        x = _x(L)
        w = _w(L)
        gx, gw = (x * w).grad_fn(L.ones(3))
        (gx.sum() + (gw * gw).sum()).backward()
        return gx.requires_grad, x.grad, w.grad
    parity(make)


def test_under_no_grad_the_results_have_no_history():
    def make(L):
        x = _x(L)
        y = x.exp()
        with L.no_grad():
            g = y.grad_fn(L.ones(3))
        return g.requires_grad, g
    parity(make)


def test_a_node_whose_saved_values_were_freed():
    def make(L):
        x = _x(L)
        y = x * _w(L)
        y.sum().backward()
        return y.grad_fn(L.ones(3))
    parity(make)


def test_a_gradient_of_the_wrong_shape_is_an_error():
    def call(L):
        y = _x(L).exp()
        return y.grad_fn(L.ones(4))
    import cagrad
    with pytest.raises(RuntimeError, match="shape"):
        call(cagrad)
