"""The DataLoader iterator with worker processes.

Each worker has its own index queue; all answer on one result queue. The main process
keeps prefetch_factor tasks per worker in flight, handed out round-robin, numbers them,
and returns the results in task order whatever order they arrive in. Workers stop when
the epoch ends (unless persistent), when the iterator is garbage-collected, or when the
main process dies (they watch their parent's pid).
"""

import itertools
import multiprocessing
import queue

from .dataloader import _BaseDataLoaderIter
from .worker import (MP_STATUS_CHECK_INTERVAL, ExceptionWrapper, WorkerArgs,
                     _IterableDatasetStopIteration, _ResumeIteration, worker_loop)


class _MultiProcessingDataLoaderIter(_BaseDataLoaderIter):
    """Batches read by num_workers processes, returned in the sampler's order."""

    def __init__(self, loader):
        super().__init__(loader)
        self._prefetch_factor = loader.prefetch_factor
        self._in_order = loader.in_order
        context = loader.multiprocessing_context or multiprocessing.get_context()
        self._shutdown = True  # until the workers exist, there is nothing to shut down
        self._result_queue = context.Queue()
        self._done_event = context.Event()
        self._index_queues = []
        self._workers = []
        self._shutdown = False
        for worker_id in range(self._num_workers):
            self._start_worker(context, loader, worker_id)
        self._reset(loader, first_iter=True)

    def _start_worker(self, context, loader, worker_id):
        args = WorkerArgs(self._is_iterable, self._dataset, self._auto_collation,
                          self._collate_fn, self._drop_last, self._base_seed,
                          loader.worker_init_fn, worker_id, self._num_workers)
        index_queue = context.Queue()
        # a worker that is gone never reads the rest: closing must not wait for it
        index_queue.cancel_join_thread()
        process = context.Process(target=worker_loop,
                                  args=(args, index_queue, self._result_queue,
                                        self._done_event), daemon=True)
        process.start()
        # only started workers are listed, so that shutdown never joins an unstarted one
        self._index_queues.append(index_queue)
        self._workers.append(process)

    # ------------------------------------------------------------------ epochs
    def _reset(self, loader, first_iter=False):
        super()._reset(loader, first_iter)
        self._send_idx = 0  # the next task id to hand out
        self._rcvd_idx = 0  # the next task id to return
        self._task_info = {}  # task id -> [worker id] or [worker id, data]
        self._tasks_outstanding = 0
        self._workers_status = [True] * self._num_workers
        self._worker_cycle = itertools.cycle(range(self._num_workers))
        if not first_iter:
            self._resume_workers()
        for _ in range(self._prefetch_factor * self._num_workers):
            self._try_put_index()

    def _resume_workers(self):
        """Tell persistent workers a new epoch starts; drop the old epoch's leftovers
        until every worker has answered."""
        for index_queue in self._index_queues:
            index_queue.put(_ResumeIteration())
        waiting = self._num_workers
        while waiting > 0:
            task_id, _ = self._get_data()
            if isinstance(task_id, _ResumeIteration):
                waiting -= 1

    # ------------------------------------------------------------------ tasks
    def _try_put_index(self):
        """Hand the next index to the next worker still fetching, if any."""
        try:
            index = self._next_index()
        except StopIteration:
            return
        for _ in range(self._num_workers):
            worker_id = next(self._worker_cycle)
            if self._workers_status[worker_id]:
                break
        else:
            return  # every worker has finished its stream
        self._index_queues[worker_id].put((self._send_idx, index))
        self._task_info[self._send_idx] = [worker_id]
        self._tasks_outstanding += 1
        self._send_idx += 1

    def _next_pending_task(self):
        """Advance to the next task that has data or whose worker still works; False when
        the epoch has nothing more to return."""
        while self._rcvd_idx < self._send_idx:
            info = self._task_info.get(self._rcvd_idx)
            if info and (len(info) == 2 or self._workers_status[info[0]]):
                return True
            self._task_info.pop(self._rcvd_idx, None)  # its worker ended: never answered
            self._rcvd_idx += 1
        return False

    def _next_data(self):
        while True:
            if not self._next_pending_task():
                if not self._persistent_workers:
                    self._shutdown_workers()
                raise StopIteration
            info = self._task_info[self._rcvd_idx]
            if len(info) == 2:  # arrived earlier, out of order
                del self._task_info[self._rcvd_idx]
                self._rcvd_idx += 1
                return self._process_data(info[1])
            task_id, data = self._get_data()
            self._tasks_outstanding -= 1
            if isinstance(data, _IterableDatasetStopIteration):
                self._worker_finished(data.worker_id)
                self._try_put_index()
            elif task_id != self._rcvd_idx and self._in_order:
                self._task_info[task_id].append(data)
            elif task_id != self._rcvd_idx:  # in_order=False: return it now, skip it later
                del self._task_info[task_id]
                return self._process_data(data)
            else:
                del self._task_info[task_id]
                self._rcvd_idx += 1
                return self._process_data(data)

    def _worker_finished(self, worker_id):
        """A worker's copy of an IterableDataset is exhausted: send it no more tasks
        (and let it exit, unless it must wait for the next epoch)."""
        self._workers_status[worker_id] = False
        if not self._persistent_workers:
            self._index_queues[worker_id].put(None)

    def _process_data(self, data):
        self._try_put_index()
        if isinstance(data, ExceptionWrapper):
            data.reraise()
        return data

    # ------------------------------------------------------------------ receiving
    def _get_data(self):
        """The next (task id, data) from any worker, waiting at most timeout seconds
        (if set) and checking meanwhile that no worker died."""
        if self._timeout > 0:
            try:
                return self._result_queue.get(timeout=self._timeout)
            except queue.Empty:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds") \
                    from None
        while True:
            try:
                return self._result_queue.get(timeout=MP_STATUS_CHECK_INTERVAL)
            except queue.Empty:
                self._check_workers_alive()

    def _check_workers_alive(self):
        dead = [w.pid for i, w in enumerate(self._workers)
                if self._workers_status[i] and not w.is_alive()]
        if dead:
            self._shutdown_workers()
            pids = ", ".join(str(pid) for pid in dead)
            raise RuntimeError(f"DataLoader worker (pid(s) {pids}) exited unexpectedly")

    # ------------------------------------------------------------------ shutdown
    def _shutdown_workers(self):
        """Stop every worker: ask them to end, give them a moment, then terminate the
        ones still running. Safe to call more than once."""
        if self._shutdown:
            return
        self._shutdown = True
        try:
            self._done_event.set()
            for index_queue in self._index_queues:
                index_queue.put(None)
            for process in self._workers:
                process.join(timeout=MP_STATUS_CHECK_INTERVAL)
            for index_queue in self._index_queues:
                index_queue.close()
            self._result_queue.cancel_join_thread()
            self._result_queue.close()
        finally:
            for process in self._workers:
                if process.is_alive():
                    process.terminate()

    def __del__(self):
        # also when the loop over the loader stops early and drops the iterator
        if getattr(self, "_shutdown", True) is False:
            self._shutdown_workers()
