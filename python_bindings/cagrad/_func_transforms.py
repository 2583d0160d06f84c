"""torch.func's transforms for cagrad: grad, grad_and_value, vjp, jvp, linearize, jacrev,
jacfwd, hessian and vmap.

They are built on cagrad's reverse mode (autograd.grad), not on functorch's levels:

- each transform marks the inputs it differentiates: an input that is already part of a
  graph (requires grad) gets a differentiable alias, so an outer transform still sees the
  dependence (grad(grad(f)), jacrev(jacrev(f)) nest), and the inner gradients keep their
  graph only then (create_graph is on only when nesting);
- jacfwd is computed by reverse mode too (a vjp per output element), and jvp by two
  reverse passes (the double-vjp trick): same values as PyTorch's forward mode, a
  different cost;
- vmap is a Python loop over the batch that stacks the results, not a batching transform:
  func runs once per batch element (side effects and randomness happen per element; the
  randomness argument is accepted and not enforced).
"""

import functools

from . import _C
from . import autograd
from ._grad_mode import enable_grad

_TensorBase = _C.TensorBase


# ------------------------------------------------------------------------------ pytrees
def _flatten(tree):
    """(leaves, rebuild): tuples, lists and dicts of tensors (or other leaves)."""
    if isinstance(tree, (tuple, list)):
        parts = [_flatten(x) for x in tree]
        leaves = [leaf for p in parts for leaf in p[0]]

        def rebuild(values, parts=parts, kind=type(tree)):
            out, i = [], 0
            for p in parts:
                n = len(p[0])
                out.append(p[1](values[i:i + n]))
                i += n
            return kind(out) if kind in (tuple, list) else kind(*out)
        return leaves, rebuild
    if isinstance(tree, dict):
        keys = list(tree)
        leaves, rebuild_values = _flatten([tree[k] for k in keys])
        return leaves, lambda values: dict(zip(keys, rebuild_values(values)))
    return [tree], lambda values: values[0]


def _map(fn, tree):
    leaves, rebuild = _flatten(tree)
    return rebuild([fn(x) for x in leaves])


# ------------------------------------------------------------------------------ helpers
def _check_tensor_leaf(x):
    if not isinstance(x, _TensorBase):
        raise ValueError(f"Thing passed to transform API must be Tensor, got {type(x)}")
    return x


def _mark(x):
    """x as an input to differentiate: a fresh leaf, or (when x is already in a graph) a
    differentiable alias so that enclosing transforms can differentiate through."""
    _check_tensor_leaf(x)
    if x.requires_grad:
        return _C.view(x, x._shape)
    return _C.detach(x).requires_grad_(True)


def _nested(leaves):
    return any(x.requires_grad for x in leaves if isinstance(x, _TensorBase))


def _argnums(argnums, n_args):
    nums = (argnums,) if isinstance(argnums, int) else tuple(argnums)
    if not nums:
        raise RuntimeError("argnums must be non-empty")
    for a in nums:
        if not isinstance(a, int):
            raise RuntimeError(f"argnums must be int or Tuple[int, ...], got: {type(a)}")
        if not -n_args <= a < n_args:
            raise RuntimeError(f"Got argnum={a}, but only {n_args} positional inputs")
    return tuple(a % n_args for a in nums)


def _grads(outputs, inputs, grad_outputs, create_graph):
    """d outputs / d inputs (zeros for inputs the outputs do not depend on)."""
    from ._creation import zeros_like

    if grad_outputs is not None:
        pairs = [(o, g) for o, g in zip(outputs, grad_outputs) if o.requires_grad]
        outputs, grad_outputs = tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)
    else:
        outputs = tuple(o for o in outputs if o.requires_grad)
    if not outputs:  # nothing depends on the inputs
        return tuple(zeros_like(_C.detach(x)) for x in inputs)
    return autograd.grad(outputs, inputs, grad_outputs, retain_graph=True,
                         create_graph=create_graph, allow_unused=True, materialize_grads=True)


def _finish(x, keep):
    return x if keep or not isinstance(x, _TensorBase) else _C.detach(x)


def _split_aux(output, has_aux, api):
    if not has_aux:
        return output, None
    if not (isinstance(output, tuple) and len(output) == 2):
        raise RuntimeError(f"{api}(f)(*args): output of function f should be a tuple: "
                           f"(output, aux) if has_aux is True")
    return output


class _Marked:
    """args with the differentiated ones (argnums) replaced by marked leaves."""

    def __init__(self, args, argnums):
        self.nums = _argnums(argnums, len(args))
        self.args = list(args)
        self.trees = []
        outer = []
        for a in self.nums:
            leaves, rebuild = _flatten(args[a])
            outer.extend(leaves)
            marked = [_mark(x) for x in leaves]
            self.trees.append((marked, rebuild))
            self.args[a] = rebuild(marked)
        self.nested = _nested(outer)

    @property
    def leaves(self):
        return [x for marked, _ in self.trees for x in marked]

    def rebuild(self, flat, single):
        """Per-argnum trees from a flat list matching self.leaves."""
        out, i = [], 0
        for marked, rebuild in self.trees:
            out.append(rebuild(list(flat[i:i + len(marked)])))
            i += len(marked)
        return out[0] if single else tuple(out)


# ------------------------------------------------------------------------------ grad
def grad_and_value(func, argnums=0, has_aux=False):
    """A function returning (gradient of func w.r.t. args[argnums], func's value); func
    must return a scalar tensor (or (scalar, aux) with has_aux)."""
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with enable_grad():
            marked = _Marked(args, argnums)
            output, aux = _split_aux(func(*marked.args, **kwargs), has_aux, "grad_and_value")
            if not isinstance(output, _TensorBase):
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"Tensor, got {type(output)}")
            if output.ndim != 0:
                raise RuntimeError(f"grad_and_value(f)(*args): Expected f(*args) to return a "
                                   f"scalar Tensor, got tensor with {output.ndim} dims. Maybe "
                                   f"you wanted to use the vjp or jacrev APIs instead?")
            grads = _grads((output,), marked.leaves, None, marked.nested)
        keep = marked.nested
        result = marked.rebuild([_finish(g, keep) for g in grads], isinstance(argnums, int))
        value = _finish(output, keep)
        if has_aux:
            return result, (value, _map(lambda x: _finish(x, keep), aux))
        return result, value
    return wrapper


def grad(func, argnums=0, has_aux=False):
    """torch.func.grad: a function returning the gradient of func (a scalar output) w.r.t.
    args[argnums] (an int or a tuple of ints; each argument a tensor or a tuple/list/dict of
    tensors); with has_aux, (gradient, aux)."""
    inner = grad_and_value(func, argnums, has_aux)

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        g, value = inner(*args, **kwargs)
        return (g, value[1]) if has_aux else g
    return wrapper


# ------------------------------------------------------------------------------ vjp
def vjp(func, *primals, has_aux=False):
    """torch.func.vjp: (func(*primals), vjp_fn[, aux]); vjp_fn(cotangents) returns a tuple
    with the vector-Jacobian product for every primal. vjp_fn may be called repeatedly."""
    with enable_grad():
        marked = _Marked(primals, tuple(range(len(primals)))) if primals else None
        if marked is None:
            raise RuntimeError("vjp: expected at least one primal")
        output, aux = _split_aux(func(*marked.args), has_aux, "vjp")
    out_leaves, _ = _flatten(output)
    for o in out_leaves:
        _check_tensor_leaf(o)
    keep = marked.nested

    def vjp_fn(cotangents, *, retain_graph=True, create_graph=None):
        cot_leaves, _ = _flatten(cotangents)
        if len(cot_leaves) != len(out_leaves):
            raise RuntimeError(f"Expected pytree structure of cotangents to be the same as "
                               f"pytree structure of outputs to the function: got "
                               f"{len(cot_leaves)} cotangents for {len(out_leaves)} outputs")
        nested = keep or bool(create_graph) or _nested(cot_leaves)
        with enable_grad():
            grads = _grads(tuple(out_leaves), marked.leaves, tuple(cot_leaves), nested)
        return marked.rebuild([_finish(g, nested) for g in grads], False)

    result = _map(lambda x: _finish(x, keep), output)
    if has_aux:
        return result, vjp_fn, _map(lambda x: _finish(x, keep), aux)
    return result, vjp_fn


# ------------------------------------------------------------------------------ jvp
_JVP = "jvp(f, primals, tangents): "


def _jvp_leaves(primals, tangents):
    """The tangent leaves, with torch's checks, in the primals' dtypes (the results take
    the wider dtype back, as PyTorch's forward gradients do)."""
    if not isinstance(primals, tuple):
        raise RuntimeError(_JVP + "Expected primals to be a tuple. E.g. it should be valid "
                                  "to call f(*primals).")
    p_leaves, _ = _flatten(primals)
    t_leaves, _ = _flatten(tangents)
    if type(tangents) is not tuple or len(p_leaves) != len(t_leaves) or any(
            type(a) is not type(b) and (isinstance(a, (tuple, list, dict))
                                        or isinstance(b, (tuple, list, dict)))
            for a, b in zip(primals, tangents)):
        raise RuntimeError(_JVP + "Expected primals and tangents to have the same python "
                                  "structure. For example, if primals is a tuple of 3 tensors, "
                                  "tangents also must be.")
    if not p_leaves:
        raise RuntimeError(_JVP + "Expected primals to contain at least one Tensor.")
    out = []
    for p, t in zip(p_leaves, t_leaves):
        _check_tensor_leaf(p)
        _check_tensor_leaf(t)
        if tuple(p._shape) != tuple(t._shape):
            raise RuntimeError(f"Trying to set a forward gradient that has a different size "
                               f"than that of the original Tensor, this is not supported. "
                               f"Tensor is of size {list(p._shape)} while the given forward "
                               f"gradient is of size {list(t._shape)}.")
        out.append(t if t._dtype == p._dtype else t.to(p.dtype))
    return out


def _jvp_core(func, primals, tangent_leaves, has_aux, api):
    """(output, J tangents, aux) by reverse mode twice (the double-vjp trick): the vjp
    u -> J^T u is linear in u, so its own vjp at the tangents is J tangents. Needs func's
    ops to be twice differentiable, as every op of cagrad's table is."""
    from ._creation import zeros_like

    with enable_grad():
        marked = _Marked(primals, tuple(range(len(primals))))
        output, aux = _split_aux(func(*marked.args), has_aux, api)
        out_leaves, out_rebuild = _flatten(output)
        for o in out_leaves:
            _check_tensor_leaf(o)
        us = [zeros_like(_C.detach(o)).requires_grad_(True) for o in out_leaves]
        vjps = _grads(tuple(out_leaves), marked.leaves, tuple(us), True)
        pairs = [(g, t) for g, t in zip(vjps, tangent_leaves) if g.requires_grad]
        if pairs:
            jv = autograd.grad(tuple(p[0] for p in pairs), us, tuple(p[1] for p in pairs),
                               retain_graph=True, create_graph=marked.nested,
                               allow_unused=True, materialize_grads=True)
        else:  # no output depends on the primals
            jv = [zeros_like(_C.detach(o)) for o in out_leaves]
    keep = marked.nested
    return (out_rebuild([_finish(o, keep) for o in out_leaves]),
            out_rebuild([_finish(j, keep) for j in jv]),
            _map(lambda x: _finish(x, keep), aux) if has_aux else None)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """torch.func.jvp: (func(*primals), the Jacobian of func at primals times tangents),
    and aux with has_aux. cagrad computes it by reverse mode (two vjps), with the values
    of PyTorch's forward mode at about twice a backward's cost. Nests with the other
    transforms (jvp of grad is a Hessian-vector product)."""
    tangent_leaves = _jvp_leaves(primals, tangents)
    output, jv, aux = _jvp_core(func, primals, tangent_leaves, has_aux, "jvp")
    wide = [t for t in _flatten(tangents)[0] if t.dtype.itemsize == 8 and t.is_floating_point()]
    if wide:  # a float64 tangent makes float64 products
        jv = _map(lambda j: j.to(wide[0].dtype) if j.is_floating_point() else j, jv)
    return (output, jv, aux) if has_aux else (output, jv)


def linearize(func, *primals):
    """torch.func.linearize: (func(*primals), jvp_fn) where jvp_fn(*tangents) is the jvp
    at primals. cagrad's jvp_fn runs func again for each call (PyTorch traces it once)."""
    with enable_grad():
        output = func(*primals)
    shapes = [tuple(p._shape) for p in _flatten(primals)[0]]

    def jvp_fn(*tangents):
        leaves, _ = _flatten(tangents)
        for i, (t, shape) in enumerate(zip(leaves, shapes)):
            if tuple(t._shape) != shape:
                raise RuntimeError(f"tangent:{i} with shape {t.shape} in flattened pytree "
                                   f"doesn't match the shape {_C_size(shape)} of the "
                                   f"corresponding primal.")
        return jvp(func, primals, tangents)[1]

    return _map(lambda x: _finish(x, False), output), jvp_fn


def _C_size(shape):
    from ._dtype import Size
    return Size(shape)


# ------------------------------------------------------------------------------ jacobians
def _jacobian_of(output, inputs, nested):
    """[d output / d input, shaped output.shape + input.shape, for each input], by one
    reverse pass per output element."""
    from ._creation import zeros
    from ._functions import stack

    n = output.numel()
    flat = _C.reshape(output, (-1,))
    rows = [[] for _ in inputs]
    for k in range(n):
        seed = zeros(n, dtype=output.dtype)
        seed[k] = 1.0
        for i, g in enumerate(_grads((flat,), inputs, (seed,), nested)):
            rows[i].append(g)
    jacobians = []
    for x, r in zip(inputs, rows):
        if not r:  # an empty output
            jacobians.append(zeros(tuple(output._shape) + tuple(x._shape), dtype=x.dtype))
            continue
        jacobians.append(_C.reshape(stack(r), tuple(output._shape) + tuple(x._shape)))
    return jacobians


def _jac_transform(func, argnums, has_aux, api):
    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        with enable_grad():
            marked = _Marked(args, argnums)
            output, aux = _split_aux(func(*marked.args, **kwargs), has_aux, api)
            out_leaves, out_rebuild = _flatten(output)
            per_output = []
            for o in out_leaves:
                _check_tensor_leaf(o)
                jac = _jacobian_of(o, marked.leaves, marked.nested)
                per_output.append(marked.rebuild([_finish(j, marked.nested) for j in jac],
                                                 isinstance(argnums, int)))
        result = out_rebuild(per_output)
        if has_aux:
            return result, _map(lambda x: _finish(x, marked.nested), aux)
        return result
    return wrapper


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None, _preallocate_and_copy=False):
    """torch.func.jacrev: the Jacobian of func w.r.t. args[argnums] (shape output.shape +
    input.shape), one reverse pass per output element; chunk_size is accepted and
    ignored. Nests (jacrev(jacrev(f)) is the Hessian)."""
    return _jac_transform(func, argnums, has_aux, "jacrev")


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """torch.func.jacfwd: the same Jacobian as jacrev. cagrad has no forward mode, so it is
    computed by reverse mode (a pass per output element, not per input element)."""
    return _jac_transform(func, argnums, has_aux, "jacfwd")


def hessian(func, argnums=0):
    """torch.func.hessian: jacfwd(jacrev(func)), both by reverse mode in cagrad."""
    return jacfwd(jacrev(func, argnums), argnums)


# ------------------------------------------------------------------------------ vmap
def _in_dims_for(in_dims, args):
    if isinstance(in_dims, (int, type(None))):
        return [in_dims] * len(args)
    if not isinstance(in_dims, (tuple, list)) or len(in_dims) != len(args):
        raise ValueError(f"vmap: in_dims is not compatible with the structure of `inputs`. "
                         f"in_dims has structure {in_dims!r} but inputs has {len(args)} "
                         f"positional arguments")
    return list(in_dims)


def _batched_leaves(func, args, in_dims):
    """[(leaf, dim or None)] of every argument and the batch size."""
    pairs, sizes = [], []
    for arg, dim in zip(args, _in_dims_for(in_dims, args)):
        leaves, _ = _flatten(arg)
        dims, _ = _flatten(dim) if isinstance(dim, (tuple, list, dict)) else (
            [dim] * len(leaves), None)
        for x, d in zip(leaves, dims):
            if d is not None:
                if not isinstance(x, _TensorBase):
                    raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>)"
                                     f": Got in_dim={d} for an input but the input is of type "
                                     f"{type(x)}. We cannot vmap over non-Tensor arguments, "
                                     f"please use None as the respective in_dim")
                if not -max(x.ndim, 1) <= d < max(x.ndim, 1) or x.ndim == 0:
                    raise ValueError(f"vmap({_name(func)}, in_dims={in_dims!r}, ...)(<inputs>)"
                                     f": Got in_dim={d} for some input, but that input is a "
                                     f"Tensor of dimensionality {x.ndim} so expected in_dim "
                                     f"to satisfy -{x.ndim} <= in_dim < {x.ndim}.")
                sizes.append(x.shape[d])
            pairs.append((x, d))
    if not sizes:
        raise ValueError("vmap: Expected at least one Tensor to vmap over")
    if len(set(sizes)) != 1:
        raise ValueError(f"vmap: Expected all tensors to have the same size in the mapped "
                         f"dimension, got sizes {sizes} for the mapped dimension")
    return pairs, sizes[0]


def _name(func):
    return getattr(func, "__name__", repr(func))


def _stack_outputs(results, out_dims):
    from ._functions import stack

    leaves0, rebuild = _flatten(results[0])
    per_leaf = [[_flatten(r)[0][i] for r in results] for i in range(len(leaves0))]
    dims = [out_dims] * len(leaves0) if isinstance(out_dims, int) else list(out_dims)
    if len(dims) != len(leaves0):
        raise ValueError(f"vmap: out_dims is not compatible with the structure of `outputs`: "
                         f"{len(dims)} out_dims for {len(leaves0)} outputs")
    stacked = []
    for values, d in zip(per_leaf, dims):
        if not isinstance(values[0], _TensorBase):
            raise ValueError(f"vmap: `{type(values[0]).__name__}` outputs are not supported; "
                             f"return Tensors")
        stacked.append(stack(values, d if d is not None else 0))
    return rebuild(stacked)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """torch.func.vmap by a Python loop: func runs on each slice along in_dims (None: the
    argument is shared) and the results are stacked along out_dims. Values and gradients
    equal PyTorch's; the cost is one call of func per batch element."""
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"Only allowed values for randomness are 'error', 'different', or "
                           f"'same'. Got {randomness}")

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        pairs, size = _batched_leaves(func, args, in_dims)
        results = []
        for i in range(size):
            it = iter(pairs)
            sliced = [_flatten(arg)[1]([_slice(*next(it), i) for _ in _flatten(arg)[0]])
                      for arg in args]
            results.append(func(*sliced, **kwargs))
        return _stack_outputs(results, out_dims)
    return wrapper


def _slice(x, dim, i):
    return x if dim is None else _C.select(x, dim, i)
