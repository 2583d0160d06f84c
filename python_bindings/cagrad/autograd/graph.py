"""cagrad.autograd.graph: the autograd graph's nodes, as torch.autograd.graph.

`y.grad_fn` is a Node: `name()`, `next_functions`, `metadata`, `register_hook(fn)` (after
the node computed its input gradients: fn(grad_inputs, grad_outputs)) and
`register_prehook(fn)` (before: fn(grad_outputs)); a leaf's AccumulateGrad node has
`variable`. One object stands for one node while it is alive, so `y.grad_fn is y.grad_fn`.
Under compiled autograd node hooks are call-outs of the compiled graph, as tensor hooks
are. A custom Function's node is its ctx object (function.BackwardCFunction).
"""

import abc
import contextlib
import threading
import weakref
from typing import NamedTuple

from .. import _C
from .variable import _after_backwards

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook", "increment_version", "GradientEdge",
           "get_gradient_edge"]


class Node(abc.ABC):
    """A node of the autograd graph (torch.autograd.graph.Node)."""

    @abc.abstractmethod
    def name(self):
        ...

    @property
    @abc.abstractmethod
    def next_functions(self):
        ...

    @abc.abstractmethod
    def register_hook(self, fn):
        ...

    @abc.abstractmethod
    def register_prehook(self, fn):
        ...

    @property
    def metadata(self):
        ...


class _NodeHandle:
    """Returned by register_hook / register_prehook; remove() unregisters the hook (a second
    remove() does nothing). It keeps the node alive until then, as the hook does.

    remove() switches the hook off at once (`live`, read by its wrapper); while a backward
    runs, the C entry is unlinked when it ends (variable._after_backwards), since the
    engine may be walking that list: a hook may remove itself, as in PyTorch."""

    __slots__ = ("_node", "id", "_live", "__weakref__")

    def __init__(self, node, hook_id, live):
        self._node = _C.NodeBase(node)
        self.id = hook_id
        self._live = live

    def remove(self):
        node, self._node = self._node, None
        if node is not None:
            self._live[0] = False
            hook_id = self.id
            _after_backwards(lambda: node._remove_hook(hook_id))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _hook_name(fn):
    return getattr(fn, "__name__", "<unknown>")


def _checked(fn, result, expected):
    """fn's result, checked as torch checks a node hook's: None, or a tuple of as many
    entries as expected, each None or a tensor of its entry's dtype and shape."""
    if result is None:
        return None
    if not isinstance(result, tuple):
        raise TypeError(f"expected tuple, but hook returned '{type(result).__name__}'")
    if len(result) != len(expected):
        raise RuntimeError(f"hook '{_hook_name(fn)}' has returned an incorrect number of values "
                           f"(got {len(result)}, but expected {len(expected)})")
    for new, old in zip(result, expected):
        if new is None:
            continue
        if old is None:
            raise RuntimeError("can't replace a None gradient with a non-None value")
        if not isinstance(new, _C.TensorBase):
            raise TypeError(f"expected Variable, but hook returned '{type(new).__name__}'")
        if new._dtype != old._dtype:
            raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the type of value (was "
                               f"{_type_name(old)} got {_type_name(new)})")
        if tuple(new._shape) != tuple(old._shape):
            raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the size of value")
    return result


def _type_name(t):
    return {0: "torch.FloatTensor", 1: "torch.DoubleTensor", 2: "torch.LongTensor"}.get(
        t._dtype, str(t.dtype))


def _pre_wrapper(fn, live):
    """live: [False] once the hook's handle removed it (_NodeHandle)."""
    def pre(grad_outputs):
        if not live[0]:
            return None
        return _checked(fn, fn(grad_outputs), grad_outputs)
    return pre


def _post_wrapper(fn, pad, live):
    """pad: inputs PyTorch's node has and cagrad's lacks (always None gradients)."""
    def post(grad_inputs, grad_outputs):
        if not live[0]:
            return None
        full = tuple(grad_inputs) + (None,) * pad
        result = _checked(fn, fn(full, grad_outputs), full)
        return None if result is None else tuple(result)[:len(grad_inputs)]
    return post


def _missing_inputs(base):
    """Inputs of PyTorch's node that cagrad's node does not record: the number of a
    tensor-with-number op, conv2d's absent bias. Their edges are (None, 0)."""
    name = base._name
    if name in _PYTHON_NODE_NAMES:
        return 1
    if name == "ConvolutionBackward0":
        return 3 - len(base._next)
    return 0


class _HookMixin:
    """register_hook / register_prehook / next_functions / metadata over self._handle()."""

    __slots__ = ()

    def register_hook(self, fn):
        if not callable(fn):
            raise TypeError(f"register_hook() takes a callable, not {type(fn).__name__}")
        base = self._handle()
        live = [True]
        hook_id = base._register_post_hook(_post_wrapper(fn, _missing_inputs(base), live))
        return _NodeHandle(base, hook_id, live)

    def register_prehook(self, fn):
        if not callable(fn):
            raise TypeError(f"register_prehook() takes a callable, not {type(fn).__name__}")
        base = self._handle()
        live = [True]
        return _NodeHandle(base, base._register_pre_hook(_pre_wrapper(fn, live)), live)

    @property
    def next_functions(self):
        base = self._handle()
        edges = tuple((None, 0) if b is None else (node_object(b), nr) for b, nr in base._next)
        return edges + ((None, 0),) * _missing_inputs(base)


class _BuiltinNode(_C.NodeBase, _HookMixin):
    """The base of every built-in node class (MulBackward0, AccumulateGrad, ...)."""

    __slots__ = ()

    def _handle(self):
        return self

    def name(self):
        n = type(self).__name__
        return "torch::autograd::AccumulateGrad" if n == "AccumulateGrad" else n

    @property
    def variable(self):
        v = self._variable
        if v is None:
            raise AttributeError(f"'{type(self).__name__}' object has no attribute 'variable'")
        return v

    def __repr__(self):
        return f"<{type(self).__name__} object at {id(self):#x}>"

    def __call__(self, *grads):
        # grad_fn(grad): the node's derivative rule on its output's gradient, as torch:
        # one input gives a Tensor, several a tuple (None where an input needs none)
        if len(grads) != 1:
            raise TypeError(f"expected 1 arguments, got {len(grads)} instead "
                            f"({type(self).__name__} takes the gradient of its one output)")
        res = self._call(grads[0])
        if type(self).__name__ != self._name:  # a scalar overload: torch's 0-d other
            res = res + (None,)
        return res[0] if len(res) == 1 else res

    def __getattr__(self, attr):
        # grad_fn._saved_<name>: what the node keeps for its backward, by PyTorch's names
        # (the C op row's fields); a tensor is checked as a backward would check it
        if attr.startswith("_saved_") and attr[7:] in self._saved_names:
            return self._saved(attr[7:])
        if attr.startswith("_raw_saved_") and attr[11:] in self._saved_names:
            raise NotImplementedError(f"{attr}: cagrad has no SavedTensor objects; read "
                                      f"_saved_{attr[11:]} instead (see docs/python-api.md)")
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{attr}'")


Node.register(_BuiltinNode)

# The C core names a tensor-with-number node after PyTorch's C++ Scalar overload
# ("AddBackward1"). From Python, PyTorch wraps the number in a 0-d tensor and records the
# Tensor overload's node, so Python code sees "AddBackward0".
_PYTHON_NODE_NAMES = {
    "AddBackward1": "AddBackward0",
    "SubBackward1": "SubBackward0",
    "MulBackward1": "MulBackward0",
    "DivBackward1": "DivBackward0",
}
_NODE_TYPES = {}
_LIVE = weakref.WeakValueDictionary()  # node address -> its one Python object


def python_name(name):
    return _PYTHON_NODE_NAMES.get(name, name)


def _node_type(name):
    cls = _NODE_TYPES.get(name)
    if cls is None:
        cls = _NODE_TYPES[name] = type(name, (_BuiltinNode,),
                                       {"__slots__": (), "__module__": "cagrad"})
    return cls


def node_object(base):
    """The one Python object of the node `base` (a _C.NodeBase) stands for."""
    ctx = base._ctx
    if ctx is not None:
        return ctx
    addr = base._addr
    obj = _LIVE.get(addr)
    if obj is None:
        obj = _node_type(python_name(base._name))(base)
        _LIVE[addr] = obj
    return obj


def grad_fn_of(t):
    base = _C.grad_fn_node(t)
    return None if base is None else node_object(base)


def grad_accumulator_of(t):
    return node_object(_C.grad_accumulator(t))


# ------------------------------------------------------------------ saved-tensor hooks
_hooks_local = threading.local()  # .stack: this thread's (pack, unpack), innermost last


def _hooks_stack():
    stack = getattr(_hooks_local, "stack", None)
    if stack is None:
        stack = _hooks_local.stack = []
    return stack


def current_saved_tensors_hooks():
    """The innermost (pack, unpack) pushed on this thread, or None (custom Functions use
    it for ctx.save_for_backward, as the C library does for built-in ops)."""
    stack = _hooks_stack()
    return stack[-1] if stack else None


def _pack_checked(pack_hook):
    """pack_hook, refusing (as torch) a hook that changes the tensor it is given in place:
    the tensor is the one the graph keeps, so the change would reach the forward too."""
    def pack(tensor):
        before = tensor._version
        packed = pack_hook(tensor)
        if tensor._version != before:
            raise RuntimeError("A saved tensor pack hook is modifying its input in place. "
                               "Tensors provided as input to pack hook cannot be modified by "
                               "in-place operations as this can lead to unexpected "
                               "side-effects. Please open an issue if you need to perform "
                               "in-place operations on the input to a pack hook.")
        return packed
    return pack


class saved_tensors_hooks:
    """Within the block, every tensor saved for backward goes through pack_hook(tensor) ->
    any object, and backward gets it back through unpack_hook(object) -> tensor (of the
    same shape and dtype), as torch.autograd.graph.saved_tensors_hooks."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        disabled = getattr(_hooks_local, "disabled", None)
        if disabled is not None:  # inside disable_saved_tensors_hooks(message)
            raise RuntimeError(disabled)
        pack = _pack_checked(self.pack_hook)
        _C.saved_tensors_hooks_push(pack, self.unpack_hook)
        _hooks_stack().append((pack, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _hooks_stack().pop()
        _C.saved_tensors_hooks_pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    def __init__(self, pin_memory=False, device_type="cuda"):
        # cagrad's tensors live on the CPU already: keep them as they are
        super().__init__(lambda t: t, lambda t: t)


@contextlib.contextmanager
def disable_saved_tensors_hooks(error_message):
    """Within the block, entering saved_tensors_hooks (or save_on_cpu) raises
    RuntimeError(error_message), as in torch; so does entering the block while hooks are
    active."""
    if _hooks_stack():
        raise RuntimeError(error_message)
    previous = getattr(_hooks_local, "disabled", None)
    _hooks_local.disabled = error_message
    try:
        yield
    finally:
        _hooks_local.disabled = previous


# ------------------------------------------------------------------ versions and edges
def increment_version(tensor):
    """Bump the version counter of a tensor (or of each of an iterable of tensors), as an
    in-place change would: for data changed behind autograd's back (through numpy or a
    data pointer), so that a backward that saved it raises the in-place error."""
    from .._grad_mode import no_grad
    tensors = (tensor,) if isinstance(tensor, _C.TensorBase) else tuple(tensor)
    with no_grad():
        for t in tensors:
            _C.copy_(t, t)  # the values stay; the copy bumps the counter once


class GradientEdge(NamedTuple):
    """An edge of the graph: the node that takes the gradient, and which of its inputs."""

    node: object
    output_nr: int
    ownership_token: object = None


def get_gradient_edge(tensor):
    """The edge a tensor's gradient flows into: (its grad_fn, its output number), or
    (its AccumulateGrad node, 0) for a leaf, as torch.autograd.graph.get_gradient_edge.
    cagrad's grad() and backward() take tensors only, not edges."""
    if not tensor.requires_grad:
        raise RuntimeError("It is not possible to get the gradient edge for a Tensor that "
                           "does not require gradients")
    base = _C.grad_fn_node(tensor)
    if base is None:
        return GradientEdge(grad_accumulator_of(tensor), 0)
    return GradientEdge(node_object(base), _C.output_nr(tensor))


# ------------------------------------------------------------------ multi-grad hooks
class _MultiHandle:
    """register_multi_grad_hook's handle: remove() removes the hook from every tensor."""

    __slots__ = ("handles", "__weakref__")

    def __init__(self, handles):
        self.handles = handles

    def remove(self):
        for handle in self.handles:
            handle.remove()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _current_backward():
    """The queue of the backward running now (variable.py): it stands for that backward."""
    from .variable import _running
    if not _running:
        raise AssertionError("expected this hook to be called inside a backward call")
    return _running[-1]


class _PerBackward:
    """One state object per backward a multi-grad hook takes part in, made by `make` on its
    first gradient there and forgotten when that backward ends (through queue_callback).
    A backward that raised never ends that way: its entry is dropped on the next lookup."""

    def __init__(self, make, on_end=None):
        self._make = make
        self._on_end = on_end
        self._states = {}  # id(queue) -> (queue, state); the queue kept alive keeps its id
        self._lock = threading.Lock()

    def get(self):
        """(state, whether it was just made) for the backward running now."""
        from .variable import Variable, _running
        queue = _current_backward()
        with self._lock:
            entry = self._states.get(id(queue))
            if entry is not None:
                return entry[1], False
            live = {id(q) for q in _running}
            for stale in [k for k in self._states if k not in live]:
                del self._states[stale]
            state = self._make()
            self._states[id(queue)] = (queue, state)
        Variable._execution_engine.queue_callback(lambda: self._end(queue))
        return state, True

    def _end(self, queue):
        with self._lock:
            _, state = self._states.pop(id(queue))
        if self._on_end is not None:
            self._on_end(state)


def _tensor_node(t):
    """The node that runs when t gets its gradient: its grad_fn, or a leaf's
    AccumulateGrad (a _C.NodeBase)."""
    base = _C.grad_fn_node(t)
    return base if base is not None else _C.grad_accumulator(t)


def _nodes_that_run(roots, inputs):
    """Addresses of the nodes a backward from roots runs: every node reachable from them,
    or, with inputs, those with a path to one of the inputs' nodes (as PyTorch's engine
    decides). Depth first without recursion: graphs can be thousands of nodes deep."""
    targets = None if inputs is None else {_tensor_node(t)._addr for t in inputs}
    runs = {}  # address -> whether the node runs; a DAG, so a seen node is finished
    for root in (_tensor_node(t) for t in roots if t.requires_grad):
        if root._addr in runs:
            continue
        runs[root._addr] = targets is None or root._addr in targets
        stack = [(root, iter(root._next))]
        while stack:
            node, edges = stack[-1]
            for child, _ in edges:
                if child is None:
                    continue
                if child._addr not in runs:
                    runs[child._addr] = targets is None or child._addr in targets
                    stack.append((child, iter(child._next)))
                    break
                if runs[child._addr]:
                    runs[node._addr] = True
            else:
                stack.pop()
                if stack and runs[node._addr]:
                    runs[stack[-1][0]._addr] = True
    return {addr for addr, flag in runs.items() if flag}


def _expected_count(node_addrs):
    """How many of the hooked tensors' nodes the backward running now will run; None when
    its caller did not say where it starts (then fn waits for the backward's end)."""
    queue = _current_backward()
    if queue.roots is None:
        return None
    if queue.running_nodes is None:  # worked out once per backward, for every hook
        queue.running_nodes = _nodes_that_run(queue.roots, queue.inputs)
    return sum(addr in queue.running_nodes for addr in node_addrs)


class _Gathered:
    """What an "all" hook has seen in one backward."""

    __slots__ = ("grads", "seen", "expected", "called")

    def __init__(self, count):
        self.grads, self.seen, self.expected, self.called = [None] * count, 0, None, False


def _all_mode(tensors, fn):
    """fn(grads) once per backward that computes a gradient for any of tensors: as soon
    as every tensor whose node that backward runs has its gradient (None for the others),
    or at the latest when the backward ends."""
    for t in tensors:
        if not t.requires_grad:  # torch's check, as it looks up each tensor's node
            raise AssertionError("Expected gradient function to be set")
    # the nodes are looked up in each backward: a leaf's AccumulateGrad node lives only
    # while something holds it, so one made now may be gone, and its address reused or
    # not, by the time a backward runs (weak references: the hooks must not keep the
    # tensors alive)
    refs = [weakref.ref(t) for t in tensors]

    def node_addrs():
        return [_tensor_node(t)._addr for t in (r() for r in refs) if t is not None]

    def call_once(gathered):
        if not gathered.called:
            gathered.called = True
            fn(gathered.grads)

    per_backward = _PerBackward(lambda: _Gathered(len(tensors)), on_end=call_once)

    def keeper(index):
        def hook(grad):
            gathered, first = per_backward.get()
            if first:
                gathered.expected = _expected_count(node_addrs())
            gathered.grads[index] = grad
            gathered.seen += 1
            if gathered.seen == gathered.expected:
                call_once(gathered)
        return hook

    return tuple(t.register_hook(keeper(i)) for i, t in enumerate(tensors))


def _any_mode(tensors, fn):
    """fn(grad) with the first gradient a backward computes for any of tensors."""
    per_backward = _PerBackward(lambda: None)

    def first_only(grad):
        if per_backward.get()[1]:
            fn(grad)

    return tuple(t.register_hook(first_only) for t in tensors if t.requires_grad)


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    """torch.autograd.graph.register_multi_grad_hook over the tensors' own hooks.

    mode "all": fn(grads), a list with one entry per tensor (None where this backward
    computes no gradient), runs once per backward that computes a gradient for any of
    them, right after the last of those gradients is computed. A backward whose starting
    tensors are unknown here (Tensor.backward without inputs) calls it when it has
    finished instead, before backward() returns. mode "any": fn(grad) with the first
    gradient computed, at once. The hooks do not change gradients; handle.remove()
    unregisters them."""
    supported = ("all", "any")
    if mode not in supported:
        raise ValueError(f"Expects mode to be one of {supported} but got {mode}")
    tensors = tuple(tensors)
    handles = _all_mode(tensors, fn) if mode == "all" else _any_mode(tensors, fn)
    return _MultiHandle(handles)
