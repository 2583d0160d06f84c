"""One training step of a program's model, for comparing libraries (test_programs.py).

    python grad_probe.py PROGRAM LIB DTYPE WEIGHTS.npz OUT.npz [--compiled]

PROGRAM is mingpt_style, nanogpt_style or mnist_style; LIB is torch or cagrad (imported as
torch through cagrad.as_torch). The model is built with dropout off, in DTYPE (float32 or
float64). If WEIGHTS.npz exists its weights are loaded, else the model's own initial
weights are written there, so the first process to run sets the weights for both. One
fixed batch, one forward, one backward; OUT.npz gets the loss and every gradient.
"""

import os
import sys

import numpy as np


def batch(program):
    rng = np.random.default_rng(7)
    if program == "mnist_style":
        x = rng.normal(size=(4, 1, 28, 28))
        return x, rng.integers(0, 10, size=4)
    if program == "mingpt_style":
        x = rng.integers(0, 3, size=(4, 11))
        y = rng.integers(0, 3, size=(4, 11))
        y[:, :5] = -1
        return x, y
    x = rng.integers(0, 20, size=(4, 16))
    return x, rng.integers(0, 20, size=(4, 16))


def build(program, mod):
    if program == "mnist_style":
        return mod.Net()
    if program == "mingpt_style":
        cfg = mod.Config(vocab_size=3, block_size=11, n_layer=2, n_head=2, n_embd=32,
                         embd_pdrop=0.0, resid_pdrop=0.0, attn_pdrop=0.0)
        return mod.GPT(cfg)
    return mod.GPT(dict(n_layer=2, n_head=2, n_embd=32, block_size=16, bias=True,
                        vocab_size=20, dropout=0.0))


def loss_of(program, model, torch, x, y, dtype):
    if program == "mnist_style":
        out = model(torch.from_numpy(x.astype(np.float64)).to(dtype))
        return torch.nn.functional.nll_loss(out, torch.from_numpy(y.astype(np.int64)))
    _, loss = model(torch.from_numpy(x.astype(np.int64)), torch.from_numpy(y.astype(np.int64)))
    return loss


def main():
    program, lib, dtype_name, weights, out = sys.argv[1:6]
    compiled = "--compiled" in sys.argv[6:]
    if lib == "cagrad":
        import cagrad.as_torch

        cagrad.as_torch.install()
    import torch

    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    mod = __import__(program)
    torch.manual_seed(0)
    dtype = getattr(torch, dtype_name)
    model = build(program, mod).to(dtype)
    model.eval()  # dropout off in every library
    if os.path.exists(weights):
        saved = np.load(weights)
        model.load_state_dict({k: torch.from_numpy(saved[k]).to(dtype) for k in saved.files})
    else:
        np.savez(weights, **{k: v.detach().numpy() for k, v in model.state_dict().items()})
    x, y = batch(program)
    loss = loss_of(program, model, torch, x, y, dtype)
    if compiled:
        with torch.compiled_autograd.enable():
            loss.backward()
    else:
        loss.backward()
    grads = {n: p.grad.detach().numpy() for n, p in model.named_parameters()}
    np.savez(out, loss=np.array(loss.item()), **grads)


if __name__ == "__main__":
    main()
