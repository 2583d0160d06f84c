"""A small ResNet trained the way pytorch/examples' imagenet trains: torchvision-style
BasicBlock and Bottleneck written out (conv3x3/conv1x1 helpers, a downsample Sequential,
kaiming_normal_(mode='fan_out') and constant_ initialisation, zero-initialised last BN of
each residual branch), CrossEntropyLoss, SGD with momentum and weight decay, StepLR,
top-k accuracy with topk/t/eq/expand_as, AverageMeter and ProgressMeter formatting
tensors, and a checkpoint dict ('epoch', 'arch', 'state_dict', 'best_acc1', 'optimizer',
'scheduler') written with torch.save, copied when best, and resumed with torch.load.

The 3x32x32 images are synthetic (the class is the colour and position of a square), so it
needs neither torchvision nor a download. It is a plain PyTorch program. The tests run it
with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_more.py).

    python resnet_style.py [--epochs N] [--arch resnet_basic|resnet_bottleneck]
                           [--ckpt-dir DIR] [--resume PATH]
"""

import argparse
import json
import os
import shutil
import time

import numpy as np
import torch
import torch.nn as nn
import torch.optim
import torch.utils.data
from torch.optim.lr_scheduler import StepLR


def conv3x3(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=3, stride=stride, padding=1, bias=False)


def conv1x1(in_planes, out_planes, stride=1):
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    expansion = 1

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    expansion = 4

    def __init__(self, inplanes, planes, stride=1, downsample=None):
        super().__init__()
        self.conv1 = conv1x1(inplanes, planes)
        self.bn1 = nn.BatchNorm2d(planes)
        self.conv2 = conv3x3(planes, planes, stride)
        self.bn2 = nn.BatchNorm2d(planes)
        self.conv3 = conv1x1(planes, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    def __init__(self, block, layers, num_classes=10, width=8, zero_init_residual=True):
        super().__init__()
        self.inplanes = width
        self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        self.layer1 = self._make_layer(block, width, layers[0])
        self.layer2 = self._make_layer(block, width * 2, layers[1], stride=2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.fc = nn.Linear(width * 2 * block.expansion, num_classes)
        for m in self.modules():
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
                nn.init.constant_(m.weight, 1)
                nn.init.constant_(m.bias, 0)
        if zero_init_residual:
            for m in self.modules():
                if isinstance(m, Bottleneck) and m.bn3.weight is not None:
                    nn.init.constant_(m.bn3.weight, 0)
                elif isinstance(m, BasicBlock) and m.bn2.weight is not None:
                    nn.init.constant_(m.bn2.weight, 0)

    def _make_layer(self, block, planes, blocks, stride=1):
        downsample = None
        if stride != 1 or self.inplanes != planes * block.expansion:
            downsample = nn.Sequential(conv1x1(self.inplanes, planes * block.expansion, stride),
                                       nn.BatchNorm2d(planes * block.expansion))
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * block.expansion
        for _ in range(1, blocks):
            layers.append(block(self.inplanes, planes))
        return nn.Sequential(*layers)

    def forward(self, x):
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer2(self.layer1(x))
        x = torch.flatten(self.avgpool(x), 1)
        return self.fc(x)


def resnet_basic(**kwargs):
    return ResNet(BasicBlock, [2, 1], **kwargs)


def resnet_bottleneck(**kwargs):
    return ResNet(Bottleneck, [1, 1], **kwargs)


class AverageMeter:
    """Computes and stores the average and current value."""

    def __init__(self, name, fmt=":f"):
        self.name, self.fmt = name, fmt
        self.reset()

    def reset(self):
        self.val = self.avg = self.sum = self.count = 0

    def update(self, val, n=1):
        self.val = val
        self.sum += val * n
        self.count += n
        self.avg = self.sum / self.count

    def __str__(self):
        fmtstr = "{name} {val" + self.fmt + "} ({avg" + self.fmt + "})"
        return fmtstr.format(**self.__dict__)


class ProgressMeter:
    def __init__(self, num_batches, meters, prefix=""):
        num_digits = len(str(num_batches // 1))
        self.batch_fmtstr = "[{:" + str(num_digits) + "d}/" + "{:" + str(num_digits) + "d}]"
        self.batch_fmtstr = self.batch_fmtstr.format
        self.num_batches, self.meters, self.prefix = num_batches, meters, prefix

    def display(self, batch):
        entries = [self.prefix + self.batch_fmtstr(batch, self.num_batches)]
        entries += [str(meter) for meter in self.meters]
        return "\t".join(entries)


def accuracy(output, target, topk=(1,)):
    """Computes the accuracy over the k top predictions for the specified values of k."""
    with torch.no_grad():
        maxk = max(topk)
        batch_size = target.size(0)
        _, pred = output.topk(maxk, 1, True, True)
        pred = pred.t()
        correct = pred.eq(target.view(1, -1).expand_as(pred))
        res = []
        for k in topk:
            correct_k = correct[:k].reshape(-1).float().sum(0, keepdim=True)
            res.append(correct_k.mul_(100.0 / batch_size))
        return res


def squares(n, seed):
    """n images 3x32x32: class c puts a bright square of colour c % 3 at place c // 3."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, 10, size=n)
    images = rng.normal(0.0, 0.3, size=(n, 3, 32, 32)).astype(np.float32)
    for i, c in enumerate(labels):
        r, col = divmod(int(c) // 3, 2)
        images[i, c % 3, 4 + 12 * r:14 + 12 * r, 4 + 12 * col:14 + 12 * col] += 2.0
    return torch.from_numpy(images), torch.from_numpy(labels.astype(np.int64))


def train_step(model, criterion, optimizer, images, target):
    output = model(images)
    loss = criterion(output, target)
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    return output, loss


def train(loader, model, criterion, optimizer, epoch, log, lines):
    losses, top1, top5 = AverageMeter("Loss", ":.4e"), AverageMeter("Acc@1", ":6.2f"), \
        AverageMeter("Acc@5", ":6.2f")
    batch_time = AverageMeter("Time", ":6.3f")
    progress = ProgressMeter(len(loader), [batch_time, losses, top1, top5],
                             prefix="Epoch: [{}]".format(epoch))
    model.train()
    end = time.time()
    for i, (images, target) in enumerate(loader):
        output, loss = train_step(model, criterion, optimizer, images, target)
        acc1, acc5 = accuracy(output, target, topk=(1, 5))
        losses.update(loss.item(), images.size(0))
        top1.update(acc1[0], images.size(0))
        top5.update(acc5[0], images.size(0))
        batch_time.update(time.time() - end)
        end = time.time()
        log.append(loss.item())
        lines.append(progress.display(i + 1))


def validate(loader, model, criterion):
    top1, top5 = AverageMeter("Acc@1", ":6.2f"), AverageMeter("Acc@5", ":6.2f")
    model.eval()
    with torch.no_grad():
        for images, target in loader:
            acc1, acc5 = accuracy(model(images), target, topk=(1, 5))
            top1.update(acc1[0], images.size(0))
            top5.update(acc5[0], images.size(0))
    return top1.avg, top5.avg


def save_checkpoint(state, is_best, ckpt_dir):
    os.makedirs(ckpt_dir, exist_ok=True)
    filename = os.path.join(ckpt_dir, "checkpoint.pth.tar")
    torch.save(state, filename)
    if is_best:
        shutil.copyfile(filename, os.path.join(ckpt_dir, "model_best.pth.tar"))


def main(argv=None):
    parser = argparse.ArgumentParser(description="ImageNet-style training")
    parser.add_argument("--arch", default="resnet_basic",
                        choices=["resnet_basic", "resnet_bottleneck"])
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--lr", type=float, default=0.1)
    parser.add_argument("--momentum", type=float, default=0.9)
    parser.add_argument("--wd", "--weight-decay", type=float, default=1e-4, dest="weight_decay")
    parser.add_argument("--ckpt-dir", default=None)
    parser.add_argument("--resume", default="")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    model = globals()[args.arch]()
    criterion = nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), args.lr, momentum=args.momentum,
                                weight_decay=args.weight_decay)
    scheduler = StepLR(optimizer, step_size=1, gamma=0.5)
    start_epoch, best_acc1 = 0, 0
    if args.resume:
        checkpoint = torch.load(args.resume, map_location="cpu")
        start_epoch = checkpoint["epoch"]
        best_acc1 = checkpoint["best_acc1"]
        model.load_state_dict(checkpoint["state_dict"])
        optimizer.load_state_dict(checkpoint["optimizer"])
        scheduler.load_state_dict(checkpoint["scheduler"])
    train_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*squares(96, 0)),
                                               batch_size=16, shuffle=True)
    val_loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(*squares(48, 1)),
                                             batch_size=16, shuffle=False)
    log, lines, accs = [], [], []
    for epoch in range(start_epoch, args.epochs):
        train(train_loader, model, criterion, optimizer, epoch, log, lines)
        acc1, acc5 = validate(val_loader, model, criterion)
        scheduler.step()
        is_best = acc1 > best_acc1
        best_acc1 = max(acc1, best_acc1)
        accs.append([float(acc1), float(acc5)])
        if args.ckpt_dir:
            save_checkpoint({"epoch": epoch + 1, "arch": args.arch,
                             "state_dict": model.state_dict(), "best_acc1": best_acc1,
                             "optimizer": optimizer.state_dict(),
                             "scheduler": scheduler.state_dict()}, is_best, args.ckpt_dir)
    print(json.dumps({"losses": log, "accs": accs, "best_acc1": float(best_acc1),
                      "lr": scheduler.get_last_lr()[0], "start_epoch": start_epoch,
                      "last_line": lines[-1] if lines else ""}))


if __name__ == "__main__":
    main()
