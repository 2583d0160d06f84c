"""DistributedDataParallel over cagrad.distributed (Open MPI): docs/distributed.md.

Each rank runs the whole model on its share of the batch; the gradients are averaged across
ranks during the backward. Parameters are grouped into buckets in reverse registration
order (roughly the order the backward produces their gradients), the first bucket small
(1 MiB, unless bucket_cap_mb is given) so that communication starts early, the others up
to bucket_cap_mb (25 by default). A
post-accumulate-grad hook on each parameter copies its .grad into its bucket's flat
buffer; when a bucket is complete it is launched as a non-blocking allreduce (AVG), in
bucket order on every rank, while the backward goes on computing the other gradients. The
hook that launches the last bucket waits for all of them and copies the averages back into
.grad, so backward() returns with averaged gradients. Under compiled_autograd.enable() the
hooks are call-out steps of the compiled graph, so the launches and the final wait run
inside the cached compiled backward.
"""

import contextlib

from ... import distributed as dist
from ..._grad_mode import is_grad_enabled, no_grad
from ..module import Module

__all__ = ["DistributedDataParallel"]

_FIRST_BUCKET_BYTES = 1024 * 1024  # as torch.distributed._DEFAULT_FIRST_BUCKET_BYTES
_UNFINISHED = ("Expected to have finished reduction in the prior iteration before starting a "
               "new one. This error indicates that your module has parameters that were not "
               "used in producing loss. You can enable unused parameter detection by passing "
               "the keyword argument `find_unused_parameters=True` to "
               "`torch.nn.parallel.DistributedDataParallel`, and by making sure all `forward` "
               "function outputs participate in calculating loss. Parameter indices which did "
               "not receive grad for rank {rank}: {missing}")


class _Bucket:
    """Parameters (indices into the reducer's list) whose gradients travel together."""

    def __init__(self, indices, params):
        self.indices = indices
        self.offsets = []
        total = 0
        for p in params:
            self.offsets.append(total)
            total += p.numel()
        self.numel = total
        self.dtype = params[0].dtype
        self.flat = None  # made on first use
        self.pending = 0
        self.work = None


class _Reducer:
    """The per-backward state of DDP's gradient averaging (not a Module: no state_dict)."""

    def __init__(self, params, names, bucket_limits, find_unused):
        self.params = params
        self.names = names
        self.find_unused = find_unused
        self.buckets = _assign_buckets(params, bucket_limits)
        self.where = {}  # param index -> (bucket, position in it)
        for b in self.buckets:
            for pos, i in enumerate(b.indices):
                self.where[i] = (b, pos)
        self.expect_sync = False  # the last forward ran with grad sync on
        self.unused = []          # indices the last forward's graph does not reach
        self.running = False      # some hooks of this backward fired, not all
        self.ready = set()
        self.next_launch = 0

    # -------------------------------------------------------------- one backward
    def _begin(self):
        self.running = True
        self.ready = set()
        self.next_launch = 0
        for b in self.buckets:
            b.pending = len(b.indices)
            b.work = None
        if self.find_unused:
            for i in self.unused:
                self._mark_ready(i)

    def hook(self, index):
        if not self.expect_sync:
            return
        if not self.running:
            self._begin()
        if index in self.ready:
            raise RuntimeError(f"Expected to mark a variable ready only once. The parameter "
                               f"{self.names[index]} (index {index}) has been marked ready "
                               f"twice in this backward; cagrad's DistributedDataParallel "
                               f"supports one backward per forward")
        self._mark_ready(index)

    def _mark_ready(self, index):
        self.ready.add(index)
        bucket, pos = self.where[index]
        p = self.params[index]
        if bucket.flat is None:
            from ... import zeros
            bucket.flat = zeros(bucket.numel, dtype=bucket.dtype)
        start = bucket.offsets[pos]
        view = bucket.flat[start:start + p.numel()]
        with no_grad():
            if p.grad is None:
                view.zero_()
            else:
                view.copy_(p.grad.reshape(-1))
        bucket.pending -= 1
        self._progress()
        self._launch_ready()

    def _progress(self):
        """MPI moves a non-blocking collective only inside MPI calls: poll the launched
        ones so that they advance while the backward computes."""
        for b in self.buckets[:self.next_launch]:
            if b.work is not None:
                b.work.is_completed()

    def _launch_ready(self):
        # Strictly in bucket order, so that every rank issues the same collectives in the
        # same order (MPI matches collectives by order).
        while self.next_launch < len(self.buckets) and \
                self.buckets[self.next_launch].pending == 0:
            b = self.buckets[self.next_launch]
            b.work = dist.all_reduce(b.flat, op=dist.ReduceOp.AVG, async_op=True)
            self.next_launch += 1
        if self.next_launch == len(self.buckets):
            self._finish()

    def _finish(self):
        self.running = False
        for b in self.buckets:
            b.work.wait()
        used = None
        if self.find_unused:
            from ... import int64, tensor
            local = [0 if i in self.unused else 1 for i in range(len(self.params))]
            used = tensor(local, dtype=int64)
            dist.all_reduce(used)
            used = used.tolist()
        with no_grad():
            for b in self.buckets:
                for pos, i in enumerate(b.indices):
                    if used is not None and used[i] == 0:
                        continue  # no rank used it: its .grad stays as it was, as in torch
                    p = self.params[i]
                    start = b.offsets[pos]
                    avg = b.flat[start:start + p.numel()].reshape(tuple(p.shape))
                    if p.grad is None:
                        p.grad = avg.clone()
                    else:
                        p.grad.copy_(avg)

    def check_finished(self):
        if self.running:
            missing = sorted(set(range(len(self.params))) - self.ready)
            self.running = False
            raise RuntimeError(_UNFINISHED.format(rank=dist.get_rank(), missing=missing))


def _assign_buckets(params, bucket_limits):
    """Reverse parameter order, one dtype per bucket; a bucket closes once it holds at least
    its limit: bucket_limits[0] bytes for the first, bucket_limits[1] for the others."""
    buckets, open_by_dtype = [], {}
    for i in reversed(range(len(params))):
        p = params[i]
        cur = open_by_dtype.setdefault(p.dtype, [[], 0])
        cur[0].append(i)
        cur[1] += p.numel() * p.element_size()
        limit = bucket_limits[0] if not buckets else bucket_limits[1]
        if cur[1] >= limit:
            buckets.append(_Bucket(cur[0], [params[j] for j in cur[0]]))
            del open_by_dtype[p.dtype]
    for idx, _ in open_by_dtype.values():
        if idx:
            buckets.append(_Bucket(idx, [params[j] for j in idx]))
    return buckets


def _verify_shapes(named):
    """Every rank must hold the same parameters: gather each rank's list of shapes and name
    the first difference from rank 0 (on every rank, so that none goes on alone)."""
    from ... import int64, tensor, zeros
    sig = [len(named)]
    for _, p in named:
        sig += [p.dim(), *p.shape]
    world = dist.get_world_size()
    lengths = [zeros(1, dtype=int64) for _ in range(world)]
    dist.all_gather(lengths, tensor([len(sig)], dtype=int64))
    width = max(int(t.item()) for t in lengths)
    padded = sig + [-1] * (width - len(sig))
    gathered = [zeros(width, dtype=int64) for _ in range(world)]
    dist.all_gather(gathered, tensor(padded, dtype=int64))
    shapes = [_parse_signature(g.tolist()) for g in gathered]
    for rank in range(1, world):
        if len(shapes[rank]) != len(shapes[0]):
            raise RuntimeError(f"DDP expects same model across all ranks, but Rank {rank} has "
                               f"{len(shapes[rank])} params, while rank 0 has inconsistent "
                               f"{len(shapes[0])} params.")
        for i, (mine, first) in enumerate(zip(shapes[rank], shapes[0])):
            if mine != first:
                raise RuntimeError(f"DDP expects same model across all ranks, but Rank {rank} "
                                   f"has params[{i}] ({named[i][0]!r}) with sizes "
                                   f"{list(mine)}, which appears not to match sizes "
                                   f"{list(first)} of the same param in process 0.")


def _parse_signature(sig):
    n, pos, shapes = sig[0], 1, []
    for _ in range(n):
        nd = sig[pos]
        shapes.append(tuple(sig[pos + 1:pos + 1 + nd]))
        pos += 1 + nd
    return shapes


def _output_tensors(out, found):
    from ..._tensor import Tensor
    if isinstance(out, Tensor):
        found.append(out)
    elif isinstance(out, (list, tuple)):
        for o in out:
            _output_tensors(o, found)
    elif isinstance(out, dict):
        for o in out.values():
            _output_tensors(o, found)
    return found


def _reached_leaves(outputs):
    """The memory (data_ptr) of the leaves whose AccumulateGrad the outputs' autograd graph
    reaches (a node's .variable is a new Tensor object over the leaf's memory)."""
    # seen holds the node objects themselves: a node's Python object lives only while
    # referenced, so a bare id() could be reused by the next node's object.
    seen, leaves = {}, set()
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    leaves.update(t.data_ptr() for t in outputs if t.grad_fn is None and t.requires_grad)
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen[id(node)] = node
        var = getattr(node, "variable", None)
        if var is not None:
            leaves.add(var.data_ptr())
        for nxt, _ in node.next_functions:
            if nxt is not None:
                stack.append(nxt)
    return leaves


class DistributedDataParallel(Module):
    """Data parallelism across the ranks of cagrad.distributed (module replicated on every
    rank, gradients averaged during backward). device_ids, output_device and dim are
    accepted as torch does on CPU; gradient_as_bucket_view and static_graph are accepted
    and change nothing (the .grad tensors stay separate from the buckets)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0,
                 broadcast_buffers=True, init_sync=True, process_group=None, bucket_cap_mb=None,
                 find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, **kwargs):
        super().__init__()
        if not dist.is_initialized():
            raise ValueError("Default process group has not been initialized, please make "
                             "sure to call init_process_group.")
        named = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
        if not named:
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't "
                               "have any parameter that requires a gradient.")
        if device_ids is not None and len(device_ids) > 1:
            raise ValueError("device_ids can only be None or contain a single element.")
        self.module = module
        self.device_ids = None
        self.output_device = None
        self.dim = dim
        self.broadcast_buffers = True if broadcast_buffers is None else broadcast_buffers
        self.find_unused_parameters = find_unused_parameters
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.static_graph = static_graph
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True
        cap_mb = 25 if bucket_cap_mb is None else bucket_cap_mb
        self.bucket_bytes_cap = int(cap_mb * 1024 * 1024)
        _verify_shapes(named)
        if init_sync:
            self._sync_module_states()
        params = [p for _, p in named]
        # as torch: a small first bucket (communication starts early) unless a cap is given
        first = _FIRST_BUCKET_BYTES if bucket_cap_mb is None else self.bucket_bytes_cap
        self.reducer = _Reducer(params, [n for n, _ in named], (first, self.bucket_bytes_cap),
                                find_unused_parameters)
        self._hook_handles = [p.register_post_accumulate_grad_hook(self._make_hook(i))
                              for i, p in enumerate(params)]

    def _make_hook(self, index):
        reducer = self.reducer

        def ddp_grad_ready(param):
            reducer.hook(index)
        return ddp_grad_ready

    def _sync_module_states(self):
        """Rank 0's parameters and buffers everywhere."""
        with no_grad():
            for p in self.module.parameters():
                dist.broadcast(p.detach(), 0)
            self._sync_buffers()

    def _sync_buffers(self):
        with no_grad():
            for b in self.module.buffers():
                if b.is_contiguous():
                    dist.broadcast(b, 0)
                else:  # MPI sends contiguous memory: through a copy
                    staged = b.contiguous()
                    dist.broadcast(staged, 0)
                    b.copy_(staged)

    def forward(self, *inputs, **kwargs):
        self.reducer.check_finished()
        if self.broadcast_buffers and self.require_forward_param_sync:
            self._sync_buffers()
        out = self.module(*inputs, **kwargs)
        sync = is_grad_enabled() and self.require_backward_grad_sync
        self.reducer.expect_sync = sync
        if sync and self.find_unused_parameters:
            reached = _reached_leaves(_output_tensors(out, []))
            self.reducer.unused = [i for i, p in enumerate(self.reducer.params)
                                   if p.data_ptr() not in reached]
        return out

    @contextlib.contextmanager
    def no_sync(self):
        """Backwards of forwards run inside this block accumulate .grad locally; the first
        backward after it averages the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old
