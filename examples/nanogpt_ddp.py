"""A tiny character-level GPT trained data-parallel, the way nanoGPT's train.py does it:
init_process_group, DistributedDataParallel, no_sync for the gradient-accumulation
micro-steps, a DistributedSampler (set_epoch each epoch), AdamW, gradient clipping.

    mpirun -np 2 --oversubscribe python examples/nanogpt_ddp.py --iters 20
    python examples/nanogpt_ddp.py          # one process: no process group, no DDP

Add --allow-run-as-root to mpirun as root; --compile runs every backward under
cagrad.compiled_autograd (the gradient allreduces become steps of the compiled graph).
See docs/distributed.md.
"""

import argparse
import math
import os
from contextlib import nullcontext

import numpy as np

import cagrad as torch
import cagrad.nn as nn
from cagrad.distributed import destroy_process_group, init_process_group
from cagrad.nn import functional as F
from cagrad.nn.parallel import DistributedDataParallel as DDP
from cagrad.utils.data import DataLoader, Dataset
from cagrad.utils.data.distributed import DistributedSampler

TEXT = ("the quick brown fox jumps over the lazy dog while the small cat sleeps by the warm "
        "fire and the old man reads a long book about ships that sail the wide grey sea. ")


class CharWindows(Dataset):
    """Every window of block_size + 1 characters: input and next-character targets."""

    def __init__(self, ids, block_size):
        self.ids = ids
        self.block_size = block_size

    def __len__(self):
        return len(self.ids) - self.block_size - 1

    def __getitem__(self, i):
        chunk = self.ids[i:i + self.block_size + 1]
        return torch.tensor(chunk[:-1]), torch.tensor(chunk[1:])


class Block(nn.Module):
    def __init__(self, n_embd, n_head, block_size):
        super().__init__()
        self.n_head = n_head
        self.ln_1 = nn.LayerNorm(n_embd)
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = nn.Sequential(nn.Linear(n_embd, 4 * n_embd), nn.GELU(),
                                 nn.Linear(4 * n_embd, n_embd))
        mask = torch.tril(torch.ones(block_size, block_size))
        self.register_buffer("mask", mask.view(1, 1, block_size, block_size))

    def attention(self, x):
        B, T, C = x.size()
        q, k, v = [t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
                   for t in self.c_attn(x).split(C, dim=2)]
        att = (q @ k.transpose(-2, -1)) / math.sqrt(k.size(-1))
        att = att.masked_fill(self.mask[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))

    def forward(self, x):
        x = x + self.attention(self.ln_1(x))
        return x + self.mlp(self.ln_2(x))


class GPT(nn.Module):
    def __init__(self, vocab_size, block_size, n_layer=2, n_head=2, n_embd=32):
        super().__init__()
        self.wte = nn.Embedding(vocab_size, n_embd)
        self.wpe = nn.Embedding(block_size, n_embd)
        self.blocks = nn.ModuleList([Block(n_embd, n_head, block_size) for _ in range(n_layer)])
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.wte.weight = self.lm_head.weight  # tied, as in nanoGPT

    def forward(self, idx, targets):
        pos = torch.arange(0, idx.size(1), dtype=torch.long)
        x = self.wte(idx) + self.wpe(pos)
        for block in self.blocks:
            x = block(x)
        logits = self.lm_head(self.ln_f(x))
        return logits, F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1))


def batches(loader, sampler):
    """Endless (x, y) batches; a new shuffle each epoch, the same on every rank."""
    epoch = 0
    while True:
        sampler.set_epoch(epoch)
        yield from loader
        epoch += 1


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--block-size", type=int, default=16)
    ap.add_argument("--grad-accum", type=int, default=4, help="micro-steps over all ranks")
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--compile", action="store_true")
    args = ap.parse_args()

    # launched by mpirun (or torchrun-style variables): one rank per process
    ddp = int(os.environ.get("OMPI_COMM_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))) > 1
    if ddp:
        init_process_group(backend="mpi")
        rank, world = torch.distributed.get_rank(), torch.distributed.get_world_size()
        assert args.grad_accum % world == 0
        grad_accum = args.grad_accum // world
    else:
        rank, world, grad_accum = 0, 1, args.grad_accum
    master = rank == 0
    torch.manual_seed(1337)  # the same initial model everywhere (DDP broadcasts it anyway)

    chars = sorted(set(TEXT))
    ids = np.array([chars.index(c) for c in TEXT], dtype=np.int64)
    data = CharWindows(ids, args.block_size)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True, seed=1337)
    loader = DataLoader(data, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    stream = batches(loader, sampler)

    model = GPT(len(chars), args.block_size)
    raw_model = model
    if ddp:
        model = DDP(model)
    opt = torch.optim.AdamW(raw_model.parameters(), lr=args.lr, weight_decay=0.1,
                            betas=(0.9, 0.95))
    backward_ctx = torch.compiled_autograd.enable if args.compile else nullcontext

    for it in range(args.iters):
        total = 0.0
        for micro_step in range(grad_accum):
            x, y = next(stream)
            # only the last micro-step averages gradients across ranks
            sync = not ddp or micro_step == grad_accum - 1
            with nullcontext() if sync else model.no_sync():
                _, loss = model(x, y)
                loss = loss / grad_accum
                with backward_ctx():
                    loss.backward()
            total += loss.item()
        torch.nn.utils.clip_grad_norm_(raw_model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if master and (it % 5 == 0 or it == args.iters - 1):
            print(f"iter {it}: loss {total:.4f}", flush=True)

    checksum = sum(float(p.double().abs().sum().item()) for p in raw_model.parameters())
    print(f"rank {rank}: final parameter checksum {checksum:.10f}", flush=True)
    if ddp:
        destroy_process_group()


if __name__ == "__main__":
    main()
