"""cagrad.nn.utils: gradient clipping and parameter/vector conversion, as torch.nn.utils."""

from .clip_grad import (
    clip_grad_norm,
    clip_grad_norm_,
    clip_grad_value_,
    clip_grads_with_norm_,
    get_total_norm,
)
from .convert_parameters import parameters_to_vector, vector_to_parameters
from . import rnn
# weight-norm reparametrisations
from . import parametrizations, parametrize
from .spectral_norm import remove_spectral_norm, spectral_norm
from .weight_norm import remove_weight_norm, weight_norm
# stateless.functional_call (deprecated alias of func.functional_call) and pruning
from . import prune, stateless

__all__ = [
    "clip_grad_norm", "clip_grad_norm_", "clip_grad_value_", "clip_grads_with_norm_",
    "get_total_norm", "parameters_to_vector", "vector_to_parameters", "rnn",
    "parametrizations", "parametrize", "weight_norm", "remove_weight_norm",
    "spectral_norm", "remove_spectral_norm", "prune", "stateless",
]
