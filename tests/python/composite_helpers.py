"""Checks shared by the suites of composite functions (losses, norms, attention, einsum).

`check_against_torch` runs one function written against PyTorch's API with cagrad and
with torch on the same data and compares the outputs and the gradients of every float
input (eager or under compiled autograd). `check_numeric_gradient` compares cagrad's
float64 gradient with central finite differences of cagrad's own forward.
"""

import numpy as np
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx,
                     numeric_gradient)

DTYPES = ["float32", "float64"]


def _both(arrays, dtype, needs_grad):
    """(cagrad tensors, torch tensors) for numpy arrays; float arrays take dtype."""
    cs, ts = [], []
    for i, a in enumerate(arrays):
        a = np.asarray(a)
        if a.dtype.kind == "f":
            a = a.astype(dtype)
        rg = a.dtype.kind == "f" and i in needs_grad
        cs.append(ca.tensor(a.copy(), requires_grad=rg))
        ts.append(torch.tensor(a.copy(), requires_grad=rg))
    return cs, ts


def check_against_torch(fn, arrays, dtype, compiled=False, needs_grad=None, tol=None,
                        seed_grad=None, msg=""):
    """fn(L, *tensors) with L = cagrad and torch: equal outputs and input gradients.

    needs_grad: indices of the inputs to differentiate (default: every float input).
    The backward seeds a fixed random gradient (seed_grad) so each output entry counts."""
    dtype_tol = (tol or TOL_SUM)[dtype]  # tol: {dtype name: dict(rtol=, atol=)}
    if needs_grad is None:
        needs_grad = [i for i, a in enumerate(arrays) if np.asarray(a).dtype.kind == "f"]
    cs, ts = _both(arrays, dtype, set(needs_grad))
    out_c = fn(ca, *cs)
    out_t = fn(torch, *ts)
    assert_close(out_c, out_t, msg=f"{msg} value", **dtype_tol)
    if not needs_grad:
        return out_c, out_t
    rng = np.random.default_rng(1234) if seed_grad is None else seed_grad
    g = rng.standard_normal(tuple(out_t.shape)).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((out_c * ca.tensor(g)).sum(), compiled)
    (out_t * torch.tensor(g)).sum().backward()
    for i in needs_grad:
        assert_close(cs[i].grad, ts[i].grad, msg=f"{msg} grad of input {i}", **dtype_tol)
    return out_c, out_t


def check_numeric_gradient(fn, arrays, compiled=False, needs_grad=None, rtol=1e-6, atol=1e-7):
    """cagrad's float64 gradient of sum(fn(cagrad, *inputs) * g) against central
    differences of the same expression."""
    arrays = [np.asarray(a, dtype=np.float64) if np.asarray(a).dtype.kind == "f"
              else np.asarray(a) for a in arrays]
    if needs_grad is None:
        needs_grad = [i for i, a in enumerate(arrays) if a.dtype.kind == "f"]
    out_shape = tuple(fn(ca, *[ca.tensor(a) for a in arrays]).shape)
    g = np.random.default_rng(99).standard_normal(out_shape)

    def scalar(values):
        return float((fn(ca, *[ca.tensor(a) for a in values]) * ca.tensor(g)).sum())

    tensors = [ca.tensor(a.copy(), requires_grad=i in needs_grad) for i, a in enumerate(arrays)]
    with compiled_ctx(compiled):
        backward_checked((fn(ca, *tensors) * ca.tensor(g)).sum(), compiled)
    for i in needs_grad:
        def f(x, i=i):
            return scalar(arrays[:i] + [x] + arrays[i + 1:])
        np.testing.assert_allclose(tensors[i].grad.numpy(), numeric_gradient(f, arrays[i]),
                                   rtol=rtol, atol=atol, err_msg=f"input {i}")
