"""cagrad.multiprocessing: torch.multiprocessing's API over Python's multiprocessing.

Everything of Python's multiprocessing is re-exported (Process, Queue, Pool, get_context,
set_start_method, ...), plus torch's spawn / start_processes with ProcessContext and its
exceptions, and the sharing-strategy functions.

A tensor whose memory is shared (Tensor.share_memory_(), Module.share_memory()) crosses
a process boundary as PyTorch's file_descriptor strategy sends it: its memory file's
descriptor goes over, and the other process maps the same memory, so Hogwild training
sees every process's updates (with the fork start method a forked child simply inherits
the mapping). Differences from PyTorch: any other tensor is pickled (a copy of the
values, see Tensor.__reduce_ex__), where PyTorch first moves it to shared memory; and the
sharing strategy can be read and set but changes nothing.
"""

import multiprocessing
import multiprocessing.connection
import os
import signal
import sys
import traceback
from multiprocessing import *  # noqa: F403 (torch.multiprocessing re-exports it all)

__all__ = list(multiprocessing.__all__) + [
    "spawn", "start_processes", "ProcessContext", "SpawnContext", "ProcessException",
    "ProcessRaisedException", "ProcessExitedException", "set_sharing_strategy",
    "get_sharing_strategy", "get_all_sharing_strategies"]

_STRATEGIES = {"file_descriptor", "file_system"}
_strategy = ["file_descriptor"]


def get_all_sharing_strategies():
    return set(_STRATEGIES)


def get_sharing_strategy():
    return _strategy[0]


def set_sharing_strategy(new_strategy):
    """Accepted for compatibility: cagrad pickles tensors, so no strategy is used."""
    if new_strategy not in _STRATEGIES:
        raise AssertionError(f"invalid sharing strategy {new_strategy!r}")
    _strategy[0] = new_strategy


# ------------------------------------------------------------------------------ shared tensors
def _reduce_tensor(t):
    """How multiprocessing's pickler sends a tensor: shared memory by its descriptor, any
    other tensor as a copy (Tensor.__reduce_ex__)."""
    from . import _C
    info = _C.shared_fd(t)
    if info is None:
        return t.__reduce_ex__(2)
    if t.requires_grad and not t.is_leaf:
        raise RuntimeError(
            "Cowardly refusing to serialize non-leaf tensor which requires_grad, since "
            "autograd does not support crossing process boundaries.  If you just want to "
            "transfer the data, call detach() on the tensor before serializing (e.g., "
            "putting it on the queue).")
    fd, nbytes, offset = info
    return (_rebuild_shared, (type(t), multiprocessing.reduction.DupFd(fd), nbytes, offset,
                              t._dtype, tuple(t.shape), tuple(t.stride()), t.requires_grad,
                              dict(t.__dict__)))


def _rebuild_shared(cls, dup, nbytes, offset, dtype, shape, strides, requires_grad, state):
    from . import _C
    from ._tensor import Tensor
    fd = dup.detach()
    try:
        base = _C.from_shared_fd(fd, nbytes, offset, dtype, shape, strides)
    finally:
        os.close(fd)
    t = Tensor.__new__(cls, base)
    t.requires_grad = requires_grad
    t.__dict__.update(state)
    return t


def _register_reducers():
    from multiprocessing.reduction import ForkingPickler

    from ._tensor import Tensor
    from .nn.parameter import Parameter
    for cls in (Tensor, Parameter):
        ForkingPickler.register(cls, _reduce_tensor)


_register_reducers()


# ------------------------------------------------------------------------------ exceptions
class ProcessException(Exception):
    """A spawned process failed (error_index: its rank, pid: its process id)."""

    def __init__(self, msg, error_index, pid):
        super().__init__(msg)
        self.msg, self.error_index, self.pid = msg, error_index, pid

    def __reduce__(self):
        return type(self), (self.msg, self.error_index, self.pid)


class ProcessRaisedException(ProcessException):
    """A spawned process raised an exception; the message holds its traceback."""


class ProcessExitedException(ProcessException):
    """A spawned process exited with a nonzero code or by a signal."""

    def __init__(self, msg, error_index, error_pid, exit_code, signal_name=None):
        super().__init__(msg, error_index, error_pid)
        self.exit_code, self.signal_name = exit_code, signal_name

    def __reduce__(self):
        return (type(self), (self.msg, self.error_index, self.pid, self.exit_code,
                             self.signal_name))


# ------------------------------------------------------------------------------ spawn
def _wrap(fn, i, args, error_queue):
    """The child's entry: fn(i, *args); an exception goes to the parent as its traceback."""
    try:
        fn(i, *args)
    except KeyboardInterrupt:
        pass
    except Exception:  # noqa: BLE001 - every error is reported to the parent
        error_queue.put(traceback.format_exc())
        sys.exit(1)


class ProcessContext:
    """The processes that start_processes(join=False) started; join() waits for them and
    raises the first failure as ProcessRaisedException / ProcessExitedException."""

    def __init__(self, processes, error_queues):
        self.processes, self.error_queues = processes, error_queues
        self.sentinels = {p.sentinel: i for i, p in enumerate(processes)}

    def pids(self):
        return [p.pid for p in self.processes]

    def join(self, timeout=None, grace_period=None):
        """True when every process has finished; False if the timeout passed first."""
        if not self.sentinels:
            return True
        ready = multiprocessing.connection.wait(list(self.sentinels), timeout=timeout)
        failed = None
        for sentinel in ready:
            i = self.sentinels.pop(sentinel)
            self.processes[i].join()
            if self.processes[i].exitcode != 0 and failed is None:
                failed = i
        if failed is None:
            return not self.sentinels
        for p in self.processes:  # one failed: stop the others, as PyTorch does
            if p.is_alive():
                p.terminate()
            p.join()
        self._raise(failed)

    def _raise(self, i):
        process = self.processes[i]
        if self.error_queues[i].empty():
            code = process.exitcode
            if code < 0:
                name = signal.Signals(-code).name
                raise ProcessExitedException(f"process {i} terminated with signal {name}", i,
                                             process.pid, code, name)
            raise ProcessExitedException(f"process {i} terminated with exit code {code}", i,
                                         process.pid, code)
        original = self.error_queues[i].get()
        msg = f"\n\n-- Process {i} terminated with the following error:\n" + original
        raise ProcessRaisedException(msg, i, process.pid)


SpawnContext = ProcessContext


def start_processes(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """Start nprocs processes running fn(i, *args) for i in range(nprocs) with the given
    start method; join=True waits for them (raising a child's error), join=False returns
    the ProcessContext."""
    ctx = multiprocessing.get_context(start_method)
    processes, queues = [], []
    for i in range(nprocs):
        queue = ctx.SimpleQueue()
        process = ctx.Process(target=_wrap, args=(fn, i, args, queue), daemon=daemon)
        process.start()
        processes.append(process)
        queues.append(queue)
    context = ProcessContext(processes, queues)
    if not join:
        return context
    while not context.join():
        pass
    return None


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method="spawn"):
    """torch.multiprocessing.spawn: start_processes with the 'spawn' start method."""
    if start_method != "spawn":
        import warnings
        warnings.warn(f"This method only supports start_method=spawn (got: {start_method}).\n"
                      f"To use a different start_method use:\n\t\t "
                      f"torch.multiprocessing.start_processes(...)", FutureWarning,
                      stacklevel=2)
    return start_processes(fn, args, nprocs, join, daemon, start_method="spawn")
