"""DistributedDataParallel's cost at N ranks: the backward with its gradient allreduces
against the backward alone, and how much of the communication hides behind compute.

    mpirun -np 2 --oversubscribe python benchmarks/ddp_bench.py [--reps 20] [--width 512]
           [--depth 4] [--batch 64] [--bucket-cap-mb 25] [--compiled] [--json out.json]

Rank 0 prints, for an MLP (depth layers of width x width, float32):
  backward alone        the model's backward without DDP (the same on every rank)
  backward + allreduce  the same backward through DDP (buckets allreduced as they fill)
  allreduce alone       blocking allreduces of the same buckets with no backward running
  exposed comm          (backward + allreduce) - backward alone
  hidden share          1 - exposed / allreduce alone (0: nothing overlaps; 1: all hidden)
and the allreduce time against message size, fitted as alpha + bytes / bandwidth: the cost
model docs/distributed.md uses to predict scaling. Medians over --reps timed repetitions.
"""

import argparse
import json
import statistics
import time

import cagrad
import cagrad.distributed as dist
from cagrad import compiled_autograd
from cagrad.nn.parallel import DistributedDataParallel as DDP


def mlp(width, depth):
    layers = []
    for _ in range(depth):
        layers += [cagrad.nn.Linear(width, width), cagrad.nn.Tanh()]
    return cagrad.nn.Sequential(*layers)


def timed_backwards(model, x, reps, compiled):
    """Median seconds of loss.backward() (the forward is outside the timing)."""
    times = []
    for i in range(reps + 2):  # 2 warm-up runs: captures, first allocations
        model.zero_grad(set_to_none=False)
        loss = model(x).square().mean()
        dist.barrier()  # every rank starts its backward together
        t0 = time.perf_counter()
        if compiled:
            with compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def timed_allreduce(tensors, reps):
    times = []
    for i in range(reps + 2):
        dist.barrier()
        t0 = time.perf_counter()
        for t in tensors:
            dist.all_reduce(t, op=dist.ReduceOp.AVG)
        if i >= 2:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def fit_cost_model(reps):
    """allreduce seconds at several sizes, least-squares alpha + bytes * beta."""
    sizes = [1 << k for k in (10, 14, 17, 20, 22)]  # float32 elements: 4 KiB .. 16 MiB
    points = []
    for n in sizes:
        t = timed_allreduce([cagrad.zeros(n)], max(3, reps // 2))
        points.append((4 * n, t))
    mean_b = sum(b for b, _ in points) / len(points)
    mean_t = sum(t for _, t in points) / len(points)
    beta = sum((b - mean_b) * (t - mean_t) for b, t in points) / \
        sum((b - mean_b) ** 2 for b, _ in points)
    alpha = max(mean_t - beta * mean_b, 0.0)
    return alpha, beta, points


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--width", type=int, default=512)
    ap.add_argument("--depth", type=int, default=4)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--bucket-cap-mb", type=float, default=None)
    ap.add_argument("--compiled", action="store_true", help="backwards under compiled autograd")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()

    dist.init_process_group("mpi")
    rank, world = dist.get_rank(), dist.get_world_size()
    cagrad.manual_seed(0)
    x = cagrad.randn(args.batch, args.width)
    plain = mlp(args.width, args.depth)
    alone = timed_backwards(plain, x, args.reps, args.compiled)

    ddp = DDP(mlp(args.width, args.depth), bucket_cap_mb=args.bucket_cap_mb)
    with_comm = timed_backwards(ddp, x, args.reps, args.compiled)
    buckets = [cagrad.zeros(b.numel, dtype=b.dtype) for b in ddp.reducer.buckets]
    comm = timed_allreduce(buckets, args.reps)
    alpha, beta, points = fit_cost_model(args.reps)

    grad_bytes = sum(4 * b.numel for b in ddp.reducer.buckets)
    exposed = max(with_comm - alone, 0.0)
    hidden = min(max(1.0 - exposed / comm, 0.0), 1.0) if comm > 0 else 1.0
    result = {
        "world_size": world, "width": args.width, "depth": args.depth, "batch": args.batch,
        "compiled": args.compiled, "buckets": len(buckets), "grad_bytes": grad_bytes,
        "backward_alone_ms": 1e3 * alone, "backward_allreduce_ms": 1e3 * with_comm,
        "allreduce_alone_ms": 1e3 * comm, "exposed_comm_ms": 1e3 * exposed,
        "hidden_share": hidden, "alpha_us": 1e6 * alpha,
        "bandwidth_GBps": (1 / beta / 1e9) if beta > 0 else float("inf"),
        "allreduce_points": [{"bytes": b, "ms": 1e3 * t} for b, t in points],
    }
    if rank == 0:
        print(f"DDP at {world} ranks: MLP {args.depth} x {args.width}^2 (float32, "
              f"{grad_bytes / 2**20:.1f} MiB of gradients in {len(buckets)} buckets), "
              f"batch {args.batch} per rank, {'compiled' if args.compiled else 'eager'} "
              f"backward, medians of {args.reps}")
        print(f"  backward alone        {1e3 * alone:8.2f} ms")
        print(f"  backward + allreduce  {1e3 * with_comm:8.2f} ms")
        print(f"  allreduce alone       {1e3 * comm:8.2f} ms")
        print(f"  exposed comm          {1e3 * exposed:8.2f} ms")
        print(f"  hidden share          {100 * hidden:8.1f} %")
        print(f"  allreduce model       {1e6 * alpha:.1f} us + bytes / "
              f"{result['bandwidth_GBps']:.2f} GB/s")
        for b, t in points:
            print(f"    {b / 1024:10.0f} KiB  {1e3 * t:8.3f} ms")
        if args.json:
            with open(args.json, "w") as f:
                json.dump(result, f, indent=1)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
