"""Anomaly detection: while it is on, a backward in which a node computes a NaN gradient
stops with PyTorch's RuntimeError naming that node.

Before each backward()/grad() run in anomaly mode, a post-hook is put on every node of
the graph reachable from the roots (and taken off afterwards); the hook looks at the
gradients the node just produced. This works eagerly and under compiled autograd (node
hooks run in both). Unlike PyTorch, cagrad records no forward stack traces, so the error
does not come with the traceback of the forward call that made the node.
"""

import contextlib
import warnings

from .. import _C

__all__ = ["detect_anomaly", "set_detect_anomaly", "is_anomaly_enabled",
           "is_anomaly_check_nan_enabled"]

_state = {"enabled": False, "check_nan": True}


def is_anomaly_enabled():
    return _state["enabled"]


def is_anomaly_check_nan_enabled():
    return _state["check_nan"]


def _set(enabled, check_nan):
    _state["enabled"] = bool(enabled)
    _state["check_nan"] = bool(check_nan)


class detect_anomaly:
    """Context manager (and decorator) that turns anomaly detection on inside its block."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan
        self._before = None
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the "
                      "runtime and should only be enabled for debugging.", stacklevel=2)

    def __enter__(self):
        self._before = (is_anomaly_enabled(), is_anomaly_check_nan_enabled())
        _set(True, self.check_nan)

    def __exit__(self, *exc):
        _set(*self._before)
        return False

    def __call__(self, fn):
        def wrapped(*args, **kwargs):
            with self.__class__(self.check_nan):
                return fn(*args, **kwargs)
        return wrapped


class set_detect_anomaly:
    """Turn anomaly detection on or off now; as a context manager, the previous setting
    comes back at the end of the block."""

    def __init__(self, mode, check_nan=True):
        self._before = (is_anomaly_enabled(), is_anomaly_check_nan_enabled())
        _set(mode, check_nan)

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _set(*self._before)
        return False


def _has_nan(grad):
    if grad is None or not grad.is_floating_point():
        return False
    with _no_grad():
        return bool(_C.ne(grad, grad).any()._item())


def _no_grad():
    from .._grad_mode import no_grad
    return no_grad()


def _nan_check(node_name):
    def hook(grad_inputs, grad_outputs):
        for i, grad in enumerate(grad_inputs):
            if _has_nan(grad):
                raise RuntimeError(f"Function '{node_name}' returned nan values in its {i}th "
                                   f"output.")
    return hook


def _graph_bases(roots):
    """Every library node (_C.NodeBase) reachable from the roots, each once. Walked at the
    C level: a custom Function's node is reachable from Python only through its outputs,
    which may be gone while the graph still holds the node."""
    stack = [_C.grad_fn_node(t) for t in roots]
    seen, bases = set(), []
    while stack:
        base = stack.pop()
        if base is None or base._addr in seen:
            continue
        seen.add(base._addr)
        bases.append(base)
        stack.extend(b for b, _ in base._next)
    return bases


_OFF = contextlib.nullcontext()  # shared: a backward outside anomaly mode pays ~nothing


def checking(roots):
    """While a backward from roots runs: the NaN checks of anomaly mode (nothing when the
    mode is off)."""
    if not (_state["enabled"] and _state["check_nan"]):
        return _OFF
    return _checking(roots)


@contextlib.contextmanager
def _checking(roots):
    from .graph import _NodeHandle, node_object
    handles = []
    for base in _graph_bases(roots):
        live = [True]
        hook = _nan_check(node_object(base).name())
        hook_id = base._register_post_hook(lambda gi, go, hook=hook, live=live:
                                           hook(gi, go) if live[0] else None)
        handles.append(_NodeHandle(base, hook_id, live))
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
