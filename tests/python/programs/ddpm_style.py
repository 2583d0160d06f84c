"""A small denoising diffusion model (DDPM) trained the way diffusion tutorials train one:
a noise-prediction conv net with GroupNorm and SiLU, conditioned on sinusoidal timestep
embeddings (torch.exp of a scaled torch.arange, then a cat of sin and cos); a linear beta
schedule from torch.linspace with alphas_cumprod by torch.cumprod; per-timestep
coefficients picked out with gather; timesteps from torch.randint and noise from
torch.randn_like; an MSE loss on the predicted noise; an EMA copy of the model (made with
copy.deepcopy, requires_grad_(False)) updated under torch.no_grad() with lerp_ on its
parameters and mul_/add_ on its buffers; and ancestral sampling of a few steps under
torch.no_grad() from the EMA model.

The images are smooth blobs made with numpy, so every library sees the same data. It is a
plain PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5a.py).

    python ddpm_style.py [--steps N] [--timesteps T] [--ema-decay D]
"""

import argparse
import copy
import json
import math

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class SinusoidalPosEmb(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, t):
        half = self.dim // 2
        freq = math.log(10000) / (half - 1)
        freq = torch.exp(torch.arange(half, device=t.device) * -freq)
        args = t[:, None].float() * freq[None, :]
        return torch.cat((args.sin(), args.cos()), dim=-1)


class Block(nn.Module):
    """Conv -> GroupNorm -> (+ time shift) -> SiLU, with a residual 1x1 when sizes differ."""

    def __init__(self, cin, cout, tdim, groups=4):
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, 3, padding=1)
        self.norm = nn.GroupNorm(groups, cout)
        self.time = nn.Linear(tdim, cout)
        self.act = nn.SiLU()
        self.skip = nn.Conv2d(cin, cout, 1) if cin != cout else nn.Identity()

    def forward(self, x, temb):
        h = self.norm(self.conv(x)) + self.time(temb)[:, :, None, None]
        return self.act(h) + self.skip(x)


class NoiseNet(nn.Module):
    def __init__(self, channels=1, width=8, tdim=16):
        super().__init__()
        self.time_mlp = nn.Sequential(SinusoidalPosEmb(tdim), nn.Linear(tdim, tdim), nn.SiLU(),
                                      nn.Linear(tdim, tdim))
        self.b1 = Block(channels, width, tdim)
        self.b2 = Block(width, width, tdim)
        self.out = nn.Conv2d(width, channels, 3, padding=1)

    def forward(self, x, t):
        temb = self.time_mlp(t)
        return self.out(self.b2(self.b1(x, temb), temb))


def extract(a, t, x_shape):
    """a[t] for a batch of timesteps, shaped to broadcast over images."""
    out = a.gather(-1, t)
    return out.reshape(t.shape[0], *((1,) * (len(x_shape) - 1)))


class Diffusion:
    def __init__(self, timesteps, beta_start=1e-4, beta_end=0.2):
        self.T = timesteps
        self.betas = torch.linspace(beta_start, beta_end, timesteps)
        self.alphas = 1.0 - self.betas
        self.alphas_cumprod = torch.cumprod(self.alphas, dim=0)
        prev = F.pad(self.alphas_cumprod[:-1], (1, 0), value=1.0)
        self.sqrt_ac = torch.sqrt(self.alphas_cumprod)
        self.sqrt_one_minus_ac = torch.sqrt(1.0 - self.alphas_cumprod)
        self.posterior_var = self.betas * (1.0 - prev) / (1.0 - self.alphas_cumprod)

    def q_sample(self, x0, t, noise):
        return extract(self.sqrt_ac, t, x0.shape) * x0 + \
            extract(self.sqrt_one_minus_ac, t, x0.shape) * noise

    def loss(self, model, x0):
        t = torch.randint(0, self.T, (x0.shape[0],), device=x0.device).long()
        noise = torch.randn_like(x0)
        return F.mse_loss(model(self.q_sample(x0, t, noise), t), noise)

    @torch.no_grad()
    def sample(self, model, shape):
        x = torch.randn(shape)
        for i in reversed(range(self.T)):
            t = torch.full((shape[0],), i, dtype=torch.long)
            eps = model(x, t)
            coef = extract(self.betas, t, x.shape) / extract(self.sqrt_one_minus_ac, t, x.shape)
            mean = (x - coef * eps) / extract(self.alphas, t, x.shape).sqrt()
            if i == 0:
                x = mean
            else:
                x = mean + extract(self.posterior_var, t, x.shape).sqrt() * torch.randn_like(x)
        return x.clamp(-1.0, 1.0)


class EMA:
    """An exponential moving average of a model's weights, updated the way one of several
    codebases does it: lerp_ per parameter, mul_ then add_, torch._foreach_lerp_ over
    the parameter lists (timm's ModelEmaV3), or torch.optim.swa_utils.AveragedModel with
    get_ema_multi_avg_fn (whose first update copies the weights)."""

    def __init__(self, model, decay, style="lerp"):
        self.decay, self.style = decay, style
        if style == "averaged":
            avg_fn = torch.optim.swa_utils.get_ema_multi_avg_fn(decay)
            self.averaged = torch.optim.swa_utils.AveragedModel(model, multi_avg_fn=avg_fn)
            self.model = self.averaged.module
        else:
            self.model = copy.deepcopy(model)
        self.model.eval().requires_grad_(False)

    @torch.no_grad()
    def update(self, model):
        if self.style == "averaged":
            return self.averaged.update_parameters(model)
        ema_params, params = list(self.model.parameters()), list(model.parameters())
        if self.style == "foreach":
            torch._foreach_lerp_(ema_params, params, 1.0 - self.decay)
        for pe, p in zip(ema_params, params):
            if self.style == "lerp":
                pe.lerp_(p, 1.0 - self.decay)
            elif self.style == "mul_add":
                pe.mul_(self.decay).add_(p.detach(), alpha=1.0 - self.decay)
        for be, b in zip(self.model.buffers(), model.buffers()):
            be.copy_(b)


def train_step(model, ema, diffusion, optimizer, x0):
    model.train()
    optimizer.zero_grad()
    loss = diffusion.loss(model, x0)
    loss.backward()
    optimizer.step()
    ema.update(model)
    return loss.item()


def blobs(n, size, seed):
    """n one-channel images in [-1, 1]: a Gaussian blob at a random place."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    cx, cy = rng.uniform(0.25, 0.75, (2, n, 1, 1))
    img = np.exp(-((xx - cx) ** 2 + (yy - cy) ** 2) / 0.05)
    return (2.0 * img - 1.0)[:, None].astype(np.float32)


@torch.no_grad()
def ema_distance(ema, model):
    return sum(float((pe - p).abs().sum()) for pe, p in
               zip(ema.model.parameters(), model.parameters()))


def main(argv=None):
    parser = argparse.ArgumentParser(description="DDPM")
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--timesteps", type=int, default=10)
    parser.add_argument("--ema-decay", type=float, default=0.9)
    parser.add_argument("--ema-style", choices=["lerp", "mul_add", "foreach", "averaged"], default="lerp")
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    data = torch.from_numpy(blobs(32, 8, seed=2))
    model = NoiseNet()
    ema = EMA(model, args.ema_decay, args.ema_style)
    diffusion = Diffusion(args.timesteps)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    emb = SinusoidalPosEmb(16)(torch.tensor([0, 3]))
    losses = []
    for step in range(args.steps):
        i = (step * args.batch_size) % len(data)
        losses.append(train_step(model, ema, diffusion, optimizer, data[i:i + args.batch_size]))
    sample = diffusion.sample(ema.model, (4, 1, 8, 8))
    print(json.dumps({
        "losses": losses,
        "alphas_cumprod": diffusion.alphas_cumprod.tolist(),
        "posterior_var": diffusion.posterior_var.tolist(),
        "emb_shape": list(emb.shape), "emb": emb.tolist(),
        "sample_shape": list(sample.shape),
        "sample_range": [float(sample.min()), float(sample.max())],
        "ema_requires_grad": any(p.requires_grad for p in ema.model.parameters()),
        "ema_distance": ema_distance(ema, model),
        "ema_grads": [p.grad is None for p in ema.model.parameters()],
        "n_params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
