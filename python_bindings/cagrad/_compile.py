"""cagrad.compile: torch.compile's signature for a library whose compiler is its autograd.

cagrad compiles the backward pass (compiled_autograd.enable()), not the forward, so
compile() returns the model (or, without one, a decorator that returns it) unchanged and
runs it eagerly. It logs once, on the `cagrad` logger, where the compiler is.
"""

import logging

_MODES = ("default", "lite", "reduce-overhead", "max-autotune-no-cudagraphs", "max-autotune")
_logged = False


def _log_once():
    global _logged
    if not _logged:
        _logged = True
        logging.getLogger("cagrad").info(
            "cagrad.compile() returns the model unchanged and runs its forward eagerly: "
            "cagrad compiles the backward pass; wrap training steps in "
            "cagrad.compiled_autograd.enable() for that")


def _check_options(mode, options):
    if mode is not None and options is not None:
        raise RuntimeError("Either mode or options can be specified, but both can't be "
                           "specified at the same time.")
    if mode is not None and mode not in _MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(_MODES)}")


def compile(model=None, *, fullgraph=False, dynamic=None, backend="inductor", mode=None,  # noqa: A001
            options=None, name=None, disable=False):
    """Return model unchanged (see the module doc); compile(...) without a model returns a
    decorator that does the same."""
    _check_options(mode, options)
    if model is None:
        def decorate(fn):
            return compile(fn, fullgraph=fullgraph, dynamic=dynamic, backend=backend,
                           mode=mode, options=options, name=name, disable=disable)

        return decorate
    if not callable(model):
        raise AssertionError(f"A callable function is expected, but {type(model)} is "
                             f"provided.")
    _log_once()
    return model
