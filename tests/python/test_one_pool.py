"""One thread pool: GEMMs and cagrad's kernels run on cagrad's pool (OpenBLAS's threading
through its threads callback, or big GEMMs in tiles with OpenBLAS at one thread), so a
process running a compiled backward at n threads has at most n threads that did work
(counted from /proc/self/task, in a child process where OpenBLAS started its own threads
as it does by default). The 512x1024x1024 GEMMs are big enough for OpenBLAS to thread; the
convolutions' kernels call BLAS directly, and must set OpenBLAS to one thread themselves
when they are the first to use it."""

import os
import subprocess
import sys
import textwrap

import pytest

import cagrad
from helpers import needs_cagrad

pytestmark = [needs_cagrad,
              pytest.mark.skipif(not os.path.isdir("/proc/self/task"), reason="needs /proc")]

CHILD = textwrap.dedent(
    """
    import os, sys
    import cagrad

    def cpu_ticks():
        out = {}
        for tid in os.listdir("/proc/self/task"):
            try:
                with open(f"/proc/self/task/{tid}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            out[tid] = int(fields[11]) + int(fields[12])  # utime + stime
        return out

    n, work = int(sys.argv[1]), sys.argv[2]
    cagrad.set_num_threads(n)
    if work == "matmul":
        x = cagrad.randn(512, 1024)
        w1 = cagrad.randn(1024, 1024, requires_grad=True)
        w2 = cagrad.randn(1024, 1024, requires_grad=True)
        def step():
            ((x @ w1).tanh() @ w2).sum().backward()
    else:  # convolutions, before any other GEMM: their kernels call BLAS themselves
        x = cagrad.randn(8, 64, 32, 32, requires_grad=True)
        w = cagrad.randn(64, 64, 3, 3, requires_grad=True)
        def step():
            cagrad.nn.functional.conv2d(x, w, padding=1).sum().backward()
    with cagrad.compiled_autograd.enable():  # warm: pool and OpenBLAS threads exist now
        step()
    before = cpu_ticks()
    for _ in range(12):
        with cagrad.compiled_autograd.enable():
            step()
    after = cpu_ticks()
    busy = [t for t in after if after[t] - before.get(t, 0) >= 5]  # 50 ms or more
    print("THREADS", len(after), "BUSY", len(busy))
    """
)


@pytest.mark.parametrize("work", ["matmul", "conv"])
@pytest.mark.parametrize("n", [1, 2])
def test_at_most_n_threads_do_work(n, work):
    cores = len(os.sched_getaffinity(0))
    if n > cores:
        pytest.skip(f"needs {n} cores")
    env = dict(os.environ)
    env.pop("OPENBLAS_NUM_THREADS", None)  # OpenBLAS starts a thread per core, as by default
    env.pop("CAGRAD_NUM_THREADS", None)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(cagrad.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in sys.path if p])
    r = subprocess.run([sys.executable, "-c", CHILD, str(n), work], env=env, capture_output=True,
                       text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    words = r.stdout.split()
    total, busy = int(words[words.index("THREADS") + 1]), int(words[words.index("BUSY") + 1])
    assert 1 <= busy <= n, r.stdout
    if cores > 1:
        assert total > busy, "OpenBLAS's own threads exist but stay idle"
