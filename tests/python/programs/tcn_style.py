"""A temporal convolutional network (Bai, Kolter and Koltun's TCN) on the adding problem,
written the way the public TCN code writes it: TemporalBlocks of two dilated causal
nn.Conv1d layers, each under weight normalisation (the older nn.utils.weight_norm, or
nn.utils.parametrizations.weight_norm), made causal by padding both sides and cutting the
right with a Chomp1d module (x[:, :, :-chomp].contiguous()) or by padding only the left
with F.pad; ReLU and Dropout after each conv, a 1x1 conv downsampling the residual where
the channel counts differ, and a Linear head on the last time step. Trained for sequence
regression with MSE, Adam and nn.utils.clip_grad_norm_; evaluated in eval() under no_grad;
at the end the weight norms are folded back into plain weights (nn.utils.remove_weight_norm,
or nn.utils.parametrize.remove_parametrizations) without changing the outputs.

The sequences are made with numpy, so every library sees the same data. It is a plain
PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5b.py).

    python tcn_style.py [--causal chomp|pad] [--weight-norm old|param] [--epochs N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class Chomp1d(nn.Module):
    def __init__(self, chomp_size):
        super().__init__()
        self.chomp_size = chomp_size

    def forward(self, x):
        return x[:, :, :-self.chomp_size].contiguous()


class LeftPad1d(nn.Module):
    def __init__(self, padding):
        super().__init__()
        self.padding = padding

    def forward(self, x):
        return F.pad(x, (self.padding, 0))


def wn(conv, how):
    if how == "old":
        return nn.utils.weight_norm(conv)
    return nn.utils.parametrizations.weight_norm(conv)


class TemporalBlock(nn.Module):
    def __init__(self, n_inputs, n_outputs, kernel_size, dilation, dropout=0.2,
                 causal="chomp", weight_norm="old"):
        super().__init__()
        padding = (kernel_size - 1) * dilation
        layers = []
        for cin in (n_inputs, n_outputs):
            conv = nn.Conv1d(cin, n_outputs, kernel_size, dilation=dilation,
                             padding=padding if causal == "chomp" else 0)
            conv.weight.data.normal_(0, 0.01)  # before the reparametrisation takes it
            conv = wn(conv, weight_norm)
            if causal == "chomp":
                layers += [conv, Chomp1d(padding)]
            else:
                layers += [LeftPad1d(padding), conv]
            layers += [nn.ReLU(), nn.Dropout(dropout)]
        self.net = nn.Sequential(*layers)
        self.downsample = nn.Conv1d(n_inputs, n_outputs, 1) if n_inputs != n_outputs else None
        if self.downsample is not None:
            self.downsample.weight.data.normal_(0, 0.01)
        self.relu = nn.ReLU()

    def forward(self, x):
        out = self.net(x)
        res = x if self.downsample is None else self.downsample(x)
        return self.relu(out + res)


class TemporalConvNet(nn.Module):
    def __init__(self, num_inputs, num_channels, kernel_size=3, dropout=0.2, **kw):
        super().__init__()
        layers = []
        for i, out in enumerate(num_channels):
            cin = num_inputs if i == 0 else num_channels[i - 1]
            layers.append(TemporalBlock(cin, out, kernel_size, 2 ** i, dropout, **kw))
        self.network = nn.Sequential(*layers)

    def forward(self, x):
        return self.network(x)


class TCN(nn.Module):
    def __init__(self, input_size=2, output_size=1, num_channels=(8, 8, 8), kernel_size=3,
                 dropout=0.2, **kw):
        super().__init__()
        self.tcn = TemporalConvNet(input_size, list(num_channels), kernel_size, dropout, **kw)
        self.linear = nn.Linear(num_channels[-1], output_size)
        self.linear.weight.data.normal_(0, 0.01)

    def forward(self, x):
        y = self.tcn(x)  # (batch, channels, length)
        return self.linear(y[:, :, -1])


def adding_problem(n, length, seed):
    """Inputs (n, 2, length): random values and a marker on two positions; targets their sum."""
    rng = np.random.default_rng(seed)
    x = np.zeros((n, 2, length), dtype=np.float32)
    x[:, 0] = rng.uniform(0, 1, (n, length))
    y = np.zeros((n, 1), dtype=np.float32)
    for i in range(n):
        a, b = rng.choice(length // 2, 1)[0], length // 2 + rng.choice(length // 2, 1)[0]
        x[i, 1, [a, b]] = 1.0
        y[i, 0] = x[i, 0, a] + x[i, 0, b]
    return x, y


def train_step(model, optimizer, x, y, clip):
    model.train()
    optimizer.zero_grad()
    loss = F.mse_loss(model(x), y)
    loss.backward()
    norm = nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return loss.item(), float(norm)


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    return F.mse_loss(model(x), y).item()


def causality(model, x):
    """Whether the output at step t ignores inputs after t (changes the last step only)."""
    model.eval()
    with torch.no_grad():
        full = model.tcn(x)
        later = x.clone()
        later[:, :, -1] += 1.0
        changed = model.tcn(later)
    return bool(torch.allclose(full[:, :, :-1], changed[:, :, :-1]))


def remove_weight_norms(model):
    """Fold every conv's weight norm back into a plain weight (for export or inference)."""
    for m in model.modules():
        if nn.utils.parametrize.is_parametrized(m, "weight"):
            nn.utils.parametrize.remove_parametrizations(m, "weight")
        elif hasattr(m, "weight_g"):
            nn.utils.remove_weight_norm(m)


def main(argv=None):
    parser = argparse.ArgumentParser(description="TCN on the adding problem")
    parser.add_argument("--causal", choices=["chomp", "pad"], default="chomp")
    parser.add_argument("--weight-norm", choices=["old", "param"], default="old")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=24)
    parser.add_argument("--lr", type=float, default=4e-3)
    parser.add_argument("--clip", type=float, default=0.5)
    parser.add_argument("--dropout", type=float, default=0.1)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y = (torch.from_numpy(a) for a in adding_problem(64, args.seq_len, seed=2))
    tx, ty = (torch.from_numpy(a) for a in adding_problem(32, args.seq_len, seed=3))
    model = TCN(dropout=args.dropout, causal=args.causal, weight_norm=args.weight_norm)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    losses, norms, tests = [], [], [evaluate(model, tx, ty)]
    for _ in range(args.epochs):
        for idx in torch.randperm(len(x)).split(args.batch_size):
            loss, norm = train_step(model, optimizer, x[idx], y[idx], args.clip)
            losses.append(loss)
            norms.append(norm)
        tests.append(evaluate(model, tx, ty))
    names = [n for n, _ in model.named_parameters()]
    n_params = sum(p.numel() for p in model.parameters())
    model.eval()
    with torch.no_grad():
        out = model(tx)
    remove_weight_norms(model)  # in grad mode: the folded weights stay trainable Parameters
    with torch.no_grad():
        folded = (model(tx) - out).abs().max().item()
    print(json.dumps({
        "losses": losses, "norms": norms, "tests": tests,
        "param_names": names[:4],
        "n_params": n_params, "folded_change": folded,
        "folded_names": [n for n, _ in model.named_parameters()][:3],
        "folded_trainable": [p.requires_grad for p in model.parameters()],
        "folded_count": sum(p.numel() for p in model.parameters()),
        "causal": causality(model, tx[:4]),
        "out_shape": list(model.tcn(tx[:2]).shape),
        "state_keys": sorted(model.state_dict())[:6],
    }))


if __name__ == "__main__":
    main()
