"""cagrad.autograd.graph: the autograd graph's nodes, as torch.autograd.graph.

`y.grad_fn` is a Node: `name()`, `next_functions`, `metadata`, `register_hook(fn)` (after
the node computed its input gradients: fn(grad_inputs, grad_outputs)) and
`register_prehook(fn)` (before: fn(grad_outputs)); a leaf's AccumulateGrad node has
`variable`. One object stands for one node while it is alive, so `y.grad_fn is y.grad_fn`.
Under compiled autograd node hooks are call-outs of the compiled graph, as tensor hooks
are. A custom Function's node is its ctx object (function.BackwardCFunction).
"""

import abc
import threading
import weakref

from .. import _C

__all__ = ["Node", "saved_tensors_hooks", "save_on_cpu", "disable_saved_tensors_hooks",
           "register_multi_grad_hook"]


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
    remove() does nothing). It keeps the node alive until then, as the hook does."""

    __slots__ = ("_node", "id", "__weakref__")

    def __init__(self, node, hook_id):
        self._node = _C.NodeBase(node)
        self.id = hook_id

    def remove(self):
        node, self._node = self._node, None
        if node is not None:
            node._remove_hook(self.id)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


def _hook_name(fn):
    return getattr(fn, "__name__", type(fn).__name__)


def _checked(fn, result, expected):
    """fn's result: None, or as many gradients as expected, each of its entry's shape."""
    if result is None:
        return None
    if not isinstance(result, (tuple, list)):
        raise TypeError(f"hook '{_hook_name(fn)}' must return a tuple of gradients or None, "
                        f"not {type(result).__name__}")
    if len(result) != len(expected):
        raise RuntimeError(f"hook '{_hook_name(fn)}' has returned an incorrect number of values "
                           f"(got {len(result)}, but expected {len(expected)})")
    for new, old in zip(result, expected):
        if new is not None and old is not None and tuple(new._shape) != tuple(old._shape):
            raise RuntimeError(f"hook '{_hook_name(fn)}' has changed the size of value")
    return result


def _pre_wrapper(fn):
    def pre(grad_outputs):
        return _checked(fn, fn(grad_outputs), grad_outputs)
    return pre


def _post_wrapper(fn, pad):
    """pad: inputs PyTorch's node has and cagrad's lacks (always None gradients)."""
    def post(grad_inputs, grad_outputs):
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
        return _NodeHandle(base, base._register_post_hook(_post_wrapper(fn, _missing_inputs(base))))

    def register_prehook(self, fn):
        if not callable(fn):
            raise TypeError(f"register_prehook() takes a callable, not {type(fn).__name__}")
        base = self._handle()
        return _NodeHandle(base, base._register_pre_hook(_pre_wrapper(fn)))

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


class saved_tensors_hooks:
    """Within the block, every tensor saved for backward goes through pack_hook(tensor) ->
    any object, and backward gets it back through unpack_hook(object) -> tensor (of the
    same shape and dtype), as torch.autograd.graph.saved_tensors_hooks."""

    def __init__(self, pack_hook, unpack_hook):
        self.pack_hook = pack_hook
        self.unpack_hook = unpack_hook

    def __enter__(self):
        _C.saved_tensors_hooks_push(self.pack_hook, self.unpack_hook)
        _hooks_stack().append((self.pack_hook, self.unpack_hook))
        return self

    def __exit__(self, *exc):
        _hooks_stack().pop()
        _C.saved_tensors_hooks_pop()
        return False


class save_on_cpu(saved_tensors_hooks):
    def __init__(self, pin_memory=False, device_type="cuda"):
        # cagrad's tensors live on the CPU already: keep them as they are
        super().__init__(lambda t: t, lambda t: t)


def disable_saved_tensors_hooks(error_message):
    raise NotImplementedError("cagrad does not support saved_tensors_hooks yet")


def register_multi_grad_hook(tensors, fn, *, mode="all"):
    raise NotImplementedError("cagrad does not support register_multi_grad_hook yet")
