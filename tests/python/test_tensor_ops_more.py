"""masked_scatter, index_copy, scatter_reduce (and their in-place forms) against torch 2.13:
values, gradients (float32/float64, eager and compiled), float64 finite differences, int64
values and errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of

RNG = np.random.default_rng(28)
X = RNG.standard_normal((3, 4))
SRC = RNG.standard_normal((3, 4))
MASK = np.array([[1, 0, 1, 0], [0, 0, 0, 1], [1, 1, 0, 0]], dtype=bool)
ROW_MASK = np.array([0, 1, 1, 0], dtype=bool)  # broadcasts over the rows
IDX = np.array([[0, 0, 1], [2, 2, 2], [3, 1, 3]])  # duplicates along dim 1
IDX0 = np.array([[0, 2, 2, 0], [0, 1, 2, 1]])  # along dim 0
# src with ties (amax/amin split the gradient among equal values)
TIES = np.array([[1.0, 1.0, 2.0], [0.5, 0.5, -0.5], [3.0, 9.0, 3.0]])


def _masked_scatter(L, x, m, s):
    return x.masked_scatter(m, s)


def _masked_scatter_row(L, x, m, s):
    return L.masked_scatter(x, m, s)


def _index_copy(L, x, i, s):
    return x.index_copy(1, i, s)


def _index_copy_fn(L, x, i, s):
    return L.index_copy(x, 0, i, s)


CASES = [
    ("masked_scatter", _masked_scatter, [X, MASK, SRC]),
    ("masked_scatter broadcast mask", _masked_scatter_row, [X, ROW_MASK, SRC]),
    ("index_copy dim 1", _index_copy, [X, np.array([3, 0]), SRC[:, :2]]),
    ("index_copy dim 0", _index_copy_fn, [X, np.array([2, 0]), SRC[:2]]),
]


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn,arrays", CASES, ids=[c[0] for c in CASES])
def test_masked_scatter_index_copy_match_torch(name, fn, arrays, dtype, compiled):
    check_against_torch(fn, arrays, dtype, compiled=compiled, msg=name)


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("name,fn,arrays", CASES, ids=[c[0] for c in CASES])
def test_masked_scatter_index_copy_finite_differences(name, fn, arrays, compiled):
    check_numeric_gradient(fn, arrays, compiled=compiled)


REDUCTIONS = ["sum", "prod", "mean", "amax", "amin"]


def _scatter_reduce(reduce, include_self, dim=1):
    def fn(L, x, i, s):
        return x.scatter_reduce(dim, i, s, reduce, include_self=include_self)
    return fn


@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_matches_torch(reduce, include_self, dtype, compiled):
    fn = _scatter_reduce(reduce, include_self)
    check_against_torch(fn, [X, IDX, SRC[:, :3]], dtype, compiled=compiled, msg=reduce)


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_ties_and_dim0_match_torch(reduce, include_self):
    fn = _scatter_reduce(reduce, include_self)
    x = np.array([[1.0, 2.0, 3.0, 4.0], [0.5, 1.0, 0.5, -1.0], [3.0, 9.0, 1.0, 3.0]])
    check_against_torch(fn, [x, IDX, TIES], "float64", msg=f"{reduce} ties")
    fn0 = _scatter_reduce(reduce, include_self, dim=0)
    check_against_torch(fn0, [X, IDX0, SRC[:2]], "float64", msg=f"{reduce} dim 0")


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_finite_differences(reduce, include_self):
    check_numeric_gradient(_scatter_reduce(reduce, include_self), [X, IDX, SRC[:, :3]],
                           compiled=True)


def test_scatter_reduce_prod_gradient_with_zeros_matches_torch():
    x = np.array([[0.0, 2.0, 3.0, 4.0], [1.0, 0.0, 2.0, 5.0], [1.0, 1.0, 1.0, 2.0]])
    s = np.array([[2.0, 0.0, 0.0], [3.0, 0.0, 4.0], [0.0, 0.0, 1.5]])
    for inc in (True, False):
        check_against_torch(_scatter_reduce("prod", inc), [x, IDX, s], "float64")


@pytest.mark.parametrize("include_self", [True, False])
@pytest.mark.parametrize("reduce", REDUCTIONS)
def test_scatter_reduce_int64_matches_torch(reduce, include_self):
    x = np.array([[-7, 3, 2, 8], [4, -5, 6, 1], [0, 9, -3, 2]])
    s = np.array([[1, 2, -4], [5, 5, -6], [7, 3, 2]])
    outs = [L.tensor(x).scatter_reduce(1, L.tensor(IDX), L.tensor(s), reduce,
                                       include_self=include_self) for L in (ca, torch)]
    assert_close(*outs)


def test_int64_masked_scatter_and_index_copy_match_torch():
    x, s = np.arange(12).reshape(3, 4), -np.arange(12).reshape(3, 4)
    c = [ca.tensor(x).masked_scatter(ca.tensor(MASK), ca.tensor(s)),
         ca.tensor(x).index_copy(1, ca.tensor([2, 0]), ca.tensor(s[:, :2]))]
    t = [torch.tensor(x).masked_scatter(torch.tensor(MASK), torch.tensor(s)),
         torch.tensor(x).index_copy(1, torch.tensor([2, 0]), torch.tensor(s[:, :2]))]
    for a, b in zip(c, t):
        assert_close(a, b)


def test_in_place_forms_match_torch():
    def run(L):
        a = L.tensor(X.copy())
        r1 = a.masked_scatter_(L.tensor(MASK), L.tensor(SRC))
        b = L.tensor(X.copy())
        b.index_copy_(1, L.tensor([1, 3]), L.tensor(SRC[:, :2]))
        c = L.tensor(X.copy())
        c.scatter_reduce_(1, L.tensor(IDX), L.tensor(SRC[:, :3]), "amax", include_self=False)
        d = L.tensor(X.copy())
        d.index_fill_(1, L.tensor([0, 2]), -1.0)
        return r1 is a, a, b, c, d
    c, t = run(ca), run(torch)
    assert c[0] and t[0]
    for a, b in zip(c[1:], t[1:]):
        assert_close(a, b)


ERRORS = {
    "mask not bool": lambda L: L.zeros(3, 4).masked_scatter(L.ones(3, 4), L.ones(12)),
    "source too small": lambda L: L.zeros(3, 4).masked_scatter(L.ones(3, 4, dtype=L.bool),
                                                               L.ones(5)),
    "source dtype": lambda L: L.zeros(3, 4).masked_scatter(
        L.ones(3, 4, dtype=L.bool), L.ones(12, dtype=L.float64)),
    "source not tensor": lambda L: L.zeros(3, 4).masked_scatter(L.ones(3, 4, dtype=L.bool), 1.0),
    "index_copy count": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([0, 1]), L.ones(3, 3)),
    "index_copy float index": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([0, 1.0]),
                                                                 L.ones(3, 2)),
    "index_copy out of bounds": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([0, 5]),
                                                                   L.ones(3, 2)),
    "index_copy 2-d index": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([[0, 1]]),
                                                               L.ones(3, 2)),
    "index_copy dtype": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([0, 1]),
                                                           L.ones(3, 2, dtype=L.float64)),
    "index_copy slice shape": lambda L: L.zeros(3, 4).index_copy(1, L.tensor([0, 1]),
                                                                 L.ones(2, 2)),
    "scatter_reduce bad reduce": lambda L: L.zeros(3, 4).scatter_reduce(
        1, L.tensor([[0, 1]]), L.ones(1, 2), "foo"),
    "scatter_reduce src dtype": lambda L: L.zeros(3, 4).scatter_reduce(
        1, L.tensor([[0, 1]]), L.ones(1, 2, dtype=L.float64), "sum"),
    "scatter_reduce float index": lambda L: L.zeros(3, 4).scatter_reduce(
        1, L.tensor([[0, 1.0]]), L.ones(1, 2), "sum"),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    assert error_of(ca, ERRORS[name]) == error_of(torch, ERRORS[name])


# ------------------------------------------------------------------------------ type, apply_, map_
def test_type_matches_torch():
    for L in (ca, torch):
        x = L.tensor([1.5, 2.0])
        assert x.type() == "torch.FloatTensor"
        assert L.tensor([1]).type() == "torch.LongTensor"
        assert L.tensor([True]).type() == "torch.BoolTensor"
        assert x.type(L.float64).type() == "torch.DoubleTensor"
        assert x.type(L.float32) is x
        assert_close(x.type("torch.LongTensor"), torch.tensor([1, 2]))
    assert error_of(ca, lambda L: L.ones(2).type("torch.Foo")) == error_of(
        torch, lambda L: L.ones(2).type("torch.Foo"))
    with pytest.raises(RuntimeError, match="CPU only"):
        ca.ones(2).type("torch.cuda.FloatTensor")


def test_apply_and_map_match_torch():
    def run(L):
        a = L.tensor([1, 2, 3])
        same = a.apply_(lambda v: v * 2.7) is a
        b = L.tensor([[1.0, 2.0], [3.0, 4.0]])
        b.map_(L.tensor([10.0, 20.0]), lambda u, v: u * v + 1)
        c = L.tensor([0.5, -1.5])
        c.apply_(abs)
        return same, a, b, c
    c, t = run(ca), run(torch)
    assert c[0] and t[0]
    for x, y in zip(c[1:], t[1:]):
        assert_close(x, y)
    for make in (lambda L: L.ones(2, requires_grad=True).apply_(abs),
                 lambda L: L.ones(2).map_(L.ones(2, dtype=L.int64), max),
                 lambda L: L.ones(2, requires_grad=True).map_(L.ones(2), max)):
        assert error_of(ca, make) == error_of(torch, make)


# ------------------------------------------------------------------------------ signbit
def test_signbit_matches_torch():
    for arr in (np.array([-0.0, 0.0, -2.5, 3.0, -np.inf]), np.array([-1, 0, 2]),
                np.array([True, False])):
        for dtype in (("float32", "float64") if arr.dtype.kind == "f" else (None,)):
            a = arr.astype(dtype) if dtype else arr
            assert_close(ca.signbit(ca.tensor(a)), torch.signbit(torch.tensor(a)))
            assert_close(ca.tensor(a).signbit(), torch.tensor(a).signbit())


# ------------------------------------------------------------------------------ histogram
HIST_CASES = {
    "int bins": lambda L, x: L.histogram(x, 5),
    "range": lambda L, x: L.histogram(x, 4, range=(-1.0, 1.5)),
    "weights density": lambda L, x: L.histogram(x, 6, weight=x.abs(), density=True),
    "edges tensor": lambda L, x: L.histogram(x, L.tensor([-2.0, -0.5, 0.0, 0.25, 2.0],
                                                         dtype=x.dtype)),
    "method density": lambda L, x: x.histogram(3, density=True),
    "constant": lambda L, x: L.histogram(x * 0 + 1, 3),
}


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", sorted(HIST_CASES))
def test_histogram_matches_torch(name, dtype):
    x = RNG.standard_normal(50).astype(dtype)
    c = HIST_CASES[name](ca, ca.tensor(x))
    t = HIST_CASES[name](torch, torch.tensor(x))
    assert_close(c.hist, t.hist)
    assert_close(c.bin_edges, t.bin_edges)
    hist, edges = c  # a named tuple, unpacked like torch's
    assert hist is c.hist and edges is c.bin_edges


HIST_ERRORS = {
    "int input": lambda L: L.histogram(L.tensor([1, 2]), 4),
    "zero bins": lambda L: L.histogram(L.tensor([1.0, 2.0]), 0),
    "min above max": lambda L: L.histogram(L.tensor([1.0, 2.0]), 2, range=(3.0, 1.0)),
}


@pytest.mark.parametrize("name", sorted(HIST_ERRORS))
def test_histogram_errors_match_torch(name):
    assert error_of(ca, HIST_ERRORS[name]) == error_of(torch, HIST_ERRORS[name])


# ------------------------------------------------------------------------------ printoptions
@pytest.mark.parametrize("options", [
    dict(precision=2), dict(sci_mode=True), dict(sci_mode=False, precision=6),
    dict(threshold=5, edgeitems=1), dict(linewidth=30), dict(profile="short"),
    dict(profile="full"),
])
def test_printoptions_match_torch(options):
    values = [np.array([1.5, 2.25, -3.125]), np.linspace(0.001, 5000.0, 12),
              np.arange(40.0).reshape(4, 10) / 3, np.array([1e-7, 1.0])]
    try:
        ca.set_printoptions(**options)
        torch.set_printoptions(**options)
        for v in values:
            assert repr(ca.tensor(v)) == repr(torch.tensor(v)).replace("torch.", "cagrad.")
    finally:
        ca.set_printoptions(profile="default")
        torch.set_printoptions(profile="default")
    assert ca.get_printoptions()["precision"] == 4
    assert ca.get_printoptions()["sci_mode"] is None
