"""grad_fn._saved_<name>: a built-in node's saved values by PyTorch's names, compared with
torch 2.13 (tensors by value, numbers and dim lists as they are)."""

import pytest

from autograd_port_helpers import data, parity

# (label, make(L) -> (node, [names]))
CASES = {
    "mul": lambda L: ((_x(L) * _w(L)).grad_fn, ["self", "other"]),
    "div": lambda L: ((_x(L) / _w(L)).grad_fn, ["self", "other"]),
    "pow_scalar": lambda L: (_x(L).pow(3).grad_fn, ["self", "exponent"]),
    "pow_tensor": lambda L: (_x(L).abs().pow(_w(L)).grad_fn, ["exponent", "result"]),
    "exp": lambda L: (_x(L).exp().grad_fn, ["result"]),
    "sigmoid": lambda L: (_x(L).sigmoid().grad_fn, ["result"]),
    "tanh": lambda L: (_x(L).tanh().grad_fn, ["result"]),
    "sin": lambda L: (_x(L).sin().grad_fn, ["self"]),
    "log": lambda L: (_x(L).abs().log().grad_fn, ["self"]),
    "mm": lambda L: ((_x(L, (2, 3)) @ _w(L, (3, 4))).grad_fn, ["self"]),
    "softmax": lambda L: (_x(L, (2, 3)).softmax(1).grad_fn, ["dim", "result"]),
    "clamp_min": lambda L: (_x(L).clamp(min=0.25).grad_fn, ["self"]),
}


def _x(L, shape=(4,)):
    return data(L, shape, seed=1, requires_grad=True)


def _w(L, shape=(4,)):
    return data(L, shape, seed=2, low=0.5, high=1.5, requires_grad=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_saved_values_match_torch(case):
    def make(L):
        node, names = CASES[case](L)
        return [getattr(node, "_saved_" + n) for n in names]
    parity(make)


def test_a_saved_value_after_backward_is_freed():
    def make(L):
        x = _x(L)
        y = x * _w(L)
        y.sum().backward()
        return y.grad_fn._saved_self
    parity(make)


def test_a_saved_value_changed_in_place_gives_the_version_error():
    def make(L):
        w = _w(L)
        x = w * 2
        y = x * w
        with L.no_grad():
            x.mul_(2)
        return y.grad_fn._saved_self
    parity(make)


def test_retain_graph_keeps_saved_values():
    def make(L):
        x = _x(L)
        y = x * _w(L)
        y.sum().backward(retain_graph=True)
        return y.grad_fn._saved_other
    parity(make)


def test_an_unknown_saved_name_is_an_attribute_error():
    def make(L):
        node = (_x(L) * 2.0).exp().grad_fn
        return hasattr(node, "_saved_nothing"), hasattr(node, "_saved_result")
    parity(make)


def test_saved_values_go_through_saved_tensor_hooks():
    def make(L):
        x = _x(L)
        with L.autograd.graph.saved_tensors_hooks(lambda t: t * 10, lambda t: t + 1):
            y = x.exp()
        return y.grad_fn._saved_result
    parity(make)
