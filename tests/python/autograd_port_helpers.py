"""The harness of the test_autograd ports (test_autograd_port*.py): one function make(L)
written against PyTorch's API runs with torch and with cagrad (eagerly, or with the whole
call under cagrad.compiled_autograd.enable()), and the two outcomes must agree: the same
values (tensors within the dtype's tolerance), or the same error type with a message that
starts with torch's (cagrad may add a hint after it)."""

import warnings

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, compiled_ctx

MODES = pytest.mark.parametrize("mode", ["eager", "compiled"])
DTYPES = pytest.mark.parametrize("dt", ["float32", "float64"])


def data(L, shape, dt="float32", seed=0, requires_grad=False, low=-1.0, high=1.0):
    """The same values for both libraries: uniform in [low, high) from a seeded numpy rng."""
    arr = np.random.default_rng(seed).uniform(low, high, size=shape)
    return L.tensor(arr, dtype=getattr(L, dt), requires_grad=requires_grad)


def outcome(make, L, compiled=False):
    """("ok", value) or ("err", type name, message) of make(L)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # tests that check warnings record their own
        try:
            with compiled_ctx(compiled and L is ca):
                return ("ok", make(L))
        except Exception as e:  # noqa: BLE001 - any error is compared with torch's
            return ("err", type(e).__name__, str(e))


def _is_tensor(v):
    return isinstance(v, (torch.Tensor, ca.Tensor))


def same_value(got, want, path="result"):
    """got (cagrad's) equals want (torch's): tensors by value and dtype, containers
    entry by entry, anything else with ==."""
    if _is_tensor(want):
        assert _is_tensor(got), f"{path}: cagrad gave {got!r}, torch a tensor"
        assert_close(got, want, msg=path)
    elif isinstance(want, (tuple, list)):
        assert isinstance(got, (tuple, list)) and len(got) == len(want), \
            f"{path}: cagrad {got!r} vs torch {want!r}"
        for i, (g, w) in enumerate(zip(got, want)):
            same_value(g, w, f"{path}[{i}]")
    elif isinstance(want, dict):
        assert isinstance(got, dict) and got.keys() == want.keys(), f"{path}: {got} vs {want}"
        for k in want:
            same_value(got[k], want[k], f"{path}[{k!r}]")
    else:
        assert got == want, f"{path}: cagrad {got!r} vs torch {want!r}"


def parity(make, mode="eager"):
    """make(L) gives the same outcome with cagrad (in mode) as with torch; returns
    cagrad's outcome."""
    want = outcome(make, torch)
    got = outcome(make, ca, mode == "compiled")
    if want[0] == "err":
        assert got[0] == "err", f"torch raised {want[1]}: {want[2]!r}; cagrad gave {got!r}"
        message = got[2].replace("cagrad.", "torch.")
        assert (got[1], message[:len(want[2])]) == (want[1], want[2]), \
            f"cagrad {got[1]}: {got[2]!r}\ntorch  {want[1]}: {want[2]!r}"
    else:
        assert got[0] == "ok", f"torch returned {want[1]!r}; cagrad raised {got[1:]}"
        same_value(got[1], want[1])
    return got


def warning_categories(fn):
    """The categories (names) of the warnings fn() emits, in order."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn()
    return [w.category.__name__ for w in caught]
