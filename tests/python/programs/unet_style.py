"""A small U-Net denoiser trained the way image-to-image PyTorch examples train one: an
encoder of Conv2d + BatchNorm2d + ReLU blocks with MaxPool2d, a decoder that upsamples once
with nn.ConvTranspose2d and once with F.interpolate(mode="bilinear", align_corners=True),
torch.cat skip connections, a final 1x1 conv, weights set with model.apply(init_fn)
(kaiming_normal_ convs, BatchNorm weight 1 and bias 0), Adam with StepLR, and evaluation in model.eval() (BatchNorm on its running statistics) under
torch.no_grad().

The images are smooth random fields made with numpy plus Gaussian noise, so every library
sees the same data. It is a plain PyTorch program; the tests run it with real torch and,
unchanged, with `python -m cagrad.as_torch` (tests/python/test_programs_wave4.py).

    python unet_style.py [--epochs N] [--batch-size N] [--lr LR]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def conv_block(cin, cout):
    return nn.Sequential(
        nn.Conv2d(cin, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
        nn.Conv2d(cout, cout, 3, padding=1, bias=False), nn.BatchNorm2d(cout), nn.ReLU(inplace=True),
    )


class UNet(nn.Module):
    def __init__(self, channels=1, width=4):
        super().__init__()
        w = width
        self.enc1 = conv_block(channels, w)
        self.enc2 = conv_block(w, 2 * w)
        self.pool = nn.MaxPool2d(2)
        self.bottleneck = conv_block(2 * w, 4 * w)
        self.up2 = nn.ConvTranspose2d(4 * w, 2 * w, kernel_size=2, stride=2)
        self.dec2 = conv_block(4 * w, 2 * w)
        self.reduce1 = nn.Conv2d(2 * w, w, 1)
        self.dec1 = conv_block(2 * w, w)
        self.head = nn.Conv2d(w, channels, 1)

    def forward(self, x):
        e1 = self.enc1(x)
        e2 = self.enc2(self.pool(e1))
        b = self.bottleneck(self.pool(e2))
        d2 = self.dec2(torch.cat([self.up2(b), e2], dim=1))
        # the second upsampling is bilinear, to the skip's exact size
        up1 = F.interpolate(d2, size=e1.shape[-2:], mode="bilinear", align_corners=True)
        d1 = self.dec1(torch.cat((self.reduce1(up1), e1), 1))
        return x - self.head(d1)  # predict the noise, return the cleaned image


def init_fn(m):
    if isinstance(m, (nn.Conv2d, nn.ConvTranspose2d)):
        nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
        if m.bias is not None:
            nn.init.zeros_(m.bias)
    elif isinstance(m, nn.BatchNorm2d):
        nn.init.ones_(m.weight)
        nn.init.zeros_(m.bias)


def noisy_images(n, size, seed, sigma=0.2):
    """(noisy, clean) pairs of n smooth images in [0, 1] with one channel."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    clean = np.zeros((n, 1, size, size))
    for k in range(3):
        fx, fy = rng.uniform(0.5, 2.5, (2, n, 1, 1, 1))
        ph = rng.uniform(0, 2 * np.pi, (n, 1, 1, 1))
        clean += np.cos(2 * np.pi * (fx * xx + fy * yy) + ph) / (k + 1)
    clean = (clean - clean.min()) / (clean.max() - clean.min())
    noisy = clean + sigma * rng.standard_normal(clean.shape)
    return noisy.astype(np.float32), clean.astype(np.float32)


def train_step(model, optimizer, noisy, clean):
    model.train()
    optimizer.zero_grad(set_to_none=True)
    loss = F.mse_loss(model(noisy), clean)
    loss.backward()
    optimizer.step()
    return loss.item()


def evaluate(model, noisy, clean):
    model.eval()
    with torch.no_grad():
        out = model(noisy)
        return F.mse_loss(out, clean).item(), F.mse_loss(noisy, clean).item(), out


def main(argv=None):
    parser = argparse.ArgumentParser(description="U-Net denoiser")
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--size", type=int, default=12)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    noisy, clean = (torch.from_numpy(a) for a in noisy_images(16, args.size, seed=3))
    test_noisy, test_clean = (torch.from_numpy(a) for a in noisy_images(4, args.size, seed=4))
    model = UNet()
    model.apply(init_fn)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=2, gamma=0.5)
    losses, evals = [], []
    for _ in range(args.epochs):
        for i in range(0, len(noisy), args.batch_size):
            sl = slice(i, i + args.batch_size)
            losses.append(train_step(model, optimizer, noisy[sl], clean[sl]))
        scheduler.step()
        evals.append(evaluate(model, test_noisy, test_clean)[:2])
    _, _, out = evaluate(model, test_noisy, test_clean)
    again = evaluate(model, test_noisy, test_clean)[2]
    bn = model.enc1[1]
    print(json.dumps({
        "losses": losses, "evals": evals, "out_shape": list(out.shape),
        "eval_deterministic": bool(torch.equal(out, again)),
        "lr": scheduler.get_last_lr()[0],
        "batches_tracked": int(bn.num_batches_tracked),
        "running_var_moved": float((bn.running_var - 1).abs().max()),
        "conv_std": float(model.enc1[0].weight.detach().std()),
        "n_params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
