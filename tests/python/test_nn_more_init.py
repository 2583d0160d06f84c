"""nn.init's kaiming_normal_, xavier_normal_, trunc_normal_, orthogonal_, eye_, dirac_,
sparse_ and generator= against torch 2.13. The random streams differ, so the draws are
checked against PyTorch's formulas (the std of each fan mode and gain, the truncated
normal's moments, orthogonality) on large tensors, with statistical tolerances several
standard errors wide; torch's own draws are held to the same checks, so the formulas are
the ones torch uses. The deterministic fills (eye_, dirac_) and errors match exactly."""

import math
import warnings

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, to_np


def draws(name, shape, dtype="float32", **kwargs):
    """(cagrad values, torch values) of init.<name> on fresh tensors of shape."""
    c = ca.empty(*shape, dtype=getattr(ca, dtype))
    t = torch.empty(*shape, dtype=getattr(torch, dtype))
    assert getattr(ca.nn.init, name)(c, **kwargs) is c  # in place, returns its argument
    getattr(torch.nn.init, name)(t, **kwargs)
    return to_np(c).astype(np.float64), to_np(t).astype(np.float64)


def assert_moments(values, mean, std, msg):
    """Sample mean and std within 6 standard errors of (mean, std)."""
    n = values.size
    assert abs(values.mean() - mean) < 6 * std / math.sqrt(n), msg
    assert abs(values.std() - std) < 6 * std / math.sqrt(2 * n), msg


def torch_fans(shape):
    return torch.nn.init._calculate_fan_in_and_fan_out(torch.empty(shape))


@pytest.mark.parametrize("shape", [(300, 400), (64, 32, 3, 3)])
@pytest.mark.parametrize("mode", ["fan_in", "fan_out"])
@pytest.mark.parametrize("nonlinearity, a", [("leaky_relu", 0), ("leaky_relu", 0.2),
                                             ("relu", 0), ("tanh", 0), ("linear", 0)])
def test_kaiming_normal_std_follows_the_fan_and_gain(shape, mode, nonlinearity, a):
    fan_in, fan_out = torch_fans(shape)
    gain = torch.nn.init.calculate_gain(nonlinearity, a)
    std = gain / math.sqrt(fan_in if mode == "fan_in" else fan_out)
    ours, theirs = draws("kaiming_normal_", shape, a=a, mode=mode, nonlinearity=nonlinearity)
    assert_moments(theirs, 0.0, std, "torch")
    assert_moments(ours, 0.0, std, "cagrad")


@pytest.mark.parametrize("shape, gain", [((300, 400), 1.0), ((64, 32, 3, 3), 2.5)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_xavier_normal_std(shape, gain, dtype):
    fan_in, fan_out = torch_fans(shape)
    std = gain * math.sqrt(2.0 / (fan_in + fan_out))
    ours, theirs = draws("xavier_normal_", shape, dtype, gain=gain)
    assert_moments(theirs, 0.0, std, "torch")
    assert_moments(ours, 0.0, std, "cagrad")


def truncated_moments(mean, std, a, b):
    """Mean and std of N(mean, std**2) truncated to [a, b]."""
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = [math.exp(-z * z / 2) / math.sqrt(2 * math.pi) for z in (alpha, beta)]
    mass = (math.erf(beta / math.sqrt(2)) - math.erf(alpha / math.sqrt(2))) / 2
    shift = (pdf[0] - pdf[1]) / mass
    var = 1 + (alpha * pdf[0] - beta * pdf[1]) / mass - shift**2
    return mean + std * shift, std * math.sqrt(var)


@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (0.5, 2.0, -1.0, 1.5),
                                             (0.0, 0.02, -0.04, 0.04), (1.0, 1.0, 1.5, 4.0)])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_trunc_normal_bounds_and_moments(mean, std, a, b, dtype):
    want_mean, want_std = truncated_moments(mean, std, a, b)
    ours, theirs = draws("trunc_normal_", (200, 300), dtype, mean=mean, std=std, a=a, b=b)
    for values, who in ((theirs, "torch"), (ours, "cagrad")):
        assert values.min() >= a and values.max() <= b, who
        assert_moments(values, want_mean, want_std, who)


def test_trunc_normal_defaults_and_far_mean_warning():
    ours, _ = draws("trunc_normal_", (100, 100))
    assert ours.min() >= -2 and ours.max() <= 2
    for lib in (torch, ca):
        with pytest.warns(UserWarning, match="mean is more than 2 std from"):
            lib.nn.init.trunc_normal_(lib.empty(3), mean=10.0)


@pytest.mark.parametrize("shape", [(30, 50), (50, 30), (8, 4, 3, 3), (6, 6)])
@pytest.mark.parametrize("gain", [1.0, 2.0])
def test_orthogonal_rows_or_columns_are_orthonormal(shape, gain):
    for values in draws("orthogonal_", shape, "float64", gain=gain):
        flat = values.reshape(shape[0], -1)
        small = flat @ flat.T if flat.shape[0] <= flat.shape[1] else flat.T @ flat
        np.testing.assert_allclose(small, gain**2 * np.eye(len(small)), atol=1e-10)


@pytest.mark.parametrize("shape", [(3, 5), (5, 3), (4, 4)])
def test_eye_matches_torch(shape):
    c, t = ca.empty(*shape), torch.empty(*shape)
    assert_close(ca.nn.init.eye_(c), torch.nn.init.eye_(t))


@pytest.mark.parametrize("shape, groups", [((4, 3, 5), 1), ((6, 2, 3, 3), 2),
                                           ((4, 6, 2, 3), 1), ((6, 2, 3, 3, 3), 3),
                                           ((2, 5, 4, 4), 2)])
def test_dirac_matches_torch(shape, groups):
    c, t = ca.empty(*shape), torch.empty(*shape)
    assert_close(ca.nn.init.dirac_(c, groups), torch.nn.init.dirac_(t, groups))


@pytest.mark.parametrize("sparsity, std", [(0.1, 0.01), (0.5, 1.0), (0.0, 0.3)])
def test_sparse_zeroes_a_fixed_count_per_column(sparsity, std):
    rows, cols = 40, 500
    for values in draws("sparse_", (rows, cols), sparsity=sparsity, std=std):
        zeros = (values == 0).sum(axis=0)
        assert (zeros == math.ceil(sparsity * rows)).all()
        assert_moments(values[values != 0], 0.0, std, "nonzeros")


@pytest.mark.parametrize("name, kwargs", [
    ("uniform_", {}), ("normal_", dict(std=2.0)), ("xavier_uniform_", {}),
    ("xavier_normal_", {}), ("kaiming_uniform_", {}), ("kaiming_normal_", dict(mode="fan_out")),
    ("trunc_normal_", dict(a=-0.5, b=1.0)), ("orthogonal_", dict(gain=0.5)),
    ("sparse_", dict(sparsity=0.25)),
])
def test_generator_makes_draws_reproducible(name, kwargs):
    def fill(seed):
        if name == "sparse_":
            ca.manual_seed(0)  # its zero positions come from the default generator
        gen = ca.Generator().manual_seed(seed)
        return to_np(getattr(ca.nn.init, name)(ca.empty(8, 6), generator=gen, **kwargs))
    np.testing.assert_array_equal(fill(5), fill(5))
    assert not np.array_equal(fill(5), fill(6))


def test_generator_draws_have_the_distribution():
    gen = ca.Generator().manual_seed(3)
    values = to_np(ca.nn.init.kaiming_normal_(ca.empty(300, 400), generator=gen))
    assert_moments(values.astype(np.float64), 0.0, math.sqrt(2 / 400), "generator")


def test_zero_element_kaiming_normal_warns_and_leaves_it():
    for lib in (torch, ca):
        with pytest.warns(UserWarning, match="Initializing zero-element tensors is a no-op"):
            out = lib.nn.init.kaiming_normal_(lib.empty(0, 3))
        assert tuple(out.shape) == (0, 3)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.init.kaiming_normal_(L.empty(3, 4), mode="fan_avg"),
    lambda L: L.nn.init.kaiming_normal_(L.empty(3, 4), nonlinearity="swish"),
    lambda L: L.nn.init.xavier_normal_(L.empty(3)),
    lambda L: L.nn.init.orthogonal_(L.empty(3)),
    lambda L: L.nn.init.eye_(L.empty(2, 3, 4)),
    lambda L: L.nn.init.dirac_(L.empty(2, 3)),
    lambda L: L.nn.init.dirac_(L.empty(3, 3, 3), groups=2),
    lambda L: L.nn.init.sparse_(L.empty(2, 3, 4), 0.5),
])
def test_init_errors_match_torch(make):
    with pytest.raises(Exception) as want:
        make(torch)
    with pytest.raises(type(want.value)) as got:
        make(ca)
    assert str(got.value) == str(want.value)


def test_init_leaves_no_graph_on_parameters():
    weight = ca.nn.Parameter(ca.empty(5, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for fill in (ca.nn.init.kaiming_normal_, ca.nn.init.orthogonal_,
                     ca.nn.init.trunc_normal_, ca.nn.init.xavier_normal_):
            fill(weight)
            assert weight.is_leaf and weight.requires_grad and weight.grad_fn is None
