"""Knowledge distillation (Hinton et al.) at toy size, written the way PyTorch's knowledge
distillation tutorial and common KD code write it: a wider teacher MLP trained first on hard
labels, then a small student trained on a mix of hard-label F.cross_entropy and
nn.KLDivLoss(reduction="batchmean") between temperature-softened log_softmax outputs, scaled
by T**2. The soft targets are teacher probabilities (log_target=False) or teacher
log-probabilities (log_target=True); the teacher runs in eval() under torch.no_grad().
A student trained alone on the hard labels is the baseline.

The data are Gaussian clusters made with numpy, so every library sees the same data. It is a
plain PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5b.py).

    python distill_style.py [--log-target] [--temperature T] [--alpha A] [--epochs N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


def mlp(sizes, dropout=0.0):
    layers = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers += [nn.ReLU(), nn.Dropout(dropout)]
    return nn.Sequential(*layers)


def teacher_net(n_in=6, n_classes=4, dropout=0.1):
    return mlp([n_in, 32, 32, n_classes], dropout)


def student_net(n_in=6, n_classes=4):
    return mlp([n_in, 6, n_classes])


def clusters(n, n_classes=4, dim=6, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.random.default_rng(100).normal(0, 1.2, (n_classes, dim))
    y = rng.integers(0, n_classes, n)
    x = centres[y] + rng.normal(0, 1.0, (n, dim))
    return x.astype(np.float32), y.astype(np.int64)


def hard_step(model, optimizer, x, y):
    model.train()
    optimizer.zero_grad()
    loss = F.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss.item()


def distill_step(student, teacher, optimizer, kl, x, y, temperature, alpha, log_target):
    teacher.eval()
    student.train()
    with torch.no_grad():
        soft = teacher(x) / temperature
        target = F.log_softmax(soft, dim=-1) if log_target else F.softmax(soft, dim=-1)
    optimizer.zero_grad()
    logits = student(x)
    soft_loss = kl(F.log_softmax(logits / temperature, dim=-1), target) * temperature ** 2
    loss = alpha * soft_loss + (1 - alpha) * F.cross_entropy(logits, y)
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def accuracy(model, x, y):
    model.eval()
    return (model(x).argmax(1) == y).float().mean().item()


def batches(n, size):
    return torch.randperm(n).split(size)


def main(argv=None):
    parser = argparse.ArgumentParser(description="Knowledge distillation")
    parser.add_argument("--log-target", action="store_true")
    parser.add_argument("--temperature", type=float, default=4.0)
    parser.add_argument("--alpha", type=float, default=0.7)
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y = (torch.from_numpy(a) for a in clusters(256, seed=1))
    tx, ty = (torch.from_numpy(a) for a in clusters(256, seed=2))
    teacher = teacher_net()
    opt = torch.optim.Adam(teacher.parameters(), lr=1e-2)
    teacher_losses = [hard_step(teacher, opt, x[i], y[i])
                      for _ in range(args.epochs) for i in batches(len(x), args.batch_size)]
    student, baseline = student_net(), student_net()
    baseline.load_state_dict(student.state_dict())  # the same start
    kl = nn.KLDivLoss(reduction="batchmean", log_target=args.log_target)
    s_opt = torch.optim.Adam(student.parameters(), lr=1e-2)
    b_opt = torch.optim.Adam(baseline.parameters(), lr=1e-2)
    kd_losses, base_losses = [], []
    for _ in range(args.epochs):
        for i in batches(len(x), args.batch_size):
            kd_losses.append(distill_step(student, teacher, s_opt, kl, x[i], y[i],
                                          args.temperature, args.alpha, args.log_target))
            base_losses.append(hard_step(baseline, b_opt, x[i], y[i]))
    # the two ways of giving the target agree
    with torch.no_grad():
        s = F.log_softmax(student(tx) / args.temperature, dim=-1)
        t = teacher(tx) / args.temperature
        by_prob = nn.KLDivLoss(reduction="batchmean")(s, F.softmax(t, -1))
        by_log = nn.KLDivLoss(reduction="batchmean", log_target=True)(s, F.log_softmax(t, -1))
        by_sum = F.kl_div(s, F.softmax(t, -1), reduction="sum") / len(tx)
    print(json.dumps({
        "teacher_losses": teacher_losses, "losses": kd_losses, "base_losses": base_losses,
        "teacher_acc": accuracy(teacher, tx, ty), "student_acc": accuracy(student, tx, ty),
        "baseline_acc": accuracy(baseline, tx, ty),
        "kl": [by_prob.item(), by_log.item(), by_sum.item()],
        "sizes": [sum(p.numel() for p in m.parameters()) for m in (teacher, student)],
    }))


if __name__ == "__main__":
    main()
