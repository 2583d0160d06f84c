"""compiled_autograd.set_profiling / last_profile: the work and span of a compiled plan.

Work is the plan's steps' times summed and span its longest chain of dependent steps, so a
chain of steps has span == work exactly, and two independent branches of equal cost have
a span near half the work. Profiling is off by default, and last_profile() raises before a
profiled backward has run."""

import numpy as np
import pytest

import cagrad
from helpers import needs_cagrad

pytestmark = needs_cagrad


@pytest.fixture
def one_thread():
    before = cagrad.get_num_threads()
    cagrad.set_num_threads(1)
    cagrad.compiled_autograd.set_profiling(True)
    yield
    cagrad.compiled_autograd.set_profiling(False)
    cagrad.set_num_threads(before)


def test_no_profile_before_a_profiled_backward():
    with pytest.raises(RuntimeError, match="no compiled backward has run with profiling on"):
        cagrad.compiled_autograd.last_profile()
    w = cagrad.randn(8, requires_grad=True)
    with cagrad.compiled_autograd.enable():  # profiling is off by default
        w.exp().sum().backward()
    with pytest.raises(RuntimeError, match="profiling on"):
        cagrad.compiled_autograd.last_profile()


def test_a_chain_has_span_equal_to_work(one_thread):
    w = cagrad.randn(64, 64, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        w.exp().sum().backward()  # expand the seed, times exp(w), into .grad: one chain
    p = cagrad.compiled_autograd.last_profile()
    assert p["steps"] >= 2
    assert p["work_seconds"] > 0 and p["span_seconds"] == p["work_seconds"]


def test_top_steps_name_the_costliest_work(one_thread):
    x = cagrad.randn(256, 256, requires_grad=True)
    w = cagrad.randn(256, 256, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        (x @ w).tanh().sum().backward()
    top = cagrad.compiled_autograd.last_profile()["top_steps"]
    assert 1 <= len(top) <= 8
    seconds = [t for _, _, t in top]
    assert seconds == sorted(seconds, reverse=True) and seconds[0] > 0
    assert {node for node, _, _ in top} >= {"MmBackward0", "TanhBackward0"}
    assert "matmul" in {op for _, op, _ in top}


def test_independent_branches_have_a_shorter_span(one_thread):
    x = cagrad.randn(256, 256)
    w1 = cagrad.randn(256, 256, requires_grad=True)
    w2 = cagrad.randn(256, 256, requires_grad=True)
    runs = []
    for _ in range(5):
        with cagrad.compiled_autograd.enable():
            ((x @ w1).tanh().sum() + (x @ w2).sigmoid().sum()).backward()
        runs.append(cagrad.compiled_autograd.last_profile())
    parallelism = np.median([r["parallelism"] for r in runs])
    assert parallelism > 1.3, runs  # two GEMM branches: ideally 2
    for r in runs:
        assert r["span_seconds"] < r["work_seconds"]
        assert r["parallelism"] == pytest.approx(r["work_seconds"] / r["span_seconds"])


def test_profiling_does_not_change_gradients(one_thread):
    x = cagrad.randn(16, 8)
    w = cagrad.randn(8, 8, requires_grad=True)
    grads = []
    for on in (False, True):
        cagrad.compiled_autograd.set_profiling(on)
        w.grad = None
        with cagrad.compiled_autograd.enable():
            (x @ w).relu().sum().backward()
        grads.append(w.grad.numpy().copy())
    np.testing.assert_array_equal(grads[0], grads[1])
