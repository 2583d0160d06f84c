"""Gamma, Dirichlet and Beta, with reparameterised samples (rsample).

A Gamma draw x of concentration a cannot be written as a smooth function of a and
parameter-free noise, so PyTorch differentiates it implicitly: x is held at the quantile
u = P(a, x) of its draw (P the regularised lower incomplete gamma function), which gives
dx/da = -(dP/da) / (dP/dx). cagrad computes that derivative from P's power series (exact
up to float64 rounding; see _dsample_dconcentration), and attaches it with a composite of
differentiable ops: x + (a - a.detach()) * dx/da has x's value and dx/da as its gradient,
so rsample's gradients flow eagerly and under compiled autograd. Dirichlet and Beta draws
are normalised Gamma draws, differentiated through the normalisation.
"""

import math

import numpy as np

import cagrad

from .. import _random
from . import constraints
from .exp_family import ExponentialFamily
from .kl import register_kl
from .utils import _is_number, broadcast_all

__all__ = ["Beta", "Dirichlet", "Gamma"]


# ---------------------------------------------------------------- standard Gamma draws
def _dsample_dconcentration(a, x):
    """dx/da for standard Gamma draws x of concentration a (float64 arrays): the implicit
    derivative -(dP/da) / (dP/dx) of the regularised incomplete gamma P(a, x)."""
    a, x = np.broadcast_arrays(np.asarray(a, np.float64), np.asarray(x, np.float64))
    shape = a.shape
    a, x = a.reshape(-1), np.maximum(x.reshape(-1), np.finfo(np.float64).tiny)
    out = np.empty_like(a)
    # the series' terms rise while n < x - a and then fall off within a few sqrt(x): the
    # count each entry needs; entries are taken in chunks to bound the work array
    needed = np.ceil(np.maximum(x - a, 0) + 12 * np.sqrt(x) + 40).astype(np.int64)
    order = np.argsort(needed, kind="stable")
    start = 0
    while start < a.size:
        stop = start + 1
        while stop < a.size and needed[order[stop]] * (stop + 1 - start) <= 1 << 22:
            stop += 1
        chunk = order[start:stop]
        out[chunk] = _series_slope(a[chunk], x[chunk], int(needed[chunk].max()))
        start = stop
    return out.reshape(shape)


def _series_slope(a, x, terms):
    """-(dP/da) / (dP/dx) for 1-D a, x from the first `terms` terms of P's series."""
    n = np.arange(terms, dtype=np.float64)[:, None]
    lgamma = np.vectorize(math.lgamma, otypes=[np.float64])
    lgamma_a1 = lgamma(a + 1)
    # lgamma(a + n + 1) and digamma(a + n + 1) by their recurrences from a + 1
    steps = np.concatenate([np.zeros((1, a.size)), a + n[1:]])
    lgamma_an1 = lgamma_a1 + np.cumsum(np.log(np.maximum(steps, 1e-300)) * (n > 0), axis=0)
    psi = _digamma(a + 1) + np.cumsum(np.where(n > 0, 1.0 / np.maximum(steps, 1e-300), 0),
                                      axis=0)
    # P(a, x) = sum_n exp(log_t_n), log_t_n = (a + n) log x - x - lgamma(a + n + 1), and
    # d/da log_t_n = log x - digamma(a + n + 1)
    log_x = np.log(x)
    log_t = (a + n) * log_x - x - lgamma_an1
    shift = log_t.max(axis=0)
    dp_da = np.sum(np.exp(log_t - shift) * (log_x - psi), axis=0) * np.exp(shift)
    # dP/dx = x^(a-1) e^-x / Gamma(a), with lgamma(a) = lgamma(a + 1) - log a
    dp_dx = np.exp((a - 1) * log_x - x - (lgamma_a1 - np.log(a)))
    return -dp_da / dp_dx


def _digamma(v):
    """digamma of a float64 array (recurrence to v >= 6, then the asymptotic series)."""
    v = np.array(v, dtype=np.float64, copy=True)
    out = np.zeros_like(v)
    while np.any(v < 6):
        small = v < 6
        out[small] -= 1.0 / v[small]
        v[small] += 1
    inv2 = 1.0 / (v * v)
    return out + np.log(v) - 0.5 / v - inv2 * (1 / 12 - inv2 * (1 / 120 - inv2 * (
        1 / 252 - inv2 * (1 / 240 - inv2 / 132))))


def _standard_gamma(concentration, differentiable):
    """Gamma(concentration, 1) draws from cagrad's generator, clamped to the smallest
    positive float (as torch); with differentiable, they carry dx/d(concentration)."""
    dtype = concentration.dtype
    a = concentration.detach().numpy().astype(np.float64)
    x = _random.default_generator._np.standard_gamma(a)
    x = np.maximum(x, np.finfo(np.dtype(str(dtype).split(".")[-1])).tiny)
    sample = cagrad.tensor(x, dtype=dtype)
    if not (differentiable and concentration.requires_grad and cagrad.is_grad_enabled()):
        return sample
    slope = cagrad.tensor(_dsample_dconcentration(a, x), dtype=dtype)
    return sample + (concentration - concentration.detach()) * slope


class Gamma(ExponentialFamily):
    """The Gamma distribution with shape `concentration` and inverse scale `rate`."""

    arg_constraints = {"concentration": constraints.positive, "rate": constraints.positive}
    support = constraints.nonnegative
    has_rsample = True
    _mean_carrier_measure = 0

    def __init__(self, concentration, rate, validate_args=None):
        self.concentration, self.rate = broadcast_all(concentration, rate)
        scalar = _is_number(concentration) and _is_number(rate)
        batch_shape = () if scalar else tuple(self.concentration.shape)
        super().__init__(batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Gamma, _instance)
        return self._expand_into(new, batch_shape, ("concentration", "rate"))

    @property
    def mean(self):
        return self.concentration / self.rate

    @property
    def mode(self):
        return ((self.concentration - 1) / self.rate).clamp(min=0)

    @property
    def variance(self):
        return self.concentration / self.rate.pow(2)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        return _standard_gamma(self.concentration.expand(shape), True) / \
            self.rate.expand(shape)

    def sample(self, sample_shape=()):
        with cagrad.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value):
        value = cagrad.as_tensor(value, dtype=self.rate.dtype)
        if self._validate_args:
            self._validate_sample(value)
        return (cagrad.xlogy(self.concentration, self.rate)
                + cagrad.xlogy(self.concentration - 1, value)
                - self.rate * value - cagrad.lgamma(self.concentration))

    def entropy(self):
        c = self.concentration
        return c - cagrad.log(self.rate) + cagrad.lgamma(c) + (1.0 - c) * cagrad.digamma(c)

    def cdf(self, value):
        raise NotImplementedError(
            "Gamma.cdf is not supported by cagrad: it needs the regularised incomplete "
            "gamma function (torch.special.gammainc), which cagrad lacks (see "
            "docs/python-api.md, Everyday names (wave 3))")


class Dirichlet(ExponentialFamily):
    """The Dirichlet distribution on the simplex, of concentration [..., K]."""

    arg_constraints = {"concentration": constraints.independent(constraints.positive, 1)}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, concentration, validate_args=None):
        if concentration.dim() < 1:
            raise ValueError("`concentration` parameter must be at least one-dimensional.")
        self.concentration = concentration
        shape = tuple(concentration.shape)
        super().__init__(shape[:-1], shape[-1:], validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Dirichlet, _instance)
        return self._expand_into(new, batch_shape, ("concentration",), event_dims=1)

    def rsample(self, sample_shape=()):
        shape = tuple(self._extended_shape(sample_shape))
        draws = _standard_gamma(self.concentration.expand(shape), True)
        return draws / draws.sum(-1, keepdim=True)

    def sample(self, sample_shape=()):
        with cagrad.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        c = self.concentration
        return (cagrad.xlogy(c - 1.0, value).sum(-1) + cagrad.lgamma(c.sum(-1))
                - cagrad.lgamma(c).sum(-1))

    @property
    def mean(self):
        return self.concentration / self.concentration.sum(-1, keepdim=True)

    @property
    def mode(self):
        c = self.concentration
        shifted = (c - 1).clamp(min=0.0)
        mode = shifted / shifted.sum(-1, keepdim=True)
        # rows whose concentrations are all below 1: a vertex of the simplex, the one at
        # the row's argmax as torch picks it (numpy's argmax also takes the first NaN)
        rows = (c < 1).detach().numpy().all(-1)
        if rows.any():
            values = mode.detach().numpy()
            hot = np.zeros(values.shape)
            np.put_along_axis(hot, values.argmax(-1)[..., None], 1.0, -1)
            mode = cagrad.where(cagrad.tensor(rows[..., None]),
                                cagrad.tensor(hot, dtype=c.dtype), mode)
        return mode

    @property
    def variance(self):
        c = self.concentration
        total = c.sum(-1, keepdim=True)
        return c * (total - c) / (total.pow(2) * (total + 1))

    def entropy(self):
        c = self.concentration
        k = c.shape[-1]
        total = c.sum(-1)
        return (cagrad.lgamma(c).sum(-1) - cagrad.lgamma(total)
                - (k - total) * cagrad.digamma(total)
                - ((c - 1.0) * cagrad.digamma(c)).sum(-1))


class Beta(ExponentialFamily):
    """The Beta distribution on [0, 1]: a two-class Dirichlet (concentration1 for x,
    concentration0 for 1 - x), as PyTorch builds it."""

    arg_constraints = {"concentration1": constraints.positive,
                       "concentration0": constraints.positive}
    support = constraints.unit_interval
    has_rsample = True

    def __init__(self, concentration1, concentration0, validate_args=None):
        if _is_number(concentration1) and _is_number(concentration0):
            both = cagrad.tensor([float(concentration1), float(concentration0)])
        else:
            c1, c0 = broadcast_all(concentration1, concentration0)
            both = cagrad.stack([c1, c0], -1)
        self._dirichlet = Dirichlet(both, validate_args=validate_args)
        super().__init__(self._dirichlet._batch_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(Beta, _instance)
        new._dirichlet = self._dirichlet.expand(batch_shape)
        super(Beta, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    @property
    def concentration1(self):
        return self._dirichlet.concentration[..., 0]

    @property
    def concentration0(self):
        return self._dirichlet.concentration[..., 1]

    @property
    def mean(self):
        return self.concentration1 / (self.concentration1 + self.concentration0)

    @property
    def mode(self):
        return self._dirichlet.mode[..., 0]

    @property
    def variance(self):
        total = self.concentration1 + self.concentration0
        return self.concentration1 * self.concentration0 / (total.pow(2) * (total + 1))

    def rsample(self, sample_shape=()):
        return self._dirichlet.rsample(sample_shape).select(-1, 0)

    def sample(self, sample_shape=()):
        with cagrad.no_grad():
            return self.rsample(sample_shape)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return self._dirichlet.log_prob(cagrad.stack([value, 1.0 - value], -1))

    def entropy(self):
        return self._dirichlet.entropy()


# ------------------------------------------------------------------ KL divergences
@register_kl(Gamma, Gamma)
def _kl_gamma_gamma(p, q):
    # E_p[log p - log q] of two Gammas, in closed form
    return (q.concentration * cagrad.log(p.rate / q.rate)
            + cagrad.lgamma(q.concentration) - cagrad.lgamma(p.concentration)
            + (p.concentration - q.concentration) * cagrad.digamma(p.concentration)
            + (q.rate - p.rate) * (p.concentration / p.rate))


@register_kl(Dirichlet, Dirichlet)
def _kl_dirichlet_dirichlet(p, q):
    total_p, total_q = p.concentration.sum(-1), q.concentration.sum(-1)
    log_norm = cagrad.lgamma(total_p) - cagrad.lgamma(total_q) - (
        cagrad.lgamma(p.concentration) - cagrad.lgamma(q.concentration)).sum(-1)
    # E_p[log x_k] = digamma(p_k) - digamma(total_p)
    expected_log = cagrad.digamma(p.concentration) - cagrad.digamma(total_p).unsqueeze(-1)
    return log_norm + ((p.concentration - q.concentration) * expected_log).sum(-1)


@register_kl(Beta, Beta)
def _kl_beta_beta(p, q):
    return _kl_dirichlet_dirichlet(p._dirichlet, q._dirichlet)
