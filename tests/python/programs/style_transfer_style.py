"""Neural style transfer (Gatys et al.) at toy size, written the way PyTorch's "Neural
Transfer" tutorial writes it: a small frozen conv feature network (a stand-in for VGG19,
switched off with requires_grad_(False) and eval()), a Normalization module with mean / std
buffers shaped by view(-1, 1, 1), the network rebuilt as an nn.Sequential over its children
with ContentLoss modules inserted after the content layer (their target detached) and
nn.ReLU(inplace=False) in place of the originals, style losses taken by forward hooks on the
style layers (gram matrices by view and bmm, divided by the number of elements), a total
variation loss, and the INPUT IMAGE as the only parameter: optimised with optim.LBFGS and a
closure (the tutorial's way) or with Adam, with input_img.data.clamp_(0, 1) between steps.

The images are made with numpy, so every library sees the same data. It is a plain PyTorch
program; the tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave5b.py).

    python style_transfer_style.py [--optimizer lbfgs|adam] [--steps N] [--size N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim


def feature_net():
    """A stand-in for VGG's first blocks (random weights, seeded)."""
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(inplace=True),
        nn.MaxPool2d(2),
        nn.Conv2d(8, 16, 3, padding=1), nn.ReLU(inplace=True),
        nn.Conv2d(16, 16, 3, padding=1))


class Normalization(nn.Module):
    def __init__(self, mean, std):
        super().__init__()
        # shaped [C x 1 x 1] to broadcast over an image tensor [B x C x H x W]
        self.register_buffer("mean", torch.tensor(mean).view(-1, 1, 1))
        self.register_buffer("std", torch.tensor(std).view(-1, 1, 1))

    def forward(self, img):
        return (img - self.mean) / self.std


def gram_matrix(y):
    b, c, h, w = y.size()
    features = y.view(b, c, h * w)
    return features.bmm(features.transpose(1, 2)).div(c * h * w)


class ContentLoss(nn.Module):
    def __init__(self, target):
        super().__init__()
        self.target = target.detach()  # a fixed target, not a graph input
        self.loss = None

    def forward(self, x):
        self.loss = F.mse_loss(x, self.target)
        return x


class StyleHook:
    """A forward hook that scores its layer's output against the style image's gram matrix."""

    def __init__(self, layer):
        self.target = None
        self.loss = None
        self.handle = layer.register_forward_hook(self)

    def __call__(self, module, inputs, output):
        g = gram_matrix(output)
        if self.target is None:
            self.target = g.detach()  # the first forward sees the style image
        self.loss = F.mse_loss(g, self.target)


def total_variation(img):
    dy = img[:, :, 1:, :] - img[:, :, :-1, :]
    dx = img[:, :, :, 1:] - img[:, :, :, :-1]
    return dy.pow(2).mean() + dx.pow(2).mean()


def build_model(cnn, norm, style_img, content_img, content_layers=("conv_3",),
                style_layers=("conv_1", "conv_2", "conv_3", "conv_4")):
    """The tutorial's walk over cnn.children(): name each layer, put losses after some."""
    model = nn.Sequential(norm)
    content_losses, style_layers_found = [], []
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = f"conv_{i}"
        elif isinstance(layer, nn.ReLU):
            name = f"relu_{i}"
            layer = nn.ReLU(inplace=False)  # in-place would overwrite what the losses saw
        elif isinstance(layer, nn.MaxPool2d):
            name = f"pool_{i}"
        else:
            raise RuntimeError(f"Unrecognized layer: {layer.__class__.__name__}")
        model.add_module(name, layer)
        if name in style_layers:
            style_layers_found.append(layer)
        if name in content_layers:
            target = model(content_img).detach()
            content = ContentLoss(target)
            model.add_module(f"content_loss_{i}", content)
            content_losses.append(content)
    # hooked only now, so that their first forward is the style image's
    style_hooks = [StyleHook(layer) for layer in style_layers_found]
    model(style_img)
    return model, content_losses, style_hooks


def objective(model, img, content_losses, style_hooks, weights):
    model(img)
    style = sum(h.loss for h in style_hooks)
    content = sum(c.loss for c in content_losses)
    tv = total_variation(img)
    return weights[0] * style + weights[1] * content + weights[2] * tv, style, content


def lbfgs_step(model, optimizer, img, content_losses, style_hooks, weights, log):
    def closure():
        img.data.clamp_(0, 1)
        optimizer.zero_grad()
        loss, style, content = objective(model, img, content_losses, style_hooks, weights)
        loss.backward()
        log.append((style.item(), content.item()))
        return loss

    loss = optimizer.step(closure)
    img.data.clamp_(0, 1)
    return loss.item()


def adam_step(model, optimizer, img, content_losses, style_hooks, weights, log):
    optimizer.zero_grad()
    loss, style, content = objective(model, img, content_losses, style_hooks, weights)
    loss.backward()
    optimizer.step()
    img.data.clamp_(0, 1)
    log.append((style.item(), content.item()))
    return loss.item()


def make_images(size, seed):
    """(content, style): a smooth blob picture and a striped colour pattern in [0, 1]."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    content = np.stack([np.exp(-((yy - 0.5) ** 2 + (xx - c) ** 2) / 0.05)
                        for c in (0.3, 0.5, 0.7)])
    stripes = 0.5 + 0.5 * np.sin(2 * np.pi * 3 * (xx + yy))
    style = rng.uniform(0.2, 1.0, (3, 1, 1)) * stripes
    return (content[None].astype(np.float32), style[None].astype(np.float32))


def setup(size=16, seed=3):
    cnn = feature_net()
    cnn.requires_grad_(False)
    cnn.eval()
    norm = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    content_img, style_img = (torch.from_numpy(a) for a in make_images(size, seed))
    return cnn, norm, content_img, style_img


def main(argv=None):
    parser = argparse.ArgumentParser(description="Neural style transfer")
    parser.add_argument("--optimizer", choices=["lbfgs", "adam"], default="lbfgs")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--size", type=int, default=16)
    parser.add_argument("--style-weight", type=float, default=1e5)
    parser.add_argument("--content-weight", type=float, default=1.0)
    parser.add_argument("--tv-weight", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    cnn, norm, content_img, style_img = setup(args.size)
    model, content_losses, style_hooks = build_model(cnn, norm, style_img, content_img)
    input_img = content_img.clone()
    input_img.requires_grad_(True)
    model.requires_grad_(False)  # only the image is optimised
    weights = (args.style_weight, args.content_weight, args.tv_weight)
    if args.optimizer == "lbfgs":
        optimizer, step = optim.LBFGS([input_img], max_iter=5), lbfgs_step
    else:
        optimizer, step = optim.Adam([input_img], lr=0.05), adam_step
    log, losses = [], []
    for _ in range(args.steps):
        losses.append(step(model, optimizer, input_img, content_losses, style_hooks, weights,
                           log))
    for h in style_hooks:
        h.handle.remove()
    with torch.no_grad():
        model(input_img)  # hooks removed: the style losses stay as they were
    print(json.dumps({
        "losses": losses, "style_losses": [s for s, _ in log],
        "content_losses": [c for _, c in log],
        "evaluations": len(log),
        "image_range": [input_img.min().item(), input_img.max().item()],
        "image_shape": list(input_img.shape),
        "moved": (input_img - content_img).abs().max().item(),
        "net_grads": [p.grad is None and not p.requires_grad for p in cnn.parameters()],
        "gram_shapes": [list(h.target.shape) for h in style_hooks],
        "layers": [name for name, _ in model.named_children()],
        "hooks_left": sum(len(m._forward_hooks) for m in model.modules()),
    }))


if __name__ == "__main__":
    main()
