"""conv2d (nn.functional.conv2d, nn.Conv2d) and index_fill against PyTorch 2.13.

Values and the gradient of every input in float32 and float64, eagerly and under
cagrad.compiled_autograd.enable() (where the backward must be compiled: one capture or
cache hit, no eager fallback), over strides, paddings (ints, pairs, 'valid', 'same'),
dilations, groups, with and without bias, batched and unbatched input; float64 gradients
against central differences; a batch size that changes (the compiled graph goes dynamic
and stays compiled); errors with PyTorch's exception types and messages; the module's
parameters, initialisation and repr.
"""

import math

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, counters,
                     numeric_gradient)

DTYPES = ["float32", "float64"]
NP = {"float32": np.float32, "float64": np.float64}


def lib_conv(L, x, w, b, kwargs):
    return L.nn.functional.conv2d(x, w, b, **kwargs)


def run_conv(L, xs, ws, bs, g, kwargs, compiled=False, dynamic=False):
    """Forward and backward of sum(conv2d(x, w, b) * g) in library L; the output and the
    gradients of x, w and b (None where b is None)."""
    x = L.tensor(xs, requires_grad=True)
    w = L.tensor(ws, requires_grad=True)
    b = None if bs is None else L.tensor(bs, requires_grad=True)
    y = lib_conv(L, x, w, b, kwargs)
    loss = (y * L.tensor(g)).sum()
    if L is torch:
        loss.backward()
    else:
        with compiled_ctx(compiled, dynamic):
            backward_checked(loss, compiled)
    return y, x.grad, w.grad, None if b is None else b.grad


def check_conv(rng, dtype, xshape, wshape, bias, kwargs, compiled, dynamic=False):
    xs = rng.standard_normal(xshape).astype(NP[dtype])
    ws = rng.standard_normal(wshape).astype(NP[dtype])
    bs = rng.standard_normal(wshape[0]).astype(NP[dtype]) if bias else None
    ty = lib_conv(torch, torch.tensor(xs), torch.tensor(ws),
                  None if bs is None else torch.tensor(bs), kwargs)
    g = rng.standard_normal(tuple(ty.shape)).astype(NP[dtype])
    ref = run_conv(torch, xs, ws, bs, g, kwargs)
    got = run_conv(ca, xs, ws, bs, g, kwargs, compiled, dynamic)
    tol = TOL_SUM[dtype]
    for name, c, t in zip(("output", "grad input", "grad weight", "grad bias"), got, ref):
        assert_close(c, t, msg=f"conv2d{xshape}{wshape} {kwargs} {name}", **tol)
    if len(xshape) == 4:  # (unbatched: a squeeze's node, SqueezeBackward1 in torch)
        assert type(got[0].grad_fn).__name__ == type(ref[0].grad_fn).__name__


# (input shape, weight shape, bias, kwargs)
CASES = [
    ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    ((2, 3, 7, 6), (4, 3, 3, 3), False, {}),
    ((2, 3, 8, 7), (5, 3, 3, 2), True, dict(stride=2)),
    ((2, 3, 8, 7), (5, 3, 3, 2), True, dict(stride=(2, 3), padding=(1, 2))),
    ((1, 2, 6, 6), (3, 2, 3, 3), True, dict(padding=1)),
    ((2, 2, 9, 8), (3, 2, 3, 3), False, dict(dilation=2)),
    ((2, 2, 9, 10), (3, 2, 2, 3), True, dict(stride=2, padding=2, dilation=(2, 3))),
    ((2, 4, 6, 5), (6, 2, 3, 3), True, dict(groups=2)),
    ((2, 6, 6, 6), (6, 1, 3, 3), True, dict(groups=6, padding=1)),  # depthwise
    ((2, 4, 7, 7), (4, 1, 3, 2), False, dict(groups=4, stride=2, dilation=2, padding=(1, 0))),
    ((3, 3, 5, 5), (2, 3, 1, 1), True, {}),  # 1x1
    ((2, 3, 5, 5), (2, 3, 5, 5), True, {}),  # the kernel covers the input
    ((2, 3, 6, 6), (4, 3, 3, 3), True, dict(padding="valid")),
    ((2, 3, 6, 5), (4, 3, 3, 3), True, dict(padding="same")),
    ((2, 3, 6, 5), (4, 3, 4, 2), True, dict(padding="same")),  # even kernels: odd totals
    ((2, 3, 7, 6), (4, 3, 2, 3), False, dict(padding="same", dilation=(3, 2))),
    ((2, 3, 4, 1), (4, 3, 5, 5), True, dict(padding=2)),  # taps that read only padding
    ((2, 3, 1, 1), (4, 3, 5, 5), True, dict(padding=2)),  # padding above taller than output
    ((2, 2, 1, 4), (3, 2, 3, 3), False, dict(padding=2, dilation=2)),  # the same, dilated
    ((2, 4, 5, 6), (6, 2, 3, 3), True, dict(padding=(2, 1), groups=2)),  # output > input
    ((3, 6, 5), (4, 3, 3, 3), True, dict(padding=1)),  # unbatched
    ((4, 6, 5), (4, 2, 2, 3), False, dict(stride=(1, 2), groups=2)),  # unbatched, groups
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{c[3]}" for c in CASES])
def test_conv2d_values_and_gradients(case, dtype, compiled, rng):
    check_conv(rng, dtype, *case, compiled)


def random_geometry(rng):
    """A conv2d case (input shape, weight shape, bias, kwargs) drawn over images of 1 to 20
    pixels a side (half of them at most 4), paddings up to past the kernel, strides, dilations and groups, with an output that
    exists."""
    while True:
        groups = int(rng.integers(1, 4))
        n, c, o = (int(v) for v in rng.integers(1, 4, size=3))
        h, w = (int(rng.integers(1, 5 if rng.random() < 0.5 else 21)) for _ in range(2))
        k = tuple(int(v) for v in rng.integers(1, 7, size=2))
        dilation = tuple(int(v) for v in rng.integers(1, 4, size=2))
        if rng.random() < 0.2:  # 'same': the output is the input's size
            kwargs = dict(padding="same", dilation=dilation, groups=groups)
        else:
            stride = tuple(int(v) for v in rng.integers(1, 4, size=2))
            padding = tuple(int(rng.integers(0, kk + 2)) for kk in k)
            reach = [s + 2 * p - d * (kk - 1) - 1 for s, p, d, kk in
                     zip((h, w), padding, dilation, k)]
            if min(reach) < 0:  # the kernel does not fit
                continue
            kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
        return (n, c * groups, h, w), (o * groups, c) + k, bool(rng.random() < 0.5), kwargs


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("seed", range(12))
def test_conv2d_random_geometries_match_torch(seed, compiled):
    """Values and gradients against torch over drawn geometries: the kernels' edge cases
    (a padding taller than the output, taps that read only padding, one-pixel images,
    rows narrower or wider than a vector) in both dtypes."""
    rng = np.random.default_rng(1000 + seed)
    for _ in range(10):
        case = random_geometry(rng)
        for dtype in DTYPES:
            check_conv(rng, dtype, *case, compiled)


def test_conv2d_node_name_and_grad_fn():
    x = ca.randn(2, 3, 5, 5, requires_grad=True)
    w = ca.randn(4, 3, 3, 3, requires_grad=True)
    y = ca.nn.functional.conv2d(x, w)
    assert type(y.grad_fn).__name__ == "ConvolutionBackward0"
    assert y.grad_fn.name() == "ConvolutionBackward0"
    assert tuple(y.shape) == (2, 4, 3, 3)
    with ca.no_grad():
        assert ca.nn.functional.conv2d(x, w).grad_fn is None


def test_conv2d_noncontiguous_inputs(rng):
    xs = rng.standard_normal((2, 3, 6, 7))
    ws = rng.standard_normal((4, 3, 3, 2))
    outs = []
    for L in (ca, torch):
        x = L.tensor(xs.transpose(0, 1, 3, 2).copy(), requires_grad=True)
        w = L.tensor(ws.transpose(1, 0, 2, 3).copy(), requires_grad=True)
        y = L.nn.functional.conv2d(x.transpose(2, 3), w.transpose(0, 1), stride=(2, 1))
        (y * y).sum().backward()
        outs.append((y, x.grad, w.grad))
    for c, t in zip(*outs):
        assert_close(c, t, **TOL_SUM["float64"])


def test_conv2d_only_some_inputs_require_grad(rng):
    xs, ws, bs = rng.standard_normal((2, 3, 5, 5)), rng.standard_normal((2, 3, 3, 3)), np.ones(2)
    for compiled in (False, True):
        for need in ("x", "w", "b"):
            grads = []
            for L in (ca, torch):
                x = L.tensor(xs, requires_grad=need == "x")
                w = L.tensor(ws, requires_grad=need == "w")
                b = L.tensor(bs, requires_grad=need == "b")
                y = L.nn.functional.conv2d(x, w, b, padding=1)
                with compiled_ctx(compiled and L is ca):
                    if L is ca:
                        backward_checked((y * y).sum(), compiled)
                    else:
                        (y * y).sum().backward()
                grads.append({"x": x, "w": w, "b": b}[need].grad)
            assert_close(grads[0], grads[1], msg=f"only {need}", **TOL_SUM["float64"])


GRADCHECK = [
    ((1, 2, 5, 4), (3, 2, 2, 3), dict(stride=(2, 1), padding=1, dilation=(1, 2))),
    ((2, 4, 4, 5), (2, 2, 3, 3), dict(groups=2, padding=(0, 1))),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", GRADCHECK, ids=["strided", "groups"])
def test_conv2d_gradcheck_float64(case, compiled, rng):
    xshape, wshape, kwargs = case
    x0, w0 = rng.standard_normal(xshape), rng.standard_normal(wshape)
    b0 = rng.standard_normal(wshape[0])
    F = ca.nn.functional
    out_shape = tuple(F.conv2d(ca.tensor(x0), ca.tensor(w0), **kwargs).shape)
    g = ca.tensor(rng.standard_normal(out_shape))

    def loss(x, w, b):
        return float((F.conv2d(ca.tensor(x), ca.tensor(w), ca.tensor(b), **kwargs) * g).sum())

    x, w, b = (ca.tensor(a, requires_grad=True) for a in (x0, w0, b0))
    with compiled_ctx(compiled):
        backward_checked((F.conv2d(x, w, b, **kwargs) * g).sum(), compiled)
    numeric = [numeric_gradient(lambda a: loss(a, w0, b0), x0),
               numeric_gradient(lambda a: loss(x0, a, b0), w0),
               numeric_gradient(lambda a: loss(x0, w0, a), b0)]
    for name, t, n in zip("xwb", (x, w, b), numeric):
        np.testing.assert_allclose(t.grad.numpy(), n, rtol=1e-6, atol=1e-7, err_msg=name)


# 3x3 kernels at unit stride with 16 or more channels per group, in and out: cagrad runs
# them (forward, grad_input and grad_weight) by Winograd's F(2x2, 3x3)
WINOGRAD_CASES = [
    ((2, 16, 9, 7), (24, 16, 3, 3), dict(padding=1)),
    ((3, 32, 8, 8), (32, 32, 3, 3), {}),  # odd output sizes: partial tiles
    ((2, 64, 16, 16), (64, 64, 3, 3), dict(padding=1)),
    ((2, 32, 6, 5), (32, 16, 3, 3), dict(padding=(2, 1), groups=2)),
]


def conv_errors(L, xs, ws, g, kwargs, ref):
    """The largest error of L's output and gradients (float32) against ref's (float64)."""
    x = L.tensor(xs, requires_grad=True)
    w = L.tensor(ws, requires_grad=True)
    y = L.nn.functional.conv2d(x, w, **kwargs)
    (y * L.tensor(g)).sum().backward()
    got = [y.detach().numpy(), x.grad.numpy(), w.grad.numpy()]
    return [float(np.abs(a.astype(np.float64) - r).max()) for a, r in zip(got, ref)]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("case", WINOGRAD_CASES, ids=[str(c[0]) for c in WINOGRAD_CASES])
def test_conv2d_winograd_float32_error_is_rounding(case, compiled, rng):
    """Judged by a float64 oracle (torch in float64 on the same rounded values), as the
    random-graph tests judge float32: cagrad's float32 error is at most twice torch's own
    float32 error, with a floor of 16 ulps of the values' scale. (Compared with torch's
    float32 directly, both libraries' rounding exceeds TOL_SUM at these sizes.)"""
    xshape, wshape, kwargs = case
    xs = rng.standard_normal(xshape).astype(np.float32)
    ws = rng.standard_normal(wshape).astype(np.float32)
    yshape = tuple(torch.nn.functional.conv2d(torch.tensor(xs), torch.tensor(ws), **kwargs).shape)
    g = rng.standard_normal(yshape).astype(np.float32)
    x64 = torch.tensor(xs.astype(np.float64), requires_grad=True)
    w64 = torch.tensor(ws.astype(np.float64), requires_grad=True)
    y64 = torch.nn.functional.conv2d(x64, w64, **kwargs)
    (y64 * torch.tensor(g.astype(np.float64))).sum().backward()
    ref = [y64.detach().numpy(), x64.grad.numpy(), w64.grad.numpy()]
    torch_err = conv_errors(torch, xs, ws, g, kwargs, ref)
    with compiled_ctx(compiled):
        ca_err = conv_errors(ca, xs, ws, g, kwargs, ref)
    for name, c, t, r in zip(("output", "grad input", "grad weight"), ca_err, torch_err, ref):
        floor = 16 * 2.0**-24 * float(np.abs(r).max())
        assert c <= max(2 * t, floor), f"{name}: cagrad {c:.3g}, torch {t:.3g}, floor {floor:.3g}"


# (input, weight): a slab of all 8 images; the same with K = 8*9 < L = 12*12; a slab per
# image (an image's columns, 2*288 x 576, are more than a slab holds)
THREAD_SHAPES = [((8, 32, 8, 8), (32, 16, 3, 3)), ((8, 16, 12, 12), (32, 8, 3, 3)),
                 ((3, 64, 24, 24), (64, 32, 3, 3))]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shapes", THREAD_SHAPES, ids=["one-slab", "one-slab-small-k",
                                                        "slab-per-image"])
def test_conv2d_gradients_same_bits_at_1_and_2_threads(shapes, dtype, compiled, rng):
    """conv2d and grad_input run a GEMM per (image, group, block of positions), grad_weight
    adds the images' products per block of its columns, in image order, a slab of images at
    a time: the sums' order, and so their bits, must not depend on the thread count. Large
    enough that im2col and the GEMMs split their work."""
    kwargs = dict(padding=1, groups=2)
    xshape, wshape = shapes
    xs = rng.standard_normal(xshape).astype(NP[dtype])
    ws = rng.standard_normal(wshape).astype(NP[dtype])
    bs = rng.standard_normal(wshape[0]).astype(NP[dtype])
    g = rng.standard_normal((xshape[0], wshape[0]) + xshape[2:]).astype(NP[dtype])
    runs = []
    try:
        for threads in (1, 2):
            ca.set_num_threads(threads)
            runs.append(run_conv(ca, xs, ws, bs, g, kwargs, compiled))
    finally:
        ca.set_num_threads(1)
    # values against torch in float64 only: a float32 sum of ~1000 products rounds past
    # TOL_SUM's float32 bounds in both libraries (the other tests check float32 values)
    ref = run_conv(torch, xs, ws, bs, g, kwargs) if dtype == "float64" else [None] * 4
    for name, one, two, t in zip(("output", "grad input", "grad weight", "grad bias"), *runs, ref):
        np.testing.assert_array_equal(one.detach().numpy(), two.detach().numpy(), err_msg=name)
        if t is not None:
            assert_close(one, t, msg=name, **TOL_SUM[dtype])


@pytest.mark.parametrize("dynamic", [False, True], ids=["automatic", "dynamic"])
def test_conv2d_changing_batch_stays_compiled(dynamic, rng):
    """A new batch size makes the batch dim symbolic; the graph keeps compiling."""
    kwargs = dict(stride=2, padding=1, groups=2)
    for n in (2, 3, 5, 3):
        check_conv(rng, "float64", (n, 4, 7, 6), (6, 2, 3, 3), True, kwargs, True, dynamic)
    c = counters()
    assert c["eager_fallbacks"] == 0
    assert c["captures"] + c["cache_hits"] == 4
    if not dynamic:  # 2, then 3 (the batch goes dynamic), then hits for 5 and 3
        assert c["captures"] == 2 and c["cache_hits"] == 2


def test_conv2d_dynamic_image_sizes(rng):
    """With dynamic=True the image sizes are symbolic too: the output sizes are floor
    divisions of them, and the graph stays compiled."""
    for h, w in ((7, 6), (9, 8), (8, 11)):
        check_conv(rng, "float64", (2, 3, h, w), (4, 3, 3, 2), True,
                   dict(stride=(2, 3), padding=(1, 0), dilation=(1, 2)), True, True)
    assert counters()["eager_fallbacks"] == 0


def test_conv2d_same_with_dynamic_sizes_is_one_graph(rng):
    """padding='same' with an even kernel (one more padding at the end) under dynamic=True:
    one compiled graph serves every image size."""
    for h, w in ((6, 5), (8, 7), (9, 9)):
        check_conv(rng, "float64", (2, 2, h, w), (3, 2, 4, 3), True,
                   dict(padding="same", dilation=(1, 2)), True, True)
    c = counters()
    assert c["eager_fallbacks"] == 0 and c["captures"] == 1 and c["cache_hits"] == 2


def test_conv2d_in_a_model_compiled(rng):
    """conv -> relu -> conv -> flatten -> linear, trained two steps, compiled == torch."""
    xs = rng.standard_normal((3, 2, 8, 8)).astype(np.float32)
    params = {}
    for L in (torch, ca):
        L.manual_seed(0)
        m = L.nn.Sequential(L.nn.Conv2d(2, 4, 3, padding=1), L.nn.ReLU(),
                            L.nn.Conv2d(4, 4, 3, stride=2, groups=2), L.nn.Flatten(),
                            L.nn.Linear(36, 5))
        if L is ca:  # torch's initial values
            for p, q in zip(m.parameters(), params["init"]):
                with ca.no_grad():
                    p.copy_(ca.tensor(q))
        else:
            params["init"] = [p.detach().numpy().copy() for p in m.parameters()]
        opt = L.optim.SGD(m.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            loss = (m(L.tensor(xs)) ** 2).mean()
            with compiled_ctx(L is ca):
                if L is ca:
                    backward_checked(loss, True)
                else:
                    loss.backward()
            opt.step()
        params[L.__name__] = [p.detach().numpy().copy() for p in m.parameters()]
    for c, t in zip(params["cagrad"], params["torch"]):
        np.testing.assert_allclose(c, t, rtol=1e-4, atol=1e-5)


# ---------------------------------------------------------------------------------------
# Errors
# ---------------------------------------------------------------------------------------
def _x(*shape):
    return lambda L: L.ones(*shape)


ERRORS = [
    ("channels", _x(2, 4, 5, 5), _x(6, 3, 3, 3), {}, RuntimeError,
     "expected input[2, 4, 5, 5] to have 3 channels, but got 4 channels instead"),
    ("channels with groups", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(groups=2), RuntimeError,
     "to have 8 channels, but got 4 channels instead"),
    ("out channels not divisible", _x(2, 4, 5, 5), _x(5, 2, 3, 3), dict(groups=2),
     RuntimeError, "expected weight to be divisible by 2 at dimension 0"),
    ("no out channels", _x(2, 4, 5, 5), _x(0, 4, 3, 3), {}, RuntimeError,
     "expected weight to be at least 1 at dimension 0"),
    ("kernel too large", _x(2, 4, 5, 5), _x(6, 4, 7, 7), {}, RuntimeError,
     "Kernel size can't be greater than actual input size"),
    ("stride 0", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(stride=0), RuntimeError,
     "non-positive stride is not supported"),
    ("negative padding", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(padding=-1), RuntimeError,
     "negative padding is not supported"),
    ("dilation 0", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(dilation=0), RuntimeError,
     "non-positive dilation is not supported"),
    ("groups 0", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(groups=0), RuntimeError,
     "non-positive groups is not supported"),
    ("same with stride", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(padding="same", stride=2),
     RuntimeError, "padding='same' is not supported for strided convolutions"),
    ("bad padding string", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(padding="foo"), RuntimeError,
     "Invalid padding string: 'foo'"),
    ("2-d input", _x(5, 5), _x(6, 4, 3, 3), {}, RuntimeError,
     "Expected 3D (unbatched) or 4D (batched) input to conv2d, but got input of size: [5, 5]"),
    ("3 strides", _x(2, 4, 5, 5), _x(6, 4, 3, 3), dict(stride=(1, 1, 1)), RuntimeError,
     "expected stride to be a single integer value or a list of 2 values"),
]


@pytest.mark.parametrize("case", ERRORS, ids=[e[0] for e in ERRORS])
def test_conv2d_errors_match_torch(case):
    _, x, w, kwargs, exc, needle = case
    for L in (torch, ca):
        with pytest.raises(exc) as info:
            L.nn.functional.conv2d(x(L), w(L), **kwargs)
        assert needle in str(info.value), f"{L.__name__}: {info.value}"


def test_conv2d_bias_and_dtype_errors():
    x, w = ca.ones(2, 4, 5, 5), ca.ones(6, 4, 3, 3)
    with pytest.raises(RuntimeError, match=r"expected bias to be 1-dimensional with 6 "
                                           r"elements, but got bias of size \[5\]"):
        ca.nn.functional.conv2d(x, w, ca.ones(5))
    with pytest.raises(RuntimeError, match="Input type .*float32.* and weight type "
                                           ".*float64.* should be the same"):
        ca.nn.functional.conv2d(x, w.double())
    with pytest.raises(RuntimeError, match="expected a 4-D weight"):
        ca.nn.functional.conv2d(x, ca.ones(6, 4, 3))
    with pytest.raises(TypeError, match="weight"):
        ca.nn.functional.conv2d(x, [1.0])
    with pytest.raises(RuntimeError, match="must be float32 or float64"):
        ca.nn.functional.conv2d(x.long(), w.long())


@pytest.mark.parametrize("shapes", [((0, 4, 5, 5), (6, 4, 3, 3)), ((0, 2, 5, 5), (4, 2, 2, 3))])
def test_conv2d_empty_batch(shapes, compiled):
    grads = []
    for L in (ca, torch):
        x, w = L.ones(*shapes[0], requires_grad=True), L.ones(*shapes[1], requires_grad=True)
        b = L.ones(shapes[1][0], requires_grad=True)
        y = L.nn.functional.conv2d(x, w, b)
        (y * 2).sum().backward()
        grads.append((y, x.grad, w.grad, b.grad))
    for c, t in zip(*grads):
        assert_close(c, t)


# ---------------------------------------------------------------------------------------
# nn.Conv2d
# ---------------------------------------------------------------------------------------
REPRS = [
    ((4, 4, 3), {}),
    ((4, 8, (3, 5)), dict(stride=2, padding=1, dilation=2, groups=2, bias=False)),
    ((4, 4, 3), dict(padding=(1, 2))),
    ((4, 4, 3), dict(padding="same")),
    ((3, 6, 1), dict(padding="valid", dilation=(1, 2))),
]


@pytest.mark.parametrize("case", REPRS, ids=[str(r) for r in REPRS])
def test_conv2d_module_repr_and_attributes(case):
    args, kwargs = case
    c, t = ca.nn.Conv2d(*args, **kwargs), torch.nn.Conv2d(*args, **kwargs)
    assert repr(c) == repr(t)
    for name in ("in_channels", "out_channels", "kernel_size", "stride", "padding",
                 "dilation", "groups", "padding_mode", "output_padding", "transposed"):
        assert getattr(c, name) == getattr(t, name), name
    assert [n for n, _ in c.named_parameters()] == [n for n, _ in t.named_parameters()]
    for (n, p), (_, q) in zip(c.named_parameters(), t.named_parameters()):
        assert tuple(p.shape) == tuple(q.shape), n
        assert p.requires_grad


def test_conv2d_module_repr_exact():
    assert repr(ca.nn.Conv2d(4, 4, kernel_size=3)) == \
        "Conv2d(4, 4, kernel_size=(3, 3), stride=(1, 1))"


def test_conv2d_module_init_bounds():
    ca.manual_seed(1)
    m = ca.nn.Conv2d(6, 8, (3, 2), groups=2, dtype=ca.float64)
    fan_in = 3 * 3 * 2
    bound = 1 / math.sqrt(fan_in)  # kaiming_uniform(a=sqrt(5)) and the bias alike
    w, b = m.weight.detach().numpy(), m.bias.detach().numpy()
    assert w.dtype == np.float64 and w.shape == (8, 3, 3, 2)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.8 * bound
    assert np.abs(b).max() <= bound and np.abs(b).std() > 0.1 * bound
    assert ca.nn.Conv2d(2, 2, 1, bias=False).bias is None


def test_conv2d_module_forward_matches_functional(rng):
    m = ca.nn.Conv2d(4, 6, 3, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    x = ca.tensor(rng.standard_normal((2, 4, 7, 7)).astype(np.float32))
    ref = ca.nn.functional.conv2d(x, m.weight, m.bias, (2, 1), 1, (1, 2), 2)
    np.testing.assert_array_equal(m(x).detach().numpy(), ref.detach().numpy())
    tm = torch.nn.Conv2d(4, 6, 3, stride=(2, 1), padding=1, dilation=(1, 2), groups=2)
    with torch.no_grad():
        tm.weight.copy_(torch.tensor(m.weight.detach().numpy()))
        tm.bias.copy_(torch.tensor(m.bias.detach().numpy()))
    assert_close(m(x), tm(torch.tensor(x.numpy())), **TOL_SUM["float32"])


MODULE_ERRORS = [
    (dict(padding_mode="reflect"), NotImplementedError, "padding_mode='reflect'"),
    (dict(padding_mode="circular"), NotImplementedError, "padding_mode='circular'"),
    (dict(padding_mode="foo"), ValueError, "padding_mode must be one of"),
    (dict(groups=3), ValueError, "in_channels must be divisible by groups"),
    (dict(groups=0), ValueError, "groups must be a positive integer"),
    (dict(padding="same", stride=2), ValueError,
     "padding='same' is not supported for strided convolutions"),
    (dict(padding="full"), ValueError, "Invalid padding string 'full'"),
]


@pytest.mark.parametrize("case", MODULE_ERRORS, ids=[str(e[0]) for e in MODULE_ERRORS])
def test_conv2d_module_errors(case):
    kwargs, exc, needle = case
    with pytest.raises(exc, match=needle.replace("(", r"\(")):
        ca.nn.Conv2d(4, 4, 3, **kwargs)
    if exc is not NotImplementedError:
        with pytest.raises(exc):
            torch.nn.Conv2d(4, 4, 3, **kwargs)
    with pytest.raises(ValueError, match="out_channels must be divisible by groups"):
        ca.nn.Conv2d(4, 3, 3, groups=2)


def test_conv2d_is_listed():
    assert "conv2d" in ca.nn.functional.__all__
    assert "Conv2d" in ca.nn.__all__
    assert ca.conv2d is ca.nn.functional.conv2d  # torch.conv2d exists too


# ---------------------------------------------------------------------------------------
# index_fill
# ---------------------------------------------------------------------------------------
FILL_CASES = [
    ((3, 4), 1, [0, 2], 2.5),
    ((3, 4), 0, [2, 0, 2], -1.0),  # repeated
    ((3, 4), -1, [-1, 1], 7.0),  # negative dim and index
    ((2, 3, 4), 1, [1], 0.0),
    ((2, 3, 4), 2, 3, 4.0),  # 0-d index
    ((5,), 0, [4, 0], 1.5),
    ((), 0, [0], 3.0),  # 0-d input
    ((3, 4), 1, [], 9.0),  # empty index
]


@pytest.mark.parametrize("tensor_value", [False, True], ids=["number", "tensor"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", FILL_CASES, ids=[str(c) for c in FILL_CASES])
def test_index_fill_values_and_gradients(case, dtype, compiled, tensor_value, rng):
    shape, dim, index, value = case
    xs = rng.standard_normal(shape).astype(NP[dtype])
    g = rng.standard_normal(shape).astype(NP[dtype])
    res = {}
    for L in (torch, ca):
        x = L.tensor(xs, requires_grad=True)
        if L is torch and tensor_value and shape:
            # torch's IndexFillBackward1 fails on negative indices (its index_select of
            # the unique indices does not wrap them): give torch the wrapped ones
            index = [i % shape[dim] for i in np.atleast_1d(index)] if np.ndim(index) else index
        idx = L.tensor(index, dtype=L.int64)
        v = L.tensor(value, dtype=getattr(L, dtype), requires_grad=True) if tensor_value \
            else value
        y = x.index_fill(dim, idx, v) if L is torch or not compiled else \
            L.index_fill(x, dim, idx, v)
        loss = (y * L.tensor(g)).sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        res[L.__name__] = (y, x.grad, v.grad if tensor_value else None, y.grad_fn)
    c, t = res["cagrad"], res["torch"]
    for name, a, b in zip(("output", "grad self", "grad value"), c, t):
        assert_close(a, b, msg=name, **TOL_SUM[dtype])
    assert type(c[3]).__name__ == type(t[3]).__name__


def test_index_fill_node_names():
    x = ca.randn(3, 4, requires_grad=True)
    i = ca.tensor([0, 2])
    assert type(x.index_fill(1, i, 2.0).grad_fn).__name__ == "IndexFillBackward0"
    v = ca.tensor(3.0, requires_grad=True)
    assert type(x.index_fill(1, i, v).grad_fn).__name__ == "IndexFillBackward1"
    assert type(ca.index_fill(x, 1, i, v).grad_fn).__name__ == "IndexFillBackward1"


def test_index_fill_value_only_requires_grad(compiled):
    x = ca.ones(3, 4)
    v = ca.tensor(2.0, requires_grad=True)
    y = x.index_fill(0, ca.tensor([1, 1, 2]), v)
    backward_checked((y * ca.arange(12.0).reshape(3, 4)).sum(), compiled)
    assert float(v.grad) == sum(range(4, 12))  # rows 1 and 2, row 1 counted once
    assert x.grad is None


def test_index_fill_value_of_another_dtype():
    x = ca.randn(3, 4, requires_grad=True)
    v = ca.tensor(2.0, dtype=ca.float64, requires_grad=True)
    y = x.index_fill(1, ca.tensor([3]), v)
    assert y.dtype == ca.float32
    y.sum().backward()
    assert v.grad.dtype == ca.float64 and float(v.grad) == 3.0


def test_index_fill_inplace():
    x = ca.zeros(2, 3)
    assert x.index_fill_(1, ca.tensor([0, 2]), 5.0) is x
    np.testing.assert_array_equal(x.numpy(), [[5, 0, 5], [5, 0, 5]])
    assert x._version > 0


def test_index_fill_in_a_compiled_graph_with_a_changing_batch(rng):
    for n in (2, 3, 4):
        xs = rng.standard_normal((n, 5))
        x = ca.tensor(xs, requires_grad=True)
        with ca.compiled_autograd.enable():
            backward_checked((x.index_fill(1, ca.tensor([1, 3]), 0.5).sin()).sum(), True)
        t = torch.tensor(xs, requires_grad=True)
        t.index_fill(1, torch.tensor([1, 3]), 0.5).sin().sum().backward()
        assert_close(x.grad, t.grad)
    assert counters()["eager_fallbacks"] == 0


FILL_ERRORS = [
    ("index out of range", lambda L: L.ones(3, 4).index_fill(1, L.tensor([4]), 1.0),
     IndexError, "out of bounds for dimension 1 with size 4"),
    ("negative out of range", lambda L: L.ones(3, 4).index_fill(1, L.tensor([-5]), 1.0),
     IndexError, "index -5 is out of bounds"),
    ("2-d index", lambda L: L.ones(3, 4).index_fill(1, L.tensor([[0]]), 1.0), RuntimeError,
     "Index has to be a vector/scalar"),
    ("float index", lambda L: L.ones(3, 4).index_fill(1, L.tensor([0.0]), 1.0), IndexError,
     "Expected dtype int64 for index"),
    ("1-d value", lambda L: L.ones(3, 4).index_fill(1, L.tensor([0]), L.ones(2)), RuntimeError,
     "index_fill_ only supports a 0-dimensional value tensor"),
    ("dim out of range", lambda L: L.ones(3, 4).index_fill(2, L.tensor([0]), 1.0), IndexError,
     "out of range"),
]


@pytest.mark.parametrize("case", FILL_ERRORS, ids=[e[0] for e in FILL_ERRORS])
def test_index_fill_errors_match_torch(case):
    _, f, exc, needle = case
    for L in (torch, ca):
        with pytest.raises(exc) as info:
            f(L)
        assert needle in str(info.value), f"{L.__name__}: {info.value}"


def test_index_fill_strided_index(compiled):
    """A strided index (the graph copies it into a contiguous temporary)."""
    res = []
    for L in (ca, torch):
        x = L.tensor(np.arange(18.0).reshape(3, 6) / 7, requires_grad=True)
        idx = L.tensor([0, 9, 2, 9, 5, 9])[::2]
        v = L.tensor(1.0, dtype=L.float64, requires_grad=True)
        loss = (x.index_fill(1, idx, v) * L.arange(18.0, dtype=L.float64).reshape(3, 6)).sum()
        if L is ca:
            backward_checked(loss, compiled)
        else:
            loss.backward()
        res.append((x.grad, v.grad))
    for c, t in zip(*res):
        assert_close(c, t)
