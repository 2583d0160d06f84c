"""Polynomial regression trained the way pytorch/examples' regression trains: features
x, x^2, .., x^4 made with torch.cat of powers, a target function from x.mm(W) + b.item(),
a single nn.Linear, F.smooth_l1_loss, a hand-written SGD step through
param.data.add_(-lr * param.grad), a loop over itertools.count that stops once the loss is
small, and the learned polynomial printed with '{:+.2f}'.format on tensor elements.

The batches come from numpy with a fixed seed rather than torch.randn, so that every
library sees the same ones. It is a plain PyTorch program. The tests run it with real torch
and, unchanged, with `python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python regression_style.py [--max-batches N] [--beta B]
"""

import argparse
import json
from itertools import count

import numpy as np
import torch
import torch.nn.functional as F

POLY_DEGREE = 4
W_target = torch.tensor([[0.5], [-1.2], [0.3], [0.8]])
b_target = torch.tensor([0.7])


def make_features(x):
    """Builds features i.e. a matrix with columns [x, x^2, x^3, x^4]."""
    x = x.unsqueeze(1)
    return torch.cat([x ** i for i in range(1, POLY_DEGREE + 1)], 1)


def f(x):
    """Approximated function."""
    return x.mm(W_target) + b_target.item()


def poly_desc(W, b):
    """Creates a string description of a polynomial."""
    result = "y = "
    for i, w in enumerate(W):
        result += "{:+.2f} x^{} ".format(w, i + 1)
    result += "{:+.2f}".format(b[0])
    return result


def get_batch(rng, batch_size=32):
    """Builds a batch i.e. (x, f(x)) pair."""
    random = torch.from_numpy(rng.uniform(-1.0, 1.0, batch_size).astype(np.float32))
    x = make_features(random)
    y = f(x)
    return x, y


def step(fc, batch_x, batch_y, lr, beta):
    fc.zero_grad()
    output = F.smooth_l1_loss(fc(batch_x), batch_y, beta=beta)
    loss = output.item()
    output.backward()
    for param in fc.parameters():
        param.data.add_(-lr * param.grad)
    return loss


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--max-batches", type=int, default=400)
    parser.add_argument("--lr", type=float, default=0.5)
    parser.add_argument("--beta", type=float, default=1.0)
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    fc = torch.nn.Linear(W_target.size(0), 1)
    losses = []
    for batch_idx in count(1):
        batch_x, batch_y = get_batch(rng)
        loss = step(fc, batch_x, batch_y, args.lr, args.beta)
        losses.append(loss)
        if loss < 1e-4 or batch_idx >= args.max_batches:
            break
    print(json.dumps({"losses": losses, "batches": batch_idx,
                      "learned": poly_desc(fc.weight.view(-1), fc.bias),
                      "actual": poly_desc(W_target.view(-1), b_target)}))


if __name__ == "__main__":
    main()
