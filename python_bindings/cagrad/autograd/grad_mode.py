"""cagrad.autograd.grad_mode: where torch keeps its grad-mode context managers.

The classes are cagrad's own (cagrad/_grad_mode.py), so `torch.autograd.grad_mode.no_grad
is torch.no_grad` holds here too. set_multithreading_enabled is accepted for the code that
uses it: cagrad's engine runs each backward on the thread that called it, so there are no
worker threads to turn off and the setting changes nothing but what it reports.
"""

import functools

from .._grad_mode import enable_grad, inference_mode, no_grad, set_grad_enabled

__all__ = ["no_grad", "enable_grad", "set_grad_enabled", "inference_mode",
           "set_multithreading_enabled"]

_multithreading = {"enabled": True}


def is_multithreading_enabled():
    return _multithreading["enabled"]


class set_multithreading_enabled:
    """set_multithreading_enabled(mode): sets the flag at once; as a context manager or a
    decorator it restores the previous value afterwards, as torch's."""

    def __init__(self, mode):
        self.mode = bool(mode)
        self.prev = _multithreading["enabled"]
        _multithreading["enabled"] = self.mode

    def __enter__(self):
        return None

    def __exit__(self, *exc):
        _multithreading["enabled"] = self.prev
        return False

    def clone(self):
        return type(self)(self.mode)

    def __call__(self, fn):
        _multithreading["enabled"] = self.prev  # as a decorator the call must not stick

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with self.clone():
                return fn(*args, **kwargs)
        return wrapper
