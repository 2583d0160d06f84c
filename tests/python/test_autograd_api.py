"""The autograd API of Tensor and the autograd helpers, checked against torch where both
can run the same code."""

import gc

import numpy as np
import pytest
import torch

from helpers import STANDIN, assert_close, ca, to_np

LIBS = pytest.mark.parametrize("L", [ca, torch], ids=["cagrad", "torch"])


# ---------------------------------------------------------------------------------------
# requires_grad, is_leaf, grad_fn
# ---------------------------------------------------------------------------------------
def test_requires_grad_and_is_leaf():
    x = ca.ones(3)
    assert not x.requires_grad and x.is_leaf and x.grad_fn is None
    r = x.requires_grad_()
    assert r is x and x.requires_grad and x.is_leaf
    x.requires_grad_(False)
    assert not x.requires_grad
    x.requires_grad = True
    assert x.requires_grad
    y = x * 2.0
    assert y.requires_grad and not y.is_leaf and y.grad_fn is not None
    z = ca.ones(3) * 2.0  # no input requires grad: a leaf without grad_fn
    assert not z.requires_grad and z.is_leaf and z.grad_fn is None


def test_creation_requires_grad_kwarg():
    for make in (lambda: ca.zeros(2, 3, requires_grad=True),
                 lambda: ca.ones((2, 3), requires_grad=True),
                 lambda: ca.randn(2, 3, requires_grad=True),
                 lambda: ca.tensor([1.0, 2.0], requires_grad=True),
                 lambda: ca.full((2,), 3.0, requires_grad=True)):
        t = make()
        assert t.requires_grad and t.is_leaf


GRAD_FN_EXPRS = {
    "mm": lambda L, a, b: L.mm(a, b),
    "add": lambda L, a, b: a + b,
    "sub": lambda L, a, b: a - b,
    "mul": lambda L, a, b: a * b,
    "div": lambda L, a, b: a / b,
    "bmm": lambda L, a, b: L.bmm(a.unsqueeze(0), b.unsqueeze(0)),
    "exp": lambda L, a, b: a.exp(),
    "log": lambda L, a, b: (a * a + 1.0).log(),
    "neg": lambda L, a, b: -a,
    "relu": lambda L, a, b: L.relu(a),
    "tanh": lambda L, a, b: a.tanh(),
    "sigmoid": lambda L, a, b: a.sigmoid(),
    "sum": lambda L, a, b: a.sum(),
    "mean": lambda L, a, b: a.mean(),
    "softmax": lambda L, a, b: L.softmax(a, 1),
    "log_softmax": lambda L, a, b: L.nn.functional.log_softmax(a, 1),
    "view": lambda L, a, b: a.view(4),
    "permute": lambda L, a, b: a.permute(1, 0),
    "t": lambda L, a, b: a.t(),
    "transpose": lambda L, a, b: a.transpose(0, 1),
    "T": lambda L, a, b: a.T,
    "mT": lambda L, a, b: a.mT,
    "linear": lambda L, a, b: L.nn.functional.linear(a, b, b[0]),
    "linear_no_bias": lambda L, a, b: L.nn.functional.linear(a, b),
    "linear_3d": lambda L, a, b: L.nn.functional.linear(a.unsqueeze(0), b, b[0]),
    "linear_3d_no_bias": lambda L, a, b: L.nn.functional.linear(a.unsqueeze(0), b),
    "nn_linear": lambda L, a, b: L.nn.Linear(2, 3)(a),
    "expand": lambda L, a, b: a[0:1].expand(3, 2),
    "select": lambda L, a, b: a[0],
    "cat": lambda L, a, b: L.cat([a, b], 0),
    "where": lambda L, a, b: L.where(a > 0, a, b),
    "index_select": lambda L, a, b: a.index_select(0, L.tensor([1, 0])),
    "gather": lambda L, a, b: a.gather(1, L.tensor([[0], [1]])),
    "mse_loss": lambda L, a, b: L.nn.functional.mse_loss(a, b),
    "cross_entropy": lambda L, a, b: L.nn.functional.cross_entropy(a, L.tensor([0, 1])),
    "layer_norm": lambda L, a, b: L.nn.functional.layer_norm(a, (2,)),
    "embedding": lambda L, a, b: L.nn.functional.embedding(L.tensor([1, 0]), a),
    "gelu": lambda L, a, b: L.nn.functional.gelu(a),
    "maximum": lambda L, a, b: L.maximum(a, b),
}


@pytest.mark.parametrize("name", list(GRAD_FN_EXPRS))
def test_grad_fn_names_match_torch(name):
    arr = np.array([[0.5, -1.0], [2.0, 0.25]], np.float32)
    brr = np.array([[1.5, 2.0], [-0.5, 3.0]], np.float32)
    names = []
    for L in (ca, torch):
        a = L.tensor(arr.copy(), requires_grad=True)
        b = L.tensor(brr.copy(), requires_grad=True)
        out = GRAD_FN_EXPRS[name](L, a, b)
        names.append((type(out.grad_fn).__name__, out.grad_fn.name()))
    assert names[0] == names[1], f"cagrad {names[0]} vs torch {names[1]}"


# Python scalars: torch wraps them as 0-d tensors and records the Tensor overload's node
# (AddBackward0, MulBackward0, ...), not the Scalar overload's (AddBackward1, ...).
SCALAR_GRAD_FN = {
    "x+1": lambda x: x + 1.0,
    "1+x": lambda x: 1.0 + x,
    "x*2": lambda x: x * 2.0,
    "2*x": lambda x: 2.0 * x,
    "x-1": lambda x: x - 1.0,
    "1-x": lambda x: 1.0 - x,
    "x/2": lambda x: x / 2.0,
    "x**2": lambda x: x ** 2.0,
    "2**x": lambda x: 2.0 ** x,
    "clamp": lambda x: x.clamp(0.0, 1.0),
}


@pytest.mark.parametrize("name", list(SCALAR_GRAD_FN))
def test_grad_fn_names_scalar_forms_match_torch(name):
    names = []
    for L in (ca, torch):
        x = L.tensor([0.5, 1.5], requires_grad=True)
        names.append(SCALAR_GRAD_FN[name](x).grad_fn.name())
    assert names[0] == names[1], f"cagrad {names[0]} vs torch {names[1]}"


def _node_tree(fn, depth):
    """(name, [children]) of a grad_fn down to depth (torch: next_functions; cagrad has
    none, so this is for torch only)."""
    if fn is None:
        return None
    kids = [] if depth == 0 else [_node_tree(f, depth - 1) for f, _ in fn.next_functions]
    return (fn.name().replace("torch::autograd::", ""), kids)


def test_linear_records_torchs_nodes():
    """What torch 2.13 records for F.linear, which cagrad copies (its C test checks the
    edges: linalg/linear_records_pytorchs_nodes): addmm or mm on t(weight)."""
    w = torch.randn(3, 2, requires_grad=True)
    b = torch.randn(3, requires_grad=True)
    x = torch.randn(4, 2, requires_grad=True)
    acc = ("AccumulateGrad", [])
    t = ("TBackward0", [acc])
    F = torch.nn.functional
    assert _node_tree(F.linear(x, w, b).grad_fn, 2) == ("AddmmBackward0", [acc, acc, t])
    assert _node_tree(F.linear(x, w).grad_fn, 2) == ("MmBackward0", [acc, t])
    x3 = torch.randn(5, 4, 2, requires_grad=True)
    view_x = ("ViewBackward0", [acc])
    assert _node_tree(F.linear(x3, w, b).grad_fn, 3) == (
        "ViewBackward0", [("AddmmBackward0", [acc, view_x, t])])
    assert _node_tree(F.linear(x3, w).grad_fn, 3) == (
        "UnsafeViewBackward0", [("MmBackward0", [view_x, t])])


def test_grad_fn_examples():
    a = ca.ones(2, 2, requires_grad=True)
    assert type(ca.mm(a, a).grad_fn).__name__ == "MmBackward0"
    assert (a + a).grad_fn.name() == "AddBackward0"


# ---------------------------------------------------------------------------------------
# .grad
# ---------------------------------------------------------------------------------------
def test_grad_setter_none_and_tensor():
    x = ca.ones(3, requires_grad=True)
    assert x.grad is None
    g = ca.tensor([1.0, 2.0, 3.0])
    x.grad = g
    np.testing.assert_array_equal(to_np(x.grad), [1.0, 2.0, 3.0])
    (x * 2.0).sum().backward()  # accumulates into the assigned grad
    np.testing.assert_array_equal(to_np(x.grad), [3.0, 4.0, 5.0])
    x.grad = None
    assert x.grad is None
    (x * 2.0).sum().backward()
    np.testing.assert_array_equal(to_np(x.grad), [2.0, 2.0, 2.0])


@LIBS
def test_grad_identity_stable_across_accumulation(L, compiled):
    x = L.ones(3, requires_grad=True)
    (x * 2.0).sum().backward()
    g = x.grad
    assert x.grad is x.grad
    assert g is x.grad
    (x * 3.0).sum().backward()
    assert x.grad is g, "accumulating backward must keep the same .grad object"
    np.testing.assert_array_equal(to_np(g), [5.0, 5.0, 5.0])


def test_grad_of_non_contiguous_leaf_has_leaf_shape():
    x = ca.from_numpy(np.arange(6.0).reshape(2, 3).T.copy().T).requires_grad_()
    (x * x).sum().backward()
    assert tuple(x.grad.shape) == (2, 3)
    np.testing.assert_allclose(to_np(x.grad), 2 * np.arange(6.0).reshape(2, 3))


# ---------------------------------------------------------------------------------------
# retain_grad, hooks
# ---------------------------------------------------------------------------------------
@LIBS
def test_retain_grad(L, compiled):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = x * 2.0
    z = y * y
    y.retain_grad()
    assert y.retains_grad
    z.sum().backward()
    np.testing.assert_allclose(to_np(y.grad), 2 * np.array([2.0, 4.0, 6.0]))
    assert z.grad is None  # not retained (torch warns when reading it)


def test_non_leaf_grad_is_none_without_retain(recwarn):
    x = ca.ones(3, requires_grad=True)
    y = x * 2.0
    y.sum().backward()
    assert y.grad is None


@LIBS
def test_register_hook_and_remove(L, compiled):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    calls = []
    h = x.register_hook(lambda g: calls.append(to_np(g)))
    (x * 3.0).sum().backward()
    assert len(calls) == 1
    np.testing.assert_array_equal(calls[0], [3.0, 3.0])
    h.remove()
    (x * 3.0).sum().backward()
    assert len(calls) == 1, "a removed hook must not run"
    np.testing.assert_array_equal(to_np(x.grad), [6.0, 6.0])


@LIBS
def test_hook_replaces_gradient(L, compiled):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * 3.0
    y.register_hook(lambda g: g * 10.0)
    (y * 1.0).sum().backward()
    np.testing.assert_array_equal(to_np(x.grad), [30.0, 30.0])


@LIBS
def test_hooks_run_in_registration_order(L, compiled):
    x = L.tensor([1.0], requires_grad=True)
    y = x * 1.0
    order = []
    y.register_hook(lambda g: (order.append("a"), g + 1.0)[1])
    y.register_hook(lambda g: (order.append("b"), g * 2.0)[1])
    y.sum().backward()
    assert order == ["a", "b"]
    np.testing.assert_array_equal(to_np(x.grad), [4.0])  # (1 + 1) * 2


@LIBS
def test_post_accumulate_grad_hook(L, compiled):
    p = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    seen = []

    def hook(t):
        seen.append(to_np(t.grad))
        with L.no_grad():  # optimizer-in-backward pattern: update the param in place
            t.add_(t.grad, alpha=-0.1)

    h = p.register_post_accumulate_grad_hook(hook)
    (p * p).sum().backward()
    assert len(seen) == 1
    np.testing.assert_allclose(seen[0], [2.0, 4.0, 6.0])
    np.testing.assert_allclose(to_np(p), [0.8, 1.6, 2.4], rtol=1e-6)
    h.remove()
    (p * 1.0).sum().backward()
    assert len(seen) == 1


# ---------------------------------------------------------------------------------------
# backward options
# ---------------------------------------------------------------------------------------
@LIBS
def test_backward_with_gradient(L, compiled):
    x = L.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    y = x * x
    y.backward(gradient=L.tensor([[1.0, 0.5], [0.0, -1.0]]))
    np.testing.assert_allclose(to_np(x.grad), [[2.0, 2.0], [0.0, -8.0]])


@LIBS
def test_backward_gradient_positional(L):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    (x * 3.0).backward(L.tensor([1.0, 2.0]))
    np.testing.assert_allclose(to_np(x.grad), [3.0, 6.0])


@LIBS
def test_retain_graph_allows_second_backward(L, compiled):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    loss = (x.exp() * x).sum()
    loss.backward(retain_graph=True)
    g1 = to_np(x.grad)
    loss.backward()
    np.testing.assert_allclose(to_np(x.grad), 2 * g1, rtol=1e-6)


def test_backward_of_scalar_times_view_chain():
    x = ca.tensor(np.arange(6.0), requires_grad=True)
    y = x.reshape(2, 3).t()[1:].sum()
    y.backward()
    np.testing.assert_array_equal(to_np(x.grad), [0, 1, 1, 0, 1, 1])


# ---------------------------------------------------------------------------------------
# grad mode
# ---------------------------------------------------------------------------------------
@LIBS
def test_no_grad_context(L):
    x = L.ones(3, requires_grad=True)
    with L.no_grad():
        assert not L.is_grad_enabled()
        y = x * 2.0
        with L.enable_grad():
            assert L.is_grad_enabled()
            z = x * 2.0
        assert not L.is_grad_enabled()
    assert L.is_grad_enabled()
    assert not y.requires_grad and y.grad_fn is None
    assert z.requires_grad and z.grad_fn is not None


@LIBS
def test_no_grad_restores_on_exception(L):
    with pytest.raises(KeyError):
        with L.no_grad():
            raise KeyError()
    assert L.is_grad_enabled()


@LIBS
def test_set_grad_enabled_context_and_function(L):
    x = L.ones(2, requires_grad=True)
    with L.set_grad_enabled(False):
        assert not (x * 2.0).requires_grad
    assert L.is_grad_enabled()
    with L.set_grad_enabled(True):
        assert (x * 2.0).requires_grad
    L.set_grad_enabled(False)
    try:
        assert not L.is_grad_enabled()
        assert not (x * 2.0).requires_grad
    finally:
        L.set_grad_enabled(True)
    assert L.is_grad_enabled()


@LIBS
def test_grad_mode_decorators(L):
    x = L.ones(2, requires_grad=True)

    @L.no_grad()
    def f(t):
        return t * 2.0

    @L.no_grad
    def f2(t):
        return t * 2.0

    @L.enable_grad()
    def g(t):
        return t * 2.0

    assert not f(x).requires_grad
    assert not f2(x).requires_grad
    with L.no_grad():
        assert g(x).requires_grad
    assert L.is_grad_enabled()
    assert f.__name__ == "f"


# ---------------------------------------------------------------------------------------
# autograd.grad
# ---------------------------------------------------------------------------------------
@LIBS
def test_autograd_grad_basic(L, compiled):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w = L.tensor([0.5, -1.0, 2.0], requires_grad=True)
    y = (x * w).sum()
    gx, gw = L.autograd.grad(y, [x, w])
    np.testing.assert_array_equal(to_np(gx), [0.5, -1.0, 2.0])
    np.testing.assert_array_equal(to_np(gw), [1.0, 2.0, 3.0])
    assert x.grad is None and w.grad is None, "autograd.grad must not touch .grad"


@LIBS
def test_autograd_grad_outputs_and_retain(L, compiled):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * x
    (g,) = L.autograd.grad(y, x, grad_outputs=L.tensor([1.0, -1.0]), retain_graph=True)
    np.testing.assert_array_equal(to_np(g), [2.0, -4.0])
    (g2,) = L.autograd.grad([y], [x], grad_outputs=[L.tensor([2.0, 0.0])])
    np.testing.assert_array_equal(to_np(g2), [4.0, 0.0])


@LIBS
def test_autograd_grad_allow_unused(L, compiled):
    x = L.ones(2, requires_grad=True)
    z = L.ones(2, requires_grad=True)
    gx, gz = L.autograd.grad((x * 3.0).sum(), (x, z), allow_unused=True)
    np.testing.assert_array_equal(to_np(gx), [3.0, 3.0])
    assert gz is None


@LIBS
def test_autograd_grad_of_intermediate(L):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    h = x * 2.0
    y = (h * h).sum()
    (gh,) = L.autograd.grad(y, h)
    np.testing.assert_array_equal(to_np(gh), [4.0, 8.0])


# ---------------------------------------------------------------------------------------
# detach
# ---------------------------------------------------------------------------------------
@LIBS
def test_detach_shares_storage(L):
    x = L.tensor([1.0, 2.0, 3.0], requires_grad=True)
    d = x.detach()
    assert not d.requires_grad and d.is_leaf and d.grad_fn is None
    v0 = x._version
    d.mul_(2.0)  # allowed: d does not require grad
    np.testing.assert_array_equal(to_np(x), [2.0, 4.0, 6.0])
    assert x._version == v0 + 1, "detach shares the version counter"


@LIBS
def test_detach_stops_gradient(L, compiled):
    x = L.tensor([1.0, 2.0], requires_grad=True)
    y = x * x.detach()
    y.sum().backward()
    np.testing.assert_array_equal(to_np(x.grad), [1.0, 2.0])


# ---------------------------------------------------------------------------------------
# Tensor basics used everywhere
# ---------------------------------------------------------------------------------------
def test_shape_dtype_size_numel():
    t = ca.zeros(2, 3, 4)
    assert t.shape == (2, 3, 4) and t.size() == (2, 3, 4) and t.size(1) == 3
    assert t.size(-1) == 4 and t.ndim == 3 and t.dim() == 3 and t.numel() == 24
    assert t.dtype == ca.float32 and len(t) == 2
    assert ca.zeros(2, dtype=ca.float64).dtype == ca.float64
    if not STANDIN:
        assert repr(ca.float32) == "cagrad.float32"
        assert repr(t.shape) == "cagrad.Size([2, 3, 4])"
        assert isinstance(t.shape, ca.Size) and isinstance(t.shape, tuple)
    assert ca.float32.is_floating_point and not ca.int64.is_floating_point
    assert ca.float64.itemsize == 8


def test_tensor_dtype_inference():
    assert ca.tensor([1.0, 2.0]).dtype == ca.float32
    assert ca.tensor([1, 2]).dtype == ca.int64
    assert ca.tensor(np.zeros(2, np.float64)).dtype == ca.float64
    assert ca.tensor([1, 2], dtype=ca.float64).dtype == ca.float64


def test_creation_functions_values():
    assert_close(ca.arange(5), torch.arange(5))
    assert_close(ca.arange(1.0, 2.0, 0.25), torch.arange(1.0, 2.0, 0.25))
    assert_close(ca.full((2, 3), 1.5), torch.full((2, 3), 1.5))
    assert_close(ca.zeros((2, 3), dtype=ca.float64), torch.zeros((2, 3), dtype=torch.float64))
    assert_close(ca.ones(2, 3), torch.ones(2, 3))
    assert tuple(ca.empty(3, 2).shape) == (3, 2)


def test_randn_rand_seeded_and_distributed():
    ca.manual_seed(7)
    a = to_np(ca.randn(20000))
    ca.manual_seed(7)
    b = to_np(ca.randn(20000))
    np.testing.assert_array_equal(a, b)
    assert abs(a.mean()) < 0.05 and abs(a.std() - 1.0) < 0.05
    u = to_np(ca.rand(20000, dtype=ca.float64))
    assert u.dtype == np.float64 and u.min() >= 0.0 and u.max() < 1.0
    assert abs(u.mean() - 0.5) < 0.02


def test_grad_survives_wrapper_gc():
    x = ca.ones(3, requires_grad=True)
    (x * 2.0).sum().backward()
    gid = id(x.grad)
    gc.collect()
    assert id(x.grad) == gid
    np.testing.assert_array_equal(to_np(x.grad), [2.0, 2.0, 2.0])
