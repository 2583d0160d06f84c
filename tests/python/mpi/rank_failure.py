"""Run under `mpirun -np 2`: a rank that hangs or dies must not hang the others forever.

    rank_failure.py hang   rank 1 never joins; rank 0's all_reduce (and DDP's backward)
                           fails with RuntimeError at the 2 s timeout, then leaving the
                           group aborts the job (which ends rank 1 too)
    rank_failure.py die    rank 1 exits at once; Open MPI's launcher ends the job

tests/python/test_distributed_mpi.py checks the lines printed here and the time taken.
"""

import datetime
import os
import sys
import time

import cagrad
import cagrad.distributed as dist
from cagrad.nn.parallel import DistributedDataParallel as DDP

TIMEOUT_S = 2.0


def hang(rank):
    if rank == 1:
        time.sleep(120)  # "hangs": ended by rank 0's abort long before this
        return
    model = DDP(cagrad.nn.Linear(3, 2))  # construction itself needs rank 1: done above
    t0 = time.monotonic()
    try:
        model(cagrad.ones(4, 3)).sum().backward()
    except RuntimeError as e:
        print(f"RANK0 CAUGHT after {time.monotonic() - t0:.2f} s: {e}", flush=True)
    try:
        dist.all_reduce(cagrad.ones(2))
    except RuntimeError as e:
        print(f"RANK0 AGAIN: {e}", flush=True)


def main():
    mode = sys.argv[1]
    dist.init_process_group("mpi", timeout=datetime.timedelta(seconds=TIMEOUT_S))
    rank = dist.get_rank()
    if mode == "hang":
        if rank == 1:
            # join DDP's construction (shape check, broadcast), then stop taking part
            DDP(cagrad.nn.Linear(3, 2))
        hang(rank)
    elif mode == "die":
        if rank == 1:
            os._exit(3)
        dist.all_reduce(cagrad.ones(2))
    dist.destroy_process_group()  # after a timeout: MPI_Abort ends every rank


if __name__ == "__main__":
    main()
