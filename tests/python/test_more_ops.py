"""The everyday composites of _more_ops.py against torch 2.13: statistics, shape helpers,
creation, tests and masks, small names and in-place methods (values f32/f64, gradients
eager and compiled, errors)."""

import math

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch
from helpers import assert_close, ca

RNG = np.random.default_rng(11)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
V = RNG.standard_normal(4)
W = RNG.standard_normal(3)
WITH_ZEROS = np.array([[1.5, 0.0, -2.0], [0.0, 0.0, 3.0], [0.5, -1.0, 2.0]])
SPECIAL = np.array([1.0, np.nan, np.inf, -np.inf, 0.0, -2.0])

# (name, fn(L, *tensors), inputs): differentiable composites
DIFFERENTIABLE = [
    ("var all", lambda L, x: L.var(x), [X]),
    ("var dim keepdim", lambda L, x: x.var(1, keepdim=True), [X]),
    ("var correction 0", lambda L, x: L.var(x, (0, 1), correction=0), [X]),
    ("var unbiased False", lambda L, x: x.var(0, False), [X]),
    ("var bool only", lambda L, x: L.var(x, False), [X]),
    ("std dim", lambda L, x: x.std(dim=0), [X]),
    ("std correction 2", lambda L, x: L.std(x, 1, correction=2, keepdim=True), [X]),
    ("var_mean", lambda L, x: L.var_mean(x, 1)[0] * L.var_mean(x, 1)[1], [X]),
    ("std_mean keepdim", lambda L, x: L.std_mean(x, 0, keepdim=True)[0]
     + L.std_mean(x, 0, keepdim=True)[1], [X]),
    ("prod all", lambda L, x: L.prod(x), [X]),
    ("prod dim", lambda L, x: x.prod(1, keepdim=True), [X]),
    ("prod zeros", lambda L, x: x.prod(0), [WITH_ZEROS]),
    ("prod zeros all", lambda L, x: x.prod(), [WITH_ZEROS[:, 1:]]),
    ("norm fro", lambda L, x: x.norm(), [X]),
    ("norm 2 dim", lambda L, x: L.norm(x, 2, dim=1), [X]),
    ("norm 1", lambda L, x: x.norm(1, dim=0, keepdim=True), [X]),
    ("norm inf", lambda L, x: x.norm(float("inf"), dim=1), [X]),
    ("norm 3", lambda L, x: x.norm(3), [X]),
    ("flip", lambda L, x: x.flip((0, 1)), [X]),
    ("flip fn", lambda L, x: L.flip(x, [1]), [X]),
    ("roll", lambda L, x: x.roll(1, 1), [X]),
    ("roll two", lambda L, x: L.roll(x, (1, -2), (0, 1)), [X]),
    ("roll flat", lambda L, x: x.roll(5), [X]),
    ("repeat", lambda L, x: x.repeat(2, 1, 3), [X]),
    ("tile", lambda L, x: L.tile(x, (2,)), [X]),
    ("broadcast_to", lambda L, v: L.broadcast_to(v, (3, 4)), [V]),
    ("broadcast_tensors", lambda L, x, v: L.broadcast_tensors(x, v)[1] * x, [X, V]),
    ("hstack 2-D", lambda L, x, y: L.hstack([x, y]), [X, Y]),
    ("hstack 1-D", lambda L, v, w: L.hstack((v, w)), [V, W]),
    ("vstack", lambda L, v, x: L.vstack([v, x]), [V, X]),
    ("column_stack", lambda L, w, x: L.column_stack([w, x]), [W, X]),
    ("atleast_2d", lambda L, v: L.atleast_2d(v), [V]),
    ("repeat_interleave dim", lambda L, x: x.repeat_interleave(2, 1), [X]),
    ("repeat_interleave flat", lambda L, x: L.repeat_interleave(x, 3), [X]),
    ("outer", lambda L, v, w: L.outer(v, w), [V, W]),
    ("diagonal", lambda L, x: x.diagonal(), [X]),
    ("diagonal +1", lambda L, x: L.diagonal(x, 1), [X]),
    ("diagonal -1", lambda L, x: x.diagonal(-1), [X]),
    ("diag 2-D", lambda L, x: L.diag(x, 2), [X]),
    ("diag 1-D", lambda L, v: L.diag(v), [V]),
    ("diag 1-D +1", lambda L, v: v.diag(1), [V]),
    ("diag 1-D -2", lambda L, v: L.diag(v, -2), [V]),
    ("trace", lambda L, x: x.trace(), [X]),
    ("nan_to_num", lambda L, s: L.nan_to_num(s, 1.0, 2.0, -3.0), [SPECIAL]),
    ("masked_select", lambda L, x: L.masked_select(x, x > 0), [X]),
    ("masked_select broadcast", lambda L, x, v: x.masked_select(v > 0), [X, V]),
    ("addcmul", lambda L, x, y, v: L.addcmul(x, y, v, value=0.5), [X, Y, V]),
    ("addcdiv", lambda L, x, y, v: x.addcdiv(y, v, value=-2), [X, Y, V]),
    ("lerp", lambda L, x, y: L.lerp(x, y, 0.3), [X, Y]),
    ("lerp tensor weight", lambda L, x, y, v: x.lerp(y, v), [X, Y, V]),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn,arrays", DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_differentiable_matches_torch(name, fn, arrays, dtype, compiled):
    check_against_torch(fn, arrays, dtype, compiled=compiled, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_prod_empty_dim_is_one(dtype):
    empty = np.zeros((2, 0), dtype=dtype)
    assert_close(ca.tensor(empty).prod(1), torch.tensor(empty).prod(1))
    assert_close(ca.tensor(empty).prod(), torch.tensor(empty).prod())


# (name, fn(L, x)) of mask results: cagrad gives 0/1 in the input dtype, torch bool
MASKS = [
    ("isnan", lambda L, s: L.isnan(s)),
    ("isinf", lambda L, s: s.isinf()),
    ("isfinite", lambda L, s: L.isfinite(s)),
    ("isclose", lambda L, s: L.isclose(s, s + 1e-9)),
    ("isclose equal_nan", lambda L, s: s.isclose(s, equal_nan=True)),
    ("isclose tolerances", lambda L, s: L.isclose(s, s * 1.01, rtol=0.02, atol=0.0)),
]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn", MASKS, ids=[c[0] for c in MASKS])
def test_masks_match_torch(name, fn, dtype):
    special = SPECIAL.astype(dtype)
    assert_close(fn(ca, ca.tensor(special)), fn(torch, torch.tensor(special)),
                 check_dtype=False, msg=name)


@pytest.mark.parametrize("dtype", DTYPES)
def test_sign_values_and_zero_gradient(dtype):
    data = SPECIAL[[0, 4, 5]].astype(dtype)
    c, t = ca.tensor(data, requires_grad=True), torch.tensor(data, requires_grad=True)
    assert_close(c.sign(), t.sign())
    (c.sign() * c).sum().backward()
    (t.sign() * t).sum().backward()
    assert_close(c.grad, t.grad)


def test_count_nonzero_and_nonzero_are_int64():
    for dim in (None, 0, 1, (0, 1)):
        assert_close(ca.count_nonzero(ca.tensor(WITH_ZEROS), dim),
                     torch.count_nonzero(torch.tensor(WITH_ZEROS), dim))
    assert_close(ca.tensor(WITH_ZEROS).nonzero(), torch.tensor(WITH_ZEROS).nonzero())
    for got, want in zip(ca.nonzero(ca.tensor(WITH_ZEROS), as_tuple=True),
                         torch.nonzero(torch.tensor(WITH_ZEROS), as_tuple=True)):
        assert_close(got, want)


def test_allclose_and_equal_match_torch():
    pairs = [(X, X + 1e-9), (X, X + 1e-3), (X, X.copy()), (X, X[:2])]
    for a, b in pairs:
        ca_a, ca_b, t_a, t_b = ca.tensor(a), ca.tensor(b), torch.tensor(a), torch.tensor(b)
        assert ca.equal(ca_a, ca_b) == torch.equal(t_a, t_b)
        if a.shape == b.shape:
            assert ca.allclose(ca_a, ca_b) == torch.allclose(t_a, t_b)
            assert ca_a.allclose(ca_b, rtol=0.1) == t_a.allclose(t_b, rtol=0.1)


@pytest.mark.parametrize("dtype", [None, "float64"])
@pytest.mark.parametrize("args", [(0, 1, 5), (-2, 3.5, 7), (0, 1, 1), (1, 2, 0), (3, -1, 10)])
def test_linspace_logspace_eye(args, dtype):
    kw_c = {} if dtype is None else {"dtype": ca.float64}
    kw_t = {} if dtype is None else {"dtype": torch.float64}
    # torch's vectorised fill may round one middle element differently (1 ulp)
    ulp = dict(rtol=2e-7, atol=0) if dtype is None else dict(rtol=1e-15, atol=0)
    assert_close(ca.linspace(*args, **kw_c), torch.linspace(*args, **kw_t), **ulp)
    assert_close(ca.logspace(*args, **kw_c), torch.logspace(*args, **kw_t), rtol=1e-6, atol=0)
    assert_close(ca.logspace(*args, base=2, **kw_c), torch.logspace(*args, base=2, **kw_t),
                 rtol=1e-6, atol=0)
    assert_close(ca.eye(3, **kw_c), torch.eye(3, **kw_t))
    assert_close(ca.eye(2, 4, **kw_c), torch.eye(2, 4, **kw_t))


def test_constants_and_limits():
    assert (ca.pi, ca.e, ca.inf) == (torch.pi, torch.e, torch.inf)
    assert math.isnan(ca.nan)
    for name in ("float32", "float64"):
        got, want = ca.finfo(getattr(ca, name)), torch.finfo(getattr(torch, name))
        for field in ("eps", "max", "min", "tiny", "bits", "resolution", "dtype"):
            assert getattr(got, field) == getattr(want, field), (name, field)
    got, want = ca.iinfo(ca.int64), torch.iinfo(torch.int64)
    assert (got.max, got.min, got.bits, got.dtype) == (want.max, want.min, want.bits,
                                                       want.dtype)
    with pytest.raises(TypeError, match="python-api.md"):
        ca.iinfo(ca.float32)
    with pytest.raises(TypeError, match="python-api.md"):
        ca.finfo(ca.int64)


def test_settings_are_recorded():
    assert ca.are_deterministic_algorithms_enabled() is False
    ca.use_deterministic_algorithms(True, warn_only=True)
    try:
        assert ca.are_deterministic_algorithms_enabled() is True
        assert ca.is_deterministic_algorithms_warn_only_enabled() is True
    finally:
        ca.use_deterministic_algorithms(False)
    with pytest.raises(TypeError):
        ca.use_deterministic_algorithms(1)
    assert ca.get_float32_matmul_precision() == torch.get_float32_matmul_precision()
    ca.set_float32_matmul_precision("high")
    try:
        assert ca.get_float32_matmul_precision() == "high"
        with pytest.warns(UserWarning):
            ca.set_float32_matmul_precision("fastest")
        assert ca.get_float32_matmul_precision() == "high"
    finally:
        ca.set_float32_matmul_precision("highest")


@pytest.mark.parametrize("dtype", DTYPES)
def test_inplace_methods_match_torch(dtype):
    steps = [
        lambda L, x: x.clamp_(-0.5, 0.5),
        lambda L, x: x.masked_fill_(x > 0.2, 7.0),
        lambda L, x: x.exp_(),
        lambda L, x: x.sqrt_(),
        lambda L, x: x.addcmul_(x, x, value=0.5),
        lambda L, x: x.addcdiv_(x, x + 1, value=2),
        lambda L, x: x.lerp_(x * 3, 0.25),
    ]
    c, t = ca.tensor(X.astype(dtype)), torch.tensor(X.astype(dtype))
    for step in steps:
        assert step(ca, c) is c
        step(torch, t)
        assert_close(c, t)


def test_inplace_refused_on_leaf_requiring_grad():
    for step in (lambda x: x.clamp_(0, 1), lambda x: x.uniform_(), lambda x: x.normal_(),
                 lambda x: x.exp_()):
        with pytest.raises(RuntimeError, match="in-place"):
            step(ca.zeros(3, requires_grad=True))


@pytest.mark.parametrize("dtype", DTYPES)
def test_uniform_normal_draw_from_cagrad_rng(dtype):
    ca_dtype = getattr(ca, dtype)
    ca.manual_seed(5)
    drawn = ca.zeros(2000, dtype=ca_dtype).uniform_(2.0, 3.0)
    ca.manual_seed(5)
    expected = ca.rand(2000, dtype=ca_dtype) * 1.0 + 2.0
    assert_close(drawn, expected)
    values = drawn.numpy()
    assert values.min() >= 2.0 and values.max() <= 3.0
    ca.manual_seed(5)
    drawn = ca.zeros(2000, dtype=ca_dtype).normal_(1.0, 0.5)
    ca.manual_seed(5)
    assert_close(drawn, ca.randn(2000, dtype=ca_dtype) * 0.5 + 1.0)


def test_errors_match_torch():
    cases = [
        lambda L: L.roll(L.ones(3, 4), (1, 2), 0),
        lambda L: L.ones(3, 4).repeat(2),
        lambda L: L.diag(L.ones(2, 2, 2)),
        lambda L: L.trace(L.ones(3)),
        lambda L: L.broadcast_tensors(L.ones(3), L.ones(4)),
    ]
    for case in cases:
        with pytest.raises(RuntimeError):
            case(torch)
        with pytest.raises(RuntimeError):
            case(ca)


def test_var_refuses_unbiased_with_correction():
    for L in (torch, ca):
        with pytest.raises(TypeError):
            L.var(L.ones(3), unbiased=True, correction=1)


def test_creation_refuses_other_devices_and_checks_broadcast_message():
    for make in (lambda: ca.eye(2, device="cuda"), lambda: ca.linspace(0, 1, 3, device="cuda"),
                 lambda: ca.logspace(0, 1, 3, device="cuda")):
        with pytest.raises(RuntimeError):
            make()
    for shapes in ([(2, 1), (1, 3), (4, 3)], [(3,), (4,)]):
        with pytest.raises(RuntimeError) as want:
            torch.broadcast_shapes(*shapes)
        with pytest.raises(RuntimeError) as got:
            ca.broadcast_shapes(*shapes)
        assert str(got.value) == str(want.value)
    assert tuple(ca.broadcast_shapes((2, 1), (3,))) == tuple(torch.broadcast_shapes((2, 1), (3,)))


def test_negative_dims_match_torch():
    data = np.arange(12.0).reshape(3, 4)
    c, t = ca.tensor(data), torch.tensor(data)
    for fn in (lambda x: x.flip(-1), lambda x: x.roll(1, -1), lambda x: x.prod(-1),
               lambda x: x.repeat_interleave(2, -1), lambda x: x.var(-1), lambda x: x.std(-2)):
        assert_close(fn(c), fn(t))


def test_atleast_and_zero_dim_inputs_match_torch():
    scalar = np.array(2.5)
    c, t = ca.tensor(scalar), torch.tensor(scalar)
    assert_close(ca.atleast_1d(c), torch.atleast_1d(t))
    assert_close(ca.atleast_2d(c), torch.atleast_2d(t))
    for got, want in zip(ca.atleast_1d(c, ca.tensor(V)), torch.atleast_1d(t, torch.tensor(V))):
        assert_close(got, want)
    assert_close(c.prod(), t.prod())
    assert_close(c.prod(0, keepdim=True), t.prod(0, keepdim=True))
    assert_close(ca.tensor(X).var(correction=0), torch.tensor(X).var(correction=0))
