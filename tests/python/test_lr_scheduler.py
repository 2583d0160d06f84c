"""cagrad.optim.lr_scheduler against torch.optim.lr_scheduler: every scheduler's lr (and
cycled momentum) sequence over 30+ steps equals torch's to 1e-12, state_dict keys and
round trips, resuming with last_epoch, step(epoch), warnings and argument errors."""

import math
import warnings

import pytest
import torch

from helpers import ca

STEPS = 30


def make_optimizer(L, kind="sgd", groups=2):
    params = [L.nn.Parameter(L.ones(2)) for _ in range(groups)]
    specs = [{"params": [p], "lr": 0.1 * (i + 1)} for i, p in enumerate(params)]
    if kind == "adam":
        return L.optim.Adam(specs, lr=0.05)
    return L.optim.SGD(specs, lr=0.05, momentum=0.9)


def lr_lambda(epoch):
    return 0.9 ** epoch + 1.0 / (epoch + 1)


def mult_lambda(epoch):
    return 0.95 if epoch % 3 else 1.02


S = lambda L: L.optim.lr_scheduler  # noqa: E731

SCHEDULERS = {
    "lambda": lambda L, o: S(L).LambdaLR(o, lr_lambda),
    "lambda_list": lambda L, o: S(L).LambdaLR(o, [lr_lambda, lambda e: 1.0 / (e + 1)]),
    "multiplicative": lambda L, o: S(L).MultiplicativeLR(o, mult_lambda),
    "step": lambda L, o: S(L).StepLR(o, step_size=4, gamma=0.7),
    "multistep": lambda L, o: S(L).MultiStepLR(o, [3, 7, 7, 20], gamma=0.3),
    "constant": lambda L, o: S(L).ConstantLR(o, factor=0.4, total_iters=6),
    "linear": lambda L, o: S(L).LinearLR(o, start_factor=0.2, end_factor=0.9, total_iters=11),
    "linear_down": lambda L, o: S(L).LinearLR(o, start_factor=1.0, end_factor=0.1,
                                              total_iters=17),
    "exponential": lambda L, o: S(L).ExponentialLR(o, gamma=0.93),
    "cosine": lambda L, o: S(L).CosineAnnealingLR(o, T_max=9, eta_min=0.001),
    "cosine_no_min": lambda L, o: S(L).CosineAnnealingLR(o, T_max=13),
    "warm_restarts": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=4, eta_min=0.01),
    "warm_restarts_mult": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=3, T_mult=2),
    "polynomial": lambda L, o: S(L).PolynomialLR(o, total_iters=12, power=2.5),
    "polynomial_default": lambda L, o: S(L).PolynomialLR(o),
    "one_cycle_cos": lambda L, o: S(L).OneCycleLR(o, max_lr=[0.5, 1.0], total_steps=STEPS),
    "one_cycle_linear": lambda L, o: S(L).OneCycleLR(
        o, max_lr=0.8, epochs=5, steps_per_epoch=7, anneal_strategy="linear", pct_start=0.4),
    "one_cycle_three_phase": lambda L, o: S(L).OneCycleLR(
        o, max_lr=0.3, total_steps=STEPS + 5, three_phase=True, div_factor=10.0),
    "one_cycle_no_momentum": lambda L, o: S(L).OneCycleLR(
        o, max_lr=0.3, total_steps=STEPS, cycle_momentum=False),
    "cyclic": lambda L, o: S(L).CyclicLR(o, 0.01, [0.1, 0.2], step_size_up=4,
                                         step_size_down=6),
    "cyclic_tri2": lambda L, o: S(L).CyclicLR(o, 0.01, 0.1, step_size_up=3,
                                              mode="triangular2"),
    "cyclic_exp": lambda L, o: S(L).CyclicLR(o, 0.01, 0.1, step_size_up=5, mode="exp_range",
                                             gamma=0.97, cycle_momentum=False),
    "sequential": lambda L, o: S(L).SequentialLR(
        o, [S(L).LinearLR(o, start_factor=0.1, total_iters=5),
            S(L).ExponentialLR(o, gamma=0.9), S(L).CosineAnnealingLR(o, T_max=7)],
        milestones=[5, 12]),
    "chained": lambda L, o: S(L).ChainedScheduler(
        [S(L).ConstantLR(o, factor=0.5, total_iters=4), S(L).ExponentialLR(o, gamma=0.95),
         S(L).StepLR(o, 5, gamma=0.5)]),
}


def run(L, name, kind="sgd", steps=STEPS):
    """[(lrs, momenta)] after construction and after each optimizer+scheduler step."""
    opt = make_optimizer(L, kind)
    sched = SCHEDULERS[name](L, opt)
    history = [snapshot(sched, opt)]
    for _ in range(steps):
        opt.step()
        sched.step()
        history.append(snapshot(sched, opt))
    return history


def snapshot(sched, opt):
    momenta = [g["betas"][0] if "betas" in g else g["momentum"] for g in opt.param_groups]
    assert sched.get_last_lr() == [g["lr"] for g in opt.param_groups]
    return sched.get_last_lr(), momenta


def assert_histories_equal(c_hist, t_hist):
    assert len(c_hist) == len(t_hist)
    for step, ((c_lr, c_mom), (t_lr, t_mom)) in enumerate(zip(c_hist, t_hist)):
        for c, t in zip(c_lr + c_mom, t_lr + t_mom):
            assert math.isclose(c, t, rel_tol=1e-12, abs_tol=1e-15), (step, c_lr, t_lr)


@pytest.mark.parametrize("name", list(SCHEDULERS))
@pytest.mark.parametrize("kind", ["sgd", "adam"])
def test_lr_sequence_matches_torch(name, kind):
    assert_histories_equal(run(ca, name, kind), run(torch, name, kind))


@pytest.mark.parametrize("name", list(SCHEDULERS))
def test_state_dict_keys_match_torch(name):
    c_state = SCHEDULERS[name](ca, make_optimizer(ca)).state_dict()
    t_state = SCHEDULERS[name](torch, make_optimizer(torch)).state_dict()
    t_state.pop("_scale_fn_ref", None)  # CyclicLR: torch keeps a bound method it then drops
    assert sorted(c_state) == sorted(t_state)


@pytest.mark.parametrize("name", ["step", "cosine", "one_cycle_cos", "sequential", "chained",
                                  "warm_restarts_mult", "cyclic", "multiplicative"])
def test_state_dict_round_trip_resumes_the_sequence(name):
    """A fresh scheduler loaded from a mid-run state_dict continues exactly like torch."""
    histories = []
    for L in (ca, torch):
        opt = make_optimizer(L)
        sched = SCHEDULERS[name](L, opt)
        for _ in range(10):
            opt.step()
            sched.step()
        saved, saved_opt = sched.state_dict(), opt.state_dict()
        opt2 = make_optimizer(L)
        sched2 = SCHEDULERS[name](L, opt2)
        opt2.load_state_dict(saved_opt)
        sched2.load_state_dict(saved)
        history = []
        for _ in range(15):
            opt2.step()
            sched2.step()
            history.append(snapshot(sched2, opt2))
        histories.append(history)
    assert_histories_equal(*histories)


def test_initial_lr_and_resume_with_last_epoch():
    results = []
    for L in (ca, torch):
        opt = make_optimizer(L)
        S(L).StepLR(opt, step_size=3)
        initial = [g["initial_lr"] for g in opt.param_groups]
        for g in opt.param_groups:
            g["lr"] = 0.5
        resumed = S(L).CosineAnnealingLR(opt, T_max=10, last_epoch=4)  # closed form at 5
        lrs = []
        for _ in range(6):
            opt.step()
            resumed.step()
            lrs.append(resumed.get_last_lr())
        with pytest.raises(KeyError) as err:
            S(L).StepLR(make_optimizer(L), step_size=3, last_epoch=2)
        results.append((initial, resumed.base_lrs, resumed.last_epoch, lrs, str(err.value)))
    assert results[0] == results[1]


@pytest.mark.parametrize("name", ["step", "multistep", "exponential", "cosine", "linear",
                                  "constant", "polynomial", "warm_restarts_mult"])
def test_step_with_epoch_uses_the_closed_form(name):
    histories, all_messages = [], []
    for L in (ca, torch):
        opt = make_optimizer(L)
        sched = SCHEDULERS[name](L, opt)
        history, messages = [], []
        for epoch in [3, 4, 9, 2, 15, 15, 27]:
            opt.step()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                sched.step(epoch)  # a deprecation warning, except for warm restarts
            messages.append([str(w.message) for w in caught])
            history.append(snapshot(sched, opt))
        histories.append(history)
        all_messages.append(messages)
    assert_histories_equal(*histories)
    assert all_messages[0] == all_messages[1]


def plateau_run(L, **kwargs):
    opt = make_optimizer(L)
    sched = S(L).ReduceLROnPlateau(opt, **kwargs)
    metrics = [5.0, 4.0, 4.0, 4.1, 3.99, 4.2, 4.3, 4.4, 3.0, 3.1, 3.2, 3.3, 3.4, 3.5, 3.6,
               3.7, 3.8, 3.9, 2.0, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5, 2.5]
    history = []
    for m in metrics:
        opt.step()
        sched.step(L.tensor(m) if m == 2.0 else m)  # a 0-d tensor metric works too
        history.append(snapshot(sched, opt))
    return history, sorted(sched.state_dict())


@pytest.mark.parametrize("kwargs", [
    {}, {"patience": 2}, {"patience": 1, "cooldown": 2, "factor": 0.5},
    {"mode": "max", "patience": 1}, {"threshold_mode": "abs", "threshold": 0.05, "patience": 0},
    {"patience": 0, "min_lr": [0.05, 0.01]}, {"patience": 0, "factor": 0.5, "eps": 0.01},
])
def test_reduce_lr_on_plateau_matches_torch(kwargs):
    c_hist, c_keys = plateau_run(ca, **kwargs)
    t_hist, t_keys = plateau_run(torch, **kwargs)
    assert_histories_equal(c_hist, t_hist)
    assert c_keys == t_keys


def warnings_of(L, order):
    opt = make_optimizer(L)
    sched = S(L).StepLR(opt, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        if order == "scheduler_first":
            sched.step()
            opt.step()
        elif order == "overridden":
            opt.step = lambda closure=None: None
            opt.step()
            sched.step()
        else:
            opt.step()
            sched.step()
        sched.get_lr()  # outside step(): a hint to use get_last_lr()
    return [(w.category, str(w.message)) for w in caught]


@pytest.mark.parametrize("order", ["scheduler_first", "overridden", "right"])
def test_step_order_warnings_match_torch(order):
    assert warnings_of(ca, order) == warnings_of(torch, order)


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type and message are what is compared)
        return type(e).__name__, str(e).replace("cagrad", "torch")
    raise AssertionError("no error raised")


def step_n(sched, opt, n):
    for _ in range(n):
        opt.step()
        sched.step()


ERRORS = {
    "not_optimizer": lambda L, o: S(L).StepLR(object(), 3),
    "lambdas_count": lambda L, o: S(L).LambdaLR(o, [lr_lambda]),
    "mult_not_callable": lambda L, o: S(L).MultiplicativeLR(o, 0.5),
    "constant_factor": lambda L, o: S(L).ConstantLR(o, factor=1.5),
    "linear_start": lambda L, o: S(L).LinearLR(o, start_factor=0),
    "linear_end": lambda L, o: S(L).LinearLR(o, end_factor=2.0),
    "restarts_T0": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=0),
    "restarts_Tmult": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=2, T_mult=0),
    "restarts_eta": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=2, eta_min="x"),
    "restarts_negative": lambda L, o: S(L).CosineAnnealingWarmRestarts(o, T_0=2).step(-1),
    "one_cycle_steps": lambda L, o: S(L).OneCycleLR(o, 0.1),
    "one_cycle_total": lambda L, o: S(L).OneCycleLR(o, 0.1, total_steps=0),
    "one_cycle_epochs": lambda L, o: S(L).OneCycleLR(o, 0.1, epochs=0, steps_per_epoch=3),
    "one_cycle_pct": lambda L, o: S(L).OneCycleLR(o, 0.1, total_steps=5, pct_start=1),
    "one_cycle_anneal": lambda L, o: S(L).OneCycleLR(o, 0.1, 5, anneal_strategy="exp"),
    "one_cycle_max_lr": lambda L, o: S(L).OneCycleLR(o, [0.1], total_steps=5),
    "one_cycle_past_end": lambda L, o: step_n(S(L).OneCycleLR(o, 0.1, total_steps=2), o, 3),
    "plateau_factor": lambda L, o: S(L).ReduceLROnPlateau(o, factor=1.0),
    "plateau_mode": lambda L, o: S(L).ReduceLROnPlateau(o, mode="up"),
    "plateau_threshold": lambda L, o: S(L).ReduceLROnPlateau(o, threshold_mode="x"),
    "plateau_min_lrs": lambda L, o: S(L).ReduceLROnPlateau(o, min_lr=[0.1]),
    "sequential_empty": lambda L, o: S(L).SequentialLR(o, [], []),
    "sequential_milestones": lambda L, o: S(L).SequentialLR(o, [S(L).StepLR(o, 2)], [3]),
    "sequential_plateau": lambda L, o: S(L).SequentialLR(
        o, [S(L).StepLR(o, 2), S(L).ReduceLROnPlateau(o)], [3]),
    "chained_empty": lambda L, o: S(L).ChainedScheduler([]),
    "cyclic_mode": lambda L, o: S(L).CyclicLR(o, 0.1, 1.0, mode="sine"),
    "momentum_needed": lambda L, o: S(L).OneCycleLR(
        L.optim.Adagrad([L.nn.Parameter(L.ones(1))]), 0.1, total_steps=5),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_errors_match_torch(case):
    assert error_of(lambda: ERRORS[case](ca, make_optimizer(ca))) == \
        error_of(lambda: ERRORS[case](torch, make_optimizer(torch)))


def test_lr_scheduler_alias_and_exports():
    assert issubclass(S(ca)._LRScheduler, S(ca).LRScheduler)
    assert sorted(S(ca).__all__) == sorted(S(torch).__all__)
    with pytest.raises(NotImplementedError):
        S(ca).LRScheduler(make_optimizer(ca))


class Decay:
    """A callable object: its __dict__ (not the function) goes into LambdaLR's state."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate ** epoch


@pytest.mark.parametrize("kind", ["LambdaLR", "MultiplicativeLR"])
def test_lambda_state_saves_callable_objects(kind):
    results = []
    for L in (ca, torch):
        opt = make_optimizer(L)
        sched = getattr(S(L), kind)(opt, [Decay(0.9), lr_lambda])
        saved = sched.state_dict()
        restored = getattr(S(L), kind)(make_optimizer(L), [Decay(0.5), lr_lambda])
        restored.load_state_dict(saved)
        results.append((saved["lr_lambdas"], restored.lr_lambdas[0].rate, sorted(saved)))
    assert results[0] == results[1]
    assert results[0][:2] == ([{"rate": 0.9}, None], 0.9)
