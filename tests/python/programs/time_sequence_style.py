"""Sine-wave prediction trained the way pytorch/examples' time_sequence_prediction trains:
two LSTMCells unrolled by hand over input.split(1, dim=1) in float64 (the model is made
.double()), torch.cat of the per-step outputs, further steps predicted from the model's
own output, MSELoss, and LBFGS stepped with a closure that zeroes, runs forward and
backward and returns the loss; the test pass runs under no_grad with a future horizon.

The waves are made with numpy, as the example's generate_sine_wave.py does (shorter here).
It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python time_sequence_style.py [--steps N] [--future N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.optim as optim

HIDDEN = 24


class Sequence(nn.Module):
    def __init__(self):
        super().__init__()
        self.lstm1 = nn.LSTMCell(1, HIDDEN)
        self.lstm2 = nn.LSTMCell(HIDDEN, HIDDEN)
        self.linear = nn.Linear(HIDDEN, 1)

    def forward(self, input, future=0):
        outputs = []
        h_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        h_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)
        c_t2 = torch.zeros(input.size(0), HIDDEN, dtype=torch.double)

        for input_t in input.split(1, dim=1):
            h_t, c_t = self.lstm1(input_t, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        for i in range(future):  # if we should predict the future
            h_t, c_t = self.lstm1(output, (h_t, c_t))
            h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
            output = self.linear(h_t2)
            outputs += [output]
        outputs = torch.cat(outputs, dim=1)
        return outputs


def sine_waves(n=12, length=30, period=6, seed=2):
    """float64 waves sin((t + shift) / period), a random shift per row."""
    rng = np.random.default_rng(seed)
    x = np.empty((n, length), "int64")
    x[:] = np.array(range(length)) + rng.integers(-4 * period, 4 * period, n).reshape(n, 1)
    return np.sin(x / 1.0 / period).astype("float64")


def split_data(data):
    input = torch.from_numpy(data[3:, :-1])
    target = torch.from_numpy(data[3:, 1:])
    test_input = torch.from_numpy(data[:3, :-1])
    test_target = torch.from_numpy(data[:3, 1:])
    return input, target, test_input, test_target


def train_step(seq, criterion, optimizer, input, target, log):
    def closure():
        optimizer.zero_grad()
        out = seq(input)
        loss = criterion(out, target)
        log.append(loss.item())
        loss.backward()
        return loss

    return optimizer.step(closure).item()


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=3, help="steps to run")
    parser.add_argument("--future", type=int, default=10)
    opt = parser.parse_args(argv)
    np.random.seed(0)
    torch.manual_seed(0)
    input, target, test_input, test_target = split_data(sine_waves())
    seq = Sequence()
    seq.double()
    criterion = nn.MSELoss()
    optimizer = optim.LBFGS(seq.parameters(), lr=0.8, max_iter=8)
    closure_losses, step_losses, test_losses = [], [], []
    for i in range(opt.steps):
        step_losses.append(train_step(seq, criterion, optimizer, input, target, closure_losses))
        with torch.no_grad():  # predict, no need to track gradient here
            pred = seq(test_input, future=opt.future)
            loss = criterion(pred[:, :-opt.future], test_target)
            test_losses.append(loss.item())
            y = pred.detach().numpy()
    print(json.dumps({"losses": step_losses, "closure_losses": closure_losses,
                      "test_losses": test_losses, "pred_shape": list(y.shape),
                      "state_keys": sorted(optimizer.state_dict()["state"].keys())}))


if __name__ == "__main__":
    main()
