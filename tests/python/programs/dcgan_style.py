"""A DCGAN trained the way pytorch/examples' dcgan trains: a generator of ConvTranspose2d,
BatchNorm2d and ReLU(True) ending in Tanh, a discriminator of strided Conv2d with
LeakyReLU(0.2, inplace=True) ending in Sigmoid, weights initialised by `module.apply`
with nn.init.normal_ / zeros_ chosen on the class name, BCELoss against labels made
with torch.full and refilled with fill_, two Adam optimizers with betas=(0.5, 0.999),
the discriminator's two backward passes accumulated before its step, fake.detach(),
a fixed noise batch rendered under no_grad, and both networks saved with torch.save.

The 1x32x32 "real" images are synthetic (smooth random stripes in [-1, 1]), so it needs
neither torchvision nor a download. It is a plain PyTorch program. The tests run it with
real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_more.py).

    python dcgan_style.py [--niter N] [--outf DIR] [--manualSeed N]
"""

import argparse
import json
import os

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim
import torch.utils.data


class Generator(nn.Module):
    def __init__(self, ngpu, nz, ngf, nc):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # nz x 1 x 1 -> (ngf*4) x 4 x 4
            nn.ConvTranspose2d(nz, ngf * 4, 4, 1, 0, bias=False),
            nn.BatchNorm2d(ngf * 4),
            nn.ReLU(True),
            # -> (ngf*2) x 8 x 8
            nn.ConvTranspose2d(ngf * 4, ngf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf * 2),
            nn.ReLU(True),
            # -> ngf x 16 x 16
            nn.ConvTranspose2d(ngf * 2, ngf, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ngf),
            nn.ReLU(True),
            # -> nc x 32 x 32
            nn.ConvTranspose2d(ngf, nc, 4, 2, 1, bias=False),
            nn.Tanh(),
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            return nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        return self.main(input)


class Discriminator(nn.Module):
    def __init__(self, ngpu, ndf, nc):
        super().__init__()
        self.ngpu = ngpu
        self.main = nn.Sequential(
            # nc x 32 x 32 -> ndf x 16 x 16
            nn.Conv2d(nc, ndf, 4, 2, 1, bias=False),
            nn.LeakyReLU(0.2, inplace=True),
            # -> (ndf*2) x 8 x 8
            nn.Conv2d(ndf, ndf * 2, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 2),
            nn.LeakyReLU(0.2, inplace=True),
            # -> (ndf*4) x 4 x 4
            nn.Conv2d(ndf * 2, ndf * 4, 4, 2, 1, bias=False),
            nn.BatchNorm2d(ndf * 4),
            nn.LeakyReLU(0.2, inplace=True),
            # -> 1 x 1 x 1
            nn.Conv2d(ndf * 4, 1, 4, 1, 0, bias=False),
            nn.Sigmoid(),
        )

    def forward(self, input):
        if input.is_cuda and self.ngpu > 1:
            output = nn.parallel.data_parallel(self.main, input, range(self.ngpu))
        else:
            output = self.main(input)
        return output.view(-1, 1).squeeze(1)


def weights_init(m):
    """Custom weights initialization called on netG and netD, as the example does."""
    classname = m.__class__.__name__
    if classname.find("Conv") != -1:
        torch.nn.init.normal_(m.weight, 0.0, 0.02)
    elif classname.find("BatchNorm") != -1:
        torch.nn.init.normal_(m.weight, 1.0, 0.02)
        torch.nn.init.zeros_(m.bias)


def stripes(n, seed):
    """n images 1x32x32 in [-1, 1]: sin stripes of random angle and phase."""
    rng = np.random.default_rng(seed)
    yy, xx = np.mgrid[0:32, 0:32] / 32.0
    angle = rng.uniform(0, np.pi, size=(n, 1, 1))
    phase = rng.uniform(0, 2 * np.pi, size=(n, 1, 1))
    img = np.sin(6 * (np.cos(angle) * xx + np.sin(angle) * yy) + phase)
    return torch.from_numpy(img[:, None].astype(np.float32))


REAL_LABEL, FAKE_LABEL = 1.0, 0.0


def train_step(netG, netD, optimizerG, optimizerD, criterion, real_cpu, nz, device):
    """One update of D (real, then detached fake) and one of G; returns the logged stats."""
    # (1) Update D network: maximize log(D(x)) + log(1 - D(G(z)))
    netD.zero_grad()
    batch_size = real_cpu.size(0)
    label = torch.full((batch_size,), REAL_LABEL, dtype=real_cpu.dtype, device=device)
    output = netD(real_cpu)
    errD_real = criterion(output, label)
    errD_real.backward()
    D_x = output.mean().item()

    noise = torch.randn(batch_size, nz, 1, 1, device=device)
    fake = netG(noise)
    label.fill_(FAKE_LABEL)
    output = netD(fake.detach())
    errD_fake = criterion(output, label)
    errD_fake.backward()
    D_G_z1 = output.mean().item()
    errD = errD_real + errD_fake
    optimizerD.step()

    # (2) Update G network: maximize log(D(G(z)))
    netG.zero_grad()
    label.fill_(REAL_LABEL)  # fake labels are real for generator cost
    output = netD(fake)
    errG = criterion(output, label)
    errG.backward()
    D_G_z2 = output.mean().item()
    optimizerG.step()
    return errD.item(), errG.item(), D_x, D_G_z1, D_G_z2


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--batchSize", type=int, default=16)
    parser.add_argument("--nz", type=int, default=8)
    parser.add_argument("--ngf", type=int, default=8)
    parser.add_argument("--ndf", type=int, default=8)
    parser.add_argument("--niter", type=int, default=2)
    parser.add_argument("--lr", type=float, default=0.0002)
    parser.add_argument("--beta1", type=float, default=0.5)
    parser.add_argument("--outf", default=None)
    parser.add_argument("--manualSeed", type=int, default=999)
    opt = parser.parse_args(argv)
    torch.manual_seed(opt.manualSeed)
    device = torch.device("cpu")
    dataset = torch.utils.data.TensorDataset(stripes(96, 0))
    dataloader = torch.utils.data.DataLoader(dataset, batch_size=opt.batchSize, shuffle=True)
    nc = 1
    netG = Generator(0, opt.nz, opt.ngf, nc).to(device)
    netG.apply(weights_init)
    netD = Discriminator(0, opt.ndf, nc).to(device)
    netD.apply(weights_init)
    criterion = nn.BCELoss()
    fixed_noise = torch.randn(opt.batchSize, opt.nz, 1, 1, device=device)
    optimizerD = optim.Adam(netD.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    optimizerG = optim.Adam(netG.parameters(), lr=opt.lr, betas=(opt.beta1, 0.999))
    stats = []
    for epoch in range(opt.niter):
        for i, data in enumerate(dataloader, 0):
            real_cpu = data[0].to(device)
            stats.append(train_step(netG, netD, optimizerG, optimizerD, criterion, real_cpu,
                                    opt.nz, device))
        with torch.no_grad():
            fake = netG(fixed_noise).detach()
        if opt.outf:
            os.makedirs(opt.outf, exist_ok=True)
            torch.save(netG.state_dict(), "%s/netG_epoch_%d.pth" % (opt.outf, epoch))
            torch.save(netD.state_dict(), "%s/netD_epoch_%d.pth" % (opt.outf, epoch))
    print(json.dumps({"stats": stats, "fake_shape": list(fake.shape),
                      "fake_range": [fake.min().item(), fake.max().item()],
                      "conv_std": netG.main[0].weight.std().item()}))


if __name__ == "__main__":
    main()
