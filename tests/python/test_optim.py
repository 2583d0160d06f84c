"""Optimizers: SGD (momentum, weight_decay, nesterov), Adam and AdamW converge on small
problems and follow torch's parameter trajectory for 20 steps within 1e-5 (identical
initial weights and data)."""

import numpy as np
import pytest
import torch

from helpers import ca, compiled_ctx, to_np

TRAJ_ATOL = 1e-5  # the bound; float32 params of magnitude <~1, 20 steps


def make_model(L):
    nn = L.nn
    return nn.Sequential(nn.Linear(5, 16), nn.ReLU(), nn.Linear(16, 1))


def copy_from_torch(cmod, tmod):
    with ca.no_grad():
        for cp, tp in zip(cmod.parameters(), tmod.parameters()):
            cp.copy_(ca.tensor(tp.detach().numpy().copy()))


def regression_data(seed=0, n=64):
    r = np.random.default_rng(seed)
    x = r.standard_normal((n, 5)).astype(np.float32)
    w = r.standard_normal((5, 1)).astype(np.float32)
    y = (np.tanh(x @ w) + 0.05 * r.standard_normal((n, 1))).astype(np.float32)
    return x, y


OPTIMS = {
    "sgd": lambda L, p: L.optim.SGD(p, lr=0.05),
    "sgd_momentum": lambda L, p: L.optim.SGD(p, lr=0.05, momentum=0.9),
    "sgd_wd": lambda L, p: L.optim.SGD(p, lr=0.05, weight_decay=0.01),
    "sgd_momentum_wd": lambda L, p: L.optim.SGD(p, lr=0.03, momentum=0.8, weight_decay=0.05),
    "sgd_nesterov": lambda L, p: L.optim.SGD(p, lr=0.03, momentum=0.9, nesterov=True),
    "sgd_dampening": lambda L, p: L.optim.SGD(p, lr=0.05, momentum=0.9, dampening=0.1),
    "adam": lambda L, p: L.optim.Adam(p, lr=1e-2),
    "adam_betas_eps": lambda L, p: L.optim.Adam(p, lr=5e-3, betas=(0.8, 0.95), eps=1e-6),
    "adam_wd": lambda L, p: L.optim.Adam(p, lr=1e-2, weight_decay=0.1),
    "adamw": lambda L, p: L.optim.AdamW(p, lr=1e-2),
    "adamw_wd": lambda L, p: L.optim.AdamW(p, lr=1e-2, weight_decay=0.1),
}


def train(L, model, opt, x, y, steps, compiled=False, record=None):
    losses = []
    X, Y = L.tensor(x), L.tensor(y)
    for s in range(steps):
        opt.zero_grad()
        loss = L.nn.functional.mse_loss(model(X), Y)
        if compiled and L is ca:
            with ca.compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        opt.step()
        losses.append(float(loss.item()))
        if record is not None:
            record.append([to_np(p) for p in model.parameters()])
    return losses


@pytest.mark.parametrize("name", list(OPTIMS))
def test_trajectory_matches_torch(name, compiled):
    x, y = regression_data(1)
    torch.manual_seed(3)
    tm = make_model(torch)
    cm = make_model(ca)
    copy_from_torch(cm, tm)
    t_opt = OPTIMS[name](torch, tm.parameters())
    c_opt = OPTIMS[name](ca, cm.parameters())
    t_traj, c_traj = [], []
    t_loss = train(torch, tm, t_opt, x, y, 20, record=t_traj)
    c_loss = train(ca, cm, c_opt, x, y, 20, compiled=compiled, record=c_traj)
    for s in range(20):
        for i, (cp, tp) in enumerate(zip(c_traj[s], t_traj[s])):
            np.testing.assert_allclose(cp, tp, rtol=0, atol=TRAJ_ATOL,
                                       err_msg=f"{name}: step {s}, param {i}")
    np.testing.assert_allclose(c_loss, t_loss, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("name", ["sgd_momentum", "adam", "adamw"])
def test_training_converges(name, compiled):
    x, y = regression_data(2, n=128)
    ca.manual_seed(5)
    model = make_model(ca)
    opt = OPTIMS[name](ca, model.parameters())
    losses = train(ca, model, opt, x, y, 150, compiled=compiled)
    assert losses[-1] < 0.1 * losses[0], f"{name}: loss {losses[0]:.4f} -> {losses[-1]:.4f}"
    assert np.isfinite(losses).all()


def test_classification_converges_sgd(compiled):
    r = np.random.default_rng(3)
    centers = r.standard_normal((3, 4)) * 3
    labels = r.integers(0, 3, 150)
    x = (centers[labels] + r.standard_normal((150, 4)) * 0.5).astype(np.float32)
    ca.manual_seed(6)
    nn = ca.nn
    model = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 3))
    opt = ca.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    X, Y = ca.tensor(x), ca.tensor(labels.astype(np.int64))
    first = None
    for s in range(60):
        opt.zero_grad()
        loss = ca.nn.functional.cross_entropy(model(X), Y)
        with compiled_ctx(compiled):
            loss.backward()
        opt.step()
        first = first if first is not None else loss.item()
    acc = (to_np(model(X)).argmax(1) == labels).mean()
    assert loss.item() < 0.25 * first and acc > 0.9, (first, loss.item(), acc)



def test_zero_grad_sets_none_by_default():
    model = make_model(ca)
    opt = ca.optim.SGD(model.parameters(), lr=0.1)
    model(ca.ones(2, 5)).sum().backward()
    assert all(p.grad is not None for p in model.parameters())
    opt.zero_grad()
    assert all(p.grad is None for p in model.parameters())
    model(ca.ones(2, 5)).sum().backward()
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is not None and (to_np(p.grad) == 0).all() for p in model.parameters())


def test_step_skips_params_without_grad():
    a = ca.nn.Parameter(ca.ones(3))
    b = ca.nn.Parameter(ca.ones(3))
    opt = ca.optim.SGD([a, b], lr=0.5, momentum=0.9)
    (a * 2.0).sum().backward()
    opt.step()
    np.testing.assert_allclose(to_np(a), [0.0, 0.0, 0.0])
    np.testing.assert_array_equal(to_np(b), [1.0, 1.0, 1.0])


def test_optimizer_updates_in_place_keeping_identity():
    model = make_model(ca)
    params = list(model.parameters())
    ids = [id(p) for p in params]
    opt = ca.optim.Adam(params, lr=0.1)
    model(ca.ones(2, 5)).sum().backward()
    before = [to_np(p) for p in params]
    v0 = [p._version for p in params]
    opt.step()
    assert [id(p) for p in model.parameters()] == ids
    assert any((to_np(p) != b).any() for p, b in zip(params, before))
    assert all(p._version > v for p, v in zip(params, v0)), "step() must update in place"
