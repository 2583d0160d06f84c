"""Module hooks as torch.nn.Module has them: forward pre-hooks, forward hooks, full
backward (pre-)hooks, their global variants (nn.modules.module.register_module_*) and the
RemovableHandle they return.

Full backward hooks are built the way PyTorch builds them: the module's positional tensor
inputs and its tensor outputs each pass through one identity autograd Function
(BackwardHookFunction). A hook on the output identity's node sees grad_output (and runs
the backward pre-hooks, which may replace it); a hook on the input identity's node sees
grad_input and runs the full backward hooks, which may replace it. Both are ordinary node
hooks, so they run under compiled autograd too (as call-outs of the compiled graph).
"""

import itertools
import warnings
import weakref
from collections import OrderedDict

from .. import _C
from .._creation import zeros_like
from .._grad_mode import is_grad_enabled
from ..autograd.function import Function

__all__ = ["RemovableHandle", "register_module_forward_pre_hook",
           "register_module_forward_hook", "register_module_full_backward_pre_hook",
           "register_module_full_backward_hook", "register_module_backward_hook"]

_next_id = itertools.count()


class RemovableHandle:
    """remove() deletes the hook from the dict it was stored in (and from the extra dicts
    that flag it, such as with_kwargs); also a context manager. The dicts are held weakly,
    so a handle does not keep a module alive."""

    def __init__(self, hooks_dict, *, extra_dict=None):
        self.hooks_dict_ref = weakref.ref(hooks_dict)
        self.id = next(_next_id)
        extras = [] if extra_dict is None else (
            [extra_dict] if isinstance(extra_dict, dict) else list(extra_dict))
        self.extra_dict_ref = tuple(weakref.ref(d) for d in extras)

    def remove(self):
        for ref in (self.hooks_dict_ref, *self.extra_dict_ref):
            target = ref()
            if target is not None:
                target.pop(self.id, None)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.remove()


# --- global hooks (every module) ---------------------------------------------------------
_global_forward_pre_hooks = OrderedDict()
_global_forward_hooks = OrderedDict()
_global_forward_hooks_with_kwargs = OrderedDict()
_global_forward_hooks_always_called = OrderedDict()
_global_backward_pre_hooks = OrderedDict()
_global_backward_hooks = OrderedDict()


def register_module_forward_pre_hook(hook):
    """hook(module, args) before every module's forward (before its own pre-hooks)."""
    handle = RemovableHandle(_global_forward_pre_hooks)
    _global_forward_pre_hooks[handle.id] = hook
    return handle


def register_module_forward_hook(hook, *, with_kwargs=False, always_call=False):
    """hook(module, args, output) (with_kwargs: hook(module, args, kwargs, output)) after
    every module's forward, before its own forward hooks."""
    handle = RemovableHandle(_global_forward_hooks,
                             extra_dict=_global_forward_hooks_always_called)
    _global_forward_hooks[handle.id] = hook
    if with_kwargs:
        _global_forward_hooks_with_kwargs[handle.id] = True
    if always_call:
        _global_forward_hooks_always_called[handle.id] = True
    return handle


def register_module_full_backward_pre_hook(hook):
    handle = RemovableHandle(_global_backward_pre_hooks)
    _global_backward_pre_hooks[handle.id] = hook
    return handle


def register_module_full_backward_hook(hook):
    handle = RemovableHandle(_global_backward_hooks)
    _global_backward_hooks[handle.id] = hook
    return handle


def register_module_backward_hook(hook):
    raise NotImplementedError(_NON_FULL)


_NON_FULL = ("cagrad does not support the deprecated non-full module backward hooks "
             "(register_backward_hook / register_module_backward_hook); use "
             "register_full_backward_hook instead (see docs/python-api.md, 'More nn')")


def has_hooks(module):
    d = module.__dict__
    return bool(d.get("_forward_pre_hooks") or d.get("_forward_hooks")
                or d.get("_backward_hooks") or d.get("_backward_pre_hooks")
                or _global_forward_pre_hooks or _global_forward_hooks
                or _global_backward_pre_hooks or _global_backward_hooks)


# --- the identity node that carries the backward hooks ------------------------------------
class BackwardHookFunction(Function):
    """Identity on its tensors; its node (BackwardHookFunctionBackward) is where the
    module's backward hooks are attached."""

    @staticmethod
    def forward(ctx, *args):
        ctx.mark_non_differentiable(*[arg for arg in args if not arg.requires_grad])
        return args

    @staticmethod
    def backward(ctx, *grads):
        return grads


def _pack(indices, values, size):
    """values placed at indices of a size-long tuple of Nones (non-tensor arguments)."""
    packed = [None] * size
    for index, value in zip(indices, values):
        packed[index] = value
    return tuple(packed)


class BackwardHook:
    """One module call's backward hooks: grad_output is recorded at the output identity
    node and handed to the full backward hooks at the input identity node."""

    def __init__(self, module, user_hooks, user_pre_hooks):
        self.module = module
        self.user_hooks = user_hooks
        self.user_pre_hooks = user_pre_hooks
        self.grad_outputs = None
        self.n_inputs = self.n_outputs = -1
        self.input_index = self.output_index = None

    def _wrap(self, args, attach):
        """args with their tensors passed through one BackwardHookFunction (whose node
        gets attach()ed), their positions and which of them need grad; (args, None, None)
        if none needs grad."""
        index = [i for i, arg in enumerate(args) if isinstance(arg, _C.TensorBase)]
        tensors = [args[i] for i in index]
        needs = [t.requires_grad for t in tensors]
        if not (any(needs) and is_grad_enabled()):
            return args, None, None
        wrapped = BackwardHookFunction.apply(*tensors)
        attach(next(t.grad_fn for t in wrapped if t.grad_fn is not None))
        out = list(args)
        for i, tensor in zip(index, wrapped):
            out[i] = tensor
        return tuple(out), index, (needs, tensors)

    def setup_input_hook(self, args):
        args, self.input_index, self.input_info = self._wrap(
            args, lambda node: node.register_hook(self._input_hook))
        self.n_inputs = len(args)
        return args

    def setup_output_hook(self, result):
        single = not isinstance(result, tuple)
        outputs = (result,) if single else result
        outputs, self.output_index, self.output_info = self._wrap(
            outputs, lambda node: node.register_hook(self._output_hook))
        self.n_outputs = len(outputs)
        return outputs[0] if single else outputs

    def _input_hook(self, grad_input, _):
        if self.grad_outputs is None:
            return None  # the gradient reached the inputs without passing the outputs
        # torch's identity node passes a zero gradient through for an input that needs
        # none (its non-differentiable output's gradient, materialised); cagrad's has None
        needs, tensors = self.input_info
        seen = [g if g is not None or need else zeros_like(t)
                for g, need, t in zip(grad_input, needs, tensors)]
        grads = _pack(self.input_index, seen, self.n_inputs)
        for hook in self.user_hooks:
            out = hook(self.module, grads, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(grads):
                raise RuntimeError(f"Backward hook returned an invalid number of grad_input, "
                                   f"got {len(out)}, but expected {len(grads)}")
            grads = out
        self.grad_outputs = None
        return tuple(grads[i] if need else None for i, need in zip(self.input_index, needs))

    def _output_hook(self, _, grad_output):
        # an output that needs no grad has None here in torch (cagrad materialises zeros)
        needs = self.output_info[0]
        original = grad_output
        grad_output = [g if need else None for g, need in zip(grad_output, needs)]
        self.grad_outputs = _pack(self.output_index, grad_output, self.n_outputs)
        for hook in self.user_pre_hooks:
            out = hook(self.module, self.grad_outputs)
            if out is None:
                continue
            if len(out) != len(self.grad_outputs):
                raise RuntimeError(f"Backward pre hook returned an invalid number of "
                                   f"grad_output, got {len(out)}, but expected "
                                   f"{len(self.grad_outputs)}")
            self.grad_outputs = out
        local = self.grad_outputs
        if self.input_index is None:  # no input needs grad: the hooks fire here
            warnings.warn("Full backward hook is firing when gradients are computed with "
                          "respect to module outputs since no inputs require gradients. See "
                          "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                          "#torch.nn.Module.register_full_backward_hook for more details.",
                          stacklevel=5)
            grads = (None,) * self.n_inputs
            for hook in self.user_hooks:
                out = hook(self.module, grads, self.grad_outputs)
                if out is not None and not (isinstance(out, tuple)
                                            and all(el is None for el in out)):
                    raise RuntimeError("Backward hook for Modules where no input requires "
                                       "gradient should always return None or None for all "
                                       "gradients.")
            self.grad_outputs = None
        return tuple(local[i] if need else g
                     for i, need, g in zip(self.output_index, needs, original))


# --- the call ------------------------------------------------------------------------------
def call_with_hooks(module, args, kwargs):
    """module(*args, **kwargs) with its and the global hooks, in PyTorch's order: global
    then own forward pre-hooks, forward, global then own forward hooks; always_call
    forward hooks also run when forward (or a hook) raised."""
    state = {"result": None, "args": args, "kwargs": kwargs, "called": set()}
    try:
        return _run(module, state)
    except Exception:
        _run_always_called(module, state)
        raise


def _hook_dicts(module):
    """The module's hook dicts by name; empty ones for a module built without them (an
    object unpickled from before cagrad had hooks)."""
    d = module.__dict__
    return {name: d.get(name) or {} for name in (
        "_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
        "_forward_hooks_with_kwargs", "_forward_hooks_always_called", "_backward_pre_hooks",
        "_backward_hooks")}


def _run(module, state):
    d = _hook_dicts(module)
    pre_hooks = [*_global_backward_pre_hooks.values(), *d["_backward_pre_hooks"].values()]
    full_hooks = [*_global_backward_hooks.values(), *d["_backward_hooks"].values()]
    for hook_id, hook in (*_global_forward_pre_hooks.items(),
                          *d["_forward_pre_hooks"].items()):
        _apply_pre_hook(module, state, hook_id, hook)
    bw_hook = None
    if full_hooks or pre_hooks:
        bw_hook = BackwardHook(module, full_hooks, pre_hooks)
        state["args"] = bw_hook.setup_input_hook(state["args"])
    state["result"] = module.forward(*state["args"], **state["kwargs"])
    for hook_id, hook in (*_global_forward_hooks.items(), *d["_forward_hooks"].items()):
        if hook_id in d["_forward_hooks_always_called"] or \
                hook_id in _global_forward_hooks_always_called:
            state["called"].add(hook_id)
        out = _call_forward_hook(module, state, hook_id, hook)
        if out is not None:
            state["result"] = out
    if bw_hook is not None:
        if not isinstance(state["result"], (_C.TensorBase, tuple)):
            warnings.warn(f"For backward hooks to be called, module output should be a "
                          f"Tensor or a tuple of Tensors but received "
                          f"{type(state['result'])}", stacklevel=4)
        state["result"] = bw_hook.setup_output_hook(state["result"])
    return state["result"]


def _apply_pre_hook(module, state, hook_id, hook):
    if hook_id in _hook_dicts(module)["_forward_pre_hooks_with_kwargs"]:
        out = hook(module, state["args"], state["kwargs"])
        if out is None:
            return
        if not (isinstance(out, tuple) and len(out) == 2):
            raise RuntimeError(f"forward pre-hook must return None or a tuple of "
                               f"(new_args, new_kwargs), but got {out}.")
        state["args"], state["kwargs"] = out
        return
    out = hook(module, state["args"])
    if out is not None:
        state["args"] = out if isinstance(out, tuple) else (out,)


def _call_forward_hook(module, state, hook_id, hook):
    if hook_id in _hook_dicts(module)["_forward_hooks_with_kwargs"] or \
            hook_id in _global_forward_hooks_with_kwargs:
        return hook(module, state["args"], state["kwargs"], state["result"])
    return hook(module, state["args"], state["result"])


def _run_always_called(module, state):
    """The always_call forward hooks not yet run; their own errors only warn, so the
    original exception is the one that propagates."""
    d = _hook_dicts(module)
    for hooks, flags, where in ((_global_forward_hooks, _global_forward_hooks_always_called,
                                 "global module"),
                                (d["_forward_hooks"], d["_forward_hooks_always_called"],
                                 "module")):
        for hook_id, hook in list(hooks.items()):
            if hook_id not in flags or hook_id in state["called"]:
                continue
            try:
                if where == "global module":  # torch passes no kwargs to global ones here
                    out = hook(module, state["args"], state["result"])
                else:
                    out = _call_forward_hook(module, state, hook_id, hook)
                if out is not None:
                    state["result"] = out
            except Exception as e:  # noqa: BLE001 - silenced, as torch does
                warnings.warn(f"{where} forward hook with ``always_call=True`` raised an "
                              f"exception that was silenced as another error was raised in "
                              f"forward: {e}", stacklevel=4)
