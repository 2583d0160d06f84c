"""torch.addmm / addmv / baddbmm / addbmm / mv, tensor_split, index_put(_), the memory
methods of a CPU-only library, torch.func.functional_call, anomaly detection and torch.jit
(script / trace / ignore), against torch 2.13."""

import logging
import math
import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def cases(rng):
    """name -> (fn(L, *inputs), inputs, indices to differentiate)."""
    m, v = rng.standard_normal((3, 4)), rng.standard_normal(4)
    a, b = rng.standard_normal((3, 5)), rng.standard_normal((5, 4))
    b1, b2 = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 5, 4))
    c3 = rng.standard_normal(3)
    base = rng.standard_normal((4, 3, 2))
    vals = rng.standard_normal((3, 3, 2))
    rows = np.array([0, 2, 0])
    cols = np.array([1, 1, 2])
    return {
        "addmm": (lambda L, x, y, z: L.addmm(x, y, z), [m, a, b], [0, 1, 2]),
        "addmm_scaled_bcast": (lambda L, x, y, z: L.addmm(x, y, z, beta=0.5, alpha=-2.0),
                               [v, a, b], [0, 1, 2]),
        "addmm_beta0": (lambda L, x, y, z: L.addmm(x, y, z, beta=0), [v, a, b], [1, 2]),
        "addmv": (lambda L, x, y, z: L.addmv(x, y, z, beta=2.0, alpha=0.5), [c3, m, v],
                  [0, 1, 2]),
        "mv": (lambda L, x, y: L.mv(x, y), [m, v], [0, 1]),
        "baddbmm": (lambda L, x, y, z: L.baddbmm(x, y, z, beta=0.3, alpha=1.5),
                    [m, b1, b2], [0, 1, 2]),
        "addbmm": (lambda L, x, y, z: L.addbmm(x, y, z, alpha=0.7), [m, b1, b2], [0, 1, 2]),
        "method_baddbmm": (lambda L, x, y, z: x.baddbmm(y, z), [m, b1, b2], [0, 1, 2]),
        "method_addmm": (lambda L, x, y, z: x.addmm(y, z, alpha=3), [m, a, b], [0, 1, 2]),
        "tensor_split_sections": (lambda L, x: L.cat(
            [p * (i + 1) for i, p in enumerate(L.tensor_split(x, 3, dim=1))], 1), [a], [0]),
        "tensor_split_indices": (lambda L, x: L.cat(
            [p * (i + 1) for i, p in enumerate(x.tensor_split([1, 4, 2], dim=-1))], 1),
            [a], [0]),
        "index_put": (lambda L, x, r, c, y: x.index_put((r, c), y), [base, rows, cols,
                                                                     vals[0]], [0, 3]),
        "index_put_accumulate": (lambda L, x, r, c, y: L.index_put(x, (r, c), y,
                                                                   accumulate=True),
                                 [base, rows, rows, vals[0]], [0, 3]),
        "index_put_rows_broadcast": (lambda L, x, r, y: x.index_put((r,), y, accumulate=True),
                                     [base, rows, vals[0, 0]], [0, 2]),
    }


NAMES = sorted(cases(np.random.default_rng(0)))


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", NAMES)
def test_op_matches_torch(name, dtype, compiled, rng):
    fn, inputs, needs_grad = cases(rng)[name]
    check_against_torch(fn, inputs, dtype, compiled, needs_grad, msg=name)


@COMPILED
@pytest.mark.parametrize("name", ["addmm_scaled_bcast", "addmv", "baddbmm", "addbmm",
                                  "index_put", "index_put_accumulate"])
def test_op_gradcheck_float64(name, compiled, rng):
    fn, inputs, needs_grad = cases(rng)[name]
    check_numeric_gradient(fn, inputs, compiled, needs_grad)


def test_beta_zero_ignores_nan_input(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 2))
    nan = np.full((2, 2), math.nan)
    check_against_torch(lambda L, x, y, z: L.addmm(x, y, z, beta=0), [nan, a, b], "float64",
                        needs_grad=[1, 2])


def test_tensor_split_pieces_match_torch(rng):
    x = rng.standard_normal((7, 2))
    for spec in (3, 7, 9, [2, 5], [5, 2], [-2], [0, 10]):
        got = ca.tensor_split(ca.tensor(x), spec)
        expected = torch.tensor_split(torch.tensor(x), spec)
        assert len(got) == len(expected), spec
        for g, e in zip(got, expected):
            assert_close(g, e)
    got = ca.tensor_split(ca.tensor(x), ca.tensor([1, 3]))
    assert [tuple(p.shape) for p in got] == [(1, 2), (2, 2), (4, 2)]


def test_index_put_inplace_matches_torch(rng):
    for accumulate in (False, True):
        results = []
        for L in (ca, torch):
            x = L.zeros(3, 3, dtype=L.float64)
            out = x.index_put_((L.tensor([0, 0, 2]), L.tensor([1, 1, 0])),
                               L.tensor([1.0, 2.0, 3.0], dtype=L.float64),
                               accumulate=accumulate)
            assert out is x
            x.index_put_([L.tensor([False, True, False])], L.tensor(5.0, dtype=L.float64))
            results.append(x)
        assert_close(results[0], results[1])


BAD_CALLS = {
    "baddbmm_2d": lambda L: L.baddbmm(L.ones(3), L.ones(3, 4), L.ones(2, 4, 3)),
    "addmv_size": lambda L: L.addmv(L.ones(2), L.ones(2, 3), L.ones(4)),
    "tensor_split_0d": lambda L: L.tensor_split(L.tensor(1.0), 2),
    "tensor_split_sections": lambda L: L.tensor_split(L.ones(3), 0),
    "index_put_bounds": lambda L: L.zeros(3, 3).index_put_((L.tensor([0, 5]),), L.tensor(5.0)),
    "index_put_not_tuple": lambda L: L.zeros(3, 3).index_put_(L.tensor([0]), L.tensor(5.0)),
    "index_put_leaf": lambda L: L.zeros(3, requires_grad=True).index_put_(
        (L.tensor([0]),), L.tensor(5.0)),
    "pin_memory": lambda L: L.ones(2).pin_memory(),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1] == expected[1], (got, expected)


def test_index_put_inplace_refuses_to_drop_gradients():
    values = ca.ones(1, requires_grad=True)
    with pytest.raises(NotImplementedError, match="no in-place autograd.*index_put"):
        ca.zeros(3).index_put_((ca.tensor([0]),), values)
    with pytest.raises(NotImplementedError, match="no in-place autograd"):
        (ca.zeros(3, requires_grad=True) * 1).index_put_((ca.tensor([0]),), ca.ones(1))
    x = ca.zeros(3)
    with ca.no_grad():
        x.index_put_((ca.tensor([0]),), values)
    assert x.tolist() == [1.0, 0.0, 0.0] and not x.requires_grad


def test_memory_methods_of_a_cpu_library():
    x = ca.ones(2)
    assert x.is_pinned() is torch.ones(2).is_pinned() is False
    assert x.is_shared() is torch.ones(2).is_shared() is False
    assert x.share_memory_() is x and x.is_shared()  # test_shared_memory.py: processes
    m = ca.nn.Linear(2, 2)
    assert m.share_memory() is m and m.weight.is_shared() and m.bias.is_shared()


# --- torch.func.functional_call ------------------------------------------------------------

def _net(L):
    L.manual_seed(0)
    return L.nn.Sequential(L.nn.Linear(3, 4), L.nn.Tanh(), L.nn.Linear(4, 2)).double()


@COMPILED
def test_functional_call_maml_step_matches_torch(compiled, rng):
    x, y = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    grads = []
    for L in (ca, torch):
        net = _net(L)
        with L.no_grad():
            for p, q in zip(net.parameters(), _net(torch).parameters()):
                p.copy_(L.tensor(q.detach().numpy()))
        params = dict(net.named_parameters())
        loss = ((L.func.functional_call(net, params, (L.tensor(x),)) - L.tensor(y)) ** 2).mean()
        inner = L.autograd.grad(loss, list(params.values()), create_graph=True)
        fast = {n: p - 0.1 * g for (n, p), g in zip(params.items(), inner)}
        outer = ((L.func.functional_call(net, fast, L.tensor(x)) - L.tensor(y)) ** 2).mean()
        if L is ca:
            with compiled_ctx(compiled):
                outer.backward()
        else:
            outer.backward()
        grads.append([p.grad for p in net.parameters()])
        assert all(type(p).__name__ == "Parameter" for p in net.parameters())
    for g_c, g_t in zip(*grads):
        assert_close(g_c, g_t)


def test_functional_call_restores_and_routes_gradients(rng):
    layer = ca.nn.Linear(2, 3)
    before = layer.weight
    w = ca.tensor(rng.standard_normal((3, 2)), dtype=ca.float32, requires_grad=True)
    out = ca.func.functional_call(layer, {"weight": w}, ca.ones(1, 2), kwargs=None)
    out.sum().backward()
    assert layer.weight is before and before.grad is None
    assert_close(w.grad, torch.ones(3, 2))


def test_functional_call_strict_and_repeated_keys():
    for L in (ca, torch):
        layer = L.nn.Linear(2, 2)
        with pytest.raises(RuntimeError) as caught:
            L.func.functional_call(layer, {"weight": L.zeros(2, 2)}, L.ones(1, 2), strict=True)
        assert caught.value.args[0] == ("Error(s) in reparametrizing for Linear:\n"
                                        "\tMissing key(s): 'bias'.")
        with pytest.raises(ValueError, match="appeared in multiple dictionaries"):
            L.func.functional_call(layer, ({"weight": L.zeros(2, 2)},
                                           {"weight": L.zeros(2, 2)}), L.ones(1, 2))


def test_functional_call_ties_shared_weights():
    outs = []
    for L in (ca, torch):
        net = L.nn.Sequential(L.nn.Linear(2, 2, bias=False), L.nn.Linear(2, 2, bias=False))
        net[1].weight = net[0].weight
        w = L.eye(2) * 2
        outs.append(L.func.functional_call(net, {"0.weight": w}, L.ones(1, 2)))
    assert_close(outs[0], outs[1])


# --- anomaly detection ---------------------------------------------------------------------

def _nan_backward(L, compiled=False):
    x = L.tensor([0.0, 1.0], requires_grad=True)
    loss = (x.sqrt() * 0).sum()  # sqrt's gradient at 0 is inf; times 0: nan
    with compiled_ctx(compiled) if L is ca else warnings.catch_warnings():
        loss.backward()


@COMPILED
def test_detect_anomaly_names_the_nan_node(compiled):
    messages = []
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="Anomaly Detection has been enabled"):
            ctx = L.autograd.detect_anomaly()
        with ctx, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with pytest.raises(RuntimeError) as caught:
                _nan_backward(L, compiled)
        messages.append(str(caught.value))
        assert not L.is_anomaly_enabled()
    assert messages[0] == messages[1] == ("Function 'SqrtBackward0' returned nan values in its "
                                          "0th output.")


def test_without_anomaly_mode_nan_passes_silently():
    for L in (ca, torch):
        _nan_backward(L)


def test_set_detect_anomaly_states_match_torch():
    for L in (ca, torch):
        L.autograd.set_detect_anomaly(True)
        try:
            assert L.is_anomaly_enabled() and L.is_anomaly_check_nan_enabled()
            with L.autograd.set_detect_anomaly(True, check_nan=False):
                assert not L.is_anomaly_check_nan_enabled()
                _nan_backward(L)  # NaN checks off: no error, as torch
            assert L.is_anomaly_check_nan_enabled()
        finally:
            L.autograd.set_detect_anomaly(False)
        assert not L.is_anomaly_enabled()


def test_anomaly_mode_checks_autograd_grad_and_keeps_good_runs(rng):
    x_np = rng.standard_normal(3)
    for L in (ca, torch):
        x = L.tensor(x_np, requires_grad=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with L.autograd.detect_anomaly():
                (g,) = L.autograd.grad((x * x).sum(), x)  # no NaN: runs as usual
                np.testing.assert_allclose(g.numpy(), 2 * x_np)
                y = L.tensor([-1.0], requires_grad=True)  # sqrt(-1) is nan, so is its grad
                with pytest.raises(RuntimeError, match="Function 'SqrtBackward0' returned nan "
                                                       "values in its 0th output."):
                    L.autograd.grad(y.sqrt().sum(), y)
    z = ca.tensor([0.0], requires_grad=True)
    backward_checked((z.sqrt() * 0).sum(), compiled=False)  # mode off again (hooks gone)
    assert math.isnan(float(z.grad[0]))


# --- torch.jit -----------------------------------------------------------------------------

def test_jit_script_and_trace_return_the_callable_and_log_once(caplog):
    layer = ca.nn.Linear(2, 2)

    def double(x):
        return x * 2

    with caplog.at_level(logging.INFO, logger="cagrad"):
        ca.jit._logged = False
        assert ca.jit.script(layer) is layer
        assert ca.jit.trace(double, (ca.ones(2),)) is double
    assert sum("TorchScript" in r.getMessage() for r in caplog.records) == 1
    assert_close(ca.jit.trace(double, ca.ones(1))(ca.ones(2)), torch.ones(2) * 2)


def test_jit_decorators_are_identity():
    def f(x):
        return x + 1

    for L in (ca, torch):
        assert L.jit.ignore(f) is f
        assert L.jit.ignore()(f) is f
        assert L.jit.unused(f) is f
        assert L.jit.is_scripting() is False
