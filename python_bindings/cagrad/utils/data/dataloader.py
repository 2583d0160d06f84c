"""DataLoader: batches from a dataset, in the main process or in worker processes
(torch.utils.data.DataLoader, with its arguments, checks and messages)."""

import math
import multiprocessing
import os
import warnings

from ..._random import _random_seed
from .collate import default_collate, default_convert
from .dataset import IterableDataset
from .sampler import BatchSampler, RandomSampler, SequentialSampler, _InfiniteConstantSampler
from .worker import create_fetcher

__all__ = ["DataLoader"]

# attributes that the iterators and len() read, fixed once the loader is built
_FROZEN_ATTRIBUTES = ("batch_size", "batch_sampler", "sampler", "drop_last", "dataset",
                      "persistent_workers")


def _check_worker_options(num_workers, timeout, prefetch_factor, persistent_workers):
    """PyTorch's checks of the multiprocessing options; returns the prefetch factor."""
    if num_workers < 0:
        raise ValueError("num_workers option should be non-negative; use num_workers=0 to "
                         "disable multiprocessing.")
    if timeout < 0:
        raise ValueError("timeout option should be non-negative")
    if num_workers == 0 and prefetch_factor is not None:
        raise ValueError("prefetch_factor option could only be specified in multiprocessing."
                         "let num_workers > 0 to enable multiprocessing, otherwise set "
                         "prefetch_factor to None.")
    if num_workers > 0 and prefetch_factor is None:
        prefetch_factor = 2
    elif prefetch_factor is not None and prefetch_factor < 0:
        raise ValueError("prefetch_factor option should be non-negative")
    if persistent_workers and num_workers == 0:
        raise ValueError("persistent_workers option needs num_workers > 0")
    return prefetch_factor


def _check_iterable_options(shuffle, sampler, batch_sampler):
    """An IterableDataset decides its own order: no shuffle, sampler or batch_sampler."""
    if shuffle not in {False, None}:
        raise ValueError(f"DataLoader with IterableDataset: expected unspecified shuffle "
                         f"option, but got shuffle={shuffle}")
    if sampler is not None:
        raise ValueError(f"DataLoader with IterableDataset: expected unspecified sampler "
                         f"option, but got sampler={sampler}")
    if batch_sampler is not None:
        raise ValueError(f"DataLoader with IterableDataset: expected unspecified "
                         f"batch_sampler option, but got batch_sampler={batch_sampler}")


def _check_batching_options(batch_size, shuffle, sampler, batch_sampler, drop_last):
    if sampler is not None and shuffle:
        raise ValueError("sampler option is mutually exclusive with shuffle")
    if batch_sampler is not None:
        if batch_size != 1 or shuffle or sampler is not None or drop_last:
            raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                             "shuffle, sampler, and drop_last")
    elif batch_size is None and drop_last:
        raise ValueError("batch_size=None option disables auto-batching and is mutually "
                         "exclusive with drop_last")


def _default_sampler(dataset, is_iterable, shuffle, generator):
    if is_iterable:
        return _InfiniteConstantSampler()
    if shuffle:
        return RandomSampler(dataset, generator=generator)
    return SequentialSampler(dataset)


def _multiprocessing_context(context, num_workers):
    """None, a start method's name, or a multiprocessing context, as PyTorch takes it."""
    if context is None:
        return None
    if num_workers == 0:
        raise ValueError(f"multiprocessing_context can only be used with multi-process "
                         f"loading (num_workers > 0), but got num_workers={num_workers}")
    if isinstance(context, str):
        methods = multiprocessing.get_all_start_methods()
        if context not in methods:
            raise ValueError(f"multiprocessing_context option should specify a valid start "
                             f"method in {methods!r}, but got "
                             f"multiprocessing_context={context!r}")
        context = multiprocessing.get_context(context)
    if not isinstance(context, multiprocessing.context.BaseContext):
        raise TypeError(f"multiprocessing_context option should be a valid context object "
                        f"or a string specifying the start method, but got "
                        f"multiprocessing_context={context}")
    return context


class DataLoader:
    """Batches of a dataset: map-style (indices from a sampler) or iterable, batched by
    batch_size or a batch_sampler, collated by collate_fn, read in the main process
    (num_workers=0) or by num_workers worker processes, returned in order.

    pin_memory=True is accepted and does nothing (cagrad computes on the CPU; PyTorch
    warns the same way when it finds no accelerator)."""

    _initialized = False

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False,
                 timeout=0, worker_init_fn=None, multiprocessing_context=None,
                 generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True):
        prefetch_factor = _check_worker_options(num_workers, timeout, prefetch_factor,
                                                persistent_workers)
        self.dataset = dataset
        self.num_workers = num_workers
        self.prefetch_factor = prefetch_factor
        self.pin_memory = pin_memory
        self.pin_memory_device = pin_memory_device
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.multiprocessing_context = _multiprocessing_context(multiprocessing_context,
                                                                num_workers)
        self.in_order = in_order
        self._is_iterable = isinstance(dataset, IterableDataset)
        if self._is_iterable:
            _check_iterable_options(shuffle, sampler, batch_sampler)
        else:
            shuffle = bool(shuffle)
        _check_batching_options(batch_size, shuffle, sampler, batch_sampler, drop_last)
        if batch_sampler is not None:
            batch_size, drop_last = None, False
        if sampler is None:
            sampler = _default_sampler(dataset, self._is_iterable, shuffle, generator)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.generator = generator
        if collate_fn is None:
            collate_fn = default_collate if self._auto_collation else default_convert
        self.collate_fn = collate_fn
        self.persistent_workers = persistent_workers
        self._IterableDataset_len_called = None
        self._iterator = None
        self._initialized = True
        self.check_worker_number_rationality()

    def __setattr__(self, attr, val):
        if self._initialized and attr in _FROZEN_ATTRIBUTES:
            raise ValueError(f"{attr} attribute should not be set after "
                             f"{type(self).__name__} is initialized")
        super().__setattr__(attr, val)

    @property
    def _auto_collation(self):
        return self.batch_sampler is not None

    @property
    def _index_sampler(self):
        """What yields the fetcher's indices: lists of them when batching, else one."""
        return self.batch_sampler if self._auto_collation else self.sampler

    def _get_iterator(self):
        if self.num_workers == 0:
            return _SingleProcessDataLoaderIter(self)
        from .multiprocess import _MultiProcessingDataLoaderIter
        self.check_worker_number_rationality()
        return _MultiProcessingDataLoaderIter(self)

    def __iter__(self):
        # persistent workers live as long as the loader: one iterator, reset per epoch
        if self.persistent_workers and self.num_workers > 0:
            if self._iterator is None:
                self._iterator = self._get_iterator()
            else:
                self._iterator._reset(self)
            return self._iterator
        return self._get_iterator()

    def __len__(self):
        if not self._is_iterable:
            return len(self._index_sampler)
        # an iterable dataset's own __len__ (TypeError without one), in batches
        length = self._IterableDataset_len_called = len(self.dataset)
        if self.batch_size is not None:
            if self.drop_last:
                return length // self.batch_size
            return math.ceil(length / self.batch_size)
        return length

    def check_worker_number_rationality(self):
        """Warn, as PyTorch does, when there are more workers than usable CPUs."""
        if not self.num_workers:
            return
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") \
            else os.cpu_count()
        if cpus is None or self.num_workers > cpus:
            warnings.warn(
                f"This DataLoader will create {self.num_workers} worker processes in total. "
                f"Our suggested max number of worker in current system is {cpus}, which is "
                f"smaller than what this DataLoader is going to create. Please be aware that "
                f"excessive worker creation might get DataLoader running slow or even freeze, "
                f"lower the worker number to avoid potential slowness/freeze if necessary.",
                stacklevel=2)


class _BaseDataLoaderIter:
    """What both iterators share: the sampler's index stream, the base seed, and the
    check of an IterableDataset's reported length."""

    def __init__(self, loader):
        self._dataset = loader.dataset
        self._is_iterable = loader._is_iterable
        self._auto_collation = loader._auto_collation
        self._drop_last = loader.drop_last
        self._index_sampler = loader._index_sampler
        self._num_workers = loader.num_workers
        self._collate_fn = loader.collate_fn
        self._timeout = loader.timeout
        self._persistent_workers = loader.persistent_workers
        if loader.pin_memory:
            warnings.warn("'pin_memory' argument is set as true but no accelerator is found, "
                          "then device pinned memory won't be used.", stacklevel=5)
        self._sampler_iter = iter(self._index_sampler)
        # drawn with or without workers, so both see the same random stream afterwards
        self._base_seed = _random_seed(loader.generator)
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called

    def __iter__(self):
        return self

    def _reset(self, loader, first_iter=False):
        self._sampler_iter = iter(self._index_sampler)
        self._num_yielded = 0
        self._len_called = loader._IterableDataset_len_called

    def _next_index(self):
        return next(self._sampler_iter)  # StopIteration ends the epoch

    def __next__(self):
        data = self._next_data()
        self._num_yielded += 1
        if self._is_iterable and self._len_called is not None and \
                self._num_yielded > self._len_called:
            self._warn_length_exceeded()
        return data

    def _warn_length_exceeded(self):
        msg = (f"Length of IterableDataset {self._dataset} was reported to be "
               f"{self._len_called}(when accessing len(dataloader)), but {self._num_yielded} "
               f"samples have been fetched. ")
        if self._num_workers > 0:
            msg += ("For multiprocessing data-loading, this could be caused by not properly "
                    "configuring the IterableDataset replica at each worker.")
        warnings.warn(msg, stacklevel=3)

    def __len__(self):
        return len(self._index_sampler)

    def __getstate__(self):
        raise NotImplementedError(f"{type(self).__name__} cannot be pickled")


class _SingleProcessDataLoaderIter(_BaseDataLoaderIter):
    """Reads each batch in the main process when it is asked for."""

    def __init__(self, loader):
        super().__init__(loader)
        if self._timeout != 0:  # PyTorch's check: a timeout needs workers to wait for
            raise AssertionError("_SingleProcessDataLoaderIter requires timeout == 0")
        self._dataset_fetcher = create_fetcher(self._is_iterable, self._dataset,
                                               self._auto_collation, self._collate_fn,
                                               self._drop_last)

    def _next_data(self):
        index = self._next_index()
        return self._dataset_fetcher.fetch(index)  # an iterable's end raises StopIteration
