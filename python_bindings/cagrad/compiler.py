"""torch.compiler for cagrad: its compiler is compiled autograd (the backward pass), so the
forward-graph controls here (disable, allow_in_graph, assume_constant_result) have nothing
to change and return what they are given; is_compiling() is False because no tracer ever
runs a forward. See docs/python-api.md, 'More torch functions'."""

from ._compile import compile  # noqa: F401, A004 - torch.compiler.compile

__all__ = ["allow_in_graph", "assume_constant_result", "compile", "cudagraph_mark_step_begin",
           "disable", "is_compiling", "is_dynamo_compiling", "is_exporting", "list_backends",
           "reset"]


def reset():
    """Drops compiled autograd's cached graphs (torch.compiler.reset drops Dynamo's)."""
    from . import compiled_autograd
    compiled_autograd.reset()


def disable(fn=None, recursive=True, *, reason=None):
    if fn is None:
        return lambda f: f
    return fn


def allow_in_graph(fn):
    return fn


def assume_constant_result(fn):
    return fn


def list_backends(exclude_tags=("debug", "experimental")):
    return ["inductor"]


def cudagraph_mark_step_begin():
    return None


def is_compiling():
    return False


def is_dynamo_compiling():
    return False


def is_exporting():
    return False
