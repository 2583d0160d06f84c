"""The environment of a benchmark child and the GEMM limit: cblas_sgemm of a workload's
backward GEMM shapes on cagrad's own OpenBLAS, the CPU, tool versions and what each library
reports about itself. measure.py uses these (and re-exports them for bench.py).
"""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import time

import numpy as np


# ---------------------------------------------------------------------------------------
# sgemm reference for workload 6
# ---------------------------------------------------------------------------------------
class PrefixedLib:
    """A ctypes library whose symbols carry a prefix (scipy-openblas32's `scipy_`), looked
    up by their plain names."""

    def __init__(self, lib, prefix):
        self._lib, self._prefix = lib, prefix

    def __getattr__(self, name):
        return getattr(self._lib, self._prefix + name)


def find_openblas():
    """The OpenBLAS that cagrad._C links (already mapped into this process): the
    scipy-openblas32 wheel's libscipy_openblas.so (symbols prefixed scipy_), or a system
    libopenblas. NumPy's own copy (libscipy_openblas64_) is never it."""
    with open("/proc/self/maps") as f:
        paths = {line.split()[-1] for line in f if "/" in line}
    wheel = sorted(p for p in paths if os.path.basename(p) == "libscipy_openblas.so")
    if wheel:
        return wheel[0], PrefixedLib(ctypes.CDLL(wheel[0]), "scipy_")
    cands = sorted(p for p in paths if re.search(r"/libopenblas[^/]*\.so", p)
                   and "scipy_openblas" not in p and "numpy" not in p)
    if not cands:
        return None, None
    lib = ctypes.CDLL(cands[0])
    return cands[0], lib


def aligned_empty(shape, align=64):
    n = int(np.prod(shape))
    raw = np.empty(n * 4 + align, dtype=np.uint8)
    off = (-raw.ctypes.data) % align
    return raw[off:off + n * 4].view(np.float32).reshape(shape)


class Sgemm:
    """cblas_sgemm of the same GEMM shapes as a workload's backward, row-major, each item of
    a batched one a call of its own, with OpenBLAS threaded as it would be on its own:
    cagrad tells OpenBLAS to use one thread (its own pool runs GEMMs in parallel), so this
    baseline sets OpenBLAS's threads for its calls and puts cagrad's setting back after."""

    ROW, NOTRANS, TRANS = 101, 111, 112

    def __init__(self, lib, gemms, threads):
        self.threads = threads
        self.set_threads = getattr(lib, "openblas_set_num_threads", None)
        self.get_threads = getattr(lib, "openblas_get_num_threads", None)
        if self.get_threads is not None:
            self.get_threads.restype = ctypes.c_int
        self.f = lib.cblas_sgemm
        self.f.restype = None
        i, f, p = ctypes.c_int, ctypes.c_float, ctypes.c_void_p
        self.f.argtypes = [i, i, i, i, i, i, f, p, i, p, i, f, p, i]
        rng = np.random.default_rng(0)
        self.calls = []
        for g in gemms:
            m, n, k, ta, tb = g[:5]
            for _ in range(g[5] if len(g) > 5 else 1):
                a = aligned_empty((k, m) if ta else (m, k))
                b = aligned_empty((n, k) if tb else (k, n))
                c = aligned_empty((m, n))
                a[...] = rng.standard_normal(a.shape)
                b[...] = rng.standard_normal(b.shape)
                c[...] = 0
                lda = m if ta else k
                ldb = k if tb else n
                self.calls.append((self.ROW, self.TRANS if ta else self.NOTRANS,
                                   self.TRANS if tb else self.NOTRANS, m, n, k, 1.0,
                                   a.ctypes.data, lda, b.ctypes.data, ldb, 0.0, c.ctypes.data,
                                   n, (a, b, c)))

    def _timed(self, threads):
        if self.set_threads is not None:
            self.set_threads(threads)
        t0 = time.perf_counter()
        for c in self.calls:
            self.f(*c[:-1])
        return time.perf_counter() - t0

    def run(self):
        """The faster of OpenBLAS threaded at this thread count and OpenBLAS on one thread:
        OpenBLAS threads small GEMMs too, and loses there (each call then waits for a
        second thread), so the limit is what plain sgemm does at its best."""
        before = self.get_threads() if self.get_threads is not None else None
        elapsed = self._timed(self.threads)
        if self.threads > 1 and self.set_threads is not None:
            elapsed = min(elapsed, self._timed(1))
        if self.set_threads is not None and before is not None:
            self.set_threads(before)
        return elapsed


PEAK_N = 1024  # the square sgemm whose rate stands for the machine's GEMM peak


def sgemm_peak(lib, threads, runs=7):
    """GFLOP/s of the fastest of `runs` cblas_sgemm calls of PEAK_N^3 at this thread count:
    a GEMM big enough to run at OpenBLAS's best on these cores (small and odd shapes only
    run slower), so a backward's GEMM flops take at least flops / peak. Noise only adds
    time, hence the fastest run."""
    sg = Sgemm(lib, [(PEAK_N, PEAK_N, PEAK_N, False, False)], threads)
    sg.run()
    best = min(sg.run() for _ in range(runs))
    return 2.0 * PEAK_N ** 3 / best / 1e9


# ---------------------------------------------------------------------------------------
# Environment
# ---------------------------------------------------------------------------------------
def cpu_info():
    info = {}
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
        for key in ("model name", "cpu family", "model", "stepping", "flags"):
            m = re.search(rf"^{key}\s*:\s*(.*)$", text, re.M)
            if m:
                info[key] = m.group(1).strip()
        flags = set(info.pop("flags", "").split())
        info["isa_flags"] = [f for f in ("avx2", "fma", "avx512f", "avx512bw", "avx512vl",
                                         "avx512_bf16", "amx_tile") if f in flags]
        info["logical_cpus"] = os.cpu_count()
        m = re.search(r"^flags\s*:.*\bhypervisor\b", text, re.M)
        info["virtualised"] = bool(m)
    except OSError:
        pass
    return info


def tool_version(cmd):
    try:
        out = subprocess.run(cmd, capture_output=True, text=True, timeout=20).stdout
        return out.splitlines()[0].strip() if out else None
    except (OSError, subprocess.SubprocessError):
        return None


def child_environment(cagrad, torch, blas_path, blas):
    env = {}
    bi = dict(cagrad._C.blas_info())
    env["cagrad"] = {"version": getattr(cagrad, "__version__", "?"), "blas_info": bi,
                     "num_threads": cagrad.get_num_threads(), "module": cagrad.__file__}
    ob = {"path": blas_path}
    if blas is not None:
        for name in ("openblas_get_corename", "openblas_get_config"):
            fn = getattr(blas, name)
            fn.restype = ctypes.c_char_p
            ob[name[len("openblas_get_"):]] = fn().decode()
        blas.openblas_get_num_threads.restype = ctypes.c_int
        ob["num_threads"] = blas.openblas_get_num_threads()
    env["openblas"] = ob
    tinfo = {"version": torch.__version__, "num_threads": torch.get_num_threads(),
             "cpu_capability": torch.backends.cpu.get_cpu_capability(),
             "mkl": torch.backends.mkl.is_available(),
             "mkldnn": torch.backends.mkldnn.is_available()}
    m = re.search(r"Math Kernel Library Version ([^\n]*)", torch.__config__.show())
    if m:
        tinfo["mkl_version"] = m.group(1).strip()
    m = re.search(r"BLAS_INFO=(\w+)", torch.__config__.show())
    if m:
        tinfo["blas"] = m.group(1)
    env["torch"] = tinfo
    env["numpy"] = np.__version__
    env["vars"] = {k: os.environ.get(k) for k in (
        "OPENBLAS_NUM_THREADS", "CAGRAD_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
        "OPENBLAS_CORETYPE", "MKL_ENABLE_INSTRUCTIONS", "MKL_CBWR", "LD_PRELOAD",
        "TORCHINDUCTOR_CACHE_DIR")}
    return env
