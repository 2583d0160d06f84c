"""cagrad.nn.utils.parametrizations: weight_norm as a parametrization (PyTorch's current
API): the weight becomes module.parametrizations.weight.original0 (g, the norms) and
original1 (v, the direction), recomputed into module.weight on each access."""

from ..module import Module
from . import parametrize
from ._weight_norm_math import norm_except_dim, normalized_dim, weight_norm_value

__all__ = ["weight_norm", "orthogonal"]


class _WeightNorm(Module):
    def __init__(self, dim=0):
        super().__init__()
        self.dim = normalized_dim(dim)

    def forward(self, weight_g, weight_v):
        return weight_norm_value(weight_v, weight_g, self.dim)

    def right_inverse(self, weight):
        return norm_except_dim(weight, self.dim), weight


def weight_norm(module, name="weight", dim=0):
    """Reparametrise module.<name> as g * v / ||v|| (norm over every dim but `dim`;
    dim=None: over the whole tensor)."""
    parametrize.register_parametrization(module, name, _WeightNorm(dim), unsafe=True)
    return module


# orthogonal matrices (h39): matrix_exp, cayley and householder maps (real only)
from ._orthogonal import orthogonal  # noqa: E402
