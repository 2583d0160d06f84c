"""ctc_loss / CTCLoss (nn/_ctc.py), AdaptiveLogSoftmaxWithLoss (nn/_adaptive_softmax.py),
conv3d / Conv3d, conv_transpose3d / ConvTranspose3d and adaptive_avg_pool3d /
AdaptiveAvgPool3d (nn/_conv3d.py) against torch 2.13: values and gradients in
float32/float64, eager and compiled (one capture, no eager fallback), float64 gradients
against central differences, modules' parameters and state_dicts both ways, argument
errors with torch's types and messages."""

import re
import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)
# a CTC loss is a chain of T logsumexps: float32 rounding grows with T (here <= 12)
CTC_TOL = {"float32": dict(rtol=1e-4, atol=1e-5), "float64": TOL_SUM["float64"]}


# --- ctc_loss --------------------------------------------------------------------------

def _ctc_data(rng, T=8, N=4, C=5, S=4, blank=0):
    """Logits [T, N, C], padded targets [N, S] with repeats, and per-sample lengths
    (one sample shorter in time, one with an empty target)."""
    x = rng.standard_normal((T, N, C))
    labels = [c for c in range(C) if c != blank]
    targets = rng.choice(labels, (N, S))
    targets[0, 1] = targets[0, 0]  # a repeated label needs a blank between
    input_lengths = np.array([T, T - 2, T, T - 1][:N])
    target_lengths = np.array([S, S - 1, 0, 2][:N])
    return x, targets, input_lengths, target_lengths


def _concatenated(targets, lengths):
    return np.concatenate([t[:n] for t, n in zip(targets, lengths)])


def _ctc(blank=0, reduction="mean", zero_infinity=False, lengths_as=None, softmax=True):
    """fn(L, x, targets, input_lengths, target_lengths): ctc_loss of log_softmax(x) (or of
    x itself), the lengths as tensors or converted by lengths_as (list / tuple)."""
    def fn(L, x, targets, input_lengths, target_lengths):
        if lengths_as is not None:
            input_lengths = lengths_as(to_np(input_lengths).tolist())
            target_lengths = lengths_as(to_np(target_lengths).tolist())
        lp = x.log_softmax(-1) if softmax else x
        return L.nn.functional.ctc_loss(lp, targets, input_lengths, target_lengths, blank=blank,
                                        reduction=reduction, zero_infinity=zero_infinity)
    return fn


def _ctc_cases(rng):
    x, tg, il, tl = _ctc_data(rng)
    xb, tgb, ilb, tlb = _ctc_data(rng, C=6, blank=3)
    # sample 1 cannot align: 3 labels with a repeat need 4 frames, it has 3
    xi, tgi = x[:5].copy(), tg.copy()
    tgi[1, :3] = [2, 2, 1]
    ili, tli = np.array([5, 3, 5, 4]), np.array([3, 3, 1, 0])
    # log_probs of -inf: sample 0 can never emit its label 2 (loss inf), sample 1 must
    # emit a blank at frame 2, sample 2 cannot emit class 3 at frame 1
    xn = np.log(rng.dirichlet(np.ones(4), (6, 3)))
    xn[:, 0, 2] = -np.inf
    xn[2, 1, 1:] = -np.inf
    xn[1, 2, 3] = -np.inf
    neg_inf = [xn, np.array([[1, 2, 3], [1, 3, 3], [2, 1, 1]]), np.array([6, 6, 6]),
               np.array([3, 3, 3])]
    out = {}
    for zero_infinity in (False, True):
        out[f"neg_inf_log_probs_{zero_infinity}"] = (
            _ctc(reduction="none", zero_infinity=zero_infinity, softmax=False), neg_inf)
    for red in ("none", "mean", "sum"):
        out.update({
            f"padded_{red}": (_ctc(reduction=red), [x, tg, il, tl]),
            f"concatenated_{red}": (_ctc(reduction=red), [x, _concatenated(tg, tl), il, tl]),
            f"list_lengths_{red}": (_ctc(reduction=red, lengths_as=list), [x, tg, il, tl]),
            f"blank3_{red}": (_ctc(blank=3, reduction=red), [xb, tgb, ilb, tlb]),
            f"unbatched_{red}": (_ctc(reduction=red, lengths_as=tuple),
                                 [x[:, 0], tg[0, :tl[0]], il[:1], tl[:1]]),
            f"infinite_zeroed_{red}": (_ctc(reduction=red, zero_infinity=True),
                                       [xi, tgi, ili, tli]),
            # torch's gradient with respect to log_probs themselves (not via log_softmax)
            f"raw_log_probs_{red}": (_ctc(reduction=red, softmax=False), [x, tg, il, tl]),
        })
    out.update({
        "infinite_none": (_ctc(reduction="none"), [xi, tgi, ili, tli]),
        "infinite_raw_mean": (_ctc(softmax=False), [xi, tgi, ili, tli]),
        "infinite_zeroed_raw_sum": (_ctc(reduction="sum", zero_infinity=True, softmax=False),
                                    [xi, tgi, ili, tli]),
        "no_frames": (_ctc(reduction="none"), [x, tg, np.array([0, 8, 0, 8]),
                                               np.array([0, 2, 1, 0])]),
        # unbatched: 1-d targets are the concatenated form (of one), 2-d the padded one
        "unbatched_tensor_lengths": (_ctc(), [x[:, 1], tg[1, :3], il[1:2], tl[1:2]]),
        "unbatched_padded_none": (_ctc(reduction="none"), [x[:, 1], tg[1:2], il[1:2],
                                                           tl[1:2]]),
        "one_frame_per_label": (_ctc(reduction="none"),
                                [x[:3, :2], np.array([[1, 2, 3], [4, 4, 1]]), np.array([3, 3]),
                                 np.array([3, 2])]),
    })
    return out


CTC_NAMES = sorted(_ctc_cases(np.random.default_rng(0)))


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", CTC_NAMES)
def test_ctc_loss_matches_torch(name, dtype, compiled, rng):
    fn, inputs = _ctc_cases(rng)[name]
    check_against_torch(fn, inputs, dtype, compiled, needs_grad=[0], tol=CTC_TOL, msg=name)


@COMPILED
@pytest.mark.parametrize("name", ["padded_mean", "concatenated_sum", "blank3_none",
                                  "unbatched_sum", "infinite_zeroed_mean"])
def test_ctc_loss_gradcheck_float64(name, compiled, rng):
    # through log_softmax, where torch's gradient is the derivative of the loss
    fn, inputs = _ctc_cases(rng)[name]
    check_numeric_gradient(fn, inputs, compiled, needs_grad=[0])


def test_ctc_loss_value_by_enumeration():
    """-log of the summed probability of every alignment, counted by brute force."""
    rng = np.random.default_rng(5)
    T, C, target = 4, 3, [1, 1]
    lp = np.log(rng.dirichlet(np.ones(C), T))
    total = 0.0
    for path in np.ndindex(*(C,) * T):
        collapsed = [c for i, c in enumerate(path) if c != 0 and (i == 0 or path[i - 1] != c)]
        if collapsed == target:
            total += np.exp(sum(lp[t, c] for t, c in enumerate(path)))
    got = ca.nn.functional.ctc_loss(ca.tensor(lp), ca.tensor(target), [T], [2],
                                    reduction="sum")
    np.testing.assert_allclose(float(got), -np.log(total), rtol=1e-12)


def test_ctc_infinite_loss_gradient_is_nan_on_valid_frames(rng):
    fn, inputs = _ctc_cases(rng)["infinite_none"]
    c, t = check_against_torch(fn, inputs, "float64", needs_grad=[0])
    assert np.isinf(to_np(c)[1])
    lp = ca.tensor(inputs[0], requires_grad=True)
    fn(ca, lp, *[ca.tensor(a) for a in inputs[1:]]).sum().backward()
    grad = to_np(lp.grad)
    assert np.isnan(grad[:3, 1]).all() and not np.isnan(grad[3:, 1]).any()
    assert not np.isnan(np.delete(grad, 1, axis=1)).any()


def test_ctc_module_matches_torch(rng):
    x, tg, il, tl = _ctc_data(rng)
    for kw in (dict(), dict(blank=4, reduction="sum"), dict(reduction="none",
                                                           zero_infinity=True)):
        fn = (lambda L, a, b, c, d, kw=kw:  # noqa: E731
              L.nn.CTCLoss(**kw)(a.log_softmax(-1), b, c, d))
        tgk = np.where(tg == kw.get("blank", 0), 1, tg)
        check_against_torch(fn, [x, tgk, il, tl], "float64", needs_grad=[0])
    assert ca.nn.CTCLoss(blank=2).blank == 2 and ca.nn.CTCLoss().zero_infinity is False


def _ctc_error_cases():
    x = np.random.default_rng(1).standard_normal((5, 2, 4))
    tg = np.array([[1, 2], [2, 3]])

    def call(*args, **kw):
        def run(L):
            a = [L.tensor(v) if isinstance(v, np.ndarray) else v for v in args]
            return L.nn.functional.ctc_loss(L.tensor(x).log_softmax(-1), *a, **kw)
        return run
    return {
        "input_too_long": call(tg, [5, 6], [2, 2]),
        "target_too_long": call(tg, [5, 5], [2, 3]),
        "negative_target_length": call(tg, [5, 5], [2, -1]),
        "negative_input_length": call(tg, [5, -1], [2, 1]),
        "input_lengths_size": call(tg, [5], [2, 1]),
        "target_lengths_size": call(tg, [5, 5], [2]),
        "blank_too_big": call(tg, [5, 5], [2, 2], blank=4),
        "blank_negative": call(tg, [5, 5], [2, 2], blank=-1),
        "bad_reduction": call(tg, [5, 5], [2, 2], reduction="foo"),
        "concatenated_size": call(np.array([1, 2, 2]), [5, 5], [2, 2]),
        "float_lengths_tensor": call(tg, np.array([5.0, 5.0]), np.array([2, 2])),
        "float_target_lengths_tensor": call(tg, np.array([5, 5]), np.array([2.0, 2.0])),
        "targets_3d": call(tg.reshape(1, 2, 2), [5, 5], [2, 2]),
    }


@pytest.mark.parametrize("name", sorted(_ctc_error_cases()))
def test_ctc_loss_errors_match_torch(name):
    make = _ctc_error_cases()[name]
    c, t = error_of(ca, make), error_of(torch, make)
    assert t[0] is not None and c[0] is t[0], (c, t)
    assert c[1] == t[1], (c[1], t[1])


def test_ctc_loss_type_errors():
    x = ca.randn(5, 2, 4).log_softmax(-1)
    tg = ca.tensor([[1, 2], [2, 3]])
    for args in ((ca.tensor([5, 5]), [2, 2]), ((5, 5), ca.tensor([2, 2])), (5, 2),
                 ([5.0, 5], [2, 2])):
        with pytest.raises(TypeError):
            ca.nn.functional.ctc_loss(x, tg, *args)
    with pytest.raises(NotImplementedError, match="not implemented for 'Long'"):
        ca.nn.functional.ctc_loss(ca.tensor([[[1, 2]]]), tg[:1, :1], [1], [1])
    with pytest.raises(RuntimeError, match="outside the 4 classes"):  # torch reads past C
        ca.nn.functional.ctc_loss(x, ca.tensor([[1, 5], [2, 3]]), [5, 5], [2, 2])


# --- AdaptiveLogSoftmaxWithLoss ---------------------------------------------------------

def _asm_pair(dtype="float64", **kw):
    """A torch module and a cagrad one holding torch's parameters (loaded by state_dict)."""
    args = dict(in_features=8, n_classes=15, cutoffs=[4, 9], div_value=2.0)
    args.update(kw)
    t_mod = torch.nn.AdaptiveLogSoftmaxWithLoss(**args, dtype=getattr(torch, dtype))
    c_mod = ca.nn.AdaptiveLogSoftmaxWithLoss(**args, dtype=getattr(ca, dtype))
    c_mod.load_state_dict({k: ca.tensor(v.detach().numpy()) for k, v in
                           t_mod.state_dict().items()})
    return c_mod, t_mod


def _run_asm(mod, L, x, target, compiled):
    xt = L.tensor(x, requires_grad=True)
    out, loss = mod(xt, L.tensor(target))
    total = loss + (out * L.tensor(np.linspace(0.5, 1.5, out.numel()).reshape(
        tuple(out.shape)).astype(x.dtype))).sum()
    if L is torch:
        total.backward()
    else:
        with compiled_ctx(compiled):
            backward_checked(total, compiled)
    return out, loss, xt.grad, {n: p.grad for n, p in mod.named_parameters()}


@COMPILED
@DTYPE
@pytest.mark.parametrize("head_bias", [False, True])
def test_adaptive_log_softmax_matches_torch(dtype, compiled, head_bias, rng):
    c_mod, t_mod = _asm_pair(dtype, head_bias=head_bias)
    x = rng.standard_normal((7, 8)).astype(dtype)
    target = np.array([0, 14, 5, 3, 9, 8, 12])  # shortlist and both clusters
    got = _run_asm(c_mod, ca, x, target, compiled)
    ref = _run_asm(t_mod, torch, x, target, False)
    tol = TOL_SUM[dtype]
    for name, c, t in zip(("output", "loss", "input grad"), got[:3], ref[:3]):
        assert_close(c, t, msg=name, **tol)
    assert sorted(got[3]) == sorted(ref[3])
    for name in ref[3]:
        assert_close(got[3][name], ref[3][name], msg=name, **tol)


@COMPILED
def test_adaptive_log_softmax_gradcheck_float64(compiled, rng):
    c_mod, _ = _asm_pair()
    target = np.array([1, 10, 6, 13])

    def fn(L, x):
        out, loss = c_mod(x, L.tensor(target))
        return out * 0.5 + loss

    check_numeric_gradient(fn, [rng.standard_normal((4, 8))], compiled)


def test_adaptive_log_softmax_single_cluster_unbatched_and_methods(rng):
    c_mod, t_mod = _asm_pair(in_features=6, n_classes=7, cutoffs=[3], head_bias=True)
    x = rng.standard_normal((5, 6))
    for target in (np.array(0), np.array(5)):  # unbatched: 0-d target, 1-d input
        c, t = c_mod(ca.tensor(x[0]), ca.tensor(target)), t_mod(torch.tensor(x[0]),
                                                                 torch.tensor(target))
        assert c.output.shape == t.output.shape == ()
        assert_close(c.output, t.output) and assert_close(c.loss, t.loss)
    for all_rows in (x, x * 10, -x * 10):  # head argmax inside and outside the shortlist
        assert_close(c_mod.log_prob(ca.tensor(all_rows)), t_mod.log_prob(torch.tensor(all_rows)),
                     **TOL_SUM["float64"])
        assert_close(c_mod.predict(ca.tensor(all_rows)), t_mod.predict(torch.tensor(all_rows)))
    out = c_mod(ca.tensor(x), ca.tensor([1, 2, 3, 4, 6]))
    assert type(out).__name__ == "_ASMoutput" and out._fields == ("output", "loss")


def test_adaptive_log_softmax_state_dict_both_ways():
    c_mod = ca.nn.AdaptiveLogSoftmaxWithLoss(16, 30, [5, 12, 20], div_value=2.0, head_bias=True)
    t_mod = torch.nn.AdaptiveLogSoftmaxWithLoss(16, 30, [5, 12, 20], div_value=2.0,
                                                head_bias=True)
    c_sd, t_sd = c_mod.state_dict(), t_mod.state_dict()
    assert list(c_sd) == list(t_sd)
    assert [tuple(v.shape) for v in c_sd.values()] == [tuple(v.shape) for v in t_sd.values()]
    t_mod.load_state_dict({k: torch.tensor(to_np(v)) for k, v in c_sd.items()})
    x = np.random.default_rng(3).standard_normal((3, 16)).astype(np.float32)
    assert_close(c_mod.log_prob(ca.tensor(x)), t_mod.log_prob(torch.tensor(x)),
                 **TOL_SUM["float32"])
    for name in ("in_features", "n_classes", "cutoffs", "div_value", "head_bias",
                 "shortlist_size", "n_clusters", "head_size"):
        assert getattr(c_mod, name) == getattr(t_mod, name), name
    assert repr(c_mod) == repr(t_mod)


@pytest.mark.parametrize("cutoffs", [[], [5, 3], [0, 4], [4, 15], [4, 4], [2.5], (3, 20)])
def test_adaptive_log_softmax_cutoff_errors(cutoffs):
    make = lambda L: L.nn.AdaptiveLogSoftmaxWithLoss(8, 15, cutoffs)  # noqa: E731
    c, t = error_of(ca, make), error_of(torch, make)
    assert t[0] is ValueError and c == t


@pytest.mark.parametrize("case", ["range_high", "range_low", "batch", "input_1d", "input_2d",
                                  "target_2d"])
def test_adaptive_log_softmax_forward_errors(case):
    x2, x1 = np.ones((3, 8)), np.ones(8)
    args = {"range_high": (x2, [1, 15, 2]), "range_low": (x2, [1, -1, 2]),
            "batch": (x2, [1, 2]), "input_1d": (x1, [1]), "input_2d": (x2, 1),
            "target_2d": (x2, [[1, 2, 3]])}[case]

    def make(L):
        mod = L.nn.AdaptiveLogSoftmaxWithLoss(8, 15, [4, 9], dtype=L.float64)
        return mod(L.tensor(args[0]), L.tensor(args[1]))
    c, t = error_of(ca, make), error_of(torch, make)
    assert t[0] is RuntimeError and c[0] is RuntimeError
    # torch writes the size as torch.Size([..]) (once as the error's second argument);
    # cagrad as a list
    expected = re.sub(r"torch\.Size\((\[.*?\])\)\)?", r"\1", t[1])
    if expected.startswith("('"):
        expected = expected[2:].replace("', ", " ", 1)
    assert c[1] == expected, (c[1], t[1])


# --- conv3d / conv_transpose3d / adaptive_avg_pool3d ---------------------------------------

def _fn(name, **kw):
    return lambda L, *a: getattr(L.nn.functional, name)(*a, **kw)


def _conv_cases(rng):
    x = rng.standard_normal((2, 4, 5, 6, 5))
    w = rng.standard_normal((6, 2, 3, 2, 3))
    w1 = rng.standard_normal((3, 4, 2, 3, 2))
    b6, b3 = rng.standard_normal(6), rng.standard_normal(3)
    wt = rng.standard_normal((4, 3, 3, 2, 3))
    return {
        "conv_groups": (_fn("conv3d", groups=2), [x, w, b6]),
        "conv_stride_pad_dil": (_fn("conv3d", groups=2, stride=(2, 1, 2), padding=(1, 0, 2),
                                    dilation=(2, 1, 1)), [x, w, b6]),
        "conv_same": (_fn("conv3d", padding="same", dilation=(1, 2, 1)), [x, w1, b3]),
        "conv_valid_no_bias": (_fn("conv3d", padding="valid", stride=2), [x, w1]),
        "conv_unbatched": (_fn("conv3d", groups=2, padding=1), [x[0], w, b6]),
        "conv_depthwise": (_fn("conv3d", groups=4), [x, rng.standard_normal((8, 1, 2, 2, 2))]),
        "convT_plain": (_fn("conv_transpose3d"), [x, wt, b3]),
        "convT_stride_outpad": (_fn("conv_transpose3d", stride=2, padding=1, output_padding=1),
                                [x, wt, b3]),
        "convT_groups_dil": (_fn("conv_transpose3d", stride=(1, 2, 3), groups=2,
                                 dilation=(2, 1, 1), padding=(0, 1, 1)),
                             [x, wt, rng.standard_normal(6)]),
        "convT_unbatched": (_fn("conv_transpose3d", stride=(2, 1, 1)), [x[1], wt]),
        "adaptive_pool_3": (lambda L, a: L.nn.functional.adaptive_avg_pool3d(a, 3), [x]),
        "adaptive_pool_none": (lambda L, a: L.nn.functional.adaptive_avg_pool3d(
            a, (2, None, 4)), [x]),
        "adaptive_pool_up": (lambda L, a: L.nn.functional.adaptive_avg_pool3d(
            a, (7, 4, 1)), [x[0]]),
    }


CONV_NAMES = sorted(_conv_cases(np.random.default_rng(0)))


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", CONV_NAMES)
def test_conv3d_family_matches_torch(name, dtype, compiled, rng):
    fn, inputs = _conv_cases(rng)[name]
    with warnings.catch_warnings():  # torch's note on 'same' with even kernels
        warnings.simplefilter("ignore")
        check_against_torch(fn, inputs, dtype, compiled, msg=name)


@COMPILED
@pytest.mark.parametrize("name", ["conv_stride_pad_dil", "conv_same", "convT_groups_dil",
                                  "adaptive_pool_none"])
def test_conv3d_family_gradcheck_float64(name, compiled, rng):
    fn, inputs = _conv_cases(rng)[name]
    small = [a[:1, :, :4, :4, :4] if a.ndim == 5 and i == 0 else a
             for i, a in enumerate(inputs)]
    check_numeric_gradient(fn, small, compiled)


@pytest.mark.parametrize("mode", ["zeros", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, (0, 2, 1), "same"])
def test_conv3d_module_matches_torch(mode, padding, rng):
    kw = dict(kernel_size=(3, 2, 3), padding=padding, padding_mode=mode, groups=2)
    t_mod = torch.nn.Conv3d(4, 6, dtype=torch.float64, **kw)
    c_mod = ca.nn.Conv3d(4, 6, dtype=ca.float64, **kw)
    c_mod.load_state_dict({k: ca.tensor(v.detach().numpy()) for k, v in
                           t_mod.state_dict().items()})
    assert repr(c_mod) == repr(t_mod)
    x = rng.standard_normal((2, 4, 4, 5, 4))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_against_torch(lambda L, a: (c_mod if L is ca else t_mod)(a), [x], "float64")
    for p_c, p_t in zip(c_mod.parameters(), t_mod.parameters()):
        assert_close(p_c.grad, p_t.grad, **TOL_SUM["float64"])


def test_conv3d_modules_init_and_state_dict():
    ca.manual_seed(0)
    c_mod = ca.nn.Conv3d(4, 8, 3, stride=2, groups=2)
    t_mod = torch.nn.Conv3d(4, 8, 3, stride=2, groups=2)
    assert [(k, tuple(v.shape)) for k, v in c_mod.state_dict().items()] == \
        [(k, tuple(v.shape)) for k, v in t_mod.state_dict().items()]
    bound = 1 / np.sqrt(2 * 27)  # kaiming_uniform(a=sqrt(5)): 1/sqrt(fan_in)
    weight, bias = to_np(c_mod.weight), to_np(c_mod.bias)
    assert np.abs(weight).max() <= bound and np.abs(weight).max() > 0.9 * bound
    assert np.abs(bias).max() <= bound and len(np.unique(bias)) == 8
    t_mod.load_state_dict({k: torch.tensor(to_np(v)) for k, v in c_mod.state_dict().items()})
    x = np.random.default_rng(2).standard_normal((1, 4, 5, 5, 5)).astype(np.float32)
    assert_close(c_mod(ca.tensor(x)), t_mod(torch.tensor(x)), **TOL_SUM["float32"])
    ct = ca.nn.ConvTranspose3d(4, 6, (2, 3, 2), stride=2, output_padding=1, groups=2)
    tt = torch.nn.ConvTranspose3d(4, 6, (2, 3, 2), stride=2, output_padding=1, groups=2)
    assert repr(ct) == repr(tt)
    tt.load_state_dict({k: torch.tensor(to_np(v)) for k, v in ct.state_dict().items()})
    assert_close(ct(ca.tensor(x)), tt(torch.tensor(x)), **TOL_SUM["float32"])
    assert_close(ct(ca.tensor(x), output_size=(11, 11, 11)),
                 tt(torch.tensor(x), output_size=(11, 11, 11)), **TOL_SUM["float32"])
    assert repr(ca.nn.AdaptiveAvgPool3d((2, None, 3))) == repr(
        torch.nn.AdaptiveAvgPool3d((2, None, 3)))
    assert_close(ca.nn.AdaptiveAvgPool3d(2)(ca.tensor(x)),
                 torch.nn.AdaptiveAvgPool3d(2)(torch.tensor(x)), **TOL_SUM["float32"])


def _conv_error_cases():
    x = np.ones((2, 4, 5, 6, 7))
    w = np.ones((6, 2, 3, 2, 3))

    def call(name, *arrays, **kw):
        return lambda L: getattr(L.nn.functional, name)(*[L.tensor(a) for a in arrays], **kw)
    return {
        "channels": call("conv3d", x, w),
        "input_3d": call("conv3d", x[0, 0], w, groups=2),
        "groups_divide": call("conv3d", x, w, groups=4),
        "stride_len": call("conv3d", x, w, groups=2, stride=(1, 2)),
        "same_strided": call("conv3d", x, w, groups=2, padding="same", stride=2),
        "padding_string": call("conv3d", x, w, groups=2, padding="foo"),
        "kernel_too_big": call("conv3d", x, np.ones((6, 2, 9, 2, 3)), groups=2),
        "bias_size": call("conv3d", x, w, np.ones(5), groups=2),
        "stride_zero": call("conv3d", x, w, groups=2, stride=0),
        "padding_negative": call("conv3d", x, w, groups=2, padding=-1),
        "dtype": call("conv3d", x, w.astype(np.float32), groups=2),
        "convT_channels": call("conv_transpose3d", x, np.ones((3, 2, 2, 2, 2))),
        "convT_too_small": call("conv_transpose3d", x[:, :, :1, :1, :1], np.ones((4, 2, 1, 1, 1)),
                                padding=1),
        "pool_empty": lambda L: L.nn.functional.adaptive_avg_pool3d(L.tensor(x[:, :, :0]), 2),
    }


@pytest.mark.parametrize("name", sorted(_conv_error_cases()))
def test_conv3d_errors_match_torch(name):
    make = _conv_error_cases()[name]
    c, t = error_of(ca, make), error_of(torch, make)
    assert t[0] is not None and c == t, (c, t)


def test_conv3d_weight_rank_error():
    # torch complains about the stride's length here; cagrad names the weight's rank
    with pytest.raises(RuntimeError, match="Expected 5-dimensional weight for conv3d"):
        ca.nn.functional.conv3d(ca.ones(2, 4, 5, 5, 5), ca.ones(6, 4, 3, 3))
    with pytest.raises(RuntimeError):
        torch.nn.functional.conv3d(torch.ones(2, 4, 5, 5, 5), torch.ones(6, 4, 3, 3))


def test_conv3d_module_argument_errors():
    for kw, err in ((dict(groups=3), ValueError), (dict(padding="same", stride=2), ValueError),
                    (dict(padding_mode="mirror"), ValueError), (dict(padding="full"),
                                                                 ValueError)):
        for L in (ca, torch):
            with pytest.raises(err):
                L.nn.Conv3d(4, 6, 3, **kw)
