"""cagrad.autograd: grad() and backward(), with torch.autograd's signatures."""

from .. import _C
from .._grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

from . import function, graph
from .function import Function

__all__ = ["grad", "backward", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "Function", "function", "graph"]


def __getattr__(name):
    # only reached for names cagrad lacks (Function, gradcheck, functional, ...)
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.autograd' has no attribute {name!r}: cagrad "
                         f"supports grad(), backward() and the grad-mode context managers "
                         f"only (custom autograd Functions are not supported)")


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


def _check_create_graph(create_graph):
    if create_graph:
        raise NotImplementedError("cagrad does not support higher-order gradients "
                                  "(create_graph=True): its backward graphs are not "
                                  "differentiable. Compute first-order gradients only.")


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, as a tuple (like torch.autograd.grad).

    .grad fields are not touched. An input that the outputs do not depend on is an error,
    unless allow_unused=True (then its entry is None, or zeros with materialize_grads=True).
    """
    _check_create_graph(create_graph)
    if is_grads_batched:
        raise NotImplementedError("cagrad does not support is_grads_batched=True; "
                                  "call grad() once per batch entry")
    outputs = _as_tuple(outputs, "outputs")
    inputs = _as_tuple(inputs, "inputs")
    if grad_outputs is not None:
        grad_outputs = (grad_outputs,) if isinstance(grad_outputs, _C.TensorBase) else tuple(
            grad_outputs)
        if len(grad_outputs) != len(outputs):
            raise ValueError(f"grad_outputs has {len(grad_outputs)} entries but there are "
                             f"{len(outputs)} outputs; give one per output (None allowed)")
    if allow_unused is None:
        allow_unused = materialize_grads
    grads = _C.grad(outputs, inputs, grad_outputs, bool(retain_graph), bool(allow_unused))
    if materialize_grads:
        grads = [_C.zeros(x._dtype, x._shape) if g is None else g for g, x in zip(grads, inputs)]
    return tuple(grads)


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False, inputs=None):
    """Accumulate the gradients of tensors into the leaves' .grad (torch.autograd.backward)."""
    _check_create_graph(create_graph)
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
    extra = () if inputs is None else (inputs,)
    if len(tensors) == 1:
        _C.backward(tensors[0], grad_tensors[0], bool(retain_graph), *extra)
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
    _C.backward(root, None, bool(retain_graph), *extra)
