"""A small convolutional classifier trained the way pytorch/examples' mnist trains: two
convolutions, max pooling, dropout, log_softmax with nll_loss, Adadelta with a StepLR
schedule, DataLoaders with shuffling, an evaluation pass that sums the loss and counts
correct argmax predictions, and the weights saved with torch.save.

The images are 28x28 synthetic digits (a bright bar whose position is the class), so it
needs no download. It is a plain PyTorch program. The tests run it with real torch and,
unchanged, with `python -m cagrad.as_torch` (tests/python/test_programs.py).

    python mnist_style.py [--epochs N] [--save-model PATH] [--workers N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, TensorDataset


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 32, 3, 1)
        self.conv2 = nn.Conv2d(32, 64, 3, 1)
        self.dropout1 = nn.Dropout(0.25)
        self.dropout2 = nn.Dropout(0.5)
        self.fc1 = nn.Linear(9216, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.relu(self.conv1(x))
        x = F.relu(self.conv2(x))
        x = self.dropout1(F.max_pool2d(x, 2))
        x = torch.flatten(x, 1)
        x = self.dropout2(F.relu(self.fc1(x)))
        return F.log_softmax(self.fc2(x), dim=1)


def synthetic_digits(n, seed):
    """n images of 28x28: class c is a bright horizontal bar at rows 2c+4..2c+6, plus noise,
    normalised with MNIST's mean and std as the examples do."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    images = rng.normal(0.1, 0.05, size=(n, 1, 28, 28)).astype(np.float32)
    for i, c in enumerate(labels):
        images[i, 0, 2 * c + 4:2 * c + 7, 4:24] += 0.9
    images = (images - 0.1307) / 0.3081
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def train_epoch(model, loader, optimizer, log):
    model.train()
    for data, target in loader:
        optimizer.zero_grad()
        loss = F.nll_loss(model(data), target)
        loss.backward()
        optimizer.step()
        log.append(loss.item())


def evaluate(model, loader):
    model.eval()
    total, correct = 0.0, 0
    with torch.no_grad():
        for data, target in loader:
            output = model(data)
            total += F.nll_loss(output, target, reduction="sum").item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()
    return total / len(loader.dataset), correct


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--lr", type=float, default=1.0)
    ap.add_argument("--gamma", type=float, default=0.7)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--workers", type=int, default=0)
    ap.add_argument("--save-model", default=None)
    a = ap.parse_args(argv)
    torch.manual_seed(a.seed)
    use_accel = torch.accelerator.is_available()
    device = torch.accelerator.current_accelerator() if use_accel else torch.device("cpu")
    train_kwargs, test_kwargs = {"batch_size": 16}, {"batch_size": 32}
    if use_accel:
        train_kwargs.update({"num_workers": 1, "pin_memory": True, "shuffle": True})
    train_loader = DataLoader(TensorDataset(*synthetic_digits(96, 0)), shuffle=True,
                              num_workers=a.workers, **train_kwargs)
    test_loader = DataLoader(TensorDataset(*synthetic_digits(64, 1)), **test_kwargs)
    model = Net().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=a.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=a.gamma)
    log, lrs = [], []
    for _ in range(a.epochs):
        train_epoch(model, train_loader, optimizer, log)
        lrs.append(scheduler.get_last_lr()[0])
        scheduler.step()
    test_loss, correct = evaluate(model, test_loader)
    if a.save_model:
        torch.save(model.state_dict(), a.save_model)
    print(json.dumps({"losses": log, "lrs": lrs, "test_loss": test_loss, "correct": correct}))


if __name__ == "__main__":
    main()
