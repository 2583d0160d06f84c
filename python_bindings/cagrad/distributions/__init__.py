"""cagrad.distributions: torch.distributions' Distribution API on cagrad tensors.

Normal, Uniform, Bernoulli, Categorical, OneHotCategorical, Independent,
MultivariateNormal, Beta, Gamma, Dirichlet and TransformedDistribution (with
transforms.ExpTransform / AffineTransform / SigmoidTransform / ComposeTransform), with
torch's shapes, validation messages, log_prob / entropy / cdf formulas, and kl_divergence / register_kl. Draws come from cagrad's generator
(cagrad.manual_seed), so they are reproducible but not torch's numbers; rsample is
reparameterised, so its gradients flow (eagerly and under compiled autograd).
docs/python-api.md ("Distributions") lists what is supported and what is not.
"""

from . import constraints, transforms
from .bernoulli import Bernoulli
from .categorical import Categorical
from .gamma import Beta, Dirichlet, Gamma
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .independent import Independent
from .kl import kl_divergence, register_kl
from .multivariate_normal import MultivariateNormal
from .normal import Normal
from .one_hot_categorical import OneHotCategorical
from .transformed_distribution import TransformedDistribution
from .uniform import Uniform
# torch.distributions also exports its transforms at the top (torch.distributions.TanhTransform)
from .transforms import (AffineTransform, ComposeTransform, ExpTransform,
                         SigmoidTransform, TanhTransform, Transform)

__all__ = ["Bernoulli", "Categorical", "Distribution", "ExponentialFamily", "Independent",
           "MultivariateNormal", "Normal", "OneHotCategorical", "Uniform", "Beta", "Gamma",
           "Dirichlet", "TransformedDistribution", "constraints", "transforms",
           "kl_divergence", "register_kl", "AffineTransform", "ComposeTransform",
           "ExpTransform", "SigmoidTransform", "TanhTransform", "Transform"]

_DOCS = "docs/python-api.md"


def __getattr__(name):
    # torch.distributions has many more families; say which are here rather than a bare
    # AttributeError
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.distributions' has no attribute {name!r}: cagrad "
                         f"implements {', '.join(__all__[:13])} (see {_DOCS}, Distributions)")
