"""The numpy side of cagrad.linalg: the forward values of the decompositions and solvers,
computed by numpy.linalg (LAPACK) on the tensors' data, with torch's error messages.

numpy raises one LinAlgError for a whole stack without saying which matrix failed or where,
so on failure the small unblocked LU / Cholesky loops here find, per matrix, what LAPACK's
info would say (the first zero pivot, the first leading minor that is not positive-definite):
torch's messages name both. They run only on the failure path.
"""

import numpy as np

from ._more_ops2 import _from_numpy


class LinAlgError(RuntimeError):
    """Raised by cagrad.linalg where torch raises torch.linalg.LinAlgError: a singular
    matrix in inv/solve, a matrix that is not positive-definite in cholesky."""

    __module__ = "cagrad.linalg"


def array(t):
    """The values of a tensor as a numpy array (no copy)."""
    return np.asarray(t)


def tensor(values, like):
    """A new tensor holding a copy of values, in the dtype of the tensor `like`."""
    dtype = np.float64 if like._dtype == 1 else np.float32
    return _from_numpy(np.array(values, dtype=dtype, order="C", copy=True))


def int_tensor(values):
    return _from_numpy(np.array(values, dtype=np.int64, order="C", copy=True))


def _batch_note(batch_shape, flat_index):
    """torch's "(Batch element i): " prefix: only for inputs with batch dims."""
    return f"(Batch element {flat_index}): " if batch_shape else ""


def _matrices(a):
    """a (..., m, n) as a C-contiguous float64 stack (b, m, n), a copy."""
    return np.array(a, dtype=np.float64, copy=True).reshape((-1,) + a.shape[-2:])


# ------------------------------------------------------------------------------ LU info
def _lu_info(m):
    """LAPACK getrf's info for one square matrix: the (1-based) first exactly zero pivot of
    LU with partial pivoting (largest magnitude, first on ties), 0 when none."""
    n = m.shape[0]
    info = 0
    for k in range(n):
        p = k + int(np.argmax(np.abs(m[k:, k])))
        if m[p, k] == 0:
            info = info or k + 1
            continue  # getrf goes on past a zero pivot, leaving the column as it is
        m[[k, p]] = m[[p, k]]
        m[k + 1:, k] /= m[k, k]
        m[k + 1:, k + 1:] -= np.outer(m[k + 1:, k], m[k, k + 1:])
    return info


def lu_infos(a):
    """getrf's info for each matrix of the stack a (..., n, n), as an int64 array (...)."""
    return np.array([_lu_info(m) for m in _matrices(a)], dtype=np.int64).reshape(a.shape[:-2])


def inv(a, check=True):
    """(inverse, info) of a (..., n, n). check: raise torch's LinAlgError for the first
    singular matrix; otherwise its inverse is NaN (undefined: info says it failed)."""
    try:
        with np.errstate(all="ignore"):
            return np.linalg.inv(a), np.zeros(a.shape[:-2], dtype=np.int64)
    except np.linalg.LinAlgError:
        pass
    infos = lu_infos(a)
    if check:
        bad = int(np.flatnonzero(infos.reshape(-1))[0])
        raise LinAlgError(f"linalg.inv: {_batch_note(a.shape[:-2], bad)}The diagonal element "
                          f"{infos.reshape(-1)[bad]} is zero, the inversion could not be "
                          f"completed because the input matrix is singular.")
    out = np.full(a.shape, np.nan, dtype=a.dtype)
    flat_a, flat_out = a.reshape((-1,) + a.shape[-2:]), out.reshape((-1,) + a.shape[-2:])
    for i, info in enumerate(infos.reshape(-1)):
        if info == 0:
            flat_out[i] = np.linalg.inv(flat_a[i])
    return out, infos


def solve(a, b, fname="torch.linalg.solve"):
    """x with a x = b for the stacks a (..., n, n) and b (..., n, k), batch dims
    broadcast; torch's LinAlgError naming the first singular matrix."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    try:
        with np.errstate(all="ignore"):
            return np.linalg.solve(a, b)
    except np.linalg.LinAlgError:
        infos = lu_infos(np.broadcast_to(a, batch + a.shape[-2:]))
    bad = int(np.flatnonzero(infos.reshape(-1))[0])
    raise LinAlgError(f"{fname}: {_batch_note(batch, bad)}The solver failed "
                      f"because the input matrix is singular.")


def solve_triangular(a, b, upper, unitriangular):
    """x with T x = b, T the upper or lower triangle of a (unit diagonal if unitriangular),
    by substitution, as LAPACK's trsm: a zero on the diagonal gives inf/nan, not an error
    (torch's behaviour). Batch dims broadcast."""
    batch = np.broadcast_shapes(a.shape[:-2], b.shape[:-2])
    a = np.broadcast_to(a, batch + a.shape[-2:])
    b = np.broadcast_to(b, batch + b.shape[-2:])
    x = np.zeros(b.shape, dtype=np.result_type(a, b))
    n = a.shape[-1]
    with np.errstate(all="ignore"):
        for i in (range(n - 1, -1, -1) if upper else range(n)):
            done = slice(i + 1, n) if upper else slice(0, i)
            row = b[..., i, :] - (a[..., i:i + 1, done] @ x[..., done, :])[..., 0, :]
            x[..., i, :] = row if unitriangular else row / a[..., i, i, None]
    return x


# ------------------------------------------------------------------------------ Cholesky
def _cholesky_partial(m):
    """(L, info) of one matrix by the unblocked left-looking Cholesky (potf2): info is the
    order of the first leading minor that is not positive-definite (0: none); L then holds
    the columns done so far and the failing pivot."""
    n = m.shape[0]
    low = np.zeros_like(m)
    for j in range(n):
        pivot = m[j, j] - low[j, :j] @ low[j, :j]
        if not pivot > 0:  # NaN fails too
            low[j, j] = pivot
            return low, j + 1
        low[j, j] = np.sqrt(pivot)
        low[j + 1:, j] = (m[j + 1:, j] - low[j + 1:, :j] @ low[j, :j]) / low[j, j]
    return low, 0


def cholesky(a, check=True):
    """(L, info): the lower Cholesky factor of each matrix of a (..., n, n), read from its
    lower triangle. check: torch's LinAlgError for the first matrix that is not
    positive-definite; otherwise its L is the partial factor (undefined in torch too)."""
    try:
        return np.linalg.cholesky(a), np.zeros(a.shape[:-2], dtype=np.int64)
    except np.linalg.LinAlgError:
        pass
    stack = _matrices(a)
    results = [_cholesky_partial(np.tril(m) + np.tril(m, -1).T) for m in stack]
    infos = np.array([info for _, info in results], dtype=np.int64)
    if check:
        bad = int(np.flatnonzero(infos)[0])
        raise LinAlgError(f"linalg.cholesky: {_batch_note(a.shape[:-2], bad)}The "
                          f"factorization could not be completed because the input is not "
                          f"positive-definite (the leading minor of order {infos[bad]} is not "
                          f"positive-definite).")
    low = np.stack([low for low, _ in results]).astype(a.dtype).reshape(a.shape)
    return low, infos.reshape(a.shape[:-2])


# ------------------------------------------------------------------------------ tolerances
def rank_tolerance(singular, m, n, atol, rtol, dtype):
    """torch's cutoff for pinv/matrix_rank: max(atol, rtol * largest singular value), with
    rtol defaulting to eps * max(m, n) unless atol > 0 is given alone. singular: (..., k)
    magnitudes; atol/rtol: None, numbers or arrays broadcasting to the batch dims."""
    eps = np.finfo(dtype).eps
    atol_given = atol is not None
    atol = np.asarray(0.0 if atol is None else atol, dtype=np.float64)
    if rtol is None:
        default = eps * max(m, n)
        rtol = np.where(atol > 0, 0.0, default) if atol_given else default
    rtol = np.asarray(rtol, dtype=np.float64)
    top = singular.max(axis=-1) if singular.shape[-1] else np.zeros(singular.shape[:-1])
    return np.maximum(atol, rtol * top)


def pinv_values(a, atol, rtol, hermitian):
    """The pseudo-inverse of each matrix of a, zeroing the singular values (eigenvalue
    magnitudes if hermitian) at or below torch's tolerance."""
    m, n = a.shape[-2:]
    if hermitian:
        w, v = np.linalg.eigh(a)
        tol = rank_tolerance(np.abs(w), m, n, atol, rtol, a.dtype)
        keep = np.abs(w) > tol[..., None]
        inv_w = np.where(keep, 1 / np.where(keep, w, 1), 0)
        return (v * inv_w[..., None, :]) @ np.swapaxes(v, -1, -2)
    u, s, vh = np.linalg.svd(a, full_matrices=False)
    tol = rank_tolerance(s, m, n, atol, rtol, a.dtype)
    keep = s > tol[..., None]
    inv_s = np.where(keep, 1 / np.where(keep, s, 1), 0)
    return np.swapaxes(vh, -1, -2) @ (inv_s[..., :, None] * np.swapaxes(u, -1, -2))


def rank_values(a, atol, rtol, hermitian):
    """The number of singular values (eigenvalue magnitudes) above torch's tolerance."""
    m, n = a.shape[-2:]
    if hermitian:
        s = np.abs(np.linalg.eigvalsh(a))
    else:
        s = np.linalg.svd(a, compute_uv=False)
    tol = rank_tolerance(s, m, n, atol, rtol, a.dtype)
    return (s > tol[..., None]).sum(axis=-1).astype(np.int64)
