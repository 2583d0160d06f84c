"""nn.Parameter: a Tensor that a Module registers as one of its parameters."""

from .. import _C
from .._tensor import Tensor

_FLOAT32 = 0  # the _C dtype code of the default dtype


class Parameter(Tensor):
    """A leaf Tensor that shares data's storage and requires grad (by default).

    Like torch.nn.Parameter, it is an alias of data, detached from data's graph: writes
    through one are seen through the other, gradients are not.
    """

    def __new__(cls, data=None, requires_grad=True):
        if data is None:
            data = _C.empty(_FLOAT32, (0,))
        param = super().__new__(cls, data)  # TensorBase.__new__: a detached alias of data
        param.requires_grad = requires_grad
        return param

    def __repr__(self):
        return "Parameter containing:\n" + super().__repr__()
