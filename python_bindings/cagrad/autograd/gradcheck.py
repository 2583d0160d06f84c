"""torch.autograd.gradcheck: gradcheck and gradgradcheck for users' own functions.

gradcheck compares, for every differentiable output i and every input j that requires
grad, the Jacobian d out_i / d in_j found numerically (central differences, one input
element at a time) with the one autograd gives (one vjp per output element, through
autograd.grad), by allclose(analytical, numerical, rtol, atol). Both are laid out as
PyTorch lays them out, (input numel, output numel), so the failure message shows the same
matrices. gradgradcheck is gradcheck of (inputs, grad_outputs) -> the create_graph
gradients, so that the derivative of the backward is checked too.

fast_mode=True compares, per output i and input j, the scalars v_i^T J u_j for random
unit vectors u_j and v_i instead (a directional difference quotient against one vjp), with
atol scaled by sum(u_j) sum(v_i), as PyTorch does; a failure recomputes that pair's full
Jacobians for the message. Options that need forward-mode AD or vmap (check_forward_ad,
check_batched_grad, check_batched_forward_grad, check_fwd_over_rev) raise
NotImplementedError. cagrad has no undefined gradients: check_undefined_grad is checked
with all-zero output gradients and, with several outputs, by leaving one output out of
the backward at a time (it then reaches the backward as an unused output).
"""

import warnings

import numpy as np

from .. import _C
from .._creation import rand, tensor
from .._dtype import float64

__all__ = ["GradcheckError", "gradcheck", "gradgradcheck"]

_DOCS = "see docs/python-api.md"


class GradcheckError(RuntimeError):
    """Raised by gradcheck and gradgradcheck when a check fails."""


# ---------------------------------------------------------------------------------------
# Inputs and outputs
# ---------------------------------------------------------------------------------------
def _is_tensor(x):
    return isinstance(x, _C.TensorBase)


def _as_tuple(x):
    if isinstance(x, tuple):
        return x
    if isinstance(x, list):
        return tuple(x)
    return (x,)


def _differentiable_outputs(out):
    return tuple(o for o in _as_tuple(out) if o.requires_grad)


def _diff_inputs(inputs):
    return [x for x in inputs if _is_tensor(x) and x.requires_grad]


def _check_inputs(inputs):
    """PyTorch's checks: at least one input requires grad, a warning for each one that is not
    float64 (the default eps and tolerances assume it), no stride-0 (overlapping) input."""
    found = False
    for idx, x in enumerate(inputs):
        if not (_is_tensor(x) and x.requires_grad):
            continue
        if x.dtype != float64:
            warnings.warn(f"Input #{idx} requires gradient and is not a double precision "
                          "floating point or complex. This check will likely fail if all the "
                          "inputs are not of double precision floating point or complex. ",
                          stacklevel=4)
        if not all(st > 0 or sz <= 1 for st, sz in zip(x.stride(), x.shape)):
            raise RuntimeError(f"The {idx}th input has a dimension with stride 0. gradcheck "
                               "only supports inputs that are non-overlapping to be able to "
                               "compute the numerical gradients correctly. You should call "
                               ".contiguous on the input before passing it to gradcheck.")
        found = True
    if not found:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, "
                         "but none of them have requires_grad=True.")


def _flat_values(out):
    """The outputs of one evaluation as flat NumPy arrays in their own dtype (None for a
    non-tensor output)."""
    return [o.detach().numpy().reshape(-1).copy() if _is_tensor(o) else None
            for o in _as_tuple(out)]


# ---------------------------------------------------------------------------------------
# The two Jacobians, each [output][input] -> ndarray (input numel, output numel)
# ---------------------------------------------------------------------------------------
def _perturbed(inputs, j_pos, base, idx, value):
    """inputs with input j_pos replaced by a copy whose element idx is value. A copy, not an
    in-place change: cagrad's .data shares the version counter, and bumping it would break
    the graphs that already saved the caller's tensor."""
    arr = base.copy()
    arr[idx] = value
    x = inputs[j_pos]
    t = tensor(arr).requires_grad_(x.requires_grad)
    return inputs[:j_pos] + (t,) + inputs[j_pos + 1:]


def _numerical_column(func, inputs, j_pos, base, idx, eps):
    """d outputs / d x[idx] by central differences, in each output's own dtype (as PyTorch
    computes it: a float32 function gets a float32 difference quotient)."""
    orig = base[idx]
    below = _flat_values(func(*_perturbed(inputs, j_pos, base, idx, orig - eps)))
    above = _flat_values(func(*_perturbed(inputs, j_pos, base, idx, orig + eps)))
    cols = []
    for a, b in zip(below, above):
        if a is None or a.dtype.kind != "f":
            cols.append(None)
        else:
            cols.append((b - a) / a.dtype.type(2 * eps))
    return cols


def _numerical_jacobians(func, inputs, func_out, eps):
    """[output][input]: every output of func, every input that requires grad."""
    outs = _as_tuple(func_out)
    positions = [p for p, x in enumerate(inputs) if _is_tensor(x) and x.requires_grad]
    jac = [[None] * len(positions) for _ in outs]
    for j, p in enumerate(positions):
        x = inputs[p]
        base = x.detach().numpy()
        for i, o in enumerate(outs):
            dtype = o.detach().numpy().dtype if _is_tensor(o) else np.float64
            n_out = o.numel() if _is_tensor(o) else 0
            jac[i][j] = np.zeros((x.numel(), n_out), dtype=dtype if dtype.kind == "f"
                                 else np.float64)
        for k, idx in enumerate(np.ndindex(*x.shape)):
            for i, col in enumerate(_numerical_column(func, inputs, p, base, idx, eps)):
                if col is not None:
                    jac[i][j][k, :] = col
    return jac


def _analytical_rows(output, diff):
    """One vjp per element of output: [input] -> (input numel, output numel), plus whether
    every gradient had its input's dtype and shape."""
    from . import grad

    flat_n = output.numel()
    jac = [np.zeros((x.numel(), flat_n), dtype=x.detach().numpy().dtype) for x in diff]
    types_ok = sizes_ok = True
    ref = output.detach().numpy()
    for k in range(flat_n):
        one_hot = np.zeros(ref.size, dtype=ref.dtype)
        one_hot[k] = 1
        go = tensor(one_hot.reshape(ref.shape))
        grads = grad(output, diff, go, retain_graph=True, allow_unused=True)
        for j, (g, x) in enumerate(zip(grads, diff)):
            if g is None:
                continue
            types_ok = types_ok and g.dtype == x.dtype
            if tuple(g.shape) != tuple(x.shape):
                sizes_ok = False
                continue
            jac[j][:, k] = g.detach().numpy().reshape(-1)
    return jac, types_ok, sizes_ok


_NONDET_NOTE = ("\n\nNOTE: If your op relies on non-deterministic operations, this failure "
                "might be expected: call gradcheck/gradgradcheck with `nondet_tol=<tol>` as a "
                "keyword argument.\n")


def _analytical_jacobians(inputs, output, nondet_tol, check_grad_dtypes):
    """The analytical Jacobian of one output, computed twice: a backward that gives
    different values for the same input and grad_output is not reentrant."""
    diff = _diff_inputs(inputs)
    first, types_ok, sizes_ok = _analytical_rows(output, diff)
    second, _, _ = _analytical_rows(output, diff)
    reentrant = all(a.size == 0 or float(np.max(np.abs(a - b))) <= nondet_tol
                    for a, b in zip(first, second))
    if not types_ok and check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch")
    if not sizes_ok:
        raise GradcheckError("Analytical gradient has incorrect size")
    if not reentrant:
        raise GradcheckError("Backward is not reentrant, i.e., running backward with same "
                             "input and grad_output multiple times gives different values, "
                             "although analytical gradient matches numerical gradient."
                             f"The tolerance for nondeterminism was {nondet_tol}."
                             + _NONDET_NOTE)
    return first


def _mismatch_message(analytical, numerical, i, j):
    return (f"Jacobian mismatch for output {i:d} with respect to input {j:d},\n"
            f"numerical:{tensor(numerical)}\nanalytical:{tensor(analytical)}\n")


def _allclose(a, n, rtol, atol):
    dtype = np.promote_types(a.dtype, n.dtype)
    return bool(np.allclose(a.astype(dtype), n.astype(dtype), rtol=rtol, atol=atol))


def _slow_check(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol,
                check_grad_dtypes):
    numerical = _numerical_jacobians(func, inputs, func_out, eps)
    if not outputs:
        # no differentiable output: every numerical derivative must be zero
        if any(np.any(jac != 0) for row in numerical for jac in row):
            raise GradcheckError("Numerical gradient for function expected to be zero")
        return
    numerical = [row for o, row in zip(_as_tuple(func_out), numerical) if o.requires_grad]
    for i, o in enumerate(outputs):
        analytical = _analytical_jacobians(inputs, o, nondet_tol, check_grad_dtypes)
        for j, (a, n) in enumerate(zip(analytical, numerical[i])):
            if not _allclose(a, n, rtol, atol):
                raise GradcheckError(_mismatch_message(a, n, i, j))


# ---------------------------------------------------------------------------------------
# fast_mode: v^T J u for random unit vectors, numerically and analytically
# ---------------------------------------------------------------------------------------
def _unit_vectors(tensors, rng):
    """A random vector per tensor, uniform in [0, 1) then normalised, in its dtype. A
    generator of its own, as PyTorch's, so the caller's random stream is not touched."""
    out = []
    for t in tensors:
        r = rng.random(t.numel())
        norm = np.linalg.norm(r)
        out.append((r / norm if norm > 0 else r).astype(t.detach().numpy().dtype))
    return out


def _numerical_ju(func, inputs, p, u, eps):
    """d outputs / d x_p along u, by central differences (each output flat, None for a
    non-float one)."""
    x = inputs[p]
    base = x.detach().numpy()
    step = (u * u.dtype.type(eps)).reshape(base.shape)

    def at(arr):
        t = tensor(np.ascontiguousarray(arr)).requires_grad_(x.requires_grad)
        return _flat_values(func(*(inputs[:p] + (t,) + inputs[p + 1:])))

    below, above = at(base - step), at(base + step)
    return [None if a is None or a.dtype.kind != "f" else (b - a) / a.dtype.type(2 * eps)
            for a, b in zip(below, above)]


def _analytical_vj(output, diff, v):
    """v^T J for one output, per input (flat; zeros for an input it does not reach), and
    whether the gradients had their inputs' dtypes and shapes."""
    from . import grad

    ref = output.detach().numpy()
    grads = grad(output, diff, tensor(v.reshape(ref.shape)), retain_graph=True,
                 allow_unused=True)
    rows, types_ok, sizes_ok = [], True, True
    for g, x in zip(grads, diff):
        if g is None:
            rows.append(np.zeros(x.numel(), dtype=x.detach().numpy().dtype))
            continue
        types_ok = types_ok and g.dtype == x.dtype
        sizes_ok = sizes_ok and tuple(g.shape) == tuple(x.shape)
        rows.append(g.detach().numpy().reshape(-1))
    return rows, types_ok, sizes_ok


def _checked_vj(output, diff, v, nondet_tol, check_grad_dtypes):
    """_analytical_vj twice, with slow mode's checks of dtype, size and reentrancy."""
    first, types_ok, sizes_ok = _analytical_vj(output, diff, v)
    second, _, _ = _analytical_vj(output, diff, v)
    if not types_ok and check_grad_dtypes:
        raise GradcheckError("Gradient has dtype mismatch")
    if not sizes_ok:
        raise GradcheckError("Analytical gradient has incorrect size")
    if not all(a.size == 0 or float(np.max(np.abs(a - b))) <= nondet_tol
               for a, b in zip(first, second)):
        raise GradcheckError("Backward is not reentrant, i.e., running backward with same "
                             "input and grad_output multiple times gives different values, "
                             "although analytical gradient matches numerical gradient."
                             f"The tolerance for nondeterminism was {nondet_tol}."
                             + _NONDET_NOTE)
    return first


def _slow_pair_report(func, inputs, func_out, output, i, j, eps, rtol, atol):
    """The full Jacobians of output i and input j, for a fast-mode failure's message."""
    outs = _as_tuple(func_out)
    numerical = [row for o, row in zip(outs, _numerical_jacobians(func, inputs, func_out,
                                                                   eps))
                 if o.requires_grad][i][j]
    analytical = _analytical_rows(output, _diff_inputs(inputs))[0][j]
    diff = float(np.max(np.abs(numerical - analytical))) if numerical.size else 0.0
    msg = ("\nThe quantities above are fast mode's: v^T J u for random unit vectors u and v. "
           "The full Jacobians (slow mode) of this output and input are:\n\n"
           f"Numerical:\n {tensor(numerical)}\nAnalytical:\n{tensor(analytical)}\n\n"
           f"The max per-element difference (slow mode) is: {diff}.\n")
    if _allclose(analytical, numerical, rtol, atol):
        msg += ("\nFast gradcheck failed but element-wise differences are small: the check "
                "would have passed with fast_mode=False.")
    return msg


def _fast_check(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol,
                check_grad_dtypes):
    rng = np.random.default_rng(0)
    positions = [p for p, x in enumerate(inputs) if _is_tensor(x) and x.requires_grad]
    diff = [inputs[p] for p in positions]
    us, vs = _unit_vectors(diff, rng), _unit_vectors(outputs, rng)
    keep = [o.requires_grad for o in _as_tuple(func_out)]
    ju = [[c for c, k in zip(_numerical_ju(func, inputs, p, u, eps), keep) if k]
          for p, u in zip(positions, us)]
    if not outputs:
        # no differentiable output: every numerical directional derivative must be zero
        for p, u in zip(positions, us):
            for c in _numerical_ju(func, inputs, p, u, eps):
                if c is not None and c.size and float(np.max(np.abs(c))) > nondet_tol:
                    raise GradcheckError("Numerical gradient for function expected to be "
                                         "zero")
        return
    for i, (o, v) in enumerate(zip(outputs, vs)):
        vj = _checked_vj(o, diff, v, nondet_tol, check_grad_dtypes)
        for j, u in enumerate(us):
            a = np.asarray(np.dot(vj[j], u))
            n = np.asarray(np.dot(v, ju[j][i]) if ju[j][i] is not None else 0.0)
            scaled_atol = atol * float(u.sum()) * float(v.sum())
            if not _allclose(a, n, rtol, scaled_atol):
                raise GradcheckError(_mismatch_message(a, n, i, j) + _slow_pair_report(
                    func, inputs, func_out, o, i, j, eps, rtol, atol))


# ---------------------------------------------------------------------------------------
# The checks after the Jacobians
# ---------------------------------------------------------------------------------------
def _zero_grads(outputs, diff):
    from .._creation import zeros_like
    from . import grad

    return grad(outputs, diff, [zeros_like(o) for o in outputs], allow_unused=True)


def _check_mul_by_grad_output(outputs, inputs):
    """A zero grad_output must give zero input gradients of the inputs' dtype and shape."""
    diff = _diff_inputs(inputs)
    if not diff:
        raise GradcheckError("no Tensors requiring grad found in input")
    for g, x in zip(_zero_grads(outputs, diff), diff):
        if g is None:
            continue
        if np.any(g.detach().numpy() != 0):
            raise GradcheckError("backward not multiplied by grad_output")
        if g.dtype != x.dtype:
            raise GradcheckError("grad is incorrect type")
        if tuple(g.shape) != tuple(x.shape):
            raise GradcheckError("grad is incorrect size")


def _warn_undefined_check():
    warnings.warn("Backwards compatibility: New undefined gradient support checking feature "
                  "is enabled by default, but it may break existing callers of this function. "
                  "If this is true for you, you can call this function with "
                  "\"check_undefined_grad=False\" to disable the feature", stacklevel=5)


def _undefined_grads_give_zero(run_backward):
    try:
        grads = run_backward()
    except RuntimeError as e:
        _warn_undefined_check()
        raise GradcheckError("Expected backward function to handle undefined output grads. "
                             "Please look at \"Notes about undefined output gradients\" in "
                             "\"tools/autograd/derivatives.yaml\"") from e
    for g in grads:
        if g is not None and np.any(g.detach().numpy() != 0):
            _warn_undefined_check()
            raise GradcheckError("Expected all input grads to be undefined or zero when all "
                                 "output grads are undefined or zero. Please look at \"Notes "
                                 "about undefined output gradients\" in "
                                 "\"tools/autograd/derivatives.yaml\"")


def _check_undefined_grad(func, inputs):
    """Without undefined gradients in cagrad: every output's gradient zero, then (with
    several outputs) each output left out of the backward in turn, the others getting zero
    gradients; the input gradients must be None or zero."""
    diff = _diff_inputs(inputs)
    if not diff:
        raise GradcheckError("no Tensors requiring grad found in input")
    outs = _differentiable_outputs(func(*inputs))
    _undefined_grads_give_zero(lambda: _zero_grads(outs, diff))
    if len(outs) > 1:
        for left_out in range(len(outs)):
            rest = [o for k, o in enumerate(_differentiable_outputs(func(*inputs)))
                    if k != left_out]
            _undefined_grads_give_zero(lambda: _zero_grads(rest, diff))


# ---------------------------------------------------------------------------------------
# gradcheck
# ---------------------------------------------------------------------------------------
def _refuse(option, why):
    raise NotImplementedError(f"cagrad's gradcheck does not support {option}=True: {why} "
                              f"({_DOCS})")


def _check_options(check_forward_ad, check_backward_ad, check_batched_grad,
                   check_batched_forward_grad):
    # PyTorch's argument checks first (AssertionError), then what cagrad lacks
    if not (check_forward_ad or check_backward_ad):
        raise AssertionError("Expected at least one of check_forward_ad or check_backward_ad "
                             "to be True")
    if check_batched_grad and not check_backward_ad:
        raise AssertionError("Setting check_batched_grad=True requires check_backward_ad to "
                             "be True")
    if check_batched_forward_grad and not check_forward_ad:
        raise AssertionError("Setting check_batched_forward_grad=True requires "
                             "check_forward_ad to be True")
    if check_forward_ad:
        _refuse("check_forward_ad", "cagrad has no forward-mode AD")
    if check_batched_grad:
        _refuse("check_batched_grad", "cagrad has no vmap (batched gradients)")
    if check_batched_forward_grad:
        _refuse("check_batched_forward_grad", "cagrad has no forward-mode AD or vmap")


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True,
              nondet_tol=0.0, check_undefined_grad=True, check_grad_dtypes=False,
              check_batched_grad=False, check_batched_forward_grad=False,
              check_forward_ad=False, check_backward_ad=True, fast_mode=False, masked=None):
    """Check the gradients autograd gives for func at inputs against finite differences.

    Returns True; on a failure raises GradcheckError, or returns False with
    raise_exception=False. `masked` only matters for sparse tensors, which cagrad does
    not have."""
    _check_options(check_forward_ad, check_backward_ad, check_batched_grad,
                   check_batched_forward_grad)
    try:
        return _gradcheck(func, inputs, eps, atol, rtol, nondet_tol, check_undefined_grad,
                          check_grad_dtypes, fast_mode)
    except GradcheckError:
        if raise_exception:
            raise
        return False


def _gradcheck(func, inputs, eps, atol, rtol, nondet_tol, check_undefined_grad,
               check_grad_dtypes, fast_mode):
    inputs = _as_tuple(inputs)
    _check_inputs(inputs)
    func_out = func(*inputs)
    outputs = _differentiable_outputs(func_out)
    check = _fast_check if fast_mode else _slow_check
    check(func, inputs, func_out, outputs, eps, rtol, atol, nondet_tol, check_grad_dtypes)
    if not outputs:  # a backward of no outputs gives no gradient: nothing more to check
        return True
    _check_mul_by_grad_output(outputs, inputs)
    if check_undefined_grad:
        _check_undefined_grad(func, inputs)
    return True


# ---------------------------------------------------------------------------------------
# gradgradcheck
# ---------------------------------------------------------------------------------------
def _random_grad_output(out, noncontiguous):
    """Uniform in [-1, 1) in the output's dtype (float64 for an integer output), from the
    global generator, as PyTorch's make_tensor(low=-1, high=1) draws them."""
    dtype = out.dtype if out.is_floating_point() else float64
    shape = tuple(out.shape)
    if noncontiguous and out.numel() > 1:
        from .._grad_mode import no_grad

        wide = shape[:-1] + (2 * shape[-1],) if shape else (2,)
        with no_grad():
            t = (rand(wide, dtype=dtype) * 2 - 1)[..., ::2]
        return t.requires_grad_(True)
    return (rand(shape, dtype=dtype) * 2 - 1).requires_grad_(True)


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False,
                  check_batched_grad=False, check_fwd_over_rev=False, check_rev_over_rev=True,
                  fast_mode=False, masked=False):
    """Check the second derivatives: gradcheck of (inputs, grad_outputs) -> the gradients of
    func's differentiable outputs (with grad_outputs) with respect to inputs, made with
    create_graph=True. Random grad_outputs are drawn when none are given."""
    if not (check_fwd_over_rev or check_rev_over_rev):
        raise AssertionError("Expected at least one of check_fwd_over_rev or "
                             "check_rev_over_rev to be True")
    if check_undefined_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_undefined_grad=True requires check_rev_over_rev "
                             "to be True")
    if check_batched_grad and not check_rev_over_rev:
        raise AssertionError("Setting check_batched_grad=True requires check_rev_over_rev to "
                             "be True")
    if check_fwd_over_rev:
        raise NotImplementedError("cagrad's gradgradcheck does not support "
                                  "check_fwd_over_rev=True: cagrad has no forward-mode AD "
                                  f"({_DOCS})")
    inputs = _as_tuple(inputs)
    if grad_outputs is None:
        outs = _differentiable_outputs(func(*inputs))
        grad_outputs = tuple(_random_grad_output(o, gen_non_contig_grad_outputs)
                             for o in outs)
    else:
        grad_outputs = _as_tuple(grad_outputs)
    return gradcheck(_grads_of(func, inputs, grad_outputs), inputs + grad_outputs, eps=eps,
                     atol=atol, rtol=rtol, raise_exception=raise_exception,
                     nondet_tol=nondet_tol, check_undefined_grad=check_undefined_grad,
                     check_grad_dtypes=check_grad_dtypes,
                     check_batched_grad=check_batched_grad, fast_mode=fast_mode,
                     check_forward_ad=False, check_backward_ad=check_rev_over_rev,
                     masked=masked)


def _grads_of(func, inputs, grad_outputs):
    """(inputs..., grad_outputs...) -> the create_graph gradients of func's differentiable
    outputs with respect to the inputs that require grad (those that get one)."""
    from . import grad

    n_out = len(grad_outputs)
    diff_in = {i for i, x in enumerate(inputs) if _is_tensor(x) and x.requires_grad}

    def grads(*args):
        ins = args[:-n_out] if n_out else args
        outs = _differentiable_outputs(func(*ins))
        gos = args[-n_out:] if n_out else ()
        res = grad(outs, tuple(x for i, x in enumerate(ins) if i in diff_in), gos,
                   create_graph=True, allow_unused=True)
        return tuple(g for g in res if g is not None)

    return grads
