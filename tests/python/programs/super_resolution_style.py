"""Sub-pixel super-resolution trained the way pytorch/examples' super_resolution trains it:
four Conv2d layers ending in nn.PixelShuffle(upscale_factor), weights initialised with
init.orthogonal_(w, init.calculate_gain('relu')) (the last one with the default gain),
nn.MSELoss, Adam, a Dataset of (low-resolution, high-resolution) luminance pairs in a
DataLoader with shuffle=True, PSNR as 10 * log10(1 / mse) (here with torch.log10 and
math.log10), the whole model saved per epoch with torch.save(model, path), and a
super_resolve step that loads it and upsamples one image under no_grad.

The images are smooth random fields made with numpy, downscaled by 2 x 2 averaging, so
every library sees the same data. It is a plain PyTorch program. The tests run it with
real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave3.py).

    python super_resolution_style.py [--upscale-factor N] [--epochs N] [--out DIR]
"""

import argparse
import json
import math
import os

import numpy as np
import torch
import torch.nn as nn
import torch.nn.init as init
import torch.optim as optim
from torch.utils.data import DataLoader, Dataset


class Net(nn.Module):
    def __init__(self, upscale_factor, width=16):
        super().__init__()
        self.relu = nn.ReLU()
        self.conv1 = nn.Conv2d(1, width, (5, 5), (1, 1), (2, 2))
        self.conv2 = nn.Conv2d(width, width, (3, 3), (1, 1), (1, 1))
        self.conv3 = nn.Conv2d(width, width // 2, (3, 3), (1, 1), (1, 1))
        self.conv4 = nn.Conv2d(width // 2, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
        self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
        self._initialize_weights()

    def forward(self, x):
        x = self.relu(self.conv1(x))
        x = self.relu(self.conv2(x))
        x = self.relu(self.conv3(x))
        x = self.pixel_shuffle(self.conv4(x))
        return x

    def _initialize_weights(self):
        init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
        init.orthogonal_(self.conv4.weight)


def smooth_images(n, size, seed):
    """n luminance images in [0, 1]: a few random 2-D waves each."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    out = np.zeros((n, 1, size, size))
    for k in range(3):
        fx, fy = rng.uniform(0.5, 3, (2, n, 1, 1, 1))
        ph = rng.uniform(0, 2 * np.pi, (n, 1, 1, 1))
        out += np.sin(2 * np.pi * (fx * xx + fy * yy) + ph) / (k + 1)
    out -= out.min(axis=(2, 3), keepdims=True)
    return (out / out.max(axis=(2, 3), keepdims=True)).astype(np.float32)


class PairDataset(Dataset):
    """(input, target): the image averaged down by upscale_factor, and the image."""

    def __init__(self, n, crop_size, upscale_factor, seed):
        self.targets = smooth_images(n, crop_size, seed)
        f = upscale_factor
        s = crop_size // f
        self.inputs = self.targets.reshape(n, 1, s, f, s, f).mean(axis=(3, 5))

    def __getitem__(self, index):
        return torch.from_numpy(self.inputs[index]), torch.from_numpy(self.targets[index])

    def __len__(self):
        return len(self.targets)


def train_step(model, criterion, optimizer, input, target):
    optimizer.zero_grad()
    loss = criterion(model(input), target)
    loss.backward()
    optimizer.step()
    return loss.item()


def psnr_of(model, criterion, loader):
    avg_psnr, avg_psnr_t = 0.0, 0.0
    with torch.no_grad():
        for input, target in loader:
            mse = criterion(model(input), target)
            avg_psnr += 10 * math.log10(1 / mse.item())
            avg_psnr_t += (10 * torch.log10(1 / mse)).item()
    return avg_psnr / len(loader), avg_psnr_t / len(loader)


def super_resolve(path, image):
    model = torch.load(path, weights_only=False)
    model.eval()
    with torch.no_grad():
        out = model(torch.from_numpy(image).view(1, -1, image.shape[1], image.shape[2]))
    out_img_y = out[0].detach().numpy()
    out_img_y *= 255.0
    return out_img_y.clip(0, 255)


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch Super Res Example")
    parser.add_argument("--upscale-factor", type=int, default=2)
    parser.add_argument("--crop-size", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--seed", type=int, default=123)
    parser.add_argument("--out", type=str, default="")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    train_set = PairDataset(16, args.crop_size, args.upscale_factor, seed=1)
    test_set = PairDataset(4, args.crop_size, args.upscale_factor, seed=2)
    training_data_loader = DataLoader(dataset=train_set, batch_size=args.batch_size,
                                      shuffle=True)
    testing_data_loader = DataLoader(dataset=test_set, batch_size=2, shuffle=False)
    model = Net(upscale_factor=args.upscale_factor)
    criterion = nn.MSELoss()
    optimizer = optim.Adam(model.parameters(), lr=args.lr)
    losses, psnrs, saved = [], [], None
    for epoch in range(1, args.epochs + 1):
        for input, target in training_data_loader:
            losses.append(train_step(model, criterion, optimizer, input, target))
        psnrs.append(psnr_of(model, criterion, testing_data_loader))
        if args.out:
            saved = os.path.join(args.out, f"model_epoch_{epoch}.pth")
            torch.save(model, saved)
    result = {"losses": losses, "psnrs": psnrs,
              "gains": [init.calculate_gain(g) for g in ("relu", "tanh", "linear")]}
    w = model.conv2.weight.detach() if not saved else None
    if saved:
        up = super_resolve(saved, test_set.inputs[0])
        result.update(sr_shape=list(up.shape), sr_range=[float(up.min()), float(up.max())])
    else:  # orthogonal_ rows stay near-orthogonal after a few small steps
        rows = w.reshape(w.shape[0], -1)
        result["gram_diag"] = (rows @ rows.t()).diagonal().tolist()
    print(json.dumps(result))


if __name__ == "__main__":
    main()
