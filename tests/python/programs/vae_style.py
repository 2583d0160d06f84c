"""A Bernoulli variational autoencoder trained the way pytorch/examples' vae trains: an
MLP encoder giving mu and logvar, the reparameterisation trick with torch.randn_like, a
sigmoid decoder, binary_cross_entropy(reduction='sum') plus the KL term, Adam, a test pass
under no_grad that also builds a comparison grid with torch.cat, and samples decoded from
torch.randn.

The 28x28 binary images are synthetic (a few random blobs per image), so it needs neither
torchvision nor a download. It is a plain PyTorch program. The tests run it with real
torch and, unchanged, with `python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python vae_style.py [--epochs N] [--batch-size N] [--seed N]
"""

import argparse
import json

import numpy as np
import torch
import torch.utils.data
from torch import nn, optim
from torch.nn import functional as F
from torch.utils.data import DataLoader, TensorDataset


class VAE(nn.Module):
    def __init__(self, hidden=200, latent=20):
        super().__init__()
        self.fc1 = nn.Linear(784, hidden)
        self.fc21 = nn.Linear(hidden, latent)
        self.fc22 = nn.Linear(hidden, latent)
        self.fc3 = nn.Linear(latent, hidden)
        self.fc4 = nn.Linear(hidden, 784)

    def encode(self, x):
        h1 = F.relu(self.fc1(x))
        return self.fc21(h1), self.fc22(h1)

    def reparameterize(self, mu, logvar):
        std = torch.exp(0.5 * logvar)
        eps = torch.randn_like(std)
        return mu + eps * std

    def decode(self, z):
        h3 = F.relu(self.fc3(z))
        return torch.sigmoid(self.fc4(h3))

    def forward(self, x):
        mu, logvar = self.encode(x.view(-1, 784))
        z = self.reparameterize(mu, logvar)
        return self.decode(z), mu, logvar


def loss_function(recon_x, x, mu, logvar):
    """Reconstruction + KL divergence losses summed over all elements and batch."""
    bce = F.binary_cross_entropy(recon_x, x.view(-1, 784), reduction="sum")
    kld = -0.5 * torch.sum(1 + logvar - mu.pow(2) - logvar.exp())
    return bce + kld


def blob_images(n, seed):
    """n binary 1x28x28 images, each one of four templates with a few pixels flipped."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:28, 0:28]
    templates = [((yy - cy) ** 2 + (xx - cx) ** 2 < 40).astype(np.float32)
                 for cy, cx in ((8, 8), (8, 20), (20, 8), (20, 20))]
    which = rng.integers(0, 4, size=n)
    images = np.stack([templates[k] for k in which])[:, None]
    flip = rng.random(images.shape) < 0.03
    images = np.where(flip, 1.0 - images, images).astype(np.float32)
    return torch.from_numpy(images), torch.from_numpy(which.astype(np.int64))


def train_step(model, optimizer, data):
    optimizer.zero_grad()
    recon_batch, mu, logvar = model(data)
    loss = loss_function(recon_batch, data, mu, logvar)
    loss.backward()
    optimizer.step()
    return loss.item()


def train(model, optimizer, loader, epoch, log):
    model.train()
    train_loss = 0
    for data, _ in loader:
        loss = train_step(model, optimizer, data)
        train_loss += loss
        log.append(loss / len(data))
    return train_loss / len(loader.dataset)


def test(model, loader, batch_size):
    model.eval()
    test_loss = 0
    grid = None
    with torch.no_grad():
        for i, (data, _) in enumerate(loader):
            recon_batch, mu, logvar = model(data)
            test_loss += loss_function(recon_batch, data, mu, logvar).item()
            if i == 0:
                n = min(data.size(0), 8)
                grid = torch.cat([data[:n], recon_batch.view(batch_size, 1, 28, 28)[:n]])
    return test_loss / len(loader.dataset), grid


def main(argv=None):
    parser = argparse.ArgumentParser(description="VAE example")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    device = torch.device("cpu")
    train_loader = DataLoader(TensorDataset(*blob_images(192, 0)), batch_size=args.batch_size,
                              shuffle=True)
    test_loader = DataLoader(TensorDataset(*blob_images(64, 1)), batch_size=args.batch_size)
    model = VAE().to(device)
    optimizer = optim.Adam(model.parameters(), lr=1e-3)
    log, epoch_losses, test_losses = [], [], []
    for epoch in range(1, args.epochs + 1):
        epoch_losses.append(train(model, optimizer, train_loader, epoch, log))
        test_loss, grid = test(model, test_loader, args.batch_size)
        test_losses.append(test_loss)
        with torch.no_grad():
            sample = torch.randn(64, 20).to(device)
            sample = model.decode(sample).cpu()
    print(json.dumps({"losses": log, "epoch_losses": epoch_losses, "test_losses": test_losses,
                      "grid_shape": list(grid.shape), "sample_shape": list(sample.shape),
                      "sample_range": [sample.min().item(), sample.max().item()]}))


if __name__ == "__main__":
    main()
