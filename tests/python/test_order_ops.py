"""Position and order ops against PyTorch 2.13: cumsum, sort, argsort, topk, and what is
particular to tril/triu (the registry's generic tests cover their default arguments).

Values and gradients in float32 and float64, eager and under compiled autograd; float64
gradients against central differences; ties (stable order), NaN, named results, dtype=,
int64 inputs, in-place tril_/triu_, and argument errors with PyTorch's exception types.
"""

import numpy as np
import pytest
import torch

from helpers import assert_close, backward_checked, ca, compiled_ctx, numeric_gradient

DTYPES = ["float32", "float64"]
MODES = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])

# (name, call(L, x) -> the differentiable result); L is cagrad or torch
CASES = [
    ("cumsum0", lambda L, x: L.cumsum(x, 0)),
    ("cumsum-1", lambda L, x: x.cumsum(-1)),
    ("cumsum_dtype", lambda L, x: L.cumsum(x, 1, dtype=L.float64)),
    ("cumprod1", lambda L, x: L.cumprod(x * 0.5, 1)),
    ("cumprod0_dtype", lambda L, x: x.cumprod(0, dtype=L.float64)),
    ("sort", lambda L, x: L.sort(x).values),
    ("sort_desc_dim0", lambda L, x: L.sort(x, dim=0, descending=True)[0]),
    ("sort_stable", lambda L, x: x.sort(dim=1, stable=True).values),
    ("topk", lambda L, x: L.topk(x, 3).values),
    ("topk_smallest_dim0", lambda L, x: x.topk(2, dim=0, largest=False)[0]),
    ("tril_diag", lambda L, x: L.tril(x, 1)),
    ("triu_neg_diag", lambda L, x: x.triu(diagonal=-1)),
    ("tril_batched", lambda L, x: L.tril(x.reshape(2, 3, 6), -2)),
    ("triu_past_edge", lambda L, x: L.triu(x, 9)),
]


def _input(rng, dtype):
    return (rng.standard_normal((6, 6)) * 2.0).astype(dtype)


@MODES
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients_match_torch(name, fn, dtype, compiled, rng):
    x = _input(rng, dtype)
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    cy, ty = fn(ca, cx), fn(torch, tx)
    assert_close(cy, ty, msg=f"{name} values")
    assert cy.grad_fn.name() == ty.grad_fn.name()
    g = rng.standard_normal(ty.shape).astype(str(ty.dtype).split(".")[1])
    with compiled_ctx(compiled):
        backward_checked((cy * ca.tensor(g)).sum(), compiled)
    (ty * torch.tensor(g)).sum().backward()
    assert_close(cx.grad, tx.grad, msg=f"{name} gradient")


@MODES
@pytest.mark.parametrize("name,fn", CASES, ids=[c[0] for c in CASES])
def test_gradcheck_float64(name, fn, compiled, rng):
    x = _input(rng, "float64")
    g = ca.tensor(rng.standard_normal(tuple(fn(torch, torch.tensor(x)).shape)))

    def loss(a):
        return float((fn(ca, ca.tensor(a)) * g).sum())

    cx = ca.tensor(x, requires_grad=True)
    with compiled_ctx(compiled):
        backward_checked((fn(ca, cx) * g).sum(), compiled)
    np.testing.assert_allclose(cx.grad.numpy(), numeric_gradient(loss, x), rtol=1e-5,
                               atol=1e-7, err_msg=name)


@MODES
@pytest.mark.parametrize("dtype", DTYPES)
def test_cumprod_gradient_through_zeros_like_torch(dtype, compiled):
    """One zero, two zeros and a zero first in a line: the gradient at and after the first
    zero is exact, as PyTorch's (not a division by zero)."""
    x = np.array([[1.5, 0.0, 2.0, -0.5], [0.0, 3.0, 0.0, 2.0], [2.0, -1.5, 0.5, 0.0],
                  [0.5, 2.0, -3.0, 1.5]], dtype=dtype)
    g = np.arange(1.0, 17.0).reshape(4, 4).astype(dtype)
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    with compiled_ctx(compiled):
        backward_checked((ca.cumprod(cx, 1) * ca.tensor(g)).sum(), compiled)
    (torch.cumprod(tx, 1) * torch.tensor(g)).sum().backward()
    assert_close(cx.grad, tx.grad)


def test_sort_ties_keep_their_order_like_torch_stable_sort():
    x = [2.0, 1.0, 2.0, 0.0, 1.0, 2.0, 1.0]
    for descending in (False, True):
        ours = ca.sort(ca.tensor(x), descending=descending, stable=True)
        theirs = torch.sort(torch.tensor(x), descending=descending, stable=True)
        assert ours.indices.tolist() == theirs.indices.tolist()
        assert ours.values.tolist() == theirs.values.tolist()
        assert ours.indices.dtype == ca.int64


def test_sort_puts_nan_above_every_number_like_torch():
    x = [1.0, float("nan"), -2.0, float("inf"), float("nan"), 0.5]
    for descending in (False, True):
        ours = ca.sort(ca.tensor(x), descending=descending, stable=True)
        theirs = torch.sort(torch.tensor(x), descending=descending, stable=True)
        assert ours.indices.tolist() == theirs.indices.tolist()
        np.testing.assert_array_equal(ours.values.numpy(), theirs.values.numpy())


def test_tied_gradients_follow_the_returned_indices():
    """Stable sort's tie order is PyTorch's, so its gradient is too; topk's tie order is
    not documented by PyTorch, so there the gradient goes where the indices say."""
    x = [3.0, 1.0, 3.0, 3.0]
    cx = ca.tensor(x, requires_grad=True)
    tx = torch.tensor(x, requires_grad=True)
    w = [1.0, 2.0, 3.0, 4.0]
    (ca.sort(cx, descending=True, stable=True).values * ca.tensor(w)).sum().backward()
    (torch.sort(tx, descending=True, stable=True).values * torch.tensor(w)).sum().backward()
    assert cx.grad.tolist() == tx.grad.tolist()
    cx.grad = None
    values, indices = ca.topk(cx, 2)
    (values * ca.tensor([1.0, 2.0])).sum().backward()
    expected = [0.0] * 4
    for weight, i in zip((1.0, 2.0), indices.tolist()):
        expected[i] = weight
    assert cx.grad.tolist() == expected


def test_results_are_named_pairs():
    x = ca.tensor([[3.0, 1.0, 2.0]])
    for result, fname in ((ca.sort(x), "sort"), (x.topk(2), "topk")):
        values, indices = result
        assert result.values is values and result.indices is indices
        assert result[0] is values and type(result).__name__ == fname
    assert ca.argsort(x, descending=True).tolist() == [[0, 2, 1]]
    assert x.argsort(dim=1).tolist() == [[1, 2, 0]]


def test_int64_inputs_like_torch():
    x = [[5, -3, 7], [2, 2, -9]]
    ci, ti = ca.tensor(x), torch.tensor(x)
    for fn in (lambda L, t: L.cumsum(t, 1), lambda L, t: L.cumprod(t, 0),
               lambda L, t: L.sort(t, 1).values,
               lambda L, t: L.sort(t, 0, descending=True).indices,
               lambda L, t: L.topk(t, 2).indices, lambda L, t: L.tril(t),
               lambda L, t: L.triu(t, 1)):
        ours, theirs = fn(ca, ci), fn(torch, ti)
        assert ours.tolist() == theirs.tolist()
        assert str(ours.dtype).split(".")[1] == str(theirs.dtype).split(".")[1]


def test_cumsum_accumulates_float32_in_double_like_torch():
    x = np.full(10000, 0.1, dtype=np.float32)
    np.testing.assert_array_equal(ca.cumsum(ca.tensor(x), 0).numpy(),
                                  torch.cumsum(torch.tensor(x), 0).numpy())


def test_zero_dim_and_empty_inputs_like_torch():
    assert ca.sort(ca.tensor(1.5)).values.item() == 1.5
    assert ca.sort(ca.tensor(1.5)).indices.item() == 0
    assert ca.cumsum(ca.tensor(2.0), 0).item() == 2.0
    assert tuple(ca.topk(ca.ones(3, 4), 0).values.shape) == (3, 0)
    assert tuple(ca.cumsum(ca.ones(0, 4), 0).shape) == (0, 4)


def test_inplace_forms_like_torch(rng):
    x = _input(rng, "float32")
    for method, arg in (("tril_", 0), ("triu_", -1), ("tril_", 2), ("cumsum_", 1),
                        ("cumprod_", 0)):
        c, t = ca.tensor(x), torch.tensor(x)
        assert getattr(c, method)(arg) is c
        getattr(t, method)(arg)
        assert_close(c, t, msg=method)


@pytest.mark.parametrize("method", ["tril_", "cumsum_"])
def test_inplace_forms_in_the_graph_are_recorded(method):
    results = []
    for L in (ca, torch):
        leaf = L.tensor(np.arange(9.0).reshape(3, 3), requires_grad=True)
        y = leaf * 2
        getattr(y, method)(0)
        (y * L.tensor(np.arange(1.0, 10.0).reshape(3, 3))).sum().backward()
        results.append((y.detach().tolist(), leaf.grad.tolist()))
    assert results[0] == results[1]


BAD = [
    (lambda L: L.tril(L.ones(3)), "at least 2 dimensions"),
    (lambda L: L.ones(3).triu(), "at least 2 dimensions"),
    (lambda L: L.topk(L.ones(3), 4), "k out of range"),
    (lambda L: L.topk(L.ones(3), -1), "k out of range"),
    (lambda L: L.sort(L.ones(3), dim=2), "out of range"),
    (lambda L: L.cumsum(L.ones(2, 3), 2), "out of range"),
    (lambda L: L.argsort(L.ones(2), dim=-3), "out of range"),
]


@pytest.mark.parametrize("call,needle", BAD, ids=[f"bad{i}" for i in range(len(BAD))])
def test_bad_arguments_fail_like_torch(call, needle):
    with pytest.raises(Exception) as theirs:
        call(torch)
    with pytest.raises(theirs.type, match=needle):
        call(ca)


def test_out_is_refused_by_name():
    for fname in ("cumsum", "cumprod", "sort", "topk"):
        args = (ca.ones(3), 1) if fname == "topk" else (ca.ones(3), 0)
        with pytest.raises(NotImplementedError, match=f"{fname}.*out="):
            getattr(ca, fname)(*args, out=ca.ones(3))
