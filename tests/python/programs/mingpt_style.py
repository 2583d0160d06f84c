"""A small GPT trained on a sorting task, written the way minGPT writes it: a ModuleDict of
parts, a causal-mask buffer made with tril, weight decay split by module type, AdamW, a
DataLoader over a random sampler with replacement, gradient clipping and top-k sampling.

It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs.py).

    python mingpt_style.py [--iters N] [--json]
"""

import argparse
import json
import math
import time

import torch
import torch.nn as nn
from torch.nn import functional as F
from torch.utils.data import DataLoader, Dataset


class SortDataset(Dataset):
    """Sequences of digits and their sorted copy; the model predicts the sorted half."""

    def __init__(self, split, length=6, num_digits=3):
        assert split in {"train", "test"}
        self.split, self.length, self.num_digits = split, length, num_digits

    def __len__(self):
        return 10000

    def get_vocab_size(self):
        return self.num_digits

    def get_block_size(self):
        return self.length * 2 - 1

    def __getitem__(self, idx):
        inp = torch.randint(self.num_digits, size=(self.length,), dtype=torch.long)
        sol = torch.sort(inp)[0]
        cat = torch.cat((inp, sol), dim=0)
        x = cat[:-1].clone()
        y = cat[1:].clone()
        y[: self.length - 1] = -1  # only the sorted half is predicted
        return x, y


class NewGELU(nn.Module):
    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


class CausalSelfAttention(nn.Module):
    def __init__(self, config):
        super().__init__()
        assert config.n_embd % config.n_head == 0
        self.c_attn = nn.Linear(config.n_embd, 3 * config.n_embd)
        self.c_proj = nn.Linear(config.n_embd, config.n_embd)
        self.attn_dropout = nn.Dropout(config.attn_pdrop)
        self.resid_dropout = nn.Dropout(config.resid_pdrop)
        self.register_buffer("bias", torch.tril(torch.ones(config.block_size, config.block_size))
                             .view(1, 1, config.block_size, config.block_size))
        self.n_head = config.n_head
        self.n_embd = config.n_embd

    def heads(self, t, batch, steps):
        return t.view(batch, steps, self.n_head, self.n_embd // self.n_head).transpose(1, 2)

    def forward(self, x):
        batch, steps, width = x.size()
        q, k, v = (self.heads(t, batch, steps) for t in self.c_attn(x).split(self.n_embd, dim=2))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        future = self.bias[:, :, :steps, :steps] == 0
        weights = self.attn_dropout(F.softmax(scores.masked_fill(future, float("-inf")), dim=-1))
        mixed = (weights @ v).transpose(1, 2).contiguous().view(batch, steps, width)
        return self.resid_dropout(self.c_proj(mixed))


class Block(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.n_embd)
        self.attn = CausalSelfAttention(config)
        self.ln_2 = nn.LayerNorm(config.n_embd)
        self.mlp = nn.ModuleDict(dict(
            c_fc=nn.Linear(config.n_embd, 4 * config.n_embd),
            c_proj=nn.Linear(4 * config.n_embd, config.n_embd),
            act=NewGELU(),
            dropout=nn.Dropout(config.resid_pdrop),
        ))
        m = self.mlp
        self.mlpf = lambda x: m.dropout(m.c_proj(m.act(m.c_fc(x))))

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlpf(self.ln_2(x))
        return x


class Config:
    def __init__(self, **kw):
        self.__dict__.update(kw)


class GPT(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.block_size = config.block_size
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(config.vocab_size, config.n_embd),
            wpe=nn.Embedding(config.block_size, config.n_embd),
            drop=nn.Dropout(config.embd_pdrop),
            h=nn.ModuleList([Block(config) for _ in range(config.n_layer)]),
            ln_f=nn.LayerNorm(config.n_embd),
        ))
        self.lm_head = nn.Linear(config.n_embd, config.vocab_size, bias=False)
        self.apply(self._init_weights)
        for pn, p in self.named_parameters():
            if pn.endswith("c_proj.weight"):
                torch.nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * config.n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                torch.nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            torch.nn.init.normal_(module.weight, mean=0.0, std=0.02)
        elif isinstance(module, nn.LayerNorm):
            torch.nn.init.zeros_(module.bias)
            torch.nn.init.ones_(module.weight)

    def configure_optimizers(self, train_config):
        # Linear weights decay; biases, LayerNorm and Embedding weights do not.
        decayed = {}
        for module_name, module in self.named_modules():
            for name, _ in module.named_parameters(recurse=False):
                full = f"{module_name}.{name}" if module_name else name
                decayed[full] = name == "weight" and isinstance(module, torch.nn.Linear)
        params = dict(self.named_parameters())
        assert set(decayed) == set(params), "every parameter is in one group"
        groups = [{"params": [params[n] for n in sorted(params) if decayed[n] == wd],
                   "weight_decay": train_config.weight_decay if wd else 0.0}
                  for wd in (True, False)]
        return torch.optim.AdamW(groups, lr=train_config.learning_rate, betas=train_config.betas)

    def forward(self, idx, targets=None):
        b, t = idx.size()
        assert t <= self.block_size, f"sequence of length {t} exceeds block size {self.block_size}"
        pos = torch.arange(0, t, dtype=torch.long).unsqueeze(0)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1),
                                   ignore_index=-1)
        return logits, loss

    @torch.no_grad()
    def generate(self, idx, max_new_tokens, temperature=1.0, do_sample=False, top_k=None):
        for _ in range(max_new_tokens):
            idx_cond = idx if idx.size(1) <= self.block_size else idx[:, -self.block_size:]
            logits, _ = self(idx_cond)
            logits = logits[:, -1, :] / temperature
            if top_k is not None:
                v, _ = torch.topk(logits, top_k)
                logits[logits < v[:, [-1]]] = -float("Inf")
            probs = F.softmax(logits, dim=-1)
            if do_sample:
                idx_next = torch.multinomial(probs, num_samples=1)
            else:
                _, idx_next = torch.topk(probs, k=1, dim=-1)
            idx = torch.cat((idx, idx_next), dim=1)
        return idx


def model_config(train_dataset):
    return Config(vocab_size=train_dataset.get_vocab_size(),
                  block_size=train_dataset.get_block_size(), n_layer=2, n_head=2, n_embd=32,
                  embd_pdrop=0.1, resid_pdrop=0.1, attn_pdrop=0.1)


def train(iters, num_workers=0):
    torch.manual_seed(3407)
    train_dataset = SortDataset("train")
    model = GPT(model_config(train_dataset))
    tc = Config(learning_rate=5e-4, betas=(0.9, 0.95), weight_decay=0.1, grad_norm_clip=1.0,
                batch_size=32)
    optimizer = model.configure_optimizers(tc)
    loader = DataLoader(
        train_dataset,
        sampler=torch.utils.data.RandomSampler(train_dataset, replacement=True,
                                               num_samples=int(1e10)),
        shuffle=False, pin_memory=True, batch_size=tc.batch_size, num_workers=num_workers)
    model.train()
    losses, it, t0 = [], 0, time.time()
    data_iter = iter(loader)
    while it < iters:
        x, y = next(data_iter)
        logits, loss = model(x, y)
        model.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), tc.grad_norm_clip)
        optimizer.step()
        losses.append(loss.item())
        it += 1
    model.eval()
    inp = torch.tensor([[2, 0, 1, 0, 2, 1]], dtype=torch.long)
    out = model.generate(inp, 5, do_sample=False)
    sampled = model.generate(inp, 5, do_sample=True, top_k=2)
    return {"losses": losses, "greedy": out[0].tolist(), "sampled_len": sampled.size(1),
            "seconds": time.time() - t0}


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--num-workers", type=int, default=0)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    res = train(a.iters, a.num_workers)
    if a.json:
        print(json.dumps(res))
    else:
        print(f"loss {res['losses'][0]:.4f} -> {res['losses'][-1]:.4f} in {res['seconds']:.1f} s")
