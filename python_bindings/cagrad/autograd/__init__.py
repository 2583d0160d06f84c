"""cagrad.autograd: grad() and backward(), with torch.autograd's signatures."""

import warnings

from .. import _C
from .._grad_mode import enable_grad, is_grad_enabled, no_grad, set_grad_enabled

from . import function, functional, graph, grad_mode
from .._grad_mode import inference_mode
from .grad_mode import set_multithreading_enabled
from .function import Function
# As in torch, the submodule's functions shadow it on the package: autograd.gradcheck is the
# function, and `from cagrad.autograd.gradcheck import GradcheckError` still finds the module.
from .gradcheck import gradcheck, gradgradcheck

__all__ = ["grad", "backward", "no_grad", "enable_grad", "set_grad_enabled", "is_grad_enabled",
           "Function", "function", "graph", "gradcheck", "gradgradcheck", "grad_mode",
           "inference_mode", "set_multithreading_enabled"]


def __getattr__(name):
    # only reached for names cagrad lacks (forward_ad, profiler, ...)
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.autograd' has no attribute {name!r}: cagrad's "
                         f"autograd has grad(), backward(), Function, functional, graph, "
                         f"gradcheck and gradgradcheck (see docs/python-api.md)")


def _edge_tensor(edge):
    """A GradientEdge as the tensor the C engine takes for it: the edge's leaf, or a
    stand-in whose grad_fn is the edge's node at its output number."""
    node = edge.node._handle() if hasattr(edge.node, "_handle") else edge.node
    return node._output_tensor(edge.output_nr)


def _as_tuple(value, what):
    if isinstance(value, _C.TensorBase):
        return (value,)
    if isinstance(value, graph.GradientEdge):
        return (_edge_tensor(value),)
    if isinstance(value, (tuple, list)):
        value = [_edge_tensor(v) if isinstance(v, graph.GradientEdge) else v for v in value]
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

# anomaly detection: NaN gradients name their node
from . import anomaly_mode  # noqa: E402
from .anomaly_mode import detect_anomaly, set_detect_anomaly  # noqa: E402

__all__ += ["detect_anomaly", "set_detect_anomaly"]


def _check_outputs(outputs):
    # torch's message, e.g. for a gradient made without create_graph=True
    for i, t in enumerate(outputs):
        if not t.requires_grad:
            raise RuntimeError(f"element {i} of tensors does not require grad and does not "
                               f"have a grad_fn")


def _shape_str(shape):
    from .._dtype import Size
    return str(Size(shape))


def _make_grad(out, grad, i):
    """The gradient backward() starts from for output i, checked as torch's _make_grads:
    implicit only for one-element outputs, else a tensor of the output's shape; another
    dtype is converted to the output's (torch's engine casts it too)."""
    if grad is None:
        # an output that does not require grad gets the engine's error instead
        if out.requires_grad and out.numel() != 1:
            _implicit_grad_error(out)
        return None
    if not isinstance(grad, _C.TensorBase):
        raise TypeError(f"gradients can be either Tensors or None, but got "
                        f"{type(grad).__name__}")
    if grad._shape != out._shape:
        raise RuntimeError(f"Mismatch in shape: grad_output[{i}] has a shape of "
                           f"{_shape_str(grad._shape)} and output[{i}] has a shape of "
                           f"{_shape_str(out._shape)}.")
    if grad._dtype != out._dtype:
        from .._indexing import _to_code
        grad = _to_code(grad, out._dtype)
    return grad


def _implicit_grad_error(out):
    # torch's words first, then how to fix it
    raise RuntimeError(f"grad can be implicitly created only for scalar outputs; this output "
                       f"has shape {list(out._shape)}: pass backward(gradient=...) (or "
                       f"grad_outputs=) of that shape, or reduce it first (Tensor.sum())")


def _make_grads(outputs, grads):
    return tuple(_make_grad(t, g, i) for i, (t, g) in enumerate(zip(outputs, grads)))


class _engine_grad_mode:
    """Grad mode while a backward runs (its hooks, callbacks and Functions included): on
    exactly when create_graph, as torch's engine sets it, so that hooks may change leaves
    in place (an optimizer step in a post-accumulate-grad hook) without recording."""

    __slots__ = ("mode", "prev")

    def __init__(self, create_graph):
        self.mode = bool(create_graph)

    def __enter__(self):
        self.prev = _C.set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        _C.set_grad_enabled(self.prev)
        return False


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


def _gradients_for(grads, outputs):
    """One entry per output from grad_outputs / grad_tensors (None, a tensor or a
    sequence): torch zips them, so extra entries are ignored and too few is its error."""
    if grads is None:
        return (None,) * len(outputs)
    grads = (grads,) if isinstance(grads, _C.TensorBase) else tuple(grads)
    if len(grads) < len(outputs):
        raise RuntimeError(f"got {len(outputs)} tensors and {len(grads)} gradients")
    return grads[:len(outputs)]


def _grad_inputs(inputs):
    """(inputs as a tuple, the dict's keys or None): torch also takes a dict of inputs and
    then answers with a dict."""
    keys = None
    if isinstance(inputs, dict):
        keys, inputs = tuple(inputs.keys()), tuple(inputs.values())
    inputs = _as_tuple(inputs, "inputs")
    if not inputs:
        raise RuntimeError("`inputs` argument to `grad()` cannot be empty.")
    return inputs, keys


def grad(outputs, inputs, grad_outputs=None, retain_graph=None, create_graph=False,
         only_inputs=True, allow_unused=None, is_grads_batched=False, materialize_grads=False):
    """The gradients of outputs with respect to inputs, as a tuple (like torch.autograd.grad).

    .grad fields are not touched. An input that the outputs do not depend on is an error,
    unless allow_unused=True (then its entry is None, or zeros with materialize_grads=True).
    is_grads_batched=True runs one backward per entry of the grad_outputs' first dim and
    stacks the gradients (torch vmaps that loop; the values are the same).
    """
    if materialize_grads and allow_unused is False:
        raise ValueError("Expected allow_unused to be True or not passed when "
                         "materialize_grads=True, but got: allow_unused=False.")
    if allow_unused is None:
        allow_unused = materialize_grads
    outputs = _as_tuple(outputs, "outputs")
    inputs, keys = _grad_inputs(inputs)
    if not only_inputs:
        warnings.warn("only_inputs argument is deprecated and is ignored now (defaults to "
                      "True). To accumulate gradient for other parts of the graph, please "
                      "use torch.autograd.backward.", FutureWarning, stacklevel=2)
    grad_outputs = _gradients_for(grad_outputs, outputs)
    retain = _retain(retain_graph, create_graph)
    if is_grads_batched:
        grads = _batched_grad(outputs, inputs, grad_outputs, retain, create_graph)
    else:
        grads = _run_grad(outputs, inputs, _make_grads(outputs, grad_outputs), retain,
                          create_graph)
    grads = _finish_grads(grads, inputs, allow_unused, materialize_grads, create_graph)
    return dict(zip(keys, grads)) if keys is not None else grads


def _run_grad(outputs, inputs, grad_outputs, retain, create_graph):
    """One backward of the library: a gradient or None per input."""
    _check_outputs(outputs)
    if not all(x.requires_grad for x in inputs):
        raise RuntimeError("One of the differentiated Tensors does not require grad")
    with _engine_grad_mode(create_graph), variable._BackwardScope(outputs, inputs), \
            anomaly_mode.checking(outputs):
        # unused inputs come back as None and are judged in _finish_grads, as torch
        # judges them after its engine ran
        return _C.grad(outputs, inputs, grad_outputs, retain, True, bool(create_graph))


def _finish_grads(grads, inputs, allow_unused, materialize_grads, create_graph):
    if not allow_unused:
        for i, g in enumerate(grads):
            if g is None:
                raise RuntimeError(f"The differentiated Tensor at index {i} appears to not "
                                   f"have been used in the graph. Set allow_unused=True if "
                                   f"this is the desired behavior.")
    if materialize_grads:
        grads = [_materialized(x, create_graph) if g is None else g
                 for g, x in zip(grads, inputs)]
    return tuple(grads)


def _materialized(x, create_graph):
    z = _C.zeros(x._dtype, x._shape)
    # torch: zeros_like(input, requires_grad=create_graph)
    return z.requires_grad_() if create_graph else z


def _batched_grad(outputs, inputs, grad_outputs, retain, create_graph):
    """is_grads_batched: grad_outputs[k][b] is the b-th gradient of output k; the result
    stacks, per input, the gradients of the B backwards (None where every one is None)."""
    for i, (out, g) in enumerate(zip(outputs, grad_outputs)):
        if g is None:
            if out.numel() != 1:
                _implicit_grad_error(out)
            raise NotImplementedError("cagrad's is_grads_batched=True needs a batched "
                                      "grad_output for every output (see docs/python-api.md)")
        if not isinstance(g, _C.TensorBase):
            raise TypeError(f"gradients can be either Tensors or None, but got "
                            f"{type(g).__name__}")
        if tuple(g._shape[1:]) != tuple(out._shape):
            # torch's message names the shape of g[0][1:] (its check slices twice)
            raise RuntimeError(
                f"If `is_grads_batched=True`, we interpret the first dimension of each "
                f"grad_output as the batch dimension. The sizes of the remaining dimensions "
                f"are expected to match the shape of corresponding output, but a mismatch "
                f"was detected: grad_output[{i}] has a shape of "
                f"{_shape_str(g._shape[2:])} and "
                f"output[{i}] has a shape of {_shape_str(out._shape)}. If you only want "
                f"some tensors in `grad_output` to be considered batched, consider using "
                f"vmap.")
    sizes = {g._shape[0] for g in grad_outputs}
    if len(sizes) != 1:
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sorted(sizes)} for the mapped dimension")
    if 0 in sizes:
        raise IndexError("index 0 is out of bounds for dimension 0 with size 0")
    batch = sizes.pop()
    rows = []
    for b in range(batch):
        with enable_grad() if create_graph else no_grad():
            gos = _make_grads(outputs, [_C.select(g, 0, b) for g in grad_outputs])
        rows.append(_run_grad(outputs, inputs, gos, retain or b < batch - 1, create_graph))
    from .. import _functions
    out = []
    for i, x in enumerate(inputs):
        column = [r[i] for r in rows]
        if all(g is None for g in column):
            out.append(None)
            continue
        column = [_C.zeros(x._dtype, x._shape) if g is None else g for g in column]
        out.append(_functions.stack(column, 0))
    return out


def backward(tensors, grad_tensors=None, retain_graph=None, create_graph=False,
             grad_variables=None, inputs=None):
    """Accumulate the gradients of tensors into the leaves' .grad (torch.autograd.backward)."""
    if grad_variables is not None:
        warnings.warn("'grad_variables' is deprecated. Use 'grad_tensors' instead.",
                      FutureWarning, stacklevel=2)
        if grad_tensors is not None:
            raise RuntimeError("'grad_tensors' and 'grad_variables' (deprecated) arguments "
                               "both passed to `backward()`. Please only use "
                               "'grad_tensors'.")
        grad_tensors = grad_variables
    _warn_grad_cycle(create_graph, inputs)
    retain = _retain(retain_graph, create_graph)
    tensors = _as_tuple(tensors, "tensors")
    if inputs is not None:
        inputs = _as_tuple(inputs, "inputs")
        if not inputs:
            raise RuntimeError("`inputs` argument to `backward()` cannot be empty.")
    grad_tensors = _make_grads(tensors, _gradients_for(grad_tensors, tensors))
    _check_outputs(tensors)
    inputs = () if inputs is None else inputs
    if len(tensors) == 1:
        with _engine_grad_mode(create_graph), variable._BackwardScope(tensors, inputs), \
                anomaly_mode.checking(tensors):
            _C.backward(tensors[0], grad_tensors[0], retain, inputs, bool(create_graph))
        return
    # Several roots run as one backward through sum_i <t_i, g_i>, so that hooks and
    # accumulation happen once, as in torch.
    with enable_grad():
        root = None
        for t, g in zip(tensors, grad_tensors):
            term = _C.sum(t if g is None else _C.mul(t, g), (), False)
            root = term if root is None else _C.add(root, term)
    with _engine_grad_mode(create_graph), variable._BackwardScope((root,), inputs), \
            anomaly_mode.checking((root,)):
        _C.backward(root, None, retain, inputs, bool(create_graph))
