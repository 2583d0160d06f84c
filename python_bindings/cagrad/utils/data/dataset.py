"""Datasets: Dataset, IterableDataset, TensorDataset, Subset, ConcatDataset, ChainDataset
and random_split, with torch.utils.data's semantics and messages."""

import bisect
import collections.abc
import itertools
import math
import warnings

from ..._random import default_generator, randperm

__all__ = ["ChainDataset", "ConcatDataset", "Dataset", "IterableDataset", "Subset",
           "TensorDataset", "random_split"]


class Dataset:
    """A map-style dataset: subclasses define __getitem__ (and usually __len__)."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")

    def __add__(self, other):
        return ConcatDataset([self, other])


class IterableDataset(Dataset, collections.abc.Iterable):
    """A dataset that is a stream: subclasses define __iter__ (abstract, as in PyTorch).
    With num_workers > 0 each worker iterates its own copy; get_worker_info() tells a copy
    which part is its own."""

    def __add__(self, other):
        return ChainDataset([self, other])


class TensorDataset(Dataset):
    """Sample i is (t[i] for t in tensors); all tensors have the same first dimension."""

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class ConcatDataset(Dataset):
    """The samples of several map-style datasets, one after another."""

    @staticmethod
    def cumsum(sequence):
        return list(itertools.accumulate(len(d) for d in sequence))

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if len(self.datasets) == 0:
            raise AssertionError("datasets should not be an empty iterable")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise AssertionError("ConcatDataset does not support IterableDataset")
        self.cumulative_sizes = self.cumsum(self.datasets)

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, idx):
        if idx < 0:
            if -idx > len(self):
                raise ValueError("absolute value of index should not exceed dataset length")
            idx += len(self)
        which = bisect.bisect_right(self.cumulative_sizes, idx)
        start = self.cumulative_sizes[which - 1] if which > 0 else 0
        return self.datasets[which][idx - start]


class ChainDataset(IterableDataset):
    """The streams of several iterable datasets, one after another."""

    def __init__(self, datasets):
        self.datasets = datasets

    def _check(self, dataset):
        if not isinstance(dataset, IterableDataset):
            raise AssertionError("ChainDataset only supports IterableDataset")
        return dataset

    def __iter__(self):
        for d in self.datasets:
            yield from self._check(d)

    def __len__(self):
        return sum(len(self._check(d)) for d in self.datasets)


class Subset(Dataset):
    """The samples of dataset at the given indices, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices
        overrides_getitem = type(self).__getitem__ is not Subset.__getitem__
        if overrides_getitem and type(self).__getitems__ is Subset.__getitems__:
            raise NotImplementedError(
                f"{type(self).__name__} overrides __getitem__ but not __getitems__. When "
                f"subclassing Subset and overriding __getitem__, you must also override "
                f"__getitems__ so that the DataLoader uses your logic, e.g.:\n\n"
                f"def __getitems__(self, indices):\n"
                f"    return [self.__getitem__(idx) for idx in indices]")

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        """A batch at once: the DataLoader's fetcher calls this instead of __getitem__."""
        chosen = [self.indices[i] for i in indices]
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__(chosen)
        return [self.dataset[i] for i in chosen]

    def __len__(self):
        return len(self.indices)


def _lengths_from_fractions(total, fractions):
    """floor(total * fraction) each, then the remainder handed out one by one from the
    first split on (PyTorch's rule)."""
    lengths = []
    for i, frac in enumerate(fractions):
        if frac < 0 or frac > 1:
            raise ValueError(f"Fraction at index {i} is not between 0 and 1")
        lengths.append(math.floor(total * frac))
    for i in range(total - sum(lengths)):
        lengths[i % len(lengths)] += 1
    for i, length in enumerate(lengths):
        if length == 0:
            warnings.warn(f"Length of split at index {i} is 0. This might result in an empty "
                          f"dataset.", stacklevel=3)
    return lengths


def random_split(dataset, lengths, generator=default_generator):
    """Split dataset into non-overlapping Subsets of the given lengths (ints summing to
    len(dataset), or fractions summing to 1), in a random order drawn from generator."""
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        lengths = _lengths_from_fractions(len(dataset), lengths)
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input "
                         "dataset!")
    indices = randperm(sum(lengths), generator=generator).tolist()
    ends = itertools.accumulate(lengths)
    return [Subset(dataset, indices[end - length:end]) for end, length in zip(ends, lengths)]
