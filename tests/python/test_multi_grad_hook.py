"""torch.autograd.graph.register_multi_grad_hook (modes "all" and "any"), eager and under
compiled autograd, against torch 2.13: which calls happen, with which gradients."""

import contextlib

import numpy as np
import pytest
import torch

import cagrad as ca

from helpers import assert_close, counters


def _listed(grads):
    return [None if g is None else g.tolist() for g in grads]


def _ctx(lib, compiled):
    return ca.compiled_autograd.enable() if compiled and lib is ca else contextlib.nullcontext()


def _leaves(lib, dtype):
    kind = getattr(lib, dtype)
    return [lib.tensor(v, dtype=kind, requires_grad=True)
            for v in ([1.0, 2.0], [3.0, -1.0], [0.5, 4.0], [2.0, 2.0])]


def docstring_example(lib, dtype, compiled):
    """torch's own example: a * b twice, backward over one product, then with inputs=."""
    calls = []
    a, b = _leaves(lib, dtype)[:2]
    c, d = a * b, a * b
    lib.autograd.graph.register_multi_grad_hook((a, b, c, d), lambda g: calls.append(_listed(g)))
    with _ctx(lib, compiled):
        (c * c).sum().backward(retain_graph=True)
        (c * c).sum().backward(inputs=(a,), retain_graph=True)
    return calls


def inputs_pick_tensors(lib, dtype, compiled):
    """torch's test: only the tensors on the way to backward's inputs count; a backward
    that reaches none of them calls nothing."""
    calls = []
    t1, t2, t3, t4 = _leaves(lib, dtype)
    lib.autograd.graph.register_multi_grad_hook((t1, t2, t3, t4),
                                                lambda g: calls.append(_listed(g)))
    out = (t2 * t3).sum()
    with _ctx(lib, compiled):
        out.backward(inputs=(t2, t3), retain_graph=True)
        calls.append("after first")
        out.backward(inputs=(t1, t4), retain_graph=True)
        calls.append("after second")
        out.backward(inputs=(t1, t3), retain_graph=True)
    return calls


def through_autograd_grad(lib, dtype, compiled):
    """autograd.grad over non-leaf tensors (torch refuses leaves under "all" mode in
    autograd.grad; cagrad takes them)."""
    calls = []
    t1, t2, t3, _ = _leaves(lib, dtype)
    mid, off_path = t1 * t2, t3 * 2
    lib.autograd.graph.register_multi_grad_hook((mid, off_path),
                                                lambda g: calls.append(_listed(g)))
    with _ctx(lib, compiled):
        grads = lib.autograd.grad((mid * mid).sum(), (t1, t2))
    calls.append(_listed(grads))
    return calls


def runs_before_backward_returns(lib, dtype, compiled):
    """One call per backward (retain_graph: twice), before backward() returns; the
    gradients are not changed by the hook."""
    events = []
    t1, t2, _, _ = _leaves(lib, dtype)
    y = t1 * t2
    lib.autograd.graph.register_multi_grad_hook((t1, y), lambda g: events.append(_listed(g)))
    loss = (y * y).sum()
    with _ctx(lib, compiled):
        loss.backward(retain_graph=True)
        events.append(("returned", t1.grad.tolist(), t2.grad.tolist()))
        loss.backward()
        events.append(("returned", t1.grad.tolist(), t2.grad.tolist()))
    return events


def custom_function(lib, dtype, compiled):
    class Twice(lib.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, grad):
            return grad * 2

    calls = []
    t1, t2, t3, t4 = _leaves(lib, dtype)
    lib.autograd.graph.register_multi_grad_hook((t1, t2, t3, t4),
                                                lambda g: calls.append(_listed(g)))
    out = Twice.apply(t2) * t3
    with _ctx(lib, compiled):
        out.sum().backward(inputs=(t2, t3))
    return calls


def removed(lib, dtype, compiled):
    calls = []
    t1, t2, _, _ = _leaves(lib, dtype)
    handle = lib.autograd.graph.register_multi_grad_hook((t1, t2),
                                                         lambda g: calls.append(_listed(g)))
    loss = (t1 * t2).sum()
    with _ctx(lib, compiled):
        loss.backward(retain_graph=True)
        handle.remove()
        loss.backward()
    return calls, t1.grad.tolist()


def any_mode(lib, dtype, compiled):
    """mode "any": the first gradient computed (b's, before a's in this chain), once per
    backward."""
    calls = []
    a = _leaves(lib, dtype)[0]
    b = a * 2
    unused = lib.tensor([1.0], dtype=getattr(lib, dtype))  # needs no grad: skipped
    lib.autograd.graph.register_multi_grad_hook((a, b, unused), lambda g: calls.append(g.tolist()),
                                                mode="any")
    loss = (b * 3).sum()
    with _ctx(lib, compiled):
        loss.backward(retain_graph=True)
        loss.backward(inputs=(a,))
    return calls, a.grad.tolist()


def _chain(lib, dtype, events):
    """a -> b -> c -> loss, with d off the path; each tensor's own hook logs its turn."""
    a = _leaves(lib, dtype)[0]
    b = a * 2
    c = b * 3
    d = a * 5
    for name, t in (("a", a), ("b", b), ("c", c), ("d", d)):
        t.register_hook(lambda g, name=name: events.append(name))
    return a, b, c, d, (c * c).sum()


def _run_backward(lib, how, loss, a, b):
    if how == "autograd.backward":
        lib.autograd.backward(loss)
    elif how == "backward(inputs=b)":
        loss.backward(inputs=(b,))
    elif how == "autograd.grad":
        lib.autograd.grad(loss, (b,))
    else:  # several roots: one backward through their sum
        lib.autograd.backward([loss, (b * 1.5).sum()])


def fires_after_the_last_gradient(lib, dtype, compiled, how="autograd.backward",
                                  hooked="bcd"):
    """fn runs right after the last hooked tensor on the backward's path has its gradient,
    before the nodes further down run (torch's timing)."""
    events = []
    a, b, c, d, loss = _chain(lib, dtype, events)
    tensors = dict(a=a, b=b, c=c, d=d)
    lib.autograd.graph.register_multi_grad_hook(
        [tensors[name] for name in hooked], lambda g: events.append(("fn", _listed(g))))
    with _ctx(lib, compiled):
        _run_backward(lib, how, loss, a, b)
    return events


def fires_after_the_last_gradient_grad(lib, dtype, compiled):
    return fires_after_the_last_gradient(lib, dtype, compiled, "autograd.grad", "cd")


def fires_after_the_last_gradient_inputs(lib, dtype, compiled):
    return fires_after_the_last_gradient(lib, dtype, compiled, "backward(inputs=b)", "cd")


def fires_after_the_last_gradient_two_roots(lib, dtype, compiled):
    return fires_after_the_last_gradient(lib, dtype, compiled, "two roots", "cd")


SCENARIOS = [fires_after_the_last_gradient, fires_after_the_last_gradient_grad,
             fires_after_the_last_gradient_inputs, fires_after_the_last_gradient_two_roots,
             docstring_example, inputs_pick_tensors, through_autograd_grad,
             runs_before_backward_returns, custom_function, removed, any_mode]


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_calls_and_gradients_as_torch(scenario, dtype):
    expected = scenario(torch, dtype, False)
    assert scenario(ca, dtype, False) == expected


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda f: f.__name__)
def test_compiled_as_torch_without_fallback(scenario):
    expected = scenario(torch, "float32", False)
    before = counters()
    assert scenario(ca, "float32", True) == expected
    after = counters()
    assert after["eager_fallbacks"] == before["eager_fallbacks"]
    assert after["captures"] + after["cache_hits"] > before["captures"] + before["cache_hits"]


@pytest.mark.parametrize("compiled", [False, True])
def test_an_error_in_fn_reaches_backward(compiled):
    for lib in (torch, ca):
        t1, t2, _, _ = _leaves(lib, "float32")

        def fails(grads):
            raise RuntimeError("error message")
        lib.autograd.graph.register_multi_grad_hook((t1, t2), fails)
        with _ctx(lib, compiled), pytest.raises(RuntimeError, match="error message"):
            (t1 * t2).sum().backward()


def test_unknown_mode_is_a_value_error_as_torch():
    for lib in (torch, ca):
        t = lib.ones(2, requires_grad=True)
        with pytest.raises(ValueError, match=r"Expects mode to be one of \('all', 'any'\) but "
                                             r"got some"):
            lib.autograd.graph.register_multi_grad_hook((t,), print, mode="some")


def test_all_mode_needs_tensors_that_require_grad_as_torch():
    for lib in (torch, ca):
        with pytest.raises(AssertionError, match="Expected gradient function to be set"):
            lib.autograd.graph.register_multi_grad_hook((lib.ones(2),), print)


def test_handle_is_a_context_manager():
    calls = []
    t = ca.ones(2, requires_grad=True)
    with ca.autograd.graph.register_multi_grad_hook((t,), calls.append):
        (t * 2).sum().backward()
    (t * 2).sum().backward()
    assert len(calls) == 1 and calls[0][0].tolist() == [2.0, 2.0]


def test_a_failed_backward_leaves_no_state_behind():
    """After a backward that raised, the next backward starts with fresh gradients."""
    for lib in (torch, ca):
        calls = []
        t1, t2, _, _ = _leaves(lib, "float64")
        lib.autograd.graph.register_multi_grad_hook((t1, t2), lambda g: calls.append(_listed(g)))
        y = t1 * 3

        def boom(grad):
            raise ValueError("boom")
        handle = y.register_hook(boom)
        with pytest.raises(ValueError, match="boom"):
            (y * t2).sum().backward(retain_graph=True)
        handle.remove()
        (t1 * 5).sum().backward()
        if lib is torch:
            expected = calls
        else:
            assert calls == expected


def test_leaves_in_autograd_grad_get_their_gradients():
    """torch refuses leaves under "all" mode in autograd.grad (its engine cannot tell
    whether it will reach them); cagrad passes their gradients, equal to torch's."""
    calls = []
    c1, c2 = ca.tensor([1.0, 2.0], requires_grad=True), ca.tensor([3.0, -1.0], requires_grad=True)
    c_mid = c1 * c2
    ca.autograd.graph.register_multi_grad_hook((c1, c_mid, c2), lambda g: calls.append(_listed(g)))
    ca.autograd.grad((c_mid * c_mid * c1).sum(), (c1,))
    t1, t2 = torch.tensor([1.0, 2.0], requires_grad=True), torch.tensor([3.0, -1.0])
    t_mid = t1 * t2
    t_grads = torch.autograd.grad((t_mid * t_mid * t1).sum(), (t1, t_mid))
    assert calls == [[t_grads[0].tolist(), t_grads[1].tolist(), None]]


def test_plain_tensor_backward_calls_fn_where_torch_does():
    """Tensor.backward() without inputs: fn runs once b, c and d have their gradients,
    before a's hook, as in torch."""
    results = []
    for lib in (torch, ca):
        events = []
        a, b, c, d, loss = _chain(lib, "float64", events)
        lib.autograd.graph.register_multi_grad_hook(
            (b, c, d), lambda g, events=events: events.append(("fn", _listed(g))))
        loss.backward()
        results.append(events)
    torch_events, ca_events = results
    assert torch_events == ["c", "b", torch_events[2], "a"]
    assert ca_events[:2] == ["c", "b"] and ca_events[3] == "a"
    assert ca_events[2][0] == "fn"
    for got, want in zip(ca_events[2][1], torch_events[2][1]):
        assert (got is None) == (want is None)
        if got is not None:
            np.testing.assert_allclose(got, want)


def _per_layer_groups(lib, dtype, compiled):
    """A module tracker's use: one "all" hook per layer over its parameters and one over
    its output; each fires once that layer's gradients are done, layer by layer."""
    kind = getattr(lib, dtype)
    rng = np.random.RandomState(0)
    layers = [lib.nn.Linear(n_in, n_out).to(kind) for n_in, n_out in ((3, 4), (4, 4), (4, 2))]
    with lib.no_grad():
        for p in (p for layer in layers for p in layer.parameters()):
            p.copy_(lib.tensor(rng.uniform(-1, 1, tuple(p.shape)), dtype=kind))
    x = lib.tensor([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75]], dtype=kind)
    order, grads = [], []

    def record(what, i):
        return lambda g: (order.append((what, i)), grads.extend(g))
    for i, layer in enumerate(layers):
        x = lib.tanh(layer(x))
        lib.autograd.graph.register_multi_grad_hook((x,), record("output", i))
        lib.autograd.graph.register_multi_grad_hook(tuple(layer.parameters()),
                                                    record("params", i))
    with _ctx(lib, compiled):
        lib.autograd.backward((x * x).sum())
    return order, grads


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_per_layer_groups_as_torch(dtype, compiled):
    order, grads = _per_layer_groups(ca, dtype, compiled)
    torch_order, torch_grads = _per_layer_groups(torch, dtype, False)
    assert order == torch_order
    assert len(grads) == len(torch_grads)
    for got, expected in zip(grads, torch_grads):
        assert_close(got, expected)
