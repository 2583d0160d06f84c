"""More nn layers and functions against torch 2.13: glu, tanhshrink, threshold, Softmax2d,
channel_shuffle, local_response_norm, max_pool3d / avg_pool3d, adaptive_max_pool1d/2d
(with indices), max_unpool1d/2d, multi_margin_loss, gumbel_softmax (hard and soft),
affine_grid + grid_sample, and nn.Embedding(max_norm=...). Values and the gradients of
every floating input are compared in float32 and float64, eagerly and under compiled
autograd; gradcheck in float64; module reprs and errors as torch's."""

import warnings

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])


def F(L):
    return L.nn.functional


def ties(shape, rng):
    """Random values with repeated entries (so max ties are exercised)."""
    return np.round(rng.standard_normal(shape) * 2) / 2


# name -> (fn(L, *inputs) -> tensor or tuple, [input shapes or arrays], integer inputs)
CASES = {
    "glu": (lambda L, x: F(L).glu(x, 1), [(2, 6, 3)]),
    "glu-last": (lambda L, x: L.nn.GLU()(x), [(3, 4)]),
    "tanhshrink": (lambda L, x: L.nn.Tanhshrink()(x), [(3, 4)]),
    "threshold": (lambda L, x: F(L).threshold(x, 0.1, -2.0), [(3, 5)]),
    "threshold-module": (lambda L, x: L.nn.Threshold(-0.3, 7)(x), [(4, 3)]),
    "softmax2d": (lambda L, x: L.nn.Softmax2d()(x), [(2, 3, 2, 2)]),
    "softmax2d-3d": (lambda L, x: L.nn.Softmax2d()(x), [(3, 2, 4)]),
    "channel_shuffle": (lambda L, x: F(L).channel_shuffle(x, 3), [(2, 6, 2, 2)]),
    "channel_shuffle-module": (lambda L, x: L.nn.ChannelShuffle(2)(x), [(1, 4, 3)]),
    "lrn-3d": (lambda L, x: F(L).local_response_norm(x, 3), [(2, 5, 4)]),
    "lrn-4d": (lambda L, x: L.nn.LocalResponseNorm(2, alpha=0.1, beta=0.6, k=2.0)(x),
               [(2, 6, 3, 2)]),
    "lrn-5d": (lambda L, x: F(L).local_response_norm(x, 4, alpha=0.5), [(1, 5, 2, 2, 2)]),
    "max_pool3d": (lambda L, x: F(L).max_pool3d(x, 2, return_indices=True), ["ties5"]),
    "max_pool3d-pad": (lambda L, x: L.nn.MaxPool3d(3, 2, 1, return_indices=True)(x),
                       ["ties5"]),
    "max_pool3d-dil-ceil": (lambda L, x: F(L).max_pool3d(x, (2, 3, 2), (1, 2, 3), 0, (2, 1, 1),
                                                         True), ["ties5"]),
    "max_pool3d-unbatched": (lambda L, x: L.nn.MaxPool3d(2, 1)(x), [(2, 3, 3, 4)]),
    "avg_pool3d": (lambda L, x: F(L).avg_pool3d(x, 2), [(2, 2, 4, 5, 6)]),
    "avg_pool3d-pad-ceil": (lambda L, x: L.nn.AvgPool3d(3, 2, 1, True)(x), [(1, 2, 4, 5, 6)]),
    "avg_pool3d-nopadcount": (lambda L, x: F(L).avg_pool3d(x, 3, 2, 1, True, False),
                              [(1, 2, 4, 5, 6)]),
    "avg_pool3d-divisor": (lambda L, x: L.nn.AvgPool3d(2, 1, divisor_override=3)(x),
                           [(2, 3, 3, 4)]),
    "adaptive_max1d": (lambda L, x: F(L).adaptive_max_pool1d(x, 3, True), ["ties3"]),
    "adaptive_max1d-module": (lambda L, x: L.nn.AdaptiveMaxPool1d(4)(x), [(5, 7)]),
    "adaptive_max2d": (lambda L, x: L.nn.AdaptiveMaxPool2d((2, 3), True)(x), ["ties4"]),
    "adaptive_max2d-none": (lambda L, x: F(L).adaptive_max_pool2d(x, (3, None)), [(3, 5, 4)]),
    "adaptive_max2d-up": (lambda L, x: F(L).adaptive_max_pool2d(x, 7, True), [(1, 2, 5, 4)]),
    "unpool2d": (lambda L, x: _unpool2d(L, x, None), [(2, 2, 4, 6)]),
    "unpool2d-size": (lambda L, x: _unpool2d(L, x, (2, 2, 5, 7)), [(2, 2, 5, 7)]),
    "unpool1d": (lambda L, x: _unpool1d(L, x), [(2, 3, 8)]),
    "multi_margin": (lambda L, x: F(L).multi_margin_loss(x, L.tensor([1, 0, 3, 3])),
                     [(4, 5)]),
    "multi_margin-p2-w": (lambda L, x, w: F(L).multi_margin_loss(
        x, L.tensor([1, 0, 3, 3]), p=2, margin=0.7, weight=w, reduction="sum"),
        [(4, 5), "pos5"]),
    "multi_margin-none": (lambda L, x: L.nn.MultiMarginLoss(reduction="none")(
        x, L.tensor([2, 2, 0])), [(3, 4)]),
    "multi_margin-1d": (lambda L, x: L.nn.MultiMarginLoss(margin=2.0)(x, L.tensor(1)),
                        [(4,)]),
    "affine_grid": (lambda L, t: F(L).affine_grid(t, [2, 3, 4, 5], False), [(2, 2, 3)]),
    "affine_grid-3d": (lambda L, t: F(L).affine_grid(t, [2, 1, 3, 2, 4], True), [(2, 3, 4)]),
}
for _mode in ("bilinear", "nearest"):
    for _pad in ("zeros", "border", "reflection"):
        for _ac in (False, True):
            CASES[f"grid_sample-{_mode}-{_pad}-{_ac}"] = (
                lambda L, x, g, m=_mode, p=_pad, a=_ac: F(L).grid_sample(x, g, m, p, a),
                [(2, 3, 4, 5), "grid"])
CASES["affine+grid_sample"] = (
    lambda L, x, t: F(L).grid_sample(x, F(L).affine_grid(t, [2, 3, 3, 4], False),
                                     align_corners=False), [(2, 3, 4, 5), (2, 2, 3)])


def _unpool2d(L, x, size):
    out, idx = F(L).max_pool2d(x, 2, return_indices=True)
    return L.nn.MaxUnpool2d(2)(out * 3, idx, output_size=size)


def _unpool1d(L, x):
    out, idx = F(L).max_pool1d(x, 2, 2, return_indices=True)
    return F(L).max_unpool1d(out, idx, 2)


def make_inputs(spec, dtype, seed):
    rng = np.random.default_rng(seed)
    arrays = []
    for s in spec:
        if s == "ties5":
            a = ties((2, 2, 4, 5, 6), rng)
        elif s == "ties4":
            a = ties((2, 3, 5, 7), rng)
        elif s == "ties3":
            a = ties((2, 3, 8), rng)
        elif s == "pos5":
            a = rng.uniform(0.5, 2.0, 5)
        elif s == "grid":
            a = rng.uniform(-1.3, 1.3, (2, 3, 6, 2))
        else:
            a = rng.standard_normal(s)
        arrays.append(a.astype(dtype))
    return arrays


def run_case(L, name, dtype, compiled, seed=0):
    fn, spec = CASES[name]
    inputs = [L.tensor(a, requires_grad=s != "pos5")  # (multi_margin's weight: no grad)
              for a, s in zip(make_inputs(spec, dtype, seed), spec)]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = fn(L, *inputs)
    outs = list(out) if isinstance(out, tuple) else [out]
    floats = [o for o in outs if o.dtype.is_floating_point]
    rng = np.random.default_rng(100)
    loss = sum((o * L.tensor(rng.standard_normal(tuple(o.shape)).astype(dtype))).sum()
               for o in floats)
    if L is ca:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    else:
        loss.backward()
    return outs + [t.grad for t in inputs]


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", list(CASES))
def test_matches_torch(name, dtype, compiled):
    got = run_case(ca, name, dtype, compiled)
    want = run_case(torch, name, dtype, False)
    tol = TOL_SUM[dtype] if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, **tol, msg=f"{name} result {i}")


GRADCHECK = ["glu", "tanhshrink", "threshold", "softmax2d", "channel_shuffle", "lrn-4d",
             "max_pool3d-pad", "avg_pool3d-pad-ceil", "adaptive_max2d", "unpool2d",
             "multi_margin-p2-w", "affine_grid-3d", "grid_sample-bilinear-zeros-False",
             "grid_sample-bilinear-reflection-True", "grid_sample-bilinear-border-False"]


@pytest.mark.parametrize("name", GRADCHECK)
def test_gradcheck_float64(name):
    fn, spec = CASES[name]
    rng = np.random.default_rng(1)
    arrays = make_inputs(spec, "float64", 1)
    if name.startswith(("max_pool", "adaptive_max", "unpool")):
        arrays = [rng.permutation(a.size).reshape(a.shape) / a.size for a in arrays]  # no ties
    inputs = [ca.tensor(a, requires_grad=s != "pos5") for a, s in zip(arrays, spec)]

    def f(*xs):
        out = fn(ca, *xs)
        return tuple(o for o in (out if isinstance(out, tuple) else (out,))
                     if o.dtype.is_floating_point)
    assert ca.autograd.gradcheck(f, tuple(inputs), eps=1e-6, atol=1e-5)


def test_module_reprs_match_torch():
    def mods(L):
        nn = L.nn
        return [nn.GLU(), nn.GLU(1), nn.Tanhshrink(), nn.Threshold(0.1, 20),
                nn.Threshold(0.1, 2.5, True), nn.Softmax2d(), nn.ChannelShuffle(2),
                nn.LocalResponseNorm(3), nn.MaxPool3d(2),
                nn.MaxPool3d((2, 1, 2), stride=1, padding=1, dilation=2, return_indices=True,
                             ceil_mode=True),
                nn.AvgPool3d(2), nn.AvgPool3d(3, 2, 1, True, False, 2), nn.AdaptiveMaxPool1d(3),
                nn.AdaptiveMaxPool2d((2, None), True), nn.MaxUnpool1d(2),
                nn.MaxUnpool2d(2, 1, 1), nn.MultiMarginLoss(p=2, margin=0.5)]
    assert [repr(m) for m in mods(ca)] == [repr(m) for m in mods(torch)]
    assert list(ca.nn.MultiMarginLoss()._buffers) == ["weight"]


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.glu(L.zeros(3, 5)),
    lambda L: L.nn.functional.glu(L.tensor(1.0)),
    lambda L: L.nn.functional.channel_shuffle(L.zeros(1, 5, 2), 2),
    lambda L: L.nn.functional.channel_shuffle(L.zeros(1, 4, 2), 0),
    lambda L: L.nn.functional.channel_shuffle(L.zeros(4, 2), 2),
    lambda L: L.nn.functional.local_response_norm(L.zeros(4, 2), 2),
    lambda L: L.nn.Softmax2d()(L.zeros(4, 2)),
    lambda L: L.nn.functional.max_pool3d(L.zeros(1, 1, 4, 4, 4), 3, padding=2),
    lambda L: L.nn.functional.max_pool3d(L.zeros(1, 1, 2, 2, 2), 3),
    lambda L: L.nn.functional.avg_pool3d(L.zeros(1, 1, 2, 2, 2), 2, divisor_override=0),
    lambda L: L.nn.functional.multi_margin_loss(L.zeros(2, 3), L.tensor([0, 1]), p=3),
    lambda L: L.nn.functional.multi_margin_loss(L.zeros(2, 3), L.tensor([0, 1]),
                                                weight=L.ones(1, 3)),
    lambda L: L.nn.MultiMarginLoss(weight=L.ones(1, 3)),
    lambda L: L.nn.functional.max_unpool2d(L.zeros(1, 1, 2, 2), L.zeros(1, 1, 2, 2).long(), 2,
                                           output_size=(9, 9)),
    lambda L: L.nn.functional.max_unpool2d(L.zeros(1, 1, 2, 2), L.full((1, 1, 2, 2), 20), 2),
    lambda L: L.nn.functional.affine_grid(L.zeros(1, 2, 3), [1, 1, 2]),
    lambda L: L.nn.functional.affine_grid(L.zeros(1, 3, 3), [1, 1, 2, 2]),
    lambda L: L.nn.functional.affine_grid(L.zeros(1, 2, 3), [1, 1, 0, 2], False),
    lambda L: L.nn.functional.grid_sample(L.zeros(1, 1, 2, 2), L.zeros(1, 2, 2, 2), "cubic"),
    lambda L: L.nn.functional.grid_sample(L.zeros(1, 1, 2, 2), L.zeros(1, 2, 2, 2),
                                          padding_mode="wrap"),
], ids=["glu-odd", "glu-scalar", "shuffle-divisible", "shuffle-groups", "shuffle-dims",
        "lrn-dims", "softmax2d-dims", "pool-pad", "pool-too-small", "avg-divisor", "margin-p",
        "margin-weight", "margin-module-weight", "unpool-size", "unpool-index",
        "affine-size", "affine-theta", "affine-zero", "grid-mode", "grid-padding"])
def test_errors(make):
    got, want = error_of(ca, make), error_of(torch, make)
    assert got[0] is want[0], (got, want)
    assert got[1].replace("cagrad.", "torch.") == want[1]


def test_threshold_inplace_outside_autograd():
    for L in (ca, torch):
        x = L.tensor([-1.0, 0.5, 2.0])
        assert F(L).threshold(x, 0.6, 9.0, inplace=True) is x
        assert x.tolist() == [9.0, 9.0, 2.0]
        y = L.tensor([0.0, 1.0])
        F(L).threshold_(y, 0.5, -1.0)
        L.nn.Threshold(0.5, 3.0, inplace=True)(y)
        assert y.tolist() == [3.0, 1.0]


def test_unsupported_grid_sample_modes_are_named():
    with pytest.raises(NotImplementedError, match="bicubic.*python-api.md"):
        F(ca).grid_sample(ca.zeros(1, 1, 2, 2), ca.zeros(1, 2, 2, 2), "bicubic",
                          align_corners=False)
    with pytest.raises(NotImplementedError, match="5-D input"):
        F(ca).grid_sample(ca.zeros(1, 1, 2, 2, 2), ca.zeros(1, 2, 2, 2, 3),
                          align_corners=False)


def test_align_corners_default_warns():
    for fn in (lambda L: F(L).affine_grid(L.zeros(1, 2, 3), [1, 1, 2, 2]),
               lambda L: F(L).grid_sample(L.zeros(1, 1, 2, 2), L.zeros(1, 2, 2, 2))):
        for L in (ca, torch):
            with pytest.warns(UserWarning, match="align_corners=False since 1.3.0"):
                fn(L)


# --- gumbel_softmax ----------------------------------------------------------------------

@COMPILED
@DTYPE
@pytest.mark.parametrize("hard", [False, True])
def test_gumbel_softmax_matches_torch_given_the_same_noise(hard, dtype, compiled):
    """cagrad's noise is redrawn from the same seed and handed to torch's formula (the two
    libraries' generators differ); values and the straight-through gradient must agree."""
    x_np = np.random.default_rng(0).standard_normal((4, 6)).astype(dtype)
    w_np = np.random.default_rng(1).standard_normal((4, 6)).astype(dtype)
    x = ca.tensor(x_np, requires_grad=True)
    ca.manual_seed(5)
    out = F(ca).gumbel_softmax(x, tau=0.5, hard=hard, dim=1)
    with compiled_ctx(compiled):
        backward_checked((out * ca.tensor(w_np)).sum(), compiled)
    ca.manual_seed(5)
    noise = -ca.zeros(4, 6, dtype=getattr(ca, dtype)).exponential_().log()
    xt = torch.tensor(x_np, requires_grad=True)
    soft = ((xt + torch.tensor(to_np(noise))) / 0.5).softmax(1)
    if hard:
        one_hot = torch.zeros_like(soft).scatter_(1, soft.argmax(1, keepdim=True), 1.0)
        ref = one_hot - soft.detach() + soft
    else:
        ref = soft
    (ref * torch.tensor(w_np)).sum().backward()
    assert_close(out, ref, **TOL_SUM[dtype])
    assert_close(x.grad, xt.grad, **(TOL_SUM[dtype] if dtype == "float64"
                                     else dict(rtol=1e-4, atol=1e-5)))
    if hard:
        assert sorted(set(to_np(out).reshape(-1).round(6).tolist())) == [0.0, 1.0]


def test_gumbel_softmax_statistics_and_eps_warning():
    ca.manual_seed(0)
    logits = ca.tensor([[0.0, 1.0, 2.0]]).expand(4000, 3)
    picks = F(ca).gumbel_softmax(logits, hard=True).sum(0) / 4000
    expected = torch.tensor([0.0, 1.0, 2.0]).softmax(0)
    np.testing.assert_allclose(to_np(picks), to_np(expected), atol=0.03)
    with pytest.warns(UserWarning, match="`eps` parameter is deprecated"):
        F(ca).gumbel_softmax(logits, eps=1e-5)


# --- Embedding(max_norm) ---------------------------------------------------------------------

def embedding_run(L, dtype, compiled, norm_type):
    weight = np.random.default_rng(0).standard_normal((6, 3)).astype(dtype) * 2
    emb = L.nn.Embedding(6, 3, max_norm=1.5, norm_type=norm_type, dtype=getattr(L, dtype))
    with L.no_grad():
        emb.weight.copy_(L.tensor(weight))
    idx = L.tensor([[1, 3, 1], [0, 5, 3]])
    out = emb(idx)
    w = L.tensor(np.random.default_rng(2).standard_normal((2, 3, 3)).astype(dtype))
    loss = (out * w).sum()
    if L is ca:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    else:
        loss.backward()
    out2 = F(L).embedding(L.tensor([2, 4]), emb.weight, max_norm=0.5)
    return [out, emb.weight, emb.weight.grad, out2]


@COMPILED
@DTYPE
@pytest.mark.parametrize("norm_type", [2.0, 1.0])
def test_embedding_max_norm_renormalises_in_place(dtype, compiled, norm_type):
    got = embedding_run(ca, dtype, compiled, norm_type)
    want = embedding_run(torch, dtype, False, norm_type)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, **TOL_SUM[dtype], msg=f"result {i}")
