"""Pooling against PyTorch 2.13: nn.functional's max_pool2d, avg_pool2d,
adaptive_avg_pool2d, max_pool1d, avg_pool1d and their modules.

Values, indices and gradients in float32 and float64, eager and under compiled autograd,
batched and unbatched; float64 gradients against central differences; ties and NaN in
max windows; ceil_mode, padding, dilation, count_include_pad, divisor_override; argument
errors with PyTorch's exception types; module reprs.
"""

import numpy as np
import pytest
import torch

from helpers import STANDIN, assert_close, backward_checked, ca, compiled_ctx

MODES = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])

# (name, input shape, call(F, x) -> result): F is cagrad's or torch's nn.functional
CASES = [
    ("max_2x2", (2, 3, 6, 8), lambda F, x: F.max_pool2d(x, 2)),
    ("max_overlap_pad", (2, 3, 7, 6), lambda F, x: F.max_pool2d(x, 3, stride=2, padding=1)),
    ("max_dilation_ceil", (1, 2, 9, 7), lambda F, x: F.max_pool2d(x, (3, 2), (2, 1), (1, 1),
                                                                   (2, 1), ceil_mode=True)),
    ("max_unbatched", (3, 5, 5), lambda F, x: F.max_pool2d(x, [2], stride=[1, 2])),
    ("max_indices", (2, 2, 6, 6), lambda F, x: F.max_pool2d(x, 3, 2, 1, return_indices=True)[0]),
    ("avg_2x2", (2, 3, 6, 8), lambda F, x: F.avg_pool2d(x, 2)),
    ("avg_pad", (2, 3, 7, 6), lambda F, x: F.avg_pool2d(x, 3, stride=2, padding=1)),
    ("avg_pad_excluded_ceil", (2, 3, 7, 6), lambda F, x: F.avg_pool2d(
        x, 3, 2, 1, ceil_mode=True, count_include_pad=False)),
    ("avg_divisor", (1, 2, 6, 6), lambda F, x: F.avg_pool2d(x, (2, 3), (1, 2),
                                                            divisor_override=4)),
    ("avg_unbatched_ceil", (3, 7, 7), lambda F, x: F.avg_pool2d(x, 2, ceil_mode=True)),
    ("adaptive_even", (2, 3, 8, 6), lambda F, x: F.adaptive_avg_pool2d(x, (4, 3))),
    ("adaptive_uneven", (2, 3, 7, 5), lambda F, x: F.adaptive_avg_pool2d(x, (3, 2))),
    ("adaptive_global", (2, 4, 5, 5), lambda F, x: F.adaptive_avg_pool2d(x, 1)),
    ("adaptive_none_unbatched", (3, 6, 5), lambda F, x: F.adaptive_avg_pool2d(x, (None, 4))),
    ("max_pool1d", (2, 3, 9), lambda F, x: F.max_pool1d(x, 3, stride=2, padding=1)),
    ("avg_pool1d", (3, 8), lambda F, x: F.avg_pool1d(x, 2, ceil_mode=True)),
]
IDS = [c[0] for c in CASES]
# A global average is a mean in PyTorch and here; cagrad names every mean's node
# MeanBackward0, where PyTorch names a mean over dims MeanBackward1 (ops_reduce.c).
OUR_NODE_NAMES = {"adaptive_global": "MeanBackward0"}


@MODES
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name,shape,fn", CASES, ids=IDS)
def test_values_and_gradients_match_torch(name, shape, fn, dtype, compiled, rng):
    x = rng.standard_normal(shape).astype(dtype)
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    cy, ty = fn(ca.nn.functional, cx), fn(torch.nn.functional, tx)
    assert_close(cy, ty, msg=f"{name} values")
    if "1d" not in name:  # the 1-d forms run the 2-d op on a view (docs/python-api.md)
        assert cy.grad_fn.name() == OUR_NODE_NAMES.get(name, ty.grad_fn.name())
    g = rng.standard_normal(tuple(ty.shape)).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((cy * ca.tensor(g)).sum(), compiled)
    (ty * torch.tensor(g)).sum().backward()
    assert_close(cx.grad, tx.grad, msg=f"{name} gradient")


@MODES
@pytest.mark.parametrize("name,shape,fn", CASES, ids=IDS)
def test_gradcheck_float64(name, shape, fn, compiled, rng):
    x = rng.standard_normal(shape)
    F = ca.nn.functional
    g = ca.tensor(rng.standard_normal(tuple(fn(torch.nn.functional, torch.tensor(x)).shape)))

    def loss(a):
        return float((fn(F, ca.tensor(a)) * g).sum())

    cx = ca.tensor(x, requires_grad=True)
    with compiled_ctx(compiled):
        backward_checked((fn(F, cx) * g).sum(), compiled)
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        hi, lo = x.copy(), x.copy()
        hi[i] += 1e-6
        lo[i] -= 1e-6
        numeric[i] = (loss(hi) - loss(lo)) / 2e-6
    np.testing.assert_allclose(cx.grad.numpy(), numeric, rtol=1e-5, atol=1e-7, err_msg=name)


def test_max_pool_indices_ties_and_nan_like_torch():
    x = np.array([[[[1.0, 1.0, 0.0, 2.0],
                    [1.0, 0.5, 2.0, 2.0],
                    [np.nan, 3.0, -1.0, -1.0],
                    [3.0, np.nan, -1.0, -1.0]]]])
    for kwargs in ({}, {"stride": 1}, {"padding": 1}):
        ours = ca.nn.functional.max_pool2d(ca.tensor(x), 2, return_indices=True, **kwargs)
        theirs = torch.nn.functional.max_pool2d(torch.tensor(x), 2, return_indices=True,
                                                **kwargs)
        np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
        assert ours[1].tolist() == theirs[1].tolist()
        assert ours[1].dtype == ca.int64


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("shape,kwargs", [
    ((2, 3, 9, 600), {"kernel_size": 2}),  # 300 outputs a row: more than one run of them
    ((2, 3, 9, 31), {"kernel_size": 3, "stride": 2, "padding": 1}),
    ((1, 2, 11, 40), {"kernel_size": (2, 3), "stride": (1, 3), "ceil_mode": True}),
    ((1, 2, 12, 41), {"kernel_size": 3, "stride": 1, "dilation": 2}),
], ids=["2x2", "3x3_s2_pad", "s3_ceil", "dilated"])
def test_max_pool_ties_and_nan_in_wide_rows_like_torch(shape, kwargs, dtype, rng):
    # small integers: many ties within a window; NaNs, some two to a window
    x = rng.integers(-3, 4, size=shape).astype(dtype)
    x[rng.random(shape) < 0.05] = np.nan
    ours = ca.nn.functional.max_pool2d(ca.tensor(x), return_indices=True, **kwargs)
    theirs = torch.nn.functional.max_pool2d(torch.tensor(x), return_indices=True, **kwargs)
    np.testing.assert_array_equal(ours[0].numpy(), theirs[0].numpy())
    np.testing.assert_array_equal(ours[1].numpy(), theirs[1].numpy())


def test_tied_max_gradient_goes_to_the_first_like_torch():
    x = np.ones((1, 1, 4, 4))
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ca.nn.functional.max_pool2d(cx, 3, stride=1).sum().backward()
    torch.nn.functional.max_pool2d(tx, 3, stride=1).sum().backward()
    assert cx.grad.tolist() == tx.grad.tolist()


def test_modules_match_torch(rng):
    x = rng.standard_normal((2, 3, 9, 8)).astype(np.float32)
    pairs = [
        (ca.nn.MaxPool2d(3, 2, 1), torch.nn.MaxPool2d(3, 2, 1)),
        (ca.nn.MaxPool2d((2, 3), ceil_mode=True), torch.nn.MaxPool2d((2, 3), ceil_mode=True)),
        (ca.nn.AvgPool2d(3, 1, 1, count_include_pad=False),
         torch.nn.AvgPool2d(3, 1, 1, count_include_pad=False)),
        (ca.nn.AdaptiveAvgPool2d((4, None)), torch.nn.AdaptiveAvgPool2d((4, None))),
        (ca.nn.AdaptiveAvgPool2d(1), torch.nn.AdaptiveAvgPool2d(1)),
    ]
    for ours, theirs in pairs:
        assert repr(ours) == repr(theirs)
        assert_close(ours(ca.tensor(x)), theirs(torch.tensor(x)), msg=repr(theirs))
    x1 = x.reshape(2, 3, 72)
    for ours, theirs in ((ca.nn.MaxPool1d(4, 3), torch.nn.MaxPool1d(4, 3)),
                         (ca.nn.AvgPool1d(3, padding=1), torch.nn.AvgPool1d(3, padding=1))):
        assert repr(ours) == repr(theirs)
        assert_close(ours(ca.tensor(x1)), theirs(torch.tensor(x1)), msg=repr(theirs))
    values, indices = ca.nn.MaxPool2d(2, return_indices=True)(ca.tensor(x))
    tvalues, tindices = torch.nn.MaxPool2d(2, return_indices=True)(torch.tensor(x))
    assert indices.tolist() == tindices.tolist()


def test_a_small_cnn_trains_like_torch(rng):
    """conv -> relu -> max pool -> conv -> avg pool -> adaptive pool -> linear: gradients."""
    def build(L):
        L.manual_seed(0)
        return L.nn.Sequential(L.nn.Conv2d(2, 4, 3, padding=1), L.nn.ReLU(), L.nn.MaxPool2d(2),
                               L.nn.Conv2d(4, 4, 3), L.nn.AvgPool2d(2, ceil_mode=True),
                               L.nn.AdaptiveAvgPool2d(1), L.nn.Flatten(), L.nn.Linear(4, 3))

    ours, theirs = build(ca), build(torch)
    for p, q in zip(ours.parameters(), theirs.parameters()):
        p.data.copy_(ca.tensor(q.detach().numpy()))
    x = rng.standard_normal((3, 2, 12, 12)).astype(np.float32)
    for compiled in (False, True):
        with compiled_ctx(compiled):
            backward_checked((ours(ca.tensor(x)) ** 2).sum(), compiled)
        (theirs(torch.tensor(x)) ** 2).sum().backward()
        for p, q in zip(ours.parameters(), theirs.parameters()):
            assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5)
            p.grad, q.grad = None, None


BAD = [
    (lambda F, x: F.max_pool2d(x, 2, padding=2), "at most half"),
    (lambda F, x: F.avg_pool2d(x, 2, padding=2), "at most half"),
    (lambda F, x: F.max_pool2d(x, 2, stride=0), "stride"),
    (lambda F, x: F.max_pool2d(x, 2, dilation=0), "dilation should be greater than zero"),
    (lambda F, x: F.max_pool2d(x[0, 0, :1, :1].reshape(1, 1, 1), 2), "Output size is too small"),
    (lambda F, x: F.avg_pool2d(x, 2, divisor_override=0), "divisor must be not zero"),
    (lambda F, x: F.max_pool2d(x, (2, 2, 2)), "kernel_size must either be a single int"),
    (lambda F, x: F.avg_pool2d(x, 2, stride=(1, 1, 1)), "stride must either be omitted"),
    (lambda F, x: F.max_pool2d(x[0, 0], 2), "3D or 4D"),
    (lambda F, x: F.adaptive_avg_pool2d(x[0, 0], 2), "Expected 3D or 4D tensor"),
]


@pytest.mark.parametrize("call,needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_arguments_fail_like_torch(call, needle):
    x = np.ones((1, 2, 5, 5), dtype=np.float32)
    with pytest.raises(Exception) as theirs:
        call(torch.nn.functional, torch.tensor(x))
    with pytest.raises(theirs.type, match=needle):
        call(ca.nn.functional, ca.tensor(x))


DYNAMIC = [
    lambda x: ca.nn.functional.max_pool2d(x, 3, 2, 1),
    lambda x: ca.nn.functional.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False),
    lambda x: ca.nn.functional.adaptive_avg_pool2d(x, (3, 2)),
    lambda x: x.cumsum(2),
    lambda x: x.sort(-1).values,
    lambda x: x.topk(2, dim=1).values,
    lambda x: x.tril(),
]


@pytest.mark.skipif(STANDIN, reason="compiled autograd's counters are cagrad's")
@pytest.mark.parametrize("k", range(len(DYNAMIC)))
def test_dynamic_batch_sizes_stay_compiled(k, rng):
    """Under dynamic=True a new batch size reuses the graph: the derivatives read their
    sizes from metas, and the saved mask and divisors share the gradient's batch dims."""
    f = DYNAMIC[k]
    for batch in (2, 3, 5):
        x = rng.standard_normal((batch, 3, 8, 7))
        eager, compiled = ca.tensor(x, requires_grad=True), ca.tensor(x, requires_grad=True)
        (f(eager) * 2).sum().backward()
        with ca.compiled_autograd.enable(dynamic=True):
            backward_checked((f(compiled) * 2).sum(), True)
        assert_close(compiled.grad, eager.grad)


@pytest.mark.skipif(STANDIN, reason="the compiled plan's steps are cagrad's")
@pytest.mark.parametrize("dilation,kernel", [(1, "scatter_add"), (2, "col2im")])
def test_max_pool_gradient_scatters_by_index_unless_dilated(dilation, kernel, rng):
    """The derivative adds each window's gradient at its winner's index, as PyTorch's
    kernel does (no one-hot mask of kh*kw times the output, no fold). With a dilation a
    window may miss the input (index -1), and the mask and fold are kept there."""
    x = rng.standard_normal((4, 3, 12, 12))
    ours, theirs = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    ca.compiled_autograd.set_profiling(True)
    try:
        with ca.compiled_autograd.enable():
            backward_checked(ca.nn.functional.max_pool2d(ours, 3, 2, 1, dilation).pow(2).sum(),
                             True)
        steps = ca.compiled_autograd.last_profile()["top_steps"]
    finally:
        ca.compiled_autograd.set_profiling(False)
    torch.nn.functional.max_pool2d(theirs, 3, 2, 1, dilation).pow(2).sum().backward()
    assert_close(ours.grad, theirs.grad)
    pool_steps = {k for node, k, _ in steps if node == "MaxPool2DWithIndicesBackward0"}
    assert kernel in pool_steps, steps
