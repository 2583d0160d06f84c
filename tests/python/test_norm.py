"""Normalization (nn/_norm.py, nn/normalization.py) and the dropout family (nn/_dropout.py,
nn/dropout.py) against torch 2.13: batch_norm/group_norm/rms_norm values and gradients
(float32/float64, eager and compiled, finite differences), BatchNorm running statistics
over several train steps, eval outputs, state_dict keys, and argument errors."""

import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def bn_train(L, x, w, b):
    rm, rv = L.zeros(x.shape[1], dtype=x.dtype), L.ones(x.shape[1], dtype=x.dtype)
    return L.nn.functional.batch_norm(x, rm, rv, w, b, training=True, momentum=0.3)


def bn_eval(L, x, w, b):
    c = x.shape[1]
    rm = L.arange(c, dtype=x.dtype) * 0.1
    rv = L.arange(c, dtype=x.dtype) * 0.5 + 0.5
    return L.nn.functional.batch_norm(x, rm, rv, w, b, training=False, eps=1e-3)


FUNCTIONS = {
    "batch_norm_train_2d": (bn_train, (6, 3)),
    "batch_norm_train_4d": (bn_train, (2, 3, 4, 2)),
    "batch_norm_eval_3d": (bn_eval, (2, 3, 4)),
    "instance_norm": (lambda L, x, w, b: L.nn.functional.instance_norm(x, weight=w, bias=b),
                      (2, 3, 4, 2)),
    "instance_norm_running": (lambda L, x, w, b: L.nn.functional.instance_norm(
        x, L.zeros(3, dtype=x.dtype), L.ones(3, dtype=x.dtype), w, b, momentum=0.4), (2, 3, 5)),
    "instance_norm_eval": (lambda L, x, w, b: L.nn.functional.instance_norm(
        x, L.arange(3, dtype=x.dtype) * 0.2, L.arange(3, dtype=x.dtype) + 0.5, w, b,
        use_input_stats=False), (2, 3, 5)),
    "group_norm": (lambda L, x, w, b: L.nn.functional.group_norm(x, 2, w, b, eps=1e-4),
                   (2, 4, 3, 2)),
    "group_norm_3d": (lambda L, x, w, b: L.nn.functional.group_norm(x, 4, w, b), (3, 4, 5)),
    "rms_norm": (lambda L, x, w, b: L.nn.functional.rms_norm(x, [3, 2], w.reshape(3, 2)),
                 (4, 3, 2)),
    "rms_norm_eps": (lambda L, x, w, b: L.nn.functional.rms_norm(x, (2,), w[:2] + b[:2],
                                                                 eps=1e-2), (3, 2)),
}


def sized_inputs(rng, name):
    fn, shape = FUNCTIONS[name]
    x = rng.standard_normal(shape) * 2 + 0.5
    channels = 6 if name.startswith("rms") else shape[1]
    return fn, [x, rng.uniform(0.5, 1.5, channels), rng.standard_normal(channels)]


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_norm_functions_match_torch(name, dtype, compiled, rng):
    fn, inputs = sized_inputs(rng, name)
    needs_grad = [0, 1] if name == "rms_norm" else None  # its bias input is unused
    check_against_torch(fn, inputs, dtype, compiled, needs_grad, msg=name)


@COMPILED
@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_norm_gradcheck_float64(name, compiled, rng):
    fn, inputs = sized_inputs(rng, name)
    check_numeric_gradient(fn, inputs, compiled, [0, 1] if name == "rms_norm" else None)


def make_bn(L, cls, dtype, **kwargs):
    m = getattr(L.nn, cls)(3, dtype=getattr(L, dtype), **kwargs)
    if m.weight is not None:  # non-trivial affine parameters, the same in both
        with L.no_grad():
            m.weight.copy_(L.tensor([0.5, 1.5, 2.0], dtype=getattr(L, dtype)))
            if m.bias is not None:
                m.bias.copy_(L.tensor([0.1, -0.2, 0.3], dtype=getattr(L, dtype)))
    return m


BN_CASES = [
    ("BatchNorm1d", (4, 3), {}),
    ("BatchNorm1d", (4, 3, 5), {"momentum": None}),
    ("BatchNorm2d", (2, 3, 4, 3), {"eps": 1e-3, "momentum": 0.5}),
    ("BatchNorm3d", (2, 3, 2, 2, 3), {}),
    ("BatchNorm2d", (2, 3, 3, 3), {"affine": False}),
    ("BatchNorm1d", (5, 3), {"track_running_stats": False}),
    ("BatchNorm1d", (5, 3, 2), {"bias": False}),
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls,shape,kwargs", BN_CASES,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(BN_CASES)])
def test_batchnorm_training_steps_and_eval(cls, shape, kwargs, dtype, compiled, rng):
    """Several train steps (outputs, gradients, running statistics), then eval."""
    mods = {L: make_bn(L, cls, dtype, **kwargs) for L in (ca, torch)}
    for step in range(3):
        x = rng.standard_normal(shape) * (step + 1) + step
        check_against_torch(lambda L, t: mods[L](t), [x], dtype, compiled, msg=f"step {step}")
        check_params_and_buffers(mods, dtype)
    for m in mods.values():
        m.eval()
    x = rng.standard_normal(shape)
    check_against_torch(lambda L, t: mods[L](t), [x], dtype, compiled, msg="eval")
    check_params_and_buffers(mods, dtype)


def check_params_and_buffers(mods, dtype):
    ours, theirs = mods[ca], mods[torch]
    assert len(list(ours.named_buffers())) == len(list(theirs.named_buffers()))
    tol = dict(rtol=1e-5, atol=1e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    for (name, c), (name_t, t) in zip(ours.named_buffers(), theirs.named_buffers()):
        assert name == name_t
        assert_close(c, t, msg=name, **tol)
        assert c.grad_fn is None and not c.requires_grad, f"{name} recorded autograd"
    for (name, c), (_, t) in zip(ours.named_parameters(), theirs.named_parameters()):
        assert_close(c.grad, t.grad, msg=f"{name}.grad")


@pytest.mark.parametrize("kwargs", [{}, {"affine": False}, {"track_running_stats": False},
                                    {"bias": False}])
def test_batchnorm_state_dict_keys_and_repr(kwargs):
    for cls in ("BatchNorm1d", "BatchNorm2d", "BatchNorm3d"):
        ours, theirs = getattr(ca.nn, cls)(4, **kwargs), getattr(torch.nn, cls)(4, **kwargs)
        assert list(ours.state_dict()) == list(theirs.state_dict())
        assert [n for n, _ in ours.named_parameters()] == \
            [n for n, _ in theirs.named_parameters()]
        assert repr(ours) == repr(theirs)
        for key, value in theirs.state_dict().items():
            assert_close(ours.state_dict()[key], value, msg=key)


def test_batchnorm_load_state_dict_and_double_keep_counter(rng):
    theirs = torch.nn.BatchNorm1d(3)
    theirs(torch.tensor(rng.standard_normal((4, 3)), dtype=torch.float32))
    ours = ca.nn.BatchNorm1d(3)
    ours.load_state_dict({k: ca.tensor(to_np(v)) for k, v in theirs.state_dict().items()})
    for key, value in theirs.state_dict().items():
        assert_close(ours.state_dict()[key], value, msg=key)
    ours.double()
    theirs.double()
    assert ours.num_batches_tracked.dtype == ca.int64
    assert ours.running_mean.dtype == ca.float64
    assert theirs.num_batches_tracked.dtype == torch.int64


def test_batchnorm_eval_without_running_stats_uses_batch(rng):
    x = rng.standard_normal((4, 3))
    mods = {L: L.nn.BatchNorm1d(3, track_running_stats=False).eval() for L in (ca, torch)}
    check_against_torch(lambda L, t: mods[L](t), [x], "float32")


def test_running_stats_record_no_graph(rng):
    bn = ca.nn.BatchNorm1d(3, dtype=ca.float64)
    x = ca.tensor(rng.standard_normal((4, 3)), requires_grad=True)
    bn(x).sum().backward()
    assert bn.running_mean.grad_fn is None and bn.running_var.grad_fn is None
    assert not bn.running_mean.requires_grad
    assert int(bn.num_batches_tracked) == 1


BAD_CALLS = {
    "bn_one_value": lambda L: L.nn.functional.batch_norm(
        L.ones(1, 3), L.zeros(3), L.ones(3), training=True),
    "bn_eval_no_stats": lambda L: L.nn.functional.batch_norm(L.ones(2, 3), None, None),
    "bn_stat_size": lambda L: L.nn.functional.batch_norm(L.ones(2, 4), L.zeros(3), L.ones(3)),
    "bn1d_dims": lambda L: L.nn.BatchNorm1d(3)(L.ones(2, 3, 4, 5)),
    "bn2d_dims": lambda L: L.nn.BatchNorm2d(3)(L.ones(2, 3, 4)),
    "bn3d_dims": lambda L: L.nn.BatchNorm3d(3)(L.ones(2, 3, 4, 4)),
    "group_norm_groups": lambda L: L.nn.functional.group_norm(L.ones(2, 6, 3), 4),
    "group_norm_1d": lambda L: L.nn.functional.group_norm(L.ones(2), 1),
    "group_norm_module": lambda L: L.nn.GroupNorm(4, 6),
    "rms_norm_shape": lambda L: L.nn.functional.rms_norm(L.ones(2, 3), [4]),
    "dropout1d_dims": lambda L: L.nn.functional.dropout1d(L.ones(2, 3, 4, 5)),
    "dropout2d_p": lambda L: L.nn.functional.dropout2d(L.ones(2, 3, 4, 5), p=2),
    "instance_norm_spatial": lambda L: L.nn.functional.instance_norm(L.ones(2, 3, 1)),
    "instance_norm_no_stats": lambda L: L.nn.functional.instance_norm(
        L.ones(2, 3, 4), use_input_stats=False),
    "instance_norm_module_dims": lambda L: L.nn.InstanceNorm2d(3)(L.ones(2, 3)),
    "instance_norm_affine_channels": lambda L: L.nn.InstanceNorm1d(4, affine=True)(
        L.ones(2, 3, 5)),
    "dropout_module_p": lambda L: L.nn.Dropout2d(p=-0.1),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1] == expected[1].replace("torch.Size", "cagrad.Size"), (got, expected)


INSTANCE_CASES = [
    ("InstanceNorm1d", (2, 3, 5), {}),
    ("InstanceNorm1d", (3, 5), {"affine": True}),  # unbatched
    ("InstanceNorm2d", (2, 3, 4, 3), {"affine": True, "track_running_stats": True}),
    ("InstanceNorm2d", (3, 4, 3), {"track_running_stats": True, "momentum": None}),
    ("InstanceNorm3d", (2, 3, 2, 3, 2), {"track_running_stats": True, "momentum": 0.3}),
]


@COMPILED
@pytest.mark.parametrize("cls,shape,kwargs", INSTANCE_CASES,
                         ids=[f"{c}-{i}" for i, (c, _, _) in enumerate(INSTANCE_CASES)])
def test_instancenorm_training_steps_and_eval(cls, shape, kwargs, compiled, rng):
    mods = {L: make_bn(L, cls, "float64", **kwargs) for L in (ca, torch)}
    assert repr(mods[ca]) == repr(mods[torch])
    assert list(mods[ca].state_dict()) == list(mods[torch].state_dict())
    for step in range(2):
        x = rng.standard_normal(shape) * (step + 1) + step
        check_against_torch(lambda L, t: mods[L](t), [x], "float64", compiled)
        check_params_and_buffers(mods, "float64")
    for m in mods.values():
        m.eval()
    check_against_torch(lambda L, t: mods[L](t), [rng.standard_normal(shape)], "float64",
                        compiled)


def test_instancenorm_channel_mismatch_warns_without_affine():
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="does not match num_features"):
            L.nn.InstanceNorm1d(4)(L.ones(2, 3, 5))


# --- GroupNorm / RMSNorm modules ----------------------------------------------------------

@COMPILED
def test_groupnorm_and_rmsnorm_modules(compiled, rng):
    x = rng.standard_normal((2, 4, 3))
    for make in (lambda L: L.nn.GroupNorm(2, 4, dtype=L.float64),
                 lambda L: L.nn.GroupNorm(4, 4, affine=False),
                 lambda L: L.nn.RMSNorm([4, 3], dtype=L.float64),
                 lambda L: L.nn.RMSNorm(3, eps=1e-3, elementwise_affine=False)):
        mods = {L: make(L) for L in (ca, torch)}
        assert repr(mods[ca]) == repr(mods[torch])
        assert list(mods[ca].state_dict()) == list(mods[torch].state_dict())
        dtype = "float64" if mods[torch].state_dict() else "float32"
        check_against_torch(lambda L, t: mods[L](t), [x], dtype, compiled)
        for (n, c), (_, t) in zip(mods[ca].named_parameters(), mods[torch].named_parameters()):
            assert_close(c.grad, t.grad, msg=n)


# --- dropout family -----------------------------------------------------------------------

@pytest.mark.parametrize("fn,shape,channel_dims", [
    ("dropout1d", (4, 6, 5), 2), ("dropout1d", (6, 5), 1), ("dropout2d", (4, 6, 3, 3), 2),
    ("dropout3d", (3, 4, 2, 3, 2), 2), ("dropout3d", (4, 2, 3, 2), 1)])
def test_channel_dropout_zeroes_whole_channels(fn, shape, channel_dims, rng):
    x = ca.tensor(rng.uniform(1, 2, shape), requires_grad=True)
    p = 0.4
    out = getattr(ca.nn.functional, fn)(x, p)
    values = to_np(out).reshape(*shape[:channel_dims], -1)
    kept = np.all(values != 0, axis=-1)
    dropped = np.all(values == 0, axis=-1)
    assert np.all(kept | dropped), "a channel was partly dropped"
    assert kept.any() and dropped.any()
    expected = to_np(x).reshape(values.shape) / (1 - p)
    np.testing.assert_allclose(values[kept], expected[kept], rtol=1e-6)
    out.sum().backward()  # the gradient is the same mask and scale
    grad = to_np(x.grad).reshape(values.shape)
    np.testing.assert_allclose(grad[kept], 1 / (1 - p), rtol=1e-6)
    assert np.all(grad[dropped] == 0)


def test_channel_dropout_rate_is_p():
    out = ca.nn.functional.dropout2d(ca.ones(200, 50, 1, 1), 0.3)
    assert abs(float((out == 0).float().mean()) - 0.3) < 0.02


def test_dropout2d_3d_input_warns_and_is_1d_dropout(rng):
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="assuming that channel-wise 1D dropout"):
            out = L.nn.functional.dropout2d(L.ones(4, 5, 6), 0.5)
        rows = to_np(out).reshape(20, 6)
        assert np.all((rows == 0).all(1) | (rows == 2).all(1))
    for L in (ca, torch):
        with pytest.warns(UserWarning, match="Received a 2-D input to dropout2d"):
            L.nn.functional.dropout2d(L.ones(4, 5), 0.5)


def test_dropout_identity_in_eval_and_p_edges(rng):
    x = ca.tensor(rng.standard_normal((2, 3, 4)))
    for fn in ("dropout1d", "dropout2d", "alpha_dropout", "feature_alpha_dropout"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            f = getattr(ca.nn.functional, fn)
            assert f(x, 0.5, training=False) is x
            assert f(x, 0.0, training=True) is x
            assert float(f(x, 1.0, training=True).abs().sum()) == 0.0
    for cls in ("Dropout1d", "Dropout2d", "Dropout3d", "AlphaDropout", "FeatureAlphaDropout"):
        m = getattr(ca.nn, cls)(0.3)
        assert repr(m) == repr(getattr(torch.nn, cls)(0.3))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            np.testing.assert_array_equal(to_np(m.eval()(x)), to_np(x))


def test_alpha_dropout_keeps_mean_and_variance():
    p, alpha = 0.3, 1.7580993408473766
    out = to_np(ca.nn.functional.alpha_dropout(ca.randn(400, 250), p, training=True))
    # a dropped unit becomes the constant -alpha * a * (1 - p), a fraction p of them
    a = 1 / np.sqrt((alpha * alpha * p + 1) * (1 - p))
    dropped = np.isclose(out, -alpha * a * (1 - p), rtol=1e-6, atol=0)
    assert abs(dropped.mean() - p) < 0.01
    assert abs(out.mean()) < 0.02 and abs(out.std() - 1) < 0.02


def test_inplace_dropout_is_refused():
    with pytest.raises(NotImplementedError, match="inplace=True"):
        ca.nn.functional.dropout2d(ca.ones(2, 3, 4, 4), inplace=True)


def test_cumulative_momentum_is_no_graph_break(rng):
    bn = ca.nn.BatchNorm1d(3, momentum=None)
    x = ca.tensor(rng.standard_normal((4, 3)).astype("float32"), requires_grad=True)
    report = ca.explain(lambda a: bn(a).sum())(x)
    assert report.graph_break_count == 0


# --- batch_norm's C op (training mode): more layouts and parameter combinations -------------

def bn_train_params(weight, bias):
    """bn_train with only some of weight and bias (the op's flags)."""
    def fn(L, x, w, b):
        return L.nn.functional.batch_norm(x, None, None, w if weight else None,
                                          b if bias else None, training=True, eps=1e-4)
    return fn


# name: (fn, shape, inputs that get a gradient); runs of 16 or more values per channel take
# the kernel's vector path, shorter ones its plain loop
OP_CASES = {
    "batch_norm_train_nc_long": (bn_train, (40, 3), [0, 1, 2]),
    "batch_norm_train_3d": (bn_train, (3, 3, 5), [0, 1, 2]),
    "batch_norm_train_4d_long_runs": (bn_train, (4, 3, 6, 6), [0, 1, 2]),
    "batch_norm_train_5d": (bn_train, (2, 3, 2, 3, 2), [0, 1, 2]),
    "batch_norm_train_no_affine": (bn_train_params(False, False), (3, 3, 4, 5), [0]),
    "batch_norm_train_weight_only": (bn_train_params(True, False), (4, 3, 5), [0, 1]),
    "batch_norm_train_bias_only": (bn_train_params(False, True), (4, 3, 5), [0, 2]),
    "instance_norm_long_runs": (lambda L, x, w, b: L.nn.functional.instance_norm(
        x, weight=w, bias=b), (2, 3, 5, 4), [0, 1, 2]),
}


def op_case_inputs(rng, name):
    fn, shape, needs_grad = OP_CASES[name]
    x = rng.standard_normal(shape) * 2 + 0.5
    return fn, needs_grad, [x, rng.uniform(0.5, 1.5, shape[1]), rng.standard_normal(shape[1])]


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_batch_norm_op_matches_torch(name, dtype, compiled, rng):
    fn, needs_grad, inputs = op_case_inputs(rng, name)
    check_against_torch(fn, inputs, dtype, compiled, needs_grad, msg=name)


@COMPILED
@pytest.mark.parametrize("name", sorted(OP_CASES))
def test_batch_norm_op_gradcheck_float64(name, compiled, rng):
    fn, needs_grad, inputs = op_case_inputs(rng, name)
    check_numeric_gradient(fn, inputs, compiled, needs_grad)


def test_batch_norm_is_one_node_named_as_torch(rng):
    x = rng.standard_normal((4, 3, 2))
    names = []
    for L in (ca, torch):
        t = L.tensor(x, requires_grad=True)
        out = L.nn.functional.batch_norm(t, None, None, L.ones(3, dtype=t.dtype),
                                         training=True)
        names.append(out.grad_fn.name())
        inner = L.nn.functional.instance_norm(t).grad_fn
        names.append((inner.name(), inner.next_functions[0][0].name()))
    assert names[0] == names[2] == "NativeBatchNormBackward0"
    assert names[1] == names[3] == ("ViewBackward0", "NativeBatchNormBackward0")


def test_batch_norm_params_of_other_shapes_forward(rng):
    # weight and bias of C values in other shapes: PyTorch's forward accepts them (its
    # backward does not), so only values are compared
    x, w, b = rng.standard_normal((4, 3, 2)), rng.uniform(0.5, 1.5, 3), rng.standard_normal(3)
    outs = [L.nn.functional.batch_norm(L.tensor(x), None, None, L.tensor(w).reshape(3, 1),
                                       L.tensor(b).reshape(1, 3), training=True)
            for L in (ca, torch)]
    assert_close(outs[0], outs[1], rtol=1e-12, atol=1e-12)


def test_batch_norm_float32_offset_data_matches_torch(rng):
    # a large shift over a unit spread: the statistics are two-pass, as PyTorch's
    x = (rng.standard_normal((8, 4, 5, 5)) + 300).astype("float32")
    outs = [L.nn.functional.batch_norm(L.tensor(x), None, None, training=True)
            for L in (ca, torch)]
    assert_close(outs[0], outs[1], rtol=0, atol=2e-4)


BN_OP_BAD_CALLS = {
    "bn_weight_size": lambda L: L.nn.functional.batch_norm(
        L.ones(2, 3, 4), None, None, L.ones(4), training=True),
    "bn_bias_size": lambda L: L.nn.functional.batch_norm(
        L.ones(2, 3, 4), None, None, None, L.ones(2), training=True),
    "bn_weight_float64": lambda L: L.nn.functional.batch_norm(
        L.ones(2, 3), None, None, L.ones(3, dtype=L.float64), training=True),
    "bn_input_float64": lambda L: L.nn.functional.batch_norm(
        L.ones(2, 3, dtype=L.float64), None, None, None, L.ones(3), training=True),
    "bn_int64": lambda L: L.nn.functional.batch_norm(
        L.ones(2, 3, dtype=L.int64), None, None, training=True),
    "bn_1d_training": lambda L: L.nn.functional.batch_norm(L.ones(5), None, None,
                                                           training=True),
    "bn_one_value_3d": lambda L: L.nn.functional.batch_norm(
        L.ones(1, 3, 1), None, None, training=True),
}


@pytest.mark.parametrize("case", sorted(BN_OP_BAD_CALLS))
def test_batch_norm_op_errors_match_torch(case):
    got, expected = error_of(ca, BN_OP_BAD_CALLS[case]), error_of(torch, BN_OP_BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1] == expected[1].replace("torch.Size", "cagrad.Size"), (got, expected)
