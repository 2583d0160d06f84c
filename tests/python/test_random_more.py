"""Sampling (normal, bernoulli, poisson, Tensor.random_/bernoulli_/exponential_/
geometric_/cauchy_/log_normal_/multinomial), one-argument where, and div's rounding modes.

cagrad draws from numpy's PCG64, not PyTorch's streams, so samples are checked by their
distribution (means and spreads within a few standard errors over 100k draws, fixed seeds),
shapes, dtypes and reproducibility; errors, messages, deterministic values and gradients are
compared with torch 2.13."""

import math
import warnings

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, needs_cagrad, outcome, same_outcome, to_both, to_np

pytestmark = needs_cagrad

N = 100_000
LIBS = (ca, torch)


def same_error_type(make):
    """make(L) raises the same exception type with both (messages list other overloads)."""
    c, t = outcome(lambda: make(ca)), outcome(lambda: make(torch))
    assert c[0] == t[0] != "ok"


def dtype_name(x):
    return str(x.dtype).split(".")[1]


def assert_mean(samples, expected_mean, expected_std):
    """The sample mean is within 5 standard errors of expected_mean."""
    values = np.asarray(samples, dtype=np.float64).ravel()
    bound = 5 * expected_std / math.sqrt(values.size)
    assert abs(values.mean() - expected_mean) < bound


def assert_std(samples, expected_std, rel=0.02):
    values = np.asarray(samples, dtype=np.float64).ravel()
    assert values.std() == pytest.approx(expected_std, rel=rel)


# ------------------------------------------------------------------------------ normal
def normal_forms(L, dtype="float32"):
    dt = getattr(L, dtype)
    return {
        "tensor_tensor": L.normal(L.zeros(2, 1, dtype=dt), L.ones(3, dtype=dt)),
        "tensor_float": L.normal(L.zeros(4, dtype=dt), 2.0),
        "tensor_default_std": L.normal(L.zeros(2, 3, dtype=dt)),
        "float_tensor": L.normal(1.0, L.ones(5, dtype=dt)),
        "float_float": L.normal(0.0, 1.0, (2, 3), dtype=dt),
        "keywords": L.normal(mean=L.zeros(2, dtype=dt), std=2.0),
        "zero_d": L.normal(L.tensor(0.0, dtype=dt), L.tensor(1.0, dtype=dt)),
        "empty": L.normal(L.zeros(0, dtype=dt), 1.0),
    }


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_forms_have_torchs_shapes_and_dtypes(dtype):
    mine, theirs = normal_forms(ca, dtype), normal_forms(torch, dtype)
    for form in theirs:
        assert tuple(mine[form].shape) == tuple(theirs[form].shape), form
        assert dtype_name(mine[form]) == dtype_name(theirs[form]), form


def test_normal_default_dtype_size_forms_and_promotion():
    for make in (lambda L: L.normal(0.0, 1.0, [2, 3]), lambda L: L.normal(0, 1, (2,)),
                 lambda L: L.normal(0.0, 1.0, ()), lambda L: L.normal(0.0, 1.0, L.Size([4])),
                 lambda L: L.normal(L.zeros(3), L.ones(3, dtype=L.float64)),
                 lambda L: L.normal(0.0, L.ones(3, dtype=L.float64)),
                 lambda L: L.normal(L.zeros(3), True)):
        mine, theirs = make(ca), make(torch)
        assert tuple(mine.shape) == tuple(theirs.shape)
        assert dtype_name(mine) == dtype_name(theirs)


def test_normal_broadcasts_means_and_stds():
    ca.manual_seed(0)
    mean = ca.tensor([[-2.0], [3.0]])
    std = ca.tensor([0.5, 2.0]).repeat(N // 2)
    out = to_np(ca.normal(mean, std)).reshape(2, N // 2, 2)
    for row, m in enumerate((-2.0, 3.0)):
        for col, s in enumerate((0.5, 2.0)):
            assert_mean(out[row, :, col], m, s)
            assert_std(out[row, :, col], s, rel=0.03)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_float_form_distribution(dtype):
    ca.manual_seed(1)
    out = ca.normal(1.5, 3.0, (N,), dtype=getattr(ca, dtype))
    assert dtype_name(out) == dtype
    assert_mean(to_np(out), 1.5, 3.0)
    assert_std(to_np(out), 3.0)


def test_normal_zero_std_gives_the_means():
    mean = ca.tensor([1.0, -2.0, 7.5])
    np.testing.assert_array_equal(to_np(ca.normal(mean, 0.0)), to_np(mean))


@pytest.mark.parametrize("make", [
    lambda L: L.normal(L.zeros(3), -1.0),
    lambda L: L.normal(L.zeros(3), float("nan")),
    lambda L: L.normal(0.0, -1.0, size=(2,)),
    lambda L: L.normal(0.0, -0.5, (2,)),
    lambda L: L.normal(L.zeros(3), -L.ones(3)),
    lambda L: L.normal(0.0, L.tensor([1.0, -1.0])),
    lambda L: L.normal(L.zeros(3), L.tensor([1.0, float("nan"), 1.0])),
    lambda L: L.normal(L.zeros(3, dtype=L.int64), L.ones(3)),
    lambda L: L.normal(L.zeros(3, dtype=L.int64), 1.0),
    lambda L: L.normal(0, L.ones(3, dtype=L.int64)),
    lambda L: L.normal(0.0, 1.0, size=(2,), dtype=L.int64),
    lambda L: L.normal(L.zeros(2), L.ones(3)),
    lambda L: L.normal(L.zeros(2, 4), L.ones(3, 1)),
    lambda L: L.normal(0.0, 1.0, (-1,)),
])
def test_normal_errors_match_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("make", [
    lambda L: L.normal(0.0, 1.0),
    lambda L: L.normal(0.0, 1.0, 3),
    lambda L: L.normal(L.zeros(3), 1.0, size=(3,)),
    lambda L: L.normal(L.zeros(3), "a"),
    lambda L: L.normal(L.zeros(3), 1.0, generator=3),
])
def test_normal_wrong_overloads_are_type_errors(make):
    same_error_type(make)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_normal_gradients_are_zero_as_torchs(dtype):
    results = []
    for L in LIBS:
        dt = getattr(L, dtype)
        mean = L.zeros(2, 1, dtype=dt, requires_grad=True)
        std = L.ones(3, dtype=dt, requires_grad=True)
        mean_only = L.zeros(3, dtype=dt, requires_grad=True)
        std_only = L.ones(3, dtype=dt, requires_grad=True)
        outs = [L.normal(mean, std), L.normal(mean_only, 2.0), L.normal(1.0, std_only)]
        assert all(o.requires_grad for o in outs)
        sum(o.sum() * 3 for o in outs[1:]).backward()
        outs[0].sum().backward()
        results.append([mean.grad, std.grad, mean_only.grad, std_only.grad])
    for c, t in zip(*results):
        assert_close(c, t)


def test_normal_requires_grad_makes_a_leaf():
    out = ca.normal(0.0, 1.0, (3,), requires_grad=True)
    assert out.requires_grad and out.is_leaf


def test_normal_is_reproducible_under_seeds_and_generators():
    ca.manual_seed(5)
    a = to_np(ca.normal(ca.zeros(4), 1.0))
    ca.manual_seed(5)
    b = to_np(ca.normal(ca.zeros(4), 1.0))
    np.testing.assert_array_equal(a, b)
    g1, g2 = ca.Generator().manual_seed(9), ca.Generator().manual_seed(9)
    np.testing.assert_array_equal(to_np(ca.normal(0.0, 1.0, (4,), generator=g1)),
                                  to_np(ca.normal(0.0, 1.0, (4,), generator=g2)))
    assert not np.array_equal(to_np(ca.normal(0.0, 1.0, (4,), generator=g1)), a)


# ------------------------------------------------------------------------------ bernoulli
def test_bernoulli_draws_with_the_input_probabilities():
    ca.manual_seed(2)
    probs = ca.tensor([0.0, 0.25, 0.5, 1.0]).repeat(N)
    out = to_np(ca.bernoulli(probs)).reshape(N, 4)
    assert set(np.unique(out)) <= {0.0, 1.0}
    for col, p in enumerate((0.0, 0.25, 0.5, 1.0)):
        assert_mean(out[:, col], p, math.sqrt(p * (1 - p)) + 1e-12)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_bernoulli_with_a_float_p_keeps_the_input_dtype(dtype):
    ca.manual_seed(3)
    out = ca.bernoulli(ca.zeros(N, dtype=getattr(ca, dtype)), 0.3)
    assert dtype_name(out) == dtype_name(torch.bernoulli(torch.zeros(2, dtype=getattr(
        torch, dtype)), 0.3))
    assert_mean(to_np(out), 0.3, math.sqrt(0.3 * 0.7))


def test_bernoulli_methods():
    ca.manual_seed(4)
    assert_mean(to_np(ca.full((N,), 0.2).bernoulli()), 0.2, 0.4)
    assert_mean(to_np(ca.zeros(N).bernoulli(0.7)), 0.7, math.sqrt(0.21))
    assert_mean(to_np(ca.zeros(N).bernoulli(p=0.7)), 0.7, math.sqrt(0.21))
    t = ca.zeros(N)
    assert t.bernoulli_() is t
    assert_mean(to_np(t), 0.5, 0.5)
    assert_mean(to_np(ca.zeros(N, dtype=ca.int64).bernoulli_(0.9)), 0.9, 0.3)


def test_bernoulli_in_place_with_a_tensor_p_broadcasts():
    ca.manual_seed(6)
    t = ca.zeros(N, 2).bernoulli_(ca.tensor([0.1, 0.8]))
    out = to_np(t)
    assert_mean(out[:, 0], 0.1, 0.3)
    assert_mean(out[:, 1], 0.8, 0.4)
    for dtype in ("float64", "int64"):  # self's dtype is kept, an int64 self is fine
        made = ca.zeros(N, dtype=getattr(ca, dtype)).bernoulli_(ca.full((N,), 0.5))
        assert dtype_name(made) == dtype
        assert_mean(to_np(made), 0.5, 0.5)


@pytest.mark.parametrize("make", [
    lambda L: L.bernoulli(L.full((3,), 1.5)),
    lambda L: L.bernoulli(L.full((3,), -0.5)),
    lambda L: L.bernoulli(L.full((3,), float("nan"))),
    lambda L: L.bernoulli(L.full((3,), 0.5), 1.3),
    lambda L: L.bernoulli(L.full((3,), 0.5), p=-0.3),
    lambda L: L.bernoulli(L.ones(3, dtype=L.int64)),
    lambda L: L.bernoulli(0.5),
    lambda L: L.zeros(3).bernoulli_(L.full((3,), 1.5)),
    lambda L: L.zeros(3).bernoulli_(1.5),
    lambda L: L.zeros(3).bernoulli_(-0.5),
    lambda L: L.zeros(3).bernoulli_(float("nan")),
    lambda L: L.zeros(3).bernoulli_(L.full((3,), 1, dtype=L.int64)),
])
def test_bernoulli_errors_match_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("make", [
    lambda L: L.bernoulli(L.zeros(3), L.zeros(3)),
    lambda L: L.zeros(3).bernoulli(L.ones(3)),
    lambda L: L.zeros(3).bernoulli_(None),
    lambda L: L.zeros(3).bernoulli_(L.full((2, 3), 0.5)),
    lambda L: L.zeros(2, 3).bernoulli_(L.full((4,), 0.5)),
])
def test_bernoulli_wrong_arguments_raise_torchs_error_types(make):
    same_error_type(make)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_bernoulli_gradients_follow_torch(dtype):
    grads = []
    for L in LIBS:
        probs = L.full((3,), 0.5, dtype=getattr(L, dtype), requires_grad=True)
        out = L.bernoulli(probs)
        assert out.requires_grad
        out.sum().backward()
        grads.append(probs.grad)
    assert_close(*grads)
    # with a float p, torch records a node whose backward is not implemented
    messages = []
    for L in LIBS:
        out = L.bernoulli(L.full((3,), 0.5, requires_grad=True), 0.3)
        assert out.requires_grad
        messages.append(outcome(lambda o=out: o.sum().backward()))
    assert messages[0] == messages[1] and messages[0][0] == "RuntimeError"


def test_bernoulli_in_place_on_a_leaf_that_requires_grad_is_refused():
    for L in LIBS:
        with pytest.raises(RuntimeError, match="leaf"):
            L.zeros(3, requires_grad=True).bernoulli_(0.5)


# ------------------------------------------------------------------------------ random_
@pytest.mark.parametrize("dtype, top", [("float32", 2 ** 24), ("float64", 2 ** 53),
                                        ("int64", 2 ** 63 - 1)])
def test_random_without_bounds_covers_the_dtype_range(dtype, top):
    ca.manual_seed(7)
    out = ca.empty(N, dtype=getattr(ca, dtype)).random_()
    assert dtype_name(out) == dtype
    values = np.array(out.tolist(), dtype=object)
    assert min(values) >= 0 and max(values) <= top
    assert all(float(v).is_integer() for v in values[:100])
    assert_mean(np.asarray(values, dtype=np.float64), top / 2, top / math.sqrt(12))


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("args, low, high", [((10,), 0, 9), ((-3, 10), -3, 9),
                                             ((5, 6), 5, 5)])
def test_random_with_bounds(dtype, args, low, high):
    ca.manual_seed(8)
    out = to_np(ca.empty(N, dtype=getattr(ca, dtype)).random_(*args))
    assert out.min() == low and out.max() == high
    assert np.all(out == np.round(out))
    assert_mean(out, (low + high) / 2, math.sqrt(((high - low + 1) ** 2 - 1) / 12) + 1e-12)


def test_random_keyword_and_open_upper_forms():
    ca.manual_seed(9)
    assert to_np(ca.empty(1000).random_(to=3)).max() == 2
    assert to_np(ca.empty(1000).random_(2, to=4)).min() == 2
    out = to_np(ca.empty(1000).random_(**{"from": 4, "to": 6}))
    assert set(np.unique(out)) == {4.0, 5.0}
    tail = np.array(ca.empty(1000, dtype=ca.int64).random_(2 ** 63 - 2, None).tolist())
    assert set(np.unique(tail)) == {2 ** 63 - 2, 2 ** 63 - 1}
    floats = to_np(ca.empty(1000).random_(2 ** 24 - 1, None))
    assert set(np.unique(floats)) == {2.0 ** 24 - 1, 2.0 ** 24}
    big = ca.empty(1000, dtype=ca.int64).random_(-2 ** 63, 2 ** 63 - 1)
    assert min(big.tolist()) < 0 < max(big.tolist())


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("make", [
    lambda L, t: t.random_(3, 3),
    lambda L, t: t.random_(0),
    lambda L, t: t.random_(-5),
    lambda L, t: t.random_(2 ** 63),
    lambda L, t: t.random_(0, 2 ** 64),
    lambda L, t: t.random_(2 ** 24, None),
    lambda L, t: t.random_(2 ** 53, None),
    lambda L, t: t.random_(2, 5, None),
])
def test_random_errors_match_torch(dtype, make):
    same_outcome(lambda L: make(L, L.empty(3, dtype=getattr(L, dtype))))


@pytest.mark.parametrize("make", [lambda t: t.random_(1.5), lambda t: t.random_(True),
                                  lambda t: t.random_(None), lambda t: t.random_(from_=1)])
def test_random_wrong_arguments_are_type_errors(make):
    same_error_type(lambda L: make(L.empty(3)))


@pytest.mark.parametrize("dtype, args", [("float32", (2 ** 60,)), ("float32", (-2 ** 25, 0)),
                                         ("float64", (-2 ** 63, 2 ** 63 - 1))])
def test_random_warns_about_float_precision_as_torch(dtype, args):
    messages = []
    for L in LIBS:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            L.empty(3, dtype=getattr(L, dtype)).random_(*args)
        # torch appends where in its C++ sources the warning was raised
        messages.append([(w.category, str(w.message).split(" (Triggered internally")[0])
                         for w in caught])
    assert messages[0] == messages[1] and messages[0]


def test_random_in_place_on_a_leaf_that_requires_grad_is_refused():
    for L in LIBS:
        with pytest.raises(RuntimeError, match="leaf"):
            L.empty(3, requires_grad=True).random_()


# ------------------------------------------------------------------------------ the others
def test_multinomial_method_is_the_function():
    probs = ca.tensor([[1.0, 2.0, 7.0], [5.0, 0.0, 5.0]])
    g1, g2 = ca.Generator().manual_seed(3), ca.Generator().manual_seed(3)
    by_method = probs.multinomial(N, True, generator=g1)
    by_function = ca.multinomial(probs, N, replacement=True, generator=g2)
    np.testing.assert_array_equal(to_np(by_method), to_np(by_function))
    assert dtype_name(by_method) == "int64" and tuple(by_method.shape) == (2, N)
    counts = np.bincount(to_np(by_method)[0], minlength=3) / N
    np.testing.assert_allclose(counts, [0.1, 0.2, 0.7], atol=0.01)
    same_outcome(lambda L: L.tensor([1.0, 2.0]).multinomial(3))
    without = ca.tensor([1.0, 2.0, 3.0]).multinomial(num_samples=3)
    assert sorted(without.tolist()) == [0, 1, 2]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_exponential_distribution(dtype):
    ca.manual_seed(10)
    out = ca.empty(N, dtype=getattr(ca, dtype)).exponential_(2.0)
    assert dtype_name(out) == dtype
    assert to_np(out).min() >= 0
    assert_mean(to_np(out), 0.5, 0.5)
    assert_std(to_np(out), 0.5)
    np.testing.assert_array_equal(to_np(ca.empty(3).exponential_(float("inf"))), 0.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
def test_geometric_distribution(dtype):
    ca.manual_seed(11)
    out = ca.empty(N, dtype=getattr(ca, dtype)).geometric_(0.25)
    assert dtype_name(out) == dtype
    values = to_np(out)
    assert values.min() == 1 and np.all(values == np.round(values))
    assert_mean(values, 4.0, math.sqrt(0.75) / 0.25)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_cauchy_distribution(dtype):
    ca.manual_seed(12)
    values = to_np(ca.empty(N, dtype=getattr(ca, dtype)).cauchy_(1.0, 2.0))
    # a Cauchy has no mean: its quartiles are median -+ sigma
    q1, median, q3 = np.quantile(values, [0.25, 0.5, 0.75])
    assert median == pytest.approx(1.0, abs=0.05)
    assert q1 == pytest.approx(-1.0, abs=0.06) and q3 == pytest.approx(3.0, abs=0.06)
    assert to_np(ca.empty(3).cauchy_()).dtype == np.float32


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_log_normal_distribution(dtype):
    ca.manual_seed(13)
    values = to_np(ca.empty(N, dtype=getattr(ca, dtype)).log_normal_(0.5, 0.75))
    assert values.min() > 0
    assert_mean(np.log(values), 0.5, 0.75)
    assert_std(np.log(values), 0.75)
    defaults = np.log(to_np(ca.empty(N).log_normal_()))  # mean 1, std 2
    assert_mean(defaults, 1.0, 2.0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int64"])
@pytest.mark.parametrize("make", [
    lambda t: t.exponential_(0.0), lambda t: t.exponential_(-1.0),
    lambda t: t.exponential_(float("nan")), lambda t: t.exponential_(),
    lambda t: t.exponential_(lambd=3),
    lambda t: t.geometric_(1.0), lambda t: t.geometric_(0.0), lambda t: t.geometric_(1.5),
    lambda t: t.geometric_(-0.1), lambda t: t.geometric_(float("nan")),
    lambda t: t.geometric_(p=1),
    lambda t: t.cauchy_(1.0, 0.0), lambda t: t.cauchy_(1.0, -1.0), lambda t: t.cauchy_(),
    lambda t: t.cauchy_(median=1.0, sigma=float("nan")),
    lambda t: t.log_normal_(1.0, 0.0), lambda t: t.log_normal_(1.0, -1.0),
    lambda t: t.log_normal_(), lambda t: t.log_normal_(mean=1.0, std=float("nan")),
])
def test_sampler_errors_match_torch(dtype, make):
    same_outcome(lambda L: make(L.empty(4, dtype=getattr(L, dtype))))


@pytest.mark.parametrize("make", [lambda t: t.geometric_(), lambda t: t.exponential_("a"),
                                  lambda t: t.cauchy_(0, 1, None)])
def test_sampler_wrong_arguments_are_type_errors(make):
    same_error_type(lambda L: make(L.empty(3)))


@pytest.mark.parametrize("name, args", [("exponential_", (2.0,)), ("geometric_", (0.3,)),
                                        ("cauchy_", (0.0, 1.0)), ("log_normal_", (0.0, 1.0)),
                                        ("random_", (0, 100)), ("bernoulli_", (0.5,)),
                                        ("uniform_", (0.0, 1.0))])
def test_samplers_reproduce_under_a_generator_and_return_self(name, args):
    runs = []
    for _ in range(2):
        t = ca.empty(50)
        assert getattr(t, name)(*args, generator=ca.Generator().manual_seed(21)) is t
        runs.append(to_np(t))
    np.testing.assert_array_equal(*runs)
    ca.manual_seed(22)
    first = to_np(getattr(ca.empty(50), name)(*args))
    ca.manual_seed(22)
    np.testing.assert_array_equal(first, to_np(getattr(ca.empty(50), name)(*args)))


# ------------------------------------------------------------------------------ poisson
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_poisson_distribution(dtype):
    ca.manual_seed(14)
    rates = ca.tensor([0.0, 0.5, 4.0, 300.0], dtype=getattr(ca, dtype)).repeat(N // 4)
    out = ca.poisson(rates)
    assert dtype_name(out) == dtype
    values = to_np(out).reshape(-1, 4)
    assert np.all(values[:, 0] == 0) and np.all(values == np.round(values))
    for col, rate in enumerate((0.5, 4.0, 300.0)):
        assert_mean(values[:, col + 1], rate, math.sqrt(rate))
        assert_std(values[:, col + 1], math.sqrt(rate), rel=0.04)
    assert tuple(ca.poisson(ca.tensor(3.0)).shape) == ()


def test_poisson_generator_and_gradient():
    g1, g2 = ca.Generator().manual_seed(4), ca.Generator().manual_seed(4)
    rates = ca.full((20,), 3.0)
    np.testing.assert_array_equal(to_np(ca.poisson(rates, g1)),
                                  to_np(ca.poisson(rates, generator=g2)))
    grads = []
    for L in LIBS:
        rates = L.full((3,), 2.0, requires_grad=True)
        out = L.poisson(rates)
        assert out.requires_grad
        out.sum().backward()
        grads.append(rates.grad)
    assert_close(*grads)


@pytest.mark.parametrize("make", [
    lambda L: L.poisson(L.tensor([1.0, -2.0, 0.0])),
    lambda L: L.poisson(L.tensor([1.0, float("nan")])),
    lambda L: L.poisson(L.tensor([1, 2])),
    lambda L: L.poisson([1.0]),
    lambda L: L.poisson(L.ones(2), generator=3),
])
def test_poisson_errors_match_torch(make):
    c, t = outcome(lambda: make(ca)), outcome(lambda: make(torch))
    assert c[0] == t[0] != "ok"
    assert c[1].replace("cagrad.Generator", "torch.Generator") == t[1]


def test_poisson_refuses_rates_numpy_cannot_sample():
    # torch returns an undefined value (INT64_MIN as a float) for an infinite rate
    with pytest.raises(RuntimeError, match="cannot sample rates above"):
        ca.poisson(ca.tensor([1.0, float("inf")]))


# ------------------------------------------------------------------------------ where
@pytest.mark.parametrize("values", [
    [[0.0, 1.0], [2.0, float("nan")]], [[0, 1], [2, 0]], [1.5, 0.0, -2.0], 1.0, 0.0, 5,
    np.zeros((2, 0)), [[[0.0, 1.0]], [[1.0, 0.0]]],
])
def test_where_with_one_argument_is_nonzero_as_tuple(values):
    c, t = to_both(np.asarray(values))
    mine, theirs = ca.where(c), torch.where(t)
    assert isinstance(mine, tuple) and len(mine) == len(theirs)
    for m, th in zip(mine, theirs):
        assert_close(m, th)


def test_where_one_argument_takes_comparison_masks_and_refuses_non_tensors():
    c, t = to_both(np.array([[0.5, -1.0], [2.0, 0.0]]))
    for m, th in zip(ca.where(c > 0), torch.where(t > 0)):
        assert_close(m, th)
    same_outcome(lambda L: L.where([1, 0]))
    same_error_type(lambda L: L.where(L.ones(2), L.ones(2)))


def test_tensor_where_method_matches_torch():
    for L_other in (lambda L: 5.0, lambda L: L.tensor([7.0, 8.0])):
        results = [L.tensor([1.0, 2.0]).where(L.tensor([1.0, 0.0]) > 0, L_other(L))
                   for L in LIBS]
        assert_close(*results)
    same_error_type(lambda L: L.tensor([1.0, 2.0]).where(L.tensor([1.0, 0.0]) > 0))


# ------------------------------------------------------------------------------ div
INT_A = [7, -7, 7, -7, 0, 9, -1]
INT_B = [2, 2, -2, -2, 3, 3, 5]


def div_cases(L, mode):
    a, b = L.tensor(INT_A), L.tensor(INT_B)
    fa, fb = a.to(L.float32), b.to(L.float32)
    return [
        L.div(a, b, rounding_mode=mode), L.div(fa, fb, rounding_mode=mode),
        L.div(a, 2, rounding_mode=mode), L.div(a, 2.5, rounding_mode=mode),
        L.div(fa, 2, rounding_mode=mode), L.div(a, fb.to(L.float64), rounding_mode=mode),
        L.div(fa.to(L.float64), -1.5, rounding_mode=mode), L.div(3, b, rounding_mode=mode),
        L.div(7.5, fb, rounding_mode=mode), a.div(b, rounding_mode=mode),
        a.divide(b, rounding_mode=mode), L.divide(fa, fb, rounding_mode=mode),
        L.div(a.reshape(7, 1), b, rounding_mode=mode),
        L.div(L.tensor([7.0, -7.0, 0.0, float("nan"), float("inf")]), 0.0, rounding_mode=mode),
        L.div(L.tensor([5.5, -7.25, 3.0, -0.0, 1e-3, -7.5]),
              L.tensor([2.0, 2.0, -1.5, 3.0, -0.5, float("inf")]), rounding_mode=mode),
        L.div(L.tensor([0, 1, 2]), L.tensor([0, 0, 2])),
        L.div(3, 4, rounding_mode=mode), L.div(-7, 2, rounding_mode=mode),
        L.div(-7.5, 2, rounding_mode=mode),
    ]


@pytest.mark.parametrize("mode", [None, "trunc", "floor"])
def test_div_values_and_dtypes_match_torch(mode):
    for c, t in zip(div_cases(ca, mode), div_cases(torch, mode)):
        assert_close(c, t)


@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_in_place_with_rounding_modes(mode):
    for make in (lambda L: L.tensor(INT_A).div_(L.tensor(INT_B), rounding_mode=mode),
                 lambda L: L.tensor(INT_A).divide_(3, rounding_mode=mode),
                 lambda L: L.tensor(INT_A, dtype=L.float64).div_(L.tensor(INT_B),
                                                                rounding_mode=mode)):
        assert_close(make(ca), make(torch))
    t = ca.tensor([7.0, -7.0])
    assert t.div_(2.0, rounding_mode=mode) is t


@pytest.mark.parametrize("make", [
    lambda L: L.div(L.tensor(INT_A), L.tensor([0, 1, 0, 1, 0, 1, 1]), rounding_mode="trunc"),
    lambda L: L.div(L.tensor(INT_A), 0, rounding_mode="floor"),
    lambda L: L.div(L.tensor(INT_A), L.tensor(INT_B), rounding_mode="round"),
    lambda L: L.tensor(INT_A).div_(L.tensor(INT_B)),
    lambda L: L.tensor(INT_A).true_divide_(L.tensor(INT_B)),
    lambda L: L.tensor(INT_A).div_(2.5, rounding_mode="floor"),
    lambda L: L.div(L.tensor([1, 2]), L.tensor([1, 2, 3]), rounding_mode="floor"),
    lambda L: L.div(L.zeros(2, 4), L.ones(3), rounding_mode="trunc"),
    lambda L: L.div(7, 0, rounding_mode="floor"),
    lambda L: L.div([3], L.ones(1)),
])
def test_div_errors_match_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("make", [
    lambda L: L.div(L.ones(2), L.ones(2), rounding_mode=3),
    lambda L: L.true_divide(L.ones(2), L.ones(2), rounding_mode="floor"),
    lambda L: L.ones(2).true_divide(L.ones(2), rounding_mode="floor"),
])
def test_div_wrong_arguments_are_type_errors(make):
    same_error_type(make)


def test_true_divide_forms_match_torch():
    for make in (lambda L: L.true_divide(L.tensor(INT_A), L.tensor(INT_B)),
                 lambda L: L.tensor(INT_A).true_divide(2),
                 lambda L: L.tensor(INT_A, dtype=L.float64).true_divide_(L.tensor(INT_B))):
        assert_close(make(ca), make(torch))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", ["trunc", "floor"])
def test_div_rounding_gradients_are_zero_as_torchs(dtype, mode):
    x_data = np.array([[7.0, -7.0, 2.5]], dtype=dtype)
    y_data = np.array([[2.0], [0.0]], dtype=dtype)  # a zero divisor: still zeros
    results = []
    for L in LIBS:
        x = L.tensor(x_data.copy(), requires_grad=True)
        y = L.tensor(y_data.copy(), requires_grad=True)
        out = L.div(x, y, rounding_mode=mode) + L.div(x, 2.0, rounding_mode=mode)
        assert out.requires_grad
        (out * 3).sum().backward()
        results.append((x.grad, y.grad))
    for c, t in zip(*results):
        assert_close(c, t)


def test_div_true_division_gradient_is_unchanged():
    results = []
    for L in LIBS:
        x = L.tensor([3.0, -1.0], requires_grad=True)
        y = L.tensor([2.0, 4.0], requires_grad=True)
        L.div(x, y, rounding_mode=None).sum().backward()
        results.append((x.grad, y.grad))
    for c, t in zip(*results):
        assert_close(c, t)
