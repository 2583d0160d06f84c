"""More Tensor methods and their torch.* functions (_tensor_more.py) against torch 2.13:
values, dtypes, gradients in float32 and float64 (eager and under compiled autograd),
float64 gradients against finite differences, and torch's errors.
"""

import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, needs_cagrad, outcome, same_outcome

pytestmark = [needs_cagrad, pytest.mark.filterwarnings("ignore::UserWarning")]

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def _both(arr, **kw):
    return ca.tensor(np.array(arr), **kw), torch.tensor(np.array(arr), **kw)


# =============================================================== queries and identities
def test_queries_match_torch():
    for arr in (np.ones((2, 3), np.float32), np.arange(6.0).reshape(2, 3),
                np.arange(4), np.array([True, False])):
        c, t = _both(arr)
        for name in ("is_signed", "is_complex", "is_conj", "is_neg", "is_inference"):
            assert getattr(c, name)() == getattr(t, name)(), name
            assert getattr(ca, name)(c) == getattr(torch, name)(t), name
        assert (c.itemsize, c.nbytes) == (t.itemsize, t.nbytes)
        assert c.is_same_size(c) and not c.is_same_size(c[:1])
        assert ca.is_same_size(c, c.reshape(-1)) == torch.is_same_size(t, t.reshape(-1))
        for name in ("conj", "resolve_conj", "resolve_neg"):
            assert getattr(c, name)() is c and getattr(ca, name)(c) is c
        assert c.real is c and t.real is t
        assert_close(c.isreal(), t.isreal())
        assert_close(ca.ravel(c), torch.ravel(t))


def test_is_nonzero_and_positive():
    for v in ([0.0], [2.5], [float("nan")], [0], [True], 3.0):
        c, t = _both(v)
        assert c.is_nonzero() == t.is_nonzero() == ca.is_nonzero(c)
    for v in ([], [1.0, 2.0]):
        same_outcome(lambda L: L.tensor(v).is_nonzero())
    same_outcome(lambda L: L.tensor([True]).positive())
    c = ca.ones(3)
    assert c.positive() is c and ca.positive(c) is c


def test_output_nr():
    c = ca.ones(3, requires_grad=True)
    assert c.output_nr == 0 and (c * 2).output_nr == 0 and ca.ones(2).output_nr == 0


@pytest.mark.parametrize("arr", [[1.0, float("inf"), -float("inf"), float("nan"), 0.0],
                                 [1, -3], [True, False]])
def test_isposinf_isneginf(arr):
    c, t = _both(arr)
    for name in ("isposinf", "isneginf"):
        assert_close(getattr(c, name)(), getattr(t, name)())
        assert_close(getattr(ca, name)(c), getattr(torch, name)(t))


@pytest.mark.parametrize("method, dtype", [("int", "int32"), ("short", "int16"),
                                           ("char", "int8"), ("byte", "uint8")])
def test_missing_integer_dtypes_name_the_dtype(method, dtype):
    kind, message = outcome(lambda: getattr(ca.ones(2), method)())
    assert kind == "TypeError" and dtype in message and "docs/python-api.md" in message


# =============================================================== shapes
@DTYPE
@COMPILED
def test_adjoint_mH_H(dtype, compiled, rng):
    a = rng.standard_normal((2, 3, 4))
    check_against_torch(lambda L, x: x.adjoint() * 2 + x.mH, [a], dtype, compiled)
    check_against_torch(lambda L, x: L.adjoint(x), [a], dtype, compiled)
    check_against_torch(lambda L, x: x.H @ x, [a[0]], dtype, compiled)
    for make in (lambda L: L.ones(3).H, lambda L: L.ones(2, 2, 2).H, lambda L: L.ones(3).mH,
                 lambda L: L.ones(3).adjoint()):
        same_outcome(make)
    assert ca.tensor(2.0).H.item() == 2.0


@DTYPE
@COMPILED
def test_ravel_diagflat_msort(dtype, compiled, rng):
    a = rng.standard_normal((3, 4))
    check_against_torch(lambda L, x: x.t().ravel(), [a], dtype, compiled)
    for off in (0, 1, -2):
        check_against_torch(lambda L, x: L.diagflat(x, off), [a], dtype, compiled)
        check_against_torch(lambda L, x: x[0].diagflat(offset=off), [a], dtype, compiled)
    check_against_torch(lambda L, x: x.msort(), [a], dtype, compiled)
    check_against_torch(lambda L, x: L.msort(x[0]), [a], dtype, compiled)


def _weighted(L, parts):
    """One tensor from split pieces, each scaled differently (so each piece's gradient
    is checked)."""
    return L.cat([p.reshape(-1) * (i + 1) for i, p in enumerate(parts)])


@pytest.mark.parametrize("name, shape, arg", [
    ("hsplit", (6,), 3), ("hsplit", (2, 6, 2), [1, 4]), ("hsplit", (2, 4), 2),
    ("vsplit", (4, 3), 2), ("vsplit", (5, 2), [2, 3]), ("dsplit", (2, 2, 6), 3),
    ("dsplit", (1, 2, 5), [1, 7])])
@DTYPE
@COMPILED
def test_directional_splits(name, shape, arg, dtype, compiled, rng):
    a = rng.standard_normal(shape)
    check_against_torch(lambda L, x: _weighted(L, getattr(x, name)(arg)), [a], dtype, compiled)
    check_against_torch(lambda L, x: _weighted(L, getattr(L, name)(x, arg)), [a], dtype,
                        compiled)
    assert isinstance(getattr(ca.ones(shape), name)(arg), tuple)


@pytest.mark.parametrize("make", [
    lambda L: L.ones(6).hsplit(4), lambda L: L.ones(6, 6).vsplit(4),
    lambda L: L.ones(6, 6).dsplit(2), lambda L: L.ones(6).vsplit(2),
    lambda L: L.tensor(1.0).hsplit(2), lambda L: L.ones(6).split_with_sizes([2, 3]),
    lambda L: L.ones(2, 6).split_with_sizes([2, 3], dim=-1),
    lambda L: L.ones(2, 3).sum_to_size(3, 3), lambda L: L.ones(2, 3).sum_to_size(4, 2, 3),
])
def test_shape_errors(make):
    same_outcome(make)


@DTYPE
@COMPILED
def test_split_family(dtype, compiled, rng):
    a = rng.standard_normal((5, 4))
    check_against_torch(lambda L, x: _weighted(L, x.split_with_sizes([2, 3])), [a], dtype,
                        compiled)
    check_against_torch(lambda L, x: _weighted(L, L.split_with_sizes(x, [1, 3], dim=1)), [a],
                        dtype, compiled)
    check_against_torch(lambda L, x: _weighted(L, x.unsafe_split_with_sizes([4, 1])), [a],
                        dtype, compiled)
    check_against_torch(lambda L, x: _weighted(L, x.unsafe_split(2)), [a], dtype, compiled)
    check_against_torch(lambda L, x: _weighted(L, L.unsafe_split(x, 3, 1)), [a], dtype,
                        compiled)
    check_against_torch(lambda L, x: _weighted(L, x.unsafe_chunk(3)), [a], dtype, compiled)
    check_against_torch(lambda L, x: _weighted(L, L.unsafe_chunk(x, 2, dim=1)), [a], dtype,
                        compiled)
    assert isinstance(ca.ones(4).split_with_sizes([1, 3]), tuple)


@pytest.mark.parametrize("src, size", [((2, 3, 4), (3, 4)), ((2, 3, 4), (1, 4)),
                                       ((2, 3, 4), (3, 1)), ((2, 3, 4), (1, 1, 1)),
                                       ((2, 3, 4), (2, 3, 4)), ((3, 1), (1,)), ((4,), ())])
@DTYPE
@COMPILED
def test_sum_to_size(src, size, dtype, compiled, rng):
    a = rng.standard_normal(src)
    check_against_torch(lambda L, x: x.sum_to_size(size), [a], dtype, compiled)
    if size:  # torch needs at least one size argument
        check_against_torch(lambda L, x: x.sum_to_size(*size), [a], dtype, compiled)


# =============================================================== scatters
@DTYPE
@COMPILED
def test_select_slice_diagonal_scatter(dtype, compiled, rng):
    a = rng.standard_normal((4, 5))
    check_against_torch(lambda L, x, s: x.select_scatter(s, 0, 2), [a, a[0]], dtype, compiled)
    check_against_torch(lambda L, x, s: L.select_scatter(x, s, -1, -1), [a, a[:, 0]], dtype,
                        compiled)
    check_against_torch(lambda L, x, s: x.slice_scatter(s, start=1, end=4, step=2),
                        [a, a[:2]], dtype, compiled)
    check_against_torch(lambda L, x, s: L.slice_scatter(x, s, 1, 3), [a, a[:, :2]], dtype,
                        compiled)
    check_against_torch(lambda L, x, s: x.diagonal_scatter(s), [a, a[0, :4]], dtype,
                        compiled)
    check_against_torch(lambda L, x, s: L.diagonal_scatter(x, s, 2), [a, a[0, :3]], dtype,
                        compiled)
    check_against_torch(lambda L, x, s: L.diagonal_scatter(x, s, -1, 1, 0), [a, a[0, :4]],
                        dtype, compiled)


def test_scatter_errors_and_numeric_gradient(rng):
    for make in (lambda L: L.ones(6, 4).select_scatter(L.ones(3), 0, 0),
                 lambda L: L.ones(6, 4).slice_scatter(L.ones(3), 0, 0, 2),
                 lambda L: L.ones(6, 4).diagonal_scatter(L.ones(3))):
        same_outcome(make)
    a = rng.standard_normal((3, 4))
    check_numeric_gradient(lambda L, x, s: x.diagonal_scatter(s, 1) * x, [a, a[0, :3]])
    check_numeric_gradient(lambda L, x, s: x.slice_scatter(s, 1, 1) ** 2, [a, a[:, :3]])


@pytest.mark.parametrize("reduce", ["prod", "mean", "amax", "amin"])
@pytest.mark.parametrize("include_self", [True, False])
@DTYPE
@COMPILED
def test_index_reduce(reduce, include_self, dtype, compiled, rng):
    a = rng.standard_normal((4, 3))
    src = rng.standard_normal((5, 3))
    idx = np.array([0, 2, 0, 3, 2])
    check_against_torch(lambda L, x, s, i: x.index_reduce(0, i, s, reduce,
                                                          include_self=include_self),
                        [a, src, idx], dtype, compiled)
    src1 = rng.standard_normal((4, 2))
    check_against_torch(lambda L, x, s, i: L.index_reduce(x, 1, i, s, reduce,
                                                          include_self=include_self),
                        [a, src1, np.array([2, 0])], dtype, compiled)
    check_against_torch(lambda L, x, s, i: (x * 1).index_reduce_(0, i, s, reduce,
                                                                 include_self=include_self),
                        [a, src, idx], dtype, compiled)


def test_index_reduce_error_and_int():
    same_outcome(lambda L: L.ones(3).index_reduce(0, L.tensor([0]), L.ones(1), "sum"))
    c, t = _both(np.arange(6).reshape(3, 2))
    assert_close(c.index_reduce(0, ca.tensor([0, 0]), c[:2] + 1, "prod"),
                 t.index_reduce(0, torch.tensor([0, 0]), t[:2] + 1, "prod"))


def test_nonzero_static_and_new_empty_strided():
    for size, fill in ((2, -1), (5, -1), (4, 7), (0, -1)):
        c, t = _both([[1, 0, 2], [0, 3, 0]])
        assert_close(c.nonzero_static(size=size, fill_value=fill),
                     t.nonzero_static(size=size, fill_value=fill))
        assert_close(ca.nonzero_static(c, size=size), torch.nonzero_static(t, size=size))
    for size, stride in (((2, 2), (1, 2)), ((3, 4), (4, 1)), ((2, 0), (1, 1))):
        c = ca.ones(3).new_empty_strided(size, stride)
        t = torch.ones(3).new_empty_strided(size, stride)
        assert (tuple(c.shape), c.stride(), c.dtype.itemsize) == (tuple(t.shape), t.stride(), 4)
    c = ca.ones(2).new_empty_strided((2,), (1,), dtype=ca.float64, requires_grad=True)
    assert c.dtype is ca.float64 and c.requires_grad and c.is_leaf


# =============================================================== elementwise math
@pytest.mark.parametrize("name", ["fmax", "fmin"])
@DTYPE
@COMPILED
def test_fmax_fmin(name, dtype, compiled, rng):
    a, b = rng.standard_normal((2, 3, 4))
    b[0, :2] = np.nan
    a[1, 1] = a[2, 2] = np.nan
    b[2, 2] = np.nan
    check_against_torch(lambda L, x, y: getattr(x, name)(y), [a, b], dtype, compiled)
    check_against_torch(lambda L, x, y: getattr(L, name)(x, y[0]), [a, b], dtype, compiled)
    c, t = _both([1, 5, -2])
    assert_close(getattr(c, name)(ca.tensor([0.5, 7.0, -3.0])),
                 getattr(t, name)(torch.tensor([0.5, 7.0, -3.0])))


@DTYPE
@COMPILED
def test_float_power(dtype, compiled, rng):
    a = rng.uniform(0.5, 2.0, (3, 4))
    b = rng.uniform(-1.0, 2.0, (3, 4))
    check_against_torch(lambda L, x, y: x.float_power(y), [a, b], dtype, compiled)
    check_against_torch(lambda L, x: L.float_power(x, 3), [a], dtype, compiled)
    check_against_torch(lambda L, y: L.float_power(2, y), [b], dtype, compiled)
    check_against_torch(lambda L, x, y: (x.double() * 1).float_power_(y), [a, b], dtype,
                        compiled)
    c, t = _both([1, 2, 3])
    assert_close(c.float_power(2), t.float_power(2))
    same_outcome(lambda L: L.ones(3).float_power_(2))
    check_numeric_gradient(lambda L, x, y: L.float_power(x, y), [a, b])


def test_heaviside():
    x = [-1.5, 0.0, 2.0, 0.0]
    v = [0.5, 0.25, 0.3, 1.0]
    for dtype in ("float32", "float64"):
        c, t = (L.tensor(x, dtype=getattr(L, dtype)) for L in (ca, torch))
        cv, tv = (L.tensor(v, dtype=getattr(L, dtype)) for L in (ca, torch))
        assert_close(c.heaviside(cv), t.heaviside(tv))
        assert_close(ca.heaviside(c, cv[1]), torch.heaviside(t, tv[1]))
        assert_close(c.clone().heaviside_(cv), t.clone().heaviside_(tv))
    assert_close(ca.tensor([-2, 0, 3]).heaviside(ca.tensor([7])),
                 torch.tensor([-2, 0, 3]).heaviside(torch.tensor([7])))
    same_outcome(lambda L: L.ones(3).heaviside(L.ones(3, dtype=L.float64)))
    same_outcome(lambda L: L.ones(3, requires_grad=True).heaviside(L.ones(3)).sum().backward())


def test_gcd_lcm():
    a = [0, 12, -18, 7, 5, 0]
    b = [0, 8, 24, -14, 0, 3]
    for name in ("gcd", "lcm"):
        c, t = _both(a)
        cb, tb = _both(b)
        assert_close(getattr(c, name)(cb), getattr(t, name)(tb))
        assert_close(getattr(ca, name)(c, cb[1]), getattr(torch, name)(t, tb[1]))
        getattr(c, name + "_")(cb)
        getattr(t, name + "_")(tb)
        assert_close(c, t)
        same_outcome(lambda L, name=name: getattr(L.ones(3), name)(L.ones(3)))
        same_outcome(lambda L, name=name: getattr(L, name)(L.ones(2, dtype=L.float64),
                                                            L.ones(2, dtype=L.float64)))


@DTYPE
@COMPILED
def test_ldexp(dtype, compiled, rng):
    a = rng.standard_normal((3, 4))
    # torch's gradient for a negative integer exponent is 0 (it takes 2**k in integers):
    # compared with torch for k >= 0, with finite differences for k < 0
    e = rng.integers(0, 5, (3, 4))
    check_numeric_gradient(lambda L, x, k: x.ldexp(k), [a, -e], compiled)
    check_against_torch(lambda L, x, k: x.ldexp(k), [a, e], dtype, compiled)
    check_against_torch(lambda L, x, k: L.ldexp(x, k[0]), [a, e], dtype, compiled)
    check_against_torch(lambda L, x, k: (x * 1).ldexp_(k), [a, e], dtype, compiled)
    c, t = _both([1, 2, 3])
    assert_close(c.ldexp(c), t.ldexp(t))
    same_outcome(lambda L: L.ones(3, dtype=L.long).ldexp_(L.ones(3)))


@DTYPE
@COMPILED
def test_frexp(dtype, compiled, rng):
    a = rng.standard_normal((3, 4)) * 100
    a[0, :3] = [0.0, np.inf, -np.inf]
    check_against_torch(lambda L, x: x.frexp().mantissa, [a], dtype, compiled)
    check_against_torch(lambda L, x: L.frexp(x)[0] * 2, [a], dtype, compiled)
    c, t = _both(a.astype(dtype))
    mc, ec = c.frexp()
    mt, et = t.frexp()
    assert_close(mc, mt)
    np.testing.assert_array_equal(ec.numpy(), et.numpy())
    assert ec.dtype is ca.int64  # torch: int32, which cagrad lacks
    same_outcome(lambda L: L.ones(3, dtype=L.long).frexp())


@DTYPE
@COMPILED
def test_nextafter(dtype, compiled, rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((3, 4))
    b[0, 0] = a[0, 0]
    check_against_torch(lambda L, x, y: x.nextafter(y), [a, b], dtype, compiled)
    check_against_torch(lambda L, x, y: L.nextafter(x, y[0]), [a, b], dtype, compiled)
    check_against_torch(lambda L, x, y: L.nextafter(x[0], y), [a, b], dtype, compiled)
    c, t = _both(a.astype(dtype))
    assert_close(c.clone().nextafter_(c * 2), t.clone().nextafter_(t * 2), rtol=0, atol=0)
    assert (c.nextafter(c + 1) != c).all().item()
    same_outcome(lambda L: L.ones(3, dtype=L.long).nextafter(L.ones(3, dtype=L.long)))


@pytest.mark.parametrize("p", [2, 1, 3.5, float("inf"), 0])
@DTYPE
@COMPILED
def test_dist(p, dtype, compiled, rng):
    a, b = rng.standard_normal((2, 3, 4))
    check_against_torch(lambda L, x, y: x.dist(y, p) if p != 2 else x.dist(y), [a, b],
                        dtype, compiled, needs_grad=[] if p == 0 else None)
    check_against_torch(lambda L, x, y: L.dist(x, y[0], p=p), [a, b], dtype, compiled,
                        needs_grad=[] if p == 0 else None)


@pytest.mark.parametrize("p, dim, maxnorm", [(2, 0, 1.0), (1, 1, 0.5), (3, -1, 2.0),
                                             (2, 1, 100.0), (float("inf"), 0, 0.3)])
@DTYPE
@COMPILED
def test_renorm(p, dim, maxnorm, dtype, compiled, rng):
    a = rng.standard_normal((3, 4, 2))
    check_against_torch(lambda L, x: x.renorm(p, dim, maxnorm), [a], dtype, compiled)
    check_against_torch(lambda L, x: (x * 1).renorm_(p, dim, maxnorm), [a], dtype, compiled)
    check_against_torch(lambda L, x: L.renorm(x[0], p, 0, maxnorm), [a], dtype, compiled)
    if p != float("inf"):
        check_numeric_gradient(lambda L, x: L.renorm(x, p, dim, maxnorm), [a])


def test_renorm_errors():
    same_outcome(lambda L: L.ones(3, 3).renorm(-1, 0, 1))
    same_outcome(lambda L: L.ones(3, 3).renorm(2, 0, -1))
    same_outcome(lambda L: L.ones(3).renorm(2, 0, 1))


@DTYPE
@COMPILED
def test_hardshrink_prelu(dtype, compiled, rng):
    a = rng.standard_normal((2, 3, 4))
    check_against_torch(lambda L, x: x.hardshrink(), [a], dtype, compiled)
    check_against_torch(lambda L, x: L.hardshrink(x, 0.8), [a], dtype, compiled)
    w = rng.uniform(0.1, 0.3, 3)
    check_against_torch(lambda L, x, w: x.prelu(w), [a, w], dtype, compiled)
    check_against_torch(lambda L, x, w: L.prelu(x, w[:1]), [a, w], dtype, compiled)


# =============================================================== in-place forms
@pytest.mark.parametrize("name", ["eq_", "ne_", "lt_", "le_", "gt_", "ge_", "greater_",
                                  "greater_equal_", "less_", "less_equal_", "not_equal_",
                                  "logical_and_", "logical_or_", "logical_xor_"])
@DTYPE
@COMPILED
def test_inplace_comparisons(name, dtype, compiled, rng):
    a = rng.integers(-1, 2, (3, 4)).astype(float)
    b = rng.integers(-1, 2, (3, 4)).astype(float)
    check_against_torch(lambda L, x, y: getattr(x * 1, name)(y) + x, [a, b], dtype, compiled)
    if not name.startswith("logical"):  # torch's logical_*_ take tensors only
        check_against_torch(lambda L, x: getattr(x * 1, name)(0.0) * x, [a], dtype, compiled)
    else:
        same_outcome(lambda L: getattr(L.ones(3), name)(2.0))
    c, t = _both(a.astype(dtype))
    assert_close(getattr(c, name)(c[0].clone()), getattr(t, name)(t[0].clone()))
    same_outcome(lambda L: getattr(L.ones(3), name)(L.ones(2, 3)))


@DTYPE
def test_inplace_logical_not_and_int(dtype, rng):
    check_against_torch(lambda L, x: (x * 2).logical_not_() * x, [rng.standard_normal(4)],
                        dtype)
    c, t = (L.tensor([1.0, 0.0], requires_grad=True) for L in (ca, torch))
    c.logical_and_(ca.tensor([1.0, 1.0]))  # a leaf: torch writes outside autograd
    t.logical_and_(torch.tensor([1.0, 1.0]))
    assert_close(c.detach(), t.detach())
    a = rng.integers(-1, 2, (3, 4))
    c, t = _both(a.astype(dtype))
    assert_close(c.logical_not_(), t.logical_not_())
    c, t = _both(a)
    assert_close(c.eq_(1), t.eq_(1))
    c, t = _both(a > 0)
    assert_close(c.logical_xor_(ca.tensor(True)), t.logical_xor_(torch.tensor(True)))


@DTYPE
@COMPILED
def test_inplace_arithmetic_aliases(dtype, compiled, rng):
    a, b = rng.standard_normal((2, 3, 4))
    check_against_torch(lambda L, x: (x * 1).absolute_(), [a], dtype, compiled)
    check_against_torch(lambda L, x: (x * 1).negative_(), [a], dtype, compiled)
    check_against_torch(lambda L, x, y: (x * 1).multiply_(y), [a, b], dtype, compiled)
    check_against_torch(lambda L, x, y: (x * 1).subtract_(y, alpha=2), [a, b], dtype,
                        compiled)
    check_against_torch(lambda L, x: (x * 1).subtract_(1.5), [a], dtype, compiled)


@DTYPE
@COMPILED
def test_inplace_products(dtype, compiled, rng):
    m = rng.standard_normal((3, 4))
    b1, b2 = rng.standard_normal((2, 5, 3, 4)), rng.standard_normal((2, 5, 4, 4))
    kw = dict(beta=0.5, alpha=2.0)
    check_against_torch(lambda L, x, p, q: (x * 1).addmm_(p, q, **kw),
                        [m, rng.standard_normal((3, 5)), rng.standard_normal((5, 4))], dtype,
                        compiled)
    check_against_torch(lambda L, x, p, q: (x * 1).addbmm_(p, q),
                        [m, b1[0], b2[0]], dtype, compiled)
    check_against_torch(lambda L, x, p, q: (x * 1).baddbmm_(p, q, **kw),
                        [b1[1], b1[0], b2[0]], dtype, compiled)
    check_against_torch(lambda L, x, p, v: (x * 1).addmv_(p, v, **kw),
                        [m[:, 0], m, m[0]], dtype, compiled)
    check_against_torch(lambda L, x, u, v: (x * 1).addr_(u, v, **kw),
                        [m, m[:, 0], m[0]], dtype, compiled)
    c, t = _both(m.astype(dtype))  # outside the graph: written in place
    assert_close(c.addmm_(c[:, :3] + 1, c[:3] * 2), t.addmm_(t[:, :3] + 1, t[:3] * 2))


def test_inplace_leaf_refused():
    def make(L):
        return L.ones(2, 2, requires_grad=True).addmm_(L.ones(2, 2), L.ones(2, 2))

    (kind, message), (torch_kind, torch_message) = outcome(lambda: make(ca)), outcome(
        lambda: make(torch))
    assert kind == torch_kind and message.startswith(torch_message)  # cagrad adds a hint


# =============================================================== old linear algebra
@pytest.mark.parametrize("name", ["solve", "lstsq", "symeig", "eig"])
def test_removed_linalg(name):
    args = {"solve": 1, "lstsq": 1}.get(name, 0)
    same_outcome(lambda L: getattr(L.eye(3), name)(*[L.eye(3)] * args))
    same_outcome(lambda L: getattr(L, name)(L.eye(3), L.eye(3)))


def test_lu_not_implemented():
    kind, message = outcome(lambda: ca.eye(3).lu())
    assert kind == "NotImplementedError" and "docs/python-api.md" in message
    assert outcome(lambda: ca.lu(ca.eye(3)))[0] == "NotImplementedError"


def _spd(rng, n=4):
    m = rng.standard_normal((n, n))
    return m @ m.T + n * np.eye(n)


@pytest.mark.parametrize("upper", [False, True])
@DTYPE
@COMPILED
def test_cholesky(upper, dtype, compiled, rng):
    s = _spd(rng)
    check_against_torch(lambda L, x: (x @ x.mT + 4 * L.eye(4, dtype=x.dtype)).cholesky(upper),
                        [s], dtype, compiled)
    check_against_torch(lambda L, x: L.cholesky(x + x.mT, upper=upper), [s], dtype, compiled)


@pytest.mark.parametrize("some", [True, False])
@DTYPE
@COMPILED
def test_qr(some, dtype, compiled, rng):
    a = rng.standard_normal((5, 3))
    grads = None if some else []  # torch: complete QR of a tall matrix has no gradient
    check_against_torch(lambda L, x: x.qr(some).R, [a], dtype, compiled, needs_grad=grads)
    check_against_torch(lambda L, x: L.qr(x, some=some)[0][:, :3], [a], dtype, compiled,
                        needs_grad=grads)
    assert tuple(ca.qr(ca.tensor(a), some).Q.shape) == tuple(torch.qr(torch.tensor(a), some)
                                                             .Q.shape)


@pytest.mark.parametrize("some", [True, False])
@DTYPE
@COMPILED
def test_svd(some, dtype, compiled, rng):
    a = rng.standard_normal((5, 3))
    check_against_torch(lambda L, x: x.svd(some).S, [a], dtype, compiled)

    def rebuilt(L, x):
        u, s, v = L.svd(x, some=some)
        return u[:, :3] @ L.diag(s) @ v.mT

    check_against_torch(rebuilt, [a], dtype, compiled)
    c, t = _both(a.astype(dtype))
    for one, other in zip(c.svd(some), t.svd(some)):
        assert_close(one.abs(), other.abs(), rtol=1e-4, atol=1e-5)
    for one, other in zip(c.svd(compute_uv=False), t.svd(compute_uv=False)):
        assert_close(one, other, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("upper, transpose, unit", [(True, False, False), (False, False, False),
                                                    (True, True, False), (False, True, True)])
@DTYPE
@COMPILED
def test_triangular_solve(upper, transpose, unit, dtype, compiled, rng):
    a = rng.standard_normal((4, 4)) + 4 * np.eye(4)
    b = rng.standard_normal((4, 2))
    check_against_torch(lambda L, y, x: y.triangular_solve(x, upper, transpose, unit)[0],
                        [b, a], dtype, compiled)
    check_against_torch(lambda L, y, x: L.triangular_solve(y, x, upper=upper,
                                                           transpose=transpose,
                                                           unitriangular=unit)
                        .cloned_coefficient, [b, a], dtype, compiled, needs_grad=[1])


def test_deprecated_linalg_warn():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        ca.eye(2).cholesky()
    assert any("deprecated" in str(w.message) for w in caught)


def test_ldexp_frexp_extreme_exponents():
    c, t = _both(np.array([1e300, 5e-324, -3.0, 1.0]))
    for one, other in zip(c.frexp(), t.frexp()):
        np.testing.assert_array_equal(one.numpy(), other.numpy())
    k = [200, -1000, 3, -1074]
    assert_close(c.ldexp(ca.tensor(k)), t.ldexp(torch.tensor(k)))
    assert_close(ca.ldexp(ca.ones(2), ca.tensor([2.0, 3.0], dtype=ca.float64)),
                 torch.ldexp(torch.ones(2), torch.tensor([2.0, 3.0], dtype=torch.float64)))


# float64 gradients against central differences, under compiled autograd too
NUMERIC = [
    ("fmax", lambda L, x, y: L.fmax(x, y * 0.5)),
    ("fmin", lambda L, x, y: x.fmin(y)),
    ("dist", lambda L, x, y: x.dist(y, 3)),
    ("frexp", lambda L, x, y: L.frexp(x * 3).mantissa * y),
    ("nextafter", lambda L, x, y: x.nextafter(y) * x),
    ("diagflat", lambda L, x, y: L.diagflat(x * y, 1)),
    ("hsplit", lambda L, x, y: _weighted(L, (x * y).hsplit([1, 3]))),
    ("sum_to_size", lambda L, x, y: (x * y).sum_to_size(1, 4) ** 2),
    ("select_scatter", lambda L, x, y: x.select_scatter(y[1] ** 2, 0, 1)),
    ("index_reduce", lambda L, x, y: x.index_reduce(0, L.tensor([2, 0, 2]), y, "prod")),
    ("msort", lambda L, x, y: x.msort() * y),
    ("hardshrink", lambda L, x, y: (x * 2).hardshrink(0.3) * y),
    ("addmm_", lambda L, x, y: (x * 1).addmm_(y[:, :3], x * 2, beta=2)),
    ("addr_", lambda L, x, y: (x * 1).addr_(y[:, 0], x[0], alpha=0.5)),
    ("mH", lambda L, x, y: x.mH @ y),
]


@pytest.mark.parametrize("name, fn", NUMERIC, ids=[n for n, _ in NUMERIC])
@COMPILED
def test_numeric_gradients(name, fn, compiled, rng):
    a = rng.standard_normal((3, 4))
    b = rng.standard_normal((3, 4))
    check_numeric_gradient(fn, [a, b], compiled)
