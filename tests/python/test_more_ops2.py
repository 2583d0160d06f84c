"""The long tail of torch functions (_more_ops2.py, _more_stats.py, linalg.py) against torch
2.13: shape/index helpers, order statistics, counting/searching, distances and norms
(values f32/f64, f64 and f32 gradients, a compiled backward for some, errors)."""

import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca

RNG = np.random.default_rng(23)
X = RNG.standard_normal((3, 4))
Y = RNG.standard_normal((3, 4))
C3 = RNG.standard_normal((4, 3))
D3 = RNG.standard_normal((4, 3))
V = RNG.standard_normal(4)
W = RNG.standard_normal(3)
B = RNG.standard_normal((2, 3, 5))
P1 = RNG.standard_normal((5, 3))
P2 = RNG.standard_normal((4, 3))
LONG1 = RNG.standard_normal((30, 3))  # > 25 rows: torch's cdist goes through a matmul
IDX = np.array([[0, 2, 1, 0], [3, 3, 0, 1], [1, 0, 2, 2]])
FLAT_IDX = np.array([[0, 11], [-1, 5]])
NAN_ROWS = np.array([[3.0, np.nan, 1.0, 2.0, 0.5], [np.nan, np.nan, np.nan, np.nan, np.nan],
                     [1.0, 4.0, np.nan, -2.0, 0.0]])
WITH_ZERO_ROW = np.array([[0.0, 0.0, 0.0], [1.0, -2.0, 0.5]])
WIDE = np.array([[-1000.0, 0.0, 1000.0, 3.0], [1.0, 200.0, -300.0, 0.5]])  # past exp's range
ROWS_F = np.array([[1.0, 2.0, 1.0, 2.0, 3.0], [3.0, 0.0, 3.0, 2.0, 0.0]])


def _diff_prepend(L, x, v):
    return L.diff(x, 2, 0, prepend=v.reshape(1, 4), append=v.reshape(1, 4) * 2)


# (name, fn(L, *tensors), inputs, also compiled): differentiable composites
DIFFERENTIABLE = [
    ("movedim", lambda L, b: L.movedim(b, 0, -1), [B], False),
    ("movedim many", lambda L, b: b.movedim((0, 1), (2, 0)), [B], False),
    ("moveaxis", lambda L, b: L.moveaxis(b, -1, 0), [B], False),
    ("unflatten", lambda L, b: L.unflatten(b, 1, (3, 1)), [B], False),
    ("unflatten method -1", lambda L, x: x.unflatten(-1, (2, -1)), [X], False),
    ("take_along_dim", lambda L, x, i: L.take_along_dim(x, i, 1), [X, IDX], True),
    ("take_along_dim flat", lambda L, x, i: x.take_along_dim(i), [X, IDX], False),
    ("take_along_dim broadcast", lambda L, x, i: L.take_along_dim(x, i[:1], 0), [X, IDX],
     False),
    ("take", lambda L, x, i: L.take(x, i), [X, FLAT_IDX], True),
    ("take method", lambda L, x, i: x.take(i), [X, FLAT_IDX], False),
    ("meshgrid ij", lambda L, v, w: L.meshgrid(v, w, indexing="ij")[0]
     * L.meshgrid(v, w, indexing="ij")[1], [V, W], False),
    ("meshgrid xy", lambda L, v, w: L.meshgrid([v, w], indexing="xy")[0]
     + 2 * L.meshgrid([v, w], indexing="xy")[1], [V, W], False),
    ("meshgrid xy 3", lambda L, v, w, u: L.stack(L.meshgrid(v, w, u, indexing="xy")),
     [V, W, V[:2]], False),
    ("cartesian_prod", lambda L, v, w: L.cartesian_prod(v, w), [V, W], False),
    ("cartesian_prod 3", lambda L, v, w, u: L.cartesian_prod(v, w, u), [V[:2], W, V], False),
    ("diff", lambda L, x: L.diff(x), [X], True),
    ("diff n dim", lambda L, x: x.diff(2, 0), [X], False),
    ("diff prepend append", _diff_prepend, [X, V], False),
    ("kron 2-D", lambda L, x, y: L.kron(x, y[:2, :3]), [X, Y], True),
    ("kron mixed", lambda L, v, b: v.kron(b), [V, B], False),
    ("cross dim", lambda L, a, b: L.cross(a, b, dim=1), [C3, D3], True),
    ("cross method", lambda L, a, b: a.cross(b, 1), [C3, D3], False),
    ("linalg.cross", lambda L, a, b: L.linalg.cross(a, b), [C3, D3], False),
    ("linalg.cross broadcast", lambda L, a, b: L.linalg.cross(a[:1], b), [C3, D3], False),
    ("block_diag", lambda L, x, v, w: L.block_diag(x, v, w[0]), [X, V, W], True),
    ("rot90", lambda L, x: L.rot90(x), [X], False),
    ("rot90 k dims", lambda L, b: b.rot90(3, [2, 0]), [B], False),
    ("rot90 k=2", lambda L, b: L.rot90(b, -2, (1, 2)), [B], False),
    ("narrow_copy", lambda L, x: x.narrow_copy(1, 1, 2), [X], False),
    # statistics
    ("median dim", lambda L, x: L.median(x, 1).values, [X], True),
    ("median keepdim", lambda L, x: x.median(0, keepdim=True)[0], [X], False),
    ("median all", lambda L, x: x.median(), [X], False),
    ("nanmedian dim", lambda L, s: L.nanmedian(s, 1)[0], [NAN_ROWS[[0, 2]]], False),
    ("nanmedian all", lambda L, s: s.nanmedian(), [NAN_ROWS], False),
    ("kthvalue", lambda L, x: L.kthvalue(x, 2).values, [X], True),
    ("kthvalue dim keepdim", lambda L, x: x.kthvalue(3, 0, True)[0], [X], False),
    ("quantile scalar", lambda L, x: L.quantile(x, 0.3), [X], False),
    ("quantile tensor dim", lambda L, x, q: x.quantile(q, 1), [X, np.array([0.1, 0.5, 1.0])],
     True),
    ("quantile keepdim", lambda L, x: L.quantile(x, 0.7, 0, True), [X], False),
    ("quantile tensor keepdim all", lambda L, x, q: L.quantile(x, q, keepdim=True),
     [X, np.array([0.25, 0.8])], False),
    ("nanquantile", lambda L, s: L.nanquantile(s, 0.4, 1), [NAN_ROWS[[0, 2]]], False),
    ("nansum", lambda L, s: L.nansum(s, 1), [NAN_ROWS[[0, 2]]], True),
    ("nansum all", lambda L, s: s.nansum(), [NAN_ROWS], False),
    ("nanmean", lambda L, s: s.nanmean(1, keepdim=True), [NAN_ROWS[[0, 2]]], False),
    ("aminmax", lambda L, x: L.aminmax(x)[0] * L.aminmax(x).max, [X], False),
    ("aminmax dim", lambda L, x: L.stack(x.aminmax(dim=1, keepdim=True)), [X], False),
    ("cov", lambda L, x: L.cov(x), [X], True),
    ("cov 1-D correction", lambda L, v: v.cov(correction=0), [V], False),
    ("cov weights", lambda L, x, f, a: L.cov(x, fweights=f, aweights=a),
     [X, np.array([1, 2, 1, 3]), np.array([0.5, 1.0, 2.0, 0.25])], False),
    ("corrcoef", lambda L, x: L.corrcoef(x), [X], True),
    ("cummax", lambda L, x: L.cummax(x, 1).values, [X], True),
    ("cummin", lambda L, x: x.cummin(0)[0], [X], False),
    ("logcumsumexp", lambda L, x: L.logcumsumexp(x, 1), [X], True),
    ("logcumsumexp method", lambda L, x: x.logcumsumexp(-2), [X], False),
    ("logcumsumexp wide range", lambda L, w: L.logcumsumexp(w, 1), [WIDE], True),
    ("logcumsumexp -inf", lambda L, s: s.logcumsumexp(0), [np.array([-np.inf, 0.5, 2.0])],
     False),
    ("cummax int-valued ties", lambda L, r: L.cummax(r, 1)[0], [ROWS_F], False),
    ("corrcoef 1-D", lambda L, v: L.corrcoef(v), [V], False),
    ("mode gradient", lambda L, r: L.mode(r, 1)[0], [ROWS_F], False),
    ("median 3-D keepdim", lambda L, b: b.median(-1, True).values, [B], False),
    # distances and norms
    ("cdist", lambda L, a, b: L.cdist(a, b), [P1, P2], True),
    ("cdist self", lambda L, a: L.cdist(a, a), [P1], False),
    ("cdist p=1", lambda L, a, b: L.cdist(a, b, p=1), [P1, P2], False),
    ("cdist p=3", lambda L, a, b: L.cdist(a, b, 3.0), [P1, P2], False),
    ("cdist self p=3", lambda L, a: L.cdist(a, a, 3.0), [P1], False),
    ("cdist self p=0.5", lambda L, a: L.cdist(a, a, 0.5), [P1], False),
    ("cdist self p=1", lambda L, a: L.cdist(a, a, 1.0), [P1], False),
    ("vector_norm zero row p", lambda L, z: L.linalg.vector_norm(z, 3, 1), [WITH_ZERO_ROW],
     False),
    ("vector_norm zero row -1 keepdim", lambda L, z: L.linalg.vector_norm(z[:1], -1, 1, True),
     [WITH_ZERO_ROW], False),
    ("cdist p=inf", lambda L, a, b: L.cdist(a, b, float("inf")), [P1, P2], False),
    ("cdist by matmul", lambda L, a, b: L.cdist(a, b), [LONG1, P2], True),
    ("cdist by matmul asked", lambda L, a, b: L.cdist(a, b, compute_mode="use_mm_for_euclid_dist"),
     [P1, P2], False),
    ("cdist direct asked", lambda L, a, b: L.cdist(
        a, b, compute_mode="donot_use_mm_for_euclid_dist"), [LONG1, P2], False),
    ("cdist batched", lambda L, a, b: L.cdist(a, b), [B, B[:, :2]], False),
    ("vector_norm", lambda L, x: L.linalg.vector_norm(x), [X], True),
    ("vector_norm zero row", lambda L, z: L.linalg.vector_norm(z, dim=1), [WITH_ZERO_ROW],
     False),
    ("vector_norm ord dim", lambda L, x: L.linalg.vector_norm(x, 3, (0, 1), True), [X], False),
    ("vector_norm -1", lambda L, x: L.linalg.vector_norm(x, -1, 1), [X], False),
    ("vector_norm inf", lambda L, x: L.linalg.vector_norm(x, float("inf"), 0), [X], False),
    ("matrix_norm fro", lambda L, b: L.linalg.matrix_norm(b), [B], False),
    ("matrix_norm 1", lambda L, b: L.linalg.matrix_norm(b, 1), [B], False),
    ("matrix_norm -inf keepdim", lambda L, b: L.linalg.matrix_norm(b, -float("inf"),
                                                                   keepdim=True), [B], False),
    ("matrix_norm inf dims", lambda L, b: L.linalg.matrix_norm(b, float("inf"), (0, 2)), [B],
     False),
    ("matrix_norm -1", lambda L, x: L.linalg.matrix_norm(x, -1), [X], False),
    ("linalg.norm", lambda L, b: L.linalg.norm(b), [B], False),
    ("linalg.vecdot", lambda L, x, v: L.linalg.vecdot(x, v), [X, V], False),
    ("linalg.vecdot dim", lambda L, b: L.linalg.vecdot(b, b, dim=1), [B], False),
    ("linalg.matmul", lambda L, x, c: L.linalg.matmul(x, c), [X, C3], False),
    ("linalg.norm 2-D ord", lambda L, x: L.linalg.norm(x, 1), [X], False),
    ("linalg.norm 1-D ord", lambda L, v: L.linalg.norm(v, 3), [V], False),
    ("linalg.norm dim", lambda L, b: L.linalg.norm(b, dim=(0, 2)), [B], False),
    ("linalg.norm ord dim", lambda L, b: L.linalg.norm(b, float("inf"), -1), [B], False),
]
COMPILED = [c for c in DIFFERENTIABLE if c[3]]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name,fn,arrays,_", DIFFERENTIABLE, ids=[c[0] for c in DIFFERENTIABLE])
def test_differentiable_matches_torch(name, fn, arrays, _, dtype):
    check_against_torch(fn, arrays, dtype, msg=name)


@pytest.mark.parametrize("name,fn,arrays,_", COMPILED, ids=[c[0] for c in COMPILED])
def test_compiled_backward_matches_torch(name, fn, arrays, _):
    check_against_torch(fn, arrays, "float64", compiled=True, msg=name)


def _pair(arr, dtype=None):
    arr = np.asarray(arr) if dtype is None else np.asarray(arr, dtype=dtype)
    return ca.tensor(arr.copy()), torch.tensor(arr.copy())


def _same(got, want, msg=""):
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), msg
        for g, w in zip(got, want):
            _same(g, w, msg)
    else:
        assert_close(got, want, msg=msg)


INTS = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5])
ROWS = np.array([[1, 2, 1], [3, 0, 2], [1, 2, 1], [0, 0, 0]])
RUNS = np.array([1, 1, 2, 2, 3, 1, 1, 2])

# (name, fn(L, *tensors), inputs): results without gradient (values, indices, counts)
EXACT = [
    ("median indices", lambda L, x: L.median(x, 1).indices, [X]),
    ("median nan", lambda L, s: tuple(L.median(s, 1)), [NAN_ROWS]),
    ("median all nan", lambda L, s: s.median(), [NAN_ROWS]),
    ("median int", lambda L, i: tuple(i.median(0)), [ROWS]),
    ("median int all", lambda L, i: L.median(i), [INTS]),
    ("nanmedian nan", lambda L, s: tuple(L.nanmedian(s, 1)), [NAN_ROWS]),
    ("kthvalue indices", lambda L, x: tuple(L.kthvalue(x, 4, 1)), [X]),
    ("mode", lambda L, i: tuple(L.mode(i)), [INTS]),
    ("mode dim", lambda L, i: tuple(i.mode(0, True)), [ROWS]),
    ("mode float", lambda L, r: tuple(L.mode(r, 1)), [ROWS.astype(np.float64)]),
    ("cummax indices", lambda L, i: tuple(L.cummax(i, 0)), [INTS]),
    ("cummin nan", lambda L, s: tuple(s.cummin(1)), [NAN_ROWS]),
    ("cummax nan", lambda L, s: tuple(L.cummax(s, 1)), [NAN_ROWS]),
    ("quantile nan", lambda L, s: L.quantile(s, 0.5, 1), [NAN_ROWS]),
    ("nanquantile all nan row", lambda L, s: s.nanquantile(0.5, 1), [NAN_ROWS]),
    ("aminmax int", lambda L, i: tuple(L.aminmax(i)), [INTS]),
    ("nansum int", lambda L, i: L.nansum(i), [INTS]),
    ("argwhere", lambda L, r: L.argwhere(r), [ROWS]),
    ("argwhere method", lambda L, r: r.argwhere(), [ROWS.astype(np.float32)]),
    ("triu_indices", lambda L: L.triu_indices(3, 4), []),
    ("triu_indices offset", lambda L: L.triu_indices(4, 3, -1), []),
    ("tril_indices", lambda L: L.tril_indices(3, 5, 1), []),
    ("tril_indices empty", lambda L: L.tril_indices(0, 3), []),
    ("unique", lambda L, i: L.unique(i), [INTS]),
    ("unique all", lambda L, i: L.unique(i, return_inverse=True, return_counts=True), [ROWS]),
    ("unique counts", lambda L, i: i.unique(return_counts=True), [INTS]),
    ("unique dim", lambda L, r: L.unique(r, dim=0, return_inverse=True, return_counts=True),
     [ROWS]),
    ("unique dim 1", lambda L, r: r.unique(sorted=True, return_inverse=True, dim=1), [ROWS]),
    ("unique float", lambda L, x: L.unique(x), [np.round(X * 2)]),
    ("unique_consecutive", lambda L, r: L.unique_consecutive(r, True, True), [RUNS]),
    ("unique_consecutive 2-D", lambda L, r: r.unique_consecutive(return_inverse=True),
     [ROWS]),
    ("unique_consecutive dim", lambda L, r: L.unique_consecutive(
        r, return_counts=True, dim=0), [ROWS[[0, 2, 2, 1, 3, 3]]]),
    ("bincount", lambda L, i: L.bincount(i), [INTS]),
    ("bincount minlength", lambda L, i: i.bincount(minlength=12), [INTS]),
    ("bincount weights", lambda L, i, w: L.bincount(i, w), [INTS[:4], V]),
    ("bincount f32 weights", lambda L, i, w: L.bincount(i, w.float()), [INTS[:4], V]),
    ("searchsorted", lambda L, s, x: L.searchsorted(s, x), [np.sort(V), X]),
    ("searchsorted right", lambda L, s, q: L.searchsorted(s, q, right=True),
     [np.array([1, 2, 2, 3, 5]), np.array([2, 0, 5, 6, 3])]),
    ("searchsorted side", lambda L, s, q: L.searchsorted(s, q, side="right"),
     [np.array([1, 2, 2, 3, 5]), np.array([[2, 0], [5, 6]])]),
    ("searchsorted rows", lambda L, s, q: L.searchsorted(s, q),
     [np.sort(X, 1), Y]),
    ("searchsorted sorter", lambda L, s, q: L.searchsorted(s, q, sorter=s.argsort()),
     [V, W]),
    ("searchsorted scalar", lambda L, s: L.searchsorted(s, 2), [np.array([1, 2, 2, 3, 5])]),
    ("bucketize", lambda L, x, b: L.bucketize(x, b), [X, np.sort(V)]),
    ("bucketize right", lambda L, q, b: L.bucketize(q, b, right=True),
     [np.array([2, 0, 5, 6, 3]), np.array([1, 2, 2, 3, 5])]),
    ("histc", lambda L, x: L.histc(x, 5, -1, 1), [X]),
    ("histc edges", lambda L, x: L.histc(x, 4), [np.float32([0, 1, 2, 3, 4, 1.5])]),
    ("histc empty", lambda L, x: L.histc(x, 3, 0, 1), [np.zeros(0)]),
    ("mode nan", lambda L, s: tuple(L.mode(s)), [np.array([2.0, np.nan, np.nan, 1.0])]),
    ("argwhere 0-d", lambda L, x: L.argwhere(x), [np.array(3.0)]),
    ("unique nan", lambda L, s: L.unique(s, return_counts=True), [NAN_ROWS[0]]),
    ("unique unsorted", lambda L, i: L.unique(i, sorted=False), [INTS]),
    ("cov int", lambda L, r: L.cov(r), [ROWS]),
    ("corrcoef constant row", lambda L, r: L.corrcoef(r), [np.array([[1.0, 1, 1], [1, 2, 3]])]),
    ("kron int", lambda L, r: L.kron(r[:2], r[2:]), [ROWS]),
    ("block_diag mixed", lambda L, r, x: L.block_diag(r, x), [ROWS, X.astype(np.float32)]),
    ("block_diag none", lambda L: L.block_diag(), []),
    ("meshgrid 0-d", lambda L, a, v: L.meshgrid(a, v, indexing="ij"), [np.array(2.0), V]),
    ("diff past length", lambda L, v: L.diff(v, 5), [V[:3]]),
    ("triu_indices far offset", lambda L: L.triu_indices(3, 3, 5), []),
    ("median empty", lambda L, e: L.median(e), [np.zeros(0)]),
    ("median 0-d", lambda L, x: tuple(L.median(x, 0)), [np.array(3.0)]),
    ("cummax 0-d", lambda L, x: tuple(L.cummax(x, 0)), [np.array(3.0)]),
    ("bincount empty", lambda L, i: L.bincount(i), [np.zeros(0, dtype=np.int64)]),
    ("histc method range from data", lambda L, x: x.histc(bins=7), [X]),
]


@pytest.mark.parametrize("name,fn,arrays", EXACT, ids=[c[0] for c in EXACT])
def test_exact_results_match_torch(name, fn, arrays):
    pairs = [_pair(a) for a in arrays]
    _same(fn(ca, *[p[0] for p in pairs]), fn(torch, *[p[1] for p in pairs]), name)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint",
                                           "nearest"])
def test_quantile_interpolations(interpolation, dtype):
    levels = np.array([0.0, 0.25, 0.5, 0.6, 1.0])  # 0.5 of 4 values: a 'nearest' tie
    data = X.astype(dtype)
    for dim in (None, 0, 1):
        for fname in ("quantile", "nanquantile"):
            c, t = _pair(data)
            c.requires_grad = True
            t.requires_grad_()
            qc, qt = _pair(levels, dtype)
            got = getattr(ca, fname)(c, qc, dim, interpolation=interpolation)
            want = getattr(torch, fname)(t, qt, dim, interpolation=interpolation)
            assert_close(got, want, msg=f"{fname} {interpolation} {dim}")
            got.sum().backward()
            want.sum().backward()
            assert_close(c.grad, t.grad, msg=f"{fname} {interpolation} {dim} grad")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("args", [(None, False), (6, True), (2, False), (0, False)])
def test_vander_values_and_gradient(args, dtype):
    # torch 2.13's vander backward fails (an in-place write of its own), so the gradient
    # is checked against central differences
    data = np.array([0.0, 1.5, -2.0, 0.5]).astype(dtype)
    c, t = _pair(data)
    assert_close(ca.vander(c, *args), torch.vander(t, *args))
    if dtype == "float64" and args[0] != 0:
        check_numeric_gradient(lambda L, v: L.vander(v, *args), [data])


def test_vector_norm_0_counts_with_zero_gradient():
    # torch leaves x.grad None (the count has no derivative); cagrad adds zeros
    c, t = _pair(WITH_ZERO_ROW)
    c.requires_grad = True
    t.requires_grad_()
    got, want = ca.linalg.vector_norm(c, 0, 1), torch.linalg.vector_norm(t, 0, 1)
    assert_close(got, want)
    got.sum().backward()
    want.sum().backward()
    assert t.grad is None
    assert not c.grad.numpy().any()


def test_cov_without_degrees_of_freedom_warns():
    c, t = _pair(X)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        got = ca.cov(c, correction=4)
    with pytest.warns(UserWarning, match="degrees of freedom"):
        want = torch.cov(t, correction=4)
    assert_close(got, want)


def test_median_gradient_is_shared_by_ties():
    data = np.array([[2.0, 1.0, 2.0], [3.0, 2.0, 0.0]])
    c, t = _pair(data)
    c.requires_grad = True
    t.requires_grad_()
    c.median().backward()
    t.median().backward()
    assert_close(c.grad, t.grad)


def test_names_and_warnings_match_torch():
    c, t = _pair(V)
    with pytest.warns(UserWarning, match="indexing argument"):
        ca.meshgrid(c, c)
    with pytest.warns(UserWarning, match="without specifying the dim"):
        got = ca.cross(ca.tensor(C3), ca.tensor(D3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert_close(got, torch.cross(torch.tensor(C3), torch.tensor(D3)))
    assert type(ca.median(c, 0)).__name__ == "median"
    assert ca.aminmax(c)._fields == ("min", "max")
    assert repr(ca.aminmax(c)).split("(")[0] == "cagrad.return_types.aminmax"
    lines = repr(ca.aminmax(c)).replace("cagrad.", "torch.").split("\n")
    assert lines[1:] == repr(torch.aminmax(t)).split("\n")[1:]
    assert ca.cummax(c, 0)._fields == ("values", "indices")
    assert ca.cartesian_prod(c) is c


def _raises(fn, arrays):
    """The exception type torch raises for fn(torch, ...), checked against cagrad's."""
    pairs = [_pair(a) for a in arrays]
    with pytest.raises(Exception) as want:
        fn(torch, *[p[1] for p in pairs])
    with pytest.raises(want.type):
        fn(ca, *[p[0] for p in pairs])


ERRORS = [
    ("movedim repeated", lambda L, b: L.movedim(b, (0, 0), (1, 2)), [B]),
    ("movedim count", lambda L, b: L.movedim(b, (0, 1), 2), [B]),
    ("movedim range", lambda L, b: L.movedim(b, 3, 0), [B]),
    ("unflatten sizes", lambda L, x: x.unflatten(1, (3, 2)), [X]),
    ("take range", lambda L, x: L.take(x, L.tensor([12])), [X]),
    ("take_along_dim ndim", lambda L, x, i: L.take_along_dim(x, i[0], 1), [X, IDX]),
    ("meshgrid indexing", lambda L, v: L.meshgrid(v, v, indexing="yx"), [V]),
    ("meshgrid 2-D", lambda L, x: L.meshgrid(x, x, indexing="ij"), [X]),
    ("diff 0-d", lambda L, v: L.diff(v[0]), [V]),
    ("cross length", lambda L, x: L.linalg.cross(x, x), [X]),
    ("rot90 dims", lambda L, x: L.rot90(x, 1, (0, 0)), [X]),
    ("rot90 1-D", lambda L, v: L.rot90(v), [V]),
    ("block_diag 3-D", lambda L, b: L.block_diag(b), [B]),
    ("vander 2-D", lambda L, x: L.vander(x), [X]),
    ("kthvalue k", lambda L, x: L.kthvalue(x, 5, 1), [X]),
    ("quantile q range", lambda L, x: L.quantile(x, 1.5), [X]),
    ("quantile int", lambda L, i: L.quantile(i, 0.5), [INTS]),
    ("quantile interpolation", lambda L, x: L.quantile(x, 0.5, interpolation="cubic"), [X]),
    ("nanmean int", lambda L, i: L.nanmean(i), [INTS]),
    ("cov 3-D", lambda L, b: L.cov(b), [B]),
    ("cov float fweights", lambda L, x, v: L.cov(x, fweights=v), [X, V]),
    ("bincount 2-D", lambda L, r: L.bincount(r), [ROWS]),
    ("bincount negative", lambda L, i: L.bincount(-i), [INTS]),
    ("bincount float", lambda L, v: L.bincount(v), [V]),
    ("searchsorted side", lambda L, s: L.searchsorted(s, s, side="middle"), [V]),
    ("searchsorted opposite", lambda L, s: L.searchsorted(s, s, right=True, side="left"),
     [V]),
    ("bucketize 2-D", lambda L, x: L.bucketize(x, x), [X]),
    ("histc int", lambda L, i: L.histc(i), [INTS]),
    ("histc range", lambda L, x: L.histc(x, 4, 2, 1), [X]),
    ("cdist 1-D", lambda L, v: L.cdist(v, v), [V]),
    ("cdist columns", lambda L, a, b: L.cdist(a, b), [P1, X]),
    ("cdist p", lambda L, a: L.cdist(a, a, -1.0), [P1]),
    ("cdist compute_mode", lambda L, a: L.cdist(a, a, compute_mode="fast"), [P1]),
    ("vector_norm int", lambda L, i: L.linalg.vector_norm(i), [INTS]),
    ("matrix_norm 1-D", lambda L, v: L.linalg.matrix_norm(v), [V]),
    ("matrix_norm ord", lambda L, x: L.linalg.matrix_norm(x, 3), [X]),
    ("linalg.norm 3-D ord", lambda L, b: L.linalg.norm(b, 2), [B]),
    ("linalg.norm str ord on a vector", lambda L, x: L.linalg.norm(x, "fro", 1), [X]),
    ("vector_norm str ord", lambda L, x: L.linalg.vector_norm(x, "fro"), [X]),
    ("cross without a size-3 dim", lambda L, x: L.cross(x, x), [np.ones((2, 4))]),
    ("narrow_copy past the end", lambda L, x: x.narrow_copy(0, 1, 5), [X]),
    ("mode empty", lambda L, e: L.mode(e, 1), [np.zeros((1, 0))]),
    ("kthvalue 0", lambda L, v: L.kthvalue(v, 0), [V]),
    ("triu_indices negative", lambda L: L.tril_indices(-1, 3), []),
]


@pytest.mark.filterwarnings("ignore:Using torch.cross without")
@pytest.mark.parametrize("name,fn,arrays", ERRORS, ids=[c[0] for c in ERRORS])
def test_errors_match_torch(name, fn, arrays):
    _raises(fn, arrays)


@pytest.mark.parametrize("call", [
    lambda x: ca.quantile(x, 0.5, out=ca.zeros(())),
    lambda x: ca.nanquantile(x, 0.5, out=ca.zeros(())),
    lambda x: ca.searchsorted(x[0], x, out=ca.zeros(3, 4, dtype=ca.int64)),
    lambda x: ca.bucketize(x, x[0], out=ca.zeros(3, 4, dtype=ca.int64)),
    lambda x: ca.searchsorted(x[0], x, out_int32=True),
    lambda x: ca.linalg.vector_norm(x, out=ca.zeros(())),
    lambda x: ca.linalg.matrix_norm(x, out=ca.zeros(())),
    lambda x: ca.linalg.norm(x, out=ca.zeros(())),
    lambda x: ca.linalg.cross(x[:, :3], x[:, 1:], out=ca.zeros(3, 3)),
    lambda x: ca.triu_indices(3, 3, dtype=ca.float32),
], ids=["quantile", "nanquantile", "searchsorted", "bucketize", "out_int32", "vector_norm",
        "matrix_norm", "norm", "linalg.cross", "triu_indices dtype"])
def test_unsupported_arguments_raise(call):
    with pytest.raises(NotImplementedError, match="cagrad"):
        call(ca.tensor(np.sort(X, 1)))


def test_index_triangles_check_placement():
    assert_close(ca.tril_indices(3, 3, device="cpu"), torch.tril_indices(3, 3, device="cpu"))
    with pytest.raises(RuntimeError):
        ca.triu_indices(3, 3, device="cuda")


def test_linalg_names_it_lacks():
    with pytest.raises(AttributeError, match="python-api.md"):
        ca.linalg.eig  # noqa: B018 (the attribute access is what is tested)
