"""Small models built from cagrad.nn modules, with weights copied from the same torch
models: the gradient of every parameter matches torch's, eagerly and under compiled
autograd, over several steps (so the compiled runs hit the cache).

Tolerance (float32 models): the models compose 3-6 layers, each a sum of up to 64 products
(Linear/matmul) or a row reduction (softmax, layer_norm, cross_entropy). Rounding error of
one such sum is <= n*u*sum|terms| with u = 6e-8 and n <= 64, and it propagates through the
layers roughly additively: ~4e-6 per layer relative to term magnitudes, so rtol=1e-4 with
atol=1e-5 (gradients here are O(0.01..1)) bounds it with margin. float64 runs use the tight
default tolerances.
"""

import math

import numpy as np
import pytest
import torch

from helpers import STANDIN, assert_close, backward_checked, ca, counters, to_np

MODEL_TOL = dict(rtol=1e-4, atol=1e-5)
STEPS = 3


def copy_weights(cmod, tmod):
    """Give the cagrad module torch's parameter values (through numpy), checking that both
    register the same parameters in the same order."""
    cnamed = list(cmod.named_parameters())
    tnamed = list(tmod.named_parameters())
    assert [n for n, _ in cnamed] == [n for n, _ in tnamed], "parameter names/order differ"
    with ca.no_grad():
        for (n, cp), (_, tp) in zip(cnamed, tnamed):
            assert tuple(cp.shape) == tuple(tp.shape), n
            cp.copy_(ca.tensor(tp.detach().numpy().copy()))
    for (n, cp), (_, tp) in zip(cnamed, tnamed):
        np.testing.assert_array_equal(to_np(cp), to_np(tp), err_msg=n)


def compare_grads(cmod, tmod, tol, step):
    for (n, cp), (_, tp) in zip(cmod.named_parameters(), tmod.named_parameters()):
        assert cp.grad is not None, f"step {step}: {n} has no grad"
        assert_close(cp.grad, tp.grad, **tol, msg=f"step {step}: grad of {n}")


# ---------------------------------------------------------------------------------------
# Model factories: the same code builds the cagrad and the torch model
# ---------------------------------------------------------------------------------------
def make_mlp(L):
    nn = L.nn
    return nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 24), nn.ReLU(),
                         nn.Linear(24, 4))


def mlp_loss(L, model, batch):
    x, y = batch
    return L.nn.functional.cross_entropy(model(x), y)


def make_attention(L, D=16, H=2, use_where=False, use_bmm=False):
    nn, F = L.nn, L.nn.functional

    class CausalSelfAttention(nn.Module):
        def __init__(self):
            super().__init__()
            self.q = nn.Linear(D, D)
            self.k = nn.Linear(D, D)
            self.v = nn.Linear(D, D)
            self.o = nn.Linear(D, D)

        def forward(self, x):
            B, T, _ = x.shape
            dh = D // H

            def heads(t):  # [B, T, D] -> [B, H, T, dh]
                return t.reshape(B, T, H, dh).transpose(1, 2)

            q, k, v = heads(self.q(x)), heads(self.k(x)), heads(self.v(x))
            future = L.tensor(np.triu(np.ones((T, T)), 1)) > 0.5  # [T, T], 1 above diagonal
            if use_bmm:
                q3 = q.reshape(B * H, T, dh)
                k3 = k.reshape(B * H, T, dh)
                v3 = v.reshape(B * H, T, dh)
                s = L.bmm(q3, k3.transpose(1, 2)) * (1.0 / math.sqrt(dh))
                s = s.masked_fill(future, float("-inf"))
                a = F.softmax(s, dim=-1)
                out = L.bmm(a, v3).reshape(B, H, T, dh)
            else:
                s = q @ k.transpose(-2, -1) / math.sqrt(dh)
                if use_where:
                    allowed = L.tensor(np.tril(np.ones((T, T)))) > 0.5
                    s = L.where(allowed, s, float("-inf"))
                else:
                    s = s.masked_fill(future, float("-inf"))
                a = F.softmax(s, dim=-1)
                out = a @ v
            out = out.transpose(1, 2).reshape(B, T, D)
            return self.o(out)

    return CausalSelfAttention()


def attention_loss(L, model, batch):
    x, g = batch
    return (model(x) * g).sum()


def make_ln_gelu(L, D=16):
    nn = L.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(D)
            self.fc1 = nn.Linear(D, 4 * D)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(4 * D, D)
            self.ln_tanh = nn.LayerNorm(D, elementwise_affine=False)
            self.act_tanh = nn.GELU(approximate="tanh")

        def forward(self, x):
            h = x + self.fc2(self.act(self.fc1(self.ln(x))))
            return self.act_tanh(self.ln_tanh(h))

    return Block()


def ln_gelu_loss(L, model, batch):
    x, t = batch
    return L.nn.functional.mse_loss(model(x), t)


def make_embed_ce(L, V=12, D=8):
    nn = L.nn

    class LM(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(V, D)
            self.proj = nn.Linear(D, D)
            self.head = nn.Linear(D, V, bias=False)

        def forward(self, idx):
            h = L.tanh(self.proj(self.emb(idx)))  # [B, T, D]
            return self.head(h)  # [B, T, V]

    return LM()


def embed_ce_loss(L, model, batch):
    idx, tgt = batch
    logits = model(idx)
    return L.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), tgt.reshape(-1))


def batches_mlp(rng, step, B=8):
    return [rng.standard_normal((B, 16)).astype(np.float32),
            rng.integers(0, 4, (B,)).astype(np.int64)]


def batches_attn(rng, step, B=2, T=5, D=16):
    return [rng.standard_normal((B, T, D)).astype(np.float32),
            rng.standard_normal((B, T, D)).astype(np.float32)]


def batches_ln(rng, step, B=6, D=16):
    return [(rng.standard_normal((B, D)) * 2 + 0.3).astype(np.float32),
            rng.standard_normal((B, D)).astype(np.float32)]


def batches_embed(rng, step, B=3, T=4, V=12):
    t = rng.integers(0, V, (B, T)).astype(np.int64)
    t[0, 1] = -100  # an ignored target
    return [rng.integers(0, V, (B, T)).astype(np.int64), t]


MODELS = {
    "mlp": (make_mlp, mlp_loss, batches_mlp),
    "attention_masked_fill": (make_attention, attention_loss, batches_attn),
    "attention_where": (lambda L: make_attention(L, use_where=True), attention_loss,
                        batches_attn),
    "attention_bmm": (lambda L: make_attention(L, use_bmm=True), attention_loss, batches_attn),
    "layernorm_gelu": (make_ln_gelu, ln_gelu_loss, batches_ln),
    "embedding_cross_entropy": (make_embed_ce, embed_ce_loss, batches_embed),
}


@pytest.mark.parametrize("name", list(MODELS))
def test_model_grads_match_torch(name, compiled, rng):
    make, loss_fn, data = MODELS[name]
    torch.manual_seed(0)
    tmod = make(torch)
    cmod = make(ca)
    copy_weights(cmod, tmod)
    for step in range(STEPS):
        batch = data(rng, step)
        tmod.zero_grad(set_to_none=True)
        cmod.zero_grad(set_to_none=True)
        tloss = loss_fn(torch, tmod, [torch.tensor(b) for b in batch])
        closs = loss_fn(ca, cmod, [ca.tensor(b) for b in batch])
        assert_close(closs, tloss, **MODEL_TOL, msg=f"step {step}: loss")
        tloss.backward()
        backward_checked(closs, compiled)
        compare_grads(cmod, tmod, MODEL_TOL, step)
    if compiled and not STANDIN:
        c = counters()
        assert c["captures"] == 1 and c["cache_hits"] == STEPS - 1, c


@pytest.mark.parametrize("name", ["mlp", "attention_masked_fill", "layernorm_gelu"])
def test_model_grads_accumulate_without_zero_grad(name, compiled, rng):
    """Without zero_grad, .grad accumulates over steps in both libraries (and compiled
    autograd accumulates into existing .grad on cache hits)."""
    make, loss_fn, data = MODELS[name]
    torch.manual_seed(1)
    tmod = make(torch)
    cmod = make(ca)
    copy_weights(cmod, tmod)
    for step in range(STEPS):
        batch = data(rng, step)
        loss_fn(torch, tmod, [torch.tensor(b) for b in batch]).backward()
        backward_checked(loss_fn(ca, cmod, [ca.tensor(b) for b in batch]), compiled)
    compare_grads(cmod, tmod, MODEL_TOL, STEPS - 1)


def test_model_training_eval_dropout_identity(rng):
    """A model with Dropout in eval mode gives torch's gradients exactly like without."""
    res = []
    torch.manual_seed(2)
    tmod = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Dropout(0.5), torch.nn.ReLU(),
                               torch.nn.Linear(8, 1))
    cmod = ca.nn.Sequential(ca.nn.Linear(6, 8), ca.nn.Dropout(0.5), ca.nn.ReLU(),
                            ca.nn.Linear(8, 1))
    copy_weights(cmod, tmod)
    tmod.eval()
    cmod.eval()
    x = rng.standard_normal((5, 6)).astype(np.float32)
    for L, m in ((torch, tmod), (ca, cmod)):
        m(L.tensor(x)).sum().backward()
        res.append(m)
    compare_grads(cmod, tmod, MODEL_TOL, 0)
