"""Python threads whose backwards overlap, and one model shared by threads, as in PyTorch:
C calls run with the GIL released and no library lock, so two threads' backwards run at
once; leaves shared by threads accumulate every thread's gradient into .grad."""

import os
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from helpers import STANDIN, TOL_SUM, ca, compiled_ctx, counters, to_np

JOIN_TIMEOUT = 60.0
MEET_TIMEOUT = 5.0  # how long a hook waits for the other thread's hook
IN, HID, OUT, BATCH = 6, 8, 3, 5
DTYPES = {"float32": (np.float32, ca.float32, torch.float32),
          "float64": (np.float64, ca.float64, torch.float64)}


def _weights(seed, np_dtype):
    r = np.random.default_rng(seed)
    return [r.standard_normal(s).astype(np_dtype) * 0.5 for s in [(HID, IN), (HID,), (OUT, HID)]]


def _inputs(seed, np_dtype):
    return np.random.default_rng(seed).standard_normal((BATCH, IN)).astype(np_dtype)


def _loss(L, params, x, hook=None):
    """mean(tanh(x w1^T + b1) w2^T squared), with an optional tensor hook on the hidden layer."""
    h = L.nn.functional.linear(x, params[0], params[1])
    if hook is not None:
        h.register_hook(hook)
    return (L.tanh(h) @ params[2].t()).pow(2).mean()


def _leaves(L, arrays):
    return [L.tensor(a.copy(), requires_grad=True) for a in arrays]


def _run_threads(target, n):
    errors = []

    def wrap(i):
        try:
            target(i)
        except BaseException as e:  # noqa: BLE001 - reported below
            errors.append((i, e))

    ts = [threading.Thread(target=wrap, args=(i,), daemon=True) for i in range(n)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(JOIN_TIMEOUT)
    assert not [t for t in ts if t.is_alive()], "threads still running: deadlock?"
    assert not errors, errors


def _torch_grads(weights, x):
    params = _leaves(torch, weights)
    _loss(torch, params, torch.tensor(x)).backward()
    return [p.grad for p in params]


def _check_compiled(n_backwards):
    if STANDIN:
        return
    c = counters()
    assert c["captures"] + c["cache_hits"] == n_backwards, c
    assert c["eager_fallbacks"] == 0, c


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_backwards_overlap(compiled):
    """Each thread's backward runs a hook that waits for the other thread's hook: with a
    lock held across backward the first waits in vain (the other cannot start) and its
    meeting times out; when backwards overlap, both meet."""
    arrived = [threading.Event(), threading.Event()]
    met, grads = {}, {}
    weights = [_weights(10 + i, np.float64) for i in range(2)]
    xs = [_inputs(20 + i, np.float64) for i in range(2)]

    def hook_of(i):
        def hook(g):
            arrived[i].set()
            met[i] = arrived[1 - i].wait(MEET_TIMEOUT)
        return hook

    def work(i):
        params = _leaves(ca, weights[i])
        with compiled_ctx(compiled):
            _loss(ca, params, ca.tensor(xs[i].copy()), hook_of(i)).backward()
        grads[i] = [to_np(p.grad) for p in params]

    _run_threads(work, 2)
    assert met == {0: True, 1: True}, f"the backwards did not overlap: {met}"
    for i in range(2):
        for got, want in zip(grads[i], _torch_grads(weights[i], xs[i])):
            np.testing.assert_allclose(got, to_np(want), **TOL_SUM["float64"])
    if compiled:
        _check_compiled(2)


def _shared_step(params, xs, compiled, barrier):
    """Every thread's backward at once into the shared params' .grad."""
    def work(i):
        barrier.wait(JOIN_TIMEOUT)  # all forwards and backwards start together
        with compiled_ctx(compiled):
            _loss(ca, params, ca.tensor(xs[i].copy())).backward()

    _run_threads(work, len(xs))


def _torch_summed_grads(weights, xs):
    per_thread = [_torch_grads(weights, x) for x in xs]
    return [sum(gs[k] for gs in per_thread) for k in range(len(weights))]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_shared_model_trained_by_threads(compiled, dtype):
    """Four threads share one model for a few SGD steps: each .grad is the sum of the
    threads' gradients (torch, serially, as the reference), and the updated weights follow
    torch's."""
    np_dtype, _, _ = DTYPES[dtype]
    n_threads, steps, lr = 4, 3, 0.1
    weights = _weights(1, np_dtype)
    params = _leaves(ca, weights)
    xs = [_inputs(30 + i, np_dtype) for i in range(n_threads)]
    barrier = threading.Barrier(n_threads)
    for step in range(steps):
        for p in params:
            p.grad = None
        _shared_step(params, xs, compiled, barrier)
        want = _torch_summed_grads(weights, xs)
        for k, (p, w) in enumerate(zip(params, want)):
            np.testing.assert_allclose(to_np(p.grad), to_np(w), **TOL_SUM[dtype],
                                       err_msg=f"step {step} param {k}")
        weights = [a - lr * to_np(w) for a, w in zip(weights, want)]
        with ca.no_grad():
            for p in params:
                p -= lr * p.grad
    if compiled:
        _check_compiled(n_threads * steps)


def _independent_grads(weights, x, compiled):
    params = _leaves(ca, weights)
    with compiled_ctx(compiled):
        _loss(ca, params, ca.tensor(x.copy())).backward()
    return [to_np(p.grad) for p in params]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_concurrent_independent_backwards_bitwise(compiled):
    """Backwards of independent models at once give exactly what each gives alone."""
    n_threads, iters = 4, 20
    weights = [_weights(40 + i, np.float32) for i in range(n_threads)]
    xs = [_inputs(50 + i, np.float32) for i in range(n_threads)]
    serial = [_independent_grads(weights[i], xs[i], compiled) for i in range(n_threads)]
    mismatches = []

    def work(i):
        for it in range(iters):
            got = _independent_grads(weights[i], xs[i], compiled)
            if not all(np.array_equal(g, s) for g, s in zip(got, serial[i])):
                mismatches.append((i, it))

    _run_threads(work, n_threads)
    assert not mismatches, f"concurrent gradients differ from serial ones: {mismatches[:5]}"


def test_random_draws_are_taken_whole_by_each_thread():
    """Threads drawing at once each take a range of the generator's draws of their own:
    together they get the blocks a serial run gets, in some order, none twice."""
    n_threads, n = 4, 2000
    ca.manual_seed(5)
    serial = [to_np(ca.randn(n)) for _ in range(n_threads)]
    ca.manual_seed(5)
    got = {}
    barrier = threading.Barrier(n_threads)

    def work(i):
        barrier.wait(JOIN_TIMEOUT)
        got[i] = to_np(ca.randn(n))

    _run_threads(work, n_threads)
    owners = sorted(next((k for k, s in enumerate(serial) if np.array_equal(g, s)), -1)
                    for g in got.values())
    assert owners == list(range(n_threads)), f"blocks of the serial draws taken: {owners}"


def test_set_num_threads_while_other_threads_compute():
    """Resizing the kernel pool while other threads run kernels waits for the running job:
    no hang, and every product is right."""
    a = np.random.default_rng(3).standard_normal((300, 300)).astype(np.float64)
    want = a @ a
    before = ca.get_num_threads()
    stop = threading.Event()
    wrong = []

    def compute(i):
        x = ca.tensor(a.copy())
        while not stop.is_set():
            if not np.allclose(to_np(x @ x), want, rtol=1e-12, atol=1e-10):
                wrong.append(i)

    def resize(i):
        try:
            for k in range(20):
                ca.set_num_threads(1 + k % 2)
        finally:
            stop.set()

    try:
        _run_threads(lambda i: resize(i) if i == 0 else compute(i), 3)
    finally:
        ca.set_num_threads(before)
    assert not wrong, f"products went wrong in threads {sorted(set(wrong))}"


@pytest.mark.filterwarnings("ignore:Using backward\\(\\) with create_graph=True")
def test_shared_model_create_graph():
    """create_graph backwards from threads at once into shared leaves: .grad is the sum of
    every thread's gradient, and stays differentiable (each sum recorded, none lost)."""
    n_threads = 4
    weights = _weights(2, np.float64)
    params = _leaves(ca, weights)
    xs = [_inputs(60 + i, np.float64) for i in range(n_threads)]
    barrier = threading.Barrier(n_threads)

    def work(i):
        barrier.wait(JOIN_TIMEOUT)
        _loss(ca, params, ca.tensor(xs[i].copy())).backward(create_graph=True)

    _run_threads(work, n_threads)
    want = _torch_summed_grads(weights, xs)
    for k, (p, w) in enumerate(zip(params, want)):
        assert p.grad.requires_grad, f"param {k}: .grad lost its history"
        np.testing.assert_allclose(to_np(p.grad.detach()), to_np(w), **TOL_SUM["float64"],
                                   err_msg=f"param {k}")
        p.grad = None  # the cycle between a leaf and its differentiable .grad


_COMPILING_CODE = """
import threading
import cagrad as ca
inside, release = threading.Event(), threading.Event()

class Slow(ca.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        inside.set()
        release.wait(0.5)  # traced while compiling: compiled autograd's lock is held
        return g * 2

def work():
    x = ca.ones(3, requires_grad=True)
    with ca.compiled_autograd.enable():
        Slow.apply(x).sum().backward()
    assert x.grad.tolist() == [2.0, 2.0, 2.0]

t = threading.Thread(target=work, daemon=True)
t.start()
assert inside.wait(30)
seen = dict(ca.compiled_autograd.counters), ca._C.compiled_autograd_enabled()
release.set()
t.join(30)
print("alive" if t.is_alive() else "done")
"""


def test_compiled_state_read_while_another_thread_compiles():
    """Reading compiled autograd's counters while another thread compiles a backward that
    traces a custom Function's Python backward: the read waits for compiled autograd's lock
    without the GIL, which the compiling thread needs (holding it would deadlock)."""
    r = subprocess.run([sys.executable, "-c", _COMPILING_CODE], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ))  # a deadlock: TimeoutExpired
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "done", r.stdout
