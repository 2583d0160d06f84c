"""What runs inside one benchmark child process (one thread count): the environment probe,
the gradient check, the timings and the RSS-only runs. bench.py starts these processes.

Timing child (``run_timing``): both libraries in one process, alternating rep by rep:
  ce  cagrad eager           cc  cagrad compiled autograd (cache hit)
  te  torch eager            tc  torch compiled autograd (inductor, steady state)
Each rep of each config is one training step, timed in parts:
  zero_grad(set_to_none=True); loss = forward(); loss.backward(); SGD step
The backward figure is the loss.backward() part; the step figure is the whole step. The
heap-allocation count is read from the LD_PRELOAD shim around loss.backward(). A workload
with a backward closure (w10, w11: create_graph grads, then the total's backward) has that
closure run and timed in place of loss.backward(), in all four configurations.

Cost of a cache miss (``miss_cost``), one code path for both libraries: each rep is a
steady-state backward, a reset of the library's compile caches, the miss backward, and
another steady-state backward; the rep's figure is the miss minus the mean of the two
steady backwards around it. cagrad's own compile timer is read after each of its misses.

RSS child (``run_rss``): one library only, so the process's RSS belongs to it.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import gc
import json
import math
import os
import resource
import statistics
import sys
import time

import numpy as np

import workloads as W
from bench_env import (PEAK_N, Sgemm, child_environment, cpu_info,  # noqa: F401
                       find_openblas, sgemm_peak, tool_version)

CONFIGS = ("ce", "cc", "te", "tc")
CONFIG_NAMES = {
    "ce": "cagrad eager",
    "cc": "cagrad compiled (hit)",
    "te": "torch eager",
    "tc": "torch compiled autograd",
}
# PyTorch 2.13's compiled autograd refuses a create_graph grad of a gradient it compiled
TORCH_NO_HIGHER_ORDER = "does not currently support higher order gradients"
LR = 1e-4  # SGD step: small, so the values hardly drift over the reps
# Before each timed step: a pause, then one untimed step of the same configuration. Both
# libraries keep worker threads in one process: libgomp's (PyTorch/MKL, inductor kernels)
# spin for some milliseconds after a parallel region, OpenBLAS's spin-yield, and a
# spinning pool of one library takes a core from the other's next step. The pause lets
# them go idle; the untimed step wakes the configuration's own pool and warms the caches,
# as in a training loop that runs one library back to back. (Measured at 2 threads: with
# both, each library's median is within noise of its median in a process of its own.)
GAP_S = 0.015
U32 = 2.0 ** -24  # float32 unit roundoff


class Mismatch(Exception):
    """cagrad's gradients differ from PyTorch's beyond the tolerance: the run fails."""


def log(msg):
    print(msg, file=sys.stderr, flush=True)


def stats(v):
    v = [float(x) for x in v]
    m = statistics.median(v)
    return {"median": m, "min": min(v), "max": max(v), "n": len(v),
            "mad": statistics.median(abs(x - m) for x in v)}


def spread_stats(v):
    """stats() plus the quartiles q1 and q3 (inclusive method: within [min, max])."""
    v = [float(x) for x in v]
    s = stats(v)
    q = statistics.quantiles(v, n=4, method="inclusive") if len(v) >= 2 else v * 3
    s["q1"], s["q3"] = q[0], q[2]
    return s


# ---------------------------------------------------------------------------------------
# Process-level helpers: the allocation counter, RSS, libc
# ---------------------------------------------------------------------------------------
class AllocCounter:
    """Reads the malloc_count shim (LD_PRELOAD). Without it, counts are None."""

    def __init__(self):
        self.active = False
        try:
            lib = ctypes.CDLL(None)
            self._var = ctypes.c_uint64.in_dll(lib, "malloc_count_total_calls")
            self._bytes = ctypes.c_uint64.in_dll(lib, "malloc_count_total_bytes")
            self.active = True
        except (OSError, ValueError):
            self._var = self._bytes = None

    def read(self):
        return self._var.value if self.active else 0

    def read_bytes(self):
        return self._bytes.value if self.active else 0


_libc = ctypes.CDLL("libc.so.6")


def trim_heap():
    """Give freed heap pages back to the kernel, so RSS follows live memory."""
    gc.collect()
    _libc.malloc_trim(0)


def _status_kb(field):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return None


def rss_mb():
    return _status_kb("VmRSS") / 1024.0


def reset_peak_rss():
    """Reset VmHWM to the current RSS (Linux >= 4.0). False if the kernel refuses."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb():
    return _status_kb("VmHWM") / 1024.0


def maxrss_mb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


# ---------------------------------------------------------------------------------------
# Libraries
# ---------------------------------------------------------------------------------------
def import_cagrad(threads):
    import cagrad

    cagrad.set_num_threads(threads)
    return cagrad


def import_torch(threads):
    import torch

    torch.set_num_threads(threads)
    return torch


def torch_mkl_lib():
    """libtorch_cpu.so, which holds PyTorch's MKL (for MKL_Verbose, its C interface)."""
    with open("/proc/self/maps") as f:
        paths = sorted({line.split()[-1] for line in f if "libtorch_cpu" in line})
    if not paths:
        return None
    lib = ctypes.CDLL(paths[0])
    return lib if hasattr(lib, "MKL_Verbose") else None


def torch_compiled_ctx(torch):
    """PyTorch 2.13's compiled autograd with torch.compile (inductor, CPU) as the compiler
    of the captured backward graph. dynamic=False on both: static shapes, like cagrad's
    default, which gives inductor its best steady-state code."""
    from torch._dynamo import compiled_autograd as tca

    compiler = functools.partial(torch.compile, backend="inductor", fullgraph=True,
                                 dynamic=False)
    return lambda: tca._enable(compiler, dynamic=False)


def torch_ca_counters(torch):
    from torch._dynamo.utils import counters

    return dict(counters["compiled_autograd"])


def torch_reset_compiled(torch):
    from torch._dynamo import compiled_autograd as tca

    tca.reset()
    torch._dynamo.reset()


@contextlib.contextmanager
def torch_cold_compile(torch):
    """Reset PyTorch's compile caches for one miss, as far as a process can: compiled
    autograd's and dynamo's caches (torch_reset_compiled), inductor's in-memory caches, and
    a fresh, empty inductor cache directory (FX graph, AOTAutograd and C++ kernel caches
    on disk) for the duration of the block: torch._inductor.utils.fresh_cache, which
    PyTorch's own tests use for the same purpose. What stays is the process's warm state:
    imported modules and the compiler probe paid by the warm-up graph."""
    from torch._inductor.runtime.cache_dir_utils import cache_dir
    from torch._inductor.utils import fresh_cache

    torch_reset_compiled(torch)
    with fresh_cache(dir=cache_dir()):
        yield


@contextlib.contextmanager
def cagrad_reset(cagrad):
    """cagrad's compile caches: compiled_autograd.reset() drops every compiled graph (cagrad
    keeps nothing on disk)."""
    cagrad.compiled_autograd.reset()
    yield


class Lib:
    """One library's side of a workload: its model, optimizer and how to run a step."""

    def __init__(self, L, build, compiled_ctx):
        self.L = L
        self.b = build(L)
        self.opt = L.optim.SGD(self.b.params, lr=LR)
        self.compiled_ctx = compiled_ctx

    def zero(self):
        for p in self.b.params:
            p.grad = None

    def grads(self):
        return [p.grad.detach().numpy().astype(np.float64).copy() for p in self.b.params]

    def backward(self, loss):
        """The timed gradient work: loss.backward(), or the workload's own backward closure
        (create_graph grads and the final backward). Returns the step's total loss."""
        if self.b.backward is None:
            loss.backward()
            return loss
        return self.b.backward(loss)

    def backward_once(self, compiled):
        """A fresh forward and one backward; returns the backward's seconds."""
        self.zero()
        if compiled:
            with self.compiled_ctx():
                loss = self.b.loss()
                t0 = time.perf_counter()
                total = self.backward(loss)
                t1 = time.perf_counter()
        else:
            loss = self.b.loss()
            t0 = time.perf_counter()
            total = self.backward(loss)
            t1 = time.perf_counter()
        self.last_loss = float(total.detach().numpy())
        return t1 - t0

    def step(self, compiled, counter):
        """One timed training step: (forward s, backward s, step s, allocs, bytes)."""
        if compiled:
            with self.compiled_ctx():
                return self._step(counter)
        return self._step(counter)

    def _step(self, counter):
        t0 = time.perf_counter()
        self.opt.zero_grad(set_to_none=True)
        loss = self.b.loss()
        a0, y0 = counter.read(), counter.read_bytes()
        t1 = time.perf_counter()
        self.backward(loss)
        t2 = time.perf_counter()
        a1, y1 = counter.read(), counter.read_bytes()
        self.opt.step()
        t3 = time.perf_counter()
        return t1 - t0, t2 - t1, t3 - t0, a1 - a0, y1 - y0


# ---------------------------------------------------------------------------------------
# Gradient check
# ---------------------------------------------------------------------------------------
def rel_err(g, ref):
    """Norm-wise relative error, max|g - ref| / max|ref| (max|ref| floored at tiny)."""
    scale = max(float(np.max(np.abs(ref))), 1e-30)
    return float(np.max(np.abs(g - ref))) / scale


def check_grads(spec, names, ref, torch32, candidates):
    """ref: float64 gradients (PyTorch eager in float64, the exact answer to ~1e-16).
    torch32: PyTorch float32 eager gradients. candidates: {label: cagrad float32 grads}.

    Tolerance, per parameter: cagrad's error against the float64 answer may be at most
    10x PyTorch's own float32 error on the same inputs, with a floor of 100 u (u = 2^-24,
    ~6e-6) for parameters where PyTorch happens to be nearly exact. Both libraries run
    the same float32 math with different summation orders and kernels, so their errors
    are of the same order; a wrong gradient is off by orders of magnitude more.
    """
    out = {"params": len(names), "torch32_err": [], "checks": {}}
    tol = []
    for n, r, t in zip(names, ref, torch32):
        e = rel_err(t, r)
        out["torch32_err"].append(e)
        tol.append(max(10.0 * e, 100.0 * U32))
    failures = []
    for label, grads in candidates.items():
        errs = [rel_err(g, r) for g, r in zip(grads, ref)]
        worst = max(range(len(errs)), key=lambda i: errs[i] / tol[i])
        out["checks"][label] = {"max_err": max(errs), "worst_param": names[worst],
                                "worst_ratio_to_tol": errs[worst] / tol[worst]}
        for i, e in enumerate(errs):
            if not e <= tol[i]:  # also catches NaN
                failures.append(f"{label}: grad of {names[i]} has relative error {e:.3g} "
                                f"against float64, tolerance {tol[i]:.3g} (PyTorch float32: "
                                f"{out['torch32_err'][i]:.3g})")
    out["tolerance"] = "max(10 x torch float32 error, 100 u), per parameter, vs float64"
    if failures:
        raise Mismatch(f"{spec.key} ({spec.title}): cagrad gradients do not match:\n  "
                       + "\n  ".join(failures))
    return out


# ---------------------------------------------------------------------------------------
# The cost of a cache miss, measured the same way for both libraries
# ---------------------------------------------------------------------------------------
def miss_cost(lib, reset, reps, internal=None, captures=1):
    """What a cache miss adds to a backward, the way PyTorch's compile cost is usually
    measured (the first backward minus a steady-state one), with one code path for both
    libraries. Per rep:

        gc.collect(); pause; untimed hit; B = timed hit
        with reset():  M = timed backward (the miss)
        pause; untimed hit; A = timed hit
        figure = M - (B + A) / 2

    B and A are taken as the steady-state loop takes its steps (a pause, then one untimed
    run to wake the thread pools), for workload 6 too, since M follows B directly and so
    finds the pools awake; the steady backward subtracted is measured right around its
    miss, under the same load. The cyclic garbage
    collector is off for B and A, and on for the miss, which is where a compile's garbage
    would trigger it in a training loop; what was alive before the first rep is frozen
    (gc.freeze), so the collection at the start of each rep is quick. Each miss must
    capture `captures` graphs (one for a single backward; a step with create_graph grads
    can have one per backward, as many as its first compiled step captured), and the hits
    none (both libraries count captures).
    `internal`, if given, is read after each miss (cagrad's compile_seconds()). Times in
    microseconds."""
    L = lib.L
    probe = ((lambda: L.compiled_autograd.counters["captures"]) if L.__name__ == "cagrad"
             else (lambda: torch_ca_counters(L).get("captures", 0)))

    def steady():
        time.sleep(GAP_S)
        lib.backward_once(True)  # untimed: wakes this library's threads
        return lib.backward_once(True)

    rec = {"miss": [], "before": [], "after": [], "diff": [], "internal": []}
    bad = []
    gc.collect()
    gc.freeze()  # the objects alive now are left out of every collection below
    try:
        for _ in range(reps):
            gc.collect()
            gc.disable()
            try:
                b = steady()
                with reset():
                    c0 = probe()
                    gc.enable()
                    m = lib.backward_once(True)
                    gc.disable()
                    c1 = probe()
                    if internal is not None:
                        rec["internal"].append(internal() * 1e6)
                a = steady()
                c2 = probe()
            finally:
                gc.enable()
            if c1 - c0 != captures or c2 != c1:
                bad.append(f"captures {c0} -> {c1} (miss) -> {c2} (hits)")
            rec["miss"].append(m * 1e6)
            rec["before"].append(b * 1e6)
            rec["after"].append(a * 1e6)
            rec["diff"].append((m - (b + a) / 2) * 1e6)
    finally:
        gc.unfreeze()
    if bad:
        log(f"warning: {L.__name__}: a miss did not capture exactly {captures} graph(s): "
            f"{bad}")
    out = {"cost": spread_stats(rec["diff"]), "miss_backward": stats(rec["miss"]),
           "steady_backward": stats(rec["before"] + rec["after"]),
           "steady_drift": spread_stats([a - b for a, b in zip(rec["after"], rec["before"])]),
           "reps": reps, "captures_per_miss": captures,
           "capture_check": "ok" if not bad else bad,
           "samples_us": {k: [round(v, 1) for v in rec[k]]
                          for k in ("miss", "before", "after")}}
    if internal is not None:
        out["internal"] = stats(rec["internal"])
    return out


# ---------------------------------------------------------------------------------------
# The timing child
# ---------------------------------------------------------------------------------------
def plan_profile(cagrad, lib, reps):
    """Work and span of the compiled backward's plan, medians over reps profiled runs at 1
    thread: work is the steps' times summed, span the longest chain of dependent steps, so
    work / span bounds what inter-op parallelism (steps run side by side) could gain, and
    max(work / p, span) is the best time on p cores. A step's own kernel threads are
    intra-op parallelism, on top of that."""
    cagrad.compiled_autograd.set_profiling(True)
    runs = []
    try:
        for _ in range(reps):
            lib.backward_once(True)
            runs.append(cagrad.compiled_autograd.last_profile())
    finally:
        cagrad.compiled_autograd.set_profiling(False)
    work = float(np.median([r["work_seconds"] for r in runs])) * 1e6
    span = float(np.median([r["span_seconds"] for r in runs])) * 1e6
    return {"work_us": work, "span_us": span, "parallelism": work / span if span else 1.0,
            "steps": runs[-1]["steps"], "reps": reps,
            "projected_16_us": max(work / 16, span)}


def run_timing(threads, reps, big_reps, miss_reps, torch_miss_reps, keys):
    counter = AllocCounter()
    t_start = time.perf_counter()
    cagrad = import_cagrad(threads)
    torch = import_torch(threads)
    blas_path, blas = find_openblas()
    res = {"threads": threads, "alloc_counter": counter.active,
           "environment": child_environment(cagrad, torch, blas_path, blas),
           "workloads": {}}
    if os.environ.get("MKL_VERBOSE") == "1":
        # one MKL sgemm: its MKL_VERBOSE line (stdout) names the code path MKL picked on
        # this CPU; then verbose mode is switched off again before anything is timed
        a = torch.ones(64, 64)
        (a @ a).sum()
        mkl = torch_mkl_lib()
        if mkl is not None:
            mkl.MKL_Verbose(0)
    if blas is not None:
        res["sgemm_peak_gflops"] = sgemm_peak(blas, threads)
        res["sgemm_peak_method"] = (f"fastest of 7 cblas_sgemm calls of {PEAK_N}^3 on "
                                    f"cagrad's OpenBLAS at {threads} thread(s)")
    e = res["environment"]
    log(f"[{threads} thr] cagrad {e['cagrad']['version']} kernel ISA "
        f"{e['cagrad']['blas_info']['kernel_isa']}, OpenBLAS core "
        f"{e['openblas'].get('corename')} ({e['openblas'].get('num_threads')} threads); torch "
        f"{e['torch']['version']} ({e['torch']['blas']}, {e['torch']['num_threads']} threads)")
    tc_ctx = torch_compiled_ctx(torch)
    cc_ctx = cagrad.compiled_autograd.enable

    # One-time costs of the first torch.compile in a process (importing inductor, probing
    # the compiler and vector ISA) belong to no workload: pay them on a throwaway graph.
    t0 = time.perf_counter()
    a = torch.randn(8, requires_grad=True)
    with tc_ctx():
        (a.sin() * 2).sum().backward()
    res["torch_compile_warmup_s"] = time.perf_counter() - t0
    try:
        from torch._inductor import cpu_vec_isa

        res["environment"]["torch"]["inductor_vec_isa"] = str(cpu_vec_isa.pick_vec_isa())
    except Exception as e:  # noqa: BLE001 - informational only
        res["environment"]["torch"]["inductor_vec_isa"] = f"unknown ({e.__class__.__name__})"
    torch_reset_compiled(torch)
    log(f"[{threads} thr] torch.compile warm-up {res['torch_compile_warmup_s']:.1f} s")

    for key in keys:
        spec = W.BY_KEY[key]
        n = big_reps if key == "w6" else reps
        tw = time.perf_counter()
        res["workloads"][key] = bench_workload(spec, n, miss_reps, torch_miss_reps, cagrad,
                                               torch, cc_ctx, tc_ctx, counter, blas)
        r = res["workloads"][key]
        bw = r["backward_us"]
        log(f"[{threads} thr] {key} {spec.title}: backward median us  "
            + "  ".join(f"{c} {bw[c]['median']:.0f}" for c in CONFIGS if bw[c])
            + f"  ({time.perf_counter() - tw:.1f} s)")
        torch_reset_compiled(torch)
        cagrad.compiled_autograd.reset()
        trim_heap()
    res["wall_s"] = time.perf_counter() - t_start
    return res


def torch_compiled_first(tl, torch):
    """The first backward under PyTorch's compiled autograd (a miss): (seconds, gradients,
    None), or (None, None, the error) when it cannot run the workload. PyTorch 2.13 refuses
    a create_graph grad of a gradient it compiled ("torch.compile does not currently support
    higher order gradients"): that configuration is then left out of the workload."""
    try:
        seconds = tl.backward_once(True)
    except RuntimeError as e:
        if TORCH_NO_HIGHER_ORDER not in str(e):
            raise  # any other failure stops the run
        torch_reset_compiled(torch)
        msg = f"{type(e).__name__}: {str(e).strip().splitlines()[0]}"
        log(f"warning: torch compiled autograd cannot run this workload: {msg}")
        return None, None, msg
    return seconds, tl.grads(), None


def bench_workload(spec, reps, miss_reps, torch_miss_reps, cagrad, torch, cc_ctx, tc_ctx,
                   counter, blas):
    out = {"title": spec.title, "detail": spec.detail, "reps": reps}
    phase = {}
    t_phase = time.perf_counter()

    def mark(name):
        nonlocal t_phase
        now = time.perf_counter()
        phase[name] = now - t_phase
        t_phase = now

    out["harness_phase_s"] = phase
    tl = Lib(torch, spec.build, tc_ctx)
    cl = Lib(cagrad, spec.build, cc_ctx)
    mark("build")

    # -- gradients, before anything is timed ------------------------------------------
    ref = Lib(torch, lambda L: spec.build(L, np.float64), None)
    ref.backward_once(False)
    g_ref = ref.grads()
    del ref
    mark("float64 reference")
    tl.backward_once(False)
    g_t32 = tl.grads()
    torch_loss = tl.last_loss
    before = torch_ca_counters(torch)
    torch_miss_s, g_tc, tc_error = torch_compiled_first(tl, torch)
    out["torch_compiled_error"] = tc_error
    configs = [c for c in CONFIGS if c != "tc" or tc_error is None]
    mark("torch eager + compile")
    after = torch_ca_counters(torch)
    out["torch_compiled_counters_first"] = {k: after.get(k, 0) - before.get(k, 0)
                                            for k in after}
    cl.backward_once(False)
    g_ce = cl.grads()
    cagrad.compiled_autograd.reset()
    caps0 = cagrad.compiled_autograd.counters["captures"]
    cl.backward_once(True)
    g_cc_miss = cl.grads()
    # graphs a miss captures: one per backward that compiles (create_graph ones run eagerly
    # in cagrad today; PyTorch captures those too)
    captures = {"cagrad": cagrad.compiled_autograd.counters["captures"] - caps0,
                "torch": None if tc_error else out["torch_compiled_counters_first"].get(
                    "captures", 0)}
    out["captures_per_miss"] = captures
    cl.backward_once(True)
    g_cc_hit = cl.grads()
    out["loss"] = {"torch": torch_loss, "cagrad": cl.last_loss}
    out["grad_check"] = check_grads(spec, cl.b.names, g_ref, g_t32,
                                    {"cagrad eager": g_ce, "cagrad compiled (miss)": g_cc_miss,
                                     "cagrad compiled (hit)": g_cc_hit})
    tc_err = None if g_tc is None else max(rel_err(g, r) for g, r in zip(g_tc, g_ref))
    out["grad_check"]["torch_compiled_err"] = tc_err
    if tc_err is not None and tc_err > 10 * max(out["grad_check"]["torch32_err"]) + 100 * U32:
        log(f"warning: {spec.key}: torch compiled autograd's gradients differ from torch "
            f"eager's (relative error {tc_err:.3g})")

    mark("gradient check")
    # -- cagrad's miss cost (and its own compile timer), measured like PyTorch's ---------
    big = spec.key == "w6"
    cagrad_miss = miss_cost(cl, lambda: cagrad_reset(cagrad),
                            max(5, miss_reps // 3) if big else miss_reps,
                            internal=cagrad.compiled_autograd.compile_seconds,
                            captures=max(1, captures["cagrad"]))
    mark("cagrad misses")

    # -- steady state: alternate the configs rep by rep ------------------------------------
    runners = {
        "ce": lambda: cl.step(False, counter),
        "cc": lambda: cl.step(True, counter),
        "te": lambda: tl.step(False, counter),
        "tc": lambda: tl.step(True, counter),
    }
    sg = (Sgemm(blas, spec.gemms, cagrad.get_num_threads())
          if spec.gemms and blas is not None else None)
    # w6 takes 0.3-0.6 s per step: no untimed step per rep, and no warm pass either when
    # there are few reps (every configuration already ran above)
    if not big or reps >= 10:
        for c in configs:
            runners[c]()
        if sg:
            sg.run()
    c_before = dict(cagrad.compiled_autograd.counters)
    t_before = torch_ca_counters(torch)
    rec = {c: {"fwd": [], "bw": [], "step": [], "allocs": [], "bytes": []} for c in configs}
    sgemm_s = []
    order = list(configs) + (["sgemm"] if sg else [])
    gc.collect()
    gc.disable()
    try:
        for r in range(reps):
            k = r % len(order)
            for c in order[k:] + order[:k]:  # rotate, so no config always runs first
                time.sleep(GAP_S)
                if c == "sgemm":
                    sgemm_s.append(sg.run())
                    continue
                if not big:
                    runners[c]()  # untimed: wakes this configuration's threads
                f, b, s, a, y = runners[c]()
                d = rec[c]
                d["fwd"].append(f * 1e6)
                d["bw"].append(b * 1e6)
                d["step"].append(s * 1e6)
                d["allocs"].append(a)
                d["bytes"].append(y)
    finally:
        gc.enable()
    mark("timed reps")
    c_after = dict(cagrad.compiled_autograd.counters)
    t_after = torch_ca_counters(torch)
    out["cagrad_counters_steady"] = {k: c_after[k] - c_before.get(k, 0) for k in c_after}
    out["torch_counters_steady"] = {k: t_after.get(k, 0) - t_before.get(k, 0) for k in t_after}

    # -- the plan's work and span (at 1 thread only: see plan_profile) ---------------------
    if cagrad.get_num_threads() == 1:
        out["plan_profile"] = plan_profile(cagrad, cl, 3 if big else 15)
        mark("plan profile")

    # -- PyTorch's miss cost: the same code, after the steady reps (each miss is a cold
    # compile of seconds, whose garbage and caches should not sit under the timed reps) --
    torch_miss = None if tc_error else miss_cost(tl, lambda: torch_cold_compile(torch),
                                                 torch_miss_reps,
                                                 captures=max(1, captures["torch"]))
    mark("torch misses")

    out["samples_us"] = {c: {m: [round(v, 1) for v in rec[c][m]] for m in ("bw", "step")}
                         for c in configs}  # per rep, in the order they ran
    if sgemm_s:
        out["samples_us"]["sgemm"] = [round(v * 1e6, 1) for v in sgemm_s]
    # a configuration that cannot run the workload (tc on a third-order graph) gets None
    def per_config(m, active=True):
        return {c: stats(rec[c][m]) if c in rec and active else None for c in CONFIGS}

    out["backward_us"] = per_config("bw")
    out["step_us"] = per_config("step")
    out["forward_us"] = per_config("fwd")
    out["allocs_per_backward"] = per_config("allocs", counter.active)
    out["alloc_bytes_per_backward"] = per_config("bytes", counter.active)
    # Three views of a miss. cagrad's internal compile timer (compile_seconds(): trace,
    # graph passes and memory plan); and for both libraries what a miss adds to a backward
    # measured the same way (miss_cost: the miss minus the steady backwards around it).
    torch_miss = torch_miss or {"cost": None, "miss_backward": None, "steady_backward": None,
                                "reps": 0}
    ca_reps, to_reps = cagrad_miss["reps"], torch_miss["reps"]
    out["compile_us"] = {
        "cagrad": cagrad_miss.pop("internal"),
        "cagrad_miss_cost": cagrad_miss["cost"],
        "cagrad_miss_backward": cagrad_miss["miss_backward"],
        "torch_miss_cost": torch_miss["cost"],
        "torch_miss_backward": torch_miss["miss_backward"],
        "cagrad_steady_backward": cagrad_miss["steady_backward"],
        "torch_steady_backward": torch_miss["steady_backward"],
        "cagrad_method": f"compiled_autograd.compile_seconds() after each of {ca_reps} "
                         "misses following reset(): trace, graph passes and memory plan, "
                         "timed inside the library; running the graph is not included",
        "miss_cost_method": "per rep: a steady-state backward B, a reset of the compile "
                            "caches, the miss backward M, a steady-state backward A; the "
                            "figure is M - (B + A) / 2, the same code for both libraries "
                            f"({ca_reps} reps for cagrad, {to_reps} for PyTorch)",
        "torch_reset": "compiled autograd and dynamo reset, inductor's in-memory caches "
                       "cleared and a fresh empty inductor cache directory per miss "
                       "(torch._inductor.utils.fresh_cache): a cold compile",
        "cagrad_reset": "compiled_autograd.reset()",
        "torch_first_backward": None if torch_miss_s is None else torch_miss_s * 1e6,
    }
    out["miss_runs"] = {"cagrad": cagrad_miss, "torch": None if tc_error else torch_miss}
    if sg:
        flops = W.gemm_flops(spec.gemms)
        out["gemm"] = {
            "flops": flops,
            "shapes": [list(g) for g in spec.gemms],
            "floor": spec.gemm_floor,
            "sgemm_us": stats([s * 1e6 for s in sgemm_s]),
            "blas": "cblas_sgemm of cagrad's OpenBLAS (ctypes), beta=0, same shapes and "
                    "transposes, alternated with the backwards; at n > 1 threads the faster "
                    "of OpenBLAS threaded at n and at 1",
        }
        med = statistics.median(sgemm_s)
        out["gemm"]["sgemm_gflops"] = flops / med / 1e9
        out["gemm"]["gflops"] = {c: flops / (out["backward_us"][c]["median"] * 1e-6) / 1e9
                                 for c in CONFIGS}
    return out


# ---------------------------------------------------------------------------------------
# The RSS child: one library per process
# ---------------------------------------------------------------------------------------
def run_rss(lib_name, threads, keys, steps, compiled):
    """Peak RSS of one library alone. Per workload, once the model is built: VmHWM is reset
    (clear_refs) and read after `steps` eager training steps, and again around `steps`
    compiled ones (after the first compiled step, which compiles, and is read separately).
    ru_maxrss is the whole process's peak."""
    base = rss_mb()
    L = import_cagrad(threads) if lib_name == "cagrad" else import_torch(threads)
    imported = rss_mb()
    if lib_name == "cagrad":
        ctx = L.compiled_autograd.enable
    else:
        ctx = torch_compiled_ctx(L) if compiled else None  # imports torch._dynamo
    out = {"lib": lib_name, "threads": threads, "python_rss_mb": base,
           "import_rss_mb": imported, "hwm_reset": reset_peak_rss(), "workloads": {}}
    counter = AllocCounter()
    for key in keys:
        spec = W.BY_KEY[key]
        trim_heap()
        before = rss_mb()
        lib = Lib(L, spec.build, ctx)
        trim_heap()  # drop the NumPy temporaries of the initialisation
        reset_peak_rss()
        start = rss_mb()
        for _ in range(steps):
            lib.step(False, counter)
        r = {"before_build_mb": before, "start_mb": start, "eager_peak_mb": peak_rss_mb()}
        if ctx is not None:
            reset_peak_rss()
            try:
                lib.step(True, counter)  # the miss
            except RuntimeError as e:  # torch compiled autograd and a third-order graph
                if TORCH_NO_HIGHER_ORDER not in str(e):
                    raise
                r["compiled_error"] = str(e).strip().splitlines()[0]
                torch_reset_compiled(L)
                out["workloads"][key] = r
                del lib
                continue
            r["compile_peak_mb"] = peak_rss_mb()
            reset_peak_rss()
            for _ in range(steps):
                lib.step(True, counter)
            r["compiled_peak_mb"] = peak_rss_mb()
        out["workloads"][key] = r
        del lib
        if lib_name == "cagrad":
            L.compiled_autograd.reset()
        elif ctx is not None:
            torch_reset_compiled(L)
    out["process_peak_mb"] = maxrss_mb()
    return out


# ---------------------------------------------------------------------------------------
def main(argv):
    import argparse

    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=("timing", "rss"), required=True)
    ap.add_argument("--threads", type=int, required=True)
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--big-reps", type=int, default=50)
    ap.add_argument("--miss-reps", type=int, default=31, help="cagrad's miss reps")
    ap.add_argument("--torch-miss-reps", type=int, default=5,
                    help="PyTorch's miss reps (each a cold compile of seconds)")
    ap.add_argument("--workloads", default=",".join(W.BY_KEY))
    ap.add_argument("--lib", choices=("cagrad", "torch"))
    ap.add_argument("--rss-steps", type=int, default=3)
    ap.add_argument("--no-compiled", action="store_true")
    ap.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    keys = [k for k in a.workloads.split(",") if k]
    try:
        if a.mode == "timing":
            res = run_timing(a.threads, a.reps, a.big_reps, a.miss_reps,
                             a.torch_miss_reps, keys)
        else:
            res = run_rss(a.lib, a.threads, keys, a.rss_steps, not a.no_compiled)
    except Mismatch as e:
        log(f"\nGRADIENT MISMATCH ({a.threads} thread(s)): {e}")
        return 3
    with open(a.out, "w") as f:
        json.dump(res, f, indent=1, default=_json_default)
    return 0


def _json_default(o):
    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, float) and math.isnan(o):
        return None
    return str(o)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
