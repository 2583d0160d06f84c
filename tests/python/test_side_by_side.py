"""Compiled backward with the plan's steps side by side (inter-op parallelism) gives the
same bits as one step at a time, with hooks, fused groups and .grad accumulation in the
graph. CAGRAD_INTEROP=1 forces side by side, 0 forbids it; each runs in its own process
at two threads. An MLP with a GEMM that OpenBLAS threads across the whole pool runs in order
even when forced, and gives eager's bits."""
import os
import re
import subprocess
import sys

import numpy as np
import pytest

CHILD = r"""
import sys
import numpy as np
import cagrad as torch
import contextlib
import cagrad.nn.functional as F
torch.set_num_threads(int(sys.argv[3]))
rng = np.random.default_rng(7)
def t(*shape):
    return torch.tensor(rng.standard_normal(shape).astype(np.float32), requires_grad=True)
B, T, D, H = 4, 16, 32, 4
compiled = sys.argv[5] == "1"
x = t(B, T, D)
w_qkv, w_o, w1, w2 = t(D, 3 * D), t(D, D), t(D, 4 * D), t(4 * D, D)
g1, b1 = t(D), t(D)
params = [x, w_qkv, w_o, w1, w2, g1, b1]
mask = torch.tensor(np.triu(np.ones((T, T), dtype=bool), 1))
calls = []
def block_loss():
    h = F.layer_norm(x, (D,), g1, b1)
    q, k, v = (h @ w_qkv).split(D, dim=-1)
    q = q.reshape(B, T, H, D // H).transpose(1, 2)
    k = k.reshape(B, T, H, D // H).transpose(1, 2)
    v = v.reshape(B, T, H, D // H).transpose(1, 2)
    att = (q @ k.transpose(-2, -1)) * (1.0 / (D // H) ** 0.5)
    att = att.masked_fill(mask, float("-inf")).softmax(dim=-1)
    y = (att @ v).transpose(1, 2).reshape(B, T, D) @ w_o
    y.register_hook(lambda g: calls.append(1) or g * 0.5)
    r = x + y
    out = r + F.gelu(r @ w1) @ w2
    return (out * out).mean()
# the long MLP's weight gradients (96 x 96, summed over 2048 tokens) reach 256^3
# multiply-adds with outputs too small to cut into tiles of 128 rows for two threads: such a
# GEMM goes whole to OpenBLAS's threads across the pool
xb, w1b, w2b, gb, bb = t(2048, 96), t(96, 96), t(96, 96), t(96), t(96)
def big_mlp_loss():
    h = F.gelu(F.layer_norm(xb, (96,), gb, bb) @ w1b)
    h.register_hook(lambda g: calls.append(1) or g * 0.5)
    out = xb + h @ w2b
    return (out * out).mean()
if sys.argv[4] == "big":
    params, loss_fn = [xb, w1b, w2b, gb, bb], big_mlp_loss
else:
    loss_fn = block_loss
for step in range(int(sys.argv[1])):
    for p in params:
        p.grad = None
    loss = loss_fn()
    with torch.compiled_autograd.enable() if compiled else contextlib.nullcontext():
        loss.backward()
np.save(sys.argv[2], np.concatenate([p.grad.numpy().ravel() for p in params]))
print(len(calls), torch.compiled_autograd.counters["side_by_side_runs"])
"""


def run(tmp_path, interop, steps, threads=2, size="small", compiled=True):
    out = tmp_path / f"g{interop}_{threads}_{size}_{int(compiled)}.npy"
    env = dict(os.environ)
    if interop is None:
        env.pop("CAGRAD_INTEROP", None)
    else:
        env["CAGRAD_INTEROP"] = interop
    args = [str(steps), str(out), str(threads), size, str(int(compiled))]
    r = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    calls, side_by_side = map(int, r.stdout.split())
    assert calls == steps  # the hook ran once per backward
    return np.load(out), side_by_side


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_side_by_side_equals_in_order_bit_for_bit(tmp_path):
    in_order, n0 = run(tmp_path, "0", 3)
    side_by_side, n1 = run(tmp_path, "1", 3)
    assert (n0, n1) == (0, 3)  # every run, the miss included
    assert np.array_equal(in_order, side_by_side)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_chooser_runs_give_the_same_bits(tmp_path):
    # unforced: the first runs alternate between the two ways, then one is kept
    in_order, _ = run(tmp_path, "0", 20)
    chosen, n = run(tmp_path, None, 20)
    assert n >= 2  # the chooser timed side by side (eight runs, or two if far behind)
    assert np.array_equal(in_order, chosen)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_two_threads_give_the_bits_of_one(tmp_path):
    # no kernel here cuts a sum by the thread count: pointwise and fused loops split
    # elements, reductions split by shape, and this block's GEMMs are too small to be cut
    # across threads (a GEMM that is may round differently at another thread count)
    one, _ = run(tmp_path, "0", 2, threads=1)
    two, _ = run(tmp_path, "0", 2, threads=2)
    assert np.array_equal(one, two)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_verbose_log_says_which_way_and_why(tmp_path):
    env = dict(os.environ, CAGRAD_LOGS="compiled_autograd_verbose")
    env.pop("CAGRAD_INTEROP", None)
    r = subprocess.run([sys.executable, "-c", CHILD, "20", str(tmp_path / "g.npy"), "2", "small",
                        "1"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "graph runs" in ln]
    assert len(lines) == 1, r.stderr  # once, when the chooser has timed both ways
    side_by_side = int(r.stdout.split()[1])
    way = "its steps side by side" if side_by_side > 8 else "in order"
    assert f"graph runs {way} on 2 threads" in lines[0]
    m = re.search(r"steps side by side took ([0-9.]+) us, in order ([0-9.]+) us \((second )?"
                  r"fastest of (\d+) timed runs each way; (given up early|side by side must win)",
                  lines[0])
    assert m, lines[0]
    side, in_order = float(m.group(1)), float(m.group(2))
    # the figures shown are the ones that decided: they agree with the verdict
    if m.group(5) == "given up early":
        assert not m.group(3) and way == "in order" and side > 1.25 * in_order, lines[0]
    else:
        assert m.group(3) and int(m.group(4)) == 8, lines[0]
        assert (side < 0.95 * in_order) == (way != "in order"), lines[0]


def blas_threads_through_the_pool():
    import cagrad
    return "callback" in cagrad.show_config()


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_a_gemm_for_openblas_threads_keeps_the_plan_in_order(tmp_path):
    # With OpenBLAS's threads callback, the long MLP's weight gradients go whole to OpenBLAS,
    # threaded across the pool. Side by side the pool is busy with steps: such a GEMM would
    # have to run in tiles, which round differently (its bits would follow the way the plan
    # ran). So the plan runs in order even where side by side is forced, and the compiled
    # backward gives the eager one's bits.
    eager, _ = run(tmp_path, None, 2, size="big", compiled=False)
    in_order, n0 = run(tmp_path, "0", 2, size="big")
    forced, n1 = run(tmp_path, "1", 2, size="big")
    assert np.array_equal(in_order, forced)
    assert np.array_equal(eager, forced)
    assert n0 == 0
    assert n1 == (0 if blas_threads_through_the_pool() else 2)


@pytest.mark.skipif((os.cpu_count() or 1) < 2, reason="needs 2 cores")
def test_verbose_log_says_a_gemm_for_openblas_threads_keeps_it_in_order(tmp_path):
    if not blas_threads_through_the_pool():
        pytest.skip("this OpenBLAS has no threads callback")
    env = dict(os.environ, CAGRAD_LOGS="compiled_autograd_verbose", CAGRAD_INTEROP="1")
    r = subprocess.run([sys.executable, "-c", CHILD, "3", str(tmp_path / "g.npy"), "2", "big",
                        "1"], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if "graph runs" in ln]
    assert lines == ["[compiled_autograd_verbose] graph runs in order on 2 threads: a GEMM of "
                     "it goes whole to OpenBLAS's threads across the pool, which steps side by "
                     "side would hold"], r.stderr
