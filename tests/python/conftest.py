"""pytest fixtures of the cagrad suites. Helpers live in helpers.py (importable from every
test module: this folder is on sys.path), re-exported here for convenience."""

import os
import sys
import zlib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from helpers import (  # noqa: E402,F401
    STANDIN,
    ca,
    assert_close,
    compiled_ctx,
    compiled_enabled,
    counters,
    to_both,
    to_np,
)


def pytest_report_header(config):
    if STANDIN:
        return "cagrad suites: STAND-IN MODE (torch plays cagrad; cagrad-only tests skipped)"
    return f"cagrad suites: cagrad from {os.path.dirname(ca.__file__)}"


@pytest.fixture
def rng(request):
    """A numpy Generator seeded from the test id: deterministic per test, different
    across tests."""
    return np.random.default_rng(zlib.crc32(request.node.nodeid.encode()))


@pytest.fixture(autouse=True)
def clean_state():
    """Every test starts with empty compiled-autograd caches and zero counters, grad mode
    on, and must leave compiled autograd disabled and grad mode on."""
    ca.compiled_autograd.reset()
    ca.manual_seed(0)
    yield
    leaked_enable = compiled_enabled()
    if leaked_enable and not STANDIN:
        while ca._C.compiled_autograd_depth():
            ca._C.compiled_autograd_disable()
    grad_mode = ca.is_grad_enabled()
    if not grad_mode:
        ca.set_grad_enabled(True)
    ca.compiled_autograd.reset()
    assert not leaked_enable, "test left compiled autograd enabled"
    assert grad_mode, "test left grad mode disabled"


@pytest.fixture
def reset_counters():
    """Zero the compiled-autograd counters (and drop cached graphs) for this test."""
    ca.compiled_autograd.reset()
    yield
    ca.compiled_autograd.reset()


@pytest.fixture(params=[False, True], ids=["eager", "compiled"])
def compiled(request):
    """Runs the test body eagerly, then again inside cagrad.compiled_autograd.enable().
    The value is True for the compiled run."""
    if request.param:
        with ca.compiled_autograd.enable():
            yield True
    else:
        yield False
