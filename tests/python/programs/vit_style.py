"""A small Vision Transformer trained the way common ViT examples train: a patch embedding
made by a Conv2d whose stride is the patch size, then flatten(2).transpose(1, 2), a class
token and a position embedding held as nn.Parameter and initialised with trunc_normal_,
nn.TransformerEncoder over nn.TransformerEncoderLayer(batch_first=True, norm_first=True,
activation='gelu'), a final LayerNorm and a linear head on the class token,
CrossEntropyLoss with label_smoothing, AdamW with weight decay only on matrices (two
parameter groups), a linear warmup then cosine schedule through LambdaLR, gradient
clipping with clip_grad_norm_, and evaluation under torch.inference_mode. With
--patchify unfold the patches are cut with Tensor.unfold and embedded by a Linear instead;
with --ema an exponential moving average of the weights (swa_utils.AveragedModel with
get_ema_multi_avg_fn) is updated by a step post-hook on the optimizer and evaluated too.

The 3x16x16 images are synthetic (the class is which quadrant is bright), so it needs
neither torchvision nor a download. It is a plain PyTorch program. The tests run it with
real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_more.py).

    python vit_style.py [--epochs N] [--depth N] [--save PATH] [--patchify conv|unfold]
                        [--ema DECAY]
"""

import argparse
import json
import math

import numpy as np
import torch
import torch.nn as nn
from torch.utils.data import DataLoader, TensorDataset


class PatchEmbed(nn.Module):
    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Conv2d(in_chans, embed_dim, kernel_size=patch_size, stride=patch_size)

    def forward(self, x):
        return self.proj(x).flatten(2).transpose(1, 2)  # B, N, C


class UnfoldPatchEmbed(nn.Module):
    """Patches cut with Tensor.unfold along H then W, flattened, and embedded by a Linear."""

    def __init__(self, img_size=16, patch_size=4, in_chans=3, embed_dim=32):
        super().__init__()
        self.patch_size = patch_size
        self.num_patches = (img_size // patch_size) ** 2
        self.proj = nn.Linear(in_chans * patch_size * patch_size, embed_dim)

    def forward(self, x):
        p = self.patch_size
        patches = x.unfold(2, p, p).unfold(3, p, p)  # B, C, H/p, W/p, p, p
        b, c, gh, gw = patches.shape[:4]
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(b, gh * gw, c * p * p)
        return self.proj(patches)


class ViT(nn.Module):
    def __init__(self, num_classes=4, embed_dim=32, depth=2, num_heads=4, mlp_ratio=2.0,
                 dropout=0.0, patchify="conv"):
        super().__init__()
        embed = PatchEmbed if patchify == "conv" else UnfoldPatchEmbed
        self.patch_embed = embed(embed_dim=embed_dim)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, self.patch_embed.num_patches + 1,
                                                  embed_dim))
        self.pos_drop = nn.Dropout(dropout)
        layer = nn.TransformerEncoderLayer(embed_dim, num_heads,
                                           dim_feedforward=int(embed_dim * mlp_ratio),
                                           dropout=dropout, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=depth,
                                             enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed_dim)
        self.head = nn.Linear(embed_dim, num_classes)
        nn.init.trunc_normal_(self.pos_embed, std=0.02)
        nn.init.trunc_normal_(self.cls_token, std=0.02)
        self.apply(self._init_weights)

    def _init_weights(self, m):
        if isinstance(m, nn.Linear):
            nn.init.trunc_normal_(m.weight, std=0.02)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def forward(self, x):
        x = self.patch_embed(x)
        cls = self.cls_token.expand(x.shape[0], -1, -1)
        x = self.pos_drop(torch.cat((cls, x), dim=1) + self.pos_embed)
        x = self.norm(self.encoder(x))
        return self.head(x[:, 0])


def param_groups(model, weight_decay):
    decay, no_decay = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (no_decay if p.ndim <= 1 or name in ("cls_token", "pos_embed") else decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay},
            {"params": no_decay, "weight_decay": 0.0}]


def warmup_cosine(warmup, total):
    def f(step):
        if step < warmup:
            return (step + 1) / warmup
        return 0.5 * (1.0 + math.cos(math.pi * (step - warmup) / max(1, total - warmup)))
    return f


def quadrants(n, seed):
    """n images 3x16x16 of noise; class c brightens quadrant c."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=n)
    x = rng.normal(0, 0.5, size=(n, 3, 16, 16)).astype(np.float32)
    for i, c in enumerate(labels):
        r, col = divmod(int(c), 2)
        x[i, :, 8 * r:8 * r + 8, 8 * col:8 * col + 8] += 1.0
    return torch.from_numpy(x), torch.from_numpy(labels.astype(np.int64))


def train_step(model, criterion, optimizer, scheduler, images, target, clip=1.0):
    model.train()
    logits = model(images)
    loss = criterion(logits, target)
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    scheduler.step()
    return loss.item(), grad_norm.item()


def evaluate(model, loader):
    model.eval()
    correct = total = 0
    with torch.inference_mode():
        for images, target in loader:
            correct += (model(images).argmax(-1) == target).sum().item()
            total += target.numel()
    return correct / total


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--depth", type=int, default=2)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--save", default=None)
    parser.add_argument("--patchify", default="conv", choices=["conv", "unfold"])
    parser.add_argument("--ema", type=float, default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    train_loader = DataLoader(TensorDataset(*quadrants(128, 0)), batch_size=32, shuffle=True,
                              drop_last=True)
    val_loader = DataLoader(TensorDataset(*quadrants(64, 1)), batch_size=32)
    model = ViT(depth=args.depth, patchify=args.patchify)
    criterion = nn.CrossEntropyLoss(label_smoothing=0.1)
    optimizer = torch.optim.AdamW(param_groups(model, 0.05), lr=args.lr, betas=(0.9, 0.999))
    total = args.epochs * len(train_loader)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, warmup_cosine(2, total))
    ema_model, ema_accs = None, []
    if args.ema is not None:
        ema_model = torch.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=torch.optim.swa_utils.get_ema_multi_avg_fn(args.ema))
        optimizer.register_step_post_hook(lambda opt, a, kw: ema_model.update_parameters(model))
    losses, norms, accs, lrs = [], [], [], []
    for _ in range(args.epochs):
        for images, target in train_loader:
            loss, norm = train_step(model, criterion, optimizer, scheduler, images, target)
            losses.append(loss)
            norms.append(norm)
            lrs.append(scheduler.get_last_lr()[0])
        accs.append(evaluate(model, val_loader))
        if ema_model is not None:
            ema_accs.append(evaluate(ema_model, val_loader))
    if args.save:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()},
                   args.save)
    n_params = sum(p.numel() for p in model.parameters())
    ema_updates = int(ema_model.n_averaged.item()) if ema_model is not None else 0
    print(json.dumps({"losses": losses, "grad_norms": norms, "accs": accs, "lrs": lrs,
                      "n_params": n_params, "ema_accs": ema_accs, "ema_updates": ema_updates}))


if __name__ == "__main__":
    main()
