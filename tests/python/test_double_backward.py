"""Double backward (create_graph=True), eager: Hessian-vector products, a WGAN-GP gradient
penalty step, a MAML inner step, a physics-informed loss with a Laplacian, third order, a
custom Function's differentiable backward, .grad with a history, the errors torch gives,
and compiled autograd capturing such a backward (hooks in it run eagerly, counted and
logged). Every value
and gradient is compared with torch 2.13 in float32 and float64."""

import gc
import os
import re
import subprocess
import sys
import textwrap
import warnings

import numpy as np
import pytest
import torch

import cagrad
from helpers import (TOL, TOL_SUM, assert_close, compiled_ctx, counters, needs_cagrad,
                     torch_gradient)

pytestmark = needs_cagrad

DTYPES = ["float32", "float64"]
RNG = np.random.default_rng(7)


def arr(*shape, lo=None, hi=None):
    if lo is not None:
        return RNG.uniform(lo, hi, shape)
    return RNG.standard_normal(shape)


def leaf(L, a, dtype):
    return L.tensor(a, dtype=getattr(L, dtype), requires_grad=True)


def const(L, a, dtype):
    return L.tensor(a, dtype=getattr(L, dtype))


def check(f, dtype, *args, compiled=False, tol=TOL_SUM, runs=None, **kw):
    """f(L, dtype) for cagrad (under compiled autograd if asked) and torch: every result
    equal within tol. The default is TOL_SUM: the models' gradients are matmul and batch
    sums of O(1) terms, whose float32 rounding depends on the order of the sum. Compiled:
    runs = (backwards that ran eagerly, backwards that compiled or hit the cache)."""
    before = counters()
    with compiled_ctx(compiled):
        ours = [v.detach().numpy() for v in f(cagrad, dtype, *args, **kw)]
    after = {k: v - before[k] for k, v in counters().items()}
    if compiled:
        assert (after["eager_fallbacks"], after["captures"] + after["cache_hits"]) == runs, after
    ref = [v.detach().numpy() for v in f(torch, dtype, *args, **kw)]
    assert len(ours) == len(ref)
    for k, (a, b) in enumerate(zip(ours, ref)):
        assert_close(a, b, msg=f"result {k}", **tol[dtype])


# ---------------------------------------------------------------------------------------
# Hessian-vector product of an MLP loss: autograd.grad twice
# ---------------------------------------------------------------------------------------
MLP = {"w1": arr(8, 4), "b1": arr(8), "w2": arr(1, 8), "b2": arr(1), "x": arr(5, 4),
       "y": arr(5, 1)}
VECS = {k: arr(*MLP[k].shape) for k in ("w1", "b1", "w2", "b2")}


def mlp_hvp(L, dtype):
    F = L.nn.functional
    p = {k: leaf(L, MLP[k], dtype) for k in ("w1", "b1", "w2", "b2")}
    x, y = const(L, MLP["x"], dtype), const(L, MLP["y"], dtype)
    h = L.tanh(F.linear(x, p["w1"], p["b1"]))
    loss = F.mse_loss(F.linear(F.softplus(h), p["w2"], p["b2"]), y)
    params = list(p.values())
    grads = L.autograd.grad(loss, params, create_graph=True)
    gv = sum((g * const(L, VECS[k], dtype)).sum() for g, k in zip(grads, p))
    hv = L.autograd.grad(gv, params)
    return [loss, *grads, *hv]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_hessian_vector_product_of_an_mlp_loss(dtype, compiled):
    check(mlp_hvp, dtype, compiled=compiled, runs=(0, 2))


NORM_X, NORM_W, NORM_V = arr(4, 3, 5), arr(5), arr(4, 3, 5)


def norm_hvp(L, dtype):
    F = L.nn.functional
    x, w = leaf(L, NORM_X, dtype), leaf(L, NORM_W, dtype)
    h = F.gelu(F.layer_norm(x, (5,), w, None), approximate="tanh")
    h = F.batch_norm(h, None, None, training=True)
    loss = (L.sin(h) * F.mish(h)).sum()
    gx, gw = L.autograd.grad(loss, (x, w), create_graph=True)
    hx, hw = L.autograd.grad((gx * const(L, NORM_V, dtype)).sum() + gw.sum(), (x, w))
    return [loss, gx, gw, hx, hw]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_norms_and_activations_second_derivatives(dtype, compiled):
    check(norm_hvp, dtype, compiled=compiled, runs=(0, 2))


def sinc_orders(L, dtype):
    x = leaf(L, np.array([0.013, -0.4, 0.9, 1.7, -2.3]), dtype)
    (g,) = L.autograd.grad(L.sinc(x).sum(), x, create_graph=True)
    (h,) = L.autograd.grad(g.sum(), x)
    return [g, h]


def test_sinc_second_derivative():
    # float64 only: near 0 both libraries' float32 second derivative of sinc cancels
    # (torch's is 2e-4 off the exact value at 0.013, cagrad's 1.4e-4), so float32 results
    # differ by more than rounding
    check(sinc_orders, "float64")


# ---------------------------------------------------------------------------------------
# WGAN-GP: the norm of d critic / d input, squared, added to the loss, one SGD step
# ---------------------------------------------------------------------------------------
CRITIC = {"w1": arr(16, 3), "b1": arr(16), "w2": arr(1, 16), "b2": arr(1)}
REAL, FAKE, ALPHA = arr(6, 3), arr(6, 3), arr(6, 1, lo=0.0, hi=1.0)


def wgan_gp_step(L, dtype, steps=2):
    F = L.nn.functional
    p = {k: leaf(L, v, dtype) for k, v in CRITIC.items()}
    opt = L.optim.SGD(list(p.values()), lr=0.05)

    def critic(x):
        return F.linear(F.leaky_relu(F.linear(x, p["w1"], p["b1"]), 0.2).tanh(),
                        p["w2"], p["b2"])

    real, fake = const(L, REAL, dtype), const(L, FAKE, dtype)
    alpha = const(L, ALPHA, dtype)
    out = []
    for _ in range(steps):
        opt.zero_grad()
        x = (alpha * real + (1 - alpha) * fake).requires_grad_(True)
        (gx,) = L.autograd.grad(critic(x).sum(), x, create_graph=True)
        gp = ((gx.norm(2, dim=1) - 1) ** 2).mean()
        loss = critic(fake).mean() - critic(real).mean() + 10.0 * gp
        loss.backward()
        out += [loss, gp] + [q.grad for q in p.values()]
        opt.step()
    return out + list(p.values())


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_wgan_gp_gradient_penalty_step(dtype, compiled):
    check(wgan_gp_step, dtype, compiled=compiled, runs=(0, 4))


def leaky_critic_penalty(L, dtype):
    """A gradient penalty through a critic that is piecewise linear: the penalty's own
    gradient reaches the interpolated batch's forward only as leaky_relu's second
    derivative, zero by construction. The compiled graph drops that backward (a symbolic
    zero, graph/simplify.c); the input still gets a .grad of zeros, as in torch."""
    F = L.nn.functional
    p = {k: leaf(L, v, dtype) for k, v in CRITIC.items()}
    x = leaf(L, REAL, dtype)
    h = F.leaky_relu(F.linear(x, p["w1"], p["b1"]), 0.2)
    (gx,) = L.autograd.grad(F.linear(h, p["w2"], p["b2"]).sum(), x, create_graph=True)
    gp = ((gx.norm(2, dim=1) - 1) ** 2).mean()
    gp.backward()
    assert p["b2"].grad is None  # gx does not depend on it, in either library
    return [gp, gx, x.grad, p["w1"].grad, p["b1"].grad, p["w2"].grad]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_penalty_through_a_piecewise_linear_critic(dtype, compiled):
    check(leaky_critic_penalty, dtype, compiled=compiled, runs=(0, 2))


def test_the_zero_second_derivative_is_dropped_from_the_compiled_graph(tmp_path):
    with cagrad.compiled_autograd.enable():
        leaky_critic_penalty(cagrad, "float64")
    path = tmp_path / "second.dot"
    cagrad.compiled_autograd.write_graph(path)  # the penalty's backward, the second graph
    ops = re.findall(r'label="aot\d+_\w+\\n(\w+)', path.read_text())
    # the backward through the gradient's own GEMMs (1), and w1's and w2's gradients (1
    # each): the first graph's GEMM is read, not replayed (compiled_double.c's kept
    # values), and the backward of linear(x, w1, b1) on leaky_relu's zero second
    # derivative (dX and dW GEMMs, a bias sum) is gone, x and b1 getting zeros
    assert ops.count("matmul") == 3, ops
    assert ops.count("zeros") == 2 and "sum_to" not in ops, ops


DEEP = [arr(6, 6) * 0.5 for _ in range(14)]
DEEP_X = arr(5, 6)


def deep_mlp_third_order(L, dtype):
    """A 14-layer tanh MLP differentiated three times, as a PINN's loss is: its first
    graph keeps more GEMM results than a traced backward has saved slots for (the rest are
    replayed), and the second graph, itself under create_graph, replays them all."""
    ws = [leaf(L, w, dtype) for w in DEEP]
    x = leaf(L, DEEP_X, dtype)
    h = x
    for w in ws:
        h = (h @ w).tanh()
    (gx,) = L.autograd.grad(h.sum(), x, create_graph=True)
    (gxx,) = L.autograd.grad((gx ** 2).sum(), x, create_graph=True)
    loss = (gxx ** 2).sum() + (gx ** 2).mean()
    loss.backward()
    return [gx, gxx, loss] + [w.grad for w in ws]


def test_deep_third_order_is_traced_with_every_kept_value_it_can_hold():
    before = counters()["custom_callouts"]
    check(deep_mlp_third_order, "float64", compiled=True, runs=(0, 3))
    assert counters()["custom_callouts"] == before  # every CompiledAutogradBackward0 traced


def test_deep_third_order_float32_against_a_float64_oracle():
    """Third derivatives through 14 layers reach 1e3 with float32 rounding to match: each
    result's error against torch in float64 is at most 4x torch's own float32 error."""
    with compiled_ctx(True):
        ours = [v.detach().numpy() for v in deep_mlp_third_order(cagrad, "float32")]
    t32 = [v.detach().numpy() for v in deep_mlp_third_order(torch, "float32")]
    t64 = [v.detach().numpy() for v in deep_mlp_third_order(torch, "float64")]
    for k, (a, b, ref) in enumerate(zip(ours, t32, t64)):
        scale = np.abs(ref).max() + 1e-30
        err, torch_err = np.abs(a - ref).max(), np.abs(b - ref).max()
        assert err <= 4 * torch_err + 8 * 2.0 ** -24 * scale, (k, err, torch_err, scale)


CONV = {"w1": arr(4, 2, 3, 3) * 0.4, "b1": arr(4), "w2": arr(1, 4, 3, 3) * 0.4, "b2": arr(1)}
IMAGES = arr(3, 2, 6, 6)


def r1_penalty_step(L, dtype):
    """R1: the squared gradient norm of a conv critic at real images, with pooling."""
    F = L.nn.functional
    p = {k: leaf(L, v, dtype) for k, v in CONV.items()}
    x = const(L, IMAGES, dtype).requires_grad_(True)
    h = F.softplus(F.conv2d(x, p["w1"], p["b1"], padding=1))
    h = F.avg_pool2d(F.max_pool2d(h, 2), 1)
    d = F.conv2d(h, p["w2"], p["b2"], stride=1, padding=1).mean(dim=(1, 2, 3))
    (gx,) = L.autograd.grad(d.sum(), x, create_graph=True)
    r1 = gx.pow(2).sum(dim=(1, 2, 3)).mean()
    loss = F.softplus(-d).mean() + 5.0 * r1
    loss.backward()
    return [d, gx, r1] + [q.grad for q in p.values()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_r1_penalty_of_a_conv_critic(dtype, compiled):
    check(r1_penalty_step, dtype, compiled=compiled, runs=(0, 2))


def hooks_and_retain_grad(L, dtype):
    x = leaf(L, X3, dtype)
    y = L.tanh(x * 1.5)
    y.retain_grad()
    y.register_hook(lambda g: g * y)  # runs with grad mode on: part of the new graph
    (x.exp() * y).sum().backward(create_graph=True)
    names = (type(x.grad.grad_fn).__name__, type(y.grad.grad_fn).__name__)
    out = [x.grad.detach().clone(), y.grad.detach().clone()]
    # (torch's autograd.grad also adds into y.grad, a retained grad: not compared here)
    (h,) = L.autograd.grad((x.grad * x).sum() + y.grad.sum(), x)
    x.grad = None
    return names, out + [h]


@pytest.mark.parametrize("dtype", DTYPES)
def test_hooks_and_retain_grad_under_create_graph(dtype):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference-cycle warning
        ours, ref = (hooks_and_retain_grad(L, dtype) for L in (cagrad, torch))
    assert ours[0] == ref[0] == ("CopyBackwards", "CloneBackward0")
    for a, b in zip(ours[1], ref[1]):
        assert_close(a.numpy(), b.numpy())


# ---------------------------------------------------------------------------------------
# MAML: params - lr * grad (create_graph), the outer loss differentiates through it
# ---------------------------------------------------------------------------------------
TASK = {"w": arr(3, 5), "b": arr(3), "xs": arr(8, 5), "xq": arr(8, 5)}
YS, YQ = RNG.integers(0, 3, 8), RNG.integers(0, 3, 8)


def maml_step(L, dtype, inner_steps=2):
    F = L.nn.functional
    w, b = leaf(L, TASK["w"], dtype), leaf(L, TASK["b"], dtype)
    xs, xq = const(L, TASK["xs"], dtype), const(L, TASK["xq"], dtype)
    ys, yq = L.tensor(YS), L.tensor(YQ)
    fw, fb = w, b
    for _ in range(inner_steps):
        inner = F.cross_entropy(F.linear(L.sigmoid(xs), fw, fb), ys)
        gw, gb = L.autograd.grad(inner, (fw, fb), create_graph=True)
        fw, fb = fw - 0.4 * gw, fb - 0.4 * gb
    outer = F.cross_entropy(F.linear(L.sigmoid(xq), fw, fb), yq)
    outer.backward()
    return [inner, outer, w.grad, b.grad]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_maml_inner_step(dtype, compiled):
    check(maml_step, dtype, compiled=compiled, runs=(0, 3))


# ---------------------------------------------------------------------------------------
# Physics-informed: the Laplacian of a tanh MLP u(x, y) in the loss
# ---------------------------------------------------------------------------------------
PINN = {"w1": arr(12, 2), "b1": arr(12), "w2": arr(12, 12) * 0.5, "b2": arr(12),
        "w3": arr(1, 12), "b3": arr(1)}
POINTS = arr(10, 2, lo=-1.0, hi=1.0)


def pinn_step(L, dtype):
    F = L.nn.functional
    p = {k: leaf(L, v, dtype) for k, v in PINN.items()}
    x = const(L, POINTS, dtype).requires_grad_(True)
    h = L.tanh(F.linear(x, p["w1"], p["b1"]))
    h = L.tanh(F.linear(h, p["w2"], p["b2"]))
    u = F.linear(h, p["w3"], p["b3"])
    (du,) = L.autograd.grad(u.sum(), x, create_graph=True)
    lap = 0
    for d in range(2):
        (dd,) = L.autograd.grad(du[:, d].sum(), x, create_graph=True)
        lap = lap + dd[:, d]
    source = L.sin(x[:, 0]) * L.cos(x[:, 1])
    loss = ((lap + source) ** 2).mean() + (u ** 2).mean()
    loss.backward()
    return [u, du, lap, loss] + [q.grad for q in p.values()]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_pinn_laplacian_of_a_tanh_mlp(dtype, compiled):
    check(pinn_step, dtype, compiled=compiled, runs=(0, 4))


# ---------------------------------------------------------------------------------------
# Third order, and a custom Function whose backward uses differentiable ops
# ---------------------------------------------------------------------------------------
X3, X5 = arr(4, lo=0.2, hi=1.5), arr(5)


def third_order(L, dtype):
    x = leaf(L, X3, dtype)
    y = (L.sin(x) * x ** 3 + L.exp(-x) / x + L.log1p(x) * L.sqrt(x)).sum()
    (g1,) = L.autograd.grad(y, x, create_graph=True)
    (g2,) = L.autograd.grad(g1.sum(), x, create_graph=True)
    (g3,) = L.autograd.grad(g2.sum(), x)
    return [y, g1, g2, g3]


@pytest.mark.parametrize("dtype", DTYPES)
def test_third_order_of_a_scalar_function(dtype):
    check(third_order, dtype, tol=TOL)


def custom_cube(L, dtype):
    class Cube(L.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return g * 3 * x ** 2

    x = leaf(L, X5, dtype)
    y = Cube.apply(x).sum()
    (g,) = L.autograd.grad(y, x, create_graph=True)
    (h,) = L.autograd.grad((g * g).sum(), x)
    return [g, h]


@pytest.mark.parametrize("dtype", DTYPES)
def test_custom_function_backward_is_differentiable(dtype):
    check(custom_cube, dtype, tol=TOL)


def custom_saving_outputs(L, dtype):
    class ExpTanh(L.autograd.Function):
        """Two outputs, both saved: their history is the node's own outputs."""

        @staticmethod
        def forward(ctx, x):
            e, t = x.exp(), x.tanh()
            ctx.save_for_backward(e, t)
            return e, t

        @staticmethod
        def backward(ctx, ge, gt):
            e, t = ctx.saved_tensors
            return ge * e + gt * (1 - t * t)

    x = leaf(L, X5, dtype)
    e, t = ExpTanh.apply(x)
    (g,) = L.autograd.grad((e * t).sum(), x, create_graph=True)
    (h,) = L.autograd.grad((g * g).sum(), x, create_graph=True)
    (k,) = L.autograd.grad(h.sum(), x)
    return [g, h, k]


@pytest.mark.parametrize("dtype", DTYPES)
def test_custom_function_saved_outputs_keep_their_history(dtype):
    check(custom_saving_outputs, dtype, tol=TOL)


JX = arr(3, 4)


def jvp_by_double_vjp(L, dtype):
    """A Jacobian-vector product from two vjps: the seed u requires grad."""
    x = leaf(L, JX, dtype)
    y = L.tanh(x) * L.sigmoid(2 * x) + x.sum(1, keepdim=True)
    u = L.zeros_like(y, requires_grad=True)
    (vjp,) = L.autograd.grad(y, x, grad_outputs=u, create_graph=True)
    (jvp,) = L.autograd.grad(vjp, u, grad_outputs=L.ones_like(x))
    return [vjp, jvp]


@pytest.mark.parametrize("dtype", DTYPES)
def test_jvp_by_the_double_vjp_trick(dtype):
    check(jvp_by_double_vjp, dtype)


def with_saved_tensor_hooks(L, dtype):
    x = leaf(L, JX, dtype)
    with L.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
        y = (L.exp(x) * L.sin(x)).sum()
    (g,) = L.autograd.grad(y, x, create_graph=True)
    (h,) = L.autograd.grad((g * g).sum(), x)
    return [g, h]


@pytest.mark.parametrize("dtype", DTYPES)
def test_saved_tensor_hooks_under_create_graph(dtype):
    check(with_saved_tensor_hooks, dtype, tol=TOL)


# ---------------------------------------------------------------------------------------
# Every one-tensor op of the registry: its second derivative against torch's
# ---------------------------------------------------------------------------------------
def _registry_unary():
    from cagrad._ops import _params
    ops = dict(cagrad._C.ops)
    out = []
    for name, (_, schema, flags) in sorted(ops.items()):
        ps = _params(schema)
        if ps[0][0] == "Tensor" and all(p[0] != "Tensor" and p[2] is not None for p in ps[1:]):
            out.append((name, flags))
    return out


REGISTRY_UNARY = _registry_unary()


def registry_input(flags, dtype):
    from cagrad._ops import ABOVE_1, ABOVE_M1, POSITIVE, PROB, UNIT
    x = np.array([[-3.5, -0.25, 0.125, 3.75, 0.6], [1.3, -1.7, 2.2, -0.8, 0.35]]) * 0.9
    if flags & POSITIVE:
        x = np.abs(x) + 0.125
    if flags & ABOVE_1:
        x = np.abs(x) + 1.125
    if flags & ABOVE_M1:
        x = np.abs(x) - 0.875
    if flags & UNIT:
        x = np.tanh(x / 4) * 0.875
    if flags & PROB:
        x = 0.5 + np.tanh(x / 4) * 0.4375
    return x.astype(dtype)


def second_derivative(L, name, nn, x, dtype):
    fn = getattr(L.nn.functional if nn else L, name)
    t = L.tensor(x, requires_grad=True)
    w = L.tensor(np.linspace(-1, 1, x.size).reshape(x.shape).astype(dtype))
    (g,) = L.autograd.grad((fn(t) * w).sum(), t, create_graph=True)
    def values(v):  # torch's zero gradients (abs, sgn) are ZeroTensors: force=True
        return v.detach().numpy(force=True) if L is torch else v.detach().numpy()

    try:
        (h,) = L.autograd.grad((g * g).sum(), t)
    except RuntimeError as e:  # a gradient without a history (floor, sign, ...)
        return values(g), str(e)
    return values(g), values(h)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,flags", REGISTRY_UNARY, ids=[n for n, _ in REGISTRY_UNARY])
def test_registry_op_second_derivative_matches_torch(name, flags, dtype):
    from cagrad._ops import PY_NN
    x = registry_input(flags, dtype)
    (g1, h1), (g2, h2) = (second_derivative(L, name, flags & PY_NN, x, dtype)
                          for L in (cagrad, torch))
    assert_close(g1, torch_gradient(name, g2), msg=f"{name} gradient")
    if name == "hardsigmoid":  # torch has no double backward for it; 0 almost everywhere
        assert "hardsigmoid_backward is not implemented" in h2
        np.testing.assert_array_equal(h1, np.zeros_like(h1))
    elif isinstance(h2, str):
        assert h1 == h2
    else:
        assert_close(h1, h2, msg=f"{name} second derivative")


# ---------------------------------------------------------------------------------------
# .grad after backward(create_graph=True)
# ---------------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_create_graph_gives_grad_a_history(dtype):
    names = {}
    for L in (cagrad, torch):
        x = leaf(L, X5, dtype)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # torch's reference-cycle warning (once)
            (x ** 3).sum().backward(create_graph=True)
        first = (x.grad.requires_grad, x.grad.is_leaf, type(x.grad.grad_fn).__name__)
        (x ** 3).sum().backward(create_graph=True)
        second = type(x.grad.grad_fn).__name__
        (h,) = L.autograd.grad(x.grad.sum(), x)
        names[L.__name__] = (first, second, h.numpy(), x.grad.detach().numpy())
        x.grad = None  # breaks the leaf <-> .grad cycle, as torch's warning advises
    ours, ref = names["cagrad"], names["torch"]
    assert ours[:2] == ref[:2] == ((True, False, "CopyBackwards"), "AddBackward0")
    assert_close(ours[2], ref[2])
    assert_close(ours[3], ref[3])


def test_autograd_backward_inputs_and_create_graph():
    res = {}
    for L in (cagrad, torch):
        x, w = leaf(L, X3, "float64"), leaf(L, X5[:4], "float64")
        L.autograd.backward([(x * x * w).sum()], inputs=[x], create_graph=True)
        (h,) = L.autograd.grad(x.grad.sum(), w)
        res[L.__name__] = (x.grad.detach().numpy(), h.numpy(), w.grad)
        x.grad = None
    assert res["cagrad"][2] is None and res["torch"][2] is None
    for a, b in zip(res["cagrad"][:2], res["torch"][:2]):
        assert_close(a, b)


def test_grad_of_a_constant_gradient_has_no_history():
    for L in (cagrad, torch):
        x = leaf(L, arr(3), "float32")
        (g,) = L.autograd.grad((x * 2).sum(), x, create_graph=True)
        assert g.grad_fn is None and not g.requires_grad


# ---------------------------------------------------------------------------------------
# Errors, as torch gives them
# ---------------------------------------------------------------------------------------
def errors_of(f):
    out = []
    for L in (cagrad, torch):
        with pytest.raises(Exception) as e:
            f(L)
        out.append((type(e.value), str(e.value)))
    return out


def test_differentiating_a_gradient_made_without_create_graph():
    def f(L):
        x = leaf(L, arr(3), "float32")
        (g,) = L.autograd.grad((x ** 3).sum(), x)
        L.autograd.grad(g.sum(), x)

    ours, ref = errors_of(f)
    assert ours == ref
    assert ref == (RuntimeError, "element 0 of tensors does not require grad and does not have "
                                 "a grad_fn")


def test_once_differentiable_function_refuses_a_double_backward():
    def f(L):
        class Sq(L.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                ctx.save_for_backward(x)
                return x * x

            @staticmethod
            @L.autograd.function.once_differentiable
            def backward(ctx, g):
                (x,) = ctx.saved_tensors
                return 2 * g * x

        x = leaf(L, arr(3), "float64")
        y = (Sq.apply(x) ** 2).sum()  # the gradient reaching Sq requires grad
        (g,) = L.autograd.grad(y, x, create_graph=True)
        g.sum().backward()  # reaches the error node (autograd.grad w.r.t. x would not)

    ours, ref = errors_of(f)
    assert ours[0] is ref[0] is RuntimeError
    assert "trying to differentiate twice a function that was marked with " \
           "@once_differentiable" in ours[1]
    assert ref[1] == "trying to differentiate twice a function that was marked with " \
                     "@once_differentiable"


CUMPROD_X = np.array([[0.5, 0.0, 1.3, -0.7], [1.1, 0.9, 0.0, 0.0], [0.4, -1.2, 0.8, 1.5]])


def cumprod_orders(L, dtype, dim):
    x = leaf(L, CUMPROD_X, dtype)
    w = const(L, np.arange(12.0).reshape(3, 4) / 7, dtype)
    (g,) = L.autograd.grad((L.cumprod(x, dim) * w).sum(), x, create_graph=True)
    (h,) = L.autograd.grad((g * g * w).sum(), x, create_graph=True)
    (k,) = L.autograd.grad(h.sum(), x)
    return [g, h, k]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("dim", [0, 1])
def test_cumprod_with_zeros_to_third_order(dtype, dim):
    check(cumprod_orders, dtype, dim)


def test_allow_unused_with_create_graph():
    def f(L, allow):
        x, u = leaf(L, arr(3), "float64"), leaf(L, arr(3), "float64")
        (g,) = L.autograd.grad((x ** 2).sum(), x, create_graph=True)
        return L.autograd.grad(g.sum(), [x, u], allow_unused=allow)

    for L in (cagrad, torch):
        hx, hu = f(L, True)
        assert hu is None
        assert_close(np.asarray(hx.numpy()), np.full(3, 2.0))
        with pytest.raises(RuntimeError) as e:
            f(L, False)
        assert "allow_unused" in str(e.value)


# ---------------------------------------------------------------------------------------
# Compiled autograd: autograd.grad(create_graph=True) is captured and cached, its gradients
# differentiable, and backward(create_graph=True) into .grad too; a hook in such a backward
# runs it eagerly, counted and logged
# ---------------------------------------------------------------------------------------
def test_compiled_create_graph_grad_is_captured_then_cached(reset_counters):
    x = cagrad.randn(4, dtype=cagrad.float64, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        for step in range(3):
            before = counters()
            (g,) = cagrad.autograd.grad(cagrad.tanh(x).sum(), x, create_graph=True)
            assert type(g.grad_fn).__name__ == "CompiledAutogradBackward0"
            (h,) = cagrad.autograd.grad(g.sum(), x)
            after = {k: v - before[k] for k, v in counters().items()}
            # the first step captures both graphs (the second traces the node's backward),
            # later steps hit both
            want = (2, 0, 1) if step == 0 else (0, 2, 0)
            assert (after["captures"], after["cache_hits"], after["custom_traced"]) == want, after
            assert after["eager_fallbacks"] == 0, after
            t = np.tanh(x.detach().numpy())
            assert_close(g.detach().numpy(), 1 - t * t)
            assert_close(h.numpy(), -2 * t * (1 - t * t))


def gp_sizes(L, dtype, sizes=(6, 8, 5, 7, 6)):
    """WGAN-GP steps whose batch changes: the batch dim turns dynamic, and the compiled
    double backward (its tape's sizes resolved per run) keeps capturing and hitting."""
    F = L.nn.functional
    p = {k: leaf(L, v, dtype) for k, v in CRITIC.items()}
    rng = np.random.default_rng(11)
    out = []
    for b in sizes:
        x = const(L, rng.standard_normal((b, 3)), dtype).requires_grad_(True)
        h = F.linear(F.leaky_relu(F.linear(x, p["w1"], p["b1"]), 0.2).tanh(), p["w2"], p["b2"])
        (gx,) = L.autograd.grad(h.mean(), x, create_graph=True)
        gp = ((gx.norm(2, dim=1) - 1) ** 2).mean()
        for q in p.values():
            q.grad = None
        (h.mean() + 10.0 * gp).backward()
        out += [gx, gp] + [q.grad for q in p.values()]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
def test_compiled_double_backward_across_batch_sizes(dtype, reset_counters):
    check(gp_sizes, dtype, compiled=True, runs=(0, 10))
    c = counters()
    # the first backward: static, then dynamic; the backward through its node: one graph
    # per tape (the static and the dynamic entry's), then dynamic; later sizes hit
    assert c["captures"] <= 5 and c["cache_hits"] >= 5, c


def test_compiled_create_graph_and_plain_grads_never_share_a_graph(reset_counters):
    """create_graph is part of the key: the same backward with and without it are two
    graphs, and only the create_graph one gives gradients with a history."""
    x = cagrad.randn(3, 2, dtype=cagrad.float64, requires_grad=True)
    with cagrad.compiled_autograd.enable():
        (a,) = cagrad.autograd.grad((x.sin() * x).sum(), x)
        (b,) = cagrad.autograd.grad((x.sin() * x).sum(), x, create_graph=True)
        (c,) = cagrad.autograd.grad((x.sin() * x).sum(), x)
    assert a.grad_fn is None and c.grad_fn is None and b.grad_fn is not None
    assert counters()["captures"] == 2 and counters()["cache_hits"] == 1
    assert_close(a.numpy(), b.detach().numpy(), rtol=0, atol=0)


def hvp_by_backward(L, dtype, steps=3):
    """The Hessian-vector product written with backward(create_graph=True): .grad carries a
    history (CopyBackwards), and a second backward differentiates it."""
    p = {k: leaf(L, MLP[k], dtype) for k in ("w1", "b1", "w2", "b2")}
    x, y = const(L, MLP["x"], dtype), const(L, MLP["y"], dtype)
    F = L.nn.functional
    out = []
    for _ in range(steps):
        for q in p.values():
            q.grad = None
        loss = F.mse_loss(F.linear(L.tanh(F.linear(x, p["w1"], p["b1"])), p["w2"], p["b2"]), y)
        loss.backward(create_graph=True)
        names = {type(q.grad.grad_fn).__name__ for q in p.values()}
        assert names == {"CopyBackwards"}, names
        grads = [q.grad for q in p.values()]
        for q in p.values():
            q.grad = None
        sum((g * const(L, VECS[k], dtype)).sum() for g, k in zip(grads, p)).backward()
        out += [g.detach() for g in grads] + [q.grad for q in p.values()]
    return out


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", [False, True])
def test_hessian_vector_product_through_backward_create_graph(dtype, compiled):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the reference-cycle warning
        check(hvp_by_backward, dtype, compiled=compiled, runs=(0, 6))


CHILD = textwrap.dedent(
    """
    import cagrad as torch
    x = torch.randn(3, requires_grad=True)
    with torch.compiled_autograd.enable():
        (g,) = torch.autograd.grad((x ** 3).sum(), x, create_graph=True)
        g.sum().backward()
        print("FALLBACKS", torch.compiled_autograd.counters["eager_fallbacks"])
        y = x ** 3
        y.register_hook(lambda g: g * 2)
        (g,) = torch.autograd.grad(y.sum(), x, create_graph=True)
    print("FALLBACKS", torch.compiled_autograd.counters["eager_fallbacks"])
    """
)


def test_compiled_mode_logs_both_graphs_and_why_a_backward_ran_eagerly():
    env = dict(os.environ)
    pkg_root = os.path.dirname(os.path.dirname(os.path.abspath(cagrad.__file__)))
    env["PYTHONPATH"] = os.pathsep.join([pkg_root] + [p for p in sys.path if p])
    env["CAGRAD_LOGS"] = "compiled_autograd_verbose"
    r = subprocess.run([sys.executable, "-c", CHILD], env=env, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == ["FALLBACKS", "0", "FALLBACKS", "1"], r.stdout
    assert r.stderr.count("TRACED GRAPH") == 2, r.stderr  # the double backward's two graphs
    assert re.search(r"CompiledAutogradBackward0 \(NodeCall \d+\): custom backward traced",
                     r.stderr), r.stderr
    assert ("create_graph=True with tensor or node hooks, retain_grad or .grad accumulation "
            "is not captured yet" in r.stderr), r.stderr


def test_warning_only_for_backward_without_inputs():
    x = cagrad.randn(3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        cagrad.autograd.grad((x ** 2).sum(), x, create_graph=True)
        cagrad.autograd.backward((x ** 2).sum(), inputs=[x], create_graph=True)
    x.grad = None


def test_backward_create_graph_warns_of_the_cycle_once():
    cagrad.autograd._warned_cycle = False
    x = cagrad.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="will create a reference cycle between the parameter "
                                         "and its gradient"):
        (x ** 2).sum().backward(create_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        (x ** 2).sum().backward(create_graph=True)
    x.grad = None


# ---------------------------------------------------------------------------------------
# No leak: the gradients' graphs point back into the first graph only (no reference cycle)
# ---------------------------------------------------------------------------------------
def _rss_mb():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def _live_tensors():
    return sum(1 for o in gc.get_objects() if isinstance(o, cagrad.Tensor))


def test_double_backward_steps_do_not_leak():
    # each step makes [128, 256] float32 tensors (128 KiB): one leaked per step over 200
    # steps is 25 MiB, against a 12 MiB bound for allocator noise (as test_memory.py)
    cagrad.manual_seed(0)
    net = cagrad.nn.Sequential(cagrad.nn.Linear(256, 256), cagrad.nn.Tanh(),
                               cagrad.nn.Linear(256, 1))
    opt = cagrad.optim.SGD(net.parameters(), lr=1e-3)

    def step():
        opt.zero_grad()
        x = cagrad.randn(128, 256).requires_grad_(True)
        (gx,) = cagrad.autograd.grad(net(x).sum(), x, create_graph=True)
        loss = net(x).mean() + ((gx.norm(2, dim=1) - 1) ** 2).mean()
        params = list(net.parameters())
        grads = cagrad.autograd.grad(loss, params, create_graph=True)
        hv = cagrad.autograd.grad(sum((g * g).sum() for g in grads), params, allow_unused=True)
        for p, h in zip(params, hv):
            p.grad = h  # None for the last bias: its gradient is a constant
        opt.step()

    for _ in range(20):
        step()
    gc.collect()
    tensors_before = _live_tensors()
    before = _rss_mb()
    for _ in range(200):
        step()
    gc.collect()
    # a step that kept its graph alive would keep its tensors' Python objects too
    assert _live_tensors() <= tensors_before
    if os.environ.get("CAGRAD_SANITIZED") != "1":  # ASan's quarantine keeps freed memory
        assert _rss_mb() - before < 12
