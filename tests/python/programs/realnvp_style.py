"""A RealNVP normalizing flow on 2-D points (two moons), trained the way flow tutorials
train one: affine coupling layers whose half masks are module buffers (register_buffer,
alternating which coordinate is kept), a scale net squashed by tanh times a learned scale,
log-determinants summed over the transformed coordinates, a base distribution from
torch.distributions (MultivariateNormal(loc, covariance_matrix), or Normal(loc, scale)
with its log_prob summed over the last dimension) built from buffers, maximum likelihood
with Adam and weight_decay, torch.nn.utils.clip_grad_norm_, and sampling through the
inverse flow under torch.no_grad().

The points are made with numpy, so every library sees the same data. It is a plain
PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5a.py).

    python realnvp_style.py [--steps N] [--base mvn|normal] [--layers K]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
from torch.distributions import MultivariateNormal, Normal


def mlp(dim, hidden):
    return nn.Sequential(nn.Linear(dim, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                         nn.Linear(hidden, dim))


class Coupling(nn.Module):
    """y = x_kept + (1 - mask) * (x * exp(s(x_kept)) + t(x_kept)); log|det| = sum of s."""

    def __init__(self, mask, hidden):
        super().__init__()
        self.register_buffer("mask", mask)
        self.s = mlp(mask.numel(), hidden)
        self.t = mlp(mask.numel(), hidden)
        self.scale = nn.Parameter(torch.ones(mask.numel()))

    def _st(self, kept):
        s = torch.tanh(self.s(kept)) * self.scale * (1 - self.mask)
        return s, self.t(kept) * (1 - self.mask)

    def forward(self, x):
        kept = x * self.mask
        s, t = self._st(kept)
        y = kept + (1 - self.mask) * (x * torch.exp(s) + t)
        return y, s.sum(dim=1)

    def inverse(self, y):
        kept = y * self.mask
        s, t = self._st(kept)
        return kept + (1 - self.mask) * ((y - t) * torch.exp(-s))


class RealNVP(nn.Module):
    def __init__(self, layers=4, hidden=32, base="mvn"):
        super().__init__()
        masks = [torch.tensor([1.0, 0.0]) if i % 2 == 0 else torch.tensor([0.0, 1.0])
                 for i in range(layers)]
        self.layers = nn.ModuleList(Coupling(m, hidden) for m in masks)
        self.base_kind = base
        self.register_buffer("base_loc", torch.zeros(2))
        self.register_buffer("base_cov", torch.eye(2))

    def base(self):
        if self.base_kind == "mvn":
            return MultivariateNormal(self.base_loc, covariance_matrix=self.base_cov)
        return Normal(self.base_loc, self.base_cov.diagonal())

    def base_log_prob(self, z):
        lp = self.base().log_prob(z)
        return lp if self.base_kind == "mvn" else lp.sum(-1)

    def forward(self, x):
        log_det = torch.zeros(x.shape[0], dtype=x.dtype)
        for layer in self.layers:
            x, ld = layer(x)
            log_det = log_det + ld
        return x, log_det

    def log_prob(self, x):
        z, log_det = self(x)
        return self.base_log_prob(z) + log_det

    @torch.no_grad()
    def sample(self, n):
        x = self.base().sample((n,))
        for layer in reversed(self.layers):
            x = layer.inverse(x)
        return x


def train_step(flow, optimizer, x, max_norm):
    optimizer.zero_grad()
    loss = -flow.log_prob(x).mean()
    loss.backward()
    norm = torch.nn.utils.clip_grad_norm_(flow.parameters(), max_norm)
    optimizer.step()
    return loss.item(), float(norm)


def two_moons(n, seed, noise=0.05):
    rng = np.random.default_rng(seed)
    th = rng.uniform(0, np.pi, n)
    upper = rng.integers(0, 2, n).astype(bool)
    x = np.where(upper, np.cos(th), 1 - np.cos(th))
    y = np.where(upper, np.sin(th), 0.5 - np.sin(th))
    pts = np.stack([x, y], 1) + noise * rng.standard_normal((n, 2))
    return ((pts - pts.mean(0)) / pts.std(0)).astype(np.float32)


def main(argv=None):
    parser = argparse.ArgumentParser(description="RealNVP on two moons")
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--base", choices=["mvn", "normal"], default="mvn")
    parser.add_argument("--lr", type=float, default=5e-3)
    parser.add_argument("--weight-decay", type=float, default=1e-4)
    parser.add_argument("--max-norm", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    data = torch.from_numpy(two_moons(512, seed=1))
    flow = RealNVP(args.layers, base=args.base)
    optimizer = torch.optim.Adam(flow.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    losses, norms = [], []
    for step in range(args.steps):
        i = (step * args.batch_size) % len(data)
        loss, norm = train_step(flow, optimizer, data[i:i + args.batch_size], args.max_norm)
        losses.append(loss)
        norms.append(norm)
    with torch.no_grad():
        z, _ = flow(data[:8])
        back = flow.layers[0].inverse(flow.layers[0](data[:8])[0])
        test_nll = -flow.log_prob(data).mean().item()
    samples = flow.sample(256)
    print(json.dumps({
        "losses": losses, "norms": norms, "test_nll": test_nll,
        "z_shape": list(z.shape),
        "inverse_error": float((back - data[:8]).abs().max()),
        "sample_shape": list(samples.shape),
        "sample_mean": samples.mean(0).tolist(), "sample_std": samples.std(0).tolist(),
        "buffers": sorted(n for n, _ in flow.named_buffers()),
        "n_params": sum(p.numel() for p in flow.parameters()),
    }))


if __name__ == "__main__":
    main()
