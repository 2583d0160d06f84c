"""Keep a many-core run of scripts/bench-scaling.sh in benchmarks/results_16_cores.json.

    python benchmarks/keep_scaling.py OUT/results.json --label "run 1: every workload" \
        --code 19a79cf --machine "a lent 16-core server: ..." --command "..." [--append]

`make bench` runs on the 2-core CI machine, so the figures from a bigger one are kept in
their own file, which benchmarks/report.py tables under "On 16 cores" on every run. Each
run keeps, per thread count and workload, the medians of the four configurations, the
GEMM rates and the compiled plan's counters. Without --append the file holds this run
alone (the machine or the code changed); with it, the run is added after the others and
its cells take precedence where it measured them.
"""
import argparse
import json
import os

KEEP = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results_16_cores.json")


def cell(w):
    """One workload at one thread count: the medians (µs) and what explains them."""
    b = w["backward_us"]
    # a configuration that cannot run the workload (torch compiled on w11) has no figure
    out = {c: round(b[c]["median"], 1) for c in ("ce", "cc", "te", "tc") if b.get(c)}
    gemm = w.get("gemm")
    if gemm and gemm.get("sgemm_us"):
        flops = gemm["flops"]
        out["gflops_cc"] = round(flops / b["cc"]["median"] / 1e3, 1)
        out["gflops_sgemm"] = round(flops / gemm["sgemm_us"]["median"] / 1e3, 1)
    steady = w.get("cagrad_counters_steady", {})
    for k in ("side_by_side_runs", "cache_hits"):
        if k in steady:
            out["hits" if k == "cache_hits" else k] = steady[k]
    return out


def run_entry(results, label, code):
    meta = results["meta"]
    libs = results["environment"]["libs"]
    return {
        "label": label, "code": code, "date": meta["date"], "mode": meta["mode"],
        "argv": meta["argv"], "cpu": results["environment"]["host"]["cpu"], "libs": libs,
        "threads": {n: {k: cell(w) for k, w in r["workloads"].items()}
                    for n, r in results["runs"].items()},
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("results", help="results.json written by scripts/bench-scaling.sh")
    ap.add_argument("--label", required=True)
    ap.add_argument("--code", required=True, help="the commit measured")
    ap.add_argument("--machine", help="the machine, in words (kept from the file if omitted)")
    ap.add_argument("--command", help="the command run (kept from the file if omitted)")
    ap.add_argument("--append", action="store_true", help="add to the runs already kept")
    ap.add_argument("--out", default=KEEP)
    a = ap.parse_args()
    with open(a.results) as f:
        results = json.load(f)
    kept = {}
    if os.path.exists(a.out):
        with open(a.out) as f:
            kept = json.load(f)
    machine = a.machine or kept.get("machine")
    command = a.command or kept.get("command")
    if not machine or not command:
        ap.error("--machine and --command are needed when the file has none")
    runs = kept.get("runs", []) if a.append else []
    runs.append(run_entry(results, a.label, a.code))
    with open(a.out, "w") as f:
        json.dump({"machine": machine, "command": command, "runs": runs}, f, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
