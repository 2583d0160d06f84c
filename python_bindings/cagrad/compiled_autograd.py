"""cagrad.compiled_autograd: run backward() as one traced, optimised, cached graph.

    with cagrad.compiled_autograd.enable():
        loss.backward()
    cagrad.compiled_autograd.counters   # {'captures': 1, 'cache_hits': 0, ...}

Mirrors torch._dynamo.compiled_autograd. CAGRAD_LOGS=compiled_autograd (or
compiled_autograd_verbose) is read by the C engine each time enable() is entered.
"""

import contextlib
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Mapping

from . import _C

__all__ = ["enable", "disable", "reset", "counters", "compile_seconds", "write_graph",
           "set_profiling", "last_profile"]


_local = threading.local()  # .open: this thread's contexts entered and not exited


def _open():
    stack = getattr(_local, "open", None)
    if stack is None:
        stack = _local.open = []
    return stack


class _Level(contextlib.ContextDecorator):
    """One level of the C library's enable stack, as a context manager (enable / disable);
    also a decorator, as contextlib's managers are."""

    def __init__(self, dynamic, cache_size_limit, off):
        self._args = (bool(dynamic), cache_size_limit, bool(off))

    def __enter__(self):
        _C.compiled_autograd_enable(*self._args)
        _open().append(self)
        return self

    def __exit__(self, exc_type, exc, tb):
        stack = _open()
        innermost = bool(stack) and stack[-1] is self
        if self in stack:
            stack.remove(self)
        _C.compiled_autograd_disable()
        if not innermost:
            raise AssertionError("Nested Compiled Autograd Contexts must return before their "
                                 "parent context")
        return False


def enable(compiler_fn=None, *, dynamic=False, cache_size_limit=None):
    """Compile every backward()/autograd.grad() run inside the block.

    compiler_fn is accepted for torch compatibility and ignored: cagrad compiles backward
    graphs itself. dynamic=True makes every size symbolic from the first capture; otherwise
    a size becomes symbolic the first time it changes (one recompile). cache_size_limit
    (default 8) bounds the compiled graphs kept per cache entry. Calls nest, and the
    innermost settings apply until its block ends, even when it ends by an exception; a
    block that ends before a block nested in it is an AssertionError, as in PyTorch.
    """
    if compiler_fn is not None and not callable(compiler_fn):
        raise TypeError(f"compiler_fn must be callable or None, not {type(compiler_fn).__name__}")
    if cache_size_limit is None:
        cache_size_limit = 0  # the C default
    elif type(cache_size_limit) is not int or cache_size_limit < 1:
        raise ValueError(f"cache_size_limit must be a positive int, got {cache_size_limit!r}")
    return _Level(dynamic, cache_size_limit, False)


def disable():
    """Run backwards eagerly inside the block, even within an enable() block (torch's
    compiled_autograd._disable())."""
    return _Level(False, 0, True)


_enable = enable  # torch._dynamo.compiled_autograd's private names, for ported code
_disable = disable


def reset():
    """Drop every compiled graph and zero the counters."""
    _C.compiled_autograd_reset()


def write_graph(path):
    """Write the graph of the latest compiled backward to path: Graphviz DOT for a .dot/.gv
    path (or "-" for stdout), rendered with Graphviz's `dot` program for .svg/.png/.pdf.

    Raises RuntimeError if no compiled backward ran since start-up or reset(), if the latest
    one ran eagerly, or if rendering needs `dot` and it is not installed.
    """
    path = os.fspath(path)
    fmt = os.path.splitext(path)[1][1:].lower()
    if path == "-" or fmt in ("dot", "gv"):
        _C.graph_write_dot(path)
        return
    if fmt not in ("svg", "png", "pdf"):
        raise ValueError(f"write_graph(): cannot tell the format of {path!r}; end the name "
                         f"with .dot, .gv, .svg, .png or .pdf")
    dot = shutil.which("dot")
    if dot is None:
        raise RuntimeError(f"write_graph(): rendering {fmt} needs Graphviz's `dot` program, "
                           f"which is not on PATH; install graphviz, or write a .dot file")
    with tempfile.TemporaryDirectory() as tmp:
        dot_path = os.path.join(tmp, "graph.dot")
        _C.graph_write_dot(dot_path)
        done = subprocess.run([dot, f"-T{fmt}", dot_path, "-o", path], capture_output=True,
                              text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"write_graph(): `dot -T{fmt}` failed: {done.stderr.strip()}")


class _Counters(Mapping):
    """The live counters: every access reads the C engine's current values."""

    def __getitem__(self, key):
        return _C.compiled_autograd_counters()[key]

    def __iter__(self):
        return iter(_C.compiled_autograd_counters())

    def __len__(self):
        return len(_C.compiled_autograd_counters())

    def __repr__(self):
        return repr(_C.compiled_autograd_counters())


counters = _Counters()


def set_profiling(on=True):
    """Time every step of the compiled backwards that run from now on (off by default: it
    reads the clock around each step), for last_profile()."""
    _C.compiled_autograd_set_profiling(bool(on))


def last_profile():
    """The work and span of the latest compiled backward run with profiling on, as a dict:
    work_seconds (its steps' times summed: its time on one thread), span_seconds (the
    longest chain of steps that depend on each other: its time on unlimited threads),
    parallelism (work / span: the most any number of threads could speed the plan up) and
    steps. Profile at 1 thread (cagrad.set_num_threads(1)): a step's own kernel threads
    would shorten it. top_steps: the costliest steps (at most 8), longest first, as
    (autograd node, kernel, seconds): where the backward's time goes. RuntimeError when no
    profiled backward has run. A cagrad addition."""
    work, span, steps, top = _C.compiled_autograd_last_profile()
    return {"work_seconds": work, "span_seconds": span,
            "parallelism": work / span if span > 0 else 1.0, "steps": steps,
            "top_steps": top}


def compile_seconds():
    """Wall time, in seconds, spent compiling backward graphs on cache misses (tracing,
    the graph passes and the memory plan) since start-up or the last reset(); running the
    graphs is not included. Like torch._dynamo.utils.compile_times() for compiled
    autograd, it shows what the misses cost."""
    return _C.compiled_autograd_compile_seconds()
