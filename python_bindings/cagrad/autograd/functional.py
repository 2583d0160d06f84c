"""torch.autograd.functional: vjp, jvp, hvp, vhp, jacobian and hessian of a Python
function, on top of autograd.grad with create_graph (the eager double backward).

As in PyTorch: `inputs` is a tensor or a tuple of tensors, and results mirror its
structure (and the output's); the inputs are taken detached (or as views that keep their
history, with create_graph); results are detached unless create_graph=True; an input the
output does not use gets zeros, or a RuntimeError with strict=True. jvp and hvp use the
double-vjp trick (the vjp of a vjp), as PyTorch's do. `vectorize=True` and the
forward-mode strategies are not supported (NotImplementedError).
"""

from .. import _C
from .._creation import zeros_like

__all__ = ["vjp", "jvp", "hvp", "vhp", "jacobian", "hessian"]

_DOCS = "see docs/python-api.md"


def _as_tuple(name, arg, what):
    """(tuple of tensors, whether arg was a tuple) with PyTorch's TypeError otherwise."""
    is_tuple = isinstance(arg, (tuple, list))
    items = tuple(arg) if is_tuple else (arg,)
    for i, t in enumerate(items):
        if not isinstance(t, _C.TensorBase):
            if is_tuple:
                raise TypeError(f"The {what} given to {name} must be either a Tensor or a "
                                f"tuple of Tensors but the value at index {i} has type "
                                f"{type(t)}.")
            raise TypeError(f"The {what} given to {name} must be either a Tensor or a tuple "
                            f"of Tensors but the given {what} has type {type(t)}.")
    return items, is_tuple


def _prepare(inputs, create_graph, need_graph=True):
    """The inputs as the function sees them: leaves that require grad, or (create_graph)
    views that keep the caller's history."""
    out = []
    for t in inputs:
        if create_graph and t.requires_grad:
            out.append(t.view_as(t))
        else:
            out.append(t.detach().requires_grad_(need_graph))
    return tuple(out)


def _finish(tensors, create_graph):
    return tuple(t if create_graph or t is None else t.detach() for t in tensors)


def _unpack(items, is_tuple):
    return items if is_tuple else items[0]


def _grads(name, outputs, inputs, grad_outputs, create_graph, strict, what="outputs"):
    """d(sum of outputs * grad_outputs)/d inputs, zeros (or strict's error) where unused."""
    from . import grad

    pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
    if not pairs:
        res = (None,) * len(inputs)
    else:
        res = grad([o for o, _ in pairs], inputs, [g for _, g in pairs], allow_unused=True,
                   create_graph=create_graph, retain_graph=True)
    out = []
    for i, (r, x) in enumerate(zip(res, inputs)):
        if r is None:
            if strict:
                raise RuntimeError(f"The {what} of the user-provided function is independent "
                                   f"of input {i}. This is not allowed in strict mode.")
            r = zeros_like(x)
        out.append(r)
    return tuple(out)


def _check_v(name, v, outputs, is_tuple_out, what):
    if v is None:
        if len(outputs) != 1 or outputs[0].numel() != 1:
            raise RuntimeError(f"The vector v can only be None if the {what} to the user-"
                               f"provided function is a single Tensor with a single element.")
        return (zeros_like(outputs[0]) + 1,)
    vs, _ = _as_tuple(name, v, "v")
    if len(vs) != len(outputs):
        raise RuntimeError(f"v is a tuple of invalid length: should be {len(outputs)} but "
                           f"got {len(vs)}.")
    for i, (a, o) in enumerate(zip(vs, outputs)):
        if tuple(a.shape) != tuple(o.shape):
            raise RuntimeError(f"Entry {i} in v has invalid size: should be "
                               f"{tuple(o.shape)} but got {tuple(a.shape)}.")
    return vs


def _call(name, func, inputs):
    outs, is_tuple = _as_tuple(name, func(*inputs), "outputs of the user-provided function")
    return outs, is_tuple


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), v^T J): the vector-Jacobian product at inputs."""
    ins, in_tuple = _as_tuple("vjp", inputs, "inputs")
    ins = _prepare(ins, create_graph)
    outs, out_tuple = _call("vjp", func, ins)
    vs = _check_v("vjp", v, outs, out_tuple, "output")
    res = _grads("vjp", outs, ins, vs, create_graph, strict)
    return (_unpack(_finish(outs, create_graph), out_tuple),
            _unpack(_finish(res, create_graph), in_tuple))


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), J v) by the double-vjp trick: u -> J^T u is linear in u, and its vjp
    with v is J v."""
    ins, in_tuple = _as_tuple("jvp", inputs, "inputs")
    ins = _prepare(ins, create_graph)
    if v is None:
        if len(ins) != 1 or ins[0].numel() != 1:
            raise RuntimeError("The vector v can only be None if the input to the user-"
                               "provided function is a single Tensor with a single element.")
        vs = (zeros_like(ins[0]) + 1,)
    else:
        vs = _check_v("jvp", v, ins, in_tuple, "input")
    outs, out_tuple = _call("jvp", func, ins)
    us = tuple(zeros_like(o).requires_grad_(True) for o in outs)
    jtu = _grads("jvp", outs, ins, us, True, strict)
    res = _grads("jvp", jtu, us, vs, create_graph, strict, what="backward")
    return (_unpack(_finish(outs, create_graph), out_tuple),
            _unpack(_finish(res, create_graph), out_tuple))


def _scalar_output(name, func, ins):
    outs, out_tuple = _call(name, func, ins)
    if out_tuple or outs[0].numel() != 1:
        raise RuntimeError("The Tensor returned by the function given to hessian should "
                           "contain a single element")
    return outs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), v^T H) for a function with one scalar output."""
    ins, in_tuple = _as_tuple("vhp", inputs, "inputs")
    ins = _prepare(ins, create_graph)
    out = _scalar_output("vhp", func, ins)
    vs = _check_v("vhp", v, ins, in_tuple, "input")
    g = _grads("vhp", (out,), ins, (zeros_like(out) + 1,), True, strict)
    res = _grads("vhp", g, ins, vs, create_graph, strict, what="jacobian")
    return _finish((out,), create_graph)[0], _unpack(_finish(res, create_graph), in_tuple)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(*inputs), H v) for a function with one scalar output (H is symmetric for a
    twice-differentiable function, so it is vhp's product, as PyTorch computes it by the
    double-vjp trick)."""
    ins, in_tuple = _as_tuple("hvp", inputs, "inputs")
    ins = _prepare(ins, create_graph)
    out = _scalar_output("hvp", func, ins)
    vs = _check_v("hvp", v, ins, in_tuple, "input")
    g = _grads("hvp", (out,), ins, (zeros_like(out) + 1,), True, strict)
    us = tuple(zeros_like(x).requires_grad_(True) for x in ins)
    gtu = _grads("hvp", g, ins, us, True, strict, what="jacobian")
    res = _grads("hvp", gtu, us, vs, create_graph, strict, what="jacobian")
    return _finish((out,), create_graph)[0], _unpack(_finish(res, create_graph), in_tuple)


def _no_vectorize(vectorize, strategy):
    if vectorize:
        raise NotImplementedError(f"cagrad's jacobian/hessian have no vectorize=True ({_DOCS})")
    if strategy != "reverse-mode":
        raise NotImplementedError(f"cagrad's jacobian/hessian support only "
                                  f"strategy='reverse-mode' ({_DOCS})")


def _jacobian_rows(out, ins, create_graph, strict):
    """One vjp per element of out: the rows of d out / d ins, stacked per input."""
    from .._functions import stack

    flat = out.reshape(-1)
    rows = [[] for _ in ins]
    for k in range(flat.numel()):
        e = zeros_like(flat)
        e[k] = 1.0
        g = _grads("jacobian", (flat,), ins, (e,), create_graph, strict)
        for i, gi in enumerate(g):
            rows[i].append(gi)
    res = []
    for i, x in enumerate(ins):
        shape = tuple(out.shape) + tuple(x.shape)
        res.append(stack(rows[i]).reshape(shape) if rows[i] else zeros_like(x).reshape(shape))
    return res


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False,
             strategy="reverse-mode"):
    """d func(*inputs) / d inputs: for each output and input, a tensor of shape
    output.shape + input.shape (nested tuples when either is a tuple)."""
    _no_vectorize(vectorize, strategy)
    ins, in_tuple = _as_tuple("jacobian", inputs, "inputs")
    ins = _prepare(ins, create_graph)
    outs, out_tuple = _call("jacobian", func, ins)
    per_out = []
    for o in outs:
        rows = _jacobian_rows(o, ins, create_graph, strict)
        per_out.append(_unpack(_finish(tuple(rows), create_graph), in_tuple))
    return _unpack(tuple(per_out), out_tuple)


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False,
            outer_jacobian_strategy="reverse-mode"):
    """The Hessian of a function with one scalar output: the jacobian of its gradient."""
    _no_vectorize(vectorize, outer_jacobian_strategy)
    ins, in_tuple = _as_tuple("hessian", inputs, "inputs")

    def gradient(*xs):
        out = _scalar_output("hessian", func, xs)
        g = _grads("hessian", (out,), xs, (zeros_like(out) + 1,), True, strict)
        return _unpack(g, in_tuple)

    return jacobian(gradient, _unpack(ins, in_tuple), create_graph=create_graph,
                    strict=strict)
