"""cagrad against PyTorch eager and PyTorch compiled autograd, side by side (issue 5).

    make bench          # full run: 1 and 2 threads, 50 reps, writes the three outputs
    make bench-quick    # --quick: fewer reps, under 2 minutes

    PYTHONPATH=build/python .venv/bin/python benchmarks/bench.py [--quick] [--threads 1,2]
        [--workloads w1,w5] [--build-dir build] [--report-only]

For each thread count a child process (measure.py) runs every workload on both libraries
in one process, alternating rep by rep, after checking that cagrad's gradients (eager and
compiled) match PyTorch's; a mismatch fails the run (exit 3). OPENBLAS_NUM_THREADS,
CAGRAD_NUM_THREADS, OMP_NUM_THREADS and MKL_NUM_THREADS are set in the child's
environment, before any BLAS loads, and torch.set_num_threads / cagrad.set_num_threads
get the same number. The child runs with LD_PRELOAD=build/libmalloc_count.so, which counts
heap allocations. Peak RSS comes from separate processes that import one library each.
OPENBLAS_CORETYPE is never set here: a value from the caller is passed on and reported.

Outputs: benchmarks/results.json (raw figures), docs/benchmarks.md (tables, targets, how
to reproduce) and docs/benchmarks.png (speedup chart).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

import measure  # noqa: E402
import report  # noqa: E402
import workloads as W  # noqa: E402

# miss_reps: cagrad's miss reps (a third, at least 5, for workload 6); torch_miss_reps:
# PyTorch's, each a cold compile of seconds.
FULL = {"reps": 50, "big_reps": 50, "miss_reps": 31, "torch_miss_reps": 5, "rss_steps": 3,
        "lookup_reps": 50}
QUICK = {"reps": 15, "big_reps": 3, "miss_reps": 11, "torch_miss_reps": 3, "rss_steps": 2,
         "lookup_reps": 20}


def log(msg=""):
    print(msg, flush=True)


def fail(msg, code=1):
    print(f"bench: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def child_env(base, threads, build_dir, shim, cache_dir):
    env = dict(base)
    for k in ("OPENBLAS_NUM_THREADS", "CAGRAD_NUM_THREADS", "OMP_NUM_THREADS",
              "MKL_NUM_THREADS"):
        env[k] = str(threads)
    if shim:
        env["LD_PRELOAD"] = shim + (":" + base["LD_PRELOAD"] if base.get("LD_PRELOAD") else "")
    pp = [os.path.join(build_dir, "python"), HERE]
    if base.get("PYTHONPATH"):
        pp.append(base["PYTHONPATH"])
    env["PYTHONPATH"] = os.pathsep.join(pp)
    env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir
    # Skip inductor's start-up probe that compiles a test program per vector ISA (~7 s
    # per process); it picks the same ISA (reported) from the CPU flags either way.
    env.setdefault("TORCHINDUCTOR_VEC_ISA_OK", "1")
    env.setdefault("PYTHONHASHSEED", "0")
    return env


def run_children(jobs):
    """Run measure.py once per (args, env, what) job, all at once; return their JSONs.
    Exit on a gradient mismatch (exit code 3) or any failure."""
    procs = []
    for args, env, what in jobs:
        fd, out = tempfile.mkstemp(suffix=".json", prefix="cagrad-bench-")
        os.close(fd)
        cmd = [sys.executable, os.path.join(HERE, "measure.py")] + args + ["--out", out]
        procs.append((subprocess.Popen(cmd, env=env, cwd=ROOT, stdout=subprocess.PIPE,
                                       text=True), out, what))
    results, err = [], None
    for p, out, what in procs:
        stdout, _ = p.communicate()
        try:
            if p.returncode == 3:
                err = err or (f"{what}: cagrad's gradients do not match PyTorch's (see "
                              "above); nothing was written", 3)
            elif p.returncode != 0:
                err = err or (f"{what} failed (exit {p.returncode}); if cagrad was being "
                              "rebuilt meanwhile, rerun", 1)
            else:
                with open(out) as f:
                    res = json.load(f)
                res["_stdout"] = stdout
                results.append(res)
        finally:
            os.unlink(out)
    if err:
        fail(*err)
    return results


def run_child(args, env, what):
    return run_children([(args, env, what)])[0]


def lookup_per_node(build_dir, env, reps):
    """cagrad's cache-lookup cost per node, from benchmarks/bench_compiled.c: it times the
    walk + key collection + trie lookup on a cached graph, which Python cannot isolate."""
    exe = os.path.join(build_dir, "bench_compiled")
    if not os.access(exe, os.X_OK):
        return {"error": f"{exe} not built"}
    env = {k: v for k, v in env.items() if k != "LD_PRELOAD"}
    try:
        p = subprocess.run([exe, str(reps)], env=env, capture_output=True, text=True,
                           timeout=120)
    except (OSError, subprocess.SubprocessError) as e:
        return {"error": str(e)}
    res = {"source": "build/bench_compiled", "reps": reps}
    for block in p.stdout.split("\n\n"):
        m = re.search(r"cache lookup per node\s+([0-9.]+) us", block)
        if not m:
            continue
        title = block.strip().splitlines()[0]
        if title.startswith("MLP 784-256-256-10"):
            res["w1"] = {"us_per_node": float(m.group(1)), "graph": title}
        elif title.startswith("pointwise chain"):
            res["w5"] = {"us_per_node": float(m.group(1)),
                         "graph": title + " (mul/tanh/add/sigmoid cycle)"}
    return res


def host_environment():
    info = {"cpu": measure.cpu_info(),
            "python": platform.python_version(),
            "platform": platform.platform(),
            "gcc": measure.tool_version(["gcc", "--version"]),
            "g++ (inductor)": measure.tool_version(["g++", "--version"]),
            "OPENBLAS_CORETYPE": os.environ.get("OPENBLAS_CORETYPE")}
    try:
        info["load_average"] = os.getloadavg()
    except OSError:
        pass
    return info


def print_host(h):
    cpu = h["cpu"]
    log("Environment")
    log(f"  CPU            {cpu.get('model name', '?')} (family {cpu.get('cpu family')}, "
        f"model {cpu.get('model')}), {cpu.get('logical_cpus')} logical CPUs"
        + (", virtualised" if cpu.get("virtualised") else "")
        + f"; flags {' '.join(cpu.get('isa_flags', []))}")
    core = h["OPENBLAS_CORETYPE"]
    log("  OPENBLAS_CORETYPE " + (f"= {core} (set by the caller: passed on unchanged)" if core
                                  else "is not set (OpenBLAS detects the core)"))
    log(f"  Python {h['python']}, {h['gcc']}")
    log(f"  {h['platform']}, load average {h.get('load_average')}")


def print_environment(env):
    p = env["libs"]
    log("Environment (libraries, as seen by the first timing process)")
    bi = p["cagrad"]["blas_info"]
    log(f"  cagrad         {p['cagrad']['version']}: kernel ISA {bi['kernel_isa']}, "
        f"OpenBLAS core {bi['corename']}")
    ob = p["openblas"]
    log(f"  OpenBLAS       {ob.get('config', '?')} ({ob.get('path')}), "
        f"openblas_get_corename() = {ob.get('corename')}")
    t = p["torch"]
    log(f"  torch          {t['version']}: BLAS {t.get('blas')} {t.get('mkl_version', '')}; "
        f"ATen CPU capability {t['cpu_capability']}; inductor vector ISA "
        f"{t.get('inductor_vec_isa')}")
    log(f"  torch MKL path {env.get('mkl_verbose') or 'unknown'}")
    log(f"  numpy {p['numpy']}")


def save_json(path, results):
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    with open(path, "w") as f:
        json.dump(results, f, indent=1, default=str)
        f.write("\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="fewer reps; under 2 minutes")
    ap.add_argument("--threads", default="1,2", help="thread counts, e.g. 1,2")
    ap.add_argument("--workloads", default=",".join(W.BY_KEY), help="e.g. w1,w5")
    ap.add_argument("--reps", type=int, help="override the repetitions (all workloads)")
    ap.add_argument("--miss-reps", type=int, help="override cagrad's miss reps")
    ap.add_argument("--torch-miss-reps", type=int,
                    help="override PyTorch's miss reps (each a cold compile of seconds)")
    ap.add_argument("--build-dir", default=os.path.join(ROOT, "build"))
    ap.add_argument("--json", default=os.path.join(HERE, "results.json"))
    ap.add_argument("--md", default=os.path.join(ROOT, "docs", "benchmarks.md"))
    ap.add_argument("--png", default=os.path.join(ROOT, "docs", "benchmarks.png"))
    ap.add_argument("--report-only", action="store_true",
                    help="rewrite the .md and .png from the existing results JSON")
    a = ap.parse_args(argv)

    if a.report_only:
        with open(a.json) as f:
            results = json.load(f)
        results["targets"] = report.targets(results)  # derived figures: refresh them
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1, default=str)
            f.write("\n")
        report.write(results, a.md, a.png)
        log(report.console_summary(results))
        log(f"wrote {a.md} and {a.png}")
        return 0

    t_start = time.perf_counter()
    cfg = dict(QUICK if a.quick else FULL)
    if a.reps:
        cfg["reps"] = cfg["big_reps"] = a.reps
    if a.miss_reps:
        cfg["miss_reps"] = a.miss_reps
    if a.torch_miss_reps:
        cfg["torch_miss_reps"] = a.torch_miss_reps
    threads = [int(x) for x in a.threads.split(",") if x]
    keys = [k for k in a.workloads.split(",") if k]
    for k in keys:
        if k not in W.BY_KEY:
            fail(f"unknown workload {k!r}; choose from {', '.join(W.BY_KEY)}")
    build_dir = os.path.abspath(a.build_dir)
    if not os.path.isdir(os.path.join(build_dir, "python", "cagrad")):
        fail(f"{build_dir}/python/cagrad not found: run `make build` first")
    shim = os.path.join(build_dir, "libmalloc_count.so")
    if not os.path.exists(shim):
        fail(f"{shim} not found: configure with -DCAGRAD_BUILD_BENCHMARKS=ON and `make build`")

    tmp = tempfile.mkdtemp(prefix="cagrad-bench-")
    base = dict(os.environ)
    env = {"host": host_environment(), "libs": None, "mkl_verbose": None}
    print_host(env["host"])
    mode = "quick" if a.quick else "full"
    log(f"\nMode {mode}: {cfg['reps']} reps ({cfg['big_reps']} for w6), threads {threads}, "
        f"workloads {','.join(keys)}\n")
    runs, rss = {}, {}
    results = {
        "meta": {"date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
                 "mode": mode, "config": cfg, "threads": threads, "workloads": keys,
                 "argv": sys.argv[1:], "wall_s": None,
                 "command": "make bench-quick" if a.quick else "make bench"},
        "environment": env,
        "specs": {k: {"title": W.BY_KEY[k].title, "detail": W.BY_KEY[k].detail} for k in keys},
        "runs": runs,
        "rss": rss,
    }
    try:
        for i, n in enumerate(threads):
            # The process's inductor cache: a fresh one per thread count in full mode, one
            # for the run in quick mode. It serves the gradient check's first compile, the
            # steady reps and the RSS children; each timed PyTorch miss compiles into an
            # empty directory of its own (measure.torch_cold_compile).
            cache = os.path.join(tmp, "inductor" if a.quick else f"inductor-{n}")
            cenv = child_env(base, n, build_dir, shim, cache)
            tenv = dict(cenv)
            if i == 0:
                tenv["MKL_VERBOSE"] = "1"  # the child switches it off after one probe
            tt = time.perf_counter()
            log(f"== {n} thread(s): timing (both libraries, alternating)")
            r = run_child(["--mode", "timing", "--threads", str(n), "--reps", str(cfg["reps"]),
                           "--big-reps", str(cfg["big_reps"]),
                           "--miss-reps", str(cfg["miss_reps"]),
                           "--torch-miss-reps", str(cfg["torch_miss_reps"]),
                           "--workloads", ",".join(keys)], tenv, f"timing child ({n} threads)")
            out = r.pop("_stdout", "")
            if i == 0:
                env["libs"] = r["environment"]
                env["mkl_verbose"] = next(
                    (ln[len("MKL_VERBOSE "):] for ln in out.splitlines()
                     if ln.startswith("MKL_VERBOSE") and "Product build" in ln), None)
                print_environment(env)
            r["inductor_cache"] = ("cold (fresh directory)" if not a.quick or i == 0 else
                                   "shared with the earlier thread count in this run")
            r["lookup"] = lookup_per_node(build_dir, cenv, cfg["lookup_reps"])
            runs[str(n)] = r
            log(f"   {time.perf_counter() - tt:.0f} s")
            # Peak RSS: one process per library. Quick mode: first thread count only, and
            # torch's compiled autograd is left out (its compile alone takes ~20 s).
            if not a.quick or i == 0:
                tt = time.perf_counter()
                log(f"== {n} thread(s): peak RSS (one library per process)")
                jobs = []
                for lib in ("cagrad", "torch"):  # both at once: RSS does not mind the company
                    args = ["--mode", "rss", "--lib", lib, "--threads", str(n),
                            "--rss-steps", str(cfg["rss_steps"]), "--workloads", ",".join(keys)]
                    if a.quick and lib == "torch":
                        args.append("--no-compiled")
                    jobs.append((args, cenv, f"RSS child ({lib}, {n} threads)"))
                rss[str(n)] = {}
                for rr in run_children(jobs):
                    rr.pop("_stdout", None)
                    rss[str(n)][rr["lib"]] = rr
                log(f"   {time.perf_counter() - tt:.0f} s")
            # Written after each thread count, so a run cut short keeps what it measured
            # (meta.partial lists the thread counts still to come).
            results["meta"]["partial"] = threads[i + 1:] or None
            results["meta"]["wall_s"] = time.perf_counter() - t_start
            save_json(a.json, results)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

    wall = time.perf_counter() - t_start
    results["meta"]["wall_s"] = wall
    results["targets"] = report.targets(results)
    save_json(a.json, results)
    report.write(results, a.md, a.png)
    log("")
    log(report.console_summary(results))
    log(f"\nwrote {os.path.relpath(a.json, ROOT)}, {os.path.relpath(a.md, ROOT)}, "
        f"{os.path.relpath(a.png, ROOT)} in {wall:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
