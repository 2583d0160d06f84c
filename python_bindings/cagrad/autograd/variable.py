"""torch.autograd.Variable: the legacy name of Tensor (isinstance(t, Variable) holds for every
tensor) and Variable._execution_engine, whose queue_callback(fn) runs fn once the backward
running now has finished, before backward() / grad() returns: hooks use it for work that
needs every gradient (as PyTorch's DistributedDataParallel once did)."""

from .. import _C

__all__ = ["Variable", "VariableMeta"]

# One queue per backward running, innermost last (a backward started inside a hook, such
# as checkpointing's recomputation, nests). Backwards run one at a time in the process
# (the library lock), and a hook may run on another thread than the one that called
# backward(), so this is process-wide rather than per thread.
_running = []

# Hook removals asked for while a backward ran, done when no backward runs any more: the C
# engine walks a tensor's or node's hook list while it calls the hooks, and unlinking the
# entry it stands on (a hook that removes itself, as PyTorch allows) would free it under it.
_deferred = []


def _after_backwards(fn):
    """fn() now, or once no backward is running (see _deferred)."""
    if _running:
        _deferred.append(fn)
    else:
        fn()


class _ExecutionEngine:
    def queue_callback(self, callback):
        """Run callback() when the current backward ends (in queue order; a callback may
        queue more). Outside a backward: RuntimeError, as in PyTorch."""
        if not _running:
            raise RuntimeError("Final callbacks can only be installed during backward pass.")
        if _C.custom_tracing():  # a recorded backward runs on trial gradients, once: it
            # must run for real, a call-out, in every compiled backward instead
            _C.custom_refuse_tracing("it queues a callback (queue_callback)")
            return
        _running[-1].append(callback)


class _Queue(list):
    """The callbacks of one backward, and what multi-grad hooks read of it: the tensors it
    starts from and its `inputs` (None where the caller did not say), and the nodes it will
    run, worked out once (autograd.graph)."""

    __slots__ = ("roots", "inputs", "running_nodes")


class _BackwardScope:
    """Around one backward: its queue, run when the backward succeeded, dropped when it
    raised. roots / inputs: the backward's output tensors and inputs, where known."""

    def __init__(self, roots=None, inputs=None):
        self.roots, self.inputs = roots, inputs

    def __enter__(self):
        self.queue = _Queue()
        self.queue.roots, self.queue.inputs = self.roots, self.inputs or None
        self.queue.running_nodes = None
        _running.append(self.queue)

    def __exit__(self, exc_type, exc, tb):
        try:
            i = 0
            while exc_type is None and i < len(self.queue):
                self.queue[i]()
                i += 1
        finally:
            _running.pop()
            while not _running and _deferred:
                _deferred.pop(0)()
        return False


class VariableMeta(type):
    def __instancecheck__(cls, other):
        from .._tensor import Tensor
        return isinstance(other, Tensor)


class Variable(metaclass=VariableMeta):
    """Variable(t, requires_grad=False) gives a tensor over t's data, as PyTorch's legacy
    constructor does."""

    _execution_engine = _ExecutionEngine()

    def __new__(cls, data, requires_grad=False, volatile=False):
        out = data.detach()
        if requires_grad:
            out.requires_grad_(True)
        return out
