"""Sparse COO tensors (a GCN's surface): torch.sparse_coo_tensor, coalesce, indices/values,
to_dense, Tensor.to_sparse, torch.sparse.mm / spmm / mm / matmul / @ with a sparse operand,
torch.sparse.sum, dense + sparse, and the metadata, each compared with torch 2.13: values,
and gradients of the dense operand and of the values in float32 and float64, eager and
compiled (compiled == eager), with gradcheck in float64. Unsupported uses raise errors
that name them and point to docs/python-api.md.
"""

import numpy as np
import pytest
import torch

from helpers import assert_close, backward_checked, ca, compiled_ctx, to_np

pytestmark = [pytest.mark.filterwarnings("ignore:Sparse invariant checks"),  # torch's
              pytest.mark.filterwarnings("ignore:torch.sparse.SparseTensor")]

DTYPES = ["float32", "float64"]
MODES = [pytest.param(False, id="eager"), pytest.param(True, id="compiled")]
# an uncoalesced 3 x 4 pattern: (1, 2) appears twice, rows out of order
INDICES = np.array([[1, 0, 2, 1, 2], [2, 3, 0, 2, 1]])
VALUES = np.array([0.5, -1.25, 2.0, 1.5, -0.75])


def both_sparse(dtype, requires_grad=False, indices=INDICES, values=VALUES, size=(3, 4)):
    """(cagrad, torch) sparse tensors and their leaf values tensors."""
    out = []
    for L in (ca, torch):
        v = L.tensor(values.astype(dtype), requires_grad=requires_grad)
        out.append((L.sparse_coo_tensor(L.tensor(indices), v, size), v))
    return out


def dense_pair(shape, dtype, seed=0):
    a = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    return ca.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)


def same_sparse(c, t):
    assert c.is_sparse and t.is_sparse and tuple(c.shape) == tuple(t.shape)
    assert c.is_coalesced() == t.is_coalesced() and c._nnz() == t._nnz()
    c, t = c.coalesce(), t.coalesce()
    np.testing.assert_array_equal(to_np(c.indices()), to_np(t.indices()))
    assert_close(c.values(), t.values())


# ------------------------------------------------------------------------ construction
@pytest.mark.parametrize("dtype", DTYPES)
def test_metadata_matches_torch(dtype):
    (c, _), (t, _) = both_sparse(dtype)
    assert c.layout is ca.sparse_coo and t.layout is torch.sparse_coo
    assert repr(c.layout) == "cagrad.sparse_coo"
    assert c.is_sparse and not ca.ones(2).is_sparse and ca.ones(2).layout is ca.strided
    assert tuple(c.shape) == tuple(t.shape) and tuple(c.size()) == tuple(t.size())
    assert c.size(1) == t.size(1) == 4 and c.dim() == t.dim() == c.ndim == 2
    assert (c.sparse_dim(), c.dense_dim(), c._nnz()) == (t.sparse_dim(), t.dense_dim(), 5)
    assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1] == dtype
    assert not c.is_coalesced() and not t.is_coalesced()
    assert "nnz=5" in repr(c) and "layout=cagrad.sparse_coo" in repr(c)


def test_inputs_as_numpy_and_lists_and_inferred_size():
    edges = np.array([[0, 1], [1, 2], [2, 0]], dtype=np.int32)  # the gcn example's edges.T
    for L in (ca, torch):
        s = L.sparse_coo_tensor(edges.T, L.ones(3), (3, 3), dtype=L.int64)
        assert s.dtype == L.int64 and tuple(s.shape) == (3, 3)
    c = ca.sparse_coo_tensor([[0, 4], [1, 2]], [1.0, 2.0])
    t = torch.sparse_coo_tensor([[0, 4], [1, 2]], [1.0, 2.0])
    assert tuple(c.shape) == tuple(t.shape) == (5, 3) and c.dtype == ca.float32
    c = ca.sparse_coo_tensor([[0, 1]], [1, 2])
    assert c.dtype == ca.int64
    assert ca.sparse_coo_tensor([[0]], [1.0], (2,), requires_grad=True).requires_grad


@pytest.mark.parametrize("name", ["FloatTensor", "DoubleTensor", "LongTensor"])
def test_legacy_sparse_constructors(name):
    """pygcn's torch.sparse.FloatTensor(indices, values, shape): the values keep their
    dtype whatever the name, with a deprecation warning, as in torch 2.13."""
    for values in (VALUES, VALUES.astype(np.float32), np.arange(5)):
        with pytest.warns(UserWarning, match="deprecated"):
            c = getattr(ca.sparse, name)(ca.tensor(INDICES), ca.tensor(values),
                                         ca.Size([3, 4]))
        t = getattr(torch.sparse, name)(torch.tensor(INDICES), torch.tensor(values),
                                        torch.Size([3, 4]))  # warns once per process
        assert str(c.dtype).split(".")[1] == str(t.dtype).split(".")[1]
        same_sparse(c, t)


def test_construction_errors_match_torch():
    def bad_index(L):
        return L.sparse_coo_tensor(L.tensor([[0, 5]]), L.ones(2), (3,), check_invariants=True)

    msgs = []
    for L in (ca, torch):
        with pytest.raises(RuntimeError) as e:
            bad_index(L)
        msgs.append(str(e.value))
    assert msgs[0] == msgs[1]
    with pytest.raises(RuntimeError, match="same nnz"):
        ca.sparse_coo_tensor(ca.tensor([[0, 1]]), ca.ones(3), (3,))
    with pytest.raises(NotImplementedError, match="docs/python-api.md"):
        ca.sparse_coo_tensor(ca.tensor([[0, 1]]), ca.ones(2, 2), (3, 2))


# ---------------------------------------------------------------- coalesce and to_dense
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", MODES)
def test_coalesce_values_and_their_gradient(dtype, compiled):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    cc, tc = c.coalesce(), t.coalesce()
    assert cc.is_coalesced() and tc.is_coalesced()
    same_sparse(cc, tc)
    w = np.arange(1.0, 5.0).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((cc.values() * ca.tensor(w)).sum(), compiled)
    (tc.values() * torch.tensor(w)).sum().backward()
    assert_close(cv.grad, tv.grad)


def test_indices_and_values_need_coalescing_like_torch():
    (c, _), (t, _) = both_sparse("float64")
    for name in ("indices", "values"):
        msgs = []
        for s in (c, t):
            with pytest.raises(RuntimeError) as e:
                getattr(s, name)()
            msgs.append(str(e.value))
        assert msgs[0] == msgs[1]
    np.testing.assert_array_equal(to_np(c._indices()), to_np(t._indices()))
    assert_close(c._values(), t._values())
    assert not c._values().requires_grad


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", MODES)
def test_to_dense_values_and_gradient(dtype, compiled):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    cd, td = c.to_dense(), t.to_dense()
    assert_close(cd, td)
    w = np.random.default_rng(1).standard_normal((3, 4)).astype(dtype)
    with compiled_ctx(compiled):
        backward_checked((cd * ca.tensor(w)).sum(), compiled)
    (td * torch.tensor(w)).sum().backward()
    assert_close(cv.grad, tv.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", MODES)
def test_to_sparse_of_a_dense_tensor(dtype, compiled):
    a = np.random.default_rng(2).standard_normal((4, 3)).astype(dtype)
    a[a < 0.2] = 0
    cx, tx = ca.tensor(a, requires_grad=True), torch.tensor(a, requires_grad=True)
    cs, ts = cx.to_sparse(), tx.to_sparse()
    assert cs.is_coalesced() and ts.is_coalesced() and cs.requires_grad
    same_sparse(cs, ts)
    cd, td = dense_pair((3, 5), dtype)
    # torch.sparse.mm's gradient keeps to the pattern (zero where x is zero), @'s does not
    with compiled_ctx(compiled):
        backward_checked((ca.sparse.mm(cs, cd).pow(2).sum() + (cs @ cd).sum()
                          + (cd.t() @ cs.t()).pow(2).sum()), compiled)
    (torch.sparse.mm(ts, td).pow(2).sum() + (ts @ td).sum()
     + (td.t() @ ts.t()).pow(2).sum()).backward()
    cx.grad, tx.grad = None, None  # and after .to(device): still the dense gradient
    with compiled_ctx(compiled):
        backward_checked(ca.mm(cx.to_sparse().to("cpu"), cd).pow(2).sum(), compiled)
    torch.mm(tx.to_sparse().to("cpu"), td).pow(2).sum().backward()
    assert_close(cx.grad, tx.grad)
    assert_close(cd.grad, td.grad)
    for L, x in ((ca, cx), (torch, tx)):  # and to_dense's is masked too
        x.grad = None
        L.sparse.mm(x.to_sparse(), L.ones(3, 2, dtype=x.dtype)).sum().backward()
        assert (to_np(x.grad)[a == 0] == 0).all() and (to_np(x.grad)[a != 0] == 2).all()
    same_sparse(ca.tensor(a).to_sparse(layout=ca.sparse_coo), torch.tensor(a).to_sparse())
    same_sparse(ca.zeros(2, 2).to_sparse(), torch.zeros(2, 2).to_sparse())


# ------------------------------------------------------------------------- products
PRODUCTS = {
    "sparse.mm": lambda L, s, d: L.sparse.mm(s, d),
    "spmm": lambda L, s, d: L.spmm(s, d),
    "mm": lambda L, s, d: L.mm(s, d),
    "matmul": lambda L, s, d: L.matmul(s, d),
    "operator": lambda L, s, d: s @ d,
    "method": lambda L, s, d: s.mm(d),
}


@pytest.mark.parametrize("name", sorted(PRODUCTS))
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", MODES)
def test_sparse_times_dense_values_and_gradients(name, dtype, compiled):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    cd, td = dense_pair((4, 3), dtype)
    co, to = PRODUCTS[name](ca, c, cd), PRODUCTS[name](torch, t, td)
    assert not co.is_sparse and to.layout is torch.strided
    assert_close(co, to)
    with compiled_ctx(compiled):
        backward_checked(co.pow(2).sum(), compiled)
    to.pow(2).sum().backward()
    assert_close(cd.grad, td.grad)
    assert_close(cv.grad, tv.grad)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("compiled", MODES)
def test_dense_times_sparse_and_sparse_times_vector(dtype, compiled):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    ca_, ta = dense_pair((2, 3), dtype, seed=3)
    cx, tx = dense_pair((4,), dtype, seed=4)
    co = (ca_ @ c).sum() + ca.mm(ca_, c).pow(2).sum() + (c @ cx).pow(2).sum()
    to = (ta @ t).sum() + torch.mm(ta, t).pow(2).sum() + (t @ tx).pow(2).sum()
    assert_close(co, to)
    with compiled_ctx(compiled):
        backward_checked(co, compiled)
    to.backward()
    for g, h in ((ca_.grad, ta.grad), (cx.grad, tx.grad), (cv.grad, tv.grad)):
        assert_close(g, h)


def test_compiled_equals_eager_for_a_gcn_layer():
    """Two graph convolutions (adjacency @ (x @ w)) trained twice, eager and compiled."""
    (adj, _), _ = both_sparse("float64")
    grads = []
    for compiled in (False, True):
        w1, _ = dense_pair((5, 4), "float64", seed=5)
        w2, _ = dense_pair((4, 2), "float64", seed=6)
        x = ca.tensor(np.random.default_rng(7).standard_normal((3, 5)))
        with compiled_ctx(compiled):
            h = ca.relu(ca.spmm(adj.t(), ca.mm(x, w1)))  # the 3 x 4 adjacency transposed
            out = ca.spmm(adj, ca.mm(h, w2))
            backward_checked(out.log_softmax(1).sum(), compiled)
        grads.append((to_np(w1.grad), to_np(w2.grad)))
    for a, b in zip(*grads):
        np.testing.assert_allclose(a, b, rtol=0, atol=1e-12)


def test_gradcheck_of_the_product_in_float64():
    idx = ca.tensor(INDICES)

    def f(values, dense):
        return ca.sparse.mm(ca.sparse_coo_tensor(idx, values, (3, 4)), dense)

    v = ca.tensor(VALUES, requires_grad=True)
    d = ca.tensor(np.random.default_rng(8).standard_normal((4, 2)), requires_grad=True)
    assert ca.autograd.gradcheck(f, (v, d))
    assert ca.autograd.gradcheck(lambda v: ca.sparse_coo_tensor(idx, v, (3, 4)).coalesce()
                                 .to_dense(), (v,))


def test_product_errors():
    (c, _), (t, _) = both_sparse("float64")
    for L, s in ((ca, c), (torch, t)):
        with pytest.raises(RuntimeError):
            L.sparse.mm(s, L.ones(3, 2, dtype=L.float64))  # 4 columns, 3 rows
    with pytest.raises(RuntimeError, match="same dtype"):
        ca.sparse.mm(c, ca.ones(4, 2))
    with pytest.raises(NotImplementedError, match="docs/python-api.md"):
        c @ c


# ------------------------------------------------------------ sums, sums of tensors, rest
@pytest.mark.parametrize("dtype", DTYPES)
def test_sparse_sum(dtype):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    assert_close(ca.sparse.sum(c), torch.sparse.sum(t))
    assert_close(c.sum(), t.sum())
    for dim in (0, 1, -1):
        same_sparse(ca.sparse.sum(c, dim=dim), torch.sparse.sum(t, dim=dim))
    assert_close(ca.sparse.sum(c, dim=(0, 1)), torch.sparse.sum(t, dim=(0, 1)))
    ca.sparse.sum(c, dim=0).to_dense().pow(2).sum().backward()
    torch.sparse.sum(t, dim=0).to_dense().pow(2).sum().backward()
    assert_close(cv.grad, tv.grad)


@pytest.mark.parametrize("dtype", DTYPES)
def test_dense_plus_sparse_and_sparse_arithmetic(dtype):
    (c, cv), (t, tv) = both_sparse(dtype, requires_grad=True)
    ce, te = ca.eye(3, 4, dtype=getattr(ca, dtype)), torch.eye(3, 4, dtype=getattr(torch, dtype))
    assert_close(ce + c, te + t)
    assert_close(ce - c, te - t)
    same_sparse(c * 2.0, t * 2.0)
    same_sparse(2.0 * c, 2.0 * t)
    same_sparse(c / 4.0, t / 4.0)
    same_sparse(-c, -t)
    same_sparse(c + c, t + t)
    (c2, _), (t2, _) = both_sparse(dtype, indices=np.array([[0, 2], [3, 3]]),
                                   values=np.array([1.0, 2.0]))
    same_sparse(c + c2, t + t2)  # two patterns: uncoalesced, all entries
    same_sparse(c.coalesce() + c2.coalesce(), t.coalesce() + t2.coalesce())  # coalesced
    same_sparse(c - c2, t - t2)
    same_sparse(c.t().coalesce(), t.t().coalesce())
    msgs = []
    for s, e in ((c, ce), (t, te)):
        with pytest.raises(RuntimeError) as err:
            s + e
        msgs.append(str(err.value))
    assert msgs[0] == msgs[1]
    # the gcn example: eye + an int64 adjacency is a dense float matrix
    (ci, _), (ti, _) = both_sparse("int64", values=np.ones(5, dtype=np.int64))
    assert_close(ca.eye(3, 4) + ci, torch.eye(3, 4) + ti)


def test_conversions_keep_the_pattern():
    (c, _), (t, _) = both_sparse("float32")
    same_sparse(c.double(), t.double())
    same_sparse(c.to(ca.float64), t.to(torch.float64))
    same_sparse(c.to("cpu"), t.to("cpu"))
    assert c.detach().requires_grad is False and c.cpu() is c


def test_unsupported_uses_name_themselves_and_the_docs():
    (c, _), _ = both_sparse("float32")
    with pytest.raises(AttributeError, match="'view' is not supported.*docs/python-api.md"):
        c.view(12)
    with pytest.raises(NotImplementedError, match="sparse \\* Tensor.*docs/python-api.md"):
        c * ca.ones(3, 4)
    with pytest.raises(NotImplementedError, match="layout"):
        ca.ones(2, 2).to_sparse(layout=ca.strided)
    with pytest.raises(NotImplementedError, match="reduce='amax'"):
        ca.sparse.mm(c, ca.ones(4, 2), reduce="amax")
    assert not hasattr(c, "storage")  # hasattr stays usable: an AttributeError
