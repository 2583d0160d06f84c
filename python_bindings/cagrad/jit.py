"""cagrad.jit: torch.jit's entry points for a library without TorchScript.

script() and trace() return the function or module unchanged, so it runs eagerly (the
same results, computed by Python), and log once on the `cagrad` logger that nothing was
compiled, as cagrad.compile() does. A traced function is therefore not specialised to its
example inputs: its Python control flow still runs on each call. ignore, unused and export
are identity decorators; save/load of TorchScript archives are not supported.
"""

import logging

__all__ = ["script", "trace", "ignore", "unused", "export", "is_scripting", "is_tracing"]

_logged = False


def _log_once():
    global _logged
    if not _logged:
        _logged = True
        logging.getLogger("cagrad").info(
            "cagrad.jit.script()/trace() return the function or module unchanged and run it "
            "eagerly: cagrad has no TorchScript; it compiles the backward pass, see "
            "cagrad.compiled_autograd.enable()")


def script(obj, optimize=None, _frames_up=0, _rcb=None, example_inputs=None):
    """Return obj unchanged (see the module doc)."""
    _log_once()
    return obj


def trace(func, example_inputs=None, optimize=None, check_trace=True, check_inputs=None,
          check_tolerance=1e-5, strict=True, _force_outplace=False, _module_class=None,
          _compilation_unit=None, example_kwarg_inputs=None, _store_inputs=True):
    """Return func unchanged (see the module doc); example_inputs are not run."""
    if not callable(func):
        raise TypeError(f"trace() expects a function or a Module, got {type(func).__name__}")
    _log_once()
    return func


def ignore(drop=False, **kwargs):
    """@ignore or @ignore(drop=...): the function, unchanged."""
    if callable(drop):
        return drop
    return lambda fn: fn


def unused(fn):
    return fn


def export(fn):
    return fn


def is_scripting():
    return False


def is_tracing():
    return False


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.jit' has no attribute {name!r}: cagrad has no "
                         f"TorchScript; cagrad.jit has script, trace, ignore, unused, export, "
                         f"is_scripting and is_tracing (see docs/python-api.md)")
