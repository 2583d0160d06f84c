"""Compiled autograd seen from Python: counters, cache behaviour (repeats, batch changes,
dynamic=True, graph breaks, hooks, zero_grad), enable() nesting and exception safety,
reset(), and the CAGRAD_LOGS log lines (in a child process)."""

import collections.abc
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest
import torch

from helpers import (
    COUNTER_KEYS,
    TOL_SUM,
    assert_close,
    backward_checked,
    ca,
    compiled_ctx,
    compiled_enabled,
    counters,
    needs_cagrad,
    to_np,
)

pytestmark = needs_cagrad


# ---------------------------------------------------------------------------------------
# A small MLP with explicit parameters, built identically in both libraries
# ---------------------------------------------------------------------------------------
def make_params(L, rng_seed=0, din=6, dh=10, dout=3):
    r = np.random.default_rng(rng_seed)
    arrs = [r.standard_normal((dh, din)) * 0.4, r.standard_normal(dh) * 0.1,
            r.standard_normal((dout, dh)) * 0.4, r.standard_normal(dout) * 0.1]
    return [L.tensor(a.astype(np.float32), requires_grad=True) for a in arrs]


def mlp_forward(L, params, x, y, break_at=()):
    w1, b1, w2, b2 = params
    F = L.nn.functional
    h = F.linear(x, w1, b1)
    if "after_linear" in break_at and L is ca:
        ca.graph_break()
    h = F.relu(h)
    if "after_relu" in break_at and L is ca:
        ca.graph_break()
    out = F.linear(h, w2, b2)
    return F.cross_entropy(out, y)


def data(batch, seed, din=6, dout=3):
    r = np.random.default_rng(seed)
    return (r.standard_normal((batch, din)).astype(np.float32),
            r.integers(0, dout, (batch,)).astype(np.int64))


def torch_grads(batch, seed, accumulate_steps=1):
    params = make_params(torch)
    for s in range(accumulate_steps):
        x, y = data(batch, seed + s)
        mlp_forward(torch, params, torch.tensor(x), torch.tensor(y)).backward()
    return [p.grad for p in params]


def step(params, batch, seed, zero=True, **kw):
    if zero:
        for p in params:
            p.grad = None
    x, y = data(batch, seed)
    loss = mlp_forward(ca, params, ca.tensor(x), ca.tensor(y), **kw)
    loss.backward()
    return loss


def assert_grads_match(params, tgrads, msg=""):
    for i, (p, tg) in enumerate(zip(params, tgrads)):
        assert_close(p.grad, tg, **TOL_SUM["float32"], msg=f"{msg} param {i}")



# ---------------------------------------------------------------------------------------
# Counters
# ---------------------------------------------------------------------------------------
def test_counters_is_mapping_with_exactly_its_keys():
    c = ca.compiled_autograd.counters
    assert isinstance(c, collections.abc.Mapping)
    d = dict(c)
    assert set(d) == COUNTER_KEYS
    assert d == {k: 0 for k in COUNTER_KEYS}  # clean_state reset it
    assert all(type(v) is int for v in d.values())


def test_same_graph_twice_one_capture_one_hit():
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        step(params, 8, seed=1)
        assert_grads_match(params, torch_grads(8, 1), "first")
        step(params, 8, seed=2)
        assert_grads_match(params, torch_grads(8, 2), "second")
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 1 and c["cache_misses"] == 1, c
    assert c["graphs"] == 1 and c["eager_fallbacks"] == 0, c


@needs_cagrad
def test_compile_seconds_counts_misses_only():
    params = make_params(ca)
    assert ca.compiled_autograd.compile_seconds() == 0.0
    with ca.compiled_autograd.enable():
        step(params, 8, seed=1)
        first = ca.compiled_autograd.compile_seconds()
        assert 0.0 < first < 5.0
        step(params, 8, seed=2)  # a hit
        assert ca.compiled_autograd.compile_seconds() == first
    ca.compiled_autograd.reset()
    assert ca.compiled_autograd.compile_seconds() == 0.0


def test_counters_do_not_move_outside_enable():
    params = make_params(ca)
    step(params, 8, seed=1)
    assert counters() == {k: 0 for k in COUNTER_KEYS}


def test_batch_change_one_recompile_then_hits():
    params = make_params(ca)
    seq = [8, 8, 16, 16, 32, 8, 5]
    with ca.compiled_autograd.enable():
        for i, b in enumerate(seq):
            step(params, b, seed=10 + i)
            assert_grads_match(params, torch_grads(b, 10 + i), f"batch {b}")
            if i == 1:
                assert counters()["captures"] == 1
            if i == 2:
                assert counters()["captures"] == 2, "batch change must recompile exactly once"
    c = counters()
    assert c["captures"] == 2, c
    assert c["cache_hits"] == len(seq) - 2, c
    assert c["cache_misses"] == 2 and c["eager_fallbacks"] == 0, c


def test_dynamic_true_one_capture_across_sizes():
    params = make_params(ca)
    with ca.compiled_autograd.enable(dynamic=True):
        for i, b in enumerate([8, 16, 32, 3]):
            step(params, b, seed=20 + i)
            assert_grads_match(params, torch_grads(b, 20 + i), f"batch {b}")
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 3, c


def test_size_one_then_back_hits():
    """A batch of 4 then 1 marks the batch dim dynamic (PyTorch: 2 captures); going back to
    4 hits."""
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        for i, b in enumerate([4, 1, 4]):
            step(params, b, seed=30 + i)
            assert_grads_match(params, torch_grads(b, 30 + i), f"batch {b}")
    c = counters()
    assert c["captures"] == 2 and c["cache_hits"] == 1, c


def torch_captures(sizes):
    """PyTorch's compiled-autograd captures for the MLP stepped over batch sizes, with
    dynamic=False (sizes start static and turn dynamic on their first change, as in
    cagrad). torch 2.13 gives [1, 2, 3] -> 2, [4, 1, 6, 1] -> 2, [1, 1, 2, 5, 1] -> 2."""
    from torch._dynamo import compiled_autograd as tca
    from torch._dynamo.utils import counters as tcounters

    torch._dynamo.reset()
    tca.reset()
    tcounters.clear()
    try:
        for i, b in enumerate(sizes):
            params = make_params(torch)
            x, y = data(b, 40 + i)
            loss = mlp_forward(torch, params, torch.tensor(x), torch.tensor(y))
            with tca._enable(lambda gm: gm, dynamic=False):
                loss.backward()
        return tcounters["compiled_autograd"]["captures"]
    finally:
        tca.reset()
        torch._dynamo.reset()


@pytest.mark.parametrize("sizes", [[1, 2, 3], [4, 1, 6, 1], [1, 1, 2, 5, 1]])
def test_first_change_marks_dynamic_like_torch(sizes):
    """A size that changes is dynamic from its first change, 1 -> 2 and 4 -> 1 included:
    the same capture count as PyTorch's compiled autograd, and torch's gradients at every
    size, 1 included once the dim is dynamic."""
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        for i, b in enumerate(sizes):
            step(params, b, seed=40 + i)
            assert_grads_match(params, torch_grads(b, 40 + i), f"batch {b}")
    c = counters()
    assert c["captures"] == 2 and c["eager_fallbacks"] == 0, c
    assert c["captures"] == torch_captures(sizes)


def test_independent_dims_equal_at_capture_stay_independent_like_torch():
    """x [B, T] is [2, 2] then [3, 3] (both dims dynamic, equal) then [4, 3] and [4, 5]:
    B and T never meet in the backward graph, so neither change costs a capture. torch
    2.13 (compiled_autograd, dynamic=False) gives 2 captures for the same sequence."""
    from torch._dynamo import compiled_autograd as tca
    from torch._dynamo.utils import counters as tcounters

    shapes = [(2, 2), (3, 3), (4, 3), (4, 5)]
    torch._dynamo.reset()
    tca.reset()
    tcounters.clear()
    try:
        for b, t in shapes:
            x = torch.randn(b, t, requires_grad=True)
            with tca._enable(lambda gm: gm, dynamic=False):
                (x.sin() * 2).sum().backward()
        torch_count = tcounters["compiled_autograd"]["captures"]
    finally:
        tca.reset()
        torch._dynamo.reset()
    with ca.compiled_autograd.enable():
        for i, (b, t) in enumerate(shapes):
            arr = np.random.default_rng(i).standard_normal((b, t)).astype(np.float32)
            x = ca.tensor(arr, requires_grad=True)
            (x.sin() * 2).sum().backward()
            assert_close(x.grad, torch.tensor(np.cos(arr) * 2), **TOL_SUM["float32"])
    c = counters()
    assert c["captures"] == 2 == torch_count, (c, torch_count)
    assert c["eager_fallbacks"] == 0, c


def test_graph_breaks_one_backward_graph():
    params = make_params(ca)
    g0 = ca._C.forward_graph_id()
    x, y = data(8, 40)
    with ca.compiled_autograd.enable():
        loss = mlp_forward(ca, params, ca.tensor(x), ca.tensor(y),
                           break_at=("after_linear", "after_relu"))
        assert ca._C.forward_graph_id() == g0 + 2, "two breaks -> three forward graphs"
        assert loss._forward_graph == g0 + 2
        loss.backward()
    c = counters()
    assert c["captures"] == 1 and c["cache_misses"] == 1 and c["eager_fallbacks"] == 0, c
    assert_grads_match(params, torch_grads(8, 40), "graph breaks")


def test_graph_breaks_same_structure_hits_cache():
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        for i in range(3):
            step(params, 8, seed=50 + i, break_at=("after_relu",))
            assert_grads_match(params, torch_grads(8, 50 + i), f"step {i}")
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 2, c


def test_graph_break_eager_backward_across_graphs():
    params = make_params(ca)
    step(params, 8, seed=60, break_at=("after_linear", "after_relu"))
    assert_grads_match(params, torch_grads(8, 60), "eager across breaks")


# ---------------------------------------------------------------------------------------
# Hooks under compiled autograd
# ---------------------------------------------------------------------------------------
def _hooked_run(compiled, steps=3):
    """Each step registers NEW lambdas: one doubling the hidden activation's gradient, one
    doubling a leaf's gradient, one only counting; the leaf hooks are removed after the
    step. Returns the per-step grads and hook call counts."""
    params = make_params(ca)
    grads, calls = [], []
    with compiled_ctx(compiled):
        for s in range(steps):
            for p in params:
                p.grad = None
            n = {"h": 0, "w1": 0, "w2": 0}

            def count(key, ret):
                n[key] += 1
                return ret

            x, y = data(8, 70 + s)
            w1, b1, w2, b2 = params
            h = ca.nn.functional.linear(ca.tensor(x), w1, b1)
            h.register_hook(lambda g: count("h", g * 2.0))
            r1 = w1.register_hook(lambda g: count("w1", g * 2.0))
            r2 = w2.register_hook(lambda g: count("w2", None))
            out = ca.nn.functional.linear(ca.nn.functional.relu(h), w2, b2)
            ca.nn.functional.cross_entropy(out, ca.tensor(y)).backward()
            r1.remove()
            r2.remove()
            grads.append([to_np(p.grad) for p in params])
            calls.append(dict(n))
    return grads, calls


def test_lambda_hooks_compiled_match_eager_and_run_once():
    eager_grads, eager_calls = _hooked_run(False)
    assert counters()["captures"] == 0
    comp_grads, comp_calls = _hooked_run(True)
    c = counters()
    for s in range(3):
        for i in range(4):
            np.testing.assert_allclose(comp_grads[s][i], eager_grads[s][i], rtol=1e-5,
                                       atol=1e-6, err_msg=f"step {s} param {i}")
    assert eager_calls == [{"h": 1, "w1": 1, "w2": 1}] * 3
    assert comp_calls == eager_calls, "each hook runs exactly once per backward"
    # hook identities are not part of the key: new lambdas hit the cache
    assert c["captures"] == 1 and c["cache_hits"] == 2 and c["eager_fallbacks"] == 0, c
    # and the hooks really changed the result: compare with torch doing the same
    tgrads = []
    for s in range(3):
        tp = make_params(torch)
        x, y = data(8, 70 + s)
        h = torch.nn.functional.linear(torch.tensor(x), tp[0], tp[1])
        h.register_hook(lambda g: g * 2.0)
        tp[0].register_hook(lambda g: g * 2.0)
        out = torch.nn.functional.linear(torch.relu(h), tp[2], tp[3])
        torch.nn.functional.cross_entropy(out, torch.tensor(y)).backward()
        tgrads.append([p.grad for p in tp])
    for s in range(3):
        for i in range(4):
            np.testing.assert_allclose(comp_grads[s][i], to_np(tgrads[s][i]),
                                       **TOL_SUM["float32"], err_msg=f"torch step {s} param {i}")


def test_hook_doubling_matches_torch(compiled):
    res = []
    for L in (ca, torch):
        params = make_params(L)
        x, y = data(8, 80)
        w1, b1, w2, b2 = params
        h = L.nn.functional.linear(L.tensor(x), w1, b1)
        h.register_hook(lambda g: g * 2.0)
        out = L.nn.functional.linear(L.nn.functional.relu(h), w2, b2)
        L.nn.functional.cross_entropy(out, L.tensor(y)).backward()
        res.append(params)
    for i in range(4):
        assert_close(res[0][i].grad, res[1][i].grad, **TOL_SUM["float32"], msg=f"param {i}")


def test_new_lambda_each_step_hits_cache():
    params = make_params(ca)
    seen = []
    with ca.compiled_autograd.enable():
        for s in range(4):
            for p in params:
                p.grad = None
            x, y = data(8, 90 + s)
            w1, b1, w2, b2 = params
            h = ca.nn.functional.linear(ca.tensor(x), w1, b1)
            h.register_hook(lambda g, s=s: seen.append(s))
            out = ca.nn.functional.linear(ca.nn.functional.relu(h), w2, b2)
            ca.nn.functional.cross_entropy(out, ca.tensor(y)).backward()
    assert seen == [0, 1, 2, 3]
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 3, c


def test_hook_sees_correct_gradient_under_compiled():
    got = []
    for compiled in (False, True):
        x = ca.tensor(np.arange(6.0).reshape(2, 3), requires_grad=True)
        y = x * 3.0
        seen = []
        y.register_hook(lambda g: seen.append(to_np(g)))
        with compiled_ctx(compiled):
            (y * y).sum().backward()
        assert len(seen) == 1
        got.append(seen[0])
    np.testing.assert_allclose(got[0], 2 * 3.0 * np.arange(6.0).reshape(2, 3))
    np.testing.assert_allclose(got[1], got[0])


def test_zero_grad_set_to_none_no_recompile():
    tm = torch.nn.Sequential(torch.nn.Linear(6, 10), torch.nn.ReLU(), torch.nn.Linear(10, 3))
    cm = ca.nn.Sequential(ca.nn.Linear(6, 10), ca.nn.ReLU(), ca.nn.Linear(10, 3))
    with ca.no_grad():
        for cp, tp in zip(cm.parameters(), tm.parameters()):
            cp.copy_(ca.tensor(tp.detach().numpy().copy()))
    with ca.compiled_autograd.enable():
        for s in range(5):
            x, y = data(8, 100 + s)
            cm.zero_grad(set_to_none=True)
            tm.zero_grad(set_to_none=True)
            ca.nn.functional.cross_entropy(cm(ca.tensor(x)), ca.tensor(y)).backward()
            torch.nn.functional.cross_entropy(tm(torch.tensor(x)), torch.tensor(y)).backward()
            for cp, tp in zip(cm.parameters(), tm.parameters()):
                assert_close(cp.grad, tp.grad, **TOL_SUM["float32"], msg=f"step {s}")
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 4, c


def test_zero_grad_alternating_none_and_zeros_no_recompile():
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        for s in range(4):
            for p in params:
                if s % 2:
                    p.grad = None
                elif p.grad is not None:
                    with ca.no_grad():
                        p.grad.zero_()
            step(params, 8, seed=110 + s, zero=False)
            assert_grads_match(params, torch_grads(8, 110 + s), f"step {s}")
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 3, c


def test_accumulation_across_compiled_backwards():
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        step(params, 8, seed=120)
        step(params, 8, seed=121, zero=False)
    assert_grads_match(params, _sum_torch(8, [120, 121]), "accumulated")


def _sum_torch(batch, seeds):
    params = make_params(torch)
    for s in seeds:
        x, y = data(batch, s)
        mlp_forward(torch, params, torch.tensor(x), torch.tensor(y)).backward()
    return [p.grad for p in params]


def test_retain_graph_twice_under_compiled():
    params = make_params(ca)
    x, y = data(8, 130)
    with ca.compiled_autograd.enable():
        loss = mlp_forward(ca, params, ca.tensor(x), ca.tensor(y))
        loss.backward(retain_graph=True)
        loss.backward()
    tg = torch_grads(8, 130)
    assert_grads_match(params, [2 * g for g in tg], "retain_graph twice")
    c = counters()
    assert c["captures"] + c["cache_hits"] == 2 and c["eager_fallbacks"] == 0, c


def test_autograd_grad_under_compiled():
    params = make_params(ca)
    x, y = data(8, 140)
    with ca.compiled_autograd.enable():
        loss = mlp_forward(ca, params, ca.tensor(x), ca.tensor(y))
        grads = ca.autograd.grad(loss, params)
    assert all(p.grad is None for p in params)
    for i, (g, tg) in enumerate(zip(grads, torch_grads(8, 140))):
        assert_close(g, tg, **TOL_SUM["float32"], msg=f"param {i}")
    c = counters()
    assert c["captures"] + c["cache_hits"] == 1 and c["eager_fallbacks"] == 0, c


def test_failed_backward_counts_neither_hit_nor_miss():
    params = make_params(ca)
    x, y = data(8, 150)
    with ca.compiled_autograd.enable():
        loss = mlp_forward(ca, params, ca.tensor(x), ca.tensor(y))
        loss.backward()
        before = counters()
        with pytest.raises(RuntimeError, match="retain_graph"):
            loss.backward()
    after = counters()
    assert after["cache_hits"] == before["cache_hits"]
    assert after["cache_misses"] == before["cache_misses"]


# ---------------------------------------------------------------------------------------
# enable(): nesting, exception safety; reset()
# ---------------------------------------------------------------------------------------
def test_enable_nests():
    assert not compiled_enabled()
    with ca.compiled_autograd.enable():
        assert compiled_enabled()
        with ca.compiled_autograd.enable(dynamic=True):
            assert compiled_enabled()
        assert compiled_enabled(), "leaving the inner enable() must keep the outer one"
    assert not compiled_enabled()


class Boom(Exception):
    pass


def test_enable_is_exception_safe():
    with pytest.raises(Boom):
        with ca.compiled_autograd.enable():
            assert compiled_enabled()
            raise Boom()
    assert not compiled_enabled()
    # behaviour: a backward now runs eagerly (no counter moves)
    params = make_params(ca)
    step(params, 8, seed=1)
    assert counters() == {k: 0 for k in COUNTER_KEYS}


def test_enable_nested_exception_restores_outer():
    with ca.compiled_autograd.enable():
        with pytest.raises(Boom):
            with ca.compiled_autograd.enable():
                raise Boom()
        assert compiled_enabled()
        params = make_params(ca)
        step(params, 8, seed=1)
        assert counters()["captures"] == 1
    assert not compiled_enabled()


def test_enable_exception_from_backward_hook_is_safe():
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0

    def hook(g):
        raise Boom()

    y.register_hook(hook)
    with pytest.raises(Boom):
        with ca.compiled_autograd.enable():
            y.sum().backward()
    assert not compiled_enabled()


def test_reset_zeroes_counters_and_drops_graphs():
    params = make_params(ca)
    with ca.compiled_autograd.enable():
        step(params, 8, seed=1)
        step(params, 8, seed=2)
    assert counters()["captures"] == 1 and counters()["graphs"] == 1
    ca.compiled_autograd.reset()
    assert counters() == {k: 0 for k in COUNTER_KEYS}
    with ca.compiled_autograd.enable():
        step(params, 8, seed=3)
    c = counters()
    assert c["captures"] == 1 and c["cache_hits"] == 0, "reset() must drop cached graphs"


def test_reset_fixture_counters_start_at_zero(reset_counters):
    assert counters() == {k: 0 for k in COUNTER_KEYS}


# ---------------------------------------------------------------------------------------
# Log lines (CAGRAD_LOGS), checked in a child process
# ---------------------------------------------------------------------------------------
CHILD = textwrap.dedent(
    """
    import sys
    import cagrad as torch
    torch.manual_seed(0)
    w = torch.randn(8, 4, requires_grad=True)
    def step(batch, brk=False):
        x = torch.randn(batch, 8)
        h = torch.mm(x, w)
        if brk:
            torch.graph_break()
        loss = h.relu().sum()
        with torch.compiled_autograd.enable():
            loss.backward()
    mode = sys.argv[1]
    if mode == "batch":
        step(4); step(4); step(6); step(7)
    elif mode == "break":
        step(4, brk=True)
    elif mode == "ones":
        step(1); step(2); step(3); step(1); step(0); step(5)
    c = dict(torch.compiled_autograd.counters)
    print("COUNTERS", c["captures"], c["cache_hits"])
    """
)


def run_child(logs, mode):
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(ca.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in sys.path if p])
    if logs is None:
        env.pop("CAGRAD_LOGS", None)
    else:
        env["CAGRAD_LOGS"] = logs
    r = subprocess.run([sys.executable, "-c", CHILD, mode], env=env, capture_output=True,
                       text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout, r.stderr


def test_logs_compiled_autograd_traced_graph():
    out, err = run_child("compiled_autograd", "batch")
    assert "COUNTERS 2 2" in out
    assert err.count("[compiled_autograd] TRACED GRAPH") == 2, err  # captures only
    assert err.count("===== Compiled autograd graph =====") == 2, err
    assert "def forward(inputs, sizes, hooks):" in err
    assert re.search(r"# MmBackward0 \(NodeCall \d+\)", err), err
    assert re.search(r"# ReluBackward0 \(NodeCall \d+\)", err), err
    assert "accumulate_grad(" in err
    assert "Cache miss due to" not in err, "miss reasons are verbose-only"


def test_logs_verbose_miss_reasons():
    out, err = run_child("compiled_autograd_verbose", "batch")
    assert "COUNTERS 2 2" in out
    assert err.count("[compiled_autograd] TRACED GRAPH") == 2, err
    assert re.search(
        r"\[compiled_autograd_verbose\] Cache miss due to new autograd node: GraphRoot "
        r"\(NodeCall 0\) with key size \d+, previous key sizes=\[\]", err), err
    m = re.search(r"Cache miss due to (\d+) changed tensor shapes \(total of (\d+)\): "
                  r"(sizes\[\d+\](, sizes\[\d+\])*)", err)
    assert m, err
    n_changed = int(m.group(1))
    assert 1 <= n_changed <= int(m.group(2))
    dyn = re.findall(r"\[compiled_autograd_verbose\] sizes\[\d+\]: (\w+) \(NodeCall \d+\) "
                     r"(.*): 4 -> 6 \(now dynamic\)", err)
    assert len(dyn) == n_changed, err
    assert any(name == "MmBackward0" for name, _ in dyn), dyn
    assert "# sizes: s0=6" in err, "the dynamic graph names its size symbol"
    assert "4 -> 7" not in err, "batch 7 must hit the dynamic graph"


def test_logs_verbose_first_change_and_zero():
    """1 -> 2 makes the slots dynamic ('now dynamic'); 3 and 1 hit; 0 misses, on slots that
    are dynamic already ('dynamic; 0 specialises'); 5 hits the symbolic graph."""
    out, err = run_child("compiled_autograd_verbose", "ones")
    assert "COUNTERS 3 3" in out, out
    assert re.search(r"sizes\[\d+\]: \w+ \(NodeCall \d+\) .*: 1 -> 2 \(now dynamic\)\n", err), err
    assert re.search(r"sizes\[\d+\]: \w+ \(NodeCall \d+\) .*: 2 -> 0 "
                     r"\(dynamic; 0 specialises\)\n", err), err
    assert "stays static" not in err
    for hit in ("2 -> 3", "-> 1 ", "-> 5 "):
        assert hit not in err, f"{hit!r} must hit"


def test_logs_graph_break_aot_prefixes():
    out, err = run_child("compiled_autograd", "break")
    assert "COUNTERS 1 0" in out
    assert "aot0_" in err and "aot1_" in err, err


def test_no_logs_without_env():
    out, err = run_child(None, "batch")
    assert "COUNTERS 2 2" in out
    assert "compiled_autograd" not in err, err


# ---------------------------------------------------------------------------------------
# cache_size_limit and write_graph
# ---------------------------------------------------------------------------------------
def test_cache_size_limit_falls_back_to_eager_with_one_warning(capfd):
    params = make_params(ca)
    seq = [8, 16, 32, 8]
    with ca.compiled_autograd.enable(cache_size_limit=1):
        for i, b in enumerate(seq):
            step(params, b, seed=160 + i)
            assert_grads_match(params, torch_grads(b, 160 + i), f"batch {b}")
    c = counters()
    # 8 captures; 16 would need a second graph: past the bound, eager (twice); 8 hits
    assert c["captures"] == 1 and c["eager_fallbacks"] == 2 and c["cache_hits"] == 1, c
    assert c["cache_misses"] == 3, c
    err = capfd.readouterr().err
    assert err.count("cache_size_limit") == 1, err
    assert "running it eagerly" in err


@pytest.mark.parametrize("bad", [0, -1, 1.5, "8"])
def test_cache_size_limit_bad_values(bad):
    with pytest.raises(ValueError):
        with ca.compiled_autograd.enable(cache_size_limit=bad):
            pass
    assert not compiled_enabled()


def test_write_graph_dot(tmp_path):
    with pytest.raises(RuntimeError):
        ca.compiled_autograd.write_graph(str(tmp_path / "none.dot"))  # nothing compiled yet
    x = ca.randn(4, 3)
    w = ca.randn(3, 2, requires_grad=True)
    with ca.compiled_autograd.enable():
        ca.mm(x, w).relu().sum().backward()
    p = tmp_path / "g.dot"
    ca.compiled_autograd.write_graph(str(p))
    text = p.read_text()
    assert text.startswith("digraph")
    assert "MmBackward0 (NodeCall" in text and "accumulate_grad" in text
    with pytest.raises(ValueError):
        ca.compiled_autograd.write_graph(str(tmp_path / "g.unknownext"))


def test_write_graph_svg(tmp_path):
    import shutil

    if shutil.which("dot") is None:
        pytest.skip("Graphviz dot not installed")
    w = ca.randn(3, 2, requires_grad=True)
    with ca.compiled_autograd.enable():
        ca.mm(ca.randn(4, 3), w).sum().backward()
    p = tmp_path / "g.svg"
    ca.compiled_autograd.write_graph(str(p))
    assert "<svg" in p.read_text()


@pytest.mark.parametrize("how", ["cat", "stack"])
@pytest.mark.parametrize("hooked", [False, True], ids=["plain", "node-post-hook"])
def test_many_input_cat_and_stack_stay_compiled(how, hooked):
    """A cat or stack of 12 tensors (a node with more than 8 inputs, which once ran the
    whole backward eagerly) is traced like any other, node post-hooks included, with
    PyTorch's gradients."""
    rng = np.random.default_rng(12)
    data = [rng.standard_normal((2, 3)) for _ in range(12)]
    grads, seen = {}, []
    for L in (torch, ca):
        xs = [L.tensor(d, requires_grad=True) for d in data]
        y = getattr(L, how)([x * (i + 1) for i, x in enumerate(xs)], 0)
        if hooked:
            y.grad_fn.register_hook(lambda gin, gout: seen.append(len(gin)))
        loss = (y.tanh() * y).sum()
        if L is torch:
            loss.backward()
        else:
            with compiled_ctx(True):
                backward_checked(loss, True)
        grads[L] = [x.grad for x in xs]
    for got, want in zip(grads[ca], grads[torch]):
        assert_close(got, want, rtol=1e-12, atol=1e-12)
    if hooked:
        assert seen == [12, 12], seen


@pytest.mark.parametrize("dynamic", [False, True], ids=["automatic", "dynamic"])
def test_cat_along_a_dynamic_dim_stays_compiled(dynamic):
    """cat's derivative slices the gradient at offsets that sum its inputs' sizes; along a
    dim whose sizes change (symbolic after the first recompile, or from the start with
    dynamic=True) those offsets are size expressions (a narrow in the graph), not an eager
    fallback. Gradients as PyTorch's."""
    rng = np.random.default_rng(5)
    ca.compiled_autograd.reset()
    for n, m in ((2, 3), (4, 1), (3, 5), (5, 2)):
        data = [rng.standard_normal((n, 4)), rng.standard_normal((m, 4)),
                rng.standard_normal((2, 4))]
        grads = {}
        for L in (torch, ca):
            xs = [L.tensor(d, requires_grad=True) for d in data]
            y = L.cat([xs[0].sin(), xs[1] * 2, xs[2]], 0)
            loss = (y * y.cos()).sum()
            if L is torch:
                loss.backward()
            else:
                with compiled_ctx(True, dynamic=dynamic):
                    backward_checked(loss, True)
            grads[L] = [x.grad for x in xs]
        for got, want in zip(grads[ca], grads[torch]):
            assert_close(got, want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dynamic", [False, True], ids=["automatic", "dynamic"])
def test_slices_from_the_end_keep_one_graph_across_sizes(dynamic):
    """x[1:-1], x[-2:], x[:, 1:] and x[::2] keep their bounds in the form they were given
    (from the start or from the dim's end), so a dim whose size changes is one dynamic
    graph that later sizes hit (2 captures; 1 with dynamic=True), never an eager fallback
    nor a recompile per size. Gradients as PyTorch's."""
    rng = np.random.default_rng(11)
    ca.compiled_autograd.reset()
    for n in (5, 7, 9, 6, 8):
        data = rng.standard_normal((n, n + 1))
        grads = {}
        for L in (torch, ca):
            x = L.tensor(data, requires_grad=True)
            loss = ((x[1:-1] * 2).sum() + (x[-2:] ** 2).sum() + x[:, 1:].sin().sum()
                    + (x[::2, :-1] * x[::2, 1:]).sum() + x.narrow(0, 1, 3).exp().sum())
            if L is torch:
                loss.backward()
            else:
                with compiled_ctx(True, dynamic=dynamic):
                    backward_checked(loss, True)
            grads[L] = x.grad
        assert_close(grads[ca], grads[torch], rtol=1e-12, atol=1e-12)
    c = counters()
    assert c["eager_fallbacks"] == 0, c
    assert c["captures"] == (1 if dynamic else 2), c
