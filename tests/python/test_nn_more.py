"""The next layer of nn surface against torch 2.13: one_hot, pixel_shuffle/unshuffle,
Unflatten, pad_sequence, interpolate/Upsample, unfold/fold, conv_transpose1d/2d and their
modules. Values and input gradients in float32 and float64, eagerly and under compiled
autograd (the backward must be compiled), float64 gradients against finite differences,
module reprs, state_dict loading from torch, and errors with torch's types and messages.
(nn.init's new initializers: test_nn_more_init.py.)"""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import TOL_SUM, assert_close, ca, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def same_error(fn):
    """fn(L) raises the same exception type and message with cagrad as with torch (up to
    the library's name in a printed Size)."""
    with pytest.raises(Exception) as want:
        fn(torch)
    with pytest.raises(type(want.value)) as got:
        fn(ca)
    assert str(got.value).replace("cagrad.Size", "torch.Size") == str(want.value)


# --- one_hot ------------------------------------------------------------------------------

@pytest.mark.parametrize("indices, num_classes", [
    ([3, 0, 1], -1), ([[1, 2], [0, 4]], 6), ([[[2]]], 3), ([], 4), (np.zeros((2, 0)), 2),
])
def test_one_hot_matches_torch(indices, num_classes):
    arr = np.asarray(indices, dtype=np.int64)
    got = ca.nn.functional.one_hot(ca.tensor(arr), num_classes)
    want = torch.nn.functional.one_hot(torch.tensor(arr), num_classes)
    assert_close(got, want)  # int64 in and out


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.one_hot(L.tensor([1.0])),
    lambda L: L.nn.functional.one_hot(L.tensor([-1])),
    lambda L: L.nn.functional.one_hot(L.tensor([3]), 3),
    lambda L: L.nn.functional.one_hot(L.tensor([1]), 0),
    lambda L: L.nn.functional.one_hot(L.zeros(0, dtype=L.int64)),
    lambda L: L.nn.functional.one_hot([1, 2]),
], ids=["float", "negative", "too_large", "zero_classes", "empty_infer", "not_tensor"])
def test_one_hot_errors(make):
    # (a non-tensor argument is a TypeError in both, worded by each library's binding)
    with pytest.raises(Exception) as want:
        make(torch)
    with pytest.raises(type(want.value)) as got:
        make(ca)
    if isinstance(want.value, RuntimeError):
        assert str(got.value) == str(want.value)


# --- pixel shuffle, Unflatten -------------------------------------------------------------

SHAPE_FUNCTIONS = {
    "pixel_shuffle": (lambda L, x: L.nn.functional.pixel_shuffle(x, 2), (2, 8, 3, 2)),
    "pixel_shuffle_3d": (lambda L, x: L.nn.functional.pixel_shuffle(x, 3), (9, 2, 3)),
    "pixel_shuffle_5d": (lambda L, x: L.nn.functional.pixel_shuffle(x, 2), (2, 1, 4, 2, 3)),
    "pixel_unshuffle": (lambda L, x: L.nn.functional.pixel_unshuffle(x, 2), (2, 3, 4, 6)),
    "pixel_unshuffle_3d": (lambda L, x: L.nn.functional.pixel_unshuffle(x, 3), (1, 3, 6)),
    "PixelShuffle": (lambda L, x: L.nn.PixelShuffle(2)(x), (1, 4, 2, 2)),
    "PixelUnshuffle": (lambda L, x: L.nn.PixelUnshuffle(2)(x), (1, 2, 4, 2)),
    "Unflatten": (lambda L, x: L.nn.Unflatten(1, (2, 3))(x), (4, 6, 2)),
    "Unflatten_neg": (lambda L, x: L.nn.Unflatten(-1, [2, -1])(x), (3, 8)),
}


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", sorted(SHAPE_FUNCTIONS))
def test_shape_layers_match_torch(name, dtype, compiled):
    fn, shape = SHAPE_FUNCTIONS[name]
    x = np.random.default_rng(0).standard_normal(shape)
    check_against_torch(fn, [x], dtype, compiled, msg=name)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.pixel_shuffle(L.zeros(2, 3), 2),
    lambda L: L.nn.functional.pixel_shuffle(L.zeros(5, 2, 3), 2),
    lambda L: L.nn.functional.pixel_shuffle(L.zeros(4, 2, 3), 0),
    lambda L: L.nn.functional.pixel_unshuffle(L.zeros(2, 3), 2),
    lambda L: L.nn.functional.pixel_unshuffle(L.zeros(1, 4, 3), 2),
    lambda L: L.nn.functional.pixel_unshuffle(L.zeros(1, 3, 4), 2),
    lambda L: L.nn.Unflatten(1, [2.0, 3]),
    lambda L: L.nn.Unflatten(1, 6),
])
def test_shape_layer_errors(make):
    same_error(make)


def test_unflatten_size_mismatch_is_a_runtime_error():
    with pytest.raises(RuntimeError):
        torch.nn.Unflatten(1, (2, 3))(torch.zeros(2, 5))
    with pytest.raises(RuntimeError):
        ca.nn.Unflatten(1, (2, 3))(ca.zeros(2, 5))


@pytest.mark.parametrize("make", [
    lambda L: L.nn.Unflatten(1, (2, 3)), lambda L: L.nn.Unflatten(-1, [4, 5]),
    lambda L: L.nn.PixelShuffle(3), lambda L: L.nn.PixelUnshuffle(2),
    lambda L: L.nn.Upsample(scale_factor=2), lambda L: L.nn.Upsample(size=(3, 4),
                                                                      mode="bilinear",
                                                                      align_corners=True),
    lambda L: L.nn.Upsample(scale_factor=(2, 1.5), mode="nearest-exact"),
    lambda L: L.nn.UpsamplingNearest2d(scale_factor=2),
    lambda L: L.nn.UpsamplingBilinear2d(size=3),
    lambda L: L.nn.Fold((4, 5), 2), lambda L: L.nn.Fold(4, (2, 3), dilation=2, padding=1),
    lambda L: L.nn.Unfold(2, dilation=2, padding=1, stride=3), lambda L: L.nn.Unfold((2, 1)),
])
def test_layer_reprs(make):
    assert repr(make(ca)) == repr(make(torch))


# --- pad_sequence -------------------------------------------------------------------------

@COMPILED
@DTYPE
@pytest.mark.parametrize("kwargs", [
    {}, dict(batch_first=True), dict(padding_value=-1.5), dict(padding_side="left"),
    dict(batch_first=True, padding_side="left", padding_value=2.0),
])
def test_pad_sequence_matches_torch(kwargs, dtype, compiled):
    rng = np.random.default_rng(1)
    seqs = [rng.standard_normal((n, 3, 2)) for n in (2, 5, 1, 5)]

    def fn(L, *xs):
        return L.nn.utils.rnn.pad_sequence(list(xs), **kwargs)
    check_against_torch(fn, seqs, dtype, compiled, msg=str(kwargs))


def test_pad_sequence_int64_and_1d():
    seqs = [np.arange(n, dtype=np.int64) for n in (3, 1, 4)]
    got = ca.nn.utils.rnn.pad_sequence([ca.tensor(s) for s in seqs], True, 7)
    want = torch.nn.utils.rnn.pad_sequence([torch.tensor(s) for s in seqs], True, 7)
    assert_close(got, want)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.utils.rnn.pad_sequence([L.zeros(2)], padding_side="middle"),
    lambda L: L.nn.utils.rnn.pad_sequence([]),
])
def test_pad_sequence_errors(make):
    same_error(make)


# --- interpolate, Upsample ----------------------------------------------------------------

INTERPOLATE_CASES = [
    ("nearest", None, dict(size=(5, 7))), ("nearest", None, dict(scale_factor=1.7)),
    ("nearest", None, dict(size=(2, 3))), ("nearest", None, dict(scale_factor=(0.6, 2.0))),
    ("nearest", None, dict(scale_factor=2)), ("nearest", None, dict(size=4)),
    ("nearest-exact", None, dict(size=(5, 7))), ("nearest-exact", None, dict(scale_factor=1.5)),
    ("nearest-exact", None, dict(size=(2, 3))),
    ("bilinear", False, dict(size=(5, 7))), ("bilinear", False, dict(scale_factor=1.7)),
    ("bilinear", False, dict(size=(2, 3))), ("bilinear", None, dict(scale_factor=(0.6, 2.0))),
    ("bilinear", True, dict(size=(5, 7))), ("bilinear", True, dict(scale_factor=1.7)),
    ("bilinear", True, dict(size=(1, 3))), ("bilinear", False,
                                            dict(scale_factor=1.7, recompute_scale_factor=True)),
    ("area", None, dict(size=(2, 3))), ("area", None, dict(scale_factor=0.5)),
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("mode, align_corners, kwargs", INTERPOLATE_CASES)
def test_interpolate_2d_matches_torch(mode, align_corners, kwargs, dtype, compiled):
    x = np.random.default_rng(2).standard_normal((2, 3, 4, 5))

    def fn(L, t):
        return L.nn.functional.interpolate(t, mode=mode, align_corners=align_corners, **kwargs)
    check_against_torch(fn, [x], dtype, compiled, msg=f"{mode} {align_corners} {kwargs}")


@COMPILED
@DTYPE
@pytest.mark.parametrize("mode, align_corners, kwargs", [
    ("nearest", None, dict(size=9)), ("nearest", None, dict(scale_factor=0.5)),
    ("nearest-exact", None, dict(size=7)), ("linear", False, dict(size=9)),
    ("linear", True, dict(scale_factor=2.5)), ("linear", None, dict(size=3)),
    ("area", None, dict(size=3)),
])
def test_interpolate_1d_matches_torch(mode, align_corners, kwargs, dtype, compiled):
    x = np.random.default_rng(3).standard_normal((2, 3, 5))

    def fn(L, t):
        return L.nn.functional.interpolate(t, mode=mode, align_corners=align_corners, **kwargs)
    check_against_torch(fn, [x], dtype, compiled, msg=f"{mode} {align_corners} {kwargs}")


@pytest.mark.parametrize("make", [
    lambda L: L.nn.Upsample(scale_factor=2), lambda L: L.nn.Upsample(size=(3, 8),
                                                                      mode="bilinear"),
    lambda L: L.nn.UpsamplingNearest2d(size=(5, 4)),
    lambda L: L.nn.UpsamplingBilinear2d(scale_factor=1.5),
])
@DTYPE
def test_upsample_modules_match_torch(make, dtype):
    x = np.random.default_rng(4).standard_normal((1, 2, 3, 4))
    check_against_torch(lambda L, t: make(L)(t), [x], dtype)


def test_interpolate_float64_gradient_is_numeric():
    x = np.random.default_rng(5).standard_normal((1, 2, 3, 4))
    check_numeric_gradient(lambda L, t: L.nn.functional.interpolate(
        t, scale_factor=1.5, mode="bilinear", align_corners=False), [x])


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4)),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2, scale_factor=2),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=[2]),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), scale_factor=[2]),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2, align_corners=True),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2, mode="linear"),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4), size=2, mode="bilinear"),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4), size=2, mode="foo"),
    lambda L: L.nn.functional.interpolate(L.zeros(4), size=2),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=0),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), scale_factor=0.1),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4), size=2, mode="nearest",
                                          antialias=True),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2,
                                          recompute_scale_factor=True),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4, 4), size=0),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2, mode="lanczos"),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4), size=2, mode="trilinear"),
    lambda L: L.nn.functional.interpolate(L.zeros(1, 1, 4, 4, 4), size=2, mode="bicubic"),
])
def test_interpolate_errors(make):
    same_error(make)


@COMPILED
@DTYPE
@pytest.mark.parametrize("align_corners", [False, True])
@pytest.mark.parametrize("kwargs", [dict(size=(7, 9)), dict(scale_factor=0.6),
                                    dict(scale_factor=(1.5, 2.3)), dict(size=(1, 2))])
def test_interpolate_bicubic_matches_torch(kwargs, align_corners, dtype, compiled):
    x = np.random.default_rng(15).standard_normal((2, 2, 4, 5))

    def fn(L, t):
        return L.nn.functional.interpolate(t, mode="bicubic", align_corners=align_corners,
                                           **kwargs)
    check_against_torch(fn, [x], dtype, compiled, msg=f"bicubic {align_corners} {kwargs}")


@COMPILED
@DTYPE
@pytest.mark.parametrize("mode, align_corners, kwargs", [
    ("nearest", None, dict(size=(3, 5, 2))), ("nearest-exact", None, dict(scale_factor=1.5)),
    ("trilinear", False, dict(size=(4, 3, 5))), ("trilinear", True, dict(scale_factor=1.7)),
])
def test_interpolate_3d_matches_torch(mode, align_corners, kwargs, dtype, compiled):
    x = np.random.default_rng(16).standard_normal((1, 2, 2, 3, 4))

    def fn(L, t):
        return L.nn.functional.interpolate(t, mode=mode, align_corners=align_corners, **kwargs)
    check_against_torch(fn, [x], dtype, compiled, msg=f"{mode} {align_corners} {kwargs}")


def test_interpolate_bicubic_float64_gradient_is_numeric():
    x = np.random.default_rng(17).standard_normal((1, 1, 3, 4))
    check_numeric_gradient(lambda L, t: L.nn.functional.interpolate(
        t, size=(5, 3), mode="bicubic"), [x])


@pytest.mark.parametrize("kwargs, shape", [
    (dict(mode="area", size=3), (1, 1, 2, 2, 2)),
    (dict(mode="bilinear", size=3, antialias=True), (1, 1, 4, 4)),
    (dict(mode="bicubic", size=3, antialias=True), (1, 1, 4, 4)),
])
def test_interpolate_unsupported_is_honest(kwargs, shape):
    torch.nn.functional.interpolate(torch.zeros(shape), **kwargs)  # torch has it
    with pytest.raises(NotImplementedError, match="python-api.md"):
        ca.nn.functional.interpolate(ca.zeros(*shape), **kwargs)


# --- unfold / fold ------------------------------------------------------------------------

FOLD_CASES = [
    ((2, 3, 5, 6), dict(kernel_size=2)),
    ((2, 3, 5, 7), dict(kernel_size=(2, 3), dilation=(1, 2), padding=1, stride=(2, 1))),
    ((1, 2, 6, 6), dict(kernel_size=3, stride=3)),
    ((3, 4, 5), dict(kernel_size=(1, 2), padding=(2, 0), stride=2)),  # unbatched
    ((1, 1, 4, 4), dict(kernel_size=4)),
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("shape, kwargs", FOLD_CASES)
def test_unfold_matches_torch(shape, kwargs, dtype, compiled):
    x = np.random.default_rng(6).standard_normal(shape)
    check_against_torch(lambda L, t: L.nn.functional.unfold(t, **kwargs), [x], dtype,
                        compiled, msg=str(kwargs))
    check_against_torch(lambda L, t: L.nn.Unfold(**kwargs)(t), [x], dtype, compiled)


@COMPILED
@DTYPE
@pytest.mark.parametrize("shape, kwargs", FOLD_CASES)
def test_fold_matches_torch(shape, kwargs, dtype, compiled):
    cols = tuple(torch.nn.functional.unfold(torch.zeros(shape), **kwargs).shape)
    x = np.random.default_rng(7).standard_normal(cols)
    size = shape[-2:]
    check_against_torch(lambda L, t: L.nn.functional.fold(t, size, **kwargs), [x], dtype,
                        compiled, msg=str(kwargs))
    check_against_torch(lambda L, t: L.nn.Fold(size, **kwargs)(t), [x], dtype, compiled)


def test_fold_float64_gradient_is_numeric():
    x = np.random.default_rng(8).standard_normal((1, 8, 12))
    check_numeric_gradient(lambda L, t: L.nn.functional.fold(t, (3, 4), 2, padding=(1, 0),
                                                             stride=1), [x])


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.unfold(L.zeros(1, 1, 1, 4), 2),
    lambda L: L.nn.functional.unfold(L.zeros(1, 1, 2, 2), 3),
    lambda L: L.nn.functional.fold(L.zeros(1, 5, 4), (3, 3), 2),
    lambda L: L.nn.functional.fold(L.zeros(1, 4, 5), (3, 3), 2),
])
def test_unfold_fold_errors(make):
    same_error(make)


# --- conv_transpose -----------------------------------------------------------------------

# (input shape, weight shape, bias, kwargs)
CONV_T_2D = [
    ((2, 4, 5, 6), (4, 3, 3, 2), True, {}),
    ((2, 4, 5, 6), (4, 3, 3, 3), False, dict(stride=2)),
    ((2, 4, 4, 5), (4, 3, 3, 2), True, dict(stride=(2, 3), padding=(1, 2),
                                            output_padding=(1, 0))),
    ((1, 4, 4, 4), (4, 3, 3, 2), True, dict(groups=2, dilation=2, padding=3, stride=2,
                                            output_padding=1)),
    ((2, 6, 3, 3), (6, 1, 2, 2), True, dict(groups=6, stride=2)),  # depthwise
    ((4, 3, 3), (4, 2, 3, 3), True, dict(padding=1)),  # unbatched
    ((1, 2, 3, 3), (2, 2, 1, 1), False, dict(stride=3, output_padding=2)),
    ((1, 2, 5, 5), (2, 2, 3, 3), True, dict(padding=2)),  # padding crops the full output
]


def conv_t2d(kwargs):
    def fn(L, x, w, b=None):
        return L.nn.functional.conv_transpose2d(x, w, b, **kwargs)
    return fn


def conv_arrays(rng, xshape, wshape, bias, kwargs):
    out_channels = wshape[1] * kwargs.get("groups", 1)
    arrays = [rng.standard_normal(xshape), rng.standard_normal(wshape)]
    return arrays + ([rng.standard_normal(out_channels)] if bias else [])


@COMPILED
@DTYPE
@pytest.mark.parametrize("xshape, wshape, bias, kwargs", CONV_T_2D)
def test_conv_transpose2d_matches_torch(xshape, wshape, bias, kwargs, dtype, compiled):
    arrays = conv_arrays(np.random.default_rng(9), xshape, wshape, bias, kwargs)
    check_against_torch(conv_t2d(kwargs), arrays, dtype, compiled, msg=str(kwargs))


@COMPILED
@DTYPE
@pytest.mark.parametrize("xshape, wshape, bias, kwargs", [
    ((2, 4, 5), (4, 3, 3), True, {}),
    ((2, 4, 5), (4, 3, 2), False, dict(stride=3, padding=1, output_padding=2)),
    ((1, 4, 6), (4, 2, 3), True, dict(groups=2, dilation=3, stride=2, output_padding=1)),
    ((4, 5), (4, 3, 3), True, dict(stride=(2,), padding=(1,))),  # unbatched, 1-tuples
])
def test_conv_transpose1d_matches_torch(xshape, wshape, bias, kwargs, dtype, compiled):
    arrays = conv_arrays(np.random.default_rng(10), xshape, wshape, bias, kwargs)

    def fn(L, x, w, b=None):
        return L.nn.functional.conv_transpose1d(x, w, b, **kwargs)
    check_against_torch(fn, arrays, dtype, compiled, msg=str(kwargs))


def test_conv_transpose2d_float64_gradient_is_numeric():
    kwargs = dict(stride=2, padding=1, output_padding=1)
    arrays = conv_arrays(np.random.default_rng(11), (1, 2, 3, 2), (2, 2, 3, 3), True, kwargs)
    check_numeric_gradient(conv_t2d(kwargs), arrays)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.functional.conv_transpose2d(L.zeros(1, 2, 3, 3), L.zeros(2, 2, 2, 2),
                                               output_padding=1),
    lambda L: L.nn.functional.conv_transpose2d(L.zeros(1, 3, 3, 3), L.zeros(2, 2, 2, 2)),
    lambda L: L.nn.functional.conv_transpose2d(L.zeros(1, 2, 3, 3), L.zeros(2, 2, 2, 2),
                                               groups=3),
    lambda L: L.nn.functional.conv_transpose2d(L.zeros(2, 3, 3), L.zeros(2, 2, 2, 2),
                                               padding=2),
    lambda L: L.nn.functional.conv_transpose1d(L.zeros(1, 2, 3), L.zeros(2, 2, 2),
                                               output_padding=1),
    lambda L: L.nn.functional.conv_transpose1d(L.zeros(1, 3, 3), L.zeros(2, 2, 2)),
    lambda L: L.nn.functional.conv_transpose1d(L.zeros(1, 2, 3), L.zeros(2, 2, 5), padding=5),
    lambda L: L.nn.ConvTranspose2d(2, 2, 2, padding_mode="reflect"),
    lambda L: L.nn.ConvTranspose1d(2, 2, 2, padding_mode="circular"),
    lambda L: L.nn.ConvTranspose2d(3, 4, 3, groups=2),
    lambda L: L.nn.ConvTranspose2d(2, 2, 3, stride=2)(L.zeros(1, 2, 3, 3),
                                                      output_size=(9, 9)),
    lambda L: L.nn.ConvTranspose2d(2, 2, 3, stride=2)(L.zeros(1, 2, 3, 3),
                                                      output_size=(7,)),
])
def test_conv_transpose_errors(make):
    same_error(make)


@pytest.mark.parametrize("cls, args, kwargs", [
    ("ConvTranspose2d", (4, 6, 3), dict(stride=2, padding=1, output_padding=1, groups=2)),
    ("ConvTranspose2d", (3, 2, (2, 3)), dict(bias=False, dilation=(2, 1))),
    ("ConvTranspose1d", (4, 6, 3), dict(stride=3, groups=2, output_padding=2)),
    ("ConvTranspose1d", (2, 3, 2), dict(padding=1, bias=False)),
])
@DTYPE
def test_conv_transpose_modules_load_torch_weights(cls, args, kwargs, dtype):
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls)(*args, **kwargs, dtype=getattr(torch, dtype))
    mod = getattr(ca.nn, cls)(*args, **kwargs, dtype=getattr(ca, dtype))
    assert repr(mod) == repr(ref)
    assert list(mod.state_dict()) == list(ref.state_dict())
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    rank = 2 if cls.endswith("2d") else 1
    x = np.random.default_rng(12).standard_normal((2, args[0]) + (4,) * rank).astype(dtype)
    xc, xt = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    yc, yt = mod(xc), ref(xt)
    assert_close(yc, yt, **TOL_SUM[dtype])
    yc.square().sum().backward()
    yt.square().sum().backward()
    assert_close(xc.grad, xt.grad, **TOL_SUM[dtype])
    for name, param in mod.named_parameters():
        assert_close(param.grad, dict(ref.named_parameters())[name].grad, **TOL_SUM[dtype])


def test_conv_transpose_output_size_picks_output_padding():
    ref = torch.nn.ConvTranspose2d(2, 3, 3, stride=3, padding=1)
    mod = ca.nn.ConvTranspose2d(2, 3, 3, stride=3, padding=1)
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(13).standard_normal((1, 2, 3, 4)).astype(np.float32)
    for size in [(7, 10), (9, 12), [1, 3, 8, 11]]:
        assert_close(mod(ca.tensor(x), output_size=size), ref(torch.tensor(x), output_size=size),
                     **TOL_SUM["float32"])


@pytest.mark.parametrize("cls, args", [("ConvTranspose2d", (4, 6, (3, 2))),
                                       ("ConvTranspose1d", (3, 8, 5))])
def test_conv_transpose_init_bounds(cls, args):
    """PyTorch's default: U(-1/sqrt(fan_in), ...) with fan_in = weight.shape[1] * kernel."""
    mod = getattr(ca.nn, cls)(*args, groups=1)
    ref = getattr(torch.nn, cls)(*args)
    assert tuple(mod.weight.shape) == tuple(ref.weight.shape)
    fan_in = torch.nn.init._calculate_fan_in_and_fan_out(ref.weight)[0]
    bound = 1 / np.sqrt(fan_in)
    for param in (mod.weight, mod.bias):
        values = to_np(param)
        assert np.abs(values).max() <= bound
        assert np.abs(values).max() > 0.7 * bound  # spread over the range, not tiny


@pytest.mark.parametrize("name, kwargs", [("upsample", dict(mode="bilinear")),
                                          ("upsample_nearest", {}), ("upsample_bilinear", {})])
def test_deprecated_upsample_functions_warn_and_interpolate(name, kwargs):
    x = np.random.default_rng(14).standard_normal((1, 2, 3, 3))
    outs = []
    for lib in (torch, ca):
        with pytest.warns(UserWarning, match=f"`nn.functional.{name}` is deprecated"):
            outs.append(getattr(lib.nn.functional, name)(lib.tensor(x), scale_factor=2,
                                                         **kwargs))
    assert_close(outs[1], outs[0])


def test_torch_namespace_aliases():
    x = np.random.default_rng(18).standard_normal((1, 4, 2, 3))
    w = np.random.default_rng(19).standard_normal((4, 2, 2, 2))
    for name, args in [("pixel_shuffle", (x, 2)), ("pixel_unshuffle", (x[:, :, :2, :2], 2)),
                       ("conv_transpose2d", (x, w)), ("conv_transpose1d", (x[:, :, 0], w[:, :, 0]))]:
        to_lib = [(lib, [lib.tensor(a) if isinstance(a, np.ndarray) else a for a in args])
                  for lib in (ca, torch)]
        got, want = (getattr(lib, name)(*lib_args) for lib, lib_args in to_lib)
        assert_close(got, want, **TOL_SUM["float64"])
