"""SimCLR-style contrastive learning at toy size, written the way public PyTorch SimCLR
implementations write it: two augmented views of each image (a random horizontal flip with
torch.flip chosen per image by torch.where, plus Gaussian noise from torch.randn_like), a
small conv encoder with nn.AdaptiveAvgPool2d and a projection head, F.normalize onto the unit
sphere, the cosine-similarity matrix of all 2N projections (z @ z.T, checked against
F.cosine_similarity over broadcast rows), its diagonal masked out with
torch.eye(2N, dtype=torch.bool) and masked_fill(-inf), the NT-Xent loss as F.cross_entropy of
the similarities over a temperature with each view's partner as its class (or, as the other
common implementation writes it, the diagonal dropped by boolean indexing with ~mask, the
positives gathered in front of the negatives with torch.cat and class 0 as the target), SGD with momentum
and weight decay, and a linear warmup (LambdaLR) followed by CosineAnnealingLR, chained with
SequentialLR. At the end the frozen encoder's features are evaluated under torch.no_grad():
how often a view's nearest neighbour is its partner.

The images are random blobs and stripes made with numpy, so every library sees the same data.
It is a plain PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5b.py).

    python simclr_style.py [--loss nt_xent|info_nce] [--epochs N] [--temperature T]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Encoder(nn.Module):
    def __init__(self, width=8):
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(3, width, 3, padding=1), nn.ReLU(),
            nn.Conv2d(width, 2 * width, 3, stride=2, padding=1), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten())
        self.out_dim = 2 * width

    def forward(self, x):
        return self.features(x)


class SimCLR(nn.Module):
    def __init__(self, width=8, proj_dim=8):
        super().__init__()
        self.encoder = Encoder(width)
        d = self.encoder.out_dim
        self.projector = nn.Sequential(nn.Linear(d, d, bias=False), nn.BatchNorm1d(d),
                                       nn.ReLU(inplace=True), nn.Linear(d, proj_dim))

    def forward(self, x):
        h = self.encoder(x)
        return h, self.projector(h)


def make_images(n, size, seed):
    """n RGB images in [0, 1]: a bright blob on stripes, each with its own colours."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.zeros((n, 3, size, size))
    for i in range(n):
        cy, cx = rng.uniform(0.2, 0.8, 2)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 0.03)
        stripes = 0.5 + 0.5 * np.sin(2 * np.pi * rng.uniform(1, 3) * (xx + rng.uniform()))
        colour = rng.uniform(0, 1, (3, 2))
        out[i] = colour[:, :1, None] * blob + colour[:, 1:, None] * stripes * 0.5
    return np.clip(out, 0, 1).astype(np.float32)


def augment(x, flip, noise, sigma=0.1):
    """One view: images where flip is True mirrored left-right, plus noise."""
    mirrored = torch.flip(x, dims=[3])
    return torch.where(flip.view(-1, 1, 1, 1), mirrored, x) + sigma * noise


def two_views(x):
    flips = torch.rand(2, x.shape[0]) < 0.5
    return augment(x, flips[0], torch.randn_like(x)), augment(x, flips[1], torch.randn_like(x))


def nt_xent(z1, z2, temperature):
    """NT-Xent: each of the 2N projections must pick its partner among the other 2N - 1."""
    n = z1.shape[0]
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = z @ z.T
    mask = torch.eye(2 * n, dtype=torch.bool, device=z.device)
    logits = sim.masked_fill(mask, float("-inf")) / temperature
    targets = torch.cat([torch.arange(n, 2 * n), torch.arange(0, n)])
    return F.cross_entropy(logits, targets), sim


def info_nce(z1, z2, temperature):
    """The same loss written the other common way: drop the diagonal by boolean indexing,
    gather each row's positive in front of its negatives, and make class 0 the positive."""
    n = z1.shape[0]
    ids = torch.cat([torch.arange(n) for _ in range(2)], dim=0)
    same = (ids.unsqueeze(0) == ids.unsqueeze(1)).float()
    z = F.normalize(torch.cat([z1, z2], dim=0), dim=1)
    sim = torch.matmul(z, z.T)
    off_diagonal = ~torch.eye(2 * n, dtype=torch.bool)
    same = same[off_diagonal].view(2 * n, -1)
    sim = sim[off_diagonal].view(2 * n, -1)
    positives = sim[same.bool()].view(2 * n, -1)
    negatives = sim[~same.bool()].view(2 * n, -1)
    logits = torch.cat([positives, negatives], dim=1) / temperature
    return F.cross_entropy(logits, torch.zeros(2 * n, dtype=torch.long)), sim


def train_step(model, optimizer, scheduler, v1, v2, temperature, loss_fn=nt_xent):
    model.train()
    optimizer.zero_grad()
    _, z1 = model(v1)
    _, z2 = model(v2)
    loss, _ = loss_fn(z1, z2, temperature)
    loss.backward()
    optimizer.step()
    scheduler.step()
    return loss.item()


def make_scheduler(optimizer, warmup, total):
    warm = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: (s + 1) / warmup)
    cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=total - warmup,
                                                        eta_min=1e-3)
    return torch.optim.lr_scheduler.SequentialLR(optimizer, [warm, cosine], milestones=[warmup])


@torch.no_grad()
def partner_accuracy(model, x):
    """How often a view's nearest other view (by encoder features) is its partner."""
    model.eval()
    v1, v2 = two_views(x)
    h = F.normalize(torch.cat([model.encoder(v1), model.encoder(v2)]), dim=1)
    sim = h @ h.t()
    sim.fill_diagonal_(-2.0)
    n = x.shape[0]
    partner = torch.cat([torch.arange(n, 2 * n), torch.arange(n)])
    return (sim.argmax(dim=1) == partner).float().mean().item()


def main(argv=None):
    parser = argparse.ArgumentParser(description="SimCLR")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--temperature", type=float, default=0.2)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--loss", choices=["nt_xent", "info_nce"], default="nt_xent")
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    images = torch.from_numpy(make_images(32, 8, seed=2))
    model = SimCLR()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9,
                                weight_decay=1e-4)
    total = args.epochs * (len(images) // args.batch_size)
    scheduler = make_scheduler(optimizer, args.warmup, total)
    before = partner_accuracy(model, images)
    losses, lrs = [], []
    for _ in range(args.epochs):
        for idx in torch.randperm(len(images)).split(args.batch_size):
            v1, v2 = two_views(images[idx])
            lrs.append(optimizer.param_groups[0]["lr"])
            losses.append(train_step(model, optimizer, scheduler, v1, v2, args.temperature,
                                     loss_fn=globals()[args.loss]))
    # the similarity matrix two ways, and what the mask leaves on the diagonal
    with torch.no_grad():
        _, z1 = model(images[:4])
        _, z2 = model(torch.flip(images[:4], dims=(-1,)))
        _, sim = nt_xent(z1, z2, args.temperature)
        z = F.normalize(torch.cat([z1, z2]), dim=1)
        cos = F.cosine_similarity(z.unsqueeze(1), z.unsqueeze(0), dim=2)
        same_loss = abs(nt_xent(z1, z2, 0.5)[0].item() - info_nce(z1, z2, 0.5)[0].item())
    print(json.dumps({
        "losses": losses, "lrs": lrs,
        "final_lr": scheduler.get_last_lr()[0],
        "before_acc": before, "after_acc": partner_accuracy(model, images),
        "sim_shape": list(sim.shape),
        "sim_vs_cosine": float((sim - cos).abs().max()),
        "sim_diag": float(sim.diagonal().min()),
        "losses_agree": same_loss,
        "n_params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
