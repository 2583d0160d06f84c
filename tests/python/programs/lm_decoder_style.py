"""A small character language model trained the way recent PyTorch training scripts train
one: a decoder-only stack of nn.TransformerDecoderLayer (norm_first, batch_first) in an
nn.TransformerDecoder whose memory is the sequence itself under the same causal mask
(nn.Transformer.generate_square_subsequent_mask, tgt_is_causal), learned positions,
nn.CrossEntropyLoss(label_smoothing=...), AdamW with OneCycleLR stepped per optimizer step,
gradient accumulation over micro-batches, mixed-precision plumbing left off
(torch.amp.GradScaler(enabled=False), torch.autocast("cpu", enabled=False)), gradient
clipping after scaler.unscale_, a checkpoint of model, optimizer, scheduler and scaler
state written with torch.save and resumed with torch.load, and greedy generation.

The text is fixed, so every library sees the same data. It is a plain PyTorch program; the
tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave4.py).

    python lm_decoder_style.py [--steps N] [--accum N] [--dropout P] [--save PATH] [--resume PATH]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn

TEXT = "the cat sat on the mat. the dog sat on the log. a cat and a dog met on a mat. " * 3


class Vocab:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.index = {c: i for i, c in enumerate(self.chars)}

    def encode(self, s):
        return [self.index[c] for c in s]

    def decode(self, ids):
        return "".join(self.chars[i] for i in ids)


class DecoderLM(nn.Module):
    def __init__(self, vocab_size, d_model=16, nhead=2, num_layers=2, block=12, dropout=0.1):
        super().__init__()
        self.block = block
        self.tok = nn.Embedding(vocab_size, d_model)
        self.pos = nn.Parameter(torch.zeros(1, block, d_model))
        layer = nn.TransformerDecoderLayer(d_model, nhead, dim_feedforward=2 * d_model,
                                           dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.decoder = nn.TransformerDecoder(layer, num_layers, norm=nn.LayerNorm(d_model))
        self.lm_head = nn.Linear(d_model, vocab_size)
        nn.init.normal_(self.pos, std=0.02)

    def forward(self, idx):
        t = idx.size(1)
        x = self.tok(idx) + self.pos[:, :t]
        mask = nn.Transformer.generate_square_subsequent_mask(t, dtype=x.dtype)
        h = self.decoder(x, x, tgt_mask=mask, memory_mask=mask, tgt_is_causal=True,
                         memory_is_causal=True)
        return self.lm_head(h)

    @torch.no_grad()
    def generate(self, idx, n):
        for _ in range(n):
            logits = self(idx[:, -self.block:])[:, -1, :]
            idx = torch.cat([idx, logits.argmax(dim=-1, keepdim=True)], dim=1)
        return idx


def windows(data, block, starts):
    x = torch.stack([data[s:s + block] for s in starts])
    y = torch.stack([data[s + 1:s + 1 + block] for s in starts])
    return x, y


def train_step(model, optimizer, scheduler, scaler, criterion, micro_batches, clip=1.0):
    """One optimizer step over len(micro_batches) accumulated micro-batches."""
    model.train()
    accum = len(micro_batches)
    total, autocast_on = 0.0, []
    for x, y in micro_batches:
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=False):
            autocast_on.append(torch.is_autocast_enabled("cpu"))
            logits = model(x)
            loss = criterion(logits.reshape(-1, logits.size(-1)), y.reshape(-1)) / accum
        scaler.scale(loss).backward()
        total += loss.item()
    scaler.unscale_(optimizer)
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    scaler.step(optimizer)
    scaler.update()
    optimizer.zero_grad(set_to_none=True)
    scheduler.step()
    assert not any(autocast_on)
    return total, float(norm)


def make_training(model, args):
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=args.lr, betas=(0.9, 0.95))
    scheduler = torch.optim.lr_scheduler.OneCycleLR(optimizer, max_lr=args.lr,
                                                    total_steps=args.total_steps,
                                                    pct_start=0.25)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return optimizer, scheduler, scaler


def main(argv=None):
    parser = argparse.ArgumentParser(description="decoder-only LM")
    parser.add_argument("--steps", type=int, default=16)
    parser.add_argument("--total-steps", type=int, default=24)
    parser.add_argument("--accum", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--label-smoothing", type=float, default=0.1)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--save", type=str, default="")
    parser.add_argument("--resume", type=str, default="")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    vocab = Vocab(TEXT)
    data = torch.tensor(vocab.encode(TEXT), dtype=torch.long)
    model = DecoderLM(len(vocab.chars), dropout=args.dropout)
    optimizer, scheduler, scaler = make_training(model, args)
    criterion = nn.CrossEntropyLoss(label_smoothing=args.label_smoothing)
    start = 0
    if args.resume:
        ckpt = torch.load(args.resume, weights_only=False)
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
        scheduler.load_state_dict(ckpt["scheduler"])
        scaler.load_state_dict(ckpt["scaler"])
        start = ckpt["step"]
    rng = np.random.default_rng(args.seed + start)
    losses, lrs, norms = [], [], []
    for step in range(start, args.steps):
        starts = rng.integers(0, len(data) - model.block - 1, (args.accum, args.batch_size))
        micro = [windows(data, model.block, s.tolist()) for s in starts]
        loss, norm = train_step(model, optimizer, scheduler, scaler, criterion, micro)
        losses.append(loss)
        norms.append(norm)
        lrs.append(scheduler.get_last_lr()[0])
    if args.save:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                    "scheduler": scheduler.state_dict(), "scaler": scaler.state_dict(),
                    "step": args.steps}, args.save)
    model.eval()
    prompt = torch.tensor([vocab.encode("the ")], dtype=torch.long)
    out = model.generate(prompt, 8)
    print(json.dumps({
        "losses": losses, "lrs": lrs, "norms": norms, "start": start,
        "sample": vocab.decode(out[0].tolist()), "sample_shape": list(out.shape),
        "scaler_enabled": scaler.is_enabled(), "scale": scaler.get_scale(),
        "momentum": optimizer.param_groups[0]["betas"][0],
        "n_params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
