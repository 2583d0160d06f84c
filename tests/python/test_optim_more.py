"""Adadelta, Adagrad, Adamax, NAdam, RAdam and RMSprop against torch.optim: parameters
after 20 steps (f32 within 1e-5, f64 within 1e-12) for option combinations, with param
groups; state_dict keys, round trips and argument errors."""

import numpy as np
import pytest
import torch

from helpers import ca, to_np

STEPS = 20
ATOL = {"float32": 1e-5, "float64": 1e-12}

OPTIMS = {
    "adadelta": lambda L, p: L.optim.Adadelta(p),
    "adadelta_opts": lambda L, p: L.optim.Adadelta(p, lr=0.5, rho=0.8, eps=1e-5,
                                                   weight_decay=0.1, maximize=True),
    "adagrad": lambda L, p: L.optim.Adagrad(p, lr=0.05),
    "adagrad_opts": lambda L, p: L.optim.Adagrad(p, lr=0.1, lr_decay=0.05, weight_decay=0.02,
                                                 initial_accumulator_value=0.3, eps=1e-8),
    "adagrad_max": lambda L, p: L.optim.Adagrad(p, maximize=True),
    "adamax": lambda L, p: L.optim.Adamax(p),
    # beta1 < 0.5: lerp_ weights >= 0.5 take torch's other lerp formula
    "adamax_opts": lambda L, p: L.optim.Adamax(p, lr=0.01, betas=(0.3, 0.9), eps=1e-6,
                                               weight_decay=0.1, maximize=True),
    "nadam": lambda L, p: L.optim.NAdam(p),
    "nadam_opts": lambda L, p: L.optim.NAdam(p, lr=0.01, betas=(0.4, 0.95),
                                             weight_decay=0.05, momentum_decay=0.01),
    "nadam_decoupled": lambda L, p: L.optim.NAdam(p, weight_decay=0.1,
                                                  decoupled_weight_decay=True, maximize=True),
    "radam": lambda L, p: L.optim.RAdam(p, lr=0.01),
    "radam_rectified_early": lambda L, p: L.optim.RAdam(p, lr=0.01, betas=(0.9, 0.6)),
    "radam_opts": lambda L, p: L.optim.RAdam(p, weight_decay=0.1, maximize=True),
    "radam_decoupled": lambda L, p: L.optim.RAdam(p, lr=0.02, weight_decay=0.1,
                                                  decoupled_weight_decay=True),
    "rmsprop": lambda L, p: L.optim.RMSprop(p),
    "rmsprop_centered": lambda L, p: L.optim.RMSprop(p, lr=0.005, centered=True),
    "rmsprop_momentum": lambda L, p: L.optim.RMSprop(p, lr=0.003, momentum=0.9,
                                                     weight_decay=0.01),
    # alpha >= 0.5: with a small alpha the centered variance E[g^2] - E[g]^2 of slowly
    # changing gradients nears 0 and amplifies 1-ulp differences of torch's fused lerp.
    "rmsprop_all": lambda L, p: L.optim.RMSprop(p, lr=0.002, alpha=0.6, eps=1e-6, momentum=0.5,
                                                centered=True),
    "rmsprop_max": lambda L, p: L.optim.RMSprop(p, lr=0.002, alpha=0.6, momentum=0.2,
                                                maximize=True),
}


def make_model(L, dtype):
    nn = L.nn
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    return model.to(getattr(L, dtype))


def data(dtype):
    r = np.random.default_rng(0)
    x = r.standard_normal((16, 4)).astype(dtype)
    y = np.sin(x.sum(1, keepdims=True)).astype(dtype)
    return x, y


def param_groups(model, group_lrs):
    """Two groups (first layer, last layer), the second with its own lr if given."""
    params = list(model.parameters())
    if not group_lrs:
        return params
    return [{"params": params[:2]}, {"params": params[2:], "lr": group_lrs}]


def train(L, name, dtype, group_lr=None, steps=STEPS):
    torch.manual_seed(0)
    t_model = make_model(torch, dtype)
    model = t_model if L is torch else make_model(ca, dtype)
    if L is ca:
        model.load_state_dict({k: ca.tensor(v.numpy()) for k, v in t_model.state_dict().items()})
    opt = OPTIMS[name](L, param_groups(model, group_lr))
    x, y = (L.tensor(a) for a in data(dtype))
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(OPTIMS))
def test_parameters_after_20_steps_match_torch(name, dtype):
    c_model, _ = train(ca, name, dtype)
    t_model, _ = train(torch, name, dtype)
    for (pname, cp), tp in zip(c_model.named_parameters(), t_model.parameters()):
        np.testing.assert_allclose(to_np(cp), to_np(tp), rtol=0, atol=ATOL[dtype],
                                   err_msg=f"{name} {pname}")
        assert not np.allclose(to_np(cp), to_np(train(torch, name, dtype, steps=0)[0]
                                                 .state_dict()[pname])), "did not move"


@pytest.mark.parametrize("name", ["adadelta", "adagrad_opts", "nadam", "radam", "rmsprop_all",
                                  "adamax"])
def test_param_groups_with_own_lr(name):
    c_model, c_opt = train(ca, name, "float64", group_lr=0.03)
    t_model, t_opt = train(torch, name, "float64", group_lr=0.03)
    for cp, tp in zip(c_model.parameters(), t_model.parameters()):
        np.testing.assert_allclose(to_np(cp), to_np(tp), rtol=0, atol=ATOL["float64"])
    assert [g["lr"] for g in c_opt.param_groups] == [g["lr"] for g in t_opt.param_groups]


def structure(opt_state):
    """The state_dict with tensors replaced by their shapes (and steps by float values)."""
    def describe(value):
        if hasattr(value, "shape") and len(value.shape) > 0:
            return ("tensor", tuple(value.shape))
        return float(value) if hasattr(value, "shape") else value
    state = {i: {k: describe(v) for k, v in s.items()} for i, s in opt_state["state"].items()}
    groups = [dict(g) for g in opt_state["param_groups"]]
    return state, groups


@pytest.mark.parametrize("name", [n for n in OPTIMS if "_" not in n] + ["rmsprop_all"])
def test_state_dict_structure_matches_torch(name):
    c_state, c_groups = structure(train(ca, name, "float64", group_lr=0.1)[1].state_dict())
    t_state, t_groups = structure(train(torch, name, "float64", group_lr=0.1)[1].state_dict())
    assert list(c_state) == list(t_state)
    for i in t_state:
        assert list(c_state[i]) == list(t_state[i]), f"{name}: state keys of param {i}"
        for key, t_value in t_state[i].items():
            if isinstance(t_value, float):  # step (and NAdam's mu_product)
                assert c_state[i][key] == pytest.approx(t_value, rel=1e-15), key
            else:
                assert c_state[i][key] == t_value, key
    assert c_groups == t_groups


def test_adagrad_state_exists_before_the_first_step():
    for L in (ca, torch):
        p = L.nn.Parameter(L.ones(3))
        opt = L.optim.Adagrad([p], initial_accumulator_value=0.25)
        state = opt.state_dict()["state"][0]
        assert float(state["step"]) == 0.0
        assert to_np(state["sum"]).tolist() == [0.25] * 3


@pytest.mark.parametrize("name", ["adadelta", "adagrad_opts", "adamax", "nadam", "radam",
                                  "rmsprop_all"])
def test_state_dict_round_trip_continues_identically(name):
    """Save after 10 steps, load into a fresh optimizer, 10 more: same as 20 in one go."""
    straight, _ = train(ca, name, "float64")
    model, opt = train(ca, name, "float64", steps=10)
    saved = opt.state_dict()
    resumed = OPTIMS[name](ca, model.parameters())
    resumed.load_state_dict(saved)
    x, y = (ca.tensor(a) for a in data("float64"))
    for _ in range(10):
        resumed.zero_grad()
        ((model(x) - y) ** 2).mean().backward()
        resumed.step()
    for a, b in zip(model.parameters(), straight.parameters()):
        np.testing.assert_array_equal(to_np(a), to_np(b))


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type and message are what is compared)
        return type(e).__name__, str(e)
    raise AssertionError("no error raised")


ERRORS = {
    "adadelta_lr": lambda L, p: L.optim.Adadelta(p, lr=-1),
    "adadelta_rho": lambda L, p: L.optim.Adadelta(p, rho=1.5),
    "adadelta_eps": lambda L, p: L.optim.Adadelta(p, eps=-1),
    "adadelta_wd": lambda L, p: L.optim.Adadelta(p, weight_decay=-1),
    "adagrad_lr_decay": lambda L, p: L.optim.Adagrad(p, lr_decay=-1),
    "adagrad_init": lambda L, p: L.optim.Adagrad(p, initial_accumulator_value=-1),
    "adagrad_eps": lambda L, p: L.optim.Adagrad(p, eps=-1),
    "adamax_beta0": lambda L, p: L.optim.Adamax(p, betas=(1.0, 0.9)),
    "adamax_beta1": lambda L, p: L.optim.Adamax(p, betas=(0.9, -0.1)),
    "nadam_momentum_decay": lambda L, p: L.optim.NAdam(p, momentum_decay=-1),
    "nadam_wd": lambda L, p: L.optim.NAdam(p, weight_decay=-1),
    "radam_lr": lambda L, p: L.optim.RAdam(p, lr=-0.1),
    "radam_beta": lambda L, p: L.optim.RAdam(p, betas=(0.9, 1.0)),
    "rmsprop_alpha": lambda L, p: L.optim.RMSprop(p, alpha=-1),
    "rmsprop_momentum": lambda L, p: L.optim.RMSprop(p, momentum=-1),
    "rmsprop_eps": lambda L, p: L.optim.RMSprop(p, eps=-1),
    "empty": lambda L, p: L.optim.RMSprop([]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_argument_errors_match_torch(case):
    assert error_of(lambda: ERRORS[case](ca, [ca.nn.Parameter(ca.ones(1))])) == \
        error_of(lambda: ERRORS[case](torch, [torch.nn.Parameter(torch.ones(1))]))


def test_defaults_match_torch():
    for name in ("Adadelta", "Adagrad", "Adamax", "NAdam", "RAdam", "RMSprop"):
        c_opt = getattr(ca.optim, name)([ca.nn.Parameter(ca.ones(1))])
        t_opt = getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(1))])
        assert c_opt.defaults == t_opt.defaults, name


def test_unsupported_modes_raise_honest_errors():
    p = [ca.nn.Parameter(ca.ones(1))]
    for make in (lambda: ca.optim.RMSprop(p, capturable=True),
                 lambda: ca.optim.Adagrad(p, fused=True),
                 lambda: ca.optim.NAdam(p, differentiable=True)):
        with pytest.raises(NotImplementedError, match="do not support"):
            make()
    for name in ("Adadelta", "Adagrad", "Adamax", "NAdam", "RAdam", "RMSprop"):
        with pytest.raises(NotImplementedError, match="not a Tensor"):
            getattr(ca.optim, name)(p, lr=ca.tensor(0.01))


def test_moment_lerp_with_large_weight_follows_torch_lerp():
    """exp_avg.lerp_(grad, 1 - beta1) with a weight >= 0.5 uses torch's second formula,
    end - (end - start) * (1 - weight): within 1 ulp of torch.lerp (its FMA rounds once
    less), where start + weight * (end - start) is tens of ulps off."""
    from cagrad.optim._update_math import lerp_

    r = np.random.default_rng(0)
    start, end = r.standard_normal(10000) * 1e-3, r.standard_normal(10000)
    expected = torch.tensor(start).lerp_(torch.tensor(end), 0.999).numpy()
    moment = ca.tensor(start.copy())
    lerp_(moment, ca.tensor(end), 0.999)
    ulps = np.abs(to_np(moment) - expected) / np.spacing(np.abs(expected))
    assert ulps.max() <= 1.0
