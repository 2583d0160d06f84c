"""Composite losses and distances of nn.functional (nn/_losses.py) and their modules,
against torch 2.13: values and gradients in float32/float64, eager and compiled, float64
gradients against finite differences, reductions, legacy flags and argument errors."""

import math
import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)
REDUCTIONS = pytest.mark.parametrize("reduction", ["none", "mean", "sum"])


def probabilities(rng, shape):
    return rng.uniform(0.05, 0.95, shape)


def cases(rng):
    """name -> (fn(L, *inputs), inputs[, indices to differentiate]): each loss with its
    options, kinks avoided. torch does not differentiate the BCE weights."""
    x, y = rng.standard_normal((3, 5)), rng.standard_normal((3, 5))
    p, t = probabilities(rng, (3, 5)), rng.uniform(0, 1, (3, 5))
    w, pw = rng.uniform(0.5, 2, (3, 5)), rng.uniform(0.5, 2, (5,))
    logp = np.log(rng.dirichlet(np.ones(5), size=3))
    q = rng.dirichlet(np.ones(5), size=3)
    signs = np.where(rng.standard_normal((3, 5)) > 0, 1.0, -1.0)
    F = "nn.functional"

    def f(name, **kw):
        return lambda L, *a: getattr(_mod(L, F), name)(*a, **kw)

    return {
        "bce": (f("binary_cross_entropy"), [p, t]),
        "bce_weight_sum": (f("binary_cross_entropy", reduction="sum"),
                           [p, t]),
        "bce_weighted": (lambda L, a, b, c: _mod(L, F).binary_cross_entropy(a, b, weight=c),
                         [p, t, w], [0, 1]),
        "bce_logits": (f("binary_cross_entropy_with_logits"), [3 * x, t]),
        "bce_logits_pos_weight": (
            lambda L, a, b, c, d: _mod(L, F).binary_cross_entropy_with_logits(
                a, b, weight=c, pos_weight=d, reduction="none"), [3 * x, t, w, pw], [0, 1]),
        "l1": (f("l1_loss"), [x, y]),
        "l1_weighted": (lambda L, a, b, c: _mod(L, F).l1_loss(a, b, weight=c), [x, y, w]),
        "smooth_l1": (f("smooth_l1_loss", beta=0.7), [x, y]),
        "smooth_l1_beta0": (f("smooth_l1_loss", beta=0.0, reduction="sum"), [x, y]),
        "huber": (f("huber_loss", delta=0.6), [x, y]),
        "huber_weighted": (lambda L, a, b, c: _mod(L, F).huber_loss(a, b, weight=c, delta=0.5),
                           [x, y, w]),
        "kl_batchmean": (f("kl_div", reduction="batchmean"), [logp, q]),
        "kl_sum": (f("kl_div", reduction="sum"), [logp, q]),
        "kl_log_target": (f("kl_div", reduction="none", log_target=True), [logp, np.log(q)]),
        "soft_margin": (f("soft_margin_loss"), [x, signs], [0]),
        "cosine": (f("cosine_similarity"), [x, y]),
        "cosine_dim0": (f("cosine_similarity", dim=0), [x, y[:1]]),
        "pairwise": (f("pairwise_distance"), [x, y]),
        "pairwise_p1_keepdim": (f("pairwise_distance", p=1.0, keepdim=True), [x, y]),
        "pairwise_p3": (f("pairwise_distance", p=3.0), [x, y]),
        "pairwise_inf": (f("pairwise_distance", p=math.inf), [x, y]),
        "normalize": (f("normalize"), [x]),
        "normalize_p1_dim0": (f("normalize", p=1.0, dim=0), [x]),
    }


def _mod(L, path):
    for part in path.split("."):
        L = getattr(L, part)
    return L


NAMES = sorted(cases(np.random.default_rng(0)))


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", NAMES)
def test_loss_matches_torch(name, dtype, compiled, rng):
    fn, inputs, *needs_grad = cases(rng)[name]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_against_torch(fn, inputs, dtype, compiled, *needs_grad, msg=name)


GRADCHECK = ["bce_weighted", "bce_logits_pos_weight", "smooth_l1", "huber", "kl_batchmean",
             "kl_log_target", "soft_margin", "cosine", "pairwise_p3", "normalize",
             "l1_weighted"]


@COMPILED
@pytest.mark.parametrize("name", GRADCHECK)
def test_loss_gradcheck_float64(name, compiled, rng):
    fn, inputs, *needs_grad = cases(rng)[name]
    check_numeric_gradient(fn, inputs, compiled, *needs_grad)


@DTYPE
@REDUCTIONS
@pytest.mark.parametrize("loss", ["binary_cross_entropy", "binary_cross_entropy_with_logits",
                                  "l1_loss", "smooth_l1_loss", "huber_loss", "kl_div",
                                  "soft_margin_loss"])
def test_reductions(loss, reduction, dtype, rng):
    a = probabilities(rng, (4, 3))
    b = probabilities(rng, (4, 3))
    needs_grad = [0] if loss == "soft_margin_loss" else [0, 1]  # torch's differentiable args
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # kl_div's 'mean' warning (tested below)
        check_against_torch(lambda L, x, y: getattr(L.nn.functional, loss)(
            x, y, reduction=reduction), [a, b], dtype, needs_grad=needs_grad)


def test_bce_log_is_floored_at_minus_100():
    x = np.array([0.0, 1.0, 0.0, 1.0, 1e-50])
    t = np.array([1.0, 0.0, 0.0, 1.0, 1.0])
    check_against_torch(lambda L, a, b: L.nn.functional.binary_cross_entropy(
        a, b, reduction="none"), [x, t], "float64", needs_grad=[])


def test_bce_logits_is_stable_for_large_logits():
    x = np.array([-200.0, -50.0, 0.0, 50.0, 200.0])
    t = np.array([1.0, 0.0, 0.5, 1.0, 0.0])
    for dtype in DTYPES:
        check_against_torch(lambda L, a, b: L.nn.functional.binary_cross_entropy_with_logits(
            a, b, reduction="none"), [x, t], dtype)


def test_kl_div_zero_target_is_zero():
    logp = np.log(np.array([[0.2, 0.3, 0.5]]))
    q = np.array([[0.0, 0.4, 0.6]])
    check_against_torch(lambda L, a, b: L.nn.functional.kl_div(a, b, reduction="none"),
                        [logp, q], "float64", needs_grad=[0])


def test_kl_div_mean_warns_like_torch(rng):
    a, b = rng.standard_normal((2, 3)), rng.uniform(0, 1, (2, 3))
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="'batchmean' divides only by the batch size"):
            L.nn.functional.kl_div(L.tensor(a), L.tensor(b))


BAD_CALLS = {
    "bce_range": lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5, 1.5]), L.tensor([0.0, 1.0])),
    "bce_nan": lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5, math.nan]), L.tensor([0.0, 1.0])),
    "bce_size": lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5, 0.5]), L.tensor([[0.0, 1.0]])),
    "bce_logits_size": lambda L: L.nn.functional.binary_cross_entropy_with_logits(
        L.tensor([0.5, 0.5]), L.tensor([1.0])),
    "smooth_l1_beta": lambda L: L.nn.functional.smooth_l1_loss(
        L.tensor([0.5]), L.tensor([1.0]), beta=-1.0),
    "huber_delta": lambda L: L.nn.functional.huber_loss(
        L.tensor([0.5]), L.tensor([1.0]), delta=0.0),
    "l1_reduction": lambda L: L.nn.functional.l1_loss(
        L.tensor([0.5]), L.tensor([1.0]), reduction="avg"),
    "kl_reduction": lambda L: L.nn.functional.kl_div(
        L.tensor([0.5]), L.tensor([1.0]), reduction="bogus"),
    "bce_weight_requires_grad": lambda L: L.nn.functional.binary_cross_entropy(
        L.tensor([0.5]), L.tensor([1.0]), weight=L.tensor([2.0], requires_grad=True)),
    "bce_logits_pos_weight_requires_grad": lambda L:
        L.nn.functional.binary_cross_entropy_with_logits(
            L.tensor([0.5]), L.tensor([1.0]), pos_weight=L.tensor([2.0], requires_grad=True)),
    "soft_margin_target_requires_grad": lambda L: L.nn.functional.soft_margin_loss(
        L.tensor([0.5]), L.tensor([1.0], requires_grad=True)),
    "l1_weight_size": lambda L: L.nn.functional.l1_loss(
        L.tensor([0.5, 1.0]), L.tensor([1.0, 2.0]), weight=L.tensor([1.0])),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1] == expected[1].replace("torch.Size", "cagrad.Size") or \
        got[1] == expected[1], (got, expected)


def test_legacy_size_average_and_reduce(rng):
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    for flags in (dict(size_average=False), dict(reduce=False), dict(size_average=True)):
        outs = []
        for L in (ca, torch):
            with pytest.warns(UserWarning, match="size_average and reduce args will be "
                                                 "deprecated"):
                outs.append(L.nn.functional.l1_loss(L.tensor(a), L.tensor(b), **flags))
                L.nn.SmoothL1Loss(**flags)
        assert_close(outs[0], outs[1])


def test_l1_size_mismatch_warns(rng):
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="different to the input size"):
            L.nn.functional.l1_loss(L.ones(3, 4), L.ones(1, 4))


MODULES = [
    ("BCELoss", {}, "probs"),
    ("BCELoss", {"reduction": "sum"}, "probs"),
    ("BCEWithLogitsLoss", {}, "logits"),
    ("L1Loss", {}, "any"),
    ("SmoothL1Loss", {"beta": 0.5}, "any"),
    ("HuberLoss", {"delta": 0.5, "reduction": "sum"}, "any"),
    ("KLDivLoss", {"reduction": "batchmean"}, "log"),
    ("KLDivLoss", {"reduction": "none", "log_target": True}, "log"),
    ("SoftMarginLoss", {}, "any"),
    ("CosineSimilarity", {"dim": 1}, "any"),
    ("PairwiseDistance", {"p": 1.5, "keepdim": True}, "any"),
]


@COMPILED
@pytest.mark.parametrize("name,kwargs,kind", MODULES,
                         ids=[f"{m}-{i}" for i, (m, _, _) in enumerate(MODULES)])
def test_modules_match_torch(name, kwargs, kind, compiled, rng):
    a = probabilities(rng, (4, 3)) if kind == "probs" else rng.standard_normal((4, 3))
    b = probabilities(rng, (4, 3)) if kind in ("probs", "logits") else rng.standard_normal((4, 3))
    if kind == "log":
        a = np.log(probabilities(rng, (4, 3)))
    needs_grad = [0] if name == "SoftMarginLoss" else [0, 1]
    check_against_torch(lambda L, x, y: getattr(L.nn, name)(**kwargs)(x, y), [a, b],
                        "float64", compiled, needs_grad)
    assert repr(getattr(ca.nn, name)(**kwargs)) == repr(getattr(torch.nn, name)(**kwargs))


def test_bce_weight_buffers_in_state_dict():
    w, pw = [1.0, 2.0], [0.5, 3.0]
    for L in (ca, torch):
        m = L.nn.BCEWithLogitsLoss(weight=L.tensor(w), pos_weight=L.tensor(pw))
        assert list(m.state_dict()) == ["weight", "pos_weight"]
        assert list(L.nn.BCELoss().state_dict()) == []


def test_bce_input_check_is_no_graph_break(rng):
    x = ca.tensor(probabilities(rng, (3, 4)), requires_grad=True)
    t = ca.tensor(probabilities(rng, (3, 4)))
    report = ca.explain(lambda a, b: ca.nn.functional.binary_cross_entropy(a, b))(x, t)
    assert report.graph_break_count == 0
