"""cagrad.bool, a real dtype: creation, conversions, comparisons, PyTorch's type promotion of
bool operands, reductions, masks (indexing, masked_fill, where, attention), gradients through
bool masks (eager and compiled), and interop (item, tolist, repr, NumPy, DLPack, save/load),
each compared with torch 2.13."""

import io
import math

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, outcome, same_outcome

VALUES = [[1.5, -2.0, 0.0], [float("nan"), -0.0, 3.0]]
MASK = [[True, False, True], [False, False, True]]


def both(make):
    """make(L) for cagrad and torch."""
    return make(ca), make(torch)


def check(make, msg=""):
    """make(L) gives equal values and dtypes with cagrad and torch."""
    c, t = both(make)
    assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1], msg
    assert_close(c, t, msg=msg)


# ------------------------------------------------------------------------ the dtype
def test_bool_is_a_real_dtype():
    m = ca.tensor([True, False])
    assert m.dtype == ca.bool and m.dtype is ca.bool
    assert not m.is_floating_point() and not ca.bool.is_floating_point
    assert m.element_size() == torch.tensor([True]).element_size() == 1
    assert ca.bool.itemsize == 1


@pytest.mark.parametrize("make", [
    lambda L: L.zeros(2, 3, dtype=L.bool), lambda L: L.ones(2, dtype=L.bool),
    lambda L: L.full((2,), 1, dtype=L.bool), lambda L: L.full((3,), True),
    lambda L: L.full((2,), -0.5, dtype=L.bool), lambda L: L.tensor([True, False]),
    lambda L: L.tensor(True), lambda L: L.tensor([[True], [False]]),
    lambda L: L.tensor([1.0, 0.0], dtype=L.bool), lambda L: L.tensor([True, 1]),
    lambda L: L.tensor([True, 1.5]), lambda L: L.zeros_like(L.ones(2), dtype=L.bool),
    lambda L: L.ones(2, dtype=L.bool).new_zeros(3), lambda L: L.zeros(2, dtype=bool),
    lambda L: L.empty(0, dtype=L.bool),
], ids=["zeros", "ones", "full_dtype", "full_true", "full_nonzero", "tensor", "tensor_0d",
        "tensor_2d", "tensor_dtype", "mixed_int", "mixed_float", "zeros_like", "new_zeros",
        "python_bool", "empty"])
def test_creation(make):
    check(make)


@pytest.mark.parametrize("make", [
    lambda L: L.tensor(VALUES).bool(), lambda L: L.tensor(VALUES).to(L.bool),
    lambda L: L.tensor(VALUES).to(bool), lambda L: L.tensor(VALUES).to(dtype=L.bool),
    lambda L: L.tensor(VALUES, dtype=L.float64).t().bool(),
    lambda L: L.tensor([3, 0, -2]).bool(), lambda L: L.tensor(MASK).float(),
    lambda L: L.tensor(MASK).double(), lambda L: L.tensor(MASK).long(),
    lambda L: L.tensor(MASK).t().to(L.float64), lambda L: L.tensor(MASK).clone(),
    lambda L: L.tensor(MASK).t().contiguous(),
], ids=["bool", "to", "to_python_bool", "to_kw", "strided_f64", "int64", "float", "double",
        "long", "strided_from", "clone", "contiguous"])
def test_conversions(make):
    check(make)


# ------------------------------------------------------------------------ comparisons
@pytest.mark.parametrize("expr", [
    "x > 0", "x >= y", "x < y", "x <= 0.5", "x == y", "x != y", "x == x", "i == x", "x > i",
    "m == n", "m < n", "m != n", "m > 0.5", "m == 1", "m == True", "x > m", "m <= i",
    "L.isnan(x)", "L.isinf(x)", "L.isfinite(x)", "L.isclose(x, y)",
    "L.logical_not(x)", "L.logical_and(x, m)", "L.logical_or(m, n)", "L.logical_xor(x, y)",
    "L.eq(x, 1.5)", "x.gt(y)", "x.t() > y.t()", "x > y[0]", "x[:, ::2] <= 0",
    "L.tensor([0.1, 0.2]) == 0.1", "L.tensor([0.1, 0.2]) > 0.1",
    "L.tensor([0.1, 0.2], dtype=L.float64) > 0.1", "x.double() != y.double()",
])
def test_comparisons_return_bool(expr):
    def make(L):
        x = L.tensor(VALUES)
        y = L.tensor([[1.5, 0.5, -1.0], [2.0, 0.0, 3.0]])
        i = L.tensor([[1, -2, 0], [3, 0, 4]])
        m, n = L.tensor(MASK), L.tensor([[True, True, False], [False, True, True]])
        return eval(expr, {"L": L, "x": x, "y": y, "i": i, "m": m, "n": n})
    check(make, expr)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("op", ["lt", "le", "gt", "ge", "eq", "ne"])
def test_long_comparisons_match_torch(op, dtype):
    """Past the vector blocks: NaN, ties, and a scalar that rounds in float32 (0.1)."""
    rng = np.random.default_rng(3)
    a = np.round(rng.standard_normal(1003), 1)
    b = np.round(rng.standard_normal(1003), 1)
    a[::17] = np.nan
    b[5::13] = a[5::13]
    for other in ("b", 0.1):
        def make(L):
            x = L.tensor(a, dtype=getattr(L, dtype))
            y = L.tensor(b, dtype=getattr(L, dtype)) if other == "b" else other
            return getattr(L, op)(x, y)
        check(make, f"{op} {other}")


def test_comparisons_have_no_gradient():
    x = ca.tensor([1.0, -1.0], requires_grad=True)
    mask = x > 0
    assert not mask.requires_grad and mask.grad_fn is None
    assert not x.bool().requires_grad


# ------------------------------------------------------------------------ promotion
@pytest.mark.parametrize("expr", [
    "m + n", "m * n", "m | n", "m & n", "m ^ n", "~m", "m / n", "m * 2", "m * 2.0",
    "m + True", "m * False", "m / 2", "2 * m", "1.5 + m", "x * m", "m * x", "x + m",
    "x / m", "i * m", "i + m", "L.maximum(m, n)", "L.minimum(m, n)", "L.maximum(m, x)",
    "L.where(m, 1.0, 0.0)", "L.where(m, 1, 0)", "L.where(m, True, False)",
    "(x > 0).float()", "(x > 0) * x", "m.exp()", "m.sigmoid()", "m.sign()",
    "x.masked_fill(~m, float('-inf'))", "L.where(m, x, -x)", "L.cat([m, n])",
    "L.stack([m, n])", "m.t()", "m[0]", "m[:, 1:]", "m.reshape(-1)",
    "L.ones(3, 3, dtype=L.bool).tril()", "L.ones(3, 3, dtype=L.bool).triu(1)",
    "m.unsqueeze(0).expand(2, 2, 3)", "m.sort(dim=1).values", "m.sort(dim=1).indices",
    "(x * m).sum() / m.sum()", "x.sum(1) / m.sum(1)", "i * x", "x - i",
    "L.where(m, n, x)", "L.where(m, x, n)", "L.where(m, i, x)",
])
def test_bool_operands_promote_as_torch(expr):
    def make(L):
        x = L.tensor([[1.5, -2.0, 0.5], [4.0, -0.5, 3.0]])
        i = L.tensor([[1, -2, 0], [3, 0, 4]])
        m, n = L.tensor(MASK), L.tensor([[True, True, False], [False, True, True]])
        return eval(expr, {"L": L, "x": x, "i": i, "m": m, "n": n})
    check(make, expr)


@pytest.mark.parametrize("expr", [
    "-m", "m.neg()", "L.neg(m)", "m - n", "m - True", "True - m", "m - 1", "1.5 - m",
    "x - m", "m - x", "i - m", "m.mean()", "m.argmax()", "m.argmin()", "m.add_(1)",
    "m.mul_(2.0)", "m.requires_grad_()", "L.zeros(2, dtype=L.bool, requires_grad=True)",
    "L.tensor([True], requires_grad=True)",
])
def test_refusals_match_torch(expr):
    def make(L):
        x = L.tensor([[1.5, -2.0, 0.5], [4.0, -0.5, 3.0]])
        i = L.tensor([[1, -2, 0], [3, 0, 4]])
        m, n = L.tensor(MASK), L.tensor([[True, True, False], [False, True, True]])
        return eval(expr, {"L": L, "x": x, "i": i, "m": m, "n": n})
    assert outcome(lambda: make(torch))[0] != "ok"
    same_outcome(make)


def test_inplace_with_bool_operands():
    results = []
    for L in (ca, torch):
        x, m = L.tensor([1.0, 2.0, 3.0]), L.tensor([True, False, True])
        x.add_(m)
        x.mul_(m)
        b = m.clone()
        b.mul_(L.tensor([True, True, False]))
        b.add_(L.tensor([False, True, False]))
        results.append((x, b))
    for c, t in zip(*results):
        assert_close(c, t)


# ------------------------------------------------------------------------ reductions
@pytest.mark.parametrize("expr", [
    "m.sum()", "m.sum(0)", "m.sum(dim=1, keepdim=True)", "m.sum(dtype=L.float32)",
    "m.prod()", "m.prod(1)", "m.any()", "m.all()", "m.any(0)", "m.all(dim=1, keepdim=True)",
    "x.any()", "(x > 0).all(1)", "m.max()", "m.min()", "m.max(1).values", "m.max(1).indices",
    "m.cumsum(1)", "m.cumprod(0)", "m.count_nonzero()", "m.float().mean()",
    "(x > 0).sum()", "(x == x).float().mean()", "m.nonzero()",
    "L.zeros(0, dtype=L.bool).all()", "L.zeros(0).any()", "L.zeros(2, 0).all(1)",
    "L.zeros(2, 0).any(0)", "x.all(dim=0)", "x.any(1, keepdim=True)",
])
def test_reductions(expr):
    def make(L):
        x = L.tensor([[1.5, -2.0, 0.5], [4.0, -0.5, 3.0]])
        m = L.tensor(MASK)
        return eval(expr, {"L": L, "x": x, "m": m})
    check(make, expr)


def test_counting_correct_predictions_gives_a_python_int():
    counts = []
    for L in (ca, torch):
        pred, y = L.tensor([0, 2, 1, 2]), L.tensor([0, 1, 1, 2])
        counts.append((pred == y).sum().item())
    assert counts[0] == counts[1] == 3 and type(counts[0]) is int


# ------------------------------------------------------------------------ masks
def test_mask_indexing_and_assignment():
    results = []
    for L in (ca, torch):
        x = L.tensor([[1.5, -2.0, 0.5], [4.0, -0.5, 3.0]])
        mask = x > 0
        picked = x[mask]
        rows = x[L.tensor([True, False])]
        y = x.clone()
        y[mask] = 0.0
        z = x.clone()
        z[~mask] = L.tensor(7.0)
        sel = L.masked_select(x, mask)
        pos = L.where(mask)
        results.append((picked, rows, y, z, sel, pos[0], pos[1], mask.nonzero()))
    for c, t in zip(*results):
        assert_close(c, t)


def test_numpy_bool_mask_and_list_of_bools_index():
    results = []
    for L in (ca, torch):
        x = L.tensor([1.0, 2.0, 3.0])
        results.append((x[np.array([True, False, True])], x[[False, True, True]]))
    for c, t in zip(*results):
        assert_close(c, t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True])
def test_gradients_through_bool_masks(dtype, compiled):
    rng = np.random.default_rng(5)
    xv, yv = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    grads = []
    for L in (ca, torch):
        dt = getattr(L, dtype)
        x = L.tensor(xv, dtype=dt, requires_grad=True)
        y = L.tensor(yv, dtype=dt, requires_grad=True)
        mask = x > 0
        causal = L.ones(3, 4, dtype=L.bool).tril()
        out = L.where(mask, x * y, y).masked_fill(~causal, 0.0) + x[mask].sum() + mask * y
        loss = (out * out).sum()
        if L is ca and compiled:
            with ca.compiled_autograd.enable():
                loss.backward()
        else:
            loss.backward()
        grads.append((x.grad, y.grad))
    for c, t in zip(*grads):
        assert_close(c, t)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_attention_with_a_bool_mask(dtype):
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((2, 3, 4)) for _ in range(3))
    keep = np.array([[True, False, True], [True, True, False], [False, True, True]])
    outs = []
    for L in (ca, torch):
        dt = getattr(L, dtype)
        qt, kt, vt = (L.tensor(a, dtype=dt, requires_grad=True) for a in (q, k, v))
        mask = L.tensor(keep)
        out = L.nn.functional.scaled_dot_product_attention(qt, kt, vt, attn_mask=mask)
        out.sum().backward()
        outs.append((out, qt.grad, kt.grad, vt.grad))
    for c, t in zip(*outs):
        assert_close(c, t)


# ------------------------------------------------------------------------ interop
def test_item_tolist_and_repr():
    for make in (lambda L: L.tensor([True, False]), lambda L: L.tensor(MASK),
                 lambda L: L.tensor(True), lambda L: L.zeros(0, dtype=L.bool),
                 lambda L: L.tensor(MASK).t()):
        c, t = both(make)
        assert c.tolist() == t.tolist()
        assert repr(c) == repr(t).replace("torch.", "cagrad.")
    value = ca.tensor([False, True])[1].item()
    assert value is True


def test_numpy_round_trip_shares_memory():
    arr = np.array([[True, False], [False, True]])
    t = ca.from_numpy(arr)
    assert t.dtype is ca.bool
    arr[0, 1] = True
    assert t.tolist() == [[True, True], [False, True]]
    out = t.numpy()
    assert out.dtype == np.bool_ and out.tolist() == t.tolist()
    assert ca.tensor(arr).dtype is ca.bool and ca.as_tensor(arr).dtype is ca.bool


def test_dlpack_both_ways():
    c = ca.tensor(MASK)
    t = torch.from_dlpack(c)
    assert t.dtype == torch.bool and t.tolist() == MASK
    back = ca.from_dlpack(torch.tensor(MASK).t())
    assert back.dtype is ca.bool and back.tolist() == torch.tensor(MASK).t().tolist()


def test_save_and_load_with_torch():
    buf = io.BytesIO()
    ca.save({"mask": ca.tensor(MASK), "x": ca.ones(2)}, buf)
    loaded = torch.load(io.BytesIO(buf.getvalue()))
    assert loaded["mask"].dtype == torch.bool and loaded["mask"].tolist() == MASK
    buf = io.BytesIO()
    torch.save({"mask": torch.tensor(MASK)[:, 1:]}, buf)
    back = ca.load(io.BytesIO(buf.getvalue()))["mask"]
    assert back.dtype is ca.bool and back.tolist() == [row[1:] for row in MASK]


def test_bool_dtype_pickles_and_names():
    import pickle
    assert pickle.loads(pickle.dumps(ca.bool)) is ca.bool
    assert repr(ca.bool) == "cagrad.bool"
    assert not math.isnan(ca.tensor([True]).float().item())
