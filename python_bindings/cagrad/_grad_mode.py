"""Grad mode: no_grad, enable_grad, set_grad_enabled, inference_mode, is_grad_enabled.

Grad mode lives in the C core and is per thread, as in PyTorch. Each class here is both a
context manager and a function decorator; `@no_grad` works with and without parentheses.
"""

import functools
import inspect
import threading
import warnings

from . import _C

is_grad_enabled = _C.is_grad_enabled


class _GradModeContext:
    """Sets grad mode to self._mode on enter and restores the previous mode on exit."""

    _mode = False

    def __new__(cls, orig_func=None):
        # `@no_grad` without parentheses passes the function straight to the class.
        if orig_func is not None:
            return cls()(orig_func)
        return super().__new__(cls)

    def __enter__(self):
        self._prev = _C.set_grad_enabled(self._mode)

    def __exit__(self, exc_type, exc_value, traceback):
        _C.set_grad_enabled(self._prev)

    def clone(self):
        return type(self)()

    def __call__(self, func):
        if inspect.isclass(func):
            warnings.warn("Decorating classes is deprecated and will be disabled in future "
                          "versions. You should only decorate functions or methods. To "
                          "preserve the current behavior of class decoration, you can "
                          "directly decorate the `__init__` method and nothing else.",
                          FutureWarning, stacklevel=2)
            cls = func

            def func(*args, **kwargs):  # as torch: the class's construction runs in the mode
                return cls(*args, **kwargs)
        if inspect.isgeneratorfunction(func):
            return _wrap_generator(self.clone, func)

        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            with self.clone():
                return func(*args, **kwargs)

        return wrapper


def _wrap_generator(make_ctx, func):
    """A generator function decorated with a grad mode runs each of its steps (the start,
    every send, throw and the close) in that mode, and the caller's code between two steps
    in the caller's own mode, as torch does."""

    @functools.wraps(func)
    def wrapper(*args, **kwargs):
        gen = func(*args, **kwargs)
        try:
            with make_ctx():
                out = gen.send(None)
            while True:
                try:
                    sent = yield out
                except GeneratorExit:
                    with make_ctx():
                        gen.close()
                    raise
                except BaseException as exc:  # thrown in by the caller: pass it on
                    with make_ctx():
                        out = gen.throw(exc)
                else:
                    with make_ctx():
                        out = gen.send(sent)
        except StopIteration as stop:
            return stop.value

    return wrapper


class no_grad(_GradModeContext):
    """Context manager / decorator that turns gradient recording off, like torch.no_grad."""

    _mode = False


class enable_grad(_GradModeContext):
    """Context manager / decorator that turns gradient recording on, like torch.enable_grad."""

    _mode = True


_inference_local = threading.local()  # .enabled: this thread's inference mode


def is_inference_mode_enabled():
    """Whether this thread is inside inference_mode() (torch.is_inference_mode_enabled)."""
    return getattr(_inference_local, "enabled", False)


class inference_mode(_GradModeContext):
    """torch.inference_mode(mode=True): in cagrad no_grad plus the flag that
    is_inference_mode_enabled() reads (cagrad has no separate inference tensors).
    inference_mode(False) leaves inference mode and turns grad mode on, as in torch."""

    def __new__(cls, mode=True):
        if callable(mode):  # bare @inference_mode
            return cls()(mode)
        return super().__new__(cls)

    def __init__(self, mode=True):
        self._enabled = mode

    def __enter__(self):
        self._prev = _C.set_grad_enabled(not self._enabled)
        self._prev_inference = is_inference_mode_enabled()
        _inference_local.enabled = bool(self._enabled)

    def __exit__(self, exc_type, exc_value, traceback):
        _inference_local.enabled = self._prev_inference
        super().__exit__(exc_type, exc_value, traceback)

    def clone(self):
        return inference_mode(self._enabled)


class set_grad_enabled(_GradModeContext):
    """set_grad_enabled(mode): sets grad mode at once (so it also works as a plain call);
    as a context manager or decorator it restores the previous mode on exit."""

    def __new__(cls, mode):
        return super().__new__(cls)

    def __init__(self, mode):
        if not isinstance(mode, bool):
            raise TypeError(f"set_grad_enabled() takes a bool, not {type(mode).__name__}")
        self._mode = mode
        self._prev = _C.set_grad_enabled(mode)

    def __enter__(self):
        pass  # the mode was already set by the constructor

    def __call__(self, func):
        _C.set_grad_enabled(self._prev)  # as a decorator, the constructor must not stick
        return super().__call__(func)

    def clone(self):
        return set_grad_enabled(self._mode)


def zero_grads(params, set_to_none=True):
    """What Module.zero_grad and Optimizer.zero_grad share: reset each param's .grad, to
    None (the default), or to zeros in place."""
    for param in params:
        if param.grad is None:
            continue
        if set_to_none:
            param.grad = None
        else:
            param.grad.zero_()
