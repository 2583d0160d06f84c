"""Shared helpers of the cagrad pytest suites (imported by conftest.py and the tests).

The suites compare cagrad against PyTorch 2.13 (the reference). Test code is written once
against PyTorch's API and run with both libraries: a function ``f(L, ...)`` receives the
library module ``L`` (``cagrad`` or ``torch``) and builds the same computation with it.

Stand-in mode (for debugging the harness itself, before cagrad builds):
``CAGRAD_TEST_STANDIN=torch`` makes ``ca`` a thin shim over torch; tests of
cagrad-only features (counters, logs, explain, _C) are skipped with ``needs_cagrad``.
"""

from __future__ import annotations

import contextlib
import os
import sys
import types

import numpy as np
import pytest
import torch

torch.set_num_threads(1)  # small tensors: threads only add noise and time

STANDIN = os.environ.get("CAGRAD_TEST_STANDIN", "") == "torch"


def _make_standin():
    """A module that looks like cagrad but is torch (harness debugging only)."""

    class _Counters(dict):
        pass

    class _CompiledAutograd(types.SimpleNamespace):
        pass

    state = {"depth": 0}

    @contextlib.contextmanager
    def enable(dynamic=False):
        state["depth"] += 1
        try:
            yield
        finally:
            state["depth"] -= 1

    keys = ("captures", "cache_hits", "cache_misses", "graphs", "fused_kernels", "eager_fallbacks")
    ca_ns = _CompiledAutograd(
        enable=enable,
        reset=lambda: None,
        counters=_Counters({k: 0 for k in keys}),
        _depth=state,
    )

    class _StandIn(types.ModuleType):
        def __getattr__(self, name):
            return getattr(torch, name)

    m = _StandIn("cagrad_standin")
    m.compiled_autograd = ca_ns
    m.graph_break = lambda reason=None: None
    m.from_dlpack = torch.from_dlpack
    return m


if STANDIN:
    ca = _make_standin()
else:
    try:
        import cagrad as ca  # noqa: F401
    except ImportError as e:  # pragma: no cover - environment problem, say it loudly
        raise ImportError(
            "tests/python needs the cagrad package: run `make py-build` and set "
            "PYTHONPATH=build/python (or `make py-test`). To debug the harness alone, set "
            f"CAGRAD_TEST_STANDIN=torch. Import error: {e!r}"
        ) from e

needs_cagrad = pytest.mark.skipif(STANDIN, reason="cagrad-only feature (stand-in mode)")

COUNTER_KEYS = frozenset(
    {"captures", "cache_hits", "cache_misses", "graphs", "fused_kernels", "eager_fallbacks",
     "custom_traced", "custom_callouts", "side_by_side_runs"}
)

# Default tolerances per dtype (cagrad vs torch on the same inputs).
#  float64: unit roundoff 1.1e-16; a pointwise op with a libm/SLEEF-quality kernel is within
#           a few ulps, so rtol=1e-10 leaves five orders of magnitude of margin; atol covers
#           values that are exactly or nearly zero.
#  float32: unit roundoff 6e-8; a few ulps is ~1e-6 relative, so rtol=1e-5.
TOL = {
    "float32": dict(rtol=1e-5, atol=1e-6),
    "float64": dict(rtol=1e-10, atol=1e-12),
}

# Ops that sum n terms internally (reductions, matmul, softmax/log_softmax/layer_norm/loss
# backward, which all contain a row sum): the rounding error of a sum is bounded by
# ~n * u * sum|x_i|, i.e. it is relative to the magnitude of the TERMS, not of the result,
# which can be near zero after cancellation. With n <= ~16 terms of magnitude O(1) in these
# tests, that is 16 * 6e-8 * 16 ~ 1.5e-5 in float32 (worst case; typical sqrt(n) smaller);
# float64 is 1e8 times smaller (~3e-14).
TOL_SUM = {
    "float32": dict(rtol=1e-5, atol=1e-5),
    "float64": dict(rtol=1e-10, atol=1e-12),
}

# Known errors of PyTorch's own kernels, undone before comparing, so that no tolerance is
# loosened for them. torch's float64 hardsigmoid backward multiplies by 1.0f / 6.0f, a
# float32 constant 3e-8 above 1/6 (cagrad uses 1/6 in float64); scaled by
# (1/6) / float32(1/6), torch's gradient is exact. Keyed by (op name, dtype name).
TORCH_GRADIENT_FIXES = {("hardsigmoid", "float64"): (1 / 6) / float(np.float32(1 / 6))}


def torch_gradient(op, grad):
    """torch's gradient of `op` with its known kernel error undone (TORCH_GRADIENT_FIXES)."""
    fix = TORCH_GRADIENT_FIXES.get((op, str(grad.dtype).replace("torch.", "")))
    return grad if fix is None else grad * fix


NP_DTYPES = {"float32": np.float32, "float64": np.float64, "int64": np.int64}


def lib_dtype(L, name):
    return getattr(L, name)


def is_torch(x):
    return isinstance(x, torch.Tensor)


def to_np(x):
    """A numpy COPY of a cagrad or torch tensor (or a number / ndarray)."""
    if x is None:
        return None
    if is_torch(x):
        return x.detach().cpu().numpy(force=True).copy()  # force: sgn's ZeroTensor gradient
    if isinstance(x, np.ndarray):
        return x.copy()
    if isinstance(x, (int, float, bool)):
        return np.asarray(x)
    # cagrad tensor
    return np.array(x.detach().numpy(), copy=True)


def np_dtype_name(x):
    return str(to_np(x).dtype)


def to_both(arr, requires_grad=False):
    """(cagrad tensor, torch tensor) holding copies of the same numpy data."""
    arr = np.asarray(arr)
    rg = bool(requires_grad) and arr.dtype.kind == "f"
    c = ca.tensor(arr.copy(), requires_grad=rg)
    t = torch.tensor(arr.copy(), requires_grad=rg)
    return c, t


def assert_close(c, t, rtol=None, atol=None, *, check_dtype=True, msg=""):
    """Compare a cagrad result with a torch result via numpy.

    Default tolerances come from TOL for the torch result's dtype. ``check_dtype`` also
    requires equal numpy dtypes (bool torch results are compared as 0/1 values, since
    cagrad returns 0/1 in the input dtype: pass check_dtype=False)."""
    if t is None or c is None:
        assert c is None and t is None, f"{msg}: one is None: cagrad={c!r} torch={t!r}"
        return
    a = to_np(c)
    b = to_np(t)
    assert a.shape == b.shape, f"{msg}: shape: cagrad {a.shape} vs torch {b.shape}"
    if check_dtype:
        assert a.dtype == b.dtype, f"{msg}: dtype: cagrad {a.dtype} vs torch {b.dtype}"
    if rtol is None or atol is None:
        d = TOL.get(str(b.dtype), dict(rtol=0, atol=0))
        rtol = d["rtol"] if rtol is None else rtol
        atol = d["atol"] if atol is None else atol
    if b.dtype.kind in "biu" and a.dtype.kind in "biu":
        np.testing.assert_array_equal(a, b, err_msg=msg)
        return
    np.testing.assert_allclose(
        a.astype(np.float64), b.astype(np.float64), rtol=rtol, atol=atol, err_msg=msg
    )


def counters():
    """A plain dict snapshot of cagrad.compiled_autograd.counters."""
    return dict(ca.compiled_autograd.counters)


def compiled_enabled():
    if STANDIN:
        return ca.compiled_autograd._depth["depth"] > 0
    return ca._C.compiled_autograd_depth() > 0


def compiled_ctx(flag, dynamic=False):
    return ca.compiled_autograd.enable(dynamic=dynamic) if flag else contextlib.nullcontext()


def backward_checked(loss, compiled, **kw):
    """loss.backward(**kw); under compiled autograd also check that the backward really
    went through a compiled graph (a capture or a cache hit, no eager fallback)."""
    if compiled and not STANDIN:
        before = counters()
    loss.backward(**kw)
    if compiled and not STANDIN:
        after = counters()
        ran = (after["captures"] - before["captures"]) + (after["cache_hits"] - before["cache_hits"])
        assert ran == 1, f"compiled backward did not capture or hit once: {before} -> {after}"
        assert after["eager_fallbacks"] == before["eager_fallbacks"], (
            f"compiled backward fell back to eager: {before} -> {after}"
        )


def numeric_gradient(f, x, eps=1e-6):
    """Central differences of the scalar function f at x (a float64 array)."""
    grad = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += eps
        lo[i] -= eps
        grad[i] = (f(hi) - f(lo)) / (2 * eps)
    return grad


def names_shape(msg, shape):
    """True if an error message names this shape in a usual spelling."""
    shape = tuple(shape)
    forms = [
        "[" + ", ".join(map(str, shape)) + "]",
        "(" + ", ".join(map(str, shape)) + ")",
        "[" + ",".join(map(str, shape)) + "]",
        "x".join(map(str, shape)),
        "torch.Size([" + ", ".join(map(str, shape)) + "])",
    ]
    return any(f in msg for f in forms)


def this_python_env():
    """Environment for a child python that imports the same cagrad."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p)
    return env


def outcome(fn):
    """(exception type name, message) of fn(), or ("ok", None) when it returns."""
    try:
        fn()
    except Exception as e:  # noqa: BLE001 - any error is compared with torch's
        return type(e).__name__, str(e)
    return "ok", None


def same_outcome(make):
    """make(L) raises the same error type and message with cagrad as with torch."""
    c, t = outcome(lambda: make(ca)), outcome(lambda: make(torch))
    assert c == t


def error_of(L, fn):
    """(type, message) of the exception fn(L) raises, or (None, None): what the error-parity
    tests compare between cagrad and torch."""
    try:
        fn(L)
    except Exception as e:  # noqa: BLE001 - the type is what we compare
        return type(e), str(e)
    return None, None
