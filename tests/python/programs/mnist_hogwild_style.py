"""Hogwild training the way pytorch/examples' mnist_hogwild trains: one model whose
parameters are moved to shared memory by model.share_memory(), several
torch.multiprocessing Processes each running SGD(momentum) on it through its own
DataLoader (seeded with torch.manual_seed(seed + rank)), joined, then the shared model
tested in the parent, whose weights must show every worker's updates.

The digits are synthetic (bars drawn with numpy), so every library sees the same data. It
is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave3.py).

    python mnist_hogwild_style.py [--num-processes N] [--epochs N]
"""

import argparse
import json

import numpy as np
import torch
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 4, kernel_size=3)
        self.fc1 = nn.Linear(4 * 5 * 5, 16)
        self.fc2 = nn.Linear(16, 4)

    def forward(self, x):
        x = F.relu(F.max_pool2d(self.conv1(x), 2))
        x = x.view(-1, 4 * 5 * 5)
        x = F.relu(self.fc1(x))
        return F.log_softmax(self.fc2(x), dim=1)


def bars(n, seed):
    """12 x 12 images of one of four bars (the class), with noise."""
    rng = np.random.default_rng(seed)
    y = rng.integers(4, size=n)
    x = rng.normal(0, 0.2, size=(n, 1, 12, 12))
    for i, c in enumerate(y):
        if c < 2:
            x[i, 0, 3 + 5 * c] += 1
        else:
            x[i, 0, :, 3 + 5 * (c - 2)] += 1
    return TensorDataset(torch.tensor(x.astype(np.float32)), torch.tensor(y))


def train(rank, args, model, dataset):
    torch.manual_seed(args.seed + rank)
    train_loader = DataLoader(dataset, batch_size=args.batch_size, shuffle=True)
    optimizer = optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    model.train()
    for _ in range(args.epochs):
        for data, target in train_loader:
            optimizer.zero_grad()
            loss = F.nll_loss(model(data), target)
            loss.backward()
            optimizer.step()


def test(model, dataset):
    model.eval()
    test_loss, correct = 0, 0
    with torch.no_grad():
        for data, target in DataLoader(dataset, batch_size=16):
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction="sum").item()
            pred = output.max(1)[1]
            correct += pred.eq(target.view_as(pred)).sum().item()
    return test_loss / len(dataset), correct / len(dataset)


def main(argv=None):
    parser = argparse.ArgumentParser(description="PyTorch MNIST hogwild example")
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--momentum", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--num-processes", type=int, default=2)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    dataset1, dataset2 = bars(64, 0), bars(32, 1)
    model = Net()
    before_loss, _ = test(model, dataset2)
    before = [p.detach().clone() for p in model.parameters()]
    model.share_memory()  # gradients are allocated lazily, so they are not shared here
    processes = []
    for rank in range(args.num_processes):
        p = mp.Process(target=train, args=(rank, args, model, dataset1))
        p.start()
        processes.append(p)
    for p in processes:
        p.join()
    loss, acc = test(model, dataset2)
    moved = sum((p.detach() - b).abs().sum().item() for p, b in zip(model.parameters(), before))
    print(json.dumps({"before_loss": before_loss, "test_loss": loss, "accuracy": acc,
                      "moved": moved, "shared": all(p.is_shared() for p in model.parameters()),
                      "exitcodes": [p.exitcode for p in processes]}))


if __name__ == "__main__":
    main()
