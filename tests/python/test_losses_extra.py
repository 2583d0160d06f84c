"""cross_entropy's class weights, label smoothing and probability targets, the weighted
nll_loss, and the margin / embedding / likelihood losses (nn/_losses_extra.py) with their
modules, against torch 2.13: values and gradients in float32/float64, eager and compiled
(no eager fallback), float64 gradients against finite differences, argument errors."""

import math
import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)
REDUCTIONS = ["none", "mean", "sum"]


def _f(name, **kw):
    return lambda L, *a: getattr(L.nn.functional, name)(*a, **kw)


def _ce_cases(rng):
    """cross_entropy / nll_loss with the options that used to raise NotImplementedError."""
    x = rng.standard_normal((5, 4))
    t = np.array([0, 3, -100, 2, 3])
    w = rng.uniform(0.5, 2.0, 4)
    x4 = rng.standard_normal((2, 4, 3, 2))
    t4 = rng.integers(0, 4, (2, 3, 2))
    t4[0, 1, 0] = -100
    t4_ignore3 = np.where(t4 == -100, 3, t4)
    p = rng.dirichlet(np.ones(4), 5)
    p4 = rng.uniform(0, 1, (2, 4, 3, 2))
    out = {}
    for red in REDUCTIONS:
        out.update({
            f"ce_weight_{red}": (_f("cross_entropy", reduction=red), [x, t, w], [0]),
            f"ce_weight_smooth_{red}": (_f("cross_entropy", reduction=red, label_smoothing=0.2),
                                        [x, t, w], [0]),
            f"ce_smooth_{red}": (_f("cross_entropy", reduction=red, label_smoothing=0.3),
                                 [x, t], [0]),
            f"ce_4d_weight_smooth_ignore_{red}": (
                _f("cross_entropy", reduction=red, label_smoothing=0.2, ignore_index=3),
                [x4, t4_ignore3, w], [0]),
            f"ce_prob_{red}": (_f("cross_entropy", reduction=red), [x, p], [0, 1]),
            f"ce_prob_4d_weight_smooth_{red}": (
                _f("cross_entropy", reduction=red, label_smoothing=0.1), [x4, p4, w], [0, 1, 2]),
            f"ce_1d_smooth_weight_{red}": (_f("cross_entropy", reduction=red, label_smoothing=0.3),
                                           [x[0], np.array(2), w], [0]),
            f"ce_1d_prob_{red}": (_f("cross_entropy", reduction=red, label_smoothing=0.3),
                                  [x[0], p[0]], [0, 1]),
            f"nll_weight_4d_{red}": (_f("nll_loss", reduction=red), [x4, t4, w], [0]),
        })
    return out


def _loss_cases(rng):
    x, y = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    z = rng.standard_normal((4, 5))
    s1, s2 = rng.standard_normal(6), rng.standard_normal(6)
    signs6 = np.where(rng.standard_normal(6) > 0, 1.0, -1.0)
    signs4 = np.array([1.0, -1.0, -1.0, 1.0])
    signs45 = np.where(rng.standard_normal((4, 5)) > 0, 1.0, -1.0)
    labels = (rng.uniform(0, 1, (4, 5)) > 0.5).astype(np.float64)
    var = rng.uniform(0.2, 2.0, (4, 5))
    counts = rng.integers(0, 5, (4, 5)).astype(np.float64)
    rates = rng.uniform(0.2, 3.0, (4, 5))
    cw = rng.uniform(0.5, 2.0, 5)
    out = {}
    for red in REDUCTIONS:
        out.update({
            f"margin_ranking_{red}": (_f("margin_ranking_loss", margin=0.3, reduction=red),
                                      [s1, s2, signs6], [0, 1]),
            f"hinge_embedding_{red}": (_f("hinge_embedding_loss", margin=0.7, reduction=red),
                                       [x, signs45], [0]),
            f"multilabel_soft_margin_{red}": (_f("multilabel_soft_margin_loss", reduction=red),
                                              [x, labels], [0]),
            f"cosine_embedding_{red}": (_f("cosine_embedding_loss", margin=0.1, reduction=red),
                                        [x, y, signs4], [0, 1]),
            f"triplet_{red}": (_f("triplet_margin_loss", margin=2.0, reduction=red),
                               [x, y, z], [0, 1, 2]),
            f"gaussian_nll_{red}": (_f("gaussian_nll_loss", reduction=red), [x, y, var],
                                    [0, 1, 2]),
            f"poisson_nll_{red}": (_f("poisson_nll_loss", reduction=red), [x, counts], [0]),
        })
    out.update({
        "multilabel_soft_margin_weight": (
            lambda L, a, b, c: L.nn.functional.multilabel_soft_margin_loss(a, b, weight=c),
            [x, labels, cw], [0]),
        "cosine_embedding_1d": (_f("cosine_embedding_loss"), [s1, s2, np.array(-1.0)], [0, 1]),
        "triplet_swap_p1": (_f("triplet_margin_loss", margin=1.5, p=1, swap=True),
                            [x, y, z], [0, 1, 2]),
        "triplet_with_distance": (
            lambda L, a, b, c: L.nn.functional.triplet_margin_with_distance_loss(
                a, b, c, distance_function=lambda u, v: 1 - L.nn.functional.cosine_similarity(
                    u, v), margin=0.5, swap=True), [x, y, z], [0, 1, 2]),
        "gaussian_nll_full_var_last_dim": (
            _f("gaussian_nll_loss", full=True), [x, y, var[:, :1]], [0, 1, 2]),
        "gaussian_nll_var_dropped_dim": (
            _f("gaussian_nll_loss", reduction="sum"), [x, y, var[:, 0]], [0, 1, 2]),
        "gaussian_nll_float_var": (_f("gaussian_nll_loss"), [x, y], [0, 1]),
        "poisson_nll_rates_full": (_f("poisson_nll_loss", log_input=False, full=True),
                                   [rates, counts], [0]),
        "poisson_nll_log_full_sum": (_f("poisson_nll_loss", full=True, reduction="sum"),
                                     [x, counts], [0]),
        # torch differentiates the target too (its loss is a composite); targets kept off 0,
        # where torch's 0 * log(0) gives a NaN gradient
        "poisson_nll_full_target_grad": (_f("poisson_nll_loss", full=True),
                                         [x, rates + 0.5], [0, 1]),
        "margin_ranking_target_grad": (_f("margin_ranking_loss", margin=0.3),
                                       [s1, s2, 0.5 * signs6], [0, 1, 2]),
    })
    return out


def cases(rng):
    return {**_ce_cases(rng), **_loss_cases(rng)}


NAMES = sorted(cases(np.random.default_rng(0)))


def _call(name, rng):
    """(fn, inputs, indices to differentiate); weights go positionally (third argument)."""
    fn, inputs, needs_grad = cases(rng)[name]
    if name == "gaussian_nll_float_var":
        return (lambda L, a, b: L.nn.functional.gaussian_nll_loss(a, b, 0.7)), inputs, needs_grad
    return fn, inputs, needs_grad


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", NAMES)
def test_loss_matches_torch(name, dtype, compiled, rng):
    fn, inputs, needs_grad = _call(name, rng)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_against_torch(fn, inputs, dtype, compiled, needs_grad, msg=name)


GRADCHECK = ["ce_weight_mean", "ce_weight_smooth_mean", "ce_4d_weight_smooth_ignore_sum",
             "ce_prob_4d_weight_smooth_mean", "nll_weight_4d_mean", "margin_ranking_mean",
             "hinge_embedding_sum", "multilabel_soft_margin_weight", "cosine_embedding_none",
             "triplet_swap_p1", "gaussian_nll_full_var_last_dim", "poisson_nll_rates_full",
             "poisson_nll_log_full_sum", "poisson_nll_full_target_grad"]


@COMPILED
@pytest.mark.parametrize("name", GRADCHECK)
def test_loss_gradcheck_float64(name, compiled, rng):
    fn, inputs, needs_grad = _call(name, rng)
    check_numeric_gradient(fn, inputs, compiled, needs_grad)


def test_all_ignored_weighted_mean_is_nan():
    for L in (ca, torch):
        x = L.tensor([[0.1, 0.2, 0.3]])
        out = L.nn.functional.cross_entropy(x, L.tensor([-100]), weight=L.tensor([1.0, 2, 3]))
        assert math.isnan(float(out))


def test_modules_match_torch(rng):
    x = rng.standard_normal((5, 4))
    t = np.array([0, 3, 1, 2, 3])
    w = rng.uniform(0.5, 2.0, 4)
    for make in (lambda L: L.nn.CrossEntropyLoss(weight=L.tensor(w), label_smoothing=0.1),
                 lambda L: L.nn.NLLLoss(weight=L.tensor(w), reduction="sum"),
                 lambda L: L.nn.CrossEntropyLoss(label_smoothing=0.25, reduction="none")):
        check_against_torch(lambda L, a, b: make(L)(a, b), [x, t], "float64", needs_grad=[0])
    mods = {"CrossEntropyLoss": (ca.nn.CrossEntropyLoss(weight=ca.tensor(w)),
                                 torch.nn.CrossEntropyLoss(weight=torch.tensor(w)))}
    for c_mod, t_mod in mods.values():
        assert list(c_mod.state_dict()) == list(t_mod.state_dict()) == ["weight"]


MODULES = {
    "MarginRankingLoss": (dict(margin=0.2), 3),
    "HingeEmbeddingLoss": (dict(margin=0.5, reduction="sum"), 2),
    "MultiLabelSoftMarginLoss": (dict(reduction="none"), 2),
    "CosineEmbeddingLoss": (dict(margin=0.1), 3),
    "TripletMarginLoss": (dict(margin=1.5, p=1.0, swap=True), 3),
    "TripletMarginWithDistanceLoss": (dict(margin=0.5), 3),
    "GaussianNLLLoss": (dict(full=True, eps=1e-3), 3),
    "PoissonNLLLoss": (dict(log_input=True, full=True), 2),
    "SoftMarginLoss": (dict(), 2),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_loss_modules_match_torch(name, rng):
    kwargs, n_inputs = MODULES[name]
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((4, 5))
    signs = np.array([1.0, -1.0, 1.0, -1.0])
    third = {"MarginRankingLoss": signs, "CosineEmbeddingLoss": signs,
             "GaussianNLLLoss": rng.uniform(0.1, 2.0, (4, 5))}.get(
                 name, rng.standard_normal((4, 5)))
    if name == "MarginRankingLoss":
        a, b = a[:, 0], b[:, 0]
    if name in ("HingeEmbeddingLoss", "SoftMarginLoss"):
        b = np.sign(b)
    if name == "MultiLabelSoftMarginLoss":
        b = (b > 0).astype(np.float64)
    if name == "PoissonNLLLoss":
        b = np.abs(np.round(3 * b))
    inputs = [a, b, third][:n_inputs]
    check_against_torch(lambda L, *t: getattr(L.nn, name)(**kwargs)(*t), inputs, "float64",
                        needs_grad=[0])


BAD_CALLS = {
    "ce_smoothing_above_one": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.tensor([0, 1]), label_smoothing=1.5),
    "ce_prob_smoothing_above_one": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.ones(2, 3) / 3, label_smoothing=1.5),
    "ce_weight_size": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.tensor([0, 1]), weight=L.ones(2)),
    "ce_prob_weight_size": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.ones(2, 3) / 3, weight=L.ones(2)),
    "ce_prob_ignore_index": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.ones(2, 3) / 3, ignore_index=1),
    "nll_weight_requires_grad": lambda L: L.nn.functional.nll_loss(
        L.ones(2, 3), L.tensor([0, 1]), weight=L.ones(3, requires_grad=True)),
    "ce_weight_requires_grad": lambda L: L.nn.functional.cross_entropy(
        L.ones(2, 3), L.tensor([0, 1]), weight=L.ones(3, requires_grad=True)),
    "nll_weight_target_range": lambda L: L.nn.functional.nll_loss(
        L.ones(2, 3), L.tensor([0, 5]), weight=L.ones(3)),
    "margin_ranking_dims": lambda L: L.nn.functional.margin_ranking_loss(
        L.ones(2), L.ones(2), L.ones(2, 1)),
    "triplet_margin": lambda L: L.nn.functional.triplet_margin_loss(
        L.ones(2, 3), L.ones(2, 3), L.ones(2, 3), margin=0.0),
    "triplet_dims": lambda L: L.nn.functional.triplet_margin_loss(
        L.ones(2, 3), L.ones(3), L.ones(2, 3)),
    "triplet_distance_margin": lambda L: L.nn.functional.triplet_margin_with_distance_loss(
        L.ones(2, 3), L.ones(2, 3), L.ones(2, 3), margin=-1.0),
    "gaussian_negative_var": lambda L: L.nn.functional.gaussian_nll_loss(
        L.ones(2, 3), L.ones(2, 3), -L.ones(2, 3)),
    "gaussian_negative_float_var": lambda L: L.nn.functional.gaussian_nll_loss(
        L.ones(2, 3), L.ones(2, 3), -1.0),
    "gaussian_var_size": lambda L: L.nn.functional.gaussian_nll_loss(
        L.ones(2, 3), L.ones(2, 3), L.ones(3, 3)),
    "gaussian_reduction": lambda L: L.nn.functional.gaussian_nll_loss(
        L.ones(2, 3), L.ones(2, 3), L.ones(2, 3), reduction="avg"),
    "multilabel_reduction": lambda L: L.nn.functional.multilabel_soft_margin_loss(
        L.ones(2, 3), L.ones(2, 3), reduction="avg"),
    "poisson_reduction": lambda L: L.nn.functional.poisson_nll_loss(
        L.ones(2, 3), L.ones(2, 3), reduction="avg"),
    "cosine_embedding_target_dim": lambda L: L.nn.functional.cosine_embedding_loss(
        L.ones(2, 3), L.ones(2, 3), L.ones(2, 1)),
    "cosine_embedding_1d_target_1d_input": lambda L: L.nn.functional.cosine_embedding_loss(
        L.ones(3), L.ones(3), L.ones(2)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    if case != "nll_weight_target_range":  # cagrad's message says more (same type)
        assert got[1] == expected[1].replace("torch.Size", "cagrad.Size"), (got, expected)


def test_compiled_training_step_with_weights_has_no_eager_fallback(rng):
    x = ca.tensor(rng.standard_normal((6, 4)), requires_grad=True)
    t = ca.tensor(np.array([0, 1, 2, 3, -100, 1]))
    w = ca.tensor(rng.uniform(0.5, 2.0, 4))
    before = dict(ca.compiled_autograd.counters)
    with ca.compiled_autograd.enable():
        ca.nn.functional.cross_entropy(x, t, weight=w, label_smoothing=0.1).backward()
    after = dict(ca.compiled_autograd.counters)
    assert after["eager_fallbacks"] == before["eager_fallbacks"]
    assert after["captures"] + after["cache_hits"] > before["captures"] + before["cache_hits"]
    xt = torch.tensor(x.detach().numpy(), requires_grad=True)
    torch.nn.functional.cross_entropy(xt, torch.tensor(t.numpy()),
                                      weight=torch.tensor(w.numpy()),
                                      label_smoothing=0.1).backward()
    assert_close(x.grad, xt.grad)
