"""optim.LBFGS against torch.optim.LBFGS 2.13: the same model, data and initial weights
optimized by both, without and with the strong-Wolfe line search, then the losses each
step returns, the parameters, the evaluation counts and the optimizer state compared
(float64 to ~1e-9, float32 looser: L-BFGS amplifies rounding differences), eagerly and
with every backward compiled. Also state_dict round trips, the stopping rules, errors, and
a program in the style of pytorch/examples' time_sequence_prediction (a two-layer
LSTMCell sine-wave model trained with LBFGS)."""

import math

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, compiled_ctx, counters, error_of, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
SEARCH = pytest.mark.parametrize("search", [None, "strong_wolfe"], ids=["fixed", "wolfe"])
# float64: the two runs differ only by summation order (~1e-16), which a few L-BFGS steps
# amplify by the problem's conditioning; float32's rounding is 1e9 times larger and is
# amplified the same way, so parameters agree to ~1e-3 there.
TOL = {"float64": dict(rtol=1e-8, atol=1e-10), "float32": dict(rtol=5e-3, atol=5e-4)}


def problem(L, dtype, unused=False):
    """A small tanh MLP regression: (parameters, closure factory)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 3))
    y = np.sin(x.sum(1, keepdims=True))
    arrays = [rng.standard_normal((5, 3)) * 0.5, rng.standard_normal(5) * 0.1,
              rng.standard_normal((1, 5)) * 0.5]
    if unused:  # a parameter the loss ignores: its .grad stays None
        arrays.append(np.ones(2))
    dt = getattr(L, dtype)
    params = [L.tensor(a, dtype=dt, requires_grad=True) for a in arrays]
    x, y = L.tensor(x, dtype=dt), L.tensor(y, dtype=dt)

    def make_closure(opt):
        def closure():
            opt.zero_grad()
            out = (x @ params[0].T + params[1]).tanh() @ params[2].T
            loss = ((out - y) ** 2).mean()
            loss.backward()
            return loss
        return closure
    return params, make_closure


def optimize(L, dtype, steps, compiled=False, unused=False, **kwargs):
    """Runs `steps` LBFGS steps; returns (losses, parameters, optimizer)."""
    params, make_closure = problem(L, dtype, unused)
    opt = L.optim.LBFGS(params, **kwargs)
    closure = make_closure(opt)
    losses = []
    before = counters()
    with compiled_ctx(compiled and L is ca):
        for _ in range(steps):
            losses.append(float(opt.step(closure).detach()))
    if compiled and L is ca:  # every closure's backward ran a compiled graph
        after = counters()
        ran = sum(after[k] - before[k] for k in ("captures", "cache_hits"))
        assert ran == opt.state[params[0]]["func_evals"]
        assert after["eager_fallbacks"] == before["eager_fallbacks"]
    return losses, params, opt


def assert_same_run(got, want, dtype):
    (c_losses, c_params, c_opt), (t_losses, t_params, t_opt) = got, want
    np.testing.assert_allclose(c_losses, t_losses, **TOL[dtype])
    for c, t in zip(c_params, t_params):
        assert_close(c, t, **TOL[dtype])
    c_state, t_state = c_opt.state[c_params[0]], t_opt.state[t_params[0]]
    assert (c_state["func_evals"], c_state["n_iter"]) == \
        (t_state["func_evals"], t_state["n_iter"])
    assert sorted(c_state) == sorted(t_state)


@COMPILED
@SEARCH
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_torch(search, dtype, compiled):
    kwargs = dict(lr=1 if search else 0.5, max_iter=7, line_search_fn=search)
    got = optimize(ca, dtype, 4, compiled, **kwargs)
    want = optimize(torch, dtype, 4, **kwargs)
    assert_same_run(got, want, dtype)


@SEARCH
def test_state_tensors_match_torch(search):
    got = optimize(ca, "float64", 3, history_size=2, line_search_fn=search, max_iter=6)
    want = optimize(torch, "float64", 3, history_size=2, line_search_fn=search, max_iter=6)
    c, t = got[2].state[got[1][0]], want[2].state[want[1][0]]
    for key in ("d", "prev_flat_grad", "H_diag", "t"):
        assert_close(ca.as_tensor(c[key]) if not hasattr(c[key], "shape") else c[key],
                     t[key] if torch.is_tensor(t[key]) else torch.tensor(t[key]),
                     check_dtype=False, **TOL["float64"])
    assert len(c["old_dirs"]) == len(t["old_dirs"]) == 2
    for key in ("old_dirs", "old_stps", "ro"):
        for a, b in zip(c[key], t[key]):
            assert_close(a, b, **TOL["float64"])
    assert math.isclose(c["prev_loss"], t["prev_loss"], rel_tol=1e-8)


@COMPILED
def test_compiled_equals_eager(compiled):
    eager = optimize(ca, "float64", 3, line_search_fn="strong_wolfe")
    other = optimize(ca, "float64", 3, compiled, line_search_fn="strong_wolfe")
    assert eager[0] == other[0]
    for a, b in zip(eager[1], other[1]):
        assert_close(b, a, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("kwargs", [
    dict(history_size=1, max_iter=9),                 # history full: oldest pair dropped
    dict(max_eval=5, max_iter=20),                    # stops on the evaluation budget
    dict(max_eval=6, line_search_fn="strong_wolfe"),  # line search cut short by max_eval
    dict(tolerance_change=1e-2),                      # stops when the loss stalls
    dict(tolerance_grad=1e3),                         # optimal at once: no update
    dict(lr=0.0),                                     # zero step: stops on tolerance_change
], ids=["history1", "max_eval", "wolfe_max_eval", "tol_change", "tol_grad", "lr0"])
def test_stopping_rules_like_torch(kwargs):
    assert_same_run(optimize(ca, "float64", 3, **kwargs),
                    optimize(torch, "float64", 3, **kwargs), "float64")


def test_parameter_without_grad():
    got = optimize(ca, "float64", 2, unused=True, line_search_fn="strong_wolfe")
    want = optimize(torch, "float64", 2, unused=True, line_search_fn="strong_wolfe")
    assert_same_run(got, want, "float64")
    assert got[1][3].grad is None
    assert_close(got[1][3], want[1][3])


@SEARCH
def test_state_dict_round_trip(search):
    """Two steps, a state_dict saved and loaded into a fresh optimizer over fresh
    parameters (with the same values), two more steps: as four steps in one go, and as
    torch doing the same."""
    kwargs = dict(line_search_fn=search, max_iter=5, history_size=3)
    straight = optimize(ca, "float64", 4, **kwargs)
    for L in (ca, torch):
        losses, params, opt = optimize(L, "float64", 2, **kwargs)
        saved = opt.state_dict()
        assert sorted(saved["state"][0]) == sorted(opt.state[params[0]])
        assert saved["param_groups"][0]["history_size"] == 3
        fresh, make_closure = problem(L, "float64")
        with torch.no_grad():
            for f, p in zip(fresh, params):
                f.detach().copy_(p.detach())
        resumed = L.optim.LBFGS(fresh, **kwargs)
        resumed.load_state_dict(saved)
        closure = make_closure(resumed)
        losses += [float(resumed.step(closure).detach()) for _ in range(2)]
        if L is ca:
            got = (losses, fresh)
        else:
            want = (losses, fresh)
    np.testing.assert_allclose(got[0], straight[0], rtol=1e-12)
    np.testing.assert_allclose(got[0], want[0], **TOL["float64"])
    for a, b, c in zip(got[1], straight[1], want[1]):
        assert_close(a, b, rtol=1e-12, atol=1e-14)
        assert_close(a, c, **TOL["float64"])


def test_defaults_and_repr():
    params = [ca.nn.Parameter(ca.ones(2))]
    opt = ca.optim.LBFGS(params, max_iter=8)
    ref = torch.optim.LBFGS([torch.nn.Parameter(torch.ones(2))], max_iter=8)
    assert opt.defaults == ref.defaults
    assert opt.param_groups[0]["max_eval"] == 10
    assert repr(opt) == repr(ref)


ERRORS = {
    "negative_lr": lambda L: L.optim.LBFGS([L.nn.Parameter(L.ones(2))], lr=-1.0),
    "two_groups": lambda L: L.optim.LBFGS([{"params": [L.nn.Parameter(L.ones(2))]},
                                           {"params": [L.nn.Parameter(L.ones(2))]}]),
    "empty": lambda L: L.optim.LBFGS([]),
    "bad_search": lambda L: _one_step(L, line_search_fn="backtracking"),
}


def _one_step(L, **kwargs):
    p = L.nn.Parameter(L.tensor([1.0, -2.0]))
    opt = L.optim.LBFGS([p], **kwargs)

    def closure():
        opt.zero_grad()
        loss = (p ** 2).sum()
        loss.backward()
        return loss
    opt.step(closure)


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_like_torch(name):
    got, want = error_of(ca, ERRORS[name]), error_of(torch, ERRORS[name])
    assert want[0] is not None
    assert (got[0].__name__, got[1]) == (want[0].__name__, want[1])


def test_tensor_lr_is_refused():
    with pytest.raises(NotImplementedError, match="docs/python-api.md"):
        ca.optim.LBFGS([ca.nn.Parameter(ca.ones(2))], lr=ca.tensor(0.5))


def test_step_needs_closure():
    opt = ca.optim.LBFGS([ca.nn.Parameter(ca.ones(2))])
    with pytest.raises(TypeError):
        opt.step()


def test_quadratic_converges_to_the_minimum():
    """On a convex quadratic, L-BFGS with the line search reaches the exact minimizer."""
    rng = np.random.default_rng(1)
    a = rng.standard_normal((6, 6))
    a = a @ a.T + 6 * np.eye(6)
    b = rng.standard_normal(6)
    x = ca.nn.Parameter(ca.zeros(6, dtype=ca.float64))
    opt = ca.optim.LBFGS([x], line_search_fn="strong_wolfe", tolerance_grad=1e-12,
                         tolerance_change=0, max_iter=50)
    A, B = ca.tensor(a), ca.tensor(b)

    def closure():
        opt.zero_grad()
        loss = 0.5 * (x @ (A @ x)) - B @ x
        loss.backward()
        return loss
    opt.step(closure)
    np.testing.assert_allclose(to_np(x), np.linalg.solve(a, b), rtol=1e-8, atol=1e-10)


# --- program: time_sequence_prediction, scaled down ----------------------------------------

def sequence_model(L, hidden):
    """pytorch/examples' time_sequence_prediction model: two stacked LSTMCells and a
    Linear read-out, run one step per sample; `future` steps feed the prediction back."""
    nn = L.nn

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, hidden)
            self.lstm2 = nn.LSTMCell(hidden, hidden)
            self.linear = nn.Linear(hidden, 1)

        def forward(self, input, future=0):
            outputs = []
            n = input.size(0)
            h_t = L.zeros(n, hidden, dtype=L.double)
            c_t = L.zeros(n, hidden, dtype=L.double)
            h_t2 = L.zeros(n, hidden, dtype=L.double)
            c_t2 = L.zeros(n, hidden, dtype=L.double)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for _ in range(future):
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            return L.cat(outputs, dim=1)

    return Sequence()


def sine_data(samples=4, length=14, period=20):
    """The example's data: shifted sine waves, input = wave[:, :-1], target = wave[:, 1:]."""
    rng = np.random.default_rng(2)
    shift = rng.integers(-4 * period, 4 * period, samples)[:, None]
    wave = np.sin((np.arange(length)[None, :] + shift) / period)
    return wave[:, :-1], wave[:, 1:]


def train_sequence(L, state, compiled=False, steps=2):
    model = sequence_model(L, 6).double()
    model.load_state_dict({k: L.tensor(v) for k, v in state.items()})
    x, y = sine_data()
    x, y = L.tensor(x), L.tensor(y)
    criterion = L.nn.MSELoss()
    optimizer = L.optim.LBFGS(model.parameters(), lr=0.8)
    losses = []

    def closure():
        optimizer.zero_grad()
        loss = criterion(model(x), y)
        loss.backward()
        losses.append(float(loss.detach()))
        return loss
    before = counters()
    with compiled_ctx(compiled and L is ca):
        for _ in range(steps):
            optimizer.step(closure)
    if compiled and L is ca:  # every closure's backward ran a compiled graph
        after = counters()
        ran = sum(after[k] - before[k] for k in ("captures", "cache_hits"))
        assert ran == len(losses)
        assert after["eager_fallbacks"] == before["eager_fallbacks"]
    with L.no_grad():
        future = model(x[:2], future=3)
    return losses, future, list(model.parameters())


@COMPILED
def test_time_sequence_prediction(compiled):
    torch.manual_seed(0)
    state = {k: v.double().numpy() for k, v in sequence_model(torch, 6).state_dict().items()}
    got = train_sequence(ca, state, compiled)
    want = train_sequence(torch, state)
    assert len(got[0]) == len(want[0]) > 10  # every closure call, line search included
    np.testing.assert_allclose(got[0], want[0], rtol=1e-8)
    assert got[0][-1] < got[0][0]
    assert_close(got[1], want[1], rtol=1e-7, atol=1e-9)
    for a, b in zip(got[2], want[2]):
        assert_close(a, b, rtol=1e-6, atol=1e-8)
