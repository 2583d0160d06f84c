"""Threads: Python hooks run with the GIL held while other threads run backwards (no
deadlock between the GIL and cagrad's locks), grad mode is per thread, hook
exceptions stay in their thread, and the GIL is released around kernels."""

import sys
import threading
import time

import numpy as np
import pytest
import torch

from helpers import STANDIN, TOL_SUM, ca, compiled_ctx, counters, needs_cagrad, to_np

N_THREADS = 4
ITERS = 60
JOIN_TIMEOUT = 60.0  # a deadlock shows up as threads still alive after this


def _data(seed):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np.float32) for s in
            [(16, 12), (20, 12), (20,), (3, 20)]] + [r.integers(0, 3, 16).astype(np.int64)]


def _step(L, arrs, hook_calls=None):
    x, w1, b1, w2, y = arrs
    p = [L.tensor(a.copy(), requires_grad=True) for a in (w1, b1, w2)]
    h = L.nn.functional.linear(L.tensor(x.copy()), p[0], p[1])
    if hook_calls is not None:
        def hook(g):
            hook_calls.append(1)
            return g * 2.0
        h.register_hook(hook)
    out = L.nn.functional.relu(h) @ p[2].t()
    L.nn.functional.cross_entropy(out, L.tensor(y.copy())).backward()
    return [to_np(q.grad) for q in p]


def _run_threads(target, n):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    ts = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-5)  # switch threads often: interleave hooks and kernels
    try:
        for t in ts:
            t.start()
        deadline = time.monotonic() + JOIN_TIMEOUT
        for t in ts:
            t.join(max(0.0, deadline - time.monotonic()))
    finally:
        sys.setswitchinterval(old)
    alive = [t for t in ts if t.is_alive()]
    assert not alive, f"{len(alive)} threads still running after {JOIN_TIMEOUT}s: deadlock?"
    assert not errors, errors


def _expected(seed):
    calls = []
    return _step(torch, _data(seed), calls)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_concurrent_backwards_with_python_hooks(compiled):
    expected = {i: _expected(100 + i) for i in range(N_THREADS)}
    results = {}

    def work(i):
        calls = []
        with compiled_ctx(compiled):
            for _ in range(ITERS):
                results[i] = _step(ca, _data(100 + i), calls)
        assert len(calls) == ITERS

    _run_threads(work, N_THREADS)
    for i in range(N_THREADS):
        for k, (g, e) in enumerate(zip(results[i], expected[i])):
            np.testing.assert_allclose(g, to_np(e), **TOL_SUM["float32"],
                                       err_msg=f"thread {i} param {k}")
    if compiled and not STANDIN:
        c = counters()
        assert c["captures"] + c["cache_hits"] == N_THREADS * ITERS, c
        assert c["eager_fallbacks"] == 0 and c["captures"] >= 1, c



def test_grad_mode_is_per_thread():
    entered, release = threading.Event(), threading.Event()
    seen = {}

    def worker():
        with ca.no_grad():
            seen["worker"] = ca.is_grad_enabled()
            entered.set()
            release.wait(10)

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    assert entered.wait(10)
    try:
        assert ca.is_grad_enabled(), "no_grad in another thread leaked into this one"
        x = ca.ones(2, requires_grad=True)
        assert (x * 2.0).requires_grad
    finally:
        release.set()
        t.join(10)
    assert seen["worker"] is False


class ThreadHookError(Exception):
    pass


def test_hook_exception_stays_in_its_thread():
    caught = {}

    def worker():
        x = ca.ones(3, requires_grad=True)
        y = x * 2.0
        y.register_hook(lambda g: (_ for _ in ()).throw(ThreadHookError("t")))
        try:
            y.sum().backward()
        except ThreadHookError as e:
            caught["e"] = e

    t = threading.Thread(target=worker, daemon=True)
    t.start()
    t.join(JOIN_TIMEOUT)
    assert isinstance(caught.get("e"), ThreadHookError)
    x = ca.ones(3, requires_grad=True)
    (x * 3.0).sum().backward()  # this thread has no pending error
    np.testing.assert_array_equal(to_np(x.grad), [3.0, 3.0, 3.0])


@needs_cagrad
def test_gil_released_around_kernels():
    """While a worker runs one long GEMM, this thread keeps running Python: the longest
    pause between its loop iterations stays well below the GEMM's duration."""
    n = 2000  # one float32 GEMM of 16 GFLOP: ~0.1 s on 2 cores
    a = ca.randn(n, n)
    b = ca.randn(n, n)
    t0 = time.perf_counter()
    ca.mm(a, b)
    single = time.perf_counter() - t0
    done = threading.Event()

    def worker():
        for _ in range(3):
            ca.mm(a, b)
        done.set()

    t = threading.Thread(target=worker, daemon=True)
    last = time.perf_counter()
    max_gap = 0.0
    t.start()
    while not done.is_set():
        now = time.perf_counter()
        max_gap = max(max_gap, now - last)
        last = now
        for _ in range(200):
            pass
    t.join(JOIN_TIMEOUT)
    assert max_gap < 0.5 * single, (
        f"the main thread stalled {max_gap:.3f}s while a {single:.3f}s GEMM ran: "
        "is the GIL held around kernels?")


def test_concurrent_dealloc_while_hooks_run():
    """Tensors die (tp_dealloc) in some threads while others run backwards whose hooks
    allocate and drop tensors: no deadlock, no crash, correct gradients."""
    expected = _expected(300)

    def work(i):
        if i % 2 == 0:
            for _ in range(ITERS):
                calls = []
                got = _step(ca, _data(300), calls)
                for g, e in zip(got, expected):
                    np.testing.assert_allclose(g, to_np(e), **TOL_SUM["float32"])
        else:
            for k in range(ITERS * 20):
                t = ca.randn(64) * 2.0
                t = t.exp()  # the first result dies here, the second below
                del t
                if k % 50 == 0:
                    x = ca.ones(4, requires_grad=True)
                    y = x * 3.0
                    y.register_hook(lambda g: (ca.zeros(8) + 1.0, None)[1])
                    y.sum().backward()

    _run_threads(work, N_THREADS)
