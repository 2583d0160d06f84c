"""Normal(loc, scale): the Gaussian, reparameterised (rsample = loc + eps * scale)."""

import math

import cagrad

from . import constraints
from .exp_family import ExponentialFamily
from .utils import _is_number, _standard_normal, broadcast_all

__all__ = ["Normal"]

_HALF_LOG_TWO_PI = 0.5 * math.log(2 * math.pi)


class Normal(ExponentialFamily):
    """The normal distribution with mean `loc` and standard deviation `scale`."""

    arg_constraints = {"loc": constraints.real, "scale": constraints.positive}
    support = constraints.real
    has_rsample = True

    def __init__(self, loc, scale, validate_args=None):
        self.loc, self.scale = broadcast_all(loc, scale)
        scalar = _is_number(loc) and _is_number(scale)
        batch_shape = () if scalar else tuple(self.loc.shape)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Normal, _instance)
        return self._expand_into(new, batch_shape, ("loc", "scale"))

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def stddev(self):
        return self.scale

    @property
    def variance(self):
        return self.stddev.pow(2)

    def sample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        with cagrad.no_grad():
            return cagrad.normal(self.loc.expand(shape), self.scale.expand(shape))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, self.loc.dtype)
        return self.loc + eps * self.scale

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        variance = self.scale ** 2
        return (-((value - self.loc) ** 2) / (2 * variance) - self.scale.log()
                - _HALF_LOG_TWO_PI)

    def cdf(self, value):
        if self._validate_args:
            self._validate_sample(value)
        standard = (value - self.loc) * self.scale.reciprocal() / math.sqrt(2)
        return 0.5 * (1 + cagrad.erf(standard))

    def icdf(self, value):
        return self.loc + self.scale * cagrad.erfinv(2 * value - 1) * math.sqrt(2)

    def entropy(self):
        return 0.5 + _HALF_LOG_TWO_PI + cagrad.log(self.scale)
