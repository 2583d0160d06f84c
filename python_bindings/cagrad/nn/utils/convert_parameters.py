"""parameters_to_vector / vector_to_parameters, as torch.nn.utils.convert_parameters."""

from ... import _C
from ..._functions import cat
from ..._grad_mode import no_grad


def parameters_to_vector(parameters):
    """One 1-D tensor holding every parameter's elements, in order (differentiable)."""
    return cat([param.reshape(-1) for param in parameters])


def vector_to_parameters(vec, parameters):
    """Write consecutive slices of vec into the parameters.

    torch rebinds each param.data to a view of vec; cagrad tensors have no settable .data,
    so the values are copied in place instead (the parameters do not alias vec)."""
    if not isinstance(vec, _C.TensorBase):
        raise TypeError(f"expected torch.Tensor, but got: {_typename(vec)}")
    pointer = 0
    with no_grad():
        for param in parameters:
            count = param.numel()
            param.copy_(vec[pointer:pointer + count].view_as(param))
            pointer += count


def _typename(obj):
    cls = type(obj)
    return cls.__qualname__ if cls.__module__ == "builtins" else f"{cls.__module__}.{cls.__qualname__}"
