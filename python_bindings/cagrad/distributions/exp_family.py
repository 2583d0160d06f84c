"""ExponentialFamily: the base torch gives Normal and Bernoulli. Here it only marks the
family (isinstance checks, and kl_divergence's answer for two different families); each
member defines its own entropy and KL, so torch's Bregman-divergence fallback is not
needed (see docs/python-api.md)."""

from .distribution import Distribution

__all__ = ["ExponentialFamily"]


class ExponentialFamily(Distribution):
    """Distributions of the exponential family."""
