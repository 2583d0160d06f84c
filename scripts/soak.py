"""Soak test: many compiled training steps of an MNIST-sized MLP, watching memory.

    PYTHONPATH=build/python .venv/bin/python scripts/soak.py [--steps 100000] [--every 1000]

Each step is a real training step under compiled autograd: fresh input batches (drawn
from a fixed pool of 16 batches, so the data's own memory is constant), forward,
backward, SGD with momentum, zero_grad(set_to_none=True). The process's resident set
(VmRSS from /proc/self/status) is sampled every --every steps; after the warm-up (the
first 10% of the steps) it must stay within --rss-slack-mb of its value at the end of the
warm-up, and the compiled cache must not grow: one capture, then only hits. Prints a
line per sample and a verdict; exits 1 when a bound is broken. docs/reliability.md keeps
the figures of a 100,000-step run.
"""
import argparse
import sys
import time

import numpy as np

import cagrad as torch
import cagrad.nn as nn
import cagrad.nn.functional as F


def rss_mb():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--steps", type=int, default=100_000)
    ap.add_argument("--every", type=int, default=1000)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--rss-slack-mb", type=float, default=2.0)
    ap.add_argument("--threads", type=int, default=1)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    model = nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(),
                          nn.Linear(256, 10))
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    pool = [(torch.tensor(rng.standard_normal((a.batch, 784)).astype(np.float32)),
             torch.tensor(rng.integers(0, 10, a.batch))) for _ in range(16)]
    warm = max(a.steps // 10, a.every)
    base = None
    worst = 0.0
    start = time.perf_counter()
    ca = torch.compiled_autograd
    with ca.enable():
        for step in range(1, a.steps + 1):
            x, y = pool[int(rng.integers(0, len(pool)))]
            opt.zero_grad(set_to_none=True)
            loss = F.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
            if step % a.every:
                continue
            rss = rss_mb()
            if step >= warm and base is None:
                base = rss
            grow = 0.0 if base is None else rss - base
            worst = max(worst, grow)
            c = ca.counters
            print(f"step {step:>7}: loss {loss.item():.4f}  RSS {rss:8.2f} MB  "
                  f"growth {grow:+6.2f} MB  captures {c['captures']}  hits {c['cache_hits']}"
                  f"  misses {c['cache_misses']}  fallbacks {c['eager_fallbacks']}",
                  flush=True)
    c = ca.counters
    secs = time.perf_counter() - start
    ok_rss = worst <= a.rss_slack_mb
    ok_cache = c["captures"] == 1 and c["cache_misses"] == 1 and c["eager_fallbacks"] == 0
    print(f"{a.steps} steps in {secs:.0f} s: RSS growth after warm-up at most {worst:.2f} MB "
          f"(bound {a.rss_slack_mb} MB): {'ok' if ok_rss else 'BROKEN'}; compiled cache: "
          f"{c['captures']} capture, {c['cache_misses']} miss, {c['cache_hits']} hits, "
          f"{c['eager_fallbacks']} fallbacks: {'ok' if ok_cache else 'BROKEN'}")
    return 0 if ok_rss and ok_cache else 1


if __name__ == "__main__":
    sys.exit(main())
