"""cagrad.linalg's decompositions and solvers (inv, det, slogdet, solve, cholesky,
solve_triangular, eigh, qr, svd, pinv, matrix_rank, lstsq, matrix_power, multi_dot,
matrix_exp) and torch's top-level aliases, against torch 2.13.

Values and gradients are compared with torch on the same batched inputs in float32 and
float64, eagerly and under compiled autograd (no eager fallback); float64 gradients and
second derivatives are checked against finite differences (gradcheck / gradgradcheck);
errors are compared by type and message.
"""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch
from helpers import (assert_close, backward_checked, ca, compiled_ctx, needs_cagrad,
                     numeric_gradient, to_np)

pytestmark = needs_cagrad

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)
# LAPACK in float32 loses ~cond * 6e-8; the inputs below are well conditioned (cond < 50)
TOL = {"float32": dict(rtol=2e-4, atol=2e-4), "float64": dict(rtol=1e-8, atol=1e-10)}


# ------------------------------------------------------------------------------ inputs
def _rng(seed=0):
    return np.random.default_rng(seed)


def general(*shape, seed=0):
    """Well-conditioned square matrices: random plus n on the diagonal."""
    a = _rng(seed).standard_normal(shape)
    return a + shape[-1] * np.eye(shape[-1])


def noise(*shape, seed=0):
    return _rng(seed + 11).standard_normal(shape)


def spd(*shape, seed=0):
    a = _rng(seed).standard_normal(shape)
    return a @ np.swapaxes(a, -1, -2) + shape[-1] * np.eye(shape[-1])


def symmetric(*shape, seed=0):
    """Symmetric matrices with well-separated eigenvalues."""
    n = shape[-1]
    q, _ = np.linalg.qr(_rng(seed).standard_normal(shape))
    w = np.arange(1, n + 1) * 1.5 - 2.0
    return (q * w) @ np.swapaxes(q, -1, -2)


def rect(*shape, seed=0):
    """Rectangular matrices with well-separated singular values."""
    m, n = shape[-2:]
    k = min(m, n)
    u, _ = np.linalg.qr(_rng(seed).standard_normal(shape[:-1] + (k,)))
    v, _ = np.linalg.qr(_rng(seed + 1).standard_normal(shape[:-2] + (n, k)))
    s = np.arange(k, 0, -1) * 1.3 + 0.5
    return (u * s) @ np.swapaxes(v, -1, -2)


def flat(L, *outs):
    """The outputs as one 1-D tensor (check_against_torch compares one output)."""
    return L.cat([o.reshape(-1) for o in outs])


# ------------------------------------------------------------------------------ parity
def _cases():
    b = _rng(5).standard_normal((2, 3, 2))
    tri = general(2, 3, 3, seed=3)
    return {
        "inv": (lambda L, a: L.linalg.inv(a), [general(2, 3, 3)]),
        "inv_2d": (lambda L, a: L.linalg.inv(a), [general(4, 4)]),
        "inverse_top_level": (lambda L, a: L.inverse(a) + a.inverse(), [general(3, 3)]),
        "inv_ex": (lambda L, a: L.linalg.inv_ex(a).inverse, [general(2, 3, 3)]),
        "det": (lambda L, a: L.linalg.det(a), [general(2, 3, 3)]),
        "det_top_level": (lambda L, a: L.det(a) + a.det(), [general(3, 3)]),
        "slogdet": (lambda L, a: flat(L, *L.linalg.slogdet(a)),
                    [general(2, 3, 3) - 4 * np.eye(3)]),
        "logdet": (lambda L, a: L.logdet(a) + a.logdet(), [spd(2, 3, 3)]),
        "solve": (lambda L, a, x: L.linalg.solve(a, x), [general(2, 3, 3), b]),
        "solve_broadcast": (lambda L, a, x: L.linalg.solve(a, x), [general(3, 3), b]),
        "solve_vector": (lambda L, a, x: L.linalg.solve(a, x), [general(2, 3, 3), b[..., 0]]),
        "solve_vector_1d": (lambda L, a, x: L.linalg.solve(a, x), [general(2, 3, 3), b[0, :, 0]]),
        "solve_right": (lambda L, a, x: L.linalg.solve(a, x, left=False),
                        [general(2, 3, 3), np.swapaxes(b, -1, -2)]),
        "solve_triangular_lower": (
            lambda L, a, x: L.linalg.solve_triangular(a, x, upper=False), [tri, b]),
        "solve_triangular_upper_unit": (
            lambda L, a, x: L.linalg.solve_triangular(a, x, upper=True, unitriangular=True),
            [tri, b]),
        "solve_triangular_right": (
            lambda L, a, x: L.linalg.solve_triangular(a, x, upper=True, left=False),
            [tri, np.swapaxes(b, -1, -2)]),
        "cholesky": (lambda L, a: L.linalg.cholesky(a), [spd(2, 3, 3)]),
        "cholesky_upper": (lambda L, a: L.linalg.cholesky(a, upper=True), [spd(2, 3, 3)]),
        "cholesky_ex": (lambda L, a: L.linalg.cholesky_ex(a).L, [spd(4, 4)]),
        "cholesky_solve": (lambda L, x, f: L.cholesky_solve(x, f),
                           [b, np.linalg.cholesky(spd(2, 3, 3))]),
        "cholesky_solve_upper": (
            lambda L, x, f: L.cholesky_solve(x, f, upper=True),
            [b, np.swapaxes(np.linalg.cholesky(spd(2, 3, 3)), -1, -2)]),
        "cholesky_inverse": (lambda L, f: L.cholesky_inverse(f),
                             [np.linalg.cholesky(spd(2, 3, 3))]),
        # eigenvectors and singular vectors are defined up to sign: compare squares
        "eigh": (lambda L, a: flat(L, L.linalg.eigh(a)[0], L.linalg.eigh(a)[1] ** 2),
                 [symmetric(2, 4, 4)]),
        "eigh_upper": (lambda L, a: flat(L, *(o ** 2 for o in L.linalg.eigh(a, UPLO="u"))),
                       [symmetric(3, 3)]),
        "eigvalsh": (lambda L, a: L.linalg.eigvalsh(a), [symmetric(2, 4, 4)]),
        "svd_tall": (lambda L, a: flat(L, *(o ** 2 for o in L.linalg.svd(a, False))),
                     [rect(2, 5, 3)]),
        "svd_wide": (lambda L, a: flat(L, *(o ** 2 for o in L.linalg.svd(a, False))),
                     [rect(2, 3, 5)]),
        "svd_products": (lambda L, a: flat(L, *_svd_products(L, a)), [rect(4, 3)]),
        "svd_full": (lambda L, a: flat(L, *(o[..., :3] ** 2 for o in
                                            L.linalg.svd(a)[:2])), [rect(2, 5, 3)]),
        "svdvals": (lambda L, a: L.linalg.svdvals(a), [rect(2, 5, 3)]),
        "qr_tall": (lambda L, a: flat(L, *L.linalg.qr(a)), [rect(2, 5, 3)]),
        "qr_square_complete": (lambda L, a: flat(L, *L.linalg.qr(a, "complete")),
                               [general(4, 4)]),
        "qr_wide": (lambda L, a: flat(L, *L.linalg.qr(a)), [rect(2, 3, 5)]),
        "pinv_tall": (lambda L, a: L.linalg.pinv(a), [rect(2, 5, 3)]),
        "pinv_wide": (lambda L, a: L.linalg.pinv(a), [rect(3, 5)]),
        "pinv_hermitian": (lambda L, a: L.linalg.pinv(a, hermitian=True), [symmetric(4, 4)]),
        "pinverse_method": (lambda L, a: a.pinverse(), [rect(4, 3)]),
        "lstsq": (lambda L, a, x: L.linalg.lstsq(a, x).solution,
                  [rect(2, 5, 3), _rng(6).standard_normal((2, 5, 2))]),
        "lstsq_broadcast": (lambda L, a, x: L.linalg.lstsq(a, x).solution,
                            [rect(2, 5, 3), _rng(6).standard_normal((1, 5, 2))]),
        "lstsq_vector": (lambda L, a, x: L.linalg.lstsq(a, x, driver="gelsd").solution,
                         [rect(2, 5, 3), _rng(6).standard_normal((2, 5))]),
        "matrix_power_3": (lambda L, a: L.linalg.matrix_power(a, 3), [general(2, 3, 3) / 3]),
        "matrix_power_neg": (lambda L, a: L.matrix_power(a, -2), [general(2, 3, 3) / 3]),
        "matrix_power_method": (lambda L, a: a.matrix_power(5), [general(3, 3) / 3]),
        "multi_dot": (lambda L, x, y, z: L.linalg.multi_dot([x, y, z]),
                      [_rng(1).standard_normal(3), _rng(2).standard_normal((3, 4)),
                       _rng(3).standard_normal((4, 2))]),
        "multi_dot_vectors": (lambda L, x, y: L.linalg.multi_dot([x, y]),
                              [_rng(1).standard_normal(3), _rng(2).standard_normal(3)]),
        "matrix_exp": (lambda L, a: L.linalg.matrix_exp(a), [_rng(4).standard_normal((2, 3, 3))]),
        "matrix_exp_large": (lambda L, a: L.matrix_exp(a), [3 * _rng(4).standard_normal((3, 3))]),
        "solve_ex": (lambda L, a, x: L.linalg.solve_ex(a, x).result, [general(2, 3, 3), b]),
        "cond": (lambda L, a: L.linalg.cond(a), [rect(2, 5, 3)]),
        "cond_neg2": (lambda L, a: L.linalg.cond(a, -2), [rect(3, 4)]),
        # torch's backward of cond for these norms fails (it changes inv_ex's output in
        # place): values only here, cagrad's gradient is checked by gradcheck below
        "cond_fro": (lambda L, a: L.linalg.cond(a, "fro"), [general(2, 3, 3)], []),
        "cond_1": (lambda L, a: L.linalg.cond(a, 1), [general(3, 3)], []),
        "linalg_diagonal": (lambda L, a: L.linalg.diagonal(a, offset=1), [general(2, 3, 3)]),
        "matrix_norm_nuc": (lambda L, a: L.linalg.matrix_norm(a, "nuc"), [rect(2, 5, 3)]),
        "matrix_norm_2": (lambda L, a: L.linalg.matrix_norm(a, 2, dim=(0, 2), keepdim=True),
                          [np.moveaxis(rect(2, 5, 3), 0, 1)]),
        "matrix_norm_neg2": (lambda L, a: L.linalg.norm(a, -2), [rect(5, 3)]),
    }


def _svd_products(L, a):
    u, s, vh = L.linalg.svd(a, full_matrices=False)
    return u @ L.diag_embed(s) @ vh, u @ vh, u[:, :2] * vh[:2, 0]


CASES = _cases()


@pytest.mark.parametrize("name", sorted(CASES))
@DTYPE
@COMPILED
def test_values_and_gradients_match_torch(name, dtype, compiled):
    fn, arrays, *needs_grad = CASES[name]
    check_against_torch(fn, arrays, dtype, compiled=compiled, tol=TOL, msg=name,
                        needs_grad=needs_grad[0] if needs_grad else None)


# ------------------------------------------------------------------------------ finite differences
def _sym(L, x):
    return (x + x.mT) / 2


GRADCHECK = {
    "inv": (lambda a: ca.linalg.inv(a), [general(2, 3, 3)]),
    "det": (lambda a: ca.linalg.det(a), [general(2, 3, 3)]),
    "slogdet": (lambda a: ca.linalg.slogdet(a)[1], [general(3, 3) - 4 * np.eye(3)]),
    "solve": (lambda a, b: ca.linalg.solve(a, b), [general(2, 3, 3), noise(3, 2)]),
    "solve_right": (lambda a, b: ca.linalg.solve(a, b, left=False),
                    [general(3, 3), noise(2, 2, 3)]),
    "cholesky": (lambda a: ca.linalg.cholesky(_sym(ca, a)), [spd(2, 3, 3)]),
    "solve_triangular": (lambda a, b: ca.linalg.solve_triangular(a, b, upper=True),
                         [general(2, 3, 3), noise(3, 2)]),
    "solve_triangular_unit_right": (
        lambda a, b: ca.linalg.solve_triangular(a, b, upper=False, left=False,
                                                unitriangular=True),
        [general(3, 3), noise(2, 3)]),
    "eigh": (lambda a: [o ** 2 for o in ca.linalg.eigh(_sym(ca, a))], [symmetric(3, 3)]),
    "svd": (lambda a: [o ** 2 for o in ca.linalg.svd(a, False)], [rect(4, 3)]),
    "svd_wide": (lambda a: [o ** 2 for o in ca.linalg.svd(a, False)], [rect(2, 4)]),
    "qr": (lambda a: list(ca.linalg.qr(a)), [rect(4, 3)]),
    "qr_wide": (lambda a: list(ca.linalg.qr(a)), [rect(2, 4)]),
    "pinv": (lambda a: ca.linalg.pinv(a), [rect(4, 3)]),
    # torch's gradient is that of L L^T with the whole L; the forward reads one triangle
    "cholesky_solve": (lambda b, f: ca.cholesky_solve(b, f.tril()),
                       [noise(3, 2), np.linalg.cholesky(spd(3, 3))]),
    "matrix_exp": (lambda a: ca.linalg.matrix_exp(a), [_rng(4).standard_normal((3, 3))]),
    "cond_fro": (lambda a: ca.linalg.cond(a, "fro"), [general(2, 3, 3)]),
    "cond_2": (lambda a: ca.linalg.cond(a), [rect(4, 3)]),
    "matrix_norm_nuc": (lambda a: ca.linalg.matrix_norm(a, "nuc"), [rect(4, 3)]),
    "lstsq": (lambda a, b: ca.linalg.lstsq(a, b).solution, [rect(5, 3), noise(5, 2)]),
    "solve_ex": (lambda a, b: ca.linalg.solve_ex(a, b).result, [general(2, 3, 3), noise(3)]),
}


def _f64(arrays):
    return [ca.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]


def _outputs(fn):
    # gradcheck takes a tuple of outputs
    def run(*xs):
        out = fn(*xs)
        return tuple(out) if isinstance(out, list) else out
    return run


@pytest.mark.parametrize("name", sorted(GRADCHECK))
def test_gradcheck_float64(name):
    fn, arrays = GRADCHECK[name]
    assert ca.autograd.gradcheck(_outputs(fn), tuple(_f64(arrays)), eps=1e-6, atol=1e-6)


@pytest.mark.parametrize("name", ["inv", "det", "slogdet", "solve", "solve_right", "cholesky",
                                  "solve_triangular", "solve_triangular_unit_right", "eigh",
                                  "svd", "qr", "pinv", "cholesky_solve"])
def test_gradgradcheck_float64(name):
    fn, arrays = GRADCHECK[name]
    assert ca.autograd.gradgradcheck(_outputs(fn), tuple(_f64(arrays)), eps=1e-6, atol=1e-5)


@pytest.mark.parametrize("name", ["inv", "det", "solve", "cholesky", "solve_triangular"])
def test_second_derivative_matches_torch(name):
    """d/dA of sum(g * dL/dA) (create_graph=True) equals torch's, also with the second
    backward compiled."""
    fn, arrays = GRADCHECK[name]
    results = {}
    for L, compiled in ((torch, False), (ca, False), (ca, True)):
        xs = [L.tensor(np.asarray(a, dtype=np.float64), requires_grad=True) for a in arrays]
        f = fn if L is ca else _TORCH_FNS[name]
        out = f(*xs)
        weight = L.tensor(np.random.default_rng(3).standard_normal(tuple(out.shape)))
        grads = L.autograd.grad((out * weight).sum(), xs, create_graph=True)
        second = sum((gr * gr).sum() for gr in grads)
        with compiled_ctx(compiled):
            second.backward()
        results[(L.__name__, compiled)] = [x.grad for x in xs]
    for key in (("cagrad", False), ("cagrad", True)):
        for c, t in zip(results[key], results[("torch", False)]):
            assert_close(c, t, rtol=1e-8, atol=1e-10, msg=f"{name} {key}")


_TORCH_FNS = {
    "inv": lambda a: torch.linalg.inv(a),
    "det": lambda a: torch.linalg.det(a),
    "solve": lambda a, b: torch.linalg.solve(a, b),
    "cholesky": lambda a: torch.linalg.cholesky((a + a.mT) / 2),
    "solve_triangular": lambda a, b: torch.linalg.solve_triangular(a, b, upper=True),
}


# ------------------------------------------------------------------------------ compiled
@COMPILED
def test_compiled_backward_is_cached_and_matches_eager(compiled):
    """A second compiled backward on new values (a cache hit) still gives eager's
    gradients: the traced inverse backward and the solve call-out use the new data."""
    results = []
    for seed in (0, 1):
        a = ca.tensor(general(2, 3, 3, seed=seed), requires_grad=True)
        b = ca.tensor(_rng(seed).standard_normal((2, 3, 2)), requires_grad=True)
        loss = (ca.linalg.solve(a, b) ** 2).sum() + ca.linalg.inv(a).sum() \
            + ca.linalg.det(a).sum()
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
        ta = torch.tensor(general(2, 3, 3, seed=seed), requires_grad=True)
        tb = torch.tensor(_rng(seed).standard_normal((2, 3, 2)), requires_grad=True)
        tloss = (torch.linalg.solve(ta, tb) ** 2).sum() + torch.linalg.inv(ta).sum() \
            + torch.linalg.det(ta).sum()
        tloss.backward()
        assert_close(a.grad, ta.grad, **TOL["float64"])
        assert_close(b.grad, tb.grad, **TOL["float64"])
        results.append(a.grad)
    assert not np.allclose(to_np(results[0]), to_np(results[1]))


@pytest.mark.parametrize("name,traced", [("inv", True), ("eigh", True), ("svd", True),
                                         ("pinv", True), ("solve", False), ("det", False)])
def test_backwards_of_plain_ops_are_traced_into_the_compiled_graph(name, traced):
    """inv/eigh/svd/pinv backwards are only matmuls and elementwise ops on saved tensors:
    compiled autograd traces them; a backward that solves is a call-out (still exact)."""
    fn = GRADCHECK[name][0]
    arrays = GRADCHECK[name][1]
    xs = _f64(arrays)
    out = _outputs(fn)(*xs)
    loss = sum((o ** 2).sum() for o in (out if isinstance(out, tuple) else (out,)))
    before = dict(ca.compiled_autograd.counters)
    with compiled_ctx(True):
        backward_checked(loss, True)
    after = dict(ca.compiled_autograd.counters)
    key = "custom_traced" if traced else "custom_callouts"
    assert after[key] > before[key], (before, after)


# ------------------------------------------------------------------------------ results
def test_named_tuples_have_torch_fields():
    a = ca.tensor(spd(3, 3))
    assert ca.linalg.eigh(a)._fields == ("eigenvalues", "eigenvectors")
    assert ca.linalg.svd(a)._fields == ("U", "S", "Vh")
    assert ca.linalg.qr(a)._fields == ("Q", "R")
    assert ca.linalg.slogdet(a)._fields == ("sign", "logabsdet")
    assert ca.slogdet(a)._fields == ("sign", "logabsdet")
    assert ca.linalg.inv_ex(a)._fields == ("inverse", "info")
    assert ca.linalg.solve_ex(a, a)._fields == ("result", "info")
    assert ca.linalg.cholesky_ex(a)._fields == ("L", "info")
    assert ca.linalg.lstsq(a, a)._fields == ("solution", "residuals", "rank",
                                             "singular_values")


@DTYPE
def test_svd_full_matrices_and_qr_modes_shapes(dtype):
    a = rect(2, 5, 3).astype(dtype)
    for L in (ca, torch):
        u, s, vh = L.linalg.svd(L.tensor(a))
        assert tuple(u.shape) == (2, 5, 5) and tuple(vh.shape) == (2, 3, 3)
        q, r = L.linalg.qr(L.tensor(a), mode="complete")
        assert tuple(q.shape) == (2, 5, 5) and tuple(r.shape) == (2, 5, 3)
        q, r = L.linalg.qr(L.tensor(a), mode="r")
        assert tuple(q.shape) == (0,) and tuple(r.shape) == (2, 3, 3)
    c, t = ca.linalg.svd(ca.tensor(a)), torch.linalg.svd(torch.tensor(a))
    # the full U: orthogonal, its first columns those of the reduced one (up to sign)
    u = to_np(c.U)
    np.testing.assert_allclose(np.swapaxes(u, -1, -2) @ u, np.broadcast_to(np.eye(5), u.shape),
                               atol=1e-5)
    assert_close(c.S, t.S, **TOL[dtype])
    assert_close(ca.linalg.qr(ca.tensor(a), "r").R, torch.linalg.qr(torch.tensor(a), "r").R,
                 **TOL[dtype])


@DTYPE
def test_eigenvectors_match_up_to_sign(dtype):
    a = symmetric(2, 4, 4).astype(dtype)
    c, t = ca.linalg.eigh(ca.tensor(a)), torch.linalg.eigh(torch.tensor(a))
    vc, vt = to_np(c.eigenvectors), to_np(t.eigenvectors)
    signs = np.sign((vc * vt).sum(-2, keepdims=True))
    np.testing.assert_allclose(vc * signs, vt, **TOL[dtype])
    assert c.eigenvalues.dtype == ca.float32 if dtype == "float32" else ca.float64


def test_inv_ex_and_cholesky_ex_report_failures():
    singular = np.stack([np.eye(3), [[1.0, 2, 3], [2, 4, 6], [1, 0, 1]]])
    indefinite = np.stack([spd(3, 3), [[1.0, 2, 0], [2, 1, 0], [0, 0, 1]]])
    for L in (ca, torch):
        inv = L.linalg.inv_ex(L.tensor(singular))
        assert to_np(inv.info).tolist() == [0, 3]
        np.testing.assert_array_equal(to_np(inv.inverse)[0], np.eye(3))
        chol = L.linalg.cholesky_ex(L.tensor(indefinite))
        assert to_np(chol.info).tolist() == [0, 2]
        np.testing.assert_allclose(to_np(chol.L)[0], np.linalg.cholesky(spd(3, 3)), rtol=1e-6)
        assert to_np(L.linalg.cholesky_ex(L.tensor(spd(3, 3))).info).tolist() == 0
    assert ca.linalg.inv_ex(ca.tensor(singular)).info.dtype == ca.int64  # torch: int32
    with pytest.raises(ca.linalg.LinAlgError, match="Batch element 1"):
        ca.linalg.inv_ex(ca.tensor(singular), check_errors=True)
    with pytest.raises(ca.linalg.LinAlgError, match="order 2"):
        ca.linalg.cholesky_ex(ca.tensor(indefinite), check_errors=True)


@pytest.mark.parametrize("driver", [None, "gels", "gelsy", "gelsd", "gelss"])
@DTYPE
def test_lstsq_fields_follow_the_driver(driver, dtype):
    a = rect(2, 5, 3).astype(dtype)
    b = _rng(9).standard_normal((2, 5, 4)).astype(dtype)
    c = ca.linalg.lstsq(ca.tensor(a), ca.tensor(b), driver=driver)
    t = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
    for field in ("solution", "residuals", "singular_values"):
        assert_close(getattr(c, field), getattr(t, field), **TOL[dtype], msg=field)
    assert_close(c.rank, t.rank, msg="rank")


def test_lstsq_wide_and_rank_deficient():
    wide = rect(3, 5)
    low_rank = rect(5, 2) @ _rng(2).standard_normal((2, 3))
    for a in (wide, low_rank):
        b = _rng(1).standard_normal((a.shape[0], 2))
        for driver in (None, "gelsd"):
            c = ca.linalg.lstsq(ca.tensor(a), ca.tensor(b), driver=driver)
            t = torch.linalg.lstsq(torch.tensor(a), torch.tensor(b), driver=driver)
            assert_close(c.solution, t.solution, **TOL["float64"])
            assert_close(c.residuals, t.residuals)
            assert_close(c.rank, t.rank)


@DTYPE
def test_matrix_rank_and_pinv_tolerances(dtype):
    low_rank = (rect(2, 5, 2) @ _rng(2).standard_normal((2, 2, 4))).astype(dtype)
    sym = symmetric(4, 4).astype(dtype)
    # the eigenvalues of sym are -0.5, 1, 2.5, 4: no cutoff falls on one of them
    for kwargs in ({}, {"atol": 1.2}, {"rtol": 0.3}, {"atol": 0.6, "rtol": 0.1}):
        assert_close(ca.linalg.matrix_rank(ca.tensor(low_rank), **kwargs),
                     torch.linalg.matrix_rank(torch.tensor(low_rank), **kwargs), msg=str(kwargs))
        assert_close(ca.linalg.matrix_rank(ca.tensor(sym), hermitian=True, **kwargs),
                     torch.linalg.matrix_rank(torch.tensor(sym), hermitian=True, **kwargs))
        assert_close(ca.linalg.pinv(ca.tensor(low_rank), **kwargs),
                     torch.linalg.pinv(torch.tensor(low_rank), **kwargs), **TOL[dtype])
        assert_close(ca.linalg.pinv(ca.tensor(sym), hermitian=True, **kwargs),
                     torch.linalg.pinv(torch.tensor(sym), hermitian=True, **kwargs),
                     **TOL[dtype])
    assert_close(ca.linalg.matrix_rank(ca.tensor(low_rank), 0.5),  # old positional tol
                 torch.linalg.matrix_rank(torch.tensor(low_rank), 0.5))
    assert_close(ca.linalg.pinv(ca.tensor(low_rank), 0.2),  # old positional rcond
                 torch.linalg.pinv(torch.tensor(low_rank), 0.2), **TOL[dtype])


def test_matrix_power_zero_and_logdet_signs():
    a = general(2, 3, 3)
    assert_close(ca.linalg.matrix_power(ca.tensor(a), 0),
                 torch.linalg.matrix_power(torch.tensor(a), 0))
    negative = np.diag([-1.0, 2.0, 3.0])
    singular = np.zeros((3, 3))
    for m in (negative, singular):
        assert_close(ca.logdet(ca.tensor(m)), torch.logdet(torch.tensor(m)))
        assert_close(ca.det(ca.tensor(m)), torch.det(torch.tensor(m)))
        c, t = ca.linalg.slogdet(ca.tensor(m)), torch.linalg.slogdet(torch.tensor(m))
        assert_close(c.sign, t.sign)
        assert_close(c.logabsdet, t.logabsdet)


def test_solve_ex_and_cond_of_singular_matrices():
    a = np.stack([2 * np.eye(2), [[1.0, 2], [2, 4]]])
    for L in (ca, torch):
        r = L.linalg.solve_ex(L.tensor(a), L.ones(2, dtype=L.float64))
        assert to_np(r.info).tolist() == [0, 2]
        np.testing.assert_allclose(to_np(r.result)[0], [0.5, 0.5])
        assert not np.isfinite(to_np(r.result)[1]).any()  # torch: inf, cagrad: nan
        np.testing.assert_allclose(to_np(L.linalg.cond(L.tensor(a), 1)), [1.0, np.inf])


def test_int64_matrix_power_and_multi_dot_are_exact():
    for n in (0, 1, 3):
        assert_close(ca.linalg.matrix_power(ca.arange(8).reshape(2, 2, 2), n),
                     torch.linalg.matrix_power(torch.arange(8).reshape(2, 2, 2), n))
    assert_close(ca.linalg.multi_dot([ca.arange(3), ca.arange(6).reshape(3, 2)]),
                 torch.linalg.multi_dot([torch.arange(3), torch.arange(6).reshape(3, 2)]))


def test_matrix_power_one_is_a_new_tensor():
    a = ca.tensor(general(3, 3))
    p = ca.linalg.matrix_power(a, 1)
    assert p is not a and p.data_ptr() != a.data_ptr()
    assert_close(p, a)


def test_solve_triangular_zero_diagonal_gives_inf_like_torch():
    a = np.triu(general(3, 3))
    a[1, 1] = 0.0
    b = np.ones((3, 2))
    c = ca.linalg.solve_triangular(ca.tensor(a), ca.tensor(b), upper=True)
    t = torch.linalg.solve_triangular(torch.tensor(a), torch.tensor(b), upper=True)
    np.testing.assert_array_equal(np.isfinite(to_np(c)), np.isfinite(to_np(t)))


def test_solve_triangular_computes_in_the_dtype_of_a():
    a, b = general(3, 3).astype(np.float32), general(3, 3, seed=1)
    for x, y in ((a, b), (b, a)):
        c = ca.linalg.solve_triangular(ca.tensor(x), ca.tensor(y), upper=False)
        t = torch.linalg.solve_triangular(torch.tensor(x), torch.tensor(y), upper=False)
        assert_close(c, t, **TOL["float32"])


@COMPILED
def test_det_gradient_at_singular_matrices_is_the_adjugate(compiled):
    """At an exactly singular matrix (det computes 0) the gradient is adj(A)^T, what finite
    differences give. torch 2.13 returns zeros there for a rank n - 1 matrix (whose
    adjugate is not zero), so the reference here is the finite difference."""
    rank_one = np.outer([1.0, 2, 3], [2.0, -1, 1])
    # rank n - 1 (row 3 is row 1 - row 2), with pivots and multipliers that are binary
    # fractions: its elimination is exact, so det computes 0 with any LAPACK's kernels (a
    # random rank-two product gave -2e-16 with OpenBLAS's Haswell kernels)
    rank_two = np.array([[8.0, 1, 2], [4, 3, 1], [4, -2, 1]])
    assert np.linalg.det(rank_two) == 0.0
    a = np.stack([rank_one, rank_two, general(3, 3)])
    c = ca.tensor(a, requires_grad=True)
    with compiled_ctx(compiled):
        backward_checked(ca.linalg.det(c).sum(), compiled)
    expected = np.stack([numeric_gradient(np.linalg.det, m) for m in a])
    np.testing.assert_allclose(to_np(c.grad), expected, rtol=1e-6, atol=1e-8)
    assert np.abs(to_np(c.grad)[1]).max() > 1  # not the zeros torch gives


def test_det_double_backward_at_a_singular_matrix_is_an_error_not_a_wrong_value():
    a = ca.tensor([[1.0, 2.0], [2.0, 4.0]], requires_grad=True)
    with pytest.raises(NotImplementedError, match="docs/python-api.md"):
        ca.autograd.grad(ca.linalg.det(a), a, create_graph=True)


def test_linalg_error_is_a_runtime_error():
    assert issubclass(ca.linalg.LinAlgError, RuntimeError)
    with pytest.raises(RuntimeError):
        ca.linalg.inv(ca.zeros(2, 2))


def test_unsupported_names_point_to_the_docs():
    for name in ("eig", "lu_factor", "householder_product"):
        with pytest.raises(AttributeError, match="docs/python-api.md"):
            getattr(ca.linalg, name)


# ------------------------------------------------------------------------------ errors
ERRORS = {
    "inv_singular": lambda L: L.linalg.inv(L.tensor([[1.0, 2], [2, 4]])),
    "inv_singular_batch": lambda L: L.linalg.inv(L.stack([L.eye(2),
                                                          L.tensor([[1.0, 2], [2, 4]])])),
    "inv_singular_batch_of_one": lambda L: L.linalg.inv(L.ones(1, 2, 2)),
    "inv_not_square": lambda L: L.linalg.inv(L.ones(2, 3)),
    "inv_1d": lambda L: L.linalg.inv(L.ones(3)),
    "inv_long": lambda L: L.linalg.inv(L.ones(2, 2, dtype=L.int64)),
    "inverse_singular": lambda L: L.inverse(L.zeros(3, 3)),
    "det_not_square": lambda L: L.linalg.det(L.ones(2, 3)),
    "slogdet_1d": lambda L: L.linalg.slogdet(L.ones(3)),
    "logdet_1d": lambda L: L.logdet(L.ones(2)),
    "solve_singular": lambda L: L.linalg.solve(L.tensor([[1.0, 2], [2, 4]]), L.ones(2)),
    "solve_singular_batch": lambda L: L.linalg.solve(
        L.stack([L.eye(2), L.tensor([[1.0, 2], [2, 4]])]), L.ones(2)),
    "solve_shapes": lambda L: L.linalg.solve(L.eye(2), L.ones(3)),
    "solve_shapes_right": lambda L: L.linalg.solve(L.eye(2), L.ones(2, 1), left=False),
    "solve_vector_right": lambda L: L.linalg.solve(L.eye(2), L.ones(2), left=False),
    "solve_dtypes": lambda L: L.linalg.solve(L.eye(2), L.ones(2, 1, dtype=L.float64)),
    "solve_long": lambda L: L.linalg.solve(L.ones(2, 2, dtype=L.int64), L.ones(2, 1)),
    "solve_batches": lambda L: L.linalg.solve(L.ones(3, 2, 2), L.ones(2, 2, 1)),
    "solve_batches_2": lambda L: L.linalg.solve(L.ones(4, 2, 2), L.ones(2, 3, 2, 1)),
    "solve_vector_right_1x1": lambda L: L.linalg.solve(L.eye(1), L.ones(1), left=False),
    "cholesky_not_pd": lambda L: L.linalg.cholesky(L.tensor([[1.0, 2], [2, 1]])),
    "cholesky_not_pd_batch": lambda L: L.linalg.cholesky(
        L.stack([L.eye(2), L.tensor([[1.0, 2], [2, 1]])])),
    "cholesky_upper_not_pd": lambda L: L.linalg.cholesky(L.tensor([[1.0, 2], [2, 1]]),
                                                         upper=True),
    "cholesky_not_square": lambda L: L.linalg.cholesky(L.ones(2, 3)),
    "solve_triangular_no_upper": lambda L: L.linalg.solve_triangular(L.eye(2), L.ones(2, 1)),
    "solve_triangular_b_1d": lambda L: L.linalg.solve_triangular(L.eye(2), L.ones(2),
                                                                 upper=True),
    "solve_triangular_shapes": lambda L: L.linalg.solve_triangular(L.eye(2), L.ones(3, 1),
                                                                   upper=True),
    "solve_triangular_a_not_square": lambda L: L.linalg.solve_triangular(
        L.ones(2, 3), L.ones(2, 1), upper=True),
    "eigh_not_square": lambda L: L.linalg.eigh(L.ones(2, 3)),
    "eigh_uplo": lambda L: L.linalg.eigh(L.eye(2), UPLO="X"),
    "eigvalsh_uplo": lambda L: L.linalg.eigvalsh(L.eye(2), UPLO="x"),
    "qr_mode": lambda L: L.linalg.qr(L.eye(2), mode="x"),
    "qr_1d": lambda L: L.linalg.qr(L.ones(2)),
    "svd_driver": lambda L: L.linalg.svd(L.eye(2), driver="gesvd"),
    "svd_1d": lambda L: L.linalg.svd(L.ones(2)),
    "pinv_1d": lambda L: L.linalg.pinv(L.ones(2)),
    "matrix_rank_1d": lambda L: L.linalg.matrix_rank(L.ones(2)),
    "lstsq_rows": lambda L: L.linalg.lstsq(L.ones(3, 2), L.ones(4, 1)),
    "lstsq_dtypes": lambda L: L.linalg.lstsq(L.ones(3, 2), L.ones(3, 1, dtype=L.float64)),
    "lstsq_dims": lambda L: L.linalg.lstsq(L.ones(3, 2), L.ones(2, 3, 1)),
    "lstsq_driver": lambda L: L.linalg.lstsq(L.ones(3, 2), L.ones(3, 1), driver="foo"),
    "matrix_power_not_square": lambda L: L.linalg.matrix_power(L.ones(2, 3), 2),
    "matrix_power_float": lambda L: L.linalg.matrix_power(L.eye(2), 2.0),
    "matrix_power_singular": lambda L: L.linalg.matrix_power(L.ones(2, 2), -1),
    "multi_dot_one": lambda L: L.linalg.multi_dot([L.ones(2)]),
    "multi_dot_first": lambda L: L.linalg.multi_dot([L.ones(2, 3, 3), L.ones(3, 3)]),
    "multi_dot_middle": lambda L: L.linalg.multi_dot([L.ones(3, 3), L.ones(2, 3, 3),
                                                      L.ones(3, 3)]),
    "multi_dot_last": lambda L: L.linalg.multi_dot([L.ones(3, 3), L.ones(3, 3, 2)]),
    "multi_dot_shapes": lambda L: L.linalg.multi_dot([L.ones(3, 3), L.ones(2, 3)]),
    "multi_dot_dtypes": lambda L: L.linalg.multi_dot([L.ones(3, 3),
                                                      L.ones(3, dtype=L.float64)]),
    "solve_ex_check_errors": lambda L: L.linalg.solve_ex(
        L.stack([L.eye(2), L.zeros(2, 2)]), L.ones(2), check_errors=True),
    "cond_norm_type": lambda L: L.linalg.cond(L.eye(2), 3),
    "cond_not_square": lambda L: L.linalg.cond(L.ones(2, 3), 1),
    "rank_long": lambda L: L.linalg.matrix_rank(L.ones(2, 2, dtype=L.int64)),
    "rank_hermitian_not_square": lambda L: L.linalg.matrix_rank(L.ones(2, 3), hermitian=True),
    "pinv_hermitian_not_square": lambda L: L.linalg.pinv(L.ones(2, 3), hermitian=True),
    "svdvals_long": lambda L: L.linalg.svdvals(L.ones(2, 2, dtype=L.int64)),
    "eigh_long": lambda L: L.linalg.eigh(L.ones(2, 2, dtype=L.int64)),
    "eigvalsh_long": lambda L: L.linalg.eigvalsh(L.ones(2, 2, dtype=L.int64)),
    "solve_triangular_long": lambda L: L.linalg.solve_triangular(
        L.ones(2, 2, dtype=L.int64), L.ones(2, 2, dtype=L.int64), upper=True),
    "lstsq_long": lambda L: L.linalg.lstsq(L.ones(2, 2, dtype=L.int64),
                                           L.ones(2, 2, dtype=L.int64)),
    "matrix_power_int_negative": lambda L: L.linalg.matrix_power(
        L.ones(2, 2, dtype=L.int64), -1),
    "cholesky_inverse_not_square": lambda L: L.cholesky_inverse(L.ones(2, 3)),
    "cholesky_solve_dtypes": lambda L: L.cholesky_solve(L.ones(2, 1),
                                                        L.eye(2, dtype=L.float64)),
    "inv_ex_not_square": lambda L: L.linalg.inv_ex(L.ones(2, 3)),
    "cholesky_ex_not_square": lambda L: L.linalg.cholesky_ex(L.ones(2, 3)),
    "cond_1d": lambda L: L.linalg.cond(L.ones(3)),
    "det_1d": lambda L: L.linalg.det(L.ones(3)),
    "cholesky_solve_shapes": lambda L: L.cholesky_solve(L.ones(2, 1), L.ones(3, 3)),
    "qr_r_backward": lambda L: L.linalg.qr(L.eye(3).requires_grad_(), mode="r")[1].sum()
    .backward(),
    "qr_complete_tall_backward": lambda L: L.linalg.qr(
        L.ones(3, 2).requires_grad_(), mode="complete")[0].sum().backward(),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    make = ERRORS[name]
    got, want = None, None
    try:
        make(ca)
    except Exception as e:  # noqa: BLE001 - compared with torch's below
        got = e
    try:
        make(torch)
    except Exception as e:  # noqa: BLE001
        want = e
    assert want is not None and got is not None, (got, want)
    assert str(got) == str(want)
    if isinstance(want, torch.linalg.LinAlgError):
        assert isinstance(got, ca.linalg.LinAlgError)
    else:
        assert type(got).__name__ == type(want).__name__


# ------------------------------------------------------------------------------ format
def test_format_of_a_0d_tensor_is_that_of_its_number():
    for L in (ca, torch):
        assert f"{L.tensor(1.0)}" == "1.0"
        assert format(L.tensor(3), "") == "3"
        assert f"{L.tensor(True)}" == "True"
        assert f"{L.tensor(2.5, requires_grad=True)}" == "2.5"
        assert f"{L.tensor(2.5):.3f}" == "2.500"
        assert f"{L.tensor([1.0, 2.0])}" == "tensor([1., 2.])"
    assert f"{ca.tensor(0.1, dtype=ca.float64)}" == f"{torch.tensor(0.1, dtype=torch.float64)}"
