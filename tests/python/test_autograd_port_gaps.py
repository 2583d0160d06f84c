"""The test_autograd port's known gaps: strict xfails, each comparing cagrad with torch
through autograd_port_helpers.parity, so a fix shows up as an XPASS (then turn the test
into a plain one). Each needs the C library."""

import pytest

from autograd_port_helpers import parity
from helpers import ca


# ---------------------------------------------------------------------------------------
# gaps that need the C library: strict xfails, so a fix shows up as XPASS
# ---------------------------------------------------------------------------------------
def _c_gap(reason):
    return pytest.mark.xfail(strict=True, reason="C gap: " + reason)


def test_clone_and_conversion_node_names():
    def make(L):
        x = L.ones(3, requires_grad=True)
        return (x.clone().grad_fn.name(), x.double().grad_fn.name(),
                x.clone().clone().grad_fn.next_functions[0][0].name())
    parity(make)


@_c_gap("a 1-D matmul records SqueezeBackward0 (torch: DotBackward0); var_mean is "
        "composite (no VarMeanBackward0)")
def test_gap_node_names():
    def make(L):
        x = L.ones(3, requires_grad=True)
        var, mean = L.var_mean(x.view(3, 1), dim=0)
        return (x @ x).grad_fn.name(), var.grad_fn.name()
    parity(make)


@pytest.mark.parametrize("mode", ["eager", "compiled"])
def test_grad_skips_hooks_of_nodes_it_does_not_execute(mode):
    # grad() captures at its inputs' nodes without running them: their node pre-hooks, and
    # those of AccumulateGrad nodes, do not run; a node that runs on the way does
    def make(L):
        a = L.tensor(1.0, requires_grad=True)
        b = a * 2
        c = b * 2
        counts = []
        b.grad_fn.register_prehook(lambda g: counts.append("b"))
        b.grad_fn.next_functions[0][0].register_prehook(lambda g: counts.append("acc"))
        g1 = L.autograd.grad(c, inputs=(b,), retain_graph=True)
        g2 = L.autograd.grad(c, inputs=(a,))
        return counts, g1, g2
    parity(make, mode)


@_c_gap("a node hook removed during a backward stops at once (torch still runs it in "
        "that backward)")
def test_gap_hook_removed_during_backward():
    def make(L):
        a = L.rand(3, requires_grad=True)
        b = a * 2
        counter = [0]
        b.grad_fn.register_prehook(lambda go: handle.remove())
        handle = b.grad_fn.register_prehook(lambda go: counter.append(1))
        b.sum().backward()
        return len(counter)
    parity(make)


def test_gaps_are_not_fake_successes():
    # an unsupported form raises an error that names it, rather than doing something else
    with pytest.raises(NotImplementedError, match="vmap"):
        ca.autograd.Function.vmap(None, (0,), ca.ones(2))
