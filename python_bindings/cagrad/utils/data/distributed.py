"""DistributedSampler: each rank of a data-parallel job reads its own share of a dataset
(torch.utils.data.distributed.DistributedSampler)."""

import math

from ..._random import Generator, randperm
from .sampler import Sampler

__all__ = ["DistributedSampler"]


class DistributedSampler(Sampler):
    """Rank `rank` of `num_replicas` gets every num_replicas-th index, starting at its rank.
    Without drop_last the index list is padded by repeating its start so every rank gets
    the same count; with drop_last its tail is cut instead. shuffle=True permutes the
    indices with a generator seeded by seed + epoch (call set_epoch each epoch), the same
    permutation on every rank; it is cagrad's generator, so the order differs from torch's
    (the unshuffled order, the padding and the split are torch's exactly)."""

    def __init__(self, dataset, num_replicas=None, rank=None, shuffle=True, seed=0,
                 drop_last=False):
        if num_replicas is None or rank is None:
            from ... import distributed as dist
            if not dist.is_available():
                raise RuntimeError("Requires distributed package to be available")
            num_replicas = dist.get_world_size() if num_replicas is None else num_replicas
            rank = dist.get_rank() if rank is None else rank
        if rank >= num_replicas or rank < 0:
            raise ValueError(f"Invalid rank {rank}, rank should be in the interval "
                             f"[0, {num_replicas - 1}]")
        self.dataset = dataset
        self.num_replicas = num_replicas
        self.rank = rank
        self.epoch = 0
        self.drop_last = drop_last
        n = len(dataset)
        if drop_last and n % num_replicas != 0:
            # the largest equal share: the remainder is left out
            self.num_samples = math.ceil((n - num_replicas) / num_replicas)
        else:
            self.num_samples = math.ceil(n / num_replicas)
        self.total_size = self.num_samples * num_replicas
        self.shuffle = shuffle
        self.seed = seed

    def _order(self):
        n = len(self.dataset)
        if not self.shuffle:
            return list(range(n))
        gen = Generator()
        gen.manual_seed(self.seed + self.epoch)
        return randperm(n, generator=gen).tolist()

    def __iter__(self):
        indices = self._order()
        if self.drop_last:
            indices = indices[:self.total_size]
        else:
            missing = self.total_size - len(indices)
            repeats = math.ceil(missing / len(indices)) if indices else 0
            indices += (indices * repeats)[:missing]
        return iter(indices[self.rank:self.total_size:self.num_replicas])

    def __len__(self):
        return self.num_samples

    def set_epoch(self, epoch):
        """The epoch mixes into the shuffle's seed: call it before each epoch's iterator so
        that every epoch has a new order (the same on every rank)."""
        self.epoch = epoch
