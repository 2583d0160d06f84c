"""Train an MLP on scikit-learn's handwritten digits, eagerly and with compiled autograd.

    make demo            (or: PYTHONPATH=build/python .venv/bin/python examples/digits_mlp.py)

The training code is plain PyTorch code with `import cagrad as torch`. It runs twice from
the same initial weights: once with the eager backward, once inside
`torch.compiled_autograd.enable()`. When PyTorch is installed, the same code trains a third
time on PyTorch itself, from the same weights. It prints loss and accuracy per epoch, the
backward time of each run side by side, the compiled-autograd counters, and writes the
compiled backward graph as an SVG. The 8x8 digit images (1797 of them) ship inside
scikit-learn, so nothing is downloaded; without scikit-learn the demo falls back to
generated data.
"""

import argparse
import os
import statistics
import sys
import time

import numpy as np

import cagrad as torch
import cagrad.nn as nn


def load_data(seed):
    """(x_train, y_train, x_test, y_test, name): standardised float32 features, int64 labels."""
    try:
        from sklearn.datasets import load_digits

        x, y = load_digits(return_X_y=True)
        name = "scikit-learn digits (8x8 images, 10 classes)"
    except ImportError:
        rng = np.random.default_rng(seed)
        centers = rng.normal(size=(10, 64)) * 3
        y = rng.integers(0, 10, size=1797)
        x = centers[y] + rng.normal(size=(1797, 64))
        name = "generated blobs (scikit-learn is not installed)"
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(x))
    x, y = x[order].astype(np.float32), y[order].astype(np.int64)
    split = int(0.8 * len(x))
    mean, std = x[:split].mean(0), x[:split].std(0) + 1e-6
    x = (x - mean) / std
    return x[:split], y[:split], x[split:], y[split:], name


def make_model(seed, L=torch):
    """The model on library L (cagrad, or PyTorch with cagrad's initial weights)."""
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 128), nn.GELU(), nn.Linear(128, 10)
    )
    if L is torch:
        return model
    twin = L.nn.Sequential(L.nn.Linear(64, 128), L.nn.ReLU(), L.nn.Linear(128, 128),
                           L.nn.GELU(), L.nn.Linear(128, 10))
    with L.no_grad():
        for p, q in zip(twin.parameters(), model.parameters()):
            p.copy_(L.from_numpy(q.detach().numpy().copy()))
    return twin


class Progress:
    """A one-line progress bar on a terminal; nothing in between epochs otherwise."""

    def __init__(self, total, label, width=28):
        self.total, self.label, self.width = total, label, width
        self.live = sys.stdout.isatty()

    def update(self, done, loss):
        if not self.live:
            return
        filled = self.width * done // self.total
        bar = "#" * filled + "." * (self.width - filled)
        print(f"\r  {self.label} [{bar}] {done}/{self.total} loss {loss:.4f}", end="", flush=True)

    def finish(self, text):
        """The epoch's line, with the bar full: on a terminal it replaces the live bar."""
        bar = "#" * self.width
        print(f"\r  {self.label} [{bar}] {self.total}/{self.total} {text}", flush=True)


def accuracy(model, x, y, L=torch):
    model.eval()
    with L.no_grad():
        pred = model(L.from_numpy(x)).argmax(dim=1).numpy()
    model.train()
    return float((pred == y).mean())


def train(model, data, epochs, batch, lr, L=torch):
    """Train with Adam on library L; returns (per-step backward seconds, test accuracy)."""
    x_train, y_train, x_test, y_test = data
    opt = L.optim.Adam(model.parameters(), lr=lr)
    steps = (len(x_train) + batch - 1) // batch
    backward_s = []
    for epoch in range(1, epochs + 1):
        bar = Progress(steps, f"epoch {epoch:2d}")
        losses = []
        for step in range(steps):
            xb = L.from_numpy(x_train[step * batch : (step + 1) * batch])
            yb = L.from_numpy(y_train[step * batch : (step + 1) * batch])
            loss = L.nn.functional.cross_entropy(model(xb), yb)
            opt.zero_grad(set_to_none=True)
            t0 = time.perf_counter()
            loss.backward()
            backward_s.append(time.perf_counter() - t0)
            opt.step()
            losses.append(loss.item())
            bar.update(step + 1, losses[-1])
        acc = accuracy(model, x_test, y_test, L)
        bar.finish(f"loss {np.mean(losses):.4f}  test accuracy {acc:6.2%}")
    return backward_s, acc


def pytorch():
    """PyTorch itself when it is installed (for the side-by-side figure), else None."""
    try:
        import torch as real
    except ImportError:
        return None
    return real


def write_graph_svg(path):
    try:
        torch.compiled_autograd.write_graph(path)
    except (RuntimeError, OSError) as e:
        print(f"could not write the graph: {e}")
        return
    print(f"compiled backward graph written to {path}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--epochs", type=int, default=8)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--svg", default=os.path.join("build", "digits_backward.svg"))
    args = ap.parse_args()

    *data, name = load_data(args.seed)
    print(f"data: {name}: {len(data[0])} train, {len(data[2])} test")
    print("model: Linear(64,128) ReLU Linear(128,128) GELU Linear(128,10), Adam, cross_entropy\n")

    print("eager backward")
    eager_s, eager_acc = train(make_model(args.seed), data, args.epochs, args.batch, args.lr)

    print("\ncompiled backward (cagrad.compiled_autograd.enable())")
    torch.compiled_autograd.reset()
    with torch.compiled_autograd.enable():
        comp_s, comp_acc = train(make_model(args.seed), data, args.epochs, args.batch, args.lr)

    real = pytorch()
    if real is not None:
        print(f"\nPyTorch {real.__version__} eager backward, same weights and data")
        real.set_num_threads(torch.get_num_threads())
        torch_s, torch_acc = train(make_model(args.seed, real), data, args.epochs, args.batch,
                                   args.lr, real)

    e_med, c_med = statistics.median(eager_s) * 1e6, statistics.median(comp_s) * 1e6
    print(f"\nbackward time per step (median over all steps of a run, "
          f"{torch.get_num_threads()} threads)")
    print(f"  cagrad eager     {e_med:8.1f} us   total {sum(eager_s) * 1e3:7.1f} ms")
    print(f"  cagrad compiled  {c_med:8.1f} us   total {sum(comp_s) * 1e3:7.1f} ms"
          f"   ({e_med / c_med:.2f}x cagrad eager; the total includes compiling)")
    accs = f"test accuracy: cagrad eager {eager_acc:.2%}, compiled {comp_acc:.2%}"
    if real is not None:
        t_med = statistics.median(torch_s) * 1e6
        print(f"  torch eager      {t_med:8.1f} us   total {sum(torch_s) * 1e3:7.1f} ms"
              f"   (cagrad compiled is {t_med / c_med:.2f}x torch eager)")
        accs += f", torch eager {torch_acc:.2%}"
    print(accs)
    counters = dict(torch.compiled_autograd.counters)
    print("\ncompiled-autograd counters:")
    for key, value in counters.items():
        print(f"  {key:16s} {value}")
    if counters["captures"] > 1:
        print("  (more than one capture: a size changed, e.g. the smaller last batch of an epoch;\n"
              "   that dim became dynamic and was compiled once more. CAGRAD_LOGS=\n"
              "   compiled_autograd_verbose prints each cache miss and its reason.)")
    write_graph_svg(args.svg)


if __name__ == "__main__":
    main()
