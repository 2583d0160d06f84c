"""cagrad.autograd.function: custom autograd Functions, as torch.autograd.Function.

    class Exp(cagrad.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            y = x.exp()
            ctx.save_for_backward(y)
            return y

        @staticmethod
        def backward(ctx, grad):
            (y,) = ctx.saved_tensors
            return grad * y

    y = Exp.apply(x)

apply() runs forward with grad mode off and records one node (the library's
ca_custom_apply) whose backward calls the class's backward. The ctx object is that node:
`y.grad_fn is ctx`, an instance of the class `ExpBackward`, as in PyTorch. Under compiled
autograd the backward is recorded once and traced into the one compiled graph when it
only calls cagrad ops; otherwise it is an opaque call-out step of that graph.
"""

import functools
import inspect
import itertools
import re
import warnings
import weakref

from .. import _C
from .._grad_mode import is_grad_enabled, no_grad
from .graph import Node, _HookMixin, current_saved_tensors_hooks
from .graph import _checked as _checked_hook_result, _hook_name

__all__ = ["Function", "FunctionCtx", "BackwardCFunction", "once_differentiable",
           "InplaceFunction", "NestedIOFunction"]

# ca_custom_apply's output flags (include/cagrad.h: CA_CUSTOM_DIRTY, CA_CUSTOM_NONDIFF)
_DIRTY, _NONDIFF = 1, 2
_FREED_MESSAGE = ("Trying to backward through the graph a second time (or directly access saved "
                  "tensors after they have already been freed). Saved intermediate values of the "
                  "graph are freed when you call .backward() or autograd.grad(). Specify "
                  "retain_graph=True if you need to backward through the graph a second time or "
                  "if you need to access saved tensors after calling backward.")
_class_ids = itertools.count(1)
# ctx attributes the library keeps itself; every other one is the user's, and keys a traced
# backward (see BackwardCFunction._trace_state)
_CTX_OWN = frozenset({"needs_input_grad", "_arg_is_tensor", "to_save", "_saved", "dirty_tensors",
                      "non_differentiable", "saved_for_forward", "materialize_grads",
                      "_output_metas", "_output_ref", "_metadata", "_released",
                      "_output_slots",
                      "_creating_graph"})
# distinct ctx states of one Function that get traced backwards; past this, call-outs
_MAX_TRACE_STATES = 8
# ints a traced backward may bake in as size slots of the key (CA_CUSTOM_MAX_SIZES); past
# this, ints key the trace by value
_MAX_TRACED_INTS = 32


def _names_state(fn, ints):
    """The plain immutable values (numbers, strings, tuples of them) of the globals and
    closure variables fn's own code names: a traced backward bakes them in, so they key it
    too. Mutable ones (a list a backward appends to) are left out."""
    fn = inspect.unwrap(fn)
    code = getattr(fn, "__code__", None)
    if code is None:
        return []
    out = []
    scope = getattr(fn, "__globals__", {})
    named = [("global", name, scope[name]) for name in code.co_names if name in scope]
    for name, cell in zip(code.co_freevars, fn.__closure__ or ()):
        try:
            named.append(("free", name, cell.cell_contents))
        except ValueError:  # an empty cell
            pass
    for kind, name, value in named:
        found = []
        try:
            out.append((kind, name, _freeze(value, found, mutable=False)))
            ints.extend(found)
        except TypeError:  # modules, functions, classes, lists: not values
            pass
    return out


def _freeze(v, ints, mutable=True):
    """v as a hashable value equal only for equal values of the same types (floats by their
    bits, so -0.0 and NaN key exactly); TypeError for what cannot key a trace (and for
    lists unless mutable). Ints (sizes, usually: ctx.shape = x.shape) are appended to ints
    instead, to key the trace as size slots, and leave only their place in the value."""
    if v is None or isinstance(v, (bool, str, bytes)):
        return type(v), v
    if isinstance(v, int):
        if len(ints) < _MAX_TRACED_INTS and -2**63 <= v < 2**63:
            ints.append(int(v))
            return (type(v),)
        return type(v), v
    if isinstance(v, float):
        return float, v.hex()
    if isinstance(v, tuple) or (mutable and isinstance(v, list)):
        return type(v), tuple(_freeze(x, ints, mutable) for x in v)
    if type(v).__module__.startswith("cagrad") and type(v).__name__ == "dtype":
        return type(v), str(v)
    raise TypeError(type(v).__name__)


def _is_tensor(x):
    return isinstance(x, _C.TensorBase)


def _tensor_type_name(t):
    return {0: "torch.FloatTensor", 1: "torch.DoubleTensor", 2: "torch.LongTensor"}[t._dtype]


class _Saved:
    """A tensor saved for backward: the tensor (a detached alias for the function's own
    outputs, so the node does not keep itself alive) and its version when saved."""

    __slots__ = ("tensor", "version", "origin", "output")

    def __init__(self, tensor, origin, output=None):
        self.tensor = tensor
        self.version = tensor._version
        self.origin = origin
        self.output = output  # which output of the function it is, or None

    def unpack(self):
        t = self.tensor
        if t._version != self.version:
            # torch's words, then where cagrad's hint points
            which = "" if self.origin is None else f", which is {self.origin},"
            raise RuntimeError(
                f"one of the variables needed for gradient computation has been modified by an "
                f"inplace operation: [{_tensor_type_name(t)} {list(t._shape)}]{which} is at "
                f"version {t._version}; expected version {self.version} instead. Hint: enable "
                f"anomaly detection to find the operation that failed to compute its gradient, "
                f"with torch.autograd.set_detect_anomaly(True, check_nan=False). (The tensor "
                f"was saved with ctx.save_for_backward(); change a clone of it instead.)")
        return t


class _Packed:
    """A tensor saved through saved_tensors_hooks: what pack gave, and its unpack."""

    __slots__ = ("packed", "unpack_hook")

    def __init__(self, tensor, hooks):
        pack_hook, self.unpack_hook = hooks
        self.packed = pack_hook(tensor)

    def unpack(self):
        return self.unpack_hook(self.packed)


class FunctionCtx:
    """What forward() may tell backward(): tensors to save, and which outputs are dirty
    (changed inputs) or not differentiable."""

    materialize_grads = True

    def save_for_backward(self, *tensors):
        for i, t in enumerate(tensors):
            if t is not None and not _is_tensor(t):
                raise TypeError(f"save_for_backward can only save variables, but argument "
                                f"{i} is of type {type(t).__name__}")
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *args):
        self.dirty_tensors = args

    def mark_non_differentiable(self, *args):
        self.non_differentiable = args

    def set_materialize_grads(self, value):
        self.materialize_grads = bool(value)

    def mark_shared_storage(self, *pairs):
        raise RuntimeError("mark_shared_storage is deprecated: tensors with shared storage "
                           "are detected automatically")


class BackwardCFunction(FunctionCtx, _HookMixin):
    """The node a Function's apply() records; forward's ctx is an instance of it."""

    _forward_cls = None

    def _handle(self):
        """The library node: reached through an output (weakly held: the node holds ctx)."""
        ref = getattr(self, "_output_ref", None)
        out = ref() if ref is not None else None
        if out is None:
            raise RuntimeError(f"{type(self).__name__}: its outputs are gone, so its node "
                               f"cannot be reached from Python any more")
        return _C.grad_fn_node(out)

    def apply(self, *args):
        return _user_backward(self._forward_cls)(self, *args)

    def name(self):
        return type(self).__name__

    @property
    def saved_tensors(self):
        if getattr(self, "_released", False):
            raise RuntimeError(_FREED_MESSAGE)
        saved = getattr(self, "_saved", None)
        if saved is None:
            return getattr(self, "to_save", ())
        values = tuple(None if s is None else s.unpack() for s in saved)
        if not getattr(self, "_creating_graph", False):
            return values
        # A saved output is a detached alias (the node must not hold its own output); under
        # create_graph it comes back with this node's output as its history, as torch's
        return tuple(_C.saved_output(v, s.output)
                     if isinstance(s, _Saved) and s.output is not None else v
                     for s, v in zip(saved, values))

    @property
    def saved_variables(self):
        warnings.warn("'saved_variables' is deprecated; use 'saved_tensors'",
                      DeprecationWarning, stacklevel=2)
        return self.saved_tensors

    @property
    def metadata(self):
        meta = self.__dict__.get("_metadata")
        if meta is None:
            meta = self._metadata = {}
        return meta

    # ---- called by the library (python_bindings/src/custom.c) ----
    def _trace_state(self):
        """_trace_state_of, where anything that goes wrong makes a call-out instead."""
        try:
            return self._trace_state_of()
        except Exception as e:  # e.g. a backward that is not hashable: just call it out
            return 0, (), (), f"its trace state could not be formed ({type(e).__name__}: {e})"

    def _trace_state_of(self):
        """(state, saved tensors, sizes, why) for compiled autograd: a nonzero state number
        lets it record backward once and put its ops into the graph. The number is the same
        for two nodes exactly when the class, its backward, needs_input_grad, the
        materialize flag, which saved tensors are None, the user's ctx attributes and the
        globals and closure variables backward's code names (plain Python values) are equal,
        the ints among them aside: those are the sizes, slots of the key like tensor sizes.
        0, with the reason, makes the backward a call-out instead."""
        cls = self._forward_cls
        if not cls.traceable_backward:
            return 0, (), (), f"{cls.__name__}.traceable_backward is False"
        saved = getattr(self, "_saved", None)
        if saved and any(isinstance(s, _Packed) for s in saved):
            return 0, (), (), "its saved tensors go through saved_tensors_hooks"
        try:
            tensors = tuple(self.saved_tensors or ())
        except RuntimeError:  # freed or changed in place: the call-out raises it for real
            return 0, (), (), "its saved tensors cannot be read"
        try:
            backward = _user_backward(cls)
        except RuntimeError:  # the call-out raises it for real
            return 0, (), (), "it defines both backward and vjp"
        ints = []  # the ints below: size slots of the key, not part of the number
        state = [backward, self.materialize_grads, getattr(self, "needs_input_grad", ()),
                 tuple(t is None for t in tensors)]
        for name in sorted(self.__dict__):
            if name in _CTX_OWN:
                continue
            value = self.__dict__[name]
            try:
                state.append((name, _freeze(value, ints)))
            except TypeError:
                hint = (": save it with ctx.save_for_backward() to trace the backward"
                        if _is_tensor(value) else "")
                return 0, (), (), f"ctx.{name} is a {type(value).__name__}{hint}"
        state.extend(_names_state(backward, ints))
        states = cls._trace_states
        key = tuple(state)
        number = states.get(key)
        if number is None:
            if len(states) >= _MAX_TRACE_STATES:
                return 0, (), (), (f"its ctx attributes took more than {_MAX_TRACE_STATES} "
                               f"different values")
            number = states[key] = len(states) + 1
        return number, tensors, tuple(ints), ""

    def _run_backward(self, grads):
        """grads: one Tensor or None per tensor output. Returns one per tensor input."""
        if self.materialize_grads:
            grads = tuple(_C.zeros(dt, shape) if g is None else g
                          for g, (dt, shape) in zip(grads, self._output_metas))
        grads = self._all_outputs(grads)
        slots = self.__dict__.get("_output_slots")
        if slots and slots[2] and self.materialize_grads:  # repeated outputs get zeros
            grads = list(grads)
            for i, n in slots[2]:
                grads[i] = _C.zeros(*self._output_metas[n])
            grads = tuple(grads)
        # the library runs backward with grad mode = create_graph, as torch
        self._creating_graph = is_grad_enabled()
        try:
            return self._check_grads(_user_backward(self._forward_cls)(self, *grads))
        finally:
            self._creating_graph = False

    # The library's node has one gradient per distinct tensor output; torch's backward and
    # node hooks see one per output of forward, None for the outputs that are not tensors
    # (and for the earlier places of a tensor returned twice).
    def _all_outputs(self, grads):
        slots = self.__dict__.get("_output_slots")
        if slots is None:
            return tuple(grads)
        count, positions, _ = slots
        full = [None] * count
        for k, g in zip(positions, grads):
            full[k] = g
        return tuple(full)

    def _tensor_outputs(self, grads):
        slots = self.__dict__.get("_output_slots")
        return tuple(grads) if slots is None else tuple(grads[k] for k in slots[1])

    def register_prehook(self, fn):
        if not callable(fn):
            raise TypeError(f"register_prehook() takes a callable, not {type(fn).__name__}")
        if "_output_slots" not in self.__dict__:
            return super().register_prehook(fn)

        def on_all_outputs(grad_outputs):
            full = self._all_outputs(grad_outputs)
            result = _checked_hook_result(fn, fn(full), full)
            return None if result is None else self._tensor_outputs(result)
        on_all_outputs.__name__ = _hook_name(fn)
        return super().register_prehook(on_all_outputs)

    def register_hook(self, fn):
        if not callable(fn):
            raise TypeError(f"register_hook() takes a callable, not {type(fn).__name__}")
        if "_output_slots" not in self.__dict__:
            return super().register_hook(fn)

        def on_all_outputs(grad_inputs, grad_outputs):
            return fn(grad_inputs, self._all_outputs(grad_outputs))
        on_all_outputs.__name__ = _hook_name(fn)
        return super().register_hook(on_all_outputs)

    def _check_grads(self, result):
        if not isinstance(result, tuple):
            result = (result,)
        n_args = len(self._arg_is_tensor)
        name = type(self).__name__
        if len(result) < n_args:
            raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                               f"(expected {n_args}, got {len(result)})")
        for i, g in enumerate(result[n_args:], n_args):
            if g is not None:
                raise RuntimeError(f"function {name} returned an incorrect number of gradients "
                                   f"(expected {n_args}, got {len(result)})")
        grads = []
        for i, (g, is_tensor) in enumerate(zip(result, self._arg_is_tensor)):
            if g is not None and not _is_tensor(g):
                raise RuntimeError(f"expected Variable or None (got {type(g).__name__})")
            if not is_tensor:
                if g is not None:
                    raise RuntimeError(f"function {name} returned a gradient different than None "
                                       f"at position {i + 1}, but the corresponding forward "
                                       f"input was not a Variable")
                continue
            grads.append(g)
        return grads

    def _release(self):
        self._released = True
        self._saved = None
        self.to_save = None


Node.register(BackwardCFunction)


class FunctionMeta(type):
    """Gives each Function subclass its node class, `<Name>Backward`."""

    def __init__(cls, name, bases, attrs):
        backward_cls = type(name + "Backward", (BackwardCFunction,),
                            {"_forward_cls": cls, "__module__": "cagrad.autograd.function"})
        cls._backward_cls = backward_cls
        cls._key = next(_class_ids)
        cls._trace_states = {}
        super().__init__(name, bases, attrs)


class Function(FunctionCtx, metaclass=FunctionMeta):
    """Base class of custom autograd Functions: define static forward() and backward() (and
    optionally setup_context()), then call Cls.apply(*args).

    Under compiled autograd, backward is traced into the captured graph when it can be (it
    only calls cagrad ops on its gradients and saved tensors); set traceable_backward =
    False on a class whose backward must run as Python on every backward, e.g. for its
    side effects or because it depends on state outside ctx."""

    traceable_backward = True

    def __init__(self, *args, **kwargs):
        raise RuntimeError("Legacy autograd function with non-static forward method is "
                           "deprecated. Please use new-style autograd function with static "
                           "forward method. (Example: "
                           "https://pytorch.org/docs/stable/autograd.html#torch.autograd.Function)")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom "
                                  "autograd.Function.")

    @staticmethod
    def setup_context(ctx, inputs, output):
        raise NotImplementedError("setup_context is not implemented.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError("You must implement either the backward or vjp method for "
                                  "your custom autograd.Function to use it with backward mode "
                                  "AD.")

    vjp = backward

    @staticmethod
    def jvp(ctx, *grad_inputs):
        raise NotImplementedError("cagrad has no forward-mode AD (jvp)")

    # torch.func.vmap support: cagrad has no vmap, so a rule is never generated or used
    generate_vmap_rule = False

    @staticmethod
    def vmap(info, in_dims, *args):
        raise NotImplementedError("cagrad has no vmap (torch.func), so a Function's vmap "
                                  "staticmethod is never called (see docs/python-api.md)")

    @classmethod
    def apply(cls, *args, **kwargs):
        uses_setup = cls.setup_context is not Function.setup_context
        if uses_setup:  # as torch: setup_context's inputs carry forward's defaults too
            bound = inspect.signature(cls.forward).bind(*args, **kwargs)
            bound.apply_defaults()
            args, kwargs = bound.args, bound.kwargs
        ctx = cls._backward_cls()
        tensor_args = [a for a in args if _is_tensor(a)]
        ctx.needs_input_grad = tuple(_is_tensor(a) and a.requires_grad for a in args)
        ctx._arg_is_tensor = tuple(_is_tensor(a) for a in args)
        with no_grad():
            if uses_setup:
                output = cls.forward(*args, **kwargs)
            else:
                output = cls.forward(ctx, *args, **kwargs)
        if uses_setup:
            cls.setup_context(ctx, args, output)
        return _record(cls, ctx, tensor_args, output)


def _user_backward(cls):
    """The backward rule a Function defines, backward or vjp (torch's alias), refusing both
    as torch does."""
    backward, vjp = cls.backward, cls.vjp
    if backward is not Function.backward and vjp is not Function.vjp:
        raise RuntimeError("Implementing both 'backward' and 'vjp' for a custom Function is "
                           "not allowed. You should only implement one of them.")
    return vjp if vjp is not Function.vjp else backward


def _record(cls, ctx, tensor_args, output):
    """Record ctx as the node of `output` (a tensor, or a tuple holding tensors)."""
    is_tuple = isinstance(output, tuple)
    outputs = output if is_tuple else (output,)
    positions = [i for i, o in enumerate(outputs) if _is_tensor(o)]
    # A tensor returned at several positions is one output of the node, at its last
    # position, as in torch: the others get no gradient (zeros when materialized).
    kept = [i for k, i in enumerate(positions)
            if not any(outputs[j] is outputs[i] for j in positions[k + 1:])]
    tensors = [outputs[i] for i in kept]
    if not tensors:
        return output
    dirty = getattr(ctx, "dirty_tensors", ())
    nondiff = getattr(ctx, "non_differentiable", ())
    flags = [(_DIRTY if any(t is d for d in dirty) else 0) |
             (_NONDIFF if any(t is d for d in nondiff) else 0) for t in tensors]
    for d in dirty:
        if not any(d is a for a in tensor_args):
            raise RuntimeError("mark_dirty() takes the inputs that forward() changed in place; "
                               "a tensor that is not an input was given")
        if d.is_leaf and d.requires_grad and is_grad_enabled():
            raise RuntimeError("a leaf Variable that requires grad has been used in an in-place "
                               "operation.")
    ctx._output_metas = [(t._dtype, tuple(t._shape)) for t in tensors]
    if len(kept) != len(outputs):  # some outputs are not tensors, or repeat one
        twins = tuple((i, next(n for n, k in enumerate(kept) if outputs[k] is outputs[i]))
                      for i in positions if i not in kept)
        ctx._output_slots = (len(outputs), tuple(kept), twins)
    _save(ctx, tensor_args, tensors)
    results = _C.custom_apply(ctx, tensor_args, tensors, flags, cls.__name__ + "Backward",
                              cls._key)
    for r in results:
        if _C.grad_fn_ctx(r) is ctx:
            ctx._output_ref = weakref.ref(r)
            break
    if not is_tuple:
        return results[0]
    out = list(outputs)
    for i, r in zip(kept, results):
        out[i] = r
    for i, n in ctx.__dict__.get("_output_slots", (0, (), ()))[2]:
        out[i] = results[n]
    return tuple(out)


def _save(ctx, inputs, outputs):
    """ctx.to_save as _Saved records: inputs as they are, the function's own outputs as
    detached aliases (an output holds the node, which must not hold the output)."""
    to_save = getattr(ctx, "to_save", None)
    if to_save is None:
        return
    saved = []
    hooks = current_saved_tensors_hooks()
    for t in to_save:
        if t is None:
            saved.append(None)
        elif hooks is not None:
            saved.append(_Packed(t, hooks))
        elif any(t is o for o in outputs) and not any(t is a for a in inputs):
            k = next(i for i, o in enumerate(outputs) if o is t)
            saved.append(_Saved(_C.detach(t), f"output {k} of {_op_name(type(ctx).__name__)}",
                                k))
        else:
            origin = (f"output {_C.output_nr(t)} of {_op_name(t._grad_fn_name)}"
                      if t._grad_fn_name else None)
            saved.append(_Saved(t, origin))
    ctx._saved = saved
    ctx.to_save = None


def _op_name(node_name):
    """A node's name as torch's in-place error names it: MulBackward0 -> Mul."""
    from .graph import python_name
    return re.sub(r"Backward\d*$", "", python_name(node_name))


def once_differentiable(fn):
    """Mark a backward as not differentiable itself: fn runs with grad mode off, and under
    create_graph its gradients lead to a node that fails if a double backward reaches it
    (when an incoming gradient requires grad), as PyTorch does."""

    @functools.wraps(fn)
    def wrapper(ctx, *args):
        with no_grad():
            outputs = fn(ctx, *args)
        if not is_grad_enabled():
            return outputs
        if not any(_is_tensor(a) and a.requires_grad for a in args):
            return outputs
        single = not isinstance(outputs, tuple)
        outs = (outputs,) if single else outputs
        outs = tuple(_DelayedError.apply(_C.detach(o).requires_grad_()) if _is_tensor(o) else o
                     for o in outs)
        return outs[0] if single else outs

    return wrapper


class InplaceFunction(Function):
    def __init__(self, inplace=False):
        super().__init__()
        self.inplace = inplace


class NestedIOFunction(Function):
    pass



class _DelayedError(Function):
    """Passes a gradient made by a @once_differentiable backward through; differentiating
    it again is torch's error."""

    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("trying to differentiate twice a function that was marked with "
                           "@once_differentiable")
