"""Run under `mpirun -np 2`: cagrad.distributed's collectives and DistributedDataParallel
checked on every rank against PyTorch 2.13 in one process on the whole batch.

tests/python/test_distributed_mpi.py starts it and reads the "CHECK name" lines each rank
prints; any failed assertion ends the rank with a traceback (and a non-zero exit code).
"""

import os
import sys
import time

import numpy as np
import torch

import cagrad
import cagrad.distributed as dist
from cagrad import compiled_autograd
from cagrad.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
IN, HID, OUT, BATCH = 5, 7, 3, 8  # BATCH: the whole batch, split evenly over the ranks


T0 = time.monotonic()


def done(name):
    print(f"CHECK {name} rank {RANK} ({time.monotonic() - T0:.1f} s)", flush=True)


def close(got, want, what, rtol=1e-5, atol=1e-6):
    got = np.asarray(got.detach().numpy() if hasattr(got, "detach") else got, dtype=np.float64)
    want = np.asarray(want.detach().numpy() if hasattr(want, "detach") else want,
                      dtype=np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} vs {want.shape}"
    assert np.allclose(got, want, rtol=rtol, atol=atol), \
        f"{what}: max abs diff {np.abs(got - want).max()}"


def check_collectives():
    for dtype in (cagrad.float32, cagrad.float64, cagrad.int64):
        t = cagrad.tensor([1, 2, 3], dtype=dtype) * (RANK + 1)
        dist.all_reduce(t)
        ranks = WORLD * (WORLD + 1) // 2
        assert t.tolist() == [ranks, 2 * ranks, 3 * ranks], (dtype, t.tolist())
    for op, want in ((dist.ReduceOp.PRODUCT, np.prod), (dist.ReduceOp.MIN, np.min),
                     (dist.ReduceOp.MAX, np.max)):
        values = [[r + 2, 5 - 3 * r] for r in range(WORLD)]
        t = cagrad.tensor(values[RANK], dtype=cagrad.int64)
        dist.all_reduce(t, op=op)
        assert t.tolist() == want(np.array(values), axis=0).tolist(), (op, t.tolist())
    try:
        dist.all_reduce(cagrad.ones(2), op=dist.ReduceOp.BXOR)
    except RuntimeError as e:
        assert "BXOR is not supported" in str(e), e
    else:
        raise AssertionError("BXOR was accepted")
    t = cagrad.tensor([2.0, 4.0], dtype=cagrad.float64) * (RANK + 1)
    work = dist.all_reduce(t, op=dist.ReduceOp.AVG, async_op=True)
    assert work.wait() is True
    mean = (WORLD + 1) / 2
    close(t, [2 * mean, 4 * mean], "all_reduce AVG")
    b = cagrad.full((2, 2), float(RANK))
    dist.broadcast(b, src=WORLD - 1)
    close(b, np.full((2, 2), WORLD - 1.0), "broadcast")
    outs = [cagrad.zeros(3, dtype=cagrad.int64) for _ in range(WORLD)]
    work = dist.all_gather(outs, cagrad.tensor([RANK, 10 * RANK, -RANK]), async_op=True)
    work.wait()
    assert [o.tolist() for o in outs] == [[r, 10 * r, -r] for r in range(WORLD)]
    assert dist.barrier() is None
    assert dist.get_backend() == "mpi"
    done("collectives")


def make_pair(seed):
    """The same MLP in cagrad (seeded differently on each rank: DDP must broadcast rank 0's
    weights) and, with rank 0's weights, in torch."""
    torch.manual_seed(seed)
    ref = torch.nn.Sequential(torch.nn.Linear(IN, HID), torch.nn.Tanh(),
                              torch.nn.Linear(HID, OUT))
    cagrad.manual_seed(seed + 1000 * RANK)
    mine = cagrad.nn.Sequential(cagrad.nn.Linear(IN, HID), cagrad.nn.Tanh(),
                                cagrad.nn.Linear(HID, OUT))
    if RANK == 0:
        with cagrad.no_grad():
            for p, q in zip(mine.parameters(), ref.parameters()):
                p.copy_(cagrad.tensor(q.detach().numpy()))
    return mine, ref


def batch(seed):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((BATCH, IN)).astype(np.float32)
    y = rng.standard_normal((BATCH, OUT)).astype(np.float32)
    return x, y


def shard(a):
    n = BATCH // WORLD
    return cagrad.tensor(a[RANK * n:(RANK + 1) * n])


def ref_grads(ref, batches):
    ref.zero_grad()
    for x, y in batches:
        torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(y)).backward()
    return [p.grad.clone() for p in ref.parameters()]


def check_grads(compiled):
    mine, ref = make_pair(1)
    ddp = DDP(mine, bucket_cap_mb=0.0001)  # tiny buckets: several launches per backward
    assert len(ddp.reducer.buckets) > 1
    for p, q in zip(ddp.module.parameters(), ref.parameters()):
        close(p, q, "parameters broadcast from rank 0")
    x, y = batch(2)
    want = ref_grads(ref, [(x, y)])
    compiled_autograd.reset()
    for step in range(2):
        ddp.zero_grad()
        loss = cagrad.nn.functional.mse_loss(ddp(shard(x)), shard(y))
        if compiled:
            with compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        for (name, p), g in zip(ddp.module.named_parameters(), want):
            close(p.grad, g, f"{'compiled' if compiled else 'eager'} grad of {name}")
    if compiled:
        c = compiled_autograd.counters
        assert c["captures"] == 1 and c["cache_hits"] == 1, dict(c)
    done("grads_compiled" if compiled else "grads_eager")


def check_no_sync():
    mine, ref = make_pair(3)
    ddp = DDP(mine)
    micro = [batch(4), batch(5)]
    want = ref_grads(ref, micro)
    with ddp.no_sync():
        (x, y) = micro[0]
        cagrad.nn.functional.mse_loss(ddp(shard(x)), shard(y)).backward()
    local = [p.grad.clone() for p in ddp.module.parameters()]
    x, y = micro[1]
    cagrad.nn.functional.mse_loss(ddp(shard(x)), shard(y)).backward()
    for p, g in zip(ddp.module.parameters(), want):
        close(p.grad, g, "no_sync then sync")
    # the no_sync backward left rank-local gradients (not averaged)
    first = ref_grads(ref, [micro[0]])
    assert not all(np.allclose(a.numpy(), b.numpy()) for a, b in zip(local, first))
    done("no_sync")


def check_training_stays_in_step():
    mine, ref = make_pair(6)
    ddp = DDP(mine)
    opt = cagrad.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    momentum = [None] * len(list(ref.parameters()))
    for step in range(50):
        x, y = batch(100 + step)
        opt.zero_grad()
        with compiled_autograd.enable():
            cagrad.nn.functional.mse_loss(ddp(shard(x)), shard(y)).backward()
        opt.step()
        # torch.optim.SGD(lr=0.1, momentum=0.9)'s update, written out: torch.optim's first
        # step imports torch._dynamo, which takes seconds
        ref.zero_grad()
        torch.nn.functional.mse_loss(ref(torch.tensor(x)), torch.tensor(y)).backward()
        with torch.no_grad():
            for i, q in enumerate(ref.parameters()):
                momentum[i] = q.grad.clone() if momentum[i] is None else \
                    momentum[i].mul_(0.9).add_(q.grad)
                q.sub_(0.1 * momentum[i])
    for (name, p), q in zip(ddp.module.named_parameters(), ref.parameters()):
        everyone = [cagrad.zeros(p.shape) for _ in range(WORLD)]
        dist.all_gather(everyone, p.detach().contiguous())
        for r in range(1, WORLD):
            assert np.array_equal(everyone[r].numpy(), everyone[0].numpy()), \
                f"{name} differs between rank 0 and rank {r} after 50 steps"
        close(p, q, f"{name} after 50 steps against torch on the whole batch", 1e-4, 1e-5)
    assert list(ddp.state_dict())[0] == "module.0.weight"
    done("training_50_steps")


class TwoHeads(cagrad.nn.Module):
    """head_b is used on rank 0 only; never_used on no rank."""

    def __init__(self):
        super().__init__()
        self.body = cagrad.nn.Linear(IN, HID)
        self.head_a = cagrad.nn.Linear(HID, OUT)
        self.head_b = cagrad.nn.Linear(HID, OUT)
        self.never_used = cagrad.nn.Linear(HID, OUT)

    def forward(self, x, use_b):
        h = self.body(x).tanh()
        return self.head_a(h) + (self.head_b(h) if use_b else 0)


def check_find_unused():
    cagrad.manual_seed(7)
    model = TwoHeads()
    ddp = DDP(model, find_unused_parameters=True)
    x = cagrad.ones(2, IN) * (RANK + 1)
    ddp(x, use_b=RANK == 0).sum().backward()
    assert model.never_used.weight.grad is None
    # head_b's gradient is rank 0's, averaged with zeros from the ranks that skipped it
    cagrad.manual_seed(7)
    solo = TwoHeads()
    solo(cagrad.ones(2, IN), use_b=True).sum().backward()
    close(model.head_b.weight.grad, solo.head_b.weight.grad / WORLD, "locally unused param")
    ddp.zero_grad()
    ddp(x, use_b=RANK == 0).sum().backward()  # a second iteration completes as well
    done("find_unused_parameters")

    strict = DDP(TwoHeads())  # find_unused_parameters=False
    strict(x, use_b=True).sum().backward()  # never_used gets no gradient: reduction unfinished
    try:
        strict(x, use_b=True)
    except RuntimeError as e:
        assert "Expected to have finished reduction" in str(e), e
    else:
        raise AssertionError("an unfinished reduction was not reported")
    done("unfinished_reduction")


class WithBuffers(cagrad.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = cagrad.nn.Linear(IN, OUT)
        self.register_buffer("count", cagrad.tensor([RANK + 1], dtype=cagrad.int64))
        self.register_buffer("table", (cagrad.ones(3, 2) * RANK).t())  # not contiguous

    def forward(self, x):
        return self.lin(x) * self.table.sum()


def check_buffers():
    model = WithBuffers()
    ddp = DDP(model)
    assert model.count.tolist() == [1] and model.table.tolist() == [[0.0] * 3] * 2
    with cagrad.no_grad():
        model.count.add_(RANK)
        model.table.add_(RANK)
    ddp(cagrad.ones(1, IN))  # broadcast_buffers: rank 0's buffers again before forward
    assert model.count.tolist() == [1] and model.table.tolist() == [[0.0] * 3] * 2
    done("buffers")


def check_shape_mismatch():
    width = HID + (1 if RANK == 1 else 0)
    model = cagrad.nn.Sequential(cagrad.nn.Linear(IN, width), cagrad.nn.Linear(width, OUT))
    try:
        DDP(model)
    except RuntimeError as e:
        assert "DDP expects same model across all ranks, but Rank 1" in str(e), e
        assert "params[0] ('0.weight')" in str(e), e
    else:
        raise AssertionError("mismatched shapes were not detected")
    done("shape_mismatch")


def main():
    global RANK, WORLD
    dist.init_process_group(backend="mpi")
    RANK, WORLD = dist.get_rank(), dist.get_world_size()
    assert BATCH % WORLD == 0
    check_collectives()
    check_grads(compiled=False)
    check_grads(compiled=True)
    check_no_sync()
    check_training_stays_in_step()
    check_find_unused()
    check_buffers()
    check_shape_mismatch()
    # a Work never waited for outlives the group and MPI itself (freed at interpreter
    # exit, after MPI_Finalize): it must not call MPI then
    global PENDING
    PENDING = dist.all_reduce(cagrad.ones(3), async_op=True)
    dist.destroy_process_group()
    print(f"ALL OK rank {RANK}", flush=True)


if __name__ == "__main__":
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    main()
