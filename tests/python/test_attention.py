"""F.scaled_dot_product_attention (nn/_attention.py) against torch 2.13: values and
gradients of query/key/value (and additive masks) in float32/float64, eager and compiled,
float64 finite differences, boolean masks (tagged 0/1 tensors), causal masking, scale,
grouped-query attention, rows that attend to nothing, dropout, and errors."""

import math

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def sdpa(**kwargs):
    def fn(L, q, k, v, *mask):
        if mask:
            kwargs["attn_mask"] = mask[0]
        return L.nn.functional.scaled_dot_product_attention(q, k, v, **kwargs)
    return fn


def qkv(rng, batch=(2, 3), L=4, S=5, E=6, Ev=3, kv_heads=None):
    kv_batch = batch[:-1] + (kv_heads,) if kv_heads else batch
    return [rng.standard_normal(batch + (L, E)), rng.standard_normal(kv_batch + (S, E)),
            rng.standard_normal(kv_batch + (S, Ev))]


def bool_mask(rng, shape):
    mask = rng.uniform(0, 1, shape) > 0.4
    mask[..., 0] = True  # every row attends somewhere (empty rows are tested apart)
    return mask


CASES = {
    "plain": (sdpa(), lambda r: qkv(r)),
    "unbatched": (sdpa(), lambda r: qkv(r, batch=())),
    "scale": (sdpa(scale=0.3), lambda r: qkv(r)),
    "causal": (sdpa(is_causal=True), lambda r: qkv(r, S=4)),
    "causal_rectangular": (sdpa(is_causal=True), lambda r: qkv(r, L=3, S=5)),
    "additive_mask": (sdpa(), lambda r: qkv(r) + [r.standard_normal((4, 5))]),
    "additive_mask_batched": (sdpa(), lambda r: qkv(r) + [r.standard_normal((2, 1, 4, 5))]),
    "gqa": (sdpa(enable_gqa=True), lambda r: qkv(r, batch=(2, 4), kv_heads=2)),
    "gqa_causal_scale": (sdpa(enable_gqa=True, is_causal=True, scale=0.5),
                         lambda r: qkv(r, batch=(1, 6), L=5, kv_heads=3)),
}


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", sorted(CASES))
def test_sdpa_matches_torch(name, dtype, compiled, rng):
    fn, make = CASES[name]
    check_against_torch(fn, make(rng), dtype, compiled, msg=name)


@COMPILED
@pytest.mark.parametrize("name", ["plain", "causal", "additive_mask", "gqa"])
def test_sdpa_gradcheck_float64(name, compiled, rng):
    fn, make = CASES[name]
    check_numeric_gradient(fn, make(rng), compiled)


def run_both_with_bool_mask(fn, arrays, mask, dtype, compiled=False):
    """torch gets a bool mask; cagrad the same mask as a tagged 0/1 tensor."""
    cs = [ca.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    ts = [torch.tensor(a.astype(dtype), requires_grad=True) for a in arrays]
    out_c = fn(ca, *cs, ca.tensor(mask))
    out_t = fn(torch, *ts, torch.tensor(mask))
    return cs, ts, out_c, out_t


@COMPILED
@DTYPE
@pytest.mark.parametrize("mask_shape", [(4, 5), (2, 1, 4, 5), (3, 1, 5)])
def test_boolean_mask(mask_shape, dtype, compiled, rng):
    arrays = qkv(rng, S=5)
    mask = bool_mask(rng, mask_shape)
    fn = sdpa()
    assert ca.tensor(mask).dtype is ca.bool  # what tells it from an additive mask
    check_against_torch(lambda L, q, k, v: fn(L, q, k, v, L.tensor(mask)), arrays, dtype,
                        compiled)


def test_comparison_result_is_a_boolean_mask(rng):
    """An int64 comparison gives a bool tensor, which selects as torch's does."""
    arrays = qkv(rng)
    positions = np.arange(5)
    mask_np = positions[None, :] <= np.arange(4)[:, None] + 1

    def fn(L, q, k, v):
        cols = L.arange(5).reshape(1, 5)
        rows = L.arange(4).reshape(4, 1)
        return L.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=cols <= rows + 1)

    out_c, out_t = check_against_torch(fn, arrays, "float64")
    plain = check_against_torch(sdpa(), arrays + [np.where(mask_np, 0.0, -np.inf)],
                                "float64")[0]
    np.testing.assert_allclose(to_np(out_c), to_np(plain), rtol=1e-12)


def test_float_comparison_result_is_a_boolean_mask(rng):
    """A comparison of float tensors (torch: a bool tensor) selects too; arithmetic on it
    gives a plain float tensor, which is additive, as in torch."""
    arrays = qkv(rng)
    scores = rng.standard_normal((4, 5))

    def fn(L, q, k, v):
        keep = L.tensor(scores) > -0.5
        return L.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=keep)

    check_against_torch(fn, arrays, "float64")

    def additive(L, q, k, v):
        bias = (L.tensor(scores) > -0.5) * 1.0  # 0/1 floats: added to the scores
        return L.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=bias)

    check_against_torch(additive, arrays, "float64")


def test_fully_masked_rows_give_zeros(rng):
    arrays = qkv(rng, batch=(2,))
    mask = bool_mask(rng, (4, 5))
    mask[1] = False
    additive = np.where(mask, 0.0, -np.inf)
    for dtype in DTYPES:
        check_against_torch(lambda L, q, k, v: sdpa()(L, q, k, v, L.tensor(mask)), arrays,
                            dtype)
        check_against_torch(sdpa(), arrays + [additive], dtype, needs_grad=[0, 1, 2])


def test_untagged_int64_mask_is_refused_like_torch(rng):
    q, k, v = (ca.tensor(a.astype("float32")) for a in qkv(rng))
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float"):
        ca.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=ca.ones(4, 5).long())
    tq, tk, tv = (torch.tensor(a.astype("float32")) for a in qkv(rng))
    with pytest.raises(RuntimeError, match="Expected attn_mask dtype to be bool or float"):
        torch.nn.functional.scaled_dot_product_attention(tq, tk, tv,
                                                         attn_mask=torch.ones(4, 5).long())


def test_dropout_in_attention(rng):
    """dropout_p drops attention weights (and rescales the rest) even outside training:
    with value = I the output is the weight matrix itself."""
    q, k = (ca.tensor(a, requires_grad=True) for a in qkv(rng, L=64, S=64)[:2])
    ident = ca.tensor(np.broadcast_to(np.eye(64), (2, 3, 64, 64)).copy())
    p = 0.5
    dropped = ca.nn.functional.scaled_dot_product_attention(q, k, ident, dropout_p=p)
    weights = to_np(dropped)
    plain = to_np(ca.nn.functional.scaled_dot_product_attention(q, k, ident))
    zero = weights == 0
    assert abs(zero.mean() - p) < 0.02
    np.testing.assert_allclose(weights[~zero], plain[~zero] / (1 - p), rtol=1e-10)
    dropped.sum().backward()
    assert np.isfinite(to_np(q.grad)).all() and np.abs(to_np(q.grad)).sum() > 0


BAD_CALLS = {
    "mask_and_causal": lambda L: L.nn.functional.scaled_dot_product_attention(
        L.ones(2, 3, requires_grad=True), L.ones(2, 3), L.ones(2, 3),
        attn_mask=L.zeros(2, 2), is_causal=True),
    "dtypes": lambda L: L.nn.functional.scaled_dot_product_attention(
        L.ones(2, 3), L.ones(2, 3, dtype=L.float64), L.ones(2, 3)),
    "gqa_heads": lambda L: L.nn.functional.scaled_dot_product_attention(
        L.ones(1, 4, 3, 2), L.ones(1, 3, 3, 2), L.ones(1, 3, 3, 2), enable_gqa=True),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    # torch 2.13 cuts the GQA message short ("... number of heads in "); cagrad ends it
    assert got[1].startswith(expected[1]), (got, expected)


def test_default_scale_is_inverse_sqrt_of_embedding(rng):
    arrays = qkv(rng, E=16)
    out = check_against_torch(sdpa(), arrays, "float64", needs_grad=[])[0]
    scaled = check_against_torch(sdpa(scale=1 / math.sqrt(16)), arrays, "float64",
                                 needs_grad=[])[0]
    np.testing.assert_array_equal(to_np(out), to_np(scaled))


# --- nn.MultiheadAttention ----------------------------------------------------------------

def make_mha_pair(rng, **kwargs):
    """The same MultiheadAttention (float64) in both libraries, with torch's random weights
    copied into cagrad's (biases made nonzero so that they are tested)."""
    theirs = torch.nn.MultiheadAttention(dtype=torch.float64, **kwargs)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.5))
    ours = ca.nn.MultiheadAttention(dtype=ca.float64, **kwargs)
    ours.load_state_dict({k: ca.tensor(v.numpy()) for k, v in theirs.state_dict().items()})
    return {ca: ours, torch: theirs}


MHA_CASES = {
    "plain": (dict(embed_dim=6, num_heads=2), {}),
    "batch_first": (dict(embed_dim=6, num_heads=3, batch_first=True), {}),
    "no_average": (dict(embed_dim=4, num_heads=2), dict(average_attn_weights=False)),
    "kdim_vdim": (dict(embed_dim=4, num_heads=2, kdim=3, vdim=5), {}),
    "no_bias": (dict(embed_dim=4, num_heads=1, bias=False), {}),
    "bias_kv_zero_attn": (dict(embed_dim=4, num_heads=2, add_bias_kv=True,
                               add_zero_attn=True), {}),
    "float_masks": (dict(embed_dim=4, num_heads=2), dict(masks="float")),
    "bool_masks": (dict(embed_dim=4, num_heads=2), dict(masks="bool")),
    "bool_masks_no_weights": (dict(embed_dim=4, num_heads=2),
                              dict(masks="bool", need_weights=False)),
    "unbatched": (dict(embed_dim=4, num_heads=2), dict(unbatched=True)),
}


def mha_inputs(rng, kwargs, opts, n=2, tgt=3, src=5):
    e = kwargs["embed_dim"]
    kd, vd = kwargs.get("kdim", e), kwargs.get("vdim", e)
    if opts.get("unbatched"):
        return [rng.standard_normal((tgt, e)), rng.standard_normal((src, kd)),
                rng.standard_normal((src, vd))]
    lead = (n,) if kwargs.get("batch_first") else ()
    tail = () if kwargs.get("batch_first") else (n,)
    return [rng.standard_normal(lead + (tgt,) + tail + (e,)),
            rng.standard_normal(lead + (src,) + tail + (kd,)),
            rng.standard_normal(lead + (src,) + tail + (vd,))]


def mha_masks(L, rng_masks, kind):
    attn, padding = rng_masks
    if kind == "float":
        return dict(attn_mask=L.tensor(np.where(attn, -1.5, 0.25)),
                    key_padding_mask=L.tensor(np.where(padding, -math.inf, 0.0)))
    return dict(attn_mask=L.tensor(attn), key_padding_mask=L.tensor(padding))


@COMPILED
@pytest.mark.parametrize("name", sorted(MHA_CASES))
def test_multihead_attention_matches_torch(name, compiled, rng):
    kwargs, opts = MHA_CASES[name]
    mods = make_mha_pair(rng, **kwargs)
    inputs = mha_inputs(rng, kwargs, opts)
    masks = (rng.uniform(0, 1, (3, 5)) > 0.7, rng.uniform(0, 1, (2, 5)) > 0.7)
    masks[0][:, 0] = False  # every query keeps a key (an empty row is nan in torch)
    masks[1][:, 0] = False
    call = {k: v for k, v in opts.items() if k in ("need_weights", "average_attn_weights")}

    def fn(L, q, k, v):
        extra = mha_masks(L, masks, opts["masks"]) if "masks" in opts else {}
        out, weights = mods[L](q, k, v, **call, **extra)
        if weights is None:
            return out
        return L.cat([out.reshape(-1), weights.reshape(-1)])

    check_against_torch(fn, inputs, "float64", compiled, msg=name)
    for (n, c), (_, t) in zip(mods[ca].named_parameters(), mods[torch].named_parameters()):
        assert_close(c.grad, t.grad, msg=n, rtol=1e-10, atol=1e-12)


def test_multihead_attention_weights_none_and_dropout(rng):
    m = ca.nn.MultiheadAttention(4, 2, dropout=0.5)
    x = ca.randn(3, 2, 4)
    out, weights = m(x, x, x, need_weights=False)
    assert weights is None and tuple(out.shape) == (3, 2, 4)
    m.eval()
    a, _ = m(x, x, x)
    b, _ = m(x, x, x)
    np.testing.assert_array_equal(to_np(a), to_np(b))  # no dropout in eval
    m.train()
    _, w = m(x, x, x, average_attn_weights=False)
    assert (to_np(w) == 0).any()  # dropout on the weights in training


MHA_BAD = {
    "divisible": lambda L: L.nn.MultiheadAttention(5, 2),
    "positive": lambda L: L.nn.MultiheadAttention(0, 2),
    "mask_shape": lambda L: L.nn.MultiheadAttention(4, 2)(
        L.ones(3, 2, 4), L.ones(3, 2, 4), L.ones(3, 2, 4), attn_mask=L.zeros(2, 2)),
    "causal_hint": lambda L: L.nn.MultiheadAttention(4, 2)(
        L.ones(3, 2, 4), L.ones(3, 2, 4), L.ones(3, 2, 4), is_causal=True),
    "int_mask": lambda L: L.nn.MultiheadAttention(4, 2)(
        L.ones(3, 2, 4), L.ones(3, 2, 4), L.ones(3, 2, 4), attn_mask=L.zeros(3, 3).long()),
}


@pytest.mark.parametrize("case", sorted(MHA_BAD))
def test_multihead_attention_errors(case):
    got, expected = error_of(ca, MHA_BAD[case]), error_of(torch, MHA_BAD[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1] == expected[1].replace("torch.Size", "cagrad.Size"), (got, expected)


@pytest.mark.parametrize("need_weights", [True, False])
def test_multihead_attention_query_with_no_key(need_weights, rng):
    """A query row whose keys are all masked: nan on the need_weights path, zeros on the
    other (PyTorch's two paths differ; cagrad follows each)."""
    mods = make_mha_pair(rng, embed_dim=4, num_heads=2)
    inputs = mha_inputs(rng, dict(embed_dim=4), {})
    attn = np.zeros((3, 5), dtype=bool)
    attn[1] = True
    outs = []
    for L in (ca, torch):
        q, k, v = (L.tensor(a) for a in inputs)
        outs.append(mods[L](q, k, v, attn_mask=L.tensor(attn), need_weights=need_weights)[0])
    np.testing.assert_allclose(to_np(outs[0]), to_np(outs[1]), rtol=1e-10, atol=1e-12)
    assert np.isnan(to_np(outs[0])[1]).all() == need_weights
