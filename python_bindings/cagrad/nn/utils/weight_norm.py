"""cagrad.nn.utils.weight_norm / remove_weight_norm: PyTorch's older weight-norm API.

The parameter <name> is replaced by <name>_g (the norms) and <name>_v (the direction);
module.<name> is g * v / ||v||, recomputed from them each time it is read (PyTorch
recomputes it before each forward; reading it is the only way a forward sees it, so the
values are the same). The module keeps its class name.
"""

import warnings

from ..._grad_mode import no_grad
from ..parameter import Parameter
from ._weight_norm_math import norm_except_dim, normalized_dim, weight_norm_value

__all__ = ["weight_norm", "remove_weight_norm"]


def _weight_property(name, dim):
    def getter(self):
        return weight_norm_value(getattr(self, name + "_v"), getattr(self, name + "_g"), dim)

    return property(getter)


def weight_norm(module, name="weight", dim=0):
    warnings.warn("`torch.nn.utils.weight_norm` is deprecated in favor of "
                  "`torch.nn.utils.parametrizations.weight_norm`.", FutureWarning, stacklevel=2)
    norms = module.__dict__.setdefault("_cagrad_weight_norms", {})
    if name in norms:
        raise RuntimeError(f"Cannot register two weight_norm hooks on the same parameter "
                           f"{name}")
    dim = normalized_dim(dim)
    weight = module._parameters.pop(name)
    with no_grad():
        g = norm_except_dim(weight, dim)
    module.register_parameter(name + "_g", Parameter(g.detach()))
    module.register_parameter(name + "_v", Parameter(weight.detach()))
    cls = type(module)
    base = getattr(cls, "_cagrad_weight_norm_base", None)
    if base is None:  # a class of its own, same name, to carry the property
        cls = type(cls.__name__, (cls,), {"_cagrad_weight_norm_base": cls})
        cls.__qualname__ = type(module).__qualname__
        module.__class__ = cls
    setattr(cls, name, _weight_property(name, dim))
    norms[name] = dim
    return module


def remove_weight_norm(module, name="weight"):
    norms = module.__dict__.get("_cagrad_weight_norms", {})
    if name not in norms:
        raise ValueError(f"weight_norm of '{name}' not found in {module}")
    with no_grad():
        weight = getattr(module, name).detach()
    cls = type(module)
    delattr(cls, name)
    del norms[name]
    del module._parameters[name + "_g"]
    del module._parameters[name + "_v"]
    module.register_parameter(name, Parameter(weight))
    if not norms:
        module.__class__ = cls._cagrad_weight_norm_base
    return module
