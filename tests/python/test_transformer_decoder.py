"""nn.TransformerDecoderLayer, nn.TransformerDecoder and nn.Transformer against torch 2.13:
torch's weights loaded into cagrad's modules (same state_dict keys), then outputs and the
gradients of tgt, memory/src and every parameter compared in float32 and float64, eager
and under compiled autograd, with causal / padding / memory masks, batch_first and
unbatched inputs; generate_square_subsequent_mask, errors, gradcheck, and a small
seq2seq model (embeddings + nn.Transformer + a linear head) trained a few steps with the
same losses as torch's."""

import warnings

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])
D_MODEL, NHEAD, FF = 8, 2, 16
T_LEN, S_LEN, BATCH = 4, 5, 3


def load_from(mod, ref):
    missing = mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    assert not missing.missing_keys and not missing.unexpected_keys
    return mod, ref


def build(L, kind, kwargs, dtype):
    kwargs = dict(kwargs)
    dt = getattr(L, dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the encoder's nested-tensor notice
        if kind == "layer":
            return L.nn.TransformerDecoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, dtype=dt,
                                                **kwargs)
        if kind == "decoder":
            layer = L.nn.TransformerDecoderLayer(D_MODEL, NHEAD, FF, dropout=0.0, dtype=dt,
                                                 **kwargs)
            return L.nn.TransformerDecoder(layer, 2, norm=L.nn.LayerNorm(D_MODEL, dtype=dt))
        return L.nn.Transformer(D_MODEL, NHEAD, 2, 2, FF, dropout=0.0, dtype=dt, **kwargs)


def twin(kind, kwargs, dtype):
    torch.manual_seed(0)
    return load_from(build(ca, kind, kwargs, dtype), build(torch, kind, kwargs, dtype))


def arrays(dtype, batch_first, unbatched, seed=0):
    rng = np.random.default_rng(seed)
    tgt = rng.standard_normal((T_LEN, BATCH, D_MODEL)).astype(dtype)
    mem = rng.standard_normal((S_LEN, BATCH, D_MODEL)).astype(dtype)
    if unbatched:
        tgt, mem = tgt[:, 0], mem[:, 0]
    elif batch_first:
        tgt, mem = tgt.transpose(1, 0, 2).copy(), mem.transpose(1, 0, 2).copy()
    return tgt, mem


def masks(L, dtype, which, unbatched):
    out = {}
    if "causal" in which:
        out["tgt_mask"] = L.nn.Transformer.generate_square_subsequent_mask(
            T_LEN, dtype=getattr(L, dtype))
    if "padding" in which and not unbatched:
        pad = np.zeros((BATCH, S_LEN), dtype=bool)
        pad[1, -2:] = True
        out["memory_key_padding_mask"] = L.tensor(pad)
        tpad = np.zeros((BATCH, T_LEN), dtype=bool)
        tpad[2, -1] = True
        out["tgt_key_padding_mask"] = L.tensor(tpad)
    if "memory" in which:
        mm = np.zeros((T_LEN, S_LEN), dtype=bool)
        mm[0, 1] = True
        out["memory_mask"] = L.tensor(mm)
    return out


def run(L, module, kind, dtype, which, batch_first, unbatched, compiled):
    tgt_np, mem_np = arrays(dtype, batch_first, unbatched)
    tgt = L.tensor(tgt_np, requires_grad=True)
    mem = L.tensor(mem_np, requires_grad=True)
    kw = masks(L, dtype, which, unbatched)
    if kind == "transformer":
        kw = {("src_key_padding_mask" if k == "memory_key_padding_mask" else k): v
              for k, v in kw.items()}
        if "memory_key_padding_mask" in masks(L, dtype, which, unbatched):
            kw["memory_key_padding_mask"] = kw["src_key_padding_mask"]
        out = module(mem, tgt, **kw)
    else:
        out = module(tgt, mem, **kw)
    weight = L.tensor(np.random.default_rng(9).standard_normal(tuple(out.shape)).astype(dtype))
    loss = (out * weight).sum()
    if L is ca:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    else:
        loss.backward()
    return [out, tgt.grad, mem.grad] + [p.grad for p in module.parameters()]


CASES = [
    ("layer", {}, "", False, False),
    ("layer", dict(norm_first=True, activation="gelu"), "causal", False, False),
    ("layer", dict(batch_first=True, bias=False), "causal-padding", True, False),
    ("layer", dict(activation=torch.nn.functional.gelu), "memory", False, True),
    ("decoder", {}, "causal-padding-memory", False, False),
    ("decoder", dict(batch_first=True, norm_first=True), "causal", True, False),
    ("transformer", {}, "causal-padding", False, False),
    ("transformer", dict(batch_first=True, norm_first=True), "causal", True, False),
    ("transformer", {}, "", False, True),
]
IDS = [f"{k}-{'-'.join(f'{a}={b}' for a, b in kw.items() if a != 'activation') or 'default'}"
       f"-{w or 'nomask'}{'-bf' if bf else ''}{'-unbatched' if ub else ''}"
       for k, kw, w, bf, ub in CASES]


@COMPILED
@DTYPE
@pytest.mark.parametrize("kind,kwargs,which,batch_first,unbatched", CASES, ids=IDS)
def test_decoder_modules_match_torch(kind, kwargs, which, batch_first, unbatched, dtype,
                                     compiled):
    ca_kwargs = {k: (ca.nn.functional.gelu if v is torch.nn.functional.gelu else v)
                 for k, v in kwargs.items()}
    mod, _ = load_from(build(ca, kind, ca_kwargs, dtype), ref := build(torch, kind, kwargs,
                                                                      dtype))
    got = run(ca, mod, kind, dtype, which, batch_first, unbatched, compiled)
    want = run(torch, ref, kind, dtype, which, batch_first, unbatched, False)
    assert len(got) == len(want)
    tol = TOL_SUM[dtype] if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, **tol, msg=f"result {i}")


def test_structure_names_and_repr():
    for kind in ("layer", "decoder", "transformer"):
        mod, ref = twin(kind, {}, "float32")
        assert list(mod.state_dict()) == list(ref.state_dict())
        assert repr(mod).replace("cagrad", "torch") == repr(ref)
    t = build(ca, "transformer", dict(batch_first=True), "float32")
    assert (t.d_model, t.nhead, t.batch_first) == (D_MODEL, NHEAD, True)


def test_transformer_init_is_xavier_for_matrices():
    ca.manual_seed(0)
    t = ca.nn.Transformer(16, 2, 1, 1, 32, dropout=0.0)
    w = t.decoder.layers[0].linear1.weight
    bound = (6 / (16 + 32)) ** 0.5
    assert float(w.abs().max()) <= bound and float(w.abs().max()) > 0.8 * bound
    assert float(t.decoder.norm.weight.min()) == 1.0  # vectors keep their own init


@pytest.mark.parametrize("dtype", [None, "float64"])
def test_generate_square_subsequent_mask(dtype):
    got = ca.nn.Transformer.generate_square_subsequent_mask(
        4, dtype=None if dtype is None else getattr(ca, dtype))
    want = torch.nn.Transformer.generate_square_subsequent_mask(
        4, dtype=None if dtype is None else getattr(torch, dtype))
    assert_close(got, want)


def test_causal_hint_detected_from_mask_and_required_mask():
    mod, ref = twin("decoder", {}, "float64")
    tgt_np, mem_np = arrays("float64", False, False)
    outs = []
    for L, m in ((ca, mod), (torch, ref)):
        tgt, mem = L.tensor(tgt_np), L.tensor(mem_np)
        mask = L.nn.Transformer.generate_square_subsequent_mask(T_LEN, dtype=L.float64)
        outs.append([m(tgt, mem, tgt_mask=mask), m(tgt, mem, tgt_mask=mask,
                                                   tgt_is_causal=True)])
    for a, b in zip(*outs):
        assert_close(a, b, **TOL_SUM["float64"])

    def no_mask(L):
        layer = L.nn.TransformerDecoderLayer(4, 2, 8)
        layer(L.zeros(3, 1, 4), L.zeros(2, 1, 4), tgt_is_causal=True)
    assert error_of(ca, no_mask) == error_of(torch, no_mask)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.Transformer(4, 2, 1, 1, 8)(L.zeros(3, 2, 4), L.zeros(3, 1, 4)),
    lambda L: L.nn.Transformer(4, 2, 1, 1, 8, batch_first=True)(L.zeros(2, 3, 4),
                                                                 L.zeros(1, 3, 4)),
    lambda L: L.nn.Transformer(4, 2, 1, 1, 8)(L.zeros(3, 2, 4), L.zeros(3, 2, 5)),
    lambda L: L.nn.TransformerDecoderLayer(4, 2, activation="tanh"),
], ids=["batch", "batch-bf", "d_model", "activation"])
def test_errors_match_torch(make):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, want = error_of(ca, make), error_of(torch, make)
    assert got == want and got[0] is not None


def test_decoder_layer_gradcheck_float64():
    layer, _ = twin("layer", dict(norm_first=True), "float64")
    mask = ca.nn.Transformer.generate_square_subsequent_mask(3, dtype=ca.float64)
    rng = np.random.default_rng(3)
    tgt = ca.tensor(rng.standard_normal((3, 2, D_MODEL)), requires_grad=True)
    mem = ca.tensor(rng.standard_normal((2, 2, D_MODEL)), requires_grad=True)
    assert ca.autograd.gradcheck(lambda t, m: layer(t, m, tgt_mask=mask), (tgt, mem))


# --- a small seq2seq program ------------------------------------------------------------------

def seq2seq_losses(L, state, steps, compiled):
    """Copy-reverse task: embeddings + nn.Transformer + linear head, Adam, teacher forcing
    with a causal target mask and a padded source; returns the loss of every step."""
    vocab, d = 11, D_MODEL

    class Seq2Seq(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.src_embed = L.nn.Embedding(vocab, d, padding_idx=0)
            self.tgt_embed = L.nn.Embedding(vocab, d)
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self.transformer = L.nn.Transformer(d, NHEAD, 2, 2, FF, dropout=0.0,
                                                    batch_first=True)
            self.head = L.nn.Linear(d, vocab)

        def forward(self, src, tgt_in, src_pad):
            mask = L.nn.Transformer.generate_square_subsequent_mask(tgt_in.shape[1])
            out = self.transformer(self.src_embed(src), self.tgt_embed(tgt_in),
                                   tgt_mask=mask, src_key_padding_mask=src_pad,
                                   memory_key_padding_mask=src_pad)
            return self.head(out)

    model = Seq2Seq()
    if state is not None:
        model.load_state_dict({k: L.tensor(v) for k, v in state.items()})
    opt = L.optim.Adam(model.parameters(), lr=1e-2)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        src = rng.integers(2, vocab, size=(4, 5))
        src[1, 3:] = 0  # padding
        tgt = np.concatenate([np.ones((4, 1), dtype=src.dtype), src[:, ::-1]], 1)
        src_t, tgt_t = L.tensor(src), L.tensor(tgt)
        logits = model(src_t, tgt_t[:, :-1], src_t == 0)
        loss = L.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             tgt_t[:, 1:].reshape(-1), ignore_index=0)
        opt.zero_grad()
        with compiled_ctx(compiled and L is ca):
            loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses, model


@COMPILED
def test_seq2seq_transformer_trains_like_torch(compiled):
    torch.manual_seed(0)
    want, ref = seq2seq_losses(torch, None, 0, False)
    state = {k: to_np(v) for k, v in ref.state_dict().items()}
    want, _ = seq2seq_losses(torch, state, 5, False)
    got, _ = seq2seq_losses(ca, state, 5, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]
