"""A network trained with Hinton's forward-forward algorithm, the way pytorch/examples'
mnist_forward_forward trains it: the label written into the first pixels of each image
(x_[range(n), y] = x.max(), after x_[:, :10] *= 0.0), positive data with the right label
and negative data with a shuffled one, every Linear layer trained on its own with its own
Adam and a softplus loss on the "goodness" x.pow(2).mean(1) around a threshold, inputs
normalised by x / (x.norm(2, 1, keepdim=True) + 1e-4) and detached between layers, and a
prediction that tries every label and keeps the best total goodness.

The images are synthetic 28x28 bars flattened to 784 values. It is a plain PyTorch program.
The tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_more.py).

    python forward_forward_style.py [--epochs N] [--threshold T]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
from torch.optim import Adam


def overlay_y_on_x(x, y):
    """Replace the first 10 pixels of data [x] with one-hot-encoded label [y]."""
    x_ = x.clone()
    x_[:, :10] *= 0.0
    x_[range(x.shape[0]), y] = x.max()
    return x_


class Layer(nn.Linear):
    def __init__(self, in_features, out_features, threshold, lr, bias=True):
        super().__init__(in_features, out_features, bias=bias)
        self.relu = torch.nn.ReLU()
        self.opt = Adam(self.parameters(), lr=lr)
        self.threshold = threshold

    def forward(self, x):
        x_direction = x / (x.norm(2, 1, keepdim=True) + 1e-4)
        return self.relu(torch.mm(x_direction, self.weight.T) + self.bias.unsqueeze(0))

    def train_step(self, x_pos, x_neg):
        g_pos = self.forward(x_pos).pow(2).mean(1)
        g_neg = self.forward(x_neg).pow(2).mean(1)
        # push positive goodness above the threshold and negative goodness below it
        loss = torch.log(1 + torch.exp(torch.cat([-g_pos + self.threshold,
                                                  g_neg - self.threshold]))).mean()
        self.opt.zero_grad()
        loss.backward()
        self.opt.step()
        return loss.item()

    def train_layer(self, x_pos, x_neg, epochs, log):
        for _ in range(epochs):
            log.append(self.train_step(x_pos, x_neg))
        return self.forward(x_pos).detach(), self.forward(x_neg).detach()


class Net(torch.nn.Module):
    def __init__(self, dims, threshold=2.0, lr=0.01):
        super().__init__()
        self.layers = nn.ModuleList([Layer(dims[d], dims[d + 1], threshold, lr)
                                     for d in range(len(dims) - 1)])

    def predict(self, x):
        goodness_per_label = []
        for label in range(10):
            h = overlay_y_on_x(x, label)
            goodness = []
            for layer in self.layers:
                h = layer(h)
                goodness += [h.pow(2).mean(1)]
            goodness_per_label += [sum(goodness).unsqueeze(1)]
        goodness_per_label = torch.cat(goodness_per_label, 1)
        return goodness_per_label.argmax(1)

    def train_net(self, x_pos, x_neg, epochs):
        h_pos, h_neg, logs = x_pos, x_neg, []
        for layer in self.layers:
            log = []
            h_pos, h_neg = layer.train_layer(h_pos, h_neg, epochs, log)
            logs.append(log)
        return logs


def bars(n, seed):
    """n flattened 28x28 images; class c lights rows 2c+4..2c+6 (columns 12..24)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    x = rng.uniform(0, 0.2, size=(n, 28, 28)).astype(np.float32)
    for i, c in enumerate(labels):
        x[i, 2 * c + 4:2 * c + 7, 12:24] += 0.8
    return torch.from_numpy(x.reshape(n, 784)), torch.from_numpy(labels.astype(np.int64))


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=100)
    parser.add_argument("--threshold", type=float, default=0.5)
    args = parser.parse_args(argv)
    torch.manual_seed(1234)
    x, y = bars(128, 0)
    x_te, y_te = bars(64, 1)
    net = Net([784, 64, 64], threshold=args.threshold)
    x_pos = overlay_y_on_x(x, y)
    rnd = torch.randperm(x.size(0))
    x_neg = overlay_y_on_x(x, y[rnd])
    logs = net.train_net(x_pos, x_neg, args.epochs)
    train_error = 1.0 - net.predict(x).eq(y).float().mean().item()
    test_error = 1.0 - net.predict(x_te).eq(y_te).float().mean().item()
    print(json.dumps({"losses": logs[0], "layer_losses": logs, "train_error": train_error,
                      "test_error": test_error}))


if __name__ == "__main__":
    main()
