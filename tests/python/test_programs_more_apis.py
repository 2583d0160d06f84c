"""APIs that the programs of test_programs_more.py needed and cagrad lacked, each compared
with torch:

- optim.ASGD (AWD-LSTM's NT-ASGD, with its averaged weights read from
  optimizer.state[p]["ax"]) and optim.Rprop: parameters after 20 steps in float32 and
  float64 from the same weights and data, with every backward also run compiled; the
  state's keys and values; a state_dict round trip; argument errors; defaults;
- Tensor.unfold(dimension, size, step) (ViT patchify by unfold): values and gradients in
  float32 and float64, eager and compiled, gradcheck, and errors;
- Optimizer.register_step_pre_hook / register_step_post_hook and the global
  torch.optim.optimizer.register_optimizer_step_pre_hook / _post_hook (an EMA updated after
  every step): order, arguments, replaced arguments, removal, errors;
- x[mask] = values with a tensor of several values (the DQN tutorial's
  next_state_values[non_final_mask] = target_net(s).max(1).values): values, gradients to x
  and to the values (eager and compiled), broadcasting and errors; and item assignment of
  a value with leading 1-dims beyond the target's (y[0:2] = v of shape [1, 2]);
- several advanced indices in one expression, for reading and writing
  (logp[torch.arange(n), target], mnist_forward_forward's x_[range(n), y] = x.max()):
  values and gradients, eager and compiled.
"""

import numpy as np
import pytest
import torch

from helpers import assert_close, backward_checked, ca, compiled_ctx, to_both, to_np

STEPS = 20
ATOL = {"float32": 1e-6, "float64": 1e-13}

OPTIMS = {
    "asgd": lambda L, p: L.optim.ASGD(p),
    # t0 small: the average starts moving after the third step (mu < 1)
    "asgd_avg": lambda L, p: L.optim.ASGD(p, lr=0.05, lambd=1e-3, alpha=0.6, t0=3),
    "asgd_wd_max": lambda L, p: L.optim.ASGD(p, lr=0.02, t0=0, weight_decay=0.1,
                                             maximize=True),
    "asgd_awd": lambda L, p: L.optim.ASGD(p, lr=0.3, t0=0, lambd=0.0, weight_decay=1.2e-6),
    "rprop": lambda L, p: L.optim.Rprop(p),
    "rprop_opts": lambda L, p: L.optim.Rprop(p, lr=0.05, etas=(0.3, 1.5),
                                             step_sizes=(1e-3, 0.2)),
    "rprop_max": lambda L, p: L.optim.Rprop(p, lr=0.001, maximize=True),
}


def make_model(L, dtype):
    nn = L.nn
    return nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1)).to(getattr(L, dtype))


def data(dtype):
    r = np.random.default_rng(0)
    x = r.standard_normal((16, 4)).astype(dtype)
    return x, np.sin(x.sum(1, keepdims=True)).astype(dtype)


def train(L, name, dtype, steps=STEPS, compiled=False, opt=None, model=None):
    if model is None:
        torch.manual_seed(0)
        t_model = make_model(torch, dtype)
        model = t_model if L is torch else make_model(ca, dtype)
        if L is ca:
            model.load_state_dict({k: ca.tensor(v.numpy())
                                   for k, v in t_model.state_dict().items()})
    opt = opt or OPTIMS[name](L, model.parameters())
    x, y = (L.tensor(a) for a in data(dtype))
    for _ in range(steps):
        opt.zero_grad()
        loss = ((model(x) - y) ** 2).mean()
        if compiled:
            with ca.compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        opt.step()
    return model, opt


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", list(OPTIMS))
def test_parameters_after_20_steps_match_torch(name, dtype, compiled):
    c_model, c_opt = train(ca, name, dtype, compiled=compiled)
    t_model, t_opt = train(torch, name, dtype)
    start = train(torch, name, dtype, steps=0)[0].state_dict()
    for (pname, cp), tp in zip(c_model.named_parameters(), t_model.parameters()):
        np.testing.assert_allclose(to_np(cp), to_np(tp), rtol=0, atol=ATOL[dtype],
                                   err_msg=f"{name} {pname}")
        assert not np.allclose(to_np(cp), to_np(start[pname])), "did not move"
    for cp, tp in zip(c_model.parameters(), t_model.parameters()):
        c_state, t_state = c_opt.state[cp], t_opt.state[tp]
        assert list(c_state) == list(t_state)
        for key, t_value in t_state.items():
            np.testing.assert_allclose(np.asarray(to_np(c_state[key]) if key != "step"
                                                  else c_state[key], dtype=np.float64),
                                       to_np(t_value).astype(np.float64), rtol=0,
                                       atol=ATOL[dtype], err_msg=f"{name} state {key}")


@pytest.mark.parametrize("default", ["float32", "float64"])
def test_asgd_eta_and_mu_are_scalar_tensors_of_the_scalar_dtype(default):
    """As in torch: 0-d tensors, float32 unless the default dtype is float64 (the update
    then uses their rounded values)."""
    for L in (ca, torch):
        old = L.get_default_dtype()
        L.set_default_dtype(getattr(L, default))
        try:
            p = L.nn.Parameter(L.ones(3, dtype=L.float64))
            opt = L.optim.ASGD([p], lr=0.1, t0=0)
            p.grad = L.full((3,), 0.5, dtype=L.float64)
            opt.step()
            for key in ("eta", "mu"):
                value = opt.state[p][key]
                assert value.dim() == 0 and str(value.dtype).endswith(default), (L, key)
        finally:
            L.set_default_dtype(old)


def test_awd_lstm_style_evaluation_with_the_averaged_weights():
    """NT-ASGD's evaluation: swap each parameter's .data for state[p]['ax'], then back."""
    out = {}
    for L in (ca, torch):
        model, opt = train(L, "asgd_awd", "float64", steps=5)
        x, _ = (L.tensor(a) for a in data("float64"))
        saved = {}
        for prm in model.parameters():
            saved[prm] = prm.data.clone()
            prm.data = opt.state[prm]["ax"].clone()
        with L.no_grad():
            averaged = to_np(model(x))
        for prm in model.parameters():
            prm.data = saved[prm].clone()
        with L.no_grad():
            out[L.__name__] = (averaged, to_np(model(x)))
    for c, t in zip(out["cagrad"], out["torch"]):
        np.testing.assert_allclose(c, t, rtol=0, atol=1e-13)
    assert not np.allclose(*out["cagrad"])  # the average is not the last iterate


def resumed_after_10(L, name):
    model, opt = train(L, name, "float64", steps=10)
    resumed = OPTIMS[name](L, model.parameters())
    resumed.load_state_dict(opt.state_dict())
    return train(L, name, "float64", steps=10, opt=resumed, model=model)[0]


@pytest.mark.parametrize("name", ["asgd_avg", "rprop_opts"])
def test_state_dict_round_trip_continues_as_torch(name):
    """Save after 10 steps, load into a fresh optimizer, 10 more: the same as 20 steps in
    one go, and as torch's resumed run. (Loading turns ASGD's float32 eta and mu float64,
    as torch's does; their new values are still rounded to float32, as torch makes them
    with as_tensor in the default dtype.)"""
    resumed = resumed_after_10(ca, name)
    for a, b in zip(resumed.parameters(), resumed_after_10(torch, name).parameters()):
        np.testing.assert_allclose(to_np(a), to_np(b), rtol=0, atol=ATOL["float64"])
    straight, _ = train(ca, name, "float64")
    for a, b in zip(resumed.parameters(), straight.parameters()):
        np.testing.assert_array_equal(to_np(a), to_np(b))


def error_of(fn):
    try:
        fn()
    except Exception as e:  # noqa: BLE001 (the type and message are what is compared)
        return type(e).__name__, str(e)
    raise AssertionError("no error raised")


ERRORS = {
    "asgd_lr": lambda L, p: L.optim.ASGD(p, lr=-1),
    "asgd_wd": lambda L, p: L.optim.ASGD(p, weight_decay=-1),
    "rprop_lr": lambda L, p: L.optim.Rprop(p, lr=-1),
    "rprop_etas_low": lambda L, p: L.optim.Rprop(p, etas=(1.0, 1.2)),
    "rprop_etas_high": lambda L, p: L.optim.Rprop(p, etas=(0.5, 0.9)),
    "empty": lambda L, p: L.optim.Rprop([]),
}


@pytest.mark.parametrize("case", list(ERRORS))
def test_argument_errors_match_torch(case):
    assert error_of(lambda: ERRORS[case](ca, [ca.nn.Parameter(ca.ones(1))])) == \
        error_of(lambda: ERRORS[case](torch, [torch.nn.Parameter(torch.ones(1))]))


def test_defaults_match_torch():
    for name in ("ASGD", "Rprop"):
        c_opt = getattr(ca.optim, name)([ca.nn.Parameter(ca.ones(1))])
        t_opt = getattr(torch.optim, name)([torch.nn.Parameter(torch.ones(1))])
        assert c_opt.defaults == t_opt.defaults, name


# ----------------------------------------------------------------------------- Tensor.unfold
UNFOLDS = [((10,), 0, 3, 1), ((10,), 0, 3, 3), ((10,), -1, 2, 4), ((10,), 0, 10, 1),
           ((10,), 0, 0, 2), ((2, 7, 3), 1, 3, 2), ((2, 7, 3), -1, 2, 1), ((4, 5), 0, 4, 5),
           ((), 0, 1, 1), ((), -1, 0, 3)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, dim, size, step", UNFOLDS)
def test_unfold_values_and_gradients_match_torch(shape, dim, size, step, dtype, compiled):
    rng = np.random.default_rng(0)
    c, t = to_both(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    c_out, t_out = c.unfold(dim, size, step), t.unfold(dim, size, step)
    assert_close(c_out, t_out, rtol=0, atol=0)
    weights = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    # overlapping windows (step < size) sum their gradients into the shared elements
    compiled = compiled and c_out.numel() > 0
    with compiled_ctx(compiled):
        backward_checked((c_out * ca.tensor(weights)).sum(), compiled)
    (t_out * torch.tensor(weights)).sum().backward()
    assert_close(c.grad, t.grad)


def test_unfold_int64_and_vit_patches_match_torch():
    c, t = to_both(np.arange(2 * 3 * 8 * 8).reshape(2, 3, 8, 8))
    c_p, t_p = (x.unfold(2, 4, 4).unfold(3, 4, 4) for x in (c, t))
    assert_close(c_p, t_p)
    assert_close(c_p.permute(0, 2, 3, 1, 4, 5).reshape(2, 4, 48),
                 t_p.permute(0, 2, 3, 1, 4, 5).reshape(2, 4, 48))


def test_unfold_gradcheck():
    rng = np.random.default_rng(1)
    x = ca.tensor(rng.standard_normal((3, 9)), requires_grad=True)
    assert ca.autograd.gradcheck(lambda a: a.unfold(1, 4, 2).unfold(0, 2, 1), (x,))


UNFOLD_ERRORS = [((10,), 0, 11, 1), ((10,), 0, 3, 0), ((10,), 0, 3, -2), ((10,), 1, 2, 1),
                 ((10,), 0, -1, 1), ((), 0, 2, 1), ((2, 3), -3, 1, 1)]


@pytest.mark.parametrize("shape, dim, size, step", UNFOLD_ERRORS)
def test_unfold_errors_match_torch(shape, dim, size, step):
    c, t = to_both(np.zeros(shape))
    assert error_of(lambda: c.unfold(dim, size, step)) == \
        error_of(lambda: t.unfold(dim, size, step))


# ------------------------------------------------------------------------- step hooks
def hook_log(L):
    """The calls the hooks see over a few steps, with the optimizer shown by its type."""
    from_lib = __import__(L.__name__ + ".optim.optimizer", fromlist=["x"])
    log = []

    def note(tag):
        def hook(opt, args, kwargs):
            assert args[0] is opt  # the optimizer comes first in args, as step's self
            log.append((tag, type(opt).__name__, len(args), sorted(kwargs)))
        return hook

    model = L.nn.Linear(2, 1)
    opt = L.optim.SGD(model.parameters(), lr=0.1)
    handles = [opt.register_step_post_hook(note("post")),
               opt.register_step_pre_hook(note("pre")),
               from_lib.register_optimizer_step_pre_hook(note("global pre")),
               from_lib.register_optimizer_step_post_hook(note("global post"))]
    try:
        model(L.ones(1, 2)).sum().backward()
        opt.step()
        opt.step(closure=None)
        handles[1].remove()
        handles[2].remove()
        opt.step()
    finally:
        for h in handles:
            h.remove()
    opt.step()  # no hooks left
    return log


def test_step_hooks_order_and_arguments_match_torch():
    assert hook_log(ca) == hook_log(torch)
    assert hook_log(ca)[:4] == [("global pre", "SGD", 1, []), ("pre", "SGD", 1, []),
                                ("post", "SGD", 1, []), ("global post", "SGD", 1, [])]


@pytest.mark.parametrize("L", [ca, torch], ids=["cagrad", "torch"])
def test_step_pre_hook_replaces_the_arguments(L):
    model = L.nn.Linear(2, 1)
    opt = L.optim.LBFGS(model.parameters(), max_iter=2)
    calls = []

    def closure():
        calls.append(1)
        opt.zero_grad()
        loss = model(L.ones(1, 2)).sum()
        loss.backward()
        return loss

    opt.register_step_pre_hook(lambda o, args, kwargs: ((o,), {"closure": closure}))
    opt.step(None)  # the hook hands LBFGS the closure
    assert len(calls) >= 1


def test_step_hook_bad_return_is_an_error_like_torch():
    errors = []
    for L in (ca, torch):
        p = L.nn.Parameter(L.ones(1))
        opt = L.optim.SGD([p], lr=0.1)
        opt.register_step_pre_hook(lambda o, a, k: 5)
        kind, message = error_of(opt.step)
        errors.append((kind, message.split(" must ")[-1]))
    assert errors[0] == errors[1]


def test_ema_updated_by_a_step_post_hook_matches_torch():
    """The ViT program's pattern: AveragedModel(get_ema_multi_avg_fn) updated by a hook."""
    out = {}
    for L in (ca, torch):
        model, opt = train(L, "asgd", "float64", steps=0)
        ema = L.optim.swa_utils.AveragedModel(
            model, multi_avg_fn=L.optim.swa_utils.get_ema_multi_avg_fn(0.8))
        opt.register_step_post_hook(lambda o, a, k: ema.update_parameters(model))
        train(L, "asgd", "float64", steps=6, opt=opt, model=model)
        out[L.__name__] = [to_np(p) for p in ema.module.parameters()] + \
            [to_np(ema.n_averaged)]
    for c, t in zip(out["cagrad"], out["torch"]):
        np.testing.assert_allclose(c, t, rtol=0, atol=1e-13)
    assert out["cagrad"][-1] == 6


def test_a_subclass_step_calling_super_runs_the_hooks_once():
    """cagrad hooks every step() and runs them once per outer call. (torch may run them
    twice here, depending on which optimizer classes were instantiated before.)"""
    log = []

    class LoggedSGD(ca.optim.SGD):
        def step(self, closure=None):
            log.append("step")
            return super().step(closure)

    p = ca.nn.Parameter(ca.ones(1))
    p.grad = ca.ones(1)
    opt = LoggedSGD([p], lr=0.5)
    opt.register_step_pre_hook(lambda o, a, k: log.append("pre"))
    opt.register_step_post_hook(lambda o, a, k: log.append("post"))
    opt.step()
    assert log == ["pre", "step", "post"] and p.item() == 0.5


# ------------------------------------------------------------------ x[mask] = tensor of values
MASKED = [((4,), [True, False, True, False], (2,)),
          ((3, 2), [True, False, True], (2, 2)),
          ((3, 2), [True, False, True], (2,)),      # broadcast over the selected rows
          ((3, 2), [True, False, True], (2, 1)),
          ((3,), [True, True, False], (1, 2)),      # a leading 1 is dropped
          ((2, 2), [[True, False], [False, True]], (2,)),
          ((3,), [False, False, False], (0,))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, mask, vshape", MASKED)
def test_masked_assignment_of_a_tensor_matches_torch(shape, mask, vshape, dtype, compiled):
    rng = np.random.default_rng(2)
    cx, tx = to_both(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    cv, tv = to_both(rng.standard_normal(vshape).astype(dtype), requires_grad=True)
    outs = []
    for L, x, v in ((ca, cx, cv), (torch, tx, tv)):
        y = x * 1.0  # not a leaf: assignable in place with autograd
        y[L.tensor(mask)] = v
        outs.append(y)
    assert_close(outs[0], outs[1], rtol=0, atol=0)
    w = rng.standard_normal(shape).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((outs[0] * ca.tensor(w)).sum(), compiled)
    (outs[1] * torch.tensor(w)).sum().backward()
    assert_close(cx.grad, tx.grad)
    assert_close(cv.grad, tv.grad)


def test_masked_assignment_int64_and_list_mask_match_torch():
    for mask in ([True, False, True], np.array([True, False, True])):
        c, t = to_both(np.zeros(3, dtype=np.int64))
        c[ca.tensor(mask)], t[torch.tensor(mask)] = ca.tensor([4, 5]), torch.tensor([4, 5])
        assert_close(c, t)
    c, t = to_both(np.zeros(3))
    c[[True, False, True]], t[[True, False, True]] = ca.tensor([1.0, 2.0], dtype=ca.float64), \
        torch.tensor([1.0, 2.0], dtype=torch.float64)
    assert_close(c, t)


MASKED_ERRORS = [((4,), [True, False, True, False], (3,), "float64"),
                 ((3,), [True, True, False], (2, 2), "float64"),
                 ((3, 2), [True, False, True], (3,), "float64"),
                 ((3,), [True, True, False], (2,), "float32")]   # dtype differs


@pytest.mark.parametrize("shape, mask, vshape, vdtype", MASKED_ERRORS)
def test_masked_assignment_errors_match_torch(shape, mask, vshape, vdtype):
    errors = []
    for L in (ca, torch):
        x = L.zeros(shape, dtype=L.float64)
        v = L.ones(vshape, dtype=getattr(L, vdtype))
        errors.append(error_of(lambda: x.__setitem__(L.tensor(mask), v)))
    assert errors[0] == errors[1]


SLICES = [((3,), (slice(0, 2),), (1, 2)), ((2, 3), (0,), (1, 1, 3)),
          ((2, 3), (slice(None), 1), (1, 2)), ((2, 3), (1,), (3,))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape, index, vshape", SLICES)
def test_item_assignment_drops_the_values_leading_ones_like_torch(shape, index, vshape, dtype,
                                                                   compiled):
    rng = np.random.default_rng(3)
    cx, tx = to_both(rng.standard_normal(shape).astype(dtype), requires_grad=True)
    cv, tv = to_both(rng.standard_normal(vshape).astype(dtype), requires_grad=True)
    outs = []
    for x, v in ((cx, cv), (tx, tv)):
        y = x * 1.0
        y[index] = v
        outs.append(y)
    assert_close(outs[0], outs[1], rtol=0, atol=0)
    w = rng.standard_normal(shape).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((outs[0] * ca.tensor(w)).sum(), compiled)
    (outs[1] * torch.tensor(w)).sum().backward()
    assert_close(cx.grad, tx.grad)
    assert_close(cv.grad, tv.grad)
    c, t = to_both(np.zeros(shape, dtype=dtype))  # outside the graph too
    c[index], t[index] = ca.tensor(to_np(tv)), torch.tensor(to_np(tv))
    assert_close(c, t)


# ------------------------------------------------------------ several advanced indices
def adv(L, kind):
    """The index items of one case, made with library L."""
    t = lambda v: L.tensor(v)  # noqa: E731
    return {
        "arange_pick": (L.arange(3), t([1, 0, 3])),
        "range_pick": (range(3), t([2, 2, 0])),
        "lists": ([0, 2], [1, 3]),
        "broadcast_2d": (t([[0], [2]]), t([[1, 3, 0]])),
        "apart": (t([0, 1]), slice(None), t([2, 3])),      # advanced dims go first
        "adjacent_after_slice": (slice(None), t([0, 2]), t([1, 1])),
        "int_slice_list": (0, slice(None), [1, 3]),        # ints select first (torch)
        "mask_and_index": (t([True, False, True]), t([0, 3])),
        "negative": (t([-1, 0]), t([-2, 1])),
        "ellipsis": (Ellipsis, t([0, 2]), t([3, 1])),
        "none": (None, t([1, 2]), t([0, 0])),
    }[kind]


ADV = ["arange_pick", "range_pick", "lists", "broadcast_2d", "apart", "adjacent_after_slice",
       "int_slice_list", "mask_and_index", "negative", "ellipsis", "none"]


def adv_shape(kind):
    return (3, 4) if kind in ("arange_pick", "range_pick", "lists", "broadcast_2d",
                              "mask_and_index", "negative", "none") else (2, 3, 4)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kind", ADV)
def test_reading_with_several_index_tensors_matches_torch(kind, dtype, compiled):
    rng = np.random.default_rng(4)
    c, t = to_both(rng.standard_normal(adv_shape(kind)).astype(dtype), requires_grad=True)
    c_out, t_out = c[adv(ca, kind)], t[adv(torch, kind)]
    assert_close(c_out, t_out, rtol=0, atol=0)
    w = rng.standard_normal(tuple(t_out.shape)).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((c_out * ca.tensor(w)).sum(), compiled)
    (t_out * torch.tensor(w)).sum().backward()
    assert_close(c.grad, t.grad)


@pytest.mark.parametrize("kind", ADV)
@pytest.mark.parametrize("value", ["number", "scalar_tensor", "tensor"])
def test_writing_with_several_index_tensors_matches_torch(kind, value):
    rng = np.random.default_rng(5)
    c, t = to_both(rng.standard_normal(adv_shape(kind)))
    shape = tuple(t[adv(torch, kind)].shape)
    v = rng.standard_normal(shape[-1:]) if value == "tensor" else 2.5
    for L, x in ((ca, c), (torch, t)):
        x[adv(L, kind)] = L.tensor(v, dtype=L.float64) if value != "number" else v
    assert_close(c, t, rtol=0, atol=0)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("kind", ["arange_pick", "apart", "int_slice_list", "mask_and_index"])
def test_writing_with_several_index_tensors_in_the_graph_matches_torch(kind, compiled):
    rng = np.random.default_rng(6)
    cx, tx = to_both(rng.standard_normal(adv_shape(kind)), requires_grad=True)
    shape = tuple(tx[adv(torch, kind)].shape)
    cv, tv = to_both(rng.standard_normal(shape), requires_grad=True)
    outs = []
    for L, x, v in ((ca, cx, cv), (torch, tx, tv)):
        y = x * 1.0
        y[adv(L, kind)] = v * 2.0
        outs.append(y)
    assert_close(outs[0], outs[1], rtol=0, atol=0)
    w = rng.standard_normal(tuple(outs[1].shape))
    with compiled_ctx(compiled):
        backward_checked((outs[0] * ca.tensor(w)).sum(), compiled)
    (outs[1] * torch.tensor(w)).sum().backward()
    assert_close(cx.grad, tx.grad)
    assert_close(cv.grad, tv.grad)


def test_forward_forward_overlay_and_one_hot_by_index_match_torch():
    """mnist_forward_forward's overlay_y_on_x, and a one-hot made by index assignment."""
    out = []
    for L in (ca, torch):
        x = L.arange(24.0).reshape(3, 8) / 10
        y = L.tensor([0, 2, 1])
        x_ = x.clone()
        x_[:, :4] *= 0.0
        x_[range(x.shape[0]), y] = x.max()
        onehot = L.zeros(3, 4, dtype=L.int64)
        onehot[L.arange(3), y] = 1
        flags = L.zeros(3, 4, dtype=L.bool)
        flags[[0, 1], [3, 3]] = True
        out.append((x_, onehot, flags))
    for c, t in zip(*out):
        assert_close(c, t, check_dtype=False)
        assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_writing_through_one_index_tensor_matches_torch(compiled):
    """x[idx] = rows (once NotImplementedError), outside and inside the autograd graph."""
    rng = np.random.default_rng(8)
    c, t = to_both(rng.standard_normal((4, 3)))
    c[ca.tensor([2, 0])], t[torch.tensor([2, 0])] = ca.tensor([1.0, 2.0, 3.0],
                                                               dtype=ca.float64), \
        torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert_close(c, t)
    cx, tx = to_both(rng.standard_normal((4, 3)), requires_grad=True)
    cv, tv = to_both(rng.standard_normal((2, 3)), requires_grad=True)
    outs = []
    for L, x, v in ((ca, cx, cv), (torch, tx, tv)):
        y = x * 1.0
        y[L.tensor([3, 1])] = v
        outs.append(y)
    assert_close(outs[0], outs[1], rtol=0, atol=0)
    with compiled_ctx(compiled):
        backward_checked((outs[0] * outs[0]).sum(), compiled)
    (outs[1] * outs[1]).sum().backward()
    assert_close(cx.grad, tx.grad)
    assert_close(cv.grad, tv.grad)


def test_repeated_positions_keep_the_last_value_like_torch():
    c, t = to_both(np.zeros((2, 2)))
    c[[0, 0, 1], [1, 1, 0]] = ca.tensor([1.0, 2.0, 3.0], dtype=ca.float64)
    t[[0, 0, 1], [1, 1, 0]] = torch.tensor([1.0, 2.0, 3.0], dtype=torch.float64)
    assert_close(c, t)


ADV_ERRORS = [lambda L, x: x[L.tensor([0, 3]), L.tensor([0, 1])],
              lambda L, x: x[L.tensor([0, 1]), L.tensor([0, 1, 2])],
              lambda L, x: x.__setitem__((L.tensor([0, 1]), L.tensor([0, 1])), L.ones(3)),
              lambda L, x: x.__setitem__((L.tensor([0, 1]), L.tensor([0, 1])),
                                         L.ones(2, dtype=L.float32))]


@pytest.mark.parametrize("case", range(len(ADV_ERRORS)))
def test_several_index_tensor_errors_match_torch(case):
    kinds = []
    for L in (ca, torch):
        x = L.zeros(3, 3, dtype=L.float64)
        kinds.append(error_of(lambda: ADV_ERRORS[case](L, x))[0])
    assert kinds[0] == kinds[1]
