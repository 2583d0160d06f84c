"""No leaks over many steps: the process's resident memory stops growing once a workload is
warmed up (eager and compiled training steps, hooks, hook exceptions, retain_graph,
autograd.grad, NumPy and DLPack round trips).

Each step allocates tensors of >= 128 KiB (a [128, 256] float32 activation), so leaking
even one of them per step grows RSS by >= 128 KiB * STEPS = 40 MiB; the bound allows
12 MiB of allocator noise."""

import gc
import os

import numpy as np
import pytest
import torch

from helpers import ca, needs_cagrad

STEPS = 320
WARMUP = 40
BOUND_MB = 12

_PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * _PAGE / 2**20


class HookError(Exception):
    pass


def make_model():
    ca.manual_seed(0)
    nn = ca.nn
    return nn.Sequential(nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def _x():
    return ca.randn(128, 256)


def _y():
    return ca.tensor(np.arange(128) % 10)


def w_eager(model, opt):
    opt.zero_grad()
    ca.nn.functional.cross_entropy(model(_x()), _y()).backward()
    opt.step()


def w_compiled(model, opt):
    opt.zero_grad()
    loss = ca.nn.functional.cross_entropy(model(_x()), _y())
    with ca.compiled_autograd.enable():
        loss.backward()
    opt.step()


def w_hooks(model, opt):
    opt.zero_grad()
    h = model[0](_x())
    h.register_hook(lambda g: g * 0.5)
    handle = model[2].weight.register_hook(lambda g: None)
    ca.nn.functional.cross_entropy(model[2](ca.relu(h)), _y()).backward()
    handle.remove()


def w_hook_exception(model, opt):
    h = model[0](_x())

    def bad(g):
        raise HookError("boom")

    h.register_hook(bad)
    loss = ca.nn.functional.cross_entropy(model[2](ca.relu(h)), _y())
    try:
        loss.backward()
    except HookError as e:
        e.__traceback__ = None


def w_hook_exception_compiled(model, opt):
    with ca.compiled_autograd.enable():
        w_hook_exception(model, opt)


def w_retain_graph(model, opt):
    loss = ca.nn.functional.cross_entropy(model(_x()), _y())
    loss.backward(retain_graph=True)
    loss.backward()
    opt.zero_grad()


def w_backward_twice_error(model, opt):
    loss = ca.nn.functional.cross_entropy(model(_x()), _y())
    loss.backward()
    try:
        loss.backward()
    except RuntimeError as e:
        e.__traceback__ = None
    opt.zero_grad()


def w_autograd_grad(model, opt):
    loss = ca.nn.functional.cross_entropy(model(_x()), _y())
    ca.autograd.grad(loss, list(model.parameters()))


def w_numpy_roundtrip(model, opt):
    a = np.ones((128, 256), np.float32)
    t = ca.from_numpy(a) * 2.0
    n = t.numpy()
    _ = np.asarray(ca.from_numpy(n)).sum()


def w_dlpack_roundtrip(model, opt):
    t = ca.randn(128, 256)
    tt = torch.from_dlpack(t)
    back = ca.from_dlpack(tt * 1.0)
    _ = back.sum()


def w_graph_break_explain(model, opt):
    def fn(x):
        h = model[0](x)
        ca.graph_break()
        return model[2](ca.relu(h)).sum().item()

    ca.explain(fn)(_x())


WORKLOADS = {
    "eager_step": w_eager,
    "compiled_step": w_compiled,
    "hooks": w_hooks,
    "hook_exception": w_hook_exception,
    "hook_exception_compiled": w_hook_exception_compiled,
    "retain_graph": w_retain_graph,
    "backward_twice_error": w_backward_twice_error,
    "autograd_grad": w_autograd_grad,
    "numpy_roundtrip": w_numpy_roundtrip,
    "dlpack_roundtrip": w_dlpack_roundtrip,
    "graph_break_explain": w_graph_break_explain,
}


@needs_cagrad
@pytest.mark.skipif(
    os.environ.get("CAGRAD_SANITIZED") == "1",
    reason="ASan's quarantine keeps freed memory resident: RSS says nothing there",
)
@pytest.mark.parametrize("name", list(WORKLOADS))
def test_rss_stable(name):
    model = make_model()
    opt = ca.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    work = WORKLOADS[name]
    for _ in range(WARMUP):
        work(model, opt)
    gc.collect()
    before = rss_mb()
    for _ in range(STEPS):
        work(model, opt)
    gc.collect()
    grown = rss_mb() - before
    assert grown < BOUND_MB, f"{name}: RSS grew {grown:.1f} MiB over {STEPS} steps"
