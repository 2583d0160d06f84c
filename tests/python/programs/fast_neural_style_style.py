"""Fast neural style transfer trained the way pytorch/examples' fast_neural_style trains
it, at toy size: a TransformerNet of ConvLayers (nn.ReflectionPad2d then Conv2d),
nn.InstanceNorm2d(affine=True), ResidualBlocks and UpsampleConvLayers
(F.interpolate(mode='nearest', scale_factor=2)); a frozen feature network (a stand-in for
VGG16, its parameters turned off with requires_grad_(False)) returning a namedtuple of
activations; gram matrices by view / transpose / bmm; normalize_batch with new_tensor and
div_; a content loss on one activation and a style loss on every gram matrix against the
style image's (repeated to the batch and sliced to n_batch); Adam; the state_dict saved,
reloaded with the InstanceNorm running-stat keys filtered by a regex (as stylize does for
old checkpoints), and an image stylized under no_grad, clamped to [0, 255] and turned into
uint8 pixels.

The images are made with numpy, so every library sees the same data. It is a plain
PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave3.py).

    python fast_neural_style_style.py [--epochs N] [--save-model-dir DIR]
"""

import argparse
import json
import os
import re
from collections import namedtuple

import numpy as np
import torch
import torch.nn.functional as F
from torch.optim import Adam


class ConvLayer(torch.nn.Module):
    def __init__(self, in_channels, out_channels, kernel_size, stride):
        super().__init__()
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        out = self.reflection_pad(x)
        out = self.conv2d(out)
        return out


class ResidualBlock(torch.nn.Module):
    """Two 3x3 ConvLayers with instance norm, added to the input."""

    def __init__(self, channels):
        super().__init__()
        self.conv1 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.conv2 = ConvLayer(channels, channels, kernel_size=3, stride=1)
        self.in2 = torch.nn.InstanceNorm2d(channels, affine=True)
        self.relu = torch.nn.ReLU()

    def forward(self, x):
        residual = x
        out = self.relu(self.in1(self.conv1(x)))
        out = self.in2(self.conv2(out))
        out = out + residual
        return out


class UpsampleConvLayer(torch.nn.Module):
    """Nearest upsampling then a ConvLayer (instead of a transposed convolution)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride, upsample=None):
        super().__init__()
        self.upsample = upsample
        reflection_padding = kernel_size // 2
        self.reflection_pad = torch.nn.ReflectionPad2d(reflection_padding)
        self.conv2d = torch.nn.Conv2d(in_channels, out_channels, kernel_size, stride)

    def forward(self, x):
        x_in = x
        if self.upsample:
            x_in = F.interpolate(x_in, mode="nearest", scale_factor=self.upsample)
        out = self.reflection_pad(x_in)
        out = self.conv2d(out)
        return out


class TransformerNet(torch.nn.Module):
    def __init__(self, width=8, n_res=2):
        super().__init__()
        w = width
        self.conv1 = ConvLayer(3, w, kernel_size=9, stride=1)
        self.in1 = torch.nn.InstanceNorm2d(w, affine=True)
        self.conv2 = ConvLayer(w, 2 * w, kernel_size=3, stride=2)
        self.in2 = torch.nn.InstanceNorm2d(2 * w, affine=True)
        self.conv3 = ConvLayer(2 * w, 4 * w, kernel_size=3, stride=2)
        self.in3 = torch.nn.InstanceNorm2d(4 * w, affine=True)
        self.res = torch.nn.Sequential(*[ResidualBlock(4 * w) for _ in range(n_res)])
        self.deconv1 = UpsampleConvLayer(4 * w, 2 * w, kernel_size=3, stride=1, upsample=2)
        self.in4 = torch.nn.InstanceNorm2d(2 * w, affine=True)
        self.deconv2 = UpsampleConvLayer(2 * w, w, kernel_size=3, stride=1, upsample=2)
        self.in5 = torch.nn.InstanceNorm2d(w, affine=True)
        self.deconv3 = ConvLayer(w, 3, kernel_size=9, stride=1)
        self.relu = torch.nn.ReLU()

    def forward(self, X):
        y = self.relu(self.in1(self.conv1(X)))
        y = self.relu(self.in2(self.conv2(y)))
        y = self.relu(self.in3(self.conv3(y)))
        y = self.res(y)
        y = self.relu(self.in4(self.deconv1(y)))
        y = self.relu(self.in5(self.deconv2(y)))
        y = self.deconv3(y)
        return y


class FeatureNet(torch.nn.Module):
    """A small frozen convolutional net standing in for VGG16's slices."""

    def __init__(self, requires_grad=False):
        super().__init__()
        self.slice1 = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU())
        self.slice2 = torch.nn.Sequential(torch.nn.MaxPool2d(2, 2),
                                          torch.nn.Conv2d(8, 12, 3, padding=1), torch.nn.ReLU())
        self.slice3 = torch.nn.Sequential(torch.nn.MaxPool2d(2, 2),
                                          torch.nn.Conv2d(12, 16, 3, padding=1), torch.nn.ReLU())
        if not requires_grad:
            self.requires_grad_(False)

    def forward(self, X):
        h_relu1_2 = self.slice1(X)
        h_relu2_2 = self.slice2(h_relu1_2)
        h_relu3_3 = self.slice3(h_relu2_2)
        vgg_outputs = namedtuple("VggOutputs", ["relu1_2", "relu2_2", "relu3_3"])
        return vgg_outputs(h_relu1_2, h_relu2_2, h_relu3_3)


def gram_matrix(y):
    (b, ch, h, w) = y.size()
    features = y.view(b, ch, w * h)
    features_t = features.transpose(1, 2)
    gram = features.bmm(features_t) / (ch * h * w)
    return gram


def normalize_batch(batch):
    # normalize using imagenet mean and std
    mean = batch.new_tensor([0.485, 0.456, 0.406]).view(-1, 1, 1)
    std = batch.new_tensor([0.229, 0.224, 0.225]).view(-1, 1, 1)
    batch = batch.div_(255.0)
    return (batch - mean) / std


def content_images(n, size=16, seed=0):
    """Pixel values in [0, 255]: blobs of colour on a gradient."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:size, 0:size] / size
    imgs = np.empty((n, 3, size, size))
    for i in range(n):
        cy, cx = rng.uniform(0.2, 0.8, 2)
        blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / 0.05)
        for c in range(3):
            imgs[i, c] = 255 * (0.5 * blob * rng.uniform() + 0.5 * xx * rng.uniform())
    return imgs.astype(np.float32)


def style_image(size=16):
    yy, xx = np.mgrid[0:size, 0:size]
    stripes = (np.sin(xx + yy) > 0).astype(np.float32)
    return 255 * np.stack([stripes, 1 - stripes, 0.5 * stripes])


def train_step(transformer, vgg, optimizer, x, gram_style, content_weight, style_weight):
    n_batch = len(x)
    optimizer.zero_grad()
    y = transformer(x)
    y = normalize_batch(y)
    x = normalize_batch(x.clone())
    features_y = vgg(y)
    features_x = vgg(x)
    content_loss = content_weight * F.mse_loss(features_y.relu2_2, features_x.relu2_2)
    style_loss = 0.
    for ft_y, gm_s in zip(features_y, gram_style):
        gm_y = gram_matrix(ft_y)
        style_loss += F.mse_loss(gm_y, gm_s[:n_batch, :, :])
    style_loss *= style_weight
    total_loss = content_loss + style_loss
    total_loss.backward()
    optimizer.step()
    return content_loss.item(), style_loss.item()


def style_grams(vgg, batch_size):
    style = torch.from_numpy(style_image())
    style = style.repeat(batch_size, 1, 1, 1)
    features_style = vgg(normalize_batch(style))
    return [gram_matrix(y) for y in features_style]


def stylize(path, content):
    style_model = TransformerNet()
    state_dict = torch.load(path)
    # remove saved deprecated running_* keys in InstanceNorm from the checkpoint
    for k in list(state_dict.keys()):
        if re.search(r"in\d+\.running_(mean|var)$", k):
            del state_dict[k]
    style_model.load_state_dict(state_dict)
    style_model.eval()
    with torch.no_grad():
        output = style_model(content.unsqueeze(0)).cpu()
    img = output[0].clone().clamp(0, 255).numpy()
    return img.transpose(1, 2, 0).astype("uint8")


def main(argv=None):
    parser = argparse.ArgumentParser(description="parser for fast-neural-style")
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=2)
    parser.add_argument("--lr", type=float, default=1e-2)
    parser.add_argument("--content-weight", type=float, default=1.0)
    parser.add_argument("--style-weight", type=float, default=1e3)
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--save-model-dir", type=str, default="")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    images = torch.from_numpy(content_images(8))
    transformer = TransformerNet()
    optimizer = Adam(transformer.parameters(), args.lr)
    vgg = FeatureNet(requires_grad=False)
    gram_style = style_grams(vgg, args.batch_size)
    content_losses, style_losses = [], []
    for _ in range(args.epochs):
        transformer.train()
        for i in range(0, len(images), args.batch_size):
            c, s = train_step(transformer, vgg, optimizer, images[i:i + args.batch_size],
                              gram_style, args.content_weight, args.style_weight)
            content_losses.append(c)
            style_losses.append(s)
    result = {"content_losses": content_losses, "style_losses": style_losses,
              "losses": [c + s for c, s in zip(content_losses, style_losses)],
              "vgg_grads": [p.grad is None and not p.requires_grad for p in vgg.parameters()],
              "gram_shapes": [list(g.shape) for g in gram_style]}
    if args.save_model_dir:
        transformer.eval()
        path = os.path.join(args.save_model_dir, "epoch_%d.model" % args.epochs)
        torch.save(transformer.state_dict(), path)
        pixels = stylize(path, images[0])
        result.update(pixels_shape=list(pixels.shape), pixels_dtype=str(pixels.dtype))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
