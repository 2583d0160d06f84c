"""cagrad.distributed, DistributedDataParallel and DistributedSampler in one process,
against torch 2.13: names, arguments, errors, and the sampler's index split. The runs
across ranks under mpirun are tests/python/test_distributed_mpi.py."""

import datetime

import pytest
import torch
import torch.distributed as tdist
from torch.utils.data.distributed import DistributedSampler as TorchSampler

import cagrad as ca
import cagrad.distributed as dist
from cagrad.utils.data.distributed import DistributedSampler


def test_names_and_availability():
    assert dist.is_available() is ca._C.dist_is_available()
    assert dist.is_mpi_available() is dist.is_available()
    assert dist.is_nccl_available() is tdist.is_nccl_available() is False
    assert dist.is_initialized() is tdist.is_initialized() is False
    assert dist.ReduceOp.SUM.name == "SUM" and dist.ReduceOp.AVG is not dist.ReduceOp.SUM
    assert ca.nn.parallel.DistributedDataParallel.__name__ == "DistributedDataParallel"
    assert ca.utils.data.DistributedSampler is DistributedSampler


@pytest.mark.parametrize("name", ["get_rank", "get_world_size", "get_backend", "barrier"])
def test_before_init_is_a_value_error_as_torch(name):
    for lib_dist in (tdist, dist):
        with pytest.raises(ValueError, match="process group has not been initialized"):
            getattr(lib_dist, name)()


def test_collective_before_init_is_a_value_error_as_torch():
    for lib, lib_dist in ((torch, tdist), (ca, dist)):
        with pytest.raises(ValueError, match="process group has not been initialized"):
            lib_dist.all_reduce(lib.ones(2))
    with pytest.raises(ValueError, match="Invalid process group"):
        dist.destroy_process_group()


def test_other_backends_and_bad_timeouts_are_refused():
    with pytest.raises(RuntimeError, match="backend 'nccl' is not available.*mpirun"):
        dist.init_process_group("nccl")
    with pytest.raises(RuntimeError, match="backend 'gloo'"):
        dist.init_process_group(backend="gloo")
    for lib_dist in (tdist, dist):
        with pytest.raises(TypeError, match="Expected timeout argument to be of type "
                                            "datetime.timedelta"):
            lib_dist.init_process_group("mpi" if lib_dist is dist else "gloo", timeout=30)
    with pytest.raises(ValueError, match="timeout must be positive"):
        dist.init_process_group("mpi", timeout=datetime.timedelta(0))
    assert dist.is_initialized() is False


def test_ddp_needs_a_process_group_as_torch():
    for lib in (torch, ca):
        with pytest.raises(ValueError, match="process group has not been initialized"):
            lib.nn.parallel.DistributedDataParallel(lib.nn.Linear(2, 2))


class _Data:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n


@pytest.mark.parametrize("n", [0, 1, 5, 8, 10, 11])
@pytest.mark.parametrize("replicas", [1, 2, 3, 4])
@pytest.mark.parametrize("drop_last", [False, True])
def test_sampler_split_matches_torch_without_shuffle(n, replicas, drop_last):
    if n == 0 and not drop_last:
        pytest.skip("torch divides by zero padding an empty dataset")
    for rank in range(replicas):
        kw = dict(num_replicas=replicas, rank=rank, shuffle=False, drop_last=drop_last)
        want = TorchSampler(_Data(n), **kw)
        got = DistributedSampler(_Data(n), **kw)
        assert list(got) == list(want), (rank, list(got), list(want))
        assert len(got) == len(want)
        assert (got.num_samples, got.total_size) == (want.num_samples, want.total_size)


def test_sampler_shuffle_partitions_one_permutation_per_epoch():
    n, replicas = 10, 3
    for epoch in (0, 1):
        shares = []
        for rank in range(replicas):
            s = DistributedSampler(_Data(n), num_replicas=replicas, rank=rank, seed=4)
            s.set_epoch(epoch)
            shares.append(list(s))
            assert list(s) == shares[-1]  # the same order each time it is iterated
        padded = sum(shares, [])
        assert sorted(set(padded)) == list(range(n)) and len(padded) == 12
        if epoch == 0:
            first = shares
    assert shares != first  # set_epoch changes the order


def test_sampler_errors_as_torch():
    for cls in (TorchSampler, DistributedSampler):
        with pytest.raises(ValueError, match=r"Invalid rank 2, rank should be in the interval "
                                             r"\[0, 1\]"):
            cls(_Data(4), num_replicas=2, rank=2)
        with pytest.raises(ValueError, match="Invalid rank -1"):
            cls(_Data(4), num_replicas=2, rank=-1)
    if dist.is_available():
        with pytest.raises(ValueError, match="process group has not been initialized"):
            DistributedSampler(_Data(4))
    else:
        with pytest.raises(RuntimeError, match="Requires distributed package to be available"):
            DistributedSampler(_Data(4))
