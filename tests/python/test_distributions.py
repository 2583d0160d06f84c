"""cagrad.distributions (torch.distributions): Normal, Uniform, Bernoulli, Categorical,
OneHotCategorical, Independent, MultivariateNormal and kl_divergence, against torch 2.13.

log_prob / entropy / cdf / icdf / kl values and gradients are compared with torch on the
same parameters and values, in float32 and float64, eagerly and under compiled autograd
(no eager fallback), and in float64 against finite differences. Draws come from cagrad's
generator, so samples are checked by shape, dtype, reproducibility under manual_seed and
their statistics. Validation errors are compared by type and message. The last tests run
a REINFORCE program in the style of pytorch/examples' reinforcement_learning.
"""

import math
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import (assert_close, backward_checked, ca, compiled_ctx, needs_cagrad,
                     outcome, this_python_env, to_np)


@pytest.fixture(autouse=True)
def _validation_on():
    """torch.compile (test_cpu_names.py calls it) turns torch's argument validation off for
    the rest of the process; these tests compare with validation on, as by default."""
    saved = (torch.distributions.Distribution._validate_args,
             ca.distributions.Distribution._validate_args)
    torch.distributions.Distribution.set_default_validate_args(True)
    ca.distributions.Distribution.set_default_validate_args(True)
    yield
    torch.distributions.Distribution.set_default_validate_args(saved[0])
    ca.distributions.Distribution.set_default_validate_args(saved[1])


pytestmark = needs_cagrad

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def _D(L):
    return L.distributions


# ------------------------------------------------------------------------ parity cases
def _normal_cases(rng):
    loc, scale = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    loc2, scale2 = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    v = rng.standard_normal((2, 3, 4))
    p = rng.uniform(0.05, 0.95, (3, 4))
    return {
        "normal_log_prob": (lambda L, a, b, x: _D(L).Normal(a, b).log_prob(x),
                            [loc, scale, v], [0, 1, 2]),
        "normal_log_prob_number_scale": (lambda L, a, x: _D(L).Normal(a, 0.7).log_prob(x),
                                         [loc, v], [0, 1]),
        "normal_entropy": (lambda L, a, b: _D(L).Normal(a, b).entropy(), [loc, scale], [1]),
        "normal_cdf": (lambda L, a, b, x: _D(L).Normal(a, b).cdf(x), [loc, scale, v],
                       [0, 1, 2]),
        "normal_icdf": (lambda L, a, b, q: _D(L).Normal(a, b).icdf(q), [loc, scale, p],
                        [0, 1, 2]),
        "normal_moments": (lambda L, a, b: (_D(L).Normal(a, b).variance
                                            + _D(L).Normal(a, b).stddev * _D(L).Normal(a, b).mean),
                           [loc, scale], [0, 1]),
        "normal_kl": (lambda L, a, b, c, d: _D(L).kl_divergence(_D(L).Normal(a, b),
                                                               _D(L).Normal(c, d)),
                      [loc, scale, loc2, scale2], [0, 1, 2, 3]),
        "normal_perplexity": (lambda L, a, b: _D(L).Normal(a, b).perplexity(), [loc, scale],
                              [1]),
    }


def _bernoulli_cases(rng):
    p, q = rng.uniform(0.1, 0.9, (3, 4)), rng.uniform(0.1, 0.9, (3, 4))
    x, z = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    y = (rng.uniform(0, 1, (2, 3, 4)) > 0.5).astype(np.float64)
    B = lambda L, **kw: _D(L).Bernoulli(**kw)  # noqa: E731
    return {
        "bernoulli_probs_log_prob": (lambda L, a, v: B(L, probs=a).log_prob(v), [p, y], [0]),
        "bernoulli_logits_log_prob": (lambda L, a, v: B(L, logits=a).log_prob(v), [x, y],
                                      [0]),
        # torch differentiates the value too (a relaxed 0..1 target, unvalidated)
        "bernoulli_value_gradient": (lambda L, a, v: B(L, logits=a, validate_args=False)
                                     .log_prob(v), [x, p], [0, 1]),
        "bernoulli_probs_entropy": (lambda L, a: B(L, probs=a).entropy(), [p], [0]),
        "bernoulli_logits_entropy": (lambda L, a: B(L, logits=a).entropy(), [x], [0]),
        "bernoulli_logits_moments": (lambda L, a: B(L, logits=a).variance
                                     + B(L, logits=a).mean, [x], [0]),
        "bernoulli_probs_to_logits": (lambda L, a: B(L, probs=a).logits, [p], [0]),
        "bernoulli_kl_probs": (lambda L, a, b: _D(L).kl_divergence(B(L, probs=a),
                                                                   B(L, probs=b)), [p, q], [0, 1]),
        "bernoulli_kl_logits": (lambda L, a, b: _D(L).kl_divergence(B(L, logits=a),
                                                                    B(L, logits=b)),
                                [x, z], [0, 1]),
    }


def _categorical_cases(rng):
    probs, probs2 = rng.uniform(0.1, 1.0, (3, 5)), rng.uniform(0.1, 1.0, (3, 5))
    logits, logits2 = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    idx = rng.integers(0, 5, (2, 3))
    col = rng.integers(0, 5, (4, 1))  # broadcasts against the batch of 3
    onehot = np.eye(5)[rng.integers(0, 5, (2, 3))]
    C = lambda L, **kw: _D(L).Categorical(**kw)  # noqa: E731
    H = lambda L, **kw: _D(L).OneHotCategorical(**kw)  # noqa: E731
    kl = lambda L, p, q: _D(L).kl_divergence(p, q)  # noqa: E731
    return {
        "categorical_probs_log_prob": (lambda L, a, v: C(L, probs=a).log_prob(v),
                                       [probs, idx], [0]),
        "categorical_logits_log_prob": (lambda L, a, v: C(L, logits=a).log_prob(v),
                                        [logits, idx], [0]),
        "categorical_log_prob_broadcast": (lambda L, a, v: C(L, logits=a).log_prob(v),
                                           [logits, col], [0]),
        "categorical_1d_log_prob": (lambda L, a, v: C(L, logits=a).log_prob(v),
                                    [logits[0], idx], [0]),
        "categorical_probs_entropy": (lambda L, a: C(L, probs=a).entropy(), [probs], [0]),
        "categorical_logits_entropy": (lambda L, a: C(L, logits=a).entropy(), [logits], [0]),
        "categorical_normalised_probs": (lambda L, a: C(L, logits=a).probs, [logits], [0]),
        "categorical_normalised_logits": (lambda L, a: C(L, probs=a).logits, [probs], [0]),
        "categorical_kl": (lambda L, a, b: kl(L, C(L, logits=a), C(L, probs=b)),
                           [logits, probs2], [0, 1]),
        "categorical_kl_logits": (lambda L, a, b: kl(L, C(L, logits=a), C(L, logits=b)),
                                  [logits, logits2], [0, 1]),
        "onehot_log_prob": (lambda L, a, v: H(L, logits=a).log_prob(v), [logits, onehot],
                            [0]),
        "onehot_entropy": (lambda L, a: H(L, probs=a).entropy(), [probs], [0]),
        "onehot_moments": (lambda L, a: H(L, probs=a).variance + H(L, probs=a).mean,
                           [probs], [0]),
        "onehot_kl": (lambda L, a, b: kl(L, H(L, probs=a), H(L, logits=b)), [probs, logits],
                      [0, 1]),
    }


def _uniform_independent_cases(rng):
    low = rng.standard_normal(4)
    high = low + rng.uniform(0.5, 2.0, 4)
    inside = low + (high - low) * rng.uniform(0.1, 0.9, (3, 4))
    wide_low, wide_high = low - 1.0, high + 1.5
    loc, scale = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    loc2, scale2 = rng.standard_normal((3, 4)), rng.uniform(0.5, 2.0, (3, 4))
    v = rng.standard_normal((2, 3, 4))
    U = lambda L, a, b: _D(L).Uniform(a, b)  # noqa: E731
    ind = lambda L, a, b: _D(L).Independent(_D(L).Normal(a, b), 2)  # noqa: E731
    return {
        "uniform_log_prob": (lambda L, a, b, x: U(L, a, b).log_prob(x), [low, high, inside],
                             [0, 1]),
        "uniform_entropy": (lambda L, a, b: U(L, a, b).entropy(), [low, high], [0, 1]),
        "uniform_cdf": (lambda L, a, b, x: U(L, a, b).cdf(x), [low, high, inside], [0, 1, 2]),
        "uniform_icdf": (lambda L, a, b, q: U(L, a, b).icdf(q),
                         [low, high, rng.uniform(0, 1, (3, 4))], [0, 1, 2]),
        "uniform_moments": (lambda L, a, b: U(L, a, b).mean + U(L, a, b).stddev
                            + U(L, a, b).variance, [low, high], [0, 1]),
        "uniform_kl_uniform": (lambda L, a, b, c, d: _D(L).kl_divergence(U(L, a, b), U(L, c, d)),
                               [low, high, wide_low, wide_high], [0, 1, 2, 3]),
        "uniform_kl_normal": (lambda L, a, b, c, d: _D(L).kl_divergence(
            U(L, a, b), _D(L).Normal(c, d)), [low, high, loc[0], scale[0]], [0, 1, 2, 3]),
        "independent_log_prob": (lambda L, a, b, x: ind(L, a, b).log_prob(x),
                                 [loc, scale, v], [0, 1, 2]),
        "independent_entropy": (lambda L, a, b: ind(L, a, b).entropy(), [loc, scale], [1]),
        "independent_kl": (lambda L, a, b, c, d: _D(L).kl_divergence(ind(L, a, b),
                                                                    ind(L, c, d)),
                           [loc, scale, loc2, scale2], [0, 1, 2, 3]),
    }


def _spd(rng, shape, n):
    a = rng.standard_normal(shape + (n, n))
    return a @ np.swapaxes(a, -1, -2) + n * np.eye(n)


def _mvn_cases(rng):
    n = 3
    loc, loc2 = rng.standard_normal((2, n)), rng.standard_normal((2, n))
    cov, cov2 = _spd(rng, (2,), n), _spd(rng, (2,), n)
    tril = np.linalg.cholesky(cov)
    raw = rng.standard_normal((2, n, n))
    v = rng.standard_normal((4, 2, n))
    M = lambda L, a, **kw: _D(L).MultivariateNormal(a, validate_args=False, **kw)  # noqa: E731

    def from_raw(L, a):  # a covariance differentiable in every entry of `a`
        return a @ a.transpose(-2, -1) + n * L.eye(n, dtype=a.dtype)

    return {
        "mvn_scale_tril_log_prob": (lambda L, a, s, x: M(L, a, scale_tril=s).log_prob(x),
                                    [loc, tril, v], [0, 1, 2]),
        "mvn_cov_log_prob": (lambda L, a, c, x: M(L, a, covariance_matrix=c).log_prob(x),
                             [loc, cov, v], [0, 1, 2]),
        "mvn_precision_log_prob": (lambda L, a, c, x: M(L, a, precision_matrix=c).log_prob(x),
                                   [loc, cov, v], [0, 1, 2]),
        "mvn_raw_cov_log_prob": (lambda L, a, r, x: M(L, a, covariance_matrix=from_raw(L, r))
                                 .log_prob(x), [loc, raw, v], [0, 1, 2]),
        "mvn_raw_precision_log_prob": (lambda L, a, r, x: M(
            L, a, precision_matrix=from_raw(L, r)).log_prob(x), [loc, raw, v], [0, 1, 2]),
        "mvn_broadcast_loc": (lambda L, a, s, x: M(L, a, scale_tril=s).log_prob(x),
                              [loc[0], tril, v], [0, 1, 2]),
        "mvn_entropy": (lambda L, a, r: M(L, a, covariance_matrix=from_raw(L, r)).entropy(),
                        [loc, raw], [1]),
        "mvn_covariance_from_tril": (lambda L, a, s: M(L, a, scale_tril=s).covariance_matrix,
                                     [loc, tril], [1]),
        "mvn_precision_from_raw": (lambda L, a, r: M(L, a, covariance_matrix=from_raw(L, r))
                                   .precision_matrix, [loc, raw], [1]),
        "mvn_tril_from_raw_precision": (lambda L, a, r: M(
            L, a, precision_matrix=from_raw(L, r)).scale_tril, [loc, raw], [1]),
        "mvn_variance": (lambda L, a, r: M(L, a, covariance_matrix=from_raw(L, r)).variance,
                         [loc, raw], [1]),
        "mvn_kl": (lambda L, a, r, b, c: _D(L).kl_divergence(
            M(L, a, covariance_matrix=from_raw(L, r)), M(L, b, covariance_matrix=c)),
            [loc, raw, loc2, cov2], [0, 1, 2, 3]),
    }


def cases(rng):
    return {**_normal_cases(rng), **_bernoulli_cases(rng), **_categorical_cases(rng),
            **_uniform_independent_cases(rng), **_mvn_cases(rng)}


NAMES = sorted(cases(np.random.default_rng(0)))
# a symmetric matrix input: torch's cholesky gradient is the symmetric one, which finite
# differences of single entries do not give (each moves one triangle only)
NOT_NUMERIC = {"mvn_cov_log_prob", "mvn_precision_log_prob", "mvn_kl"}


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", NAMES)
def test_values_and_gradients_match_torch(name, dtype, compiled, rng):
    fn, arrays, needs_grad = cases(rng)[name]
    check_against_torch(fn, arrays, dtype, compiled, needs_grad, msg=name)


@COMPILED
@pytest.mark.parametrize("name", [n for n in NAMES if n not in NOT_NUMERIC])
def test_gradients_match_finite_differences(name, compiled, rng):
    fn, arrays, needs_grad = cases(rng)[name]
    check_numeric_gradient(fn, arrays, compiled, needs_grad)


# ------------------------------------------------------------------------ sampling
def _samplers(L, dtype="float32"):
    """Distributions of every family, in dtype, with batch shape (2, 3) where batched."""
    D, dt = _D(L), getattr(L, dtype)
    probs = L.tensor([[0.2, 0.3, 0.5], [0.6, 0.3, 0.1]], dtype=dt)
    tril = L.tensor([[1.0, 0.0], [0.5, 2.0]], dtype=dt)
    return {
        "normal": D.Normal(L.zeros(2, 3, dtype=dt), L.ones(2, 3, dtype=dt)),
        "normal_numbers": D.Normal(0.0, 1.0),
        "uniform": D.Uniform(L.zeros(2, 3, dtype=dt), L.full((2, 3), 2.0, dtype=dt)),
        "bernoulli": D.Bernoulli(probs=L.full((2, 3), 0.3, dtype=dt)),
        "bernoulli_number": D.Bernoulli(logits=0.5),
        "categorical": D.Categorical(probs=probs),
        "categorical_1d": D.Categorical(logits=L.zeros(4, dtype=dt)),
        "onehot": D.OneHotCategorical(probs=probs),
        "independent": D.Independent(D.Normal(L.zeros(2, 3, dtype=dt), L.ones(2, 3, dtype=dt)), 1),
        "mvn": D.MultivariateNormal(L.zeros(3, 2, dtype=dt), scale_tril=tril),
    }


def _shape(t):
    return tuple(t.shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("sample_shape", [(), (5,), (4, 1)])
def test_sample_shapes_dtypes_and_batch_event_shapes_match_torch(dtype, sample_shape):
    mine, theirs = _samplers(ca, dtype), _samplers(torch, dtype)
    for name, t in theirs.items():
        c = mine[name]
        assert tuple(c.batch_shape) == tuple(t.batch_shape), name
        assert tuple(c.event_shape) == tuple(t.event_shape), name
        assert c.has_rsample == t.has_rsample, name
        for method in ("sample", "rsample") if t.has_rsample else ("sample",):
            a, b = getattr(c, method)(sample_shape), getattr(t, method)(sample_shape)
            assert _shape(a) == _shape(b), (name, method)
            assert str(a.dtype).split(".")[1] == str(b.dtype).split(".")[1], (name, method)
            assert not a.requires_grad


def test_samples_are_reproducible_under_manual_seed():
    def draw():
        ca.manual_seed(7)
        return [to_np(d.sample((3,))) for d in _samplers(ca).values()]
    first, second = draw(), draw()
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
    ca.manual_seed(8)
    assert not np.array_equal(to_np(_samplers(ca)["normal"].sample((3,))), first[0])


N = 40_000


def _within(values, mean, std, sigmas=5):
    """The sample mean is within `sigmas` standard errors of mean."""
    values = np.asarray(values, dtype=np.float64)
    assert abs(values.mean() - mean) < sigmas * std / math.sqrt(values.size)


def test_normal_and_uniform_draws_have_their_moments():
    D = ca.distributions
    for method in ("sample", "rsample"):
        x = to_np(getattr(D.Normal(ca.tensor([1.5]), ca.tensor([0.5])), method)((N,)))
        _within(x, 1.5, 0.5)
        assert x.std() == pytest.approx(0.5, rel=0.03)
        u = to_np(getattr(D.Uniform(ca.tensor([-1.0]), ca.tensor([3.0])), method)((N,)))
        assert u.min() >= -1.0 and u.max() < 3.0
        _within(u, 1.0, 4 / math.sqrt(12))


def test_discrete_draws_have_their_frequencies():
    D = ca.distributions
    b = to_np(D.Bernoulli(probs=ca.tensor([0.2, 0.7])).sample((N,)))
    assert set(np.unique(b)) <= {0.0, 1.0}
    for j, p in enumerate((0.2, 0.7)):
        _within(b[:, j], p, math.sqrt(p * (1 - p)))
    probs = np.array([[0.1, 0.2, 0.7], [0.5, 0.5, 0.0]])
    c = to_np(D.Categorical(probs=ca.tensor(probs * 3)).sample((N,)))  # unnormalised
    for row in range(2):
        counts = np.bincount(c[:, row], minlength=3) / N
        np.testing.assert_allclose(counts, probs[row], atol=5 * 0.5 / math.sqrt(N))
    h = to_np(D.OneHotCategorical(logits=ca.log(ca.tensor(probs[0]))).sample((N,)))
    assert np.all(h.sum(-1) == 1)
    np.testing.assert_allclose(h.mean(0), probs[0], atol=5 * 0.5 / math.sqrt(N))


def test_multivariate_normal_draws_have_its_covariance():
    cov = np.array([[2.0, 0.6, 0.0], [0.6, 1.0, -0.3], [0.0, -0.3, 0.5]])
    loc = np.array([1.0, -1.0, 0.5])
    m = ca.distributions.MultivariateNormal(ca.tensor(loc), covariance_matrix=ca.tensor(cov))
    x = to_np(m.rsample((N,))).astype(np.float64)
    np.testing.assert_allclose(x.mean(0), loc, atol=5 * math.sqrt(2.0 / N))
    np.testing.assert_allclose(np.cov(x.T), cov, atol=0.06)


# ------------------------------------------------------------------------ rsample gradients
def _reparameterised(L, dtype):
    """(parameters, distribution made from them, eps of a draw from value) per family."""
    dt = getattr(L, dtype)
    loc = L.tensor([[0.5, -1.0], [2.0, 0.0]], dtype=dt, requires_grad=True)
    scale = L.tensor([[1.0, 0.5], [2.0, 1.5]], dtype=dt, requires_grad=True)
    tril = L.tensor([[1.0, 0.0], [0.3, 0.8]], dtype=dt, requires_grad=True)
    return {
        "normal": ((loc, scale), _D(L).Normal(loc, scale)),
        "uniform": ((loc, scale), _D(L).Uniform(loc, loc + scale)),
        "independent": ((loc, scale), _D(L).Independent(_D(L).Normal(loc, scale), 2)),
        "mvn": ((loc, tril), _D(L).MultivariateNormal(loc, scale_tril=tril)),
    }


def _standardised(name, value, params):
    """The noise a draw was made from, recovered from the draw (numpy, float64)."""
    a, b = (to_np(p).astype(np.float64) for p in params)
    x = to_np(value).astype(np.float64)
    if name == "mvn":
        return np.linalg.solve(b, (x - a)[..., None])[..., 0]
    return (x - a) / b


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", ["normal", "uniform", "independent", "mvn"])
def test_rsample_gradients_match_torch_on_the_same_noise(name, dtype, compiled):
    """rsample differentiates through loc + eps * scale: torch, given cagrad's draw, gives
    the same gradients (its draw is redone from cagrad's noise)."""
    params, dist = _reparameterised(ca, dtype)[name]
    draw = dist.rsample((3,))
    eps = _standardised(name, draw, params)
    g = np.random.default_rng(5).standard_normal(_shape(draw)).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((draw * ca.tensor(g)).sum(), compiled)
    t_params, _ = _reparameterised(torch, dtype)[name]
    a, b = t_params
    noise = torch.tensor(eps.astype(dtype))
    if name == "mvn":
        t_draw = a + (b @ noise.unsqueeze(-1)).squeeze(-1)
    else:
        t_draw = a + noise * b
    assert_close(draw, t_draw, rtol=1e-4, atol=1e-5)
    (t_draw * torch.tensor(g)).sum().backward()
    for mine, theirs in zip(params, t_params):
        tol = dict(rtol=1e-4, atol=1e-4) if dtype == "float32" else dict(rtol=1e-9, atol=1e-9)
        assert_close(mine.grad, theirs.grad, **tol)


def test_sample_records_no_graph_and_rsample_does():
    loc = ca.zeros(3, requires_grad=True)
    d = ca.distributions.Normal(loc, 1.0)
    assert not d.sample().requires_grad and d.rsample().requires_grad
    u = ca.distributions.Uniform(loc, loc + 1)
    assert not u.sample().requires_grad and u.rsample().requires_grad
    with pytest.raises(NotImplementedError):
        ca.distributions.Categorical(logits=loc).rsample()


# ------------------------------------------------------------------------ validation errors
def _error_makers():
    return {
        "uniform_low_ge_high": lambda L, D: D.Uniform(1.0, 0.0),
        "uniform_tensor_bounds": lambda L, D: D.Uniform(L.zeros(2), L.tensor([1.0, -1.0])),
        "uniform_nan": lambda L, D: D.Uniform(0.0, float("nan")),
        "normal_scale_number": lambda L, D: D.Normal(0.0, -1.0),
        "normal_scale_tensor": lambda L, D: D.Normal(L.tensor([0.0, 1.0]), L.tensor([1.0, 0.0])),
        "normal_loc_nan": lambda L, D: D.Normal(L.tensor([float("nan")]), 1.0),
        "normal_value_not_tensor": lambda L, D: D.Normal(0.0, 1.0).log_prob(1.0),
        "normal_value_shape": lambda L, D: D.Normal(L.zeros(2), 1.0).log_prob(L.zeros(3)),
        "normal_value_nan": lambda L, D: D.Normal(L.zeros(2), 1.0).log_prob(
            L.tensor([0.0, float("nan")])),
        "normal_cdf_shape": lambda L, D: D.Normal(L.zeros(2), 1.0).cdf(L.zeros(3)),
        "categorical_out_of_range": lambda L, D: D.Categorical(L.tensor([0.5, 0.5])).log_prob(
            L.tensor([2])),
        "categorical_fraction": lambda L, D: D.Categorical(L.tensor([0.5, 0.5])).log_prob(
            L.tensor([0.5])),
        "categorical_0d_probs": lambda L, D: D.Categorical(L.tensor(0.5)),
        "categorical_0d_logits": lambda L, D: D.Categorical(logits=L.tensor(0.5)),
        "categorical_both": lambda L, D: D.Categorical(probs=L.tensor([0.5]),
                                                       logits=L.tensor([0.5])),
        "categorical_neither": lambda L, D: D.Categorical(),
        "categorical_negative": lambda L, D: D.Categorical(probs=L.tensor([-0.5, 1.5])),
        "bernoulli_probs": lambda L, D: D.Bernoulli(probs=L.tensor([1.5])),
        "bernoulli_value": lambda L, D: D.Bernoulli(0.3).log_prob(L.tensor(0.5)),
        "bernoulli_both": lambda L, D: D.Bernoulli(0.3, 0.2),
        "bernoulli_not_number": lambda L, D: D.Bernoulli("0.3"),
        "onehot_value": lambda L, D: D.OneHotCategorical(L.tensor([0.5, 0.5])).log_prob(
            L.tensor([1.0, 1.0])),
        "onehot_event_shape": lambda L, D: D.OneHotCategorical(L.ones(2, 3)).log_prob(
            L.tensor([1.0, 0.0])),
        "independent_too_many": lambda L, D: D.Independent(D.Normal(L.zeros(3), 1.0), 2),
        "independent_value": lambda L, D: D.Independent(D.Normal(L.zeros(3), 1.0),
                                                        1).log_prob(L.zeros(2)),
        "independent_enumerate": lambda L, D: D.Independent(D.Bernoulli(L.ones(2) / 2),
                                                            1).enumerate_support(),
        "kl_unregistered": lambda L, D: D.kl_divergence(D.Normal(0.0, 1.0),
                                                        D.Categorical(L.ones(2))),
        "kl_other_family": lambda L, D: D.kl_divergence(D.Normal(0.0, 1.0), D.Bernoulli(0.3)),
        "kl_independent_ndims": lambda L, D: D.kl_divergence(
            D.Independent(D.Normal(L.zeros(2, 2), 1.0), 1),
            D.Independent(D.Normal(L.zeros(2, 2), 1.0), 2)),
        "mvn_not_positive_definite": lambda L, D: D.MultivariateNormal(
            L.zeros(2), covariance_matrix=L.tensor([[1.0, 2.0], [2.0, 1.0]])),
        "mvn_cholesky_fails": lambda L, D: D.MultivariateNormal(
            L.zeros(2), covariance_matrix=L.tensor([[1.0, 2.0], [2.0, 1.0]]),
            validate_args=False),
        "mvn_not_symmetric": lambda L, D: D.MultivariateNormal(
            L.zeros(2), covariance_matrix=L.tensor([[1.0, 0.5], [0.0, 1.0]])),
        "mvn_precision": lambda L, D: D.MultivariateNormal(
            L.zeros(2), precision_matrix=L.tensor([[-1.0, 0.0], [0.0, 1.0]])),
        "mvn_not_lower": lambda L, D: D.MultivariateNormal(
            L.zeros(2), scale_tril=L.tensor([[1.0, 2.0], [0.0, 1.0]])),
        "mvn_negative_diagonal": lambda L, D: D.MultivariateNormal(
            L.zeros(2), scale_tril=L.tensor([[-1.0, 0.0], [0.0, 1.0]])),
        "mvn_no_matrix": lambda L, D: D.MultivariateNormal(L.zeros(2)),
        "mvn_two_matrices": lambda L, D: D.MultivariateNormal(L.zeros(2), L.eye(2),
                                                              scale_tril=L.eye(2)),
        "mvn_0d_loc": lambda L, D: D.MultivariateNormal(L.tensor(0.0), L.eye(2)),
        "mvn_1d_cov": lambda L, D: D.MultivariateNormal(L.zeros(2), L.ones(2)),
        "mvn_1d_tril": lambda L, D: D.MultivariateNormal(L.zeros(2), scale_tril=L.ones(2)),
        "mvn_1d_precision": lambda L, D: D.MultivariateNormal(L.zeros(2),
                                                              precision_matrix=L.ones(2)),
        "mvn_value_shape": lambda L, D: D.MultivariateNormal(L.zeros(2), L.eye(2)).log_prob(
            L.zeros(3)),
        "mvn_value_batch": lambda L, D: D.MultivariateNormal(L.zeros(3, 2), L.eye(2)).log_prob(
            L.zeros(4, 2)),
        "mvn_kl_event_sizes": lambda L, D: D.kl_divergence(
            D.MultivariateNormal(L.zeros(2), L.eye(2)),
            D.MultivariateNormal(L.zeros(3), L.eye(3))),
        "base_mode": lambda L, D: D.Distribution(validate_args=False).mode,
        "base_mean": lambda L, D: D.Distribution(validate_args=False).mean,
        "base_expand": lambda L, D: D.Distribution(validate_args=False).expand((2,)),
        "default_validate_not_bool": lambda L, D: D.Distribution.set_default_validate_args(3),
    }


@pytest.mark.parametrize("name", sorted(_error_makers()))
def test_errors_have_torchs_type_and_message(name):
    make = _error_makers()[name]
    mine = outcome(lambda: make(ca, ca.distributions))
    theirs = outcome(lambda: make(torch, torch.distributions))
    assert theirs[0] != "ok"
    if name == "mvn_cholesky_fails":
        # torch raises torch.linalg.LinAlgError (a RuntimeError); cagrad a RuntimeError
        assert mine == ("RuntimeError", theirs[1])
        return
    assert (mine[0], mine[1].replace("cagrad.", "torch.")) == theirs


def test_reprs_and_supports_match_torch():
    def shown(L):
        D = L.distributions
        return [repr(x) for x in (
            D.Normal(0.0, 1.0), D.Normal(L.zeros(2), 1.0), D.Bernoulli(0.3),
            D.Categorical(L.ones(2, 3)), D.Independent(D.Normal(L.zeros(3), 1.0), 1),
            D.Uniform(0.0, 2.0).support, D.Uniform(L.zeros(2), L.ones(2)).support,
            D.Categorical(L.ones(4)).support, D.Independent(D.Normal(L.zeros(3), 1.0), 1).support,
            D.MultivariateNormal(L.zeros(2), L.eye(2)), D.OneHotCategorical(L.ones(3)).support,
            D.constraints.positive, D.constraints.simplex, D.constraints.real_vector,
            D.constraints.unit_interval, D.constraints.lower_cholesky)]
    assert shown(ca) == shown(torch)


def test_validation_can_be_turned_off_per_instance_and_by_default():
    D = ca.distributions
    d = D.Normal(0.0, -1.0, validate_args=False)
    assert math.isnan(float(d.log_prob(ca.tensor(0.0))))
    try:
        D.Distribution.set_default_validate_args(False)
        assert math.isnan(float(D.Normal(0.0, -1.0).entropy()))
        assert float(D.Bernoulli(probs=ca.tensor(1.5)).log_prob(ca.tensor(0.5))) < 0
        with pytest.raises(ValueError):
            D.Normal(0.0, -1.0, validate_args=True)
    finally:
        D.Distribution.set_default_validate_args(True)
    with pytest.raises(ValueError):
        D.Normal(0.0, -1.0)


def test_deterministic_attributes_match_torch():
    def attrs(L):
        D = L.distributions
        b = D.Bernoulli(L.tensor([0.2, 0.5, 0.7]))
        c = D.Categorical(L.tensor([[1.0, 3.0, 2.0], [0.2, 0.1, 0.7]]))
        return [b.mode, b.enumerate_support(), b.enumerate_support(expand=False),
                D.Uniform(0.0, 1.0).mode, c.mode, c.mean, c.variance, c.enumerate_support(),
                c.enumerate_support(expand=False), c.param_shape,
                D.OneHotCategorical(L.ones(2, 3)).mode,
                D.OneHotCategorical(L.ones(2, 3)).enumerate_support(),
                D.Independent(D.Categorical(L.ones(2, 3)), 0).enumerate_support(),
                D.MultivariateNormal(L.zeros(2), L.eye(2)).mode, D.Normal(1.0, 2.0).mode]
    for mine, theirs in zip(attrs(ca), attrs(torch)):
        if isinstance(theirs, torch.Size):
            assert tuple(mine) == tuple(theirs)
            continue
        assert_close(mine, theirs, check_dtype=True, atol=0, rtol=0, msg=repr(theirs))


# ------------------------------------------------------------------------ expand
def _expanded(L):
    D = L.distributions
    return {
        "normal": D.Normal(L.tensor([0.0, 1.0]), L.tensor([1.0, 2.0])).expand((3, 2)),
        "uniform": D.Uniform(L.tensor([0.0]), L.tensor([2.0])).expand(L.Size([4, 2])),
        "bernoulli": D.Bernoulli(logits=L.tensor([0.3, -0.2])).expand((3, 2)),
        "categorical": D.Categorical(logits=L.tensor([[0.1, 0.5, -1.0]])).expand((4,)),
        "onehot": D.OneHotCategorical(probs=L.tensor([0.2, 0.8])).expand((3,)),
        "independent": D.Independent(D.Normal(L.zeros(2), 1.0), 1).expand((3,)),
        "mvn": D.MultivariateNormal(L.zeros(2), scale_tril=L.tensor([[1.0, 0.0],
                                                                     [0.5, 2.0]])).expand((3,)),
    }


def test_expand_gives_torchs_shapes_and_values():
    mine, theirs = _expanded(ca), _expanded(torch)
    for name, t in theirs.items():
        c = mine[name]
        assert tuple(c.batch_shape) == tuple(t.batch_shape), name
        assert tuple(c.event_shape) == tuple(t.event_shape), name
        assert _shape(c.sample((2,))) == _shape(t.sample((2,))), name
        value = t.sample((2,))
        assert_close(c.log_prob(ca.tensor(value.numpy())), t.log_prob(value), msg=name)
        assert_close(c.entropy(), t.entropy(), msg=name)
        assert c._validate_args == t._validate_args


def test_a_subclass_with_its_own_init_must_define_expand():
    for L in (ca, torch):
        class Shifted(L.distributions.Normal):
            def __init__(self, loc):
                super().__init__(loc, 1.0)
        with pytest.raises(NotImplementedError, match="must also define a custom .expand"):
            Shifted(L.zeros(2)).expand((3, 2))


# ------------------------------------------------------------------------ register_kl
def test_register_kl_dispatches_to_the_most_specific_pair():
    D = ca.distributions

    class Wide(D.Normal):
        pass

    class Wider(Wide):
        pass

    @D.register_kl(Wide, D.Normal)
    def _wide_normal(p, q):
        return ca.tensor(1.0)

    @D.register_kl(Wider, D.Normal)
    def _wider_normal(p, q):
        return ca.tensor(2.0)

    p, q = Wider(0.0, 1.0), D.Normal(1.0, 2.0)
    assert float(D.kl_divergence(p, q)) == 2.0
    assert float(D.kl_divergence(Wide(0.0, 1.0), q)) == 1.0
    # Normal/Normal still applies between plain Normals
    assert_close(D.kl_divergence(q, D.Normal(0.0, 1.0)),
                 torch.distributions.kl_divergence(torch.distributions.Normal(1.0, 2.0),
                                                   torch.distributions.Normal(0.0, 1.0)))


def test_register_kl_warns_on_an_ambiguous_pair_as_torch():
    for L in (ca, torch):
        D = L.distributions

        class P(D.Normal):
            pass

        class Q(D.Normal):
            pass

        D.register_kl(P, D.Normal)(lambda p, q: 1)
        D.register_kl(D.Normal, Q)(lambda p, q: 2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            D.kl_divergence(P(0.0, 1.0), Q(0.0, 1.0))
        messages = [str(w.message) for w in caught if w.category is RuntimeWarning]
        assert messages == ["Ambiguous kl_divergence(P, Q). Please register_kl(P, Q)"], L


def test_register_kl_takes_distribution_types_only():
    with pytest.raises(TypeError, match="Distribution subclass"):
        ca.distributions.register_kl(3, ca.distributions.Normal)


# ------------------------------------------------------------------------ the torch alias
def test_distributions_import_under_the_torch_alias():
    code = textwrap.dedent("""
        import cagrad.as_torch
        cagrad.as_torch.install()
        import torch
        import torch.distributions.normal
        from torch.distributions import Categorical, Normal, kl_divergence
        from torch.distributions.constraints import simplex
        import cagrad
        assert torch.distributions is cagrad.distributions
        assert torch.distributions.normal.Normal is Normal is cagrad.distributions.Normal
        assert isinstance(Normal(0.0, 1.0), torch.distributions.ExponentialFamily)
        c = Categorical(logits=torch.zeros(3))
        print(c.sample((4,)).shape, type(kl_divergence(c, c)).__name__, simplex)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=120, env=this_python_env())
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "cagrad.Size([4]) Tensor Simplex()"


def test_a_missing_family_names_what_there_is_and_the_docs():
    with pytest.raises(AttributeError, match="VonMises.*docs/python-api.md"):
        ca.distributions.VonMises  # noqa: B018


# ------------------------------------------------------------------------ REINFORCE program
# In the style of pytorch/examples' reinforcement_learning/reinforce.py: a policy MLP gives
# action probabilities, Categorical samples the actions, and the loss is the sum of
# -log_prob(action) * standardised return, minimised with Adam. The environment (no gym)
# shows a random cue each step; the action that matches the cue's hidden class earns 1.
N_CUES, N_ACTIONS, STEPS, GAMMA = 6, 3, 10, 0.9


class CueEnv:
    """Each step shows one of N_CUES one-hot cues; cue i pays 1 for action i % N_ACTIONS."""

    def __init__(self, seed):
        self.rng = np.random.default_rng(seed)

    def reset(self):
        self.t = 0
        return self._observe()

    def _observe(self):
        self.cue = int(self.rng.integers(N_CUES))
        return np.eye(N_CUES, dtype=np.float32)[self.cue]

    def step(self, action):
        reward = 1.0 if action == self.cue % N_ACTIONS else 0.0
        self.t += 1
        return self._observe(), reward, self.t == STEPS


def make_policy(L):
    class Policy(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = L.nn.Linear(N_CUES, 16)
            self.affine2 = L.nn.Linear(16, N_ACTIONS)

        def forward(self, x):
            scores = self.affine2(L.nn.functional.relu(self.affine1(x)))
            return L.nn.functional.softmax(scores, dim=1)

    return Policy()


def play_episode(policy, env):
    """(states, actions, rewards, log_probs) of one episode, actions drawn by cagrad."""
    states, actions, rewards, log_probs = [], [], [], []
    state, done = env.reset(), False
    while not done:
        probs = policy(ca.from_numpy(state).unsqueeze(0))
        m = ca.distributions.Categorical(probs)
        action = m.sample()
        log_probs.append(m.log_prob(action))
        states.append(state)
        actions.append(action.item())
        state, reward, done = env.step(action.item())
        rewards.append(reward)
    return states, actions, rewards, log_probs


def standardised_returns(L, rewards):
    returns, running = [], 0.0
    for r in reversed(rewards):
        running = r + GAMMA * running
        returns.insert(0, running)
    returns = L.tensor(returns)
    return (returns - returns.mean()) / (returns.std() + np.finfo(np.float32).eps.item())


def policy_loss(L, log_probs, returns):
    return L.cat([-lp * ret for lp, ret in zip(log_probs, returns)]).sum()


def train(compiled, episodes=200, seed=0):
    ca.manual_seed(seed)
    policy = make_policy(ca)
    optimizer = ca.optim.Adam(policy.parameters(), lr=1e-2)
    env, per_episode = CueEnv(seed), []
    for _ in range(episodes):
        _, _, rewards, log_probs = play_episode(policy, env)
        loss = policy_loss(ca, log_probs, standardised_returns(ca, rewards))
        optimizer.zero_grad()
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
        optimizer.step()
        per_episode.append(sum(rewards))
    return np.array(per_episode)


@COMPILED
def test_reinforce_learns_the_cues(compiled):
    rewards = train(compiled)
    first, last = rewards[:20].mean(), rewards[-20:].mean()
    # chance is STEPS / N_ACTIONS; seeds 0-3 all end above 8.4 of 10
    assert first < 0.5 * STEPS and last > 0.8 * STEPS, (first, last)


@COMPILED
def test_reinforce_first_step_gradients_match_torch(compiled):
    """One episode played by cagrad; torch, given the same weights, states and sampled
    actions, gives the same policy-gradient loss and parameter gradients."""
    ca.manual_seed(3)
    policy = make_policy(ca)
    states, actions, rewards, log_probs = play_episode(policy, CueEnv(3))
    loss = policy_loss(ca, log_probs, standardised_returns(ca, rewards))
    with compiled_ctx(compiled):
        backward_checked(loss, compiled)

    reference = make_policy(torch)
    reference.load_state_dict({k: torch.tensor(to_np(v)) for k, v in
                               policy.state_dict().items()})
    t_log_probs = []
    for state, action in zip(states, actions):
        m = torch.distributions.Categorical(reference(torch.from_numpy(state).unsqueeze(0)))
        t_log_probs.append(m.log_prob(torch.tensor([action])))
    t_loss = policy_loss(torch, t_log_probs, standardised_returns(torch, rewards))
    t_loss.backward()
    assert_close(loss, t_loss, rtol=1e-5, atol=1e-5)
    for (name, p), (_, q) in zip(policy.named_parameters(), reference.named_parameters()):
        assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
