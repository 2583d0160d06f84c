"""cagrad.autograd: grad() and backward(), with torch.autograd's signatures."""

import warnings

from .. import _C
from .._grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

from . import function, functional, graph
from .function import Function
# As in torch, the submodule's functions shadow it on the package: autograd.gradcheck is the
# function, and `from cagrad.autograd.gradcheck import GradcheckError` still finds the module.
from .gradcheck import gradcheck, gradgradcheck

__all__ = ["grad", "backward", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "Function", "function", "graph", "gradcheck", "gradgradcheck"]


def __getattr__(name):
    # only reached for names cagrad lacks (forward_ad, profiler, ...)
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.autograd' has no attribute {name!r}: cagrad's "
                         f"autograd has grad(), backward(), Function, functional, graph, "
                         f"gradcheck and gradgradcheck (see docs/python-api.md)")


def _as_tuple(value, what):
    if isinstance(value, _C.TensorBase):
        return (value,)
    if isinstance(value, (tuple, list)):
        for v in value:
            if not isinstance(v, _C.TensorBase):
                raise TypeError(f"{what} must be Tensors, got an element of type "
                                f"{type(v).__name__}")
        return tuple(value)
    raise TypeError(f"{what} must be a Tensor or a sequence of Tensors, not {type(value).__name__}")


# torch.autograd.Variable, and its engine's queue_callback: callbacks that run when the
# backward in progress ends (variable.py; grad() and backward() below open its scope)
from . import variable  # noqa: E402
from .variable import Variable  # noqa: E402

__all__ += ["Variable"]

# anomaly detection: NaN gradients name their node (h20)
from . import anomaly_mode  # noqa: E402
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: E402

__all__ += ["detect_anomaly", "set_detect_anomaly"]


def _check_outputs(outputs):
    # torch's message, e.g. for a gradient made without create_graph=True
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               f"have a grad_fn")


def _retain(retain_graph, create_graph):
    # torch: retain_graph defaults to create_graph (the new graph reaches into the old one)
    return bool(create_graph) if retain_graph is None else bool(retain_graph)


_warned_cycle = False  # torch warns once per process


def _warn_grad_cycle(create_graph, inputs):
    global _warned_cycle
    if create_graph and inputs is None and not _warned_cycle:
        _warned_cycle = True
        warnings.warn("Using backward() with create_graph=True will create a reference cycle "
                      "between the parameter and its gradient which can cause a memory leak. "
                      "We recommend using autograd.grad when creating the graph to avoid this. "
                      "If you have to use this function, make sure to reset the .grad fields of "
                      "your parameters to None after use to break the cycle and avoid the leak.",
                      UserWarning, stacklevel=3)


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, as a tuple (like torch.autograd.grad).

    .grad fields are not touched. An input that the outputs do not depend on is an error,
    unless allow_unused=True (then its entry is None, or zeros with materialize_grads=True).
    """
    if is_grads_batched:
        raise NotImplementedError("cagrad does not support is_grads_batched=True; "
                                  "call grad() once per batch entry")
    outputs = _as_tuple(outputs, "outputs")
    inputs = _as_tuple(inputs, "inputs")
    _check_outputs(outputs)
    if grad_outputs is not None:
        grad_outputs = (grad_outputs,) if isinstance(grad_outputs, _C.TensorBase) else tuple(
            grad_outputs)
        if len(grad_outputs) != len(outputs):
            raise ValueError(f"grad_outputs has {len(grad_outputs)} entries but there are "
                             f"{len(outputs)} outputs; give one per output (None allowed)")
    if allow_unused is None:
        allow_unused = materialize_grads
    with variable._BackwardScope(outputs, inputs), anomaly_mode.checking(outputs):
        grads = _C.grad(outputs, inputs, grad_outputs, _retain(retain_graph, create_graph),
                        bool(allow_unused), bool(create_graph))
    if materialize_grads:
        grads = [_C.zeros(x._dtype, x._shape) if g is None else g for g, x in zip(grads, inputs)]
    return tuple(grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of tensors into the leaves' .grad (torch.autograd.backward)."""
    _warn_grad_cycle(create_graph, inputs)
    retain = _retain(retain_graph, create_graph)
    tensors = _as_tuple(tensors, "tensors")
    if inputs is not None:
        inputs = _as_tuple(inputs, "inputs")
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    if grad_tensors is None:
        grad_tensors = (None,) * len(tensors)
    elif isinstance(grad_tensors, _C.TensorBase):
        grad_tensors = (grad_tensors,)
    if len(grad_tensors) != len(tensors):
        raise ValueError(f"grad_tensors has {len(grad_tensors)} entries but there are "
                         f"{len(tensors)} tensors")
    inputs = () if inputs is None else inputs
    if len(tensors) == 1:
        _check_outputs(tensors)
        with variable._BackwardScope(tensors, inputs), anomaly_mode.checking(tensors):
            _C.backward(tensors[0], grad_tensors[0], retain, inputs, bool(create_graph))
        return
    # Several roots run as one backward through sum_i <t_i, g_i>, so that hooks and
    # accumulation happen once, as in torch.
    with enable_grad():
        root = None
        for t, g in zip(tensors, grad_tensors):
            if not t.requires_grad:
                raise RuntimeError("element of tensors does not require grad and does not "
                                   "have a grad_fn")
            if g is None and t.numel() != 1:
                raise RuntimeError(f"grad can be implicitly created only for scalar outputs; "
                                   f"pass grad_tensors for the tensor of shape "
                                   f"{list(t._shape)}")
            term = _C.sum(t if g is None else _C.mul(t, g), (), False)
            root = term if root is None else _C.add(root, term)
    with variable._BackwardScope((root,), inputs), anomaly_mode.checking((root,)):
        _C.backward(root, None, retain, inputs, bool(create_graph))
