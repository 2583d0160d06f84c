"""A character-level GPT trained the way nanoGPT's single-process train.py trains: a memmapped
uint16 token file, random windows picked with randint, a LayerNorm with an optional bias,
scaled_dot_product_attention when the library has it, tied embeddings, AdamW with a
dimension-based decay split, a warmup-then-cosine learning rate, gradient accumulation
through a GradScaler that is off in float32, clipping, evaluation under no_grad, a
checkpoint dict written with torch.save and a resume from it, and torch.compile.

It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs.py).

    python nanogpt_style.py --data-dir DIR --out-dir DIR [--iters N] [--resume] [--compile]

DIR holds train.bin and val.bin (uint16 token ids) and meta.json ({"vocab_size": n});
`prepare(text, dir)` writes them from a string.
"""

import argparse
import inspect
import json
import math
import os
from contextlib import nullcontext

import numpy as np
import torch
import torch.nn as nn
from torch.nn import functional as F


def prepare(text, data_dir):
    chars = sorted(set(text))
    stoi = {c: i for i, c in enumerate(chars)}
    ids = np.array([stoi[c] for c in text], dtype=np.uint16)
    cut = int(0.9 * len(ids))
    os.makedirs(data_dir, exist_ok=True)
    ids[:cut].tofile(os.path.join(data_dir, "train.bin"))
    ids[cut:].tofile(os.path.join(data_dir, "val.bin"))
    with open(os.path.join(data_dir, "meta.json"), "w") as f:
        json.dump({"vocab_size": len(chars)}, f)


class LayerNorm(nn.Module):
    """LayerNorm whose bias can be switched off."""

    def __init__(self, ndim, bias):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(ndim))
        self.bias = nn.Parameter(torch.zeros(ndim)) if bias else None

    def forward(self, x):
        return F.layer_norm(x, self.weight.shape, self.weight, self.bias, 1e-5)


class SelfAttention(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.qkv = nn.Linear(cfg["n_embd"], 3 * cfg["n_embd"], bias=cfg["bias"])
        self.c_proj = nn.Linear(cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.drop = nn.Dropout(cfg["dropout"])
        self.p = cfg["dropout"]
        self.n_head = cfg["n_head"]
        self.fused = hasattr(torch.nn.functional, "scaled_dot_product_attention")
        if not self.fused:
            n = cfg["block_size"]
            self.register_buffer("mask", torch.tril(torch.ones(n, n)).view(1, 1, n, n))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.qkv(x).split(C, dim=2)]
        if self.fused:
            y = F.scaled_dot_product_attention(q, k, v, attn_mask=None,
                                               dropout_p=self.p if self.training else 0.0,
                                               is_causal=True)
        else:
            a = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
            a = a.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
            y = self.drop(F.softmax(a, dim=-1)) @ v
        return self.drop(self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C)))


class Block(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.ln_1 = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.attn = SelfAttention(cfg)
        self.ln_2 = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.c_fc = nn.Linear(cfg["n_embd"], 4 * cfg["n_embd"], bias=cfg["bias"])
        self.c_proj = nn.Linear(4 * cfg["n_embd"], cfg["n_embd"], bias=cfg["bias"])
        self.drop = nn.Dropout(cfg["dropout"])

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        return x + self.drop(self.c_proj(F.gelu(self.c_fc(self.ln_2(x)))))


class GPT(nn.Module):
    def __init__(self, cfg):
        super().__init__()
        self.cfg = cfg
        self.wte = nn.Embedding(cfg["vocab_size"], cfg["n_embd"])
        self.wpe = nn.Embedding(cfg["block_size"], cfg["n_embd"])
        self.drop = nn.Dropout(cfg["dropout"])
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg["n_layer"])])
        self.ln_f = LayerNorm(cfg["n_embd"], cfg["bias"])
        self.lm_head = nn.Linear(cfg["n_embd"], cfg["vocab_size"], bias=False)
        self.wte.weight = self.lm_head.weight  # tied
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * cfg["n_layer"]))

    def _init(self, m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            torch.nn.init.normal_(m.weight, mean=0.0, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            torch.nn.init.zeros_(m.bias)

    def num_params(self):
        return sum(p.numel() for p in self.parameters()) - self.wpe.weight.numel()

    def forward(self, idx, targets=None):
        t = idx.size(1)
        pos = torch.arange(0, t, dtype=torch.long, device=idx.device)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.blocks:
            x = block(x)
        x = self.ln_f(x)
        if targets is None:
            return self.lm_head(x[:, [-1], :]), None
        logits = self.lm_head(x)
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                       ignore_index=-1)

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        params = {n: p for n, p in self.named_parameters() if p.requires_grad}
        groups = [{"params": [p for p in params.values() if p.dim() >= 2],
                   "weight_decay": weight_decay},
                  {"params": [p for p in params.values() if p.dim() < 2], "weight_decay": 0.0}]
        fused = "fused" in inspect.signature(torch.optim.AdamW).parameters and device_type == "cuda"
        extra = dict(fused=True) if fused else dict()
        return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, **extra)

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, top_k=None):
        for _ in range(max_new_tokens):
            cond = idx if idx.size(1) <= self.cfg["block_size"] else idx[:, -self.cfg["block_size"]:]
            logits, _ = self(cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, min(top_k, logits.size(-1)))
                logits[logits < v[:, [-1]]] = -float("Inf")
            idx = torch.cat((idx, torch.multinomial(F.softmax(logits, dim=-1), num_samples=1)), 1)
        return idx


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", required=True)
    ap.add_argument("--out-dir", required=True)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--resume", action="store_true")
    ap.add_argument("--compile", action="store_true")
    ap.add_argument("--dtype", default="float32")
    a = ap.parse_args(argv)

    batch_size, block_size, grad_accum = 8, 16, 2
    learning_rate, min_lr, warmup, decay_iters = 1e-3, 1e-4, 5, a.iters
    eval_iters, eval_interval = 4, 10
    device, device_type = "cpu", "cpu"
    torch.manual_seed(1337)
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.backends.cudnn.allow_tf32 = True
    ptdtype = {"float32": torch.float32, "bfloat16": torch.bfloat16,
               "float16": torch.float16}[a.dtype]
    ctx = nullcontext() if device_type == "cpu" else torch.amp.autocast(device_type=device_type,
                                                                        dtype=ptdtype)

    def get_batch(split):
        data = np.memmap(os.path.join(a.data_dir, f"{split}.bin"), dtype=np.uint16, mode="r")
        ix = torch.randint(len(data) - block_size, (batch_size,))
        x = torch.stack([torch.from_numpy(data[i:i + block_size].astype(np.int64)) for i in ix])
        y = torch.stack([torch.from_numpy(data[i + 1:i + 1 + block_size].astype(np.int64))
                         for i in ix])
        return x, y

    with open(os.path.join(a.data_dir, "meta.json")) as f:
        vocab_size = json.load(f)["vocab_size"]
    model_args = dict(n_layer=2, n_head=2, n_embd=32, block_size=block_size, bias=False,
                      vocab_size=vocab_size, dropout=0.0)
    iter_num, best_val_loss = 0, 1e9
    ckpt_path = os.path.join(a.out_dir, "ckpt.pt")
    if a.resume:
        checkpoint = torch.load(ckpt_path, map_location=device)
        model_args = checkpoint["model_args"]
        model = GPT(model_args)
        state_dict = checkpoint["model"]
        for k in list(state_dict.keys()):
            if k.startswith("_orig_mod."):
                state_dict[k[len("_orig_mod."):]] = state_dict.pop(k)
        model.load_state_dict(state_dict)
        iter_num, best_val_loss = checkpoint["iter_num"], checkpoint["best_val_loss"]
    else:
        model = GPT(model_args)
    scaler = torch.cuda.amp.GradScaler(enabled=(a.dtype == "float16"))
    optimizer = model.configure_optimizers(0.1, learning_rate, (0.9, 0.95), device_type)
    if a.resume:
        optimizer.load_state_dict(checkpoint["optimizer"])
        checkpoint = None
    if a.compile:
        model = torch.compile(model)

    @torch.no_grad()
    def estimate_loss():
        out = {}
        model.eval()
        for split in ("train", "val"):
            losses = torch.zeros(eval_iters)
            for k in range(eval_iters):
                X, Y = get_batch(split)
                with ctx:
                    _, loss = model(X, Y)
                losses[k] = loss.item()
            out[split] = losses.mean().item()
        model.train()
        return out

    def get_lr(it):
        if it < warmup:
            return learning_rate * (it + 1) / (warmup + 1)
        if it > decay_iters:
            return min_lr
        ratio = (it - warmup) / (decay_iters - warmup)
        return min_lr + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (learning_rate - min_lr)

    losses = []
    end = iter_num + a.iters
    X, Y = get_batch("train")
    while iter_num < end:
        lr = get_lr(iter_num)
        for group in optimizer.param_groups:
            group["lr"] = lr
        if iter_num % eval_interval == 0:
            ev = estimate_loss()
            if ev["val"] < best_val_loss:
                best_val_loss = ev["val"]
                raw = model._orig_mod if hasattr(model, "_orig_mod") else model
                os.makedirs(a.out_dir, exist_ok=True)
                torch.save({"model": raw.state_dict(), "optimizer": optimizer.state_dict(),
                            "model_args": model_args, "iter_num": iter_num,
                            "best_val_loss": best_val_loss, "config": {"lr": learning_rate}},
                           ckpt_path)
        for _ in range(grad_accum):
            with ctx:
                _, loss = model(X, Y)
                loss = loss / grad_accum
            X, Y = get_batch("train")
            scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        losses.append(loss.item() * grad_accum)
        iter_num += 1
    raw = model._orig_mod if hasattr(model, "_orig_mod") else model
    sample = raw.generate(torch.zeros((1, 1), dtype=torch.long), 8, top_k=5)
    print(json.dumps({"losses": losses, "iter_num": iter_num, "best_val_loss": best_val_loss,
                      "sample_len": sample.size(1), "params": raw.num_params()}))


if __name__ == "__main__":
    main()
