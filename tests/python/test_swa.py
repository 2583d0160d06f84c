"""cagrad.optim.swa_utils against torch 2.13: AveragedModel (default running mean, avg_fn,
multi_avg_fn, use_buffers), the EMA/SWA avg-fn factories, SWALR's learning rates and
state_dict, update_bn, and errors."""

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, error_of

RNG = np.random.default_rng(11)


def _model(L, dtype):
    L.manual_seed(0)
    model = L.nn.Sequential(L.nn.Linear(3, 4), L.nn.BatchNorm1d(4), L.nn.Linear(4, 2))
    return model.double() if dtype == "float64" else model


def _set_weights(L, model, step):
    """Deterministic weights and buffers per step, the same for both libraries."""
    with L.no_grad():
        for i, p in enumerate(model.parameters()):
            p.copy_(L.tensor(np.sin(np.arange(p.numel()) + step * 1.7 + i).reshape(p.shape)))
        bn = model[1]
        bn.running_mean.copy_(L.tensor(np.cos(np.arange(4) + step)))
        bn.running_var.fill_(1.0 + step)


def _averaged(L, dtype, steps=4, **kwargs):
    model = _model(L, dtype)
    _set_weights(L, model, 0)
    avg = L.optim.swa_utils.AveragedModel(model, **kwargs)
    for step in range(steps):
        _set_weights(L, model, step)
        avg.update_parameters(model)
    return avg


def _state(avg):
    return [v for _, v in sorted(avg.state_dict().items())]


AVG_CASES = {
    "default mean": lambda L: {},
    "use_buffers": lambda L: dict(use_buffers=True),
    "ema multi_avg_fn": lambda L: dict(
        multi_avg_fn=L.optim.swa_utils.get_ema_multi_avg_fn(0.9)),
    "swa multi_avg_fn": lambda L: dict(multi_avg_fn=L.optim.swa_utils.get_swa_multi_avg_fn()),
    "ema avg_fn": lambda L: dict(avg_fn=L.optim.swa_utils.get_ema_avg_fn(0.75)),
    "swa avg_fn": lambda L: dict(avg_fn=L.optim.swa_utils.get_swa_avg_fn()),
    "custom avg_fn": lambda L: dict(avg_fn=lambda a, c, n: 0.5 * a + 0.5 * c),
    "ema with buffers": lambda L: dict(
        multi_avg_fn=L.optim.swa_utils.get_ema_multi_avg_fn(0.5), use_buffers=True),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", sorted(AVG_CASES))
def test_averaged_model_matches_torch(name, dtype):
    c = _averaged(ca, dtype, **AVG_CASES[name](ca))
    t = _averaged(torch, dtype, **AVG_CASES[name](torch))
    for a, b in zip(_state(c), _state(t)):
        assert_close(a, b)
    x = RNG.standard_normal((5, 3)).astype(dtype)
    c.eval()
    t.eval()
    assert_close(c(ca.tensor(x)), t(torch.tensor(x)))


def test_averaged_model_is_a_copy_and_counts_updates():
    model = _model(ca, "float32")
    avg = ca.optim.swa_utils.AveragedModel(model)
    assert avg.module is not model and int(avg.n_averaged) == 0
    avg.update_parameters(model)
    avg.update_parameters(model)
    assert int(avg.n_averaged) == 2 and avg.n_averaged.dtype == ca.int64
    assert "n_averaged" in avg.state_dict()


def _swalr_lrs(L, steps, **kwargs):
    w = L.zeros(2, requires_grad=True)
    opt = L.optim.SGD([{"params": [w]}, {"params": [L.zeros(1, requires_grad=True)],
                                         "lr": 0.5}], lr=1.0)
    sched = L.optim.swa_utils.SWALR(opt, **kwargs)
    lrs = [sched.get_last_lr()]
    for _ in range(steps):
        opt.step()
        sched.step()
        lrs.append(sched.get_last_lr())
    return lrs, sched.state_dict()


@pytest.mark.parametrize("kwargs", [
    dict(swa_lr=0.05), dict(swa_lr=0.05, anneal_epochs=3, anneal_strategy="linear"),
    dict(swa_lr=[0.1, 0.01], anneal_epochs=0), dict(swa_lr=0.2, anneal_epochs=1),
])
def test_swalr_matches_torch(kwargs):
    (c, c_state), (t, t_state) = _swalr_lrs(ca, 14, **kwargs), _swalr_lrs(torch, 14, **kwargs)
    np.testing.assert_allclose(np.array(c), np.array(t), rtol=1e-12)
    assert sorted(c_state) == sorted(t_state)


def test_swalr_state_dict_round_trip():
    _, state = _swalr_lrs(ca, 3, swa_lr=0.05, anneal_strategy="linear")
    w = ca.zeros(1, requires_grad=True)
    sched = ca.optim.swa_utils.SWALR(ca.optim.SGD([w], lr=1.0), swa_lr=0.3)
    sched.load_state_dict(state)
    assert sched.anneal_func(0.25) == 0.25  # the linear strategy came back


SWA_ERRORS = {
    "strategy": lambda L: L.optim.swa_utils.SWALR(
        L.optim.SGD([L.zeros(1, requires_grad=True)], lr=1.0), swa_lr=0.1,
        anneal_strategy="step"),
    "anneal_epochs": lambda L: L.optim.swa_utils.SWALR(
        L.optim.SGD([L.zeros(1, requires_grad=True)], lr=1.0), swa_lr=0.1, anneal_epochs=-1),
    "decay": lambda L: L.optim.swa_utils.get_ema_multi_avg_fn(1.5),
    "both fns": lambda L: L.optim.swa_utils.AveragedModel(
        L.nn.Linear(2, 2), avg_fn=lambda a, b, n: a, multi_avg_fn=lambda a, b, n: None),
    "swa_lr count": lambda L: L.optim.swa_utils.SWALR(
        L.optim.SGD([L.zeros(1, requires_grad=True)], lr=1.0), swa_lr=[0.1, 0.2]),
}


@pytest.mark.parametrize("name", sorted(SWA_ERRORS))
def test_errors_match_torch(name):
    c, t = error_of(ca, SWA_ERRORS[name]), error_of(torch, SWA_ERRORS[name])
    assert c[0] is t[0]
    if name != "swa_lr count":
        assert c[1] == t[1]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_update_bn_matches_torch(dtype):
    batches = [RNG.standard_normal((6, 3)).astype(dtype) for _ in range(3)]

    def run(L):
        model = _model(L, dtype)
        _set_weights(L, model, 2)
        model.eval()
        loader = [L.tensor(b) for b in batches[:2]] + [(L.tensor(batches[2]), 0)]
        L.optim.swa_utils.update_bn(loader, model)
        bn = model[1]
        return model.training, bn.momentum, bn.running_mean, bn.running_var, \
            bn.num_batches_tracked
    c, t = run(ca), run(torch)
    assert c[:2] == t[:2]
    for a, b in zip(c[2:], t[2:]):
        assert_close(a, b, rtol=1e-5 if dtype == "float32" else 1e-12)


def test_update_bn_without_batch_norm_is_a_no_op():
    model = ca.nn.Linear(3, 2)
    ca.optim.swa_utils.update_bn([ca.ones(2, 3)], model)
