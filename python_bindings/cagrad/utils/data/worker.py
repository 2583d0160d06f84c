"""What runs inside a DataLoader worker process: WorkerInfo / get_worker_info, the
fetchers that turn indices into batches (also used without workers), the wrapper that
carries a worker's exception to the main process, and the worker loop itself."""

import dataclasses
import os
import queue
import random
import sys
import traceback

import numpy as np

from ... import _C
from ..._creation import manual_seed

__all__ = ["WorkerInfo", "get_worker_info"]

# how long (seconds) a waiting main process waits before it checks that its workers live,
# and how long shutdown waits for each worker to exit before terminating it
MP_STATUS_CHECK_INTERVAL = 5.0
# how often an idle worker checks that its parent lives and that shutdown has not begun.
# The stop message (None) normally arrives first, but not when the iterator is collected
# as part of a reference cycle: the queue's own finalizer may have closed its feed by then.
WORKER_POLL_INTERVAL = 0.5


@dataclasses.dataclass(frozen=True)
class WorkerInfo:
    """About the current worker: id (0..num_workers-1), num_workers, seed (this worker's,
    already applied to cagrad, random and numpy) and dataset (this process's copy)."""

    id: int
    num_workers: int
    seed: int
    dataset: object


_worker_info = None


def get_worker_info():
    """The WorkerInfo of this DataLoader worker process, or None in the main process."""
    return _worker_info


# ------------------------------------------------------------------------------ exceptions
class _KeyErrorMessage(str):
    """A KeyError shows repr() of its argument; this keeps a multi-line message readable."""

    def __repr__(self):
        return self


class ExceptionWrapper:
    """An exception caught in a worker, with its traceback as text, to raise again in the
    main process (exception objects and tracebacks themselves may not pickle)."""

    def __init__(self, exc_info=None, where="in background"):
        exc_info = exc_info or sys.exc_info()
        self.exc_type = exc_info[0]
        self.exc_msg = "".join(traceback.format_exception(*exc_info))
        self.where = where

    def reraise(self):
        """Raise the worker's exception type with the worker's traceback in its message
        (a RuntimeError when that type cannot be built from a message alone)."""
        msg = f"Caught {self.exc_type.__name__} {self.where}.\nOriginal {self.exc_msg}"
        if self.exc_type is KeyError:
            msg = _KeyErrorMessage(msg)
        try:
            exception = self.exc_type(msg)
        except Exception:
            raise RuntimeError(msg) from None
        raise exception


# ------------------------------------------------------------------------------ fetchers
class _MapDatasetFetcher:
    """dataset[i] for each index of a batch (or __getitems__ when the dataset has it),
    collated; one index when batching is off."""

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset = dataset
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn

    def fetch(self, possibly_batched_index):
        if not self.auto_collation:
            return self.collate_fn(self.dataset[possibly_batched_index])
        getitems = getattr(self.dataset, "__getitems__", None)
        if getitems:
            return self.collate_fn(getitems(possibly_batched_index))
        return self.collate_fn([self.dataset[i] for i in possibly_batched_index])


class _IterableDatasetFetcher:
    """The next len(batch) items of the dataset's stream, collated. Raises StopIteration
    when the stream is exhausted (or leaves a short last batch under drop_last)."""

    def __init__(self, dataset, auto_collation, collate_fn, drop_last):
        self.dataset_iter = iter(dataset)
        self.auto_collation = auto_collation
        self.collate_fn = collate_fn
        self.drop_last = drop_last
        self.ended = False

    def fetch(self, possibly_batched_index):
        if self.ended:
            raise StopIteration
        if not self.auto_collation:
            return self.collate_fn(next(self.dataset_iter))
        data = []
        for _ in possibly_batched_index:
            try:
                data.append(next(self.dataset_iter))
            except StopIteration:
                self.ended = True
                break
        if not data or (self.drop_last and len(data) < len(possibly_batched_index)):
            raise StopIteration
        return self.collate_fn(data)


def create_fetcher(is_iterable, dataset, auto_collation, collate_fn, drop_last):
    fetcher = _IterableDatasetFetcher if is_iterable else _MapDatasetFetcher
    return fetcher(dataset, auto_collation, collate_fn, drop_last)


# ------------------------------------------------------------------------------ worker loop
class _IterableDatasetStopIteration:
    """A worker's reply once its copy of an IterableDataset is exhausted."""

    def __init__(self, worker_id):
        self.worker_id = worker_id


class _ResumeIteration:
    """Sent to persistent workers at the start of a new epoch; they echo it back."""


@dataclasses.dataclass
class WorkerArgs:
    """Everything a worker process is started with (pickled under spawn)."""

    is_iterable: bool
    dataset: object
    auto_collation: bool
    collate_fn: object
    drop_last: bool
    base_seed: int
    init_fn: object
    worker_id: int
    num_workers: int


def _seed_worker(base_seed, worker_id):
    """Seed this worker's RNGs from the loader's base seed: cagrad's and Python's with
    base_seed + worker_id (as PyTorch does), numpy's legacy global one with a state mixed
    from both (PyTorch mixes them with its own hash; the values differ)."""
    seed = base_seed + worker_id
    random.seed(seed)
    manual_seed(seed)
    np.random.seed(np.random.SeedSequence([worker_id, base_seed]).generate_state(4))
    return seed


def _start_worker(args):
    """Set up the worker: one compute thread (the workers already run in parallel),
    seeds, WorkerInfo, worker_init_fn and the fetcher. Returns (fetcher, init_error)."""
    global _worker_info
    _C.set_num_threads(1)
    seed = _seed_worker(args.base_seed, args.worker_id)
    _worker_info = WorkerInfo(id=args.worker_id, num_workers=args.num_workers, seed=seed,
                              dataset=args.dataset)
    try:
        if args.init_fn is not None:
            args.init_fn(args.worker_id)
        return _new_fetcher(args), None
    except Exception:
        return None, ExceptionWrapper(where=f"in DataLoader worker process {args.worker_id}")


def _new_fetcher(args):
    return create_fetcher(args.is_iterable, args.dataset, args.auto_collation,
                          args.collate_fn, args.drop_last)


def _fetch(fetcher, index, args):
    """The batch for index, or what to send instead: the end of an iterable dataset's
    stream, or the exception the dataset raised."""
    try:
        return fetcher.fetch(index)
    except StopIteration:
        if args.is_iterable:
            return _IterableDatasetStopIteration(args.worker_id)
        return ExceptionWrapper(where=f"in DataLoader worker process {args.worker_id}")
    except Exception:
        return ExceptionWrapper(where=f"in DataLoader worker process {args.worker_id}")


def worker_loop(args, index_queue, data_queue, done_event):
    """Answer (task id, index) requests from index_queue with (task id, batch) on
    data_queue until told to stop (None) or until the main process is gone."""
    try:
        fetcher, init_error = _start_worker(args)
        iteration_end = False
        parent = os.getppid()
        while os.getppid() == parent:  # a re-parented worker has lost its DataLoader
            try:
                request = index_queue.get(timeout=WORKER_POLL_INTERVAL)
            except queue.Empty:
                if done_event.is_set():
                    break
                continue
            if isinstance(request, _ResumeIteration):
                data_queue.put((request, None))
                iteration_end = False
                fetcher = _new_fetcher(args) if init_error is None else None
                continue
            if request is None:
                break
            if done_event.is_set() or iteration_end:
                continue  # shutting down, or nothing left to fetch: ignore the request
            task_id, index = request
            if init_error is not None:
                data, init_error = init_error, None
            else:
                data = _fetch(fetcher, index, args)
            iteration_end = isinstance(data, _IterableDatasetStopIteration)
            data_queue.put((task_id, data))
            del data, request
    except KeyboardInterrupt:
        pass  # the main process gets it too and shuts the workers down
    if done_event.is_set():
        # nobody reads the rest: do not wait at exit for it to be flushed
        data_queue.cancel_join_thread()
        data_queue.close()
