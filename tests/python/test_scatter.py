"""scatter, scatter_add, index_add and their in-place methods against torch 2.13: values,
gradients (float32/float64, eager and compiled), float64 finite differences, errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, counters, needs_cagrad

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 5))
SRC = RNG.standard_normal((3, 4))
SRC3 = SRC[:, :3].copy()  # torch differentiates scatter only when src has index's shape
# unique targets per row along dim 1 (scatter's value is then defined)
IDX1 = np.array([[4, 0, 2], [1, 3, 0], [2, 4, 1]])
# duplicates along dim 1 (summed by scatter_add)
DUP1 = np.array([[0, 0, 2], [4, 4, 4], [1, 3, 1]])
# along dim 0: index (2, 5) into x (3, 5); unique per column
IDX0 = np.array([[0, 2, 1, 0, 2], [1, 0, 2, 2, 0]])
SRC0 = RNG.standard_normal((2, 5))
DUP0 = np.array([[0, 2, 2, 0, 1], [0, 2, 2, 1, 1]])


def _scatter(L, x, i, s):
    return x.scatter(1, i, s)


def _scatter_fn(L, x, i, s):
    return L.scatter(x, 0, i, s)


def _scatter_add(L, x, i, s):
    return x.scatter_add(1, i, s)


def _scatter_add_fn(L, x, i, s):
    return L.scatter_add(x, 0, i, s)


def _index_add(L, x, i, s):
    return L.index_add(x, 1, i, s, alpha=-1.5)


def _index_add_method(L, x, i, s):
    return x.index_add(0, i, s, alpha=True)  # a bool alpha is 1, as in PyTorch


CASES = [
    ("scatter dim 1", _scatter, IDX1, SRC3),
    ("scatter dim 0", _scatter_fn, IDX0, SRC0),
    ("scatter_add dim 1", _scatter_add, DUP1, SRC3),
    ("scatter_add dim 0", _scatter_add_fn, DUP0, SRC0),
    ("index_add dim 1", _index_add, np.array([4, 0, 4, 1]), SRC),
    ("index_add dim 0", _index_add_method, np.array([2, 2]), SRC0),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn,index,src", CASES, ids=[c[0] for c in CASES])
def test_values_and_gradients_match_torch(name, fn, index, src, dtype, compiled):
    check_against_torch(fn, [X, index, src], dtype, compiled=compiled, msg=name)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn,index,src", CASES, ids=[c[0] for c in CASES])
def test_float64_gradients_match_finite_differences(name, fn, index, src, compiled):
    check_numeric_gradient(fn, [X, index, src], compiled=compiled)


@pytest.mark.parametrize("dtype", DTYPES)
def test_scatter_value_matches_torch(dtype):
    def fn(L, x, i):
        return x.scatter(1, i, value=-2.5) * x  # the value form has input's gradient only
    check_against_torch(fn, [X, IDX1], dtype)


@pytest.mark.parametrize("dim", [0, 1, 2, -1])
def test_scatter_add_three_dims_matches_torch(dim):
    x = RNG.standard_normal((2, 3, 4))
    index = RNG.integers(0, x.shape[dim], size=(2, 2, 3))
    src = RNG.standard_normal((2, 2, 3))
    check_against_torch(lambda L, x, i, s: L.scatter_add(x, dim, i, s), [x, index, src],
                        "float64")


def test_one_hot_via_scatter_():
    labels = np.array([[2], [0], [3], [3]])
    results = [L.zeros(4, 5).scatter_(1, L.tensor(labels), 1.0) for L in (ca, torch)]
    assert_close(*results, rtol=0, atol=0)


def test_int64_scatter_family_is_exact():
    big = np.full((2, 3), 2**60 + 1)  # past float64's exact integers
    for op in ("scatter", "scatter_add"):
        results = []
        for L in (ca, torch):
            x = L.tensor(big)
            src = L.tensor([[1, 2], [3, 4]])
            results.append(getattr(x, op)(1, L.tensor([[2, 2], [0, 1]]), src))
        assert_close(*results)
    results = [L.tensor(big).index_add(0, L.tensor([1, 1]), L.ones(2, 3, dtype=L.int64),
                                       alpha=3)
               for L in (ca, torch)]
    assert_close(*results)
    results = [L.zeros(2, 3, dtype=L.int64).scatter(1, L.tensor([[1], [2]]), 2.7)
               for L in (ca, torch)]
    assert_close(*results)


def test_duplicate_scatter_keeps_the_last_value_like_torch_cpu():
    # torch documents the choice among duplicates as unspecified; its CPU kernel, and
    # cagrad, keep the last in row-major order
    results = [L.zeros(2, 4).scatter(1, L.tensor([[1, 1, 1], [0, 3, 0]]),
                                     L.tensor([[5.0, 6.0, 7.0], [1.0, 2.0, 3.0]]))
               for L in (ca, torch)]
    assert_close(*results, rtol=0, atol=0)


def test_duplicate_scatter_gradient_matches_torch():
    # every duplicate gets the gradient of its target, as torch defines it
    def fn(L, x, i, s):
        return x.scatter(1, i, s)
    check_against_torch(fn, [X, DUP1, SRC3], "float64")


@pytest.mark.parametrize("fn", [_scatter, _scatter_add], ids=["scatter", "scatter_add"])
def test_src_larger_than_index_values_match_torch(fn):
    check_against_torch(fn, [X, IDX1, SRC], "float64", needs_grad=[])


def test_scatter_with_zero_dim_tensors_matches_torch():
    results = [L.zeros(()).scatter(0, L.tensor(0), L.tensor(4.0)) for L in (ca, torch)]
    assert_close(*results)
    results = [L.zeros(()).index_add(0, L.tensor(0), L.tensor(4.0)) for L in (ca, torch)]
    assert_close(*results)


def test_empty_index_returns_input_values():
    for L in (ca, torch):
        x = L.ones(2, 3)
        out = x.scatter(1, L.zeros(0, dtype=L.int64), L.ones(2, 3))
        assert out.tolist() == [[1.0] * 3] * 2


def _inplace_args(L, op):
    if op == "index_add_":
        return L.tensor([1, 0, 1]), L.tensor(SRC[:, :3])
    return L.tensor(IDX1), L.tensor(SRC3)


@pytest.mark.parametrize("op", ["scatter_", "scatter_add_", "index_add_"])
def test_inplace_forms_match_torch_and_bump_the_version(op):
    results = []
    for L in (ca, torch):
        x = L.tensor(X)
        view = x[1:]  # shares x's storage: sees the update
        before = x._version
        index, src = _inplace_args(L, op)
        assert getattr(x, op)(1, index, src) is x
        assert x._version > before
        results.append((x, view))
    for c, t in zip(*results):
        assert_close(c, t)


@pytest.mark.parametrize("op", ["scatter_", "scatter_add_", "index_add_"])
def test_inplace_on_a_leaf_that_requires_grad_raises_like_torch(op):
    for L in (ca, torch):
        x = L.tensor(X, requires_grad=True)
        with pytest.raises(RuntimeError, match="leaf (Variable|tensor) that requires grad"):
            getattr(x, op)(1, *_inplace_args(L, op))


@pytest.mark.parametrize("op", ["scatter_", "scatter_add_", "index_add_"])
def test_inplace_in_the_graph_is_recorded_as_torch(op):
    """In the autograd graph the in-place forms are recorded: values and gradients as torch."""
    results = []
    for L in (ca, torch):
        leaf = L.tensor(X, requires_grad=True)
        x = leaf * 1.0
        getattr(x, op)(1, *_inplace_args(L, op))
        (x * L.tensor(X)).sum().backward()
        results.append((x.detach().numpy().copy(), leaf.grad.numpy().copy()))
    for c, t in zip(*results):
        np.testing.assert_allclose(c, t, rtol=1e-12, atol=1e-12)


def test_scatter_reduce_add_matches_torch_values_and_has_no_gradient():
    results = []
    for L in (ca, torch):
        x = L.tensor(X, requires_grad=True)
        with pytest.warns(UserWarning) if L is torch else _no_warning():
            out = x.scatter(1, L.tensor(DUP1), L.tensor(SRC), reduce="add")
        results.append(out.detach())
        with pytest.raises(RuntimeError, match="derivative for aten::scatter is not "
                                               "implemented"):
            out.sum().backward()
    assert_close(*results)
    results = [L.tensor(X).scatter(1, L.tensor(DUP1), 2.0, reduce="add") for L in (ca, torch)]
    assert_close(*results)


class _no_warning:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_scatter_reduce_multiply_is_an_honest_error():
    with pytest.raises(NotImplementedError, match="multiply.*docs/python-api.md"):
        ca.zeros(2, 2).scatter(1, ca.tensor([[0], [1]]), ca.ones(2, 1), reduce="multiply")


def _errors(fn):
    """(cagrad's, torch's) exceptions of fn(L)."""
    caught = []
    for L in (ca, torch):
        with pytest.raises(Exception) as info:
            fn(L)
        caught.append(info.value)
    return caught


LONG = "int64"
SCATTER_ERRORS = [
    ("dim too big", lambda L: L.zeros(3, 4).scatter(2, L.zeros(3, 4, dtype=L.int64),
                                                    L.ones(3, 4))),
    ("dim too small", lambda L: L.zeros(3, 4).scatter_add(-3, L.zeros(3, 4, dtype=L.int64),
                                                          L.ones(3, 4))),
    ("float index", lambda L: L.zeros(3, 4).scatter(1, L.zeros(3, 4), L.ones(3, 4))),
    ("float index add", lambda L: L.zeros(3, 4).scatter_add_(1, L.zeros(3, 4), L.ones(3, 4))),
    ("index rank", lambda L: L.zeros(3, 4).scatter_add(1, L.zeros(3, dtype=L.int64),
                                                       L.ones(3))),
    ("src rank", lambda L: L.zeros(3, 4).scatter(1, L.zeros(3, 4, dtype=L.int64),
                                                 L.ones(3, 4, 1))),
    ("index larger than self", lambda L: L.zeros(3, 4).scatter(
        1, L.zeros(4, 4, dtype=L.int64), L.ones(4, 4))),
    ("index larger than src", lambda L: L.zeros(3, 4).scatter_add(
        1, L.zeros(3, 4, dtype=L.int64), L.ones(2, 4))),
    ("index too high", lambda L: L.zeros(3, 4).scatter(
        1, L.full((3, 4), 4, dtype=L.int64), L.ones(3, 4))),
    ("negative index", lambda L: L.zeros(3, 4).scatter_add(
        1, L.full((3, 4), -1, dtype=L.int64), L.ones(3, 4))),
    ("src dtype", lambda L: L.zeros(3, 4).scatter(
        1, L.zeros(3, 4, dtype=L.int64), L.ones(3, 4, dtype=L.float64))),
    ("src dtype add", lambda L: L.zeros(3, 4).scatter_add(
        1, L.zeros(3, 4, dtype=L.int64), L.ones(3, 4, dtype=L.float64))),
    ("bad reduce", lambda L: L.zeros(3, 4).scatter(
        1, L.zeros(3, 4, dtype=L.int64), 1.0, reduce="mean")),
    ("scatter_add of a number", lambda L: L.zeros(3, 4).scatter_add(
        1, L.zeros(3, 4, dtype=L.int64), 1.0)),
]
INDEX_ADD_ERRORS = [
    ("dim", lambda L: L.zeros(3, 4).index_add(2, L.zeros(3, dtype=L.int64), L.ones(3, 3))),
    ("float index", lambda L: L.zeros(3, 4).index_add(1, L.zeros(3), L.ones(3, 3))),
    ("2-d index", lambda L: L.zeros(3, 4).index_add_(1, L.zeros(3, 1, dtype=L.int64),
                                                     L.ones(3, 3))),
    ("count", lambda L: L.zeros(3, 4).index_add(1, L.zeros(3, dtype=L.int64), L.ones(3, 2))),
    ("shape", lambda L: L.index_add(L.zeros(3, 4), 1, L.zeros(3, dtype=L.int64),
                                    L.ones(2, 3))),
    ("source dim", lambda L: L.zeros(3, 4).index_add(1, L.zeros(3, dtype=L.int64), L.ones(3))),
    ("0-d source", lambda L: L.zeros(3).index_add(0, L.zeros(1, dtype=L.int64), L.tensor(5.))),
    ("too high", lambda L: L.zeros(3, 4).index_add(1, L.full((3,), 4, dtype=L.int64),
                                                   L.ones(3, 3))),
    ("negative", lambda L: L.zeros(3, 4).index_add(1, L.full((3,), -1, dtype=L.int64),
                                                   L.ones(3, 3))),
    ("dtype", lambda L: L.zeros(3, 4).index_add(1, L.zeros(3, dtype=L.int64),
                                                L.ones(3, 3, dtype=L.float64))),
    ("alpha positional", lambda L: L.zeros(3, 4).index_add(1, L.zeros(3, dtype=L.int64),
                                                           L.ones(3, 3), 2)),
]


@pytest.mark.parametrize("name,fn", SCATTER_ERRORS + INDEX_ADD_ERRORS,
                         ids=[e[0] for e in SCATTER_ERRORS + INDEX_ADD_ERRORS])
def test_errors_match_torch(name, fn):
    mine, theirs = _errors(fn)
    assert type(mine) is type(theirs), f"{name}: {mine!r} vs {theirs!r}"
    if isinstance(theirs, RuntimeError | IndexError):  # same message, cagrad's dtype names
        assert str(mine) == str(theirs).splitlines()[0], f"{name}: {mine} vs {theirs}"


def test_src_larger_than_index_gets_a_zero_padded_gradient():
    # torch raises in backward here ("invalid gradient ... expected shape compatible");
    # cagrad gives the gradient the formula defines: src entries scatter never reads get 0
    x = ca.zeros(3, 5, dtype=ca.float64, requires_grad=True)
    src = ca.tensor(SRC, requires_grad=True)
    x.scatter_add(1, ca.tensor(IDX1), src).sum().backward()
    expected = np.zeros_like(SRC)
    expected[:, :3] = 1.0
    np.testing.assert_array_equal(src.grad.numpy(), expected)


@needs_cagrad
def test_forward_inside_compiled_autograd_compiles_only_the_user_backward():
    # the forward's internal scatter step runs eagerly: one backward ran, the loss's
    before = counters()
    with ca.compiled_autograd.enable():
        x = ca.tensor(X, requires_grad=True)
        out = x.scatter_add(1, ca.tensor(DUP1), ca.tensor(SRC3))
        (out * out).sum().backward()
    after = counters()
    ran = sum(after[k] - before[k] for k in ("captures", "cache_hits", "eager_fallbacks"))
    assert ran == 1, f"{before} -> {after}"
    assert_close(x.grad, 2 * out.detach())


@pytest.mark.parametrize("mode", ["no_grad", "inference_mode"])
def test_forward_under_no_grad_matches_torch(mode):
    results = []
    for L in (ca, torch):
        with getattr(L, mode)():
            x = L.tensor(X, requires_grad=True)
            out = L.index_add(x.scatter(1, L.tensor(IDX1), L.tensor(SRC3)), 0, L.tensor([2]),
                              L.ones(1, 5, dtype=L.float64))
        assert not out.requires_grad
        results.append(out)
    assert_close(*results)


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_operands_match_torch(dtype):
    index = np.array([[0, 3, 1, 2], [1, 0, 2, 3], [2, 1, 3, 0]])

    def fn(L, x, i, s):
        i = i.t()  # (4, 3), transposed strides
        return x.scatter(0, i, s.t().contiguous().t()) + x.t().t().scatter_add(1, i, s)
    check_against_torch(fn, [RNG.standard_normal((4, 5)), index,
                             RNG.standard_normal((4, 3))], dtype)
