"""cagrad.distributed: torch.distributed's process group and collectives over Open MPI.

Launch one process per rank with Open MPI (`mpirun -np 2 python train.py`); each calls
init_process_group(backend="mpi"). The collectives work in place on contiguous float32,
float64 and int64 tensors; async_op=True returns a Work to wait() on. A collective that a
peer never joins (it died or hangs) fails with RuntimeError once the timeout passes, naming
the rank and the collective; the group is then unusable and leaving it aborts the MPI job.
See docs/distributed.md.
"""

import atexit
import datetime
import enum
import warnings

from .. import _C

__all__ = ["is_available", "is_mpi_available", "is_nccl_available", "is_gloo_available",
           "is_initialized", "init_process_group", "destroy_process_group", "get_rank",
           "get_world_size", "get_backend", "all_reduce", "broadcast", "all_gather", "barrier",
           "ReduceOp", "Work", "group", "GroupMember", "Backend"]

_NO_GROUP = ("Default process group has not been initialized, please make sure to call "
             "init_process_group.")
_finalize_registered = False


class ReduceOp(enum.Enum):
    """The reductions of all_reduce. cagrad runs SUM, AVG, PRODUCT, MIN and MAX; the
    bitwise ones and PREMUL_SUM are named so that code which mentions them imports, and
    all_reduce refuses them."""
    SUM = 0
    AVG = 1
    PRODUCT = 2
    MIN = 3
    MAX = 4
    BAND = 5
    BOR = 6
    BXOR = 7
    PREMUL_SUM = 8
    UNUSED = 9


class Backend(str):
    MPI = "mpi"
    GLOO = "gloo"
    NCCL = "nccl"
    UCC = "ucc"


class GroupMember:
    WORLD = None  # the default group: cagrad has only that one
    NON_GROUP_MEMBER = -100


class group:  # noqa: N801 (torch's name)
    WORLD = None


def is_available():
    """True when this cagrad was built with Open MPI (CMake CAGRAD_MPI)."""
    return _C.dist_is_available()


def is_mpi_available():
    return _C.dist_is_available()


def is_nccl_available():
    return False


def is_gloo_available():
    return False


def is_initialized():
    return _C.dist_is_initialized()


def _timeout_seconds(timeout):
    if timeout is None:
        return 0.0  # the C side: $CAGRAD_DIST_TIMEOUT, else 30 minutes
    if not isinstance(timeout, datetime.timedelta):
        raise TypeError(f"Expected timeout argument to be of type datetime.timedelta, "
                        f"got {timeout}")
    seconds = timeout.total_seconds()
    if seconds <= 0:
        raise ValueError(f"timeout must be positive, got {timeout}")
    return seconds


def _finalize_at_exit():
    if _C.dist_is_available():
        try:
            _C.dist_finalize()
        except RuntimeError:
            pass  # MPI was never started, or already finalised


def init_process_group(backend=None, init_method=None, timeout=None, world_size=-1, rank=-1,
                       store=None, group_name="", pg_options=None, device_id=None):
    """Join the default process group over Open MPI. backend is "mpi" (or None); rank and
    world size come from Open MPI's launcher, as with PyTorch's MPI backend (torchrun-style
    RANK / WORLD_SIZE / LOCAL_RANK, when set, must agree). init_method and store are not
    needed by MPI and are ignored, as PyTorch's MPI backend does."""
    global _finalize_registered
    if is_initialized():
        raise ValueError("trying to initialize the default process group twice!")
    name = str(backend).lower() if backend is not None else "mpi"
    if name != "mpi":
        raise RuntimeError(f"cagrad.distributed: backend {backend!r} is not available; cagrad "
                           f"runs its collectives on Open MPI only: use backend='mpi' and "
                           f"launch with mpirun. See docs/distributed.md")
    seconds = _timeout_seconds(timeout)
    if world_size != -1 or rank != -1:
        warnings.warn(f"For MPI backend, world_size ({world_size}) and rank ({rank}) are "
                      f"ignored since they are assigned by the MPI runtime.", stacklevel=2)
    if not _finalize_registered:
        atexit.register(_finalize_at_exit)
        _finalize_registered = True
    _C.dist_init(seconds)


def destroy_process_group(group=None):
    """Leave the default group (MPI stays up, so init_process_group can join again)."""
    if not is_initialized():
        raise ValueError("Invalid process group specified")
    _C.dist_destroy()


def _info():
    if not is_initialized():
        raise ValueError(_NO_GROUP)
    return _C.dist_info()


def get_rank(group=None):
    return _info()[0]


def get_world_size(group=None):
    return _info()[1]


def get_backend(group=None):
    _info()
    return Backend.MPI


class Work:
    """The handle of an async collective (async_op=True): wait() blocks until it is done
    (or raises RuntimeError at the group's timeout), is_completed() polls."""

    def __init__(self, handle, on_done=None):
        self._handle = handle
        self._on_done = on_done

    def _finish(self):
        if self._on_done is not None:
            on_done, self._on_done = self._on_done, None
            on_done()

    def wait(self, timeout=None):
        _C.dist_work_wait(self._handle)
        self._finish()
        return True

    def is_completed(self):
        done = _C.dist_work_is_completed(self._handle)
        if done:
            self._finish()
        return done

    def is_success(self):
        return self.is_completed()


def _check_tensor(tensor, fn):
    from .._tensor import Tensor
    if not isinstance(tensor, Tensor):
        raise TypeError(f"{fn}: expected a Tensor, got {type(tensor).__name__}")
    if not tensor.is_contiguous():
        raise ValueError("Tensors must be contiguous")
    _info()


def _result(handle, async_op, on_done=None):
    if async_op:
        return Work(handle, on_done)
    if on_done is not None:
        on_done()
    return None


def all_reduce(tensor, op=ReduceOp.SUM, group=None, async_op=False):
    """tensor = the sum (ReduceOp.SUM), mean (AVG, floating dtypes), PRODUCT, MIN or MAX
    over the ranks, in place."""
    _check_tensor(tensor, "all_reduce")
    if op not in (ReduceOp.SUM, ReduceOp.AVG, ReduceOp.PRODUCT, ReduceOp.MIN, ReduceOp.MAX):
        raise RuntimeError(f"cagrad.distributed.all_reduce: {op} is not supported (SUM, AVG, "
                           f"PRODUCT, MIN and MAX are). See docs/distributed.md")
    return _result(_C.dist_all_reduce(tensor, op.value, bool(async_op)), async_op)


def broadcast(tensor, src=None, group=None, async_op=False, group_src=None):
    """tensor = rank src's tensor, in place."""
    if src is None:
        src = group_src
    if src is None:
        raise ValueError("Either src or group_src must be set")
    _check_tensor(tensor, "broadcast")
    return _result(_C.dist_broadcast(tensor, int(src), bool(async_op)), async_op)


def all_gather(tensor_list, tensor, group=None, async_op=False):
    """tensor_list[r] = rank r's tensor. Every entry must have tensor's shape and dtype."""
    _check_tensor(tensor, "all_gather")
    world = get_world_size()
    if len(tensor_list) != world:
        raise ValueError(f"all_gather: tensor_list has {len(tensor_list)} tensors, but the "
                         f"group has {world} ranks")
    for i, out in enumerate(tensor_list):
        if tuple(out.shape) != tuple(tensor.shape) or out.dtype != tensor.dtype:
            raise ValueError(f"all_gather: tensor_list[{i}] is {out.dtype} of shape "
                             f"{tuple(out.shape)}, but the input is {tensor.dtype} of shape "
                             f"{tuple(tensor.shape)}; cagrad needs them equal (no uneven "
                             f"sizes). See docs/distributed.md")
    from .. import zeros
    flat = zeros(world * tensor.numel(), dtype=tensor.dtype)

    def scatter_back():
        from .._grad_mode import no_grad
        with no_grad():
            for i, out in enumerate(tensor_list):
                n = tensor.numel()
                out.copy_(flat[i * n:(i + 1) * n].reshape(tuple(tensor.shape)))

    handle = _C.dist_all_gather(tensor, flat, bool(async_op))
    return _result(handle, async_op, scatter_back)


def barrier(group=None, async_op=False, device_ids=None, timeout=None):
    """Wait until every rank has reached this barrier."""
    _info()
    return _result(_C.dist_barrier(bool(async_op)), async_op)
