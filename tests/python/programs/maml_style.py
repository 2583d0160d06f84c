"""Few-shot sine-wave regression trained with MAML, the way functional PyTorch meta-learning
scripts train it: the model is an nn.Sequential whose parameters are passed explicitly with
torch.func.functional_call; the inner loop adapts a dict of parameters with
torch.autograd.grad(..., create_graph=True) so that the outer Adam step differentiates
through the adaptation (second order; --first-order detaches the inner gradients), and a
second mode (--vmap) computes every task's adapted query-loss gradient at once with
torch.func.grad and torch.func.vmap over the tasks (first-order MAML), writing the mean
into each parameter's .grad before the meta-optimizer's step.

The tasks are made with numpy, so every library sees the same data. It is a plain PyTorch
program; the tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave4.py).

    python maml_style.py [--iterations N] [--inner-steps N] [--first-order] [--vmap]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.func import functional_call, grad, vmap


def make_model(hidden=32):
    return nn.Sequential(nn.Linear(1, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                         nn.Linear(hidden, 1))


def sine_tasks(rng, n_tasks, shots):
    """(support x, support y, query x, query y), each of shape (n_tasks, shots, 1)."""
    amp = rng.uniform(0.5, 2.0, (n_tasks, 1, 1))
    phase = rng.uniform(0, np.pi, (n_tasks, 1, 1))
    xs = rng.uniform(-4, 4, (2, n_tasks, shots, 1))
    ys = amp * np.sin(xs + phase)
    return tuple(torch.from_numpy(a).to(torch.get_default_dtype())
                 for a in (xs[0], ys[0], xs[1], ys[1]))


def task_loss(model, params, x, y):
    return F.mse_loss(functional_call(model, params, (x,)), y)


def adapt(model, params, x, y, inner_lr, steps, first_order=False):
    """The inner loop: a few SGD steps on the support set, kept in the graph."""
    for _ in range(steps):
        loss = task_loss(model, params, x, y)
        grads = torch.autograd.grad(loss, list(params.values()), create_graph=not first_order)
        params = {name: p - inner_lr * g for (name, p), g in zip(params.items(), grads)}
    return params


def meta_step(model, meta_opt, tasks, inner_lr, inner_steps, first_order=False):
    sx, sy, qx, qy = tasks
    meta_opt.zero_grad()
    params = dict(model.named_parameters())
    total = 0.0
    for i in range(sx.shape[0]):
        adapted = adapt(model, params, sx[i], sy[i], inner_lr, inner_steps, first_order)
        loss = task_loss(model, adapted, qx[i], qy[i]) / sx.shape[0]
        loss.backward()
        total += loss.item()
    meta_opt.step()
    return total


def vmap_meta_step(model, meta_opt, tasks, inner_lr, inner_steps):
    """First-order MAML over all tasks at once: vmap of torch.func.grad."""
    params = {k: v.detach() for k, v in model.named_parameters()}

    def loss_fn(p, x, y):
        return task_loss(model, p, x, y)

    def per_task(p, sx, sy, qx, qy):
        for _ in range(inner_steps):
            g = grad(loss_fn)(p, sx, sy)
            p = {k: p[k] - inner_lr * g[k] for k in p}
        return grad(loss_fn)(p, qx, qy), loss_fn(p, qx, qy)

    grads, losses = vmap(per_task, in_dims=(None, 0, 0, 0, 0))(params, *tasks)
    meta_opt.zero_grad()
    for name, p in model.named_parameters():
        p.grad = grads[name].mean(0)
    meta_opt.step()
    return losses.mean().item()


def evaluate(model, tasks, inner_lr, inner_steps):
    """Query loss before and after adapting to each task's support set."""
    sx, sy, qx, qy = tasks
    params = dict(model.named_parameters())
    before, after = 0.0, 0.0
    for i in range(sx.shape[0]):
        adapted = adapt(model, params, sx[i], sy[i], inner_lr, inner_steps, first_order=True)
        with torch.no_grad():
            before += task_loss(model, params, qx[i], qy[i]).item()
            after += task_loss(model, adapted, qx[i], qy[i]).item()
    return before / sx.shape[0], after / sx.shape[0]


def main(argv=None):
    parser = argparse.ArgumentParser(description="MAML sine regression")
    parser.add_argument("--iterations", type=int, default=20)
    parser.add_argument("--tasks", type=int, default=4)
    parser.add_argument("--shots", type=int, default=5)
    parser.add_argument("--inner-steps", type=int, default=1)
    parser.add_argument("--inner-lr", type=float, default=0.05)
    parser.add_argument("--meta-lr", type=float, default=0.005)
    parser.add_argument("--first-order", action="store_true")
    parser.add_argument("--vmap", action="store_true")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    rng = np.random.default_rng(args.seed)
    model = make_model()
    meta_opt = torch.optim.Adam(model.parameters(), lr=args.meta_lr)
    losses = []
    for _ in range(args.iterations):
        tasks = sine_tasks(rng, args.tasks, args.shots)
        if args.vmap:
            losses.append(vmap_meta_step(model, meta_opt, tasks, args.inner_lr, args.inner_steps))
        else:
            losses.append(meta_step(model, meta_opt, tasks, args.inner_lr, args.inner_steps,
                                    args.first_order))
    test_tasks = sine_tasks(np.random.default_rng(99), 8, args.shots)
    before, after = evaluate(model, test_tasks, args.inner_lr, 5)
    leaves = [p.is_leaf and p.grad is not None for p in model.parameters()]
    print(json.dumps({"losses": losses, "before": before, "after": after,
                      "grads_on_leaves": all(leaves),
                      "n_params": sum(p.numel() for p in model.parameters())}))


if __name__ == "__main__":
    main()
