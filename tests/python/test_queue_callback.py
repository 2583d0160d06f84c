"""torch.autograd.Variable and Variable._execution_engine.queue_callback: a callback queued
during a backward runs once it has finished (every .grad accumulated), before backward()
returns; eager and compiled, backward() and autograd.grad(); against torch 2.13."""

import pytest
import torch

import cagrad as ca


def run(lib, how, compiled=False):
    """Queue a callback from a tensor hook; return what the callback saw and the order."""
    events = []
    w = lib.tensor([1.0, 2.0, 3.0], requires_grad=True)
    b = lib.tensor([0.5], requires_grad=True)
    h = (w * 2).sum() * b

    def later():
        events.append(("callback", None if w.grad is None else w.grad.tolist(),
                       None if b.grad is None else b.grad.tolist()))
        lib.autograd.Variable._execution_engine.queue_callback(
            lambda: events.append(("queued by a callback",)))

    def hook(grad):
        events.append(("hook",))
        lib.autograd.Variable._execution_engine.queue_callback(later)
    h.register_hook(hook)
    ctx = lib.compiled_autograd.enable() if compiled and lib is ca else _null()
    with ctx:
        if how == "backward":
            h.backward()
        elif how == "autograd.backward":
            lib.autograd.backward([h])
        else:
            grads = lib.autograd.grad(h, (w, b))
            events.append(("grad returned", [g.tolist() for g in grads]))
    events.append(("returned",))
    return events


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


@pytest.mark.parametrize("how", ["backward", "autograd.backward", "autograd.grad"])
@pytest.mark.parametrize("compiled", [False, True])
def test_callback_runs_when_the_backward_ends(how, compiled):
    assert run(ca, how, compiled) == run(torch, how)


def test_outside_a_backward_is_an_error_as_torch():
    for lib in (torch, ca):
        with pytest.raises(RuntimeError, match="Final callbacks can only be installed during "
                                               "backward pass."):
            lib.autograd.Variable._execution_engine.queue_callback(lambda: None)


def test_a_failed_backward_drops_its_callbacks():
    for lib in (torch, ca):
        ran = []
        x = lib.tensor([1.0], requires_grad=True)
        y = x * 3

        def hook(grad):
            lib.autograd.Variable._execution_engine.queue_callback(lambda: ran.append(1))
            raise ValueError("hook fails")
        y.register_hook(hook)
        with pytest.raises(ValueError, match="hook fails"):
            y.sum().backward()
        assert ran == []
        with pytest.raises(RuntimeError, match="Final callbacks"):  # nothing left open
            lib.autograd.Variable._execution_engine.queue_callback(lambda: None)


def test_variable_is_the_legacy_tensor_name():
    for lib in (torch, ca):
        t = lib.ones(2)
        assert isinstance(t, lib.autograd.Variable)
        assert not isinstance(3, lib.autograd.Variable)
        v = lib.autograd.Variable(t, requires_grad=True)
        assert v.requires_grad and v.is_leaf and v.tolist() == [1.0, 1.0]
