"""nn.Module hooks against torch 2.13: forward pre-hooks (with_kwargs, prepend), forward
hooks (with_kwargs, always_call), full backward hooks and backward pre-hooks (grad_input /
grad_output seen and replaced, eager and compiled), the global register_module_* hooks,
handles' remove(), and get_submodule / get_parameter / get_buffer. Each scenario is
written once as f(L) and run with cagrad and torch; logs and gradients are compared."""

import warnings

import numpy as np
import pytest
import torch

from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])


def _np(value):
    if value is None:
        return None
    if isinstance(value, (tuple, list)):
        return [_np(v) for v in value]
    if isinstance(value, dict):
        return {k: _np(v) for k, v in value.items()}
    if hasattr(value, "shape"):
        return to_np(value)
    return value


def assert_same_log(a, b, **tol):
    if isinstance(a, (list, tuple)):
        assert isinstance(b, (list, tuple)) and len(a) == len(b), (a, b)
        for x, y in zip(a, b):
            assert_same_log(x, y, **tol)
    elif isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            assert_same_log(a[k], b[k], **tol)
    elif isinstance(a, np.ndarray):
        np.testing.assert_allclose(a, b, **tol)
    else:
        assert a == b, (a, b)


def make_net(L, dtype):
    """Linear(3, 2) on x, times 2 on k; forward(x, n, k, scale=1.0) with a non-tensor n."""

    class Net(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = L.nn.Linear(3, 2, dtype=getattr(L, dtype))
            self.register_buffer("steps", L.zeros(1))

        def forward(self, x, n, k, scale=1.0):
            return self.lin(x) * scale * n, (k * k) * 2

    net = Net()
    rng = np.random.default_rng(0)
    with L.no_grad():
        net.lin.weight.copy_(L.tensor(rng.standard_normal((2, 3))))
        net.lin.bias.copy_(L.tensor(rng.standard_normal(2)))
    return net


def inputs(L, dtype, grad_x=True, grad_k=True):
    rng = np.random.default_rng(1)
    x = L.tensor(rng.standard_normal((4, 3)).astype(dtype), requires_grad=grad_x)
    k = L.tensor(rng.standard_normal(5).astype(dtype), requires_grad=grad_k)
    return x, k


# --- forward hooks -------------------------------------------------------------------------

def forward_hooks_run(L, dtype):
    net = make_net(L, dtype)
    log = []
    net.register_forward_pre_hook(lambda m, a: log.append(("pre1", len(a))))
    net.register_forward_pre_hook(lambda m, a: log.append(("pre0", len(a))), prepend=True)

    def scale_kw(m, args, kwargs):
        log.append(("prekw", dict(kwargs)))
        return args, {"scale": 0.5}
    net.register_forward_pre_hook(scale_kw, with_kwargs=True)

    def double_n(m, args):  # a single value return is wrapped into a tuple... of itself
        return (args[0], args[1] * 2, args[2])
    net.register_forward_pre_hook(double_n)
    net.register_forward_hook(lambda m, a, out: log.append(("fh", a[1], _np(out[1]))))
    net.register_forward_hook(lambda m, a, kw, out: log.append(("fhkw", dict(kw))),
                              with_kwargs=True)
    net.register_forward_hook(lambda m, a, out: (out[0] + 1, out[1]), prepend=True)
    x, k = inputs(L, dtype)
    out = net(x, 3, k, scale=7.0)
    log.append(("out", _np(out)))
    return log


@DTYPE
def test_forward_hooks_order_kwargs_and_replacement(dtype):
    assert_same_log(forward_hooks_run(ca, dtype), forward_hooks_run(torch, dtype),
                    rtol=1e-5, atol=1e-6)


def test_pre_hook_single_value_is_wrapped_and_bad_kwargs_return_raises():
    for L in (ca, torch):
        lin = L.nn.Linear(2, 2)
        lin.register_forward_pre_hook(lambda m, a: L.ones(1, 2))
        assert tuple(lin(L.zeros(5, 2)).shape) == (1, 2)
    got = [error_of(L, lambda L: _bad_kwargs_hook(L)) for L in (ca, torch)]
    assert got[0][0] is got[1][0] is RuntimeError
    assert got[0][1].split(", but got")[0] == got[1][1].split(", but got")[0]


def _bad_kwargs_hook(L):
    lin = L.nn.Linear(2, 2)
    lin.register_forward_pre_hook(lambda m, a, kw: 3, with_kwargs=True)
    lin(L.zeros(1, 2))


def always_call_run(L):
    lin = L.nn.Linear(2, 2)
    log = []
    lin.register_forward_hook(lambda m, a, out: log.append(("always", out)), always_call=True)
    lin.register_forward_hook(lambda m, a, out: log.append("never"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lin.register_forward_hook(lambda m, a, out: 1 / 0, always_call=True)
    try:
        lin(L.zeros(1, 3))  # wrong in_features: forward raises
    except RuntimeError:
        log.append("raised")
    return log


def test_always_call_hook_runs_when_forward_raises():
    assert always_call_run(ca) == always_call_run(torch) == [("always", None), "raised"]


def test_handles_remove_and_context_manager():
    for L in (ca, torch):
        lin = L.nn.Linear(2, 2)
        log = []
        h1 = lin.register_forward_hook(lambda m, a, o: log.append(1), always_call=True)
        with lin.register_forward_pre_hook(lambda m, a: log.append(0)):
            lin(L.zeros(1, 2))
        h1.remove()
        h1.remove()  # twice is fine
        lin(L.zeros(1, 2))
        assert log == [0, 1]
        assert not lin._forward_hooks and not lin._forward_hooks_always_called


def global_hooks_run(L):
    from importlib import import_module
    mm = import_module(f"{L.__name__}.nn.modules.module")
    seq = L.nn.Sequential(L.nn.Linear(2, 2), L.nn.ReLU())
    log = []
    hooks = [mm.register_module_forward_pre_hook(lambda m, a: log.append(("gpre", type(m).__name__))),
             mm.register_module_forward_hook(lambda m, a, o: log.append(("gpost", type(m).__name__))),
             mm.register_module_full_backward_hook(
                 lambda m, gi, go: log.append(("gbw", type(m).__name__))),
             mm.register_module_full_backward_pre_hook(
                 lambda m, go: log.append(("gbwpre", type(m).__name__)))]
    seq[0].register_forward_pre_hook(lambda m, a: log.append("own pre"))
    try:
        seq(L.ones(1, 2, requires_grad=True)).sum().backward()
    finally:
        for h in hooks:
            h.remove()
    seq(L.ones(1, 2))
    return log


def test_global_module_hooks():
    assert global_hooks_run(ca) == global_hooks_run(torch)


# --- backward hooks ------------------------------------------------------------------------

def backward_run(L, dtype, compiled, grad_x=True, grad_k=True, replace=True):
    net = make_net(L, dtype)
    log = []

    def bw(m, grad_input, grad_output):
        log.append(("bw", _np(grad_input), _np(grad_output)))
        if replace and grad_input[0] is not None:
            return (grad_input[0] * 3, None, grad_input[2])
        return None

    def bw_pre(m, grad_output):
        log.append(("bwpre", _np(grad_output)))
        return (grad_output[0] * 2, grad_output[1]) if replace else None

    net.register_full_backward_hook(bw)
    net.register_full_backward_pre_hook(bw_pre)
    net.register_full_backward_hook(lambda m, gi, go: log.append("first"), prepend=True)
    x, k = inputs(L, dtype, grad_x, grad_k)
    y, z = net(x, 2, k)
    loss = (y * y).sum() + z.sum()
    with compiled_ctx(compiled and L is ca):
        if L is ca:
            backward_checked(loss, compiled)
        else:
            loss.backward()
    grads = [_np(t.grad) for t in (x, k, net.lin.weight, net.lin.bias)]
    return log, grads


@COMPILED
@DTYPE
@pytest.mark.parametrize("grads", [(True, True), (True, False), (False, True)],
                         ids=["both", "x-only", "k-only"])
def test_full_backward_hooks_match_torch(dtype, compiled, grads):
    got = backward_run(ca, dtype, compiled, *grads)
    want = backward_run(torch, dtype, False, *grads)
    assert_same_log(got, want, rtol=1e-5, atol=1e-5)


@COMPILED
def test_backward_hook_fires_at_outputs_when_no_input_needs_grad(compiled):
    """Inputs without grad: the hook fires (with a warning) with grad_input all None, and
    the parameters still get their gradients; a non-None return is an error."""
    with pytest.warns(UserWarning, match="firing when gradients are computed with respect to "
                                         "module outputs"):
        got = backward_run(ca, "float64", compiled, False, False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = backward_run(torch, "float64", False, False, False)
    assert_same_log(got, want, rtol=1e-12, atol=1e-12)

    def returns_value(L):
        lin = L.nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda m, gi, go: (L.ones(1, 2),))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lin(L.ones(1, 2)).sum().backward()
    assert error_of(ca, returns_value) == error_of(torch, returns_value)
    assert error_of(ca, returns_value)[0] is RuntimeError


def test_backward_hook_wrong_length_and_mixing_errors():
    def wrong(L):
        lin = L.nn.Linear(2, 2)
        lin.register_full_backward_hook(lambda m, gi, go: (gi[0], gi[0]))
        lin(L.ones(1, 2, requires_grad=True)).sum().backward()

    def wrong_pre(L):
        lin = L.nn.Linear(2, 2)
        lin.register_full_backward_pre_hook(lambda m, go: (go[0], go[0]))
        lin(L.ones(1, 2, requires_grad=True)).sum().backward()

    for make in (wrong, wrong_pre):
        assert error_of(ca, make) == error_of(torch, make)
    with pytest.raises(NotImplementedError, match="register_full_backward_hook"):
        ca.nn.Linear(2, 2).register_backward_hook(lambda *a: None)


def test_backward_hooks_removed_and_sequential_order():
    def run(L):
        seq = L.nn.Sequential(L.nn.Linear(2, 3), L.nn.Tanh(), L.nn.Linear(3, 1))
        log = []
        handles = [m.register_full_backward_hook(
            lambda m, gi, go, i=i: log.append((i, [None if g is None else tuple(g.shape)
                                                   for g in gi])))
                   for i, m in enumerate(seq)]
        seq(L.ones(4, 2, requires_grad=True)).sum().backward()
        handles[1].remove()
        seq(L.ones(4, 2)).sum().backward()
        return log
    assert run(ca) == run(torch)


@DTYPE
def test_backward_hook_scaling_gradcheck(dtype):
    """A hook that scales grad_input: the input gradient is the scaled true gradient."""
    lin = ca.nn.Linear(3, 2, dtype=getattr(ca, dtype))
    lin.register_full_backward_hook(lambda m, gi, go: (gi[0] * 0.5,))
    x = ca.randn(4, 3, dtype=getattr(ca, dtype), requires_grad=True)
    lin(x).sum().backward()
    assert_close(x.grad, ca.ones(4, 2, dtype=x.dtype) @ lin.weight.detach() * 0.5)
    if dtype == "float64":
        lin2 = ca.nn.Linear(3, 2, dtype=ca.float64)
        assert ca.autograd.gradcheck(lambda t: lin2(t), (x.detach().requires_grad_(),))


# --- lookups --------------------------------------------------------------------------------

def lookups(L):
    net = L.nn.Sequential(L.nn.Linear(2, 2), L.nn.BatchNorm1d(2))
    out = [net.get_submodule("") is net, type(net.get_submodule("1")).__name__,
           tuple(net.get_parameter("0.weight").shape), tuple(net.get_buffer("1.running_mean").shape)]
    for call in (lambda: net.get_submodule("2"), lambda: net.get_submodule("0.weight"),
                 lambda: net.get_parameter("0.nope"), lambda: net.get_parameter("1.running_mean"),
                 lambda: net.get_buffer("0.weight"), lambda: net.get_buffer("0.zz"),
                 lambda: net.get_parameter("3.weight")):
        try:
            call()
        except AttributeError as e:
            out.append(str(e))
    return out


def test_get_submodule_parameter_buffer():
    assert lookups(ca) == lookups(torch)


def test_hooks_survive_deepcopy_and_old_modules_without_hook_dicts():
    import copy

    lin = ca.nn.Linear(2, 2)
    log = []
    lin.register_forward_hook(lambda m, a, o: log.append(type(m).__name__))
    copy.deepcopy(lin)(ca.ones(1, 2))
    assert log == ["Linear"]
    # a module object from before hooks existed (no hook dicts) still runs global hooks
    old = ca.nn.Linear(2, 2)
    for name in list(old.__dict__):
        if "hook" in name:
            del old.__dict__[name]
    handle = ca.nn.modules.module.register_module_forward_hook(
        lambda m, a, o: log.append("global"))
    try:
        old(ca.ones(1, 2))
    finally:
        handle.remove()
    assert log == ["Linear", "global"]
