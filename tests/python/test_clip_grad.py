"""cagrad.nn.utils: clip_grad_norm_ (every norm order), clip_grad_value_, get_total_norm,
clip_grads_with_norm_, parameters_to_vector and vector_to_parameters against torch."""

import math
import warnings

import numpy as np
import pytest
import torch

from helpers import TOL_SUM, assert_close, ca, to_np

SHAPES = [(3, 4), (5,), (2, 2, 2)]


def params_with_grads(L, dtype, scale=1.0, seed=0):
    r = np.random.default_rng(seed)
    params = []
    for shape in SHAPES:
        p = L.nn.Parameter(L.tensor(r.standard_normal(shape), dtype=getattr(L, dtype)))
        p.grad = L.tensor(r.standard_normal(shape) * scale, dtype=getattr(L, dtype))
        params.append(p)
    params.append(L.nn.Parameter(L.ones(2, dtype=getattr(L, dtype))))  # no grad: skipped
    return params


def assert_grads_match(c_params, t_params, dtype):
    for cp, tp in zip(c_params, t_params):
        assert_close(cp.grad, tp.grad, **TOL_SUM[dtype])


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("norm_type", [2.0, 1, 3.5, 0.5, math.inf, -math.inf, 0])
@pytest.mark.parametrize("max_norm", [0.5, 1e4])  # clipping and a no-op (coefficient 1)
def test_clip_grad_norm_matches_torch(dtype, norm_type, max_norm):
    c_params, t_params = params_with_grads(ca, dtype), params_with_grads(torch, dtype)
    c_norm = ca.nn.utils.clip_grad_norm_(c_params, max_norm, norm_type=norm_type)
    t_norm = torch.nn.utils.clip_grad_norm_(t_params, max_norm, norm_type=norm_type)
    assert_close(c_norm, t_norm, **TOL_SUM[dtype])
    assert_grads_match(c_params, t_params, dtype)


def test_clip_grad_norm_single_tensor_and_mixed_dtypes():
    for L in (ca, torch):
        p = L.nn.Parameter(L.ones(3))
        p.grad = L.full((3,), 2.0)
        q = L.nn.Parameter(L.ones(2, dtype=L.float64))
        q.grad = L.full((2,), 3.0, dtype=L.float64)
        if L is ca:
            c_single = ca.nn.utils.clip_grad_norm_(p, 1.0)
            c_mixed = ca.nn.utils.clip_grad_norm_([p, q], 1.0)
            c_grads = (p.grad, q.grad)
        else:
            t_single = torch.nn.utils.clip_grad_norm_(p, 1.0)
            t_mixed = torch.nn.utils.clip_grad_norm_([p, q], 1.0)
            t_grads = (p.grad, q.grad)
    assert_close(c_single, t_single)
    assert_close(c_mixed, t_mixed)
    for c, t in zip(c_grads, t_grads):
        assert_close(c, t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_get_total_norm_and_clip_grads_with_norm(dtype):
    c_params, t_params = params_with_grads(ca, dtype, 3.0), params_with_grads(torch, dtype, 3.0)
    c_total = ca.nn.utils.get_total_norm([p.grad for p in c_params if p.grad is not None], 3.0)
    t_total = torch.nn.utils.get_total_norm([p.grad for p in t_params if p.grad is not None], 3.0)
    assert_close(c_total, t_total, **TOL_SUM[dtype])
    ca.nn.utils.clip_grads_with_norm_(c_params, 2.0, c_total)
    torch.nn.utils.clip_grads_with_norm_(t_params, 2.0, t_total)
    assert_grads_match(c_params, t_params, dtype)
    assert_close(ca.nn.utils.get_total_norm([]), torch.nn.utils.get_total_norm([]))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_clip_grad_value_matches_torch(dtype):
    c_params, t_params = params_with_grads(ca, dtype), params_with_grads(torch, dtype)
    assert ca.nn.utils.clip_grad_value_(c_params, 0.7) is None
    torch.nn.utils.clip_grad_value_(t_params, 0.7)
    assert_grads_match(c_params, t_params, dtype)


def test_nonfinite_norm_error_and_scaling():
    messages = []
    for L in (ca, torch):
        p = L.nn.Parameter(L.ones(2))
        p.grad = L.tensor([float("inf"), 1.0])
        with pytest.raises(RuntimeError) as err:
            L.nn.utils.clip_grad_norm_([p], 1.0, error_if_nonfinite=True)
        messages.append(str(err.value))
        norm = L.nn.utils.clip_grad_norm_([p], 1.0)  # scales by the infinite norm anyway
        messages.append((float(norm), to_np(p.grad)))
    assert messages[0] == messages[2]
    assert messages[1][0] == messages[3][0] == math.inf
    np.testing.assert_array_equal(messages[1][1], messages[3][1])  # [nan, 0]: nan == nan


@pytest.mark.parametrize("foreach", [True, False])
def test_foreach_flag_gives_torch_values(foreach):
    c_params, t_params = params_with_grads(ca, "float32"), params_with_grads(torch, "float32")
    c_norm = ca.nn.utils.clip_grad_norm_(c_params, 0.3, foreach=foreach)
    t_norm = torch.nn.utils.clip_grad_norm_(t_params, 0.3, foreach=foreach)
    assert_close(c_norm, t_norm, **TOL_SUM["float32"])
    ca.nn.utils.clip_grad_value_(c_params, 0.01, foreach=foreach)
    torch.nn.utils.clip_grad_value_(t_params, 0.01, foreach=foreach)
    assert_grads_match(c_params, t_params, "float32")


def test_empty_generator_warns_and_deprecated_alias():
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="empty generator"):
            norm = L.nn.utils.clip_grad_norm_((p for p in []), 1.0)
        assert float(norm) == 0.0
        p = L.nn.Parameter(L.ones(4))
        p.grad = L.full((4,), 2.0)
        with pytest.warns(FutureWarning, match="clip_grad_norm_"):
            assert abs(float(L.nn.utils.clip_grad_norm(p, 1.0)) - 4.0) < 1e-6
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ca.nn.utils.clip_grad_norm_([], 1.0)  # an empty list is no generator: no warning


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_parameters_to_vector_and_back(dtype):
    c_params, t_params = params_with_grads(ca, dtype), params_with_grads(torch, dtype)
    c_vec = ca.nn.utils.parameters_to_vector(c_params)
    t_vec = torch.nn.utils.parameters_to_vector(t_params)
    assert_close(c_vec, t_vec)
    (c_vec * c_vec).sum().backward()  # differentiable, as torch.cat of views is
    (t_vec * t_vec).sum().backward()
    assert_grads_match(c_params, t_params, dtype)
    new = np.arange(t_vec.numel(), dtype=to_np(t_vec).dtype)
    ca.nn.utils.vector_to_parameters(ca.tensor(new), c_params)
    torch.nn.utils.vector_to_parameters(torch.tensor(new), t_params)
    for cp, tp in zip(c_params, t_params):
        assert_close(cp, tp)
    with pytest.raises(TypeError, match="expected torch.Tensor, but got: list"):
        ca.nn.utils.vector_to_parameters([1.0], c_params)
