"""Random generators and sampling: Generator, default_generator, manual_seed, seed,
initial_seed, randperm, randint, multinomial, and rand/randn with generator=.

cagrad's streams are deterministic under a seed but are not PyTorch's numbers, so values
are checked by their properties (permutations, bounds, frequencies); seeds, shapes,
dtypes, errors and messages are compared with torch 2.13."""

import math

import numpy as np
import pytest
import torch

from helpers import ca, needs_cagrad, outcome, same_outcome

pytestmark = needs_cagrad


def dtype_name(x):
    return str(x.dtype).split(".")[1]


# ------------------------------------------------------------------------------ Generator
def test_fresh_generator_starts_from_torchs_default_seed():
    assert ca.Generator().initial_seed() == torch.Generator().initial_seed()


@pytest.mark.parametrize("seed", [0, 7, 2**63, 2**64 - 1, -1, -5, -2**63])
def test_manual_seed_keeps_the_seed_as_torch_does(seed):
    g = ca.Generator()
    assert g.manual_seed(seed) is g
    assert g.initial_seed() == torch.Generator().manual_seed(seed).initial_seed()


@pytest.mark.parametrize("seed", [2**64, -2**63 - 1, 1.5, "3", True])
def test_manual_seed_rejects_what_torch_rejects(seed):
    same_outcome(lambda L: L.Generator().manual_seed(seed))


def test_generator_device_is_cpu():
    assert str(ca.Generator().device) == str(torch.Generator().device) == "cpu"
    assert str(ca.Generator(device="cpu").device) == "cpu"


def test_generator_rejects_other_devices():
    with pytest.raises(RuntimeError):
        ca.Generator(device="cuda")


def test_same_seed_same_stream_and_different_seed_different_stream():
    def perm(seed):
        return ca.randperm(50, generator=ca.Generator().manual_seed(seed)).tolist()
    assert perm(3) == perm(3)
    assert perm(3) != perm(4)


def test_get_state_set_state_resumes_the_stream():
    g = ca.Generator().manual_seed(11)
    ca.randint(10, (5,), generator=g)
    state = g.get_state()
    first = ca.randperm(20, generator=g).tolist() + ca.rand(4, generator=g).tolist()
    g.manual_seed(99)  # move elsewhere, then come back
    g.set_state(state)
    assert ca.randperm(20, generator=g).tolist() + ca.rand(4, generator=g).tolist() == first
    assert g.initial_seed() == 11


def test_set_state_rejects_other_tensors_with_typeerror_as_torch():
    for L in (ca, torch):
        with pytest.raises(TypeError):
            L.Generator().set_state(L.zeros(3))
    with pytest.raises(TypeError, match="get_state"):
        ca.Generator().set_state(ca.zeros(3))


def test_seed_is_non_deterministic_and_becomes_initial_seed():
    g = ca.Generator()
    s1, s2 = g.seed(), g.seed()
    assert s1 != s2 and g.initial_seed() == s2 and 0 <= s2 < 2**64


# ------------------------------------------------------------------------------ module level
def test_manual_seed_returns_and_seeds_the_default_generator():
    g = ca.manual_seed(5)
    assert g is ca.default_generator
    assert ca.initial_seed() == torch.manual_seed(5).initial_seed() == 5
    first = ca.randperm(30).tolist()
    ca.manual_seed(5)
    assert ca.randperm(30).tolist() == first


def test_manual_seed_takes_int_of_its_argument_as_torch():
    assert ca.manual_seed(2.7).initial_seed() == torch.manual_seed(2.7).initial_seed()
    torch.manual_seed(0)


def test_manual_seed_still_seeds_randn():
    ca.manual_seed(8)
    a = ca.randn(6).tolist()
    ca.manual_seed(8)
    assert ca.randn(6).tolist() == a


def test_module_seed_reseeds_default_generator():
    s = ca.seed()
    assert ca.initial_seed() == s
    ca.manual_seed(0)


# ------------------------------------------------------------------------------ randperm
@pytest.mark.parametrize("n", [0, 1, 2, 17, 1000])
def test_randperm_is_a_permutation_with_torchs_dtype(n):
    c, t = ca.randperm(n), torch.randperm(n)
    assert sorted(c.tolist()) == list(range(n))
    assert dtype_name(c) == dtype_name(t) and tuple(c.shape) == tuple(t.shape)


def test_randperm_dtype_argument():
    c, t = ca.randperm(5, dtype=ca.float64), torch.randperm(5, dtype=torch.float64)
    assert dtype_name(c) == dtype_name(t)
    assert sorted(c.tolist()) == [0.0, 1.0, 2.0, 3.0, 4.0]


@pytest.mark.parametrize("make", [
    lambda L: L.randperm(-1),
    lambda L: L.randperm(3, generator=3),
    lambda L: L.randperm(2.5),
], ids=["negative", "generator_not_generator", "float_n"])
def test_randperm_errors_as_torch(make):
    c, t = outcome(lambda: make(ca)), outcome(lambda: make(torch))
    assert c[0] == t[0]
    if c[0] == "RuntimeError":
        assert c == t


# ------------------------------------------------------------------------------ randint
@pytest.mark.parametrize("call", [
    lambda L: L.randint(5, (3, 4)),
    lambda L: L.randint(-3, 3, (7,)),
    lambda L: L.randint(low=2, high=9, size=(2, 2)),
    lambda L: L.randint(4, size=(3,)),
    lambda L: L.randint(high=4, size=(3,)),
    lambda L: L.randint(1, 4, (2,), dtype=L.float32),
    lambda L: L.randint(0, 2**40, (3,)),
    lambda L: L.randint(3, ()),
    lambda L: L.randint(3, (2, 0)),
], ids=["high_size", "low_high_size", "keywords", "size_kw", "high_kw", "float32",
        "large", "scalar", "empty"])
def test_randint_call_forms_give_torchs_shape_and_dtype(call):
    c, t = call(ca), call(torch)
    assert tuple(c.shape) == tuple(t.shape) and dtype_name(c) == dtype_name(t)


def test_randint_stays_in_bounds_and_reaches_both_ends():
    values = np.array(ca.randint(-2, 3, (2000,)).tolist())
    assert values.min() == -2 and values.max() == 2
    assert set(values.tolist()) == {-2, -1, 0, 1, 2}


@pytest.mark.parametrize("make", [
    lambda L: L.randint(5, 5, (2,)),
    lambda L: L.randint(5, 2, (2,)),
    lambda L: L.randint(5, (2,), requires_grad=True),
], ids=["empty_range", "reversed_range", "int_requires_grad"])
def test_randint_runtime_errors_as_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("make", [
    lambda L: L.randint(5),
    lambda L: L.randint(2.5, (3,)),
    lambda L: L.randint(3, 2),
    lambda L: L.randint(3, (2,), generator=3),
], ids=["no_size", "float_high", "int_size", "bad_generator"])
def test_randint_type_errors_as_torch(make):
    assert outcome(lambda: make(ca))[0] == outcome(lambda: make(torch))[0] == "TypeError"


def test_randint_float_with_requires_grad():
    x = ca.randint(0, 3, (4,), dtype=ca.float64, requires_grad=True)
    assert x.requires_grad and dtype_name(x) == "float64"


# ------------------------------------------------------------------------------ multinomial
MULTINOMIAL_ERRORS = {
    "int_input": lambda L: L.multinomial(L.tensor([1, 2]), 1),
    "three_dims": lambda L: L.multinomial(L.ones(2, 2, 2), 1),
    "scalar": lambda L: L.multinomial(L.tensor(1.0), 1),
    "zero_samples": lambda L: L.multinomial(L.ones(3), 0),
    "too_many_without_replacement": lambda L: L.multinomial(L.ones(3), 4),
    "negative": lambda L: L.multinomial(L.tensor([1.0, -1.0]), 1),
    "nan": lambda L: L.multinomial(L.tensor([1.0, float("nan")]), 1),
    "inf": lambda L: L.multinomial(L.tensor([1.0, float("inf")]), 1, True),
    "zero_sum": lambda L: L.multinomial(L.tensor([0.0, 0.0]), 1),
    "zero_sum_row": lambda L: L.multinomial(L.tensor([[1.0, 0.0], [0.0, 0.0]]), 1),
    "empty": lambda L: L.multinomial(L.ones(0), 1),
    "list_input": lambda L: L.multinomial([1.0, 2.0], 1),
}


@pytest.mark.parametrize("name", list(MULTINOMIAL_ERRORS))
def test_multinomial_errors_as_torch(name):
    c = outcome(lambda: MULTINOMIAL_ERRORS[name](ca))
    assert c[0] != "ok" and c == outcome(lambda: MULTINOMIAL_ERRORS[name](torch))


@pytest.mark.parametrize("call", [
    lambda L: L.multinomial(L.tensor([0.2, 0.3, 0.5]), 2),
    lambda L: L.multinomial(L.tensor([0.2, 0.3, 0.5]), 7, True),
    lambda L: L.multinomial(L.tensor([[1.0, 2.0, 3.0], [3.0, 0.0, 1.0]]), 2),
    lambda L: L.multinomial(L.tensor([[1.0, 2.0], [3.0, 1.0]], dtype=L.float64), 5, True),
    lambda L: L.multinomial(L.ones(0, 3), 1),
], ids=["1d", "1d_replacement", "2d", "2d_f64_replacement", "no_rows"])
def test_multinomial_shape_and_dtype_as_torch(call):
    c, t = call(ca), call(torch)
    assert tuple(c.shape) == tuple(t.shape) and dtype_name(c) == dtype_name(t) == "int64"


def test_multinomial_without_replacement_is_distinct_and_skips_zero_weights():
    probs = ca.tensor([[0.0, 1.0, 2.0, 0.0, 3.0]] * 50)
    for row in ca.multinomial(probs, 3).tolist():
        assert sorted(row) == [1, 2, 4]


def test_multinomial_takes_zero_weights_last_as_torch():
    # more samples than positive weights: the zero-weight categories come last, in order
    for L in (ca, torch):
        assert L.multinomial(L.tensor([1.0, 0.0, 0.0]), 2).tolist() == [0, 1]


def test_multinomial_with_replacement_never_picks_zero_weights():
    picks = ca.multinomial(ca.tensor([0.0, 5.0, 0.0, 1.0, 0.0]), 3000, True).tolist()
    assert set(picks) == {1, 3}


def frequency_bound(p, n):
    """Six standard deviations of a binomial frequency: a fixed-seed run of a correct
    sampler falls outside with probability ~2e-9 per category."""
    return 6 * math.sqrt(p * (1 - p) / n)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_multinomial_frequencies_match_probabilities(dtype):
    weights = np.array([1.0, 2.0, 3.0, 4.0, 0.0, 10.0])
    probs = weights / weights.sum()
    n = 40000
    ca.manual_seed(123)
    picks = ca.multinomial(ca.tensor(weights, dtype=getattr(ca, dtype)), n, True).tolist()
    freq = np.bincount(picks, minlength=len(weights)) / n
    for p, f in zip(probs, freq):
        assert abs(f - p) <= frequency_bound(p, n), (probs, freq)


def test_multinomial_first_pick_without_replacement_follows_probabilities():
    # the first draw without replacement is a plain weighted draw: P(i) = p_i
    weights = np.array([5.0, 1.0, 3.0, 1.0])
    probs = weights / weights.sum()
    rows = 20000
    ca.manual_seed(7)
    picks = ca.multinomial(ca.tensor(np.tile(weights, (rows, 1))), 2).tolist()
    freq = np.bincount([r[0] for r in picks], minlength=4) / rows
    for p, f in zip(probs, freq):
        assert abs(f - p) <= frequency_bound(p, rows), (probs, freq)


def test_multinomial_generator_reproducible():
    w = ca.tensor([1.0, 2.0, 3.0, 4.0])
    a = ca.multinomial(w, 10, True, generator=ca.Generator().manual_seed(2)).tolist()
    b = ca.multinomial(w, 10, True, generator=ca.Generator().manual_seed(2)).tolist()
    assert a == b


# ------------------------------------------------------------------------------ rand, randn
@pytest.mark.parametrize("fname", ["rand", "randn"])
@pytest.mark.parametrize("dtype", [None, "float32", "float64"])
@pytest.mark.parametrize("shape", [(3, 4), (), (0, 2)])
def test_generator_argument_gives_torchs_shape_and_dtype(fname, dtype, shape):
    def make(L):
        kw = {} if dtype is None else {"dtype": getattr(L, dtype)}
        return getattr(L, fname)(shape, generator=L.Generator().manual_seed(1), **kw)
    c, t = make(ca), make(torch)
    assert tuple(c.shape) == tuple(t.shape) and dtype_name(c) == dtype_name(t)


@pytest.mark.parametrize("fname", ["rand", "randn"])
def test_generator_argument_is_reproducible(fname):
    def draw(seed):
        return getattr(ca, fname)(50, generator=ca.Generator().manual_seed(seed)).tolist()
    assert draw(4) == draw(4) and draw(4) != draw(5)


def test_rand_with_generator_is_uniform_and_randn_standard_normal():
    g = ca.Generator().manual_seed(0)
    u = np.array(ca.rand(20000, generator=g, dtype=ca.float64).tolist())
    z = np.array(ca.randn(20000, generator=g, dtype=ca.float64).tolist())
    assert u.min() >= 0 and u.max() < 1
    # sample mean within 6 standard errors: sd(U) = 1/sqrt(12), sd(Z) = 1
    assert abs(u.mean() - 0.5) < 6 / math.sqrt(12 * 20000)
    assert abs(z.mean()) < 6 / math.sqrt(20000)
    assert abs(z.var() - 1) < 6 * math.sqrt(2 / 20000)


def test_generator_argument_must_be_a_generator():
    assert outcome(lambda: ca.rand(2, generator=3))[0] == \
        outcome(lambda: torch.rand(2, generator=3))[0] == "TypeError"


def test_rand_with_generator_does_not_move_the_global_stream():
    ca.manual_seed(3)
    expected = ca.randn(5).tolist()
    ca.manual_seed(3)
    ca.randn(4, generator=ca.Generator())
    assert ca.randn(5).tolist() == expected


def test_generator_pickles_with_its_position():
    # samplers holding a generator must cross to spawned DataLoader workers
    import pickle
    g = ca.Generator().manual_seed(4)
    ca.rand(3, generator=g)
    copy = pickle.loads(pickle.dumps(g))
    assert copy.initial_seed() == 4
    assert ca.randperm(9, generator=copy).tolist() == ca.randperm(9, generator=g).tolist()
