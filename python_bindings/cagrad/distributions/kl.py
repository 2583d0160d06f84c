"""kl_divergence(p, q) and register_kl: KL(p || q) looked up by the pair of types.

Lookup takes the most specific registered pair (by each type's method resolution order),
warns when the p-first and q-first orderings disagree, and raises torch's
NotImplementedError for a pair with no registered function.
"""

import math
import warnings

import cagrad

from .bernoulli import Bernoulli
from .categorical import Categorical
from .distribution import Distribution
from .exp_family import ExponentialFamily
from .independent import Independent
from .multivariate_normal import MultivariateNormal, _kl_mvn_mvn
from .normal import Normal
from .one_hot_categorical import OneHotCategorical
from .uniform import Uniform
from .utils import _sum_rightmost

__all__ = ["kl_divergence", "register_kl"]

_DOCS = "docs/python-api.md"

_REGISTRY = {}  # (type_p, type_q) -> function, as registered
_CACHE = {}  # (type(p), type(q)) -> function found for them (or NotImplemented)


def register_kl(type_p, type_q):
    """Decorator: `@register_kl(P, Q)` makes the function compute KL(p || q) for
    instances of P and Q (and their subclasses, unless a closer pair is registered)."""
    for name, kind in (("type_p", type_p), ("type_q", type_q)):
        if not (isinstance(kind, type) and issubclass(kind, Distribution)):
            raise TypeError(f"Expected {name} to be a Distribution subclass but got {kind}")

    def decorator(fn):
        _REGISTRY[type_p, type_q] = fn
        _CACHE.clear()  # a new pair can be closer than the one found before
        return fn

    return decorator


def _distance(kind, ancestor):
    return kind.__mro__.index(ancestor)


def _lookup(type_p, type_q):
    pairs = [(p, q) for p, q in _REGISTRY if issubclass(type_p, p) and issubclass(type_q, q)]
    if not pairs:
        return NotImplemented

    def p_first(pair):
        return _distance(type_p, pair[0]), _distance(type_q, pair[1])

    def q_first(pair):
        return _distance(type_q, pair[1]), _distance(type_p, pair[0])

    by_p, by_q = min(pairs, key=p_first), min(pairs, key=q_first)
    if _REGISTRY[by_p] is not _REGISTRY[by_q]:
        warnings.warn(f"Ambiguous kl_divergence({type_p.__name__}, {type_q.__name__}). "
                      f"Please register_kl({by_p[0].__name__}, {by_q[1].__name__})",
                      RuntimeWarning, stacklevel=3)
    return _REGISTRY[by_p]


def kl_divergence(p, q):
    """KL(p || q), one value per batch entry."""
    key = (type(p), type(q))
    if key not in _CACHE:
        _CACHE[key] = _lookup(*key)
    fn = _CACHE[key]
    if fn is NotImplemented:
        raise NotImplementedError(f"No KL(p || q) is implemented for p type "
                                  f"{p.__class__.__name__} and q type {q.__class__.__name__}")
    return fn(p, q)


def _infinite_where(mask, values):
    return cagrad.where(mask, math.inf, values)


@register_kl(Normal, Normal)
def _kl_normal_normal(p, q):
    ratio = (p.scale / q.scale).pow(2)
    shift = ((p.loc - q.loc) / q.scale).pow(2)
    return 0.5 * (ratio + shift - 1 - ratio.log())


@register_kl(Bernoulli, Bernoulli)
def _kl_bernoulli_bernoulli(p, q):
    softplus = cagrad.nn.functional.softplus
    # the two outcomes' terms; where p gives an outcome no mass, its term is 0, and where
    # q gives it none (but p does), infinite (torch's masked assignments, as where)
    ones = p.probs * (softplus(-q.logits) - softplus(-p.logits))
    ones = cagrad.where(p.probs == 0, 0.0, _infinite_where(q.probs == 0, ones))
    zeros = (1 - p.probs) * (softplus(q.logits) - softplus(p.logits))
    zeros = cagrad.where(p.probs == 1, 0.0, _infinite_where(q.probs == 1, zeros))
    return ones + zeros


@register_kl(Categorical, Categorical)
def _kl_categorical_categorical(p, q):
    terms = p.probs * (p.logits - q.logits)
    shape = tuple(terms.shape)
    terms = _infinite_where((q.probs == 0).expand(shape), terms)
    terms = cagrad.where((p.probs == 0).expand(shape), 0.0, terms)
    return terms.sum(-1)


@register_kl(OneHotCategorical, OneHotCategorical)
def _kl_onehotcategorical_onehotcategorical(p, q):
    return _kl_categorical_categorical(p._categorical, q._categorical)


@register_kl(Uniform, Uniform)
def _kl_uniform_uniform(p, q):
    result = ((q.high - q.low) / (p.high - p.low)).log()
    return _infinite_where((q.low > p.low) | (q.high < p.high), result)


@register_kl(ExponentialFamily, ExponentialFamily)
def _kl_expfamily_expfamily(p, q):
    # torch's message, with the run of spaces its line continuation leaves in it
    if type(p) is not type(q):
        raise NotImplementedError("The cross KL-divergence between different exponential "
                                  "families cannot" + " " * 29 + "be computed using Bregman "
                                  "divergences")
    raise NotImplementedError(f"KL({type(p).__name__} || {type(q).__name__}) by Bregman "
                              f"divergence is not supported by cagrad: see {_DOCS}")


@register_kl(Uniform, Normal)
def _kl_uniform_normal(p, q):
    width = p.high - p.low
    log_ratio = (math.sqrt(2 * math.pi) * q.scale / width).log()
    centre = ((p.high + p.low - 2 * q.loc) / 2).pow(2)
    return log_ratio + 0.5 * (width.pow(2) / 12 + centre) / q.scale.pow(2)


@register_kl(Independent, Independent)
def _kl_independent_independent(p, q):
    if p.reinterpreted_batch_ndims != q.reinterpreted_batch_ndims:
        raise NotImplementedError
    inner = kl_divergence(p.base_dist, q.base_dist)
    return _sum_rightmost(inner, p.reinterpreted_batch_ndims)


register_kl(MultivariateNormal, MultivariateNormal)(_kl_mvn_mvn)
