"""A siamese network trained the way pytorch/examples' siamese_network trains: a Dataset
subclass whose __getitem__ returns two images and a float target (same class or not), one
shared convolutional tower applied to both, the two embeddings joined with torch.cat and
a small head (xavier_uniform_ weights, bias.data.fill_(0.01) through self.apply), BCELoss
on a sigmoid output, Adadelta with StepLR(gamma=0.7), and a test pass counting
torch.where(outputs > 0.5, 1, 0) against the targets. With --head cosine the head is
instead a learned scale times F.cosine_similarity of the two embeddings, trained with
BCEWithLogitsLoss (pos_weight given).

The 1x16x16 images are synthetic (class = orientation of a bar), so it needs neither
torchvision nor a download. It is a plain PyTorch program. The tests run it with real
torch and, unchanged, with `python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python siamese_style.py [--epochs N] [--head cat|cosine]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torch.optim.lr_scheduler import StepLR
from torch.utils.data import DataLoader, Dataset


class SiameseNetwork(nn.Module):
    def __init__(self, head="cat"):
        super().__init__()
        self.tower = nn.Sequential(
            nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(inplace=True),
            nn.MaxPool2d(2),
            nn.Conv2d(8, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(inplace=True),
            nn.AdaptiveAvgPool2d((2, 2)), nn.Flatten())
        self.head = head
        if head == "cat":
            self.fc = nn.Sequential(nn.Linear(64 * 2, 32), nn.ReLU(inplace=True),
                                    nn.Linear(32, 1))
            self.sigmoid = nn.Sigmoid()
        else:
            self.scale = nn.Parameter(torch.tensor(5.0))
        self.fc_in = nn.Linear(64, 64)
        self.apply(self.init_weights)

    def init_weights(self, m):
        if isinstance(m, nn.Linear):
            torch.nn.init.xavier_uniform_(m.weight)
            m.bias.data.fill_(0.01)

    def forward_once(self, x):
        return self.fc_in(self.tower(x))

    def forward(self, input1, input2):
        output1 = self.forward_once(input1)
        output2 = self.forward_once(input2)
        if self.head == "cat":
            output = torch.cat((output1, output2), 1)
            return self.sigmoid(self.fc(output))
        return (self.scale * F.cosine_similarity(output1, output2, dim=1)).unsqueeze(1)


def bars(n, seed):
    """n images 1x16x16 of noise with a bar in one of 4 orientations; returns images, class."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 4, size=n)
    x = rng.normal(0, 0.3, size=(n, 1, 16, 16)).astype(np.float32)
    idx = np.arange(3, 13)
    for i, c in enumerate(labels):
        if c == 0:
            x[i, 0, 7:9, 3:13] += 1.5
        elif c == 1:
            x[i, 0, 3:13, 7:9] += 1.5
        elif c == 2:
            x[i, 0, idx, idx] += 1.5
        else:
            x[i, 0, idx, 15 - idx] += 1.5
    return torch.from_numpy(x), torch.from_numpy(labels)


class PairDataset(Dataset):
    """Pairs (image, image, target): target 1.0 when both have the same class. Pairs are
    chosen with numpy so every library gets the same ones."""

    def __init__(self, n, seed):
        self.images, self.labels = bars(n, seed)
        rng = np.random.default_rng(seed + 100)
        self.partner = []
        for i in range(n):
            same = rng.random() < 0.5
            pool = np.flatnonzero((self.labels.numpy() == self.labels[i].item()) == same)
            self.partner.append(int(rng.choice(pool)))

    def __len__(self):
        return len(self.partner)

    def __getitem__(self, index):
        j = self.partner[index]
        target = torch.tensor(float(self.labels[index] == self.labels[j]), dtype=torch.float)
        return self.images[index], self.images[j], target


def train_step(model, criterion, optimizer, images_1, images_2, targets):
    optimizer.zero_grad()
    outputs = model(images_1, images_2).squeeze()
    loss = criterion(outputs, targets)
    loss.backward()
    optimizer.step()
    return loss.item()


def test(model, loader, head):
    model.eval()
    correct = 0
    with torch.no_grad():
        for images_1, images_2, targets in loader:
            outputs = model(images_1, images_2).squeeze()
            if head == "cosine":
                outputs = torch.sigmoid(outputs)
            pred = torch.where(outputs > 0.5, 1, 0)
            correct += pred.eq(targets.view_as(pred)).sum().item()
    return correct / len(loader.dataset)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--gamma", type=float, default=0.7)
    parser.add_argument("--head", default="cat", choices=["cat", "cosine"])
    args = parser.parse_args(argv)
    torch.manual_seed(1)
    train_loader = DataLoader(PairDataset(128, 0), batch_size=16, shuffle=True)
    test_loader = DataLoader(PairDataset(64, 1), batch_size=32)
    model = SiameseNetwork(args.head)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    if args.head == "cat":
        criterion = nn.BCELoss()
    else:
        criterion = nn.BCEWithLogitsLoss(pos_weight=torch.tensor(1.5))
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    losses, accs = [], []
    for _ in range(args.epochs):
        model.train()
        for images_1, images_2, targets in train_loader:
            losses.append(train_step(model, criterion, optimizer, images_1, images_2, targets))
        accs.append(test(model, test_loader, args.head))
        scheduler.step()
    print(json.dumps({"losses": losses, "accs": accs, "lr": scheduler.get_last_lr()[0]}))


if __name__ == "__main__":
    main()
