"""Padding layers (nn.ZeroPad/ConstantPad/ReflectionPad/ReplicationPad/CircularPad 1d-3d)
and F.pad's non-constant modes against torch 2.13: outputs and input gradients in float32
and float64, eagerly and under compiled autograd; gradcheck; reprs; PyTorch's errors.
Last, a program in the style of pytorch/examples' fast_neural_style transformer net
(ReflectionPad2d + Conv2d + InstanceNorm2d + ReLU, residual and upsampling blocks): its
output and every gradient against torch from the same weights."""

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])

# (class, constructor args, input shape)
MODULES = [
    ("ZeroPad1d", (2,), (2, 3, 5)),
    ("ZeroPad1d", ((1, -2),), (3, 5)),
    ("ZeroPad2d", (1,), (2, 3, 4, 5)),
    ("ZeroPad2d", ((1, 0, -1, 2),), (3, 4, 5)),
    ("ZeroPad3d", (1,), (1, 2, 3, 4, 2)),
    ("ConstantPad1d", (2, 3.5), (2, 3, 5)),
    ("ConstantPad2d", ((0, 1, 2, -1), -1.25), (2, 3, 4, 5)),
    ("ConstantPad3d", ((1, 0, 0, 1, 2, 0), 0.5), (2, 3, 4, 2)),
    ("ReflectionPad1d", (2,), (2, 3, 5)),
    ("ReflectionPad1d", ((3, 1),), (3, 5)),
    ("ReflectionPad1d", ((-1, 2),), (2, 3, 5)),
    ("ReflectionPad2d", (2,), (2, 3, 4, 5)),
    ("ReflectionPad2d", ((1, 3, 0, 2),), (3, 4, 5)),
    ("ReflectionPad3d", (1,), (1, 2, 3, 4, 2)),
    ("ReflectionPad3d", ((1, 0, 2, 1, 0, 2),), (2, 3, 4, 3)),
    ("ReplicationPad1d", (3,), (2, 3, 5)),
    ("ReplicationPad1d", ((0, 7),), (3, 2)),
    ("ReplicationPad2d", ((2, 1, 4, 0),), (2, 3, 4, 5)),
    ("ReplicationPad2d", (1,), (3, 4, 5)),
    ("ReplicationPad3d", (2,), (1, 2, 3, 4, 2)),
    ("CircularPad1d", (2,), (2, 3, 5)),
    ("CircularPad1d", ((4, -1),), (3, 5)),
    ("CircularPad2d", ((1, 2, 3, 4),), (2, 3, 4, 5)),
    ("CircularPad2d", (1,), (3, 4, 5)),
    ("CircularPad3d", ((1, 0, 2, 1, 0, 2),), (1, 2, 3, 4, 3)),
]
MODULE_IDS = [f"{c}-{a}-{s}" for c, a, s in MODULES]


def run(L, module, x, compiled=False):
    """module(x) and the gradient of x under the seeded loss sum(out * g)."""
    xt = L.tensor(x, requires_grad=True)
    out = module(xt)
    g = np.random.default_rng(5).standard_normal(tuple(out.shape)).astype(x.dtype)
    loss = (out * L.tensor(g)).sum()
    if L is torch:
        loss.backward()
    else:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    return out, xt.grad


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls,args,shape", MODULES, ids=MODULE_IDS)
def test_module_matches_torch(cls, args, shape, dtype, compiled):
    x = np.random.default_rng(1).standard_normal(shape).astype(dtype)
    got = run(ca, getattr(ca.nn, cls)(*args), x, compiled)
    want = run(torch, getattr(torch.nn, cls)(*args), x)
    for c, t in zip(got, want):
        assert_close(c, t, **TOL_SUM[dtype])


@pytest.mark.parametrize("cls,args,shape", MODULES, ids=MODULE_IDS)
def test_repr_and_padding_attribute(cls, args, shape):
    mod, ref = getattr(ca.nn, cls)(*args), getattr(torch.nn, cls)(*args)
    assert repr(mod) == repr(ref)
    assert mod.padding == ref.padding
    assert list(mod.parameters()) == []


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("pad,shape", [((2, 1), (2, 4)), ((1, 2, 2, 0), (1, 2, 3, 4)),
                                       ((1, 1, 0, 2, 2, 1), (2, 3, 4, 3))])
def test_gradcheck_non_constant_modes(mode, pad, shape):
    x = ca.tensor(np.random.default_rng(2).standard_normal(shape), requires_grad=True)
    assert ca.autograd.gradcheck(lambda t: ca.nn.functional.pad(t, pad, mode=mode), (x,))


def test_compiled_equals_eager():
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5))
    mod = ca.nn.ReflectionPad2d((1, 2, 3, 1))
    eager = run(ca, mod, x)
    compiled = run(ca, mod, x, compiled=True)
    for e, c in zip(eager, compiled):
        assert_close(c, e, rtol=0, atol=0)


def test_sequential_and_int_dtype():
    """A padding layer inside Sequential, and on integer input (no gradient)."""
    def run_seq(L):
        seq = L.nn.Sequential(L.nn.ReplicationPad1d(1), L.nn.ZeroPad1d((0, 1)))
        return seq(L.arange(6).reshape(2, 3))

    assert_close(run_seq(ca), run_seq(torch))


# --- errors -----------------------------------------------------------------------------

def _F(L):
    return L.nn.functional


ERRORS = {
    # module-level rank checks
    "circular1d_1d": lambda L: L.nn.CircularPad1d(1)(L.ones(4)),
    "circular2d_5d": lambda L: L.nn.CircularPad2d(1)(L.ones(1, 1, 1, 3, 3)),
    "circular3d_3d": lambda L: L.nn.CircularPad3d(1)(L.ones(2, 3, 3)),
    "reflection1d_1d": lambda L: L.nn.ReflectionPad1d(1)(L.ones(4)),
    "replication2d_2d": lambda L: L.nn.ReplicationPad2d(1)(L.ones(3, 3)),
    "reflection3d_3d": lambda L: L.nn.ReflectionPad3d(1)(L.ones(2, 2, 2)),
    "zero2d_1d": lambda L: L.nn.ZeroPad2d(1)(L.ones(3)),
    "constant3d_2d": lambda L: L.nn.ConstantPad3d(1, 0.0)(L.ones(2, 2)),
    "odd_length": lambda L: L.nn.ZeroPad2d((1, 2, 3))(L.ones(1, 3, 3)),
    "crop_too_much": lambda L: L.nn.ZeroPad2d(-2)(L.ones(1, 3, 3)),
    # reflect: widths below the size, judged on the input for each dim
    "reflect_equal": lambda L: L.nn.ReflectionPad1d(3)(L.ones(2, 3)),
    "reflect_height": lambda L: L.nn.ReflectionPad2d((1, 1, 3, 0))(L.ones(1, 3, 3)),
    "reflect_width_first": lambda L: L.nn.ReflectionPad2d((3, 1, 3, 1))(L.ones(1, 3, 3)),
    "reflect_depth": lambda L: _F(L).pad(L.ones(1, 2, 3, 3, 3), (1, 1, 1, 1, 3, 0),
                                         mode="reflect"),
    # empty dims and outputs
    "reflect_empty_dim": lambda L: _F(L).pad(L.ones(2, 0), (1, 1), mode="reflect"),
    "reflect_empty_channels": lambda L: _F(L).pad(L.ones(0, 3), (1, 1), mode="reflect"),
    "replicate_empty_dim": lambda L: L.nn.ReplicationPad1d(1)(L.ones(2, 0)),
    "replicate_empty_channels_3d": lambda L: _F(L).pad(L.ones(1, 0, 3, 3, 3), (1,) * 6,
                                                       mode="replicate"),
    "reflect_empty_output": lambda L: _F(L).pad(L.ones(2, 4), (-2, -2), mode="reflect"),
    "replicate_empty_output": lambda L: _F(L).pad(L.ones(2, 4), (-5, 0), mode="replicate"),
    "replicate_empty_output_2d": lambda L: _F(L).pad(L.ones(2, 4, 4), (-2, -2, -2, -2),
                                                     mode="replicate"),
    "reflect_empty_output_2d": lambda L: _F(L).pad(L.ones(2, 4, 4), (-2, -2, -2, -2),
                                                   mode="reflect"),
    "reflect_empty_output_3d": lambda L: _F(L).pad(L.ones(2, 4, 4, 4), (-2,) * 6,
                                                   mode="reflect"),
    # circular
    "circular_twice": lambda L: L.nn.CircularPad1d(5)(L.ones(2, 4)),
    "circular_negative_empty": lambda L: _F(L).pad(L.ones(2, 4), (-5, 0), mode="circular"),
    "circular_empty": lambda L: _F(L).pad(L.ones(2, 0), (1, 1), mode="circular"),
    # F.pad arguments
    "value_with_reflect": lambda L: _F(L).pad(L.ones(2, 4), (1, 1), mode="reflect",
                                              value=1.0),
    "bad_mode": lambda L: _F(L).pad(L.ones(2, 3), (1, 1), mode="zeros"),
    "int_pad": lambda L: _F(L).pad(L.ones(2, 3), 1),
    "float_in_pad": lambda L: _F(L).pad(L.ones(2, 3), (1.0, 1)),
    "bool_first_in_pad": lambda L: _F(L).pad(L.ones(2, 3), (True, 1)),
    "float_later_in_pad": lambda L: _F(L).pad(L.ones(2, 3), (1, 2, 1.0, 1)),
    "str_later_in_pad": lambda L: _F(L).pad(L.ones(2, 3), (1, "a")),
    "input_not_tensor": lambda L: L.nn.ZeroPad1d(1)([1.0, 2.0]),
    "too_many_pairs": lambda L: _F(L).pad(L.ones(2, 3, 4), (1,) * 6, mode="reflect"),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_like_torch(name):
    got, want = error_of(ca, ERRORS[name]), error_of(torch, ERRORS[name])
    assert want[0] is not None
    assert (got[0].__name__, got[1]) == (want[0].__name__, want[1])


# shapes PyTorch accepts at the edges of those checks
ACCEPTED = {
    "reflect_zero_value": lambda L: _F(L).pad(L.ones(2, 4), (1, 1), mode="reflect", value=0),
    "reflect_size_minus_one": lambda L: L.nn.ReflectionPad1d(2)(L.ones(2, 3)),
    "reflect_empty_batch": lambda L: L.nn.ReflectionPad2d(1)(L.ones(0, 1, 3, 3)),
    "reflect_one_output_dim_empty": lambda L: _F(L).pad(L.ones(2, 4, 4), (-5, 1, 0, 0),
                                                        mode="reflect"),
    "replicate_some_empty": lambda L: _F(L).pad(L.ones(2, 4, 4, 4), (-2, -2, -2, -2, 0, 0),
                                                mode="replicate"),
    "circular_crop_to_empty": lambda L: _F(L).pad(L.ones(2, 4), (-2, -2), mode="circular"),
    "circular_full_wrap": lambda L: L.nn.CircularPad1d(4)(L.ones(2, 4)),
    "bool_later_in_pad": lambda L: _F(L).pad(L.ones(2, 3), (1, True)),
}


@pytest.mark.parametrize("name", list(ACCEPTED))
def test_accepted_like_torch(name):
    got, want = ACCEPTED[name](ca), ACCEPTED[name](torch)
    assert_close(got, want)


def test_circular_wrap_past_a_crop_is_refused():
    """Cropping one side and wrapping more than the cropped size on the other makes
    PyTorch copy from output it has not written yet (its result is uninitialized memory);
    cagrad raises PyTorch's wrap-around error instead (docs/python-api.md)."""
    with pytest.raises(RuntimeError, match="wrapping around more than once"):
        ca.nn.functional.pad(ca.ones(2, 5), (5, -1), mode="circular")


# --- program: fast_neural_style's transformer net, scaled down ------------------------------

def transformer_net(L, width=4):
    """ConvLayer = ReflectionPad2d(k // 2) + Conv2d; residual blocks; upsampling by
    nearest interpolation before the padded conv; InstanceNorm2d(affine) + ReLU between."""
    nn = L.nn

    class ConvLayer(nn.Module):
        def __init__(self, cin, cout, kernel, stride, upsample=None):
            super().__init__()
            self.upsample = upsample
            self.pad = nn.ReflectionPad2d(kernel // 2)
            self.conv = nn.Conv2d(cin, cout, kernel, stride)

        def forward(self, x):
            if self.upsample:
                x = nn.functional.interpolate(x, mode="nearest", scale_factor=self.upsample)
            return self.conv(self.pad(x))

    class Residual(nn.Module):
        def __init__(self, channels):
            super().__init__()
            self.conv1 = ConvLayer(channels, channels, 3, 1)
            self.in1 = nn.InstanceNorm2d(channels, affine=True)
            self.conv2 = ConvLayer(channels, channels, 3, 1)
            self.in2 = nn.InstanceNorm2d(channels, affine=True)
            self.relu = nn.ReLU()

        def forward(self, x):
            out = self.relu(self.in1(self.conv1(x)))
            return self.in2(self.conv2(out)) + x

    class TransformerNet(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = ConvLayer(3, width, 5, 1)
            self.in1 = nn.InstanceNorm2d(width, affine=True)
            self.conv2 = ConvLayer(width, 2 * width, 3, 2)
            self.in2 = nn.InstanceNorm2d(2 * width, affine=True)
            self.res = nn.Sequential(Residual(2 * width), Residual(2 * width))
            self.deconv1 = ConvLayer(2 * width, width, 3, 1, upsample=2)
            self.in3 = nn.InstanceNorm2d(width, affine=True)
            self.deconv2 = ConvLayer(width, 3, 5, 1)
            self.relu = nn.ReLU()

        def forward(self, x):
            y = self.relu(self.in1(self.conv1(x)))
            y = self.relu(self.in2(self.conv2(y)))
            y = self.res(y)
            y = self.relu(self.in3(self.deconv1(y)))
            return self.deconv2(y)

    return TransformerNet()


def _net_pair(dtype):
    torch.manual_seed(0)
    ref = transformer_net(torch).to(getattr(torch, dtype))
    rng = np.random.default_rng(9)
    with torch.no_grad():  # affine norms away from their (1, 0) init, so they matter
        for name, p in ref.named_parameters():
            if ".in" in name or name.startswith("in"):
                p.add_(torch.tensor(rng.standard_normal(tuple(p.shape)) * 0.3))
    net = transformer_net(ca).to(getattr(ca, dtype))
    net.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    return net, ref


def _net_run(L, net, x, target, compiled=False):
    xt = L.tensor(x, requires_grad=True)
    out = net(xt)
    loss = ((out - L.tensor(target)) ** 2).mean()
    if L is torch:
        loss.backward()
    else:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    return [out, loss, xt.grad] + [p.grad for p in net.parameters()]


@COMPILED
@DTYPE
def test_fast_neural_style_transformer_net(dtype, compiled):
    net, ref = _net_pair(dtype)
    rng = np.random.default_rng(10)
    x = rng.standard_normal((2, 3, 12, 12)).astype(dtype)
    target = rng.standard_normal((2, 3, 12, 12)).astype(dtype)
    got = _net_run(ca, net, x, target, compiled)
    want = _net_run(torch, ref, x, target)
    names = ["out", "loss", "x.grad"] + [n for n, _ in ref.named_parameters()]
    assert len(got) == len(want)
    # float32: convolutions and instance-norm statistics sum many terms (TOL_SUM's reasoning
    # with n in the hundreds), so relative 1e-4
    tol = TOL_SUM[dtype] if dtype == "float64" else dict(rtol=1e-4, atol=1e-5)
    for name, c, t in zip(names, got, want):
        assert_close(c, t, msg=name, **tol)
