"""The differentiable primitives of cagrad.linalg, as cagrad.autograd.Functions.

Each forward computes its value with numpy.linalg (_linalg_kernels.py). Each backward is
the textbook matrix-calculus derivative written with differentiable cagrad ops only
(matmul, transposes, tril/triu, where) and these Functions themselves for the solves its
formula needs, so a double backward (create_graph=True) differentiates it again, and
compiled autograd records it: backwards made of plain ops are traced into the compiled
graph, those that call a solve are call-out steps of it (their forwards read data).

References for the formulas: M. Giles, "An extended collection of matrix derivative
results for forward and reverse mode AD" (2008) for inv, det, solve; I. Murray,
"Differentiation of the Cholesky decomposition" (2016); J. Townsend, "Differentiating the
singular value decomposition" (2016) for svd and eigh; H.-J. Liao et al., "Differentiable
programming tensor networks" (2019) for qr; Golub & Pereyra (1973) for the pseudo-inverse.
"""

import numpy as np

from . import _C
from . import _functions as F
from . import _linalg_kernels as K
from ._ops import FUNCTIONS as _REGISTRY
from ._grad_mode import is_grad_enabled
from .autograd.function import Function

_tril, _triu = _REGISTRY["tril"], _REGISTRY["triu"]


def mT(t):
    return _C.transpose(t, -2, -1)


def _identity(n, like):
    """An n x n identity in like's dtype, made in a forward and saved: a backward that
    builds one itself (eye() uses arange) could not be traced by compiled autograd."""
    return K.tensor(np.eye(n), like)


def _as_diag(v):
    """(..., n) -> (..., n, n) with v on the diagonal (a differentiable composite)."""
    from ._more_ops import diag_embed
    return diag_embed(v)


def _diagonal(t):
    from ._more_ops import diagonal
    return diagonal(t, 0, -2, -1)


# ------------------------------------------------------------------------------ inverse
class Inv(Function):
    """Y = A^-1; dA = -Y^T dY Y^T."""

    @staticmethod
    def forward(ctx, A):
        values, _ = K.inv(K.array(A))
        Y = K.tensor(values, A)
        ctx.save_for_backward(Y)
        return Y

    @staticmethod
    def backward(ctx, grad):
        (Y,) = ctx.saved_tensors
        return -F.matmul(mT(Y), F.matmul(grad, mT(Y)))


class Solve(Function):
    """X = A^-1 B (B: (..., n, k), batch dims broadcast); dB = A^-T dX, dA = -dB X^T."""

    @staticmethod
    def forward(ctx, A, B):
        X = K.tensor(K.solve(K.array(A), K.array(B)), A)
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, grad):
        A, X = ctx.saved_tensors
        grad_B = Solve.apply(mT(A), grad)
        return -F.matmul(grad_B, mT(X)), grad_B


def triangle(t, upper, unitriangular):
    """The part of t that a triangular solve reads (strict when the diagonal is unit)."""
    if upper:
        return _triu(t, 1 if unitriangular else 0)
    return _tril(t, -1 if unitriangular else 0)


class SolveTriangular(Function):
    """X = T^-1 B, T the upper/lower triangle of A; dB = T^-T dX, dA = triangle(-dB X^T)."""

    @staticmethod
    def forward(ctx, A, B, upper, unitriangular):
        ctx.upper, ctx.unitriangular = upper, unitriangular
        values = K.solve_triangular(K.array(A), K.array(B), upper, unitriangular)
        X = K.tensor(values, A)
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, grad):
        A, X = ctx.saved_tensors
        upper, unit = ctx.upper, ctx.unitriangular
        grad_B = SolveTriangular.apply(mT(A), grad, not upper, unit)
        grad_A = triangle(-F.matmul(grad_B, mT(X)), upper, unit)
        return grad_A, grad_B, None, None


def solve_upper(U, B):
    return SolveTriangular.apply(U, B, True, False)


class CholeskySolve(Function):
    """X = (L L^T)^-1 B (or (U^T U)^-1 B), reading one triangle of the factor. dB =
    (L L^T)^-1 dX; the factor's gradient is torch's, that of the product L L^T with the
    whole L: C = dB X^T + X dB^T, dL = -C L (dU = -U C)."""

    @staticmethod
    def forward(ctx, B, L, upper):
        ctx.upper = upper
        values, factor = K.array(B), K.array(L)
        if upper:  # U^T U X = B
            inner = K.solve_triangular(np.swapaxes(factor, -1, -2), values, False, False)
            X = K.solve_triangular(factor, inner, True, False)
        else:  # L L^T X = B
            inner = K.solve_triangular(factor, values, False, False)
            X = K.solve_triangular(np.swapaxes(factor, -1, -2), inner, True, False)
        X = K.tensor(X, B)
        ctx.save_for_backward(L, X)
        return X

    @staticmethod
    def backward(ctx, grad):
        L, X = ctx.saved_tensors
        grad_B = CholeskySolve.apply(grad, L, ctx.upper)
        C = F.matmul(grad_B, mT(X))
        C = C + mT(C)
        grad_L = -F.matmul(L, C) if ctx.upper else -F.matmul(C, L)
        return grad_B, grad_L, None


# ------------------------------------------------------------------------------ determinants
def _inverse_for_gradient(A, what):
    try:
        return Inv.apply(A)
    except K.LinAlgError:
        raise NotImplementedError(f"cagrad: the gradient of {what} at a singular matrix is "
                                  f"not supported; see docs/python-api.md") from None


def _adjugate(a):
    """adj(a) of each matrix, also singular ones, from its SVD a = U diag(s) Vh:
    adj(a) = det(U) det(Vh) Vh^T diag(prod of the other s) U^T."""
    u, s, vh = np.linalg.svd(a)
    n = s.shape[-1]
    ones = np.ones(s.shape[:-1] + (1,), dtype=s.dtype)
    before = np.cumprod(np.concatenate([ones, s[..., :n - 1]], -1), -1)
    after = np.cumprod(np.concatenate([ones, s[..., :0:-1]], -1), -1)[..., ::-1]
    others = before * after  # prod_{j != i} s_j, without dividing by s_i
    sign = np.linalg.det(u) * np.linalg.det(vh)
    adj = np.swapaxes(vh, -1, -2) @ (others[..., :, None] * np.swapaxes(u, -1, -2))
    return sign[..., None, None] * adj


class Det(Function):
    """d = det(A); dA = dd * d * A^-T, i.e. dd * adj(A)^T. At a singular A only the
    first-order gradient is given (through the adjugate, as torch): a double backward
    there raises NotImplementedError."""

    @staticmethod
    def forward(ctx, A):
        d = K.tensor(np.linalg.det(K.array(A)), A)
        ctx.save_for_backward(A, d)
        return d

    @staticmethod
    def backward(ctx, grad):
        A, d = ctx.saved_tensors
        scale = grad.unsqueeze(-1).unsqueeze(-1)
        if is_grad_enabled():  # create_graph: stay differentiable
            inverse = _inverse_for_gradient(A, "linalg.det (create_graph=True)")
            return scale * d.unsqueeze(-1).unsqueeze(-1) * mT(inverse)
        try:
            inverse = Inv.apply(A)
        except K.LinAlgError:
            return scale * mT(K.tensor(_adjugate(K.array(A)), A))
        return scale * d.unsqueeze(-1).unsqueeze(-1) * mT(inverse)


class Slogdet(Function):
    """(sign, log|det A|); sign has no gradient, d log|det A| = A^-T."""

    @staticmethod
    def forward(ctx, A):
        sign, logabs = np.linalg.slogdet(K.array(A))
        sign, logabs = K.tensor(sign, A), K.tensor(logabs, A)
        ctx.mark_non_differentiable(sign)
        ctx.save_for_backward(A)
        return sign, logabs

    @staticmethod
    def backward(ctx, grad_sign, grad_logabs):
        (A,) = ctx.saved_tensors
        scale = grad_logabs.unsqueeze(-1).unsqueeze(-1)
        return scale * mT(_inverse_for_gradient(A, "linalg.slogdet"))


# ------------------------------------------------------------------------------ Cholesky
class Cholesky(Function):
    """A = L L^T (lower triangle of A read). With P = Phi(L^T dL) (lower triangle, diagonal
    halved), dA = L^-T P L^-1, symmetrised as torch does (dA + dA^T) / 2."""

    @staticmethod
    def forward(ctx, A):
        values, _ = K.cholesky(K.array(A))
        L = K.tensor(values, A)
        ctx.save_for_backward(L)
        return L

    @staticmethod
    def backward(ctx, grad):
        (L,) = ctx.saved_tensors
        P = _tril(F.matmul(mT(L), _tril(grad, 0)), 0)
        P = P - 0.5 * _as_diag(_diagonal(P))
        left = solve_upper(mT(L), P)  # L^-T P
        grad_A = mT(solve_upper(mT(L), mT(left)))  # (L^-T (L^-T P)^T)^T = L^-T P L^-1
        return 0.5 * (grad_A + mT(grad_A))


# ------------------------------------------------------------------------------ eigh, svd
def _gap_matrix(values, identity):
    """E[i, j] = values[j] - values[i], with ones on the diagonal (divided into zeros)."""
    return values.unsqueeze(-2) - values.unsqueeze(-1) + identity


class Eigh(Function):
    """A = V diag(w) V^T. dA = V (diag(dw) + skew(V^T dV) / E) V^T, E[i, j] = w_j - w_i
    (distinct eigenvalues; equal ones divide by zero, as in torch)."""

    @staticmethod
    def forward(ctx, A, uplo):
        w, v = np.linalg.eigh(K.array(A), UPLO=uplo)
        w, v = K.tensor(w, A), K.tensor(v, A)
        ctx.save_for_backward(w, v, _identity(A.shape[-1], A))
        return w, v

    @staticmethod
    def backward(ctx, grad_w, grad_v):
        w, v, identity = ctx.saved_tensors
        vtgv = F.matmul(mT(v), grad_v)
        inner = 0.5 * (vtgv - mT(vtgv)) / _gap_matrix(w, identity) \
            + grad_w.unsqueeze(-1) * identity
        return F.matmul(v, F.matmul(inner, mT(v))), None


class Svd(Function):
    """A = U diag(S) Vh. With J = skew(U^T dU), K = skew(Vh dVh^T) and E[i, j] = s_j^2 - s_i^2:
    dA = U ((J S + S K) / E + diag(dS)) Vh, plus (I - U U^T) dU S^-1 Vh when m > n, or
    U S^-1 dVh (I - V Vh) when m < n. vectors=False (svdvals): dA = U diag(dS) Vh only.
    full_matrices: the extra columns of U / rows of Vh get no gradient (as in torch)."""

    @staticmethod
    def forward(ctx, A, full_matrices, vectors):
        ctx.full_matrices, ctx.vectors = full_matrices, vectors
        u, s, vh = np.linalg.svd(K.array(A), full_matrices=full_matrices)
        u, s, vh = K.tensor(u, A), K.tensor(s, A), K.tensor(vh, A)
        ctx.save_for_backward(u, s, vh, _identity(s.shape[-1], A))
        return u, s, vh

    @staticmethod
    def backward(ctx, grad_u, grad_s, grad_vh):
        u, s, vh, identity = ctx.saved_tensors
        m, n, k = u.shape[-2], vh.shape[-1], s.shape[-1]
        if ctx.full_matrices:
            u, grad_u = u[..., :k], grad_u[..., :k]
            vh, grad_vh = vh[..., :k, :], grad_vh[..., :k, :]
        if not ctx.vectors:
            return F.matmul(u, grad_s.unsqueeze(-1) * vh), None, None
        J = F.matmul(mT(u), grad_u)
        Kv = F.matmul(vh, mT(grad_vh))
        core = ((J - mT(J)) * s.unsqueeze(-2) + s.unsqueeze(-1) * (Kv - mT(Kv))) \
            / _gap_matrix(s * s, identity) + grad_s.unsqueeze(-1) * identity
        grad_A = F.matmul(u, F.matmul(core, vh))
        if m > n:
            scaled = grad_u / s.unsqueeze(-2)
            outside = scaled - F.matmul(u, F.matmul(mT(u), scaled))
            grad_A = grad_A + F.matmul(outside, vh)
        elif m < n:
            scaled = grad_vh / s.unsqueeze(-1)
            outside = scaled - F.matmul(F.matmul(scaled, mT(vh)), vh)
            grad_A = grad_A + F.matmul(u, outside)
        return grad_A, None, None


# ------------------------------------------------------------------------------ QR
def _qr_square_backward(Q, R, grad_Q, grad_R):
    """A = QR with R square (m >= n, reduced): M = R dR^T - dQ^T Q, dA = (dQ + Q sym(M))
    R^-T, sym(M) the symmetric matrix with M's lower triangle."""
    M = F.matmul(R, mT(grad_R)) - F.matmul(mT(grad_Q), Q)
    lower = _tril(M, -1)
    sym = lower + mT(lower) + _as_diag(_diagonal(M))
    rhs = grad_Q + F.matmul(Q, sym)
    # rhs R^-T = (R^-1 rhs^T)^T
    return mT(solve_upper(R, mT(rhs)))


class Qr(Function):
    """A = QR (mode 'reduced' or 'complete'; 'r' keeps R and an empty Q). m >= n: see
    _qr_square_backward. m < n: A = [X | Y], R = [U | V], Y = Q V: dY = Q dV and X = QU is
    the square case with dQ + Y dV^T."""

    @staticmethod
    def forward(ctx, A, mode):
        ctx.mode = mode
        q, r = np.linalg.qr(K.array(A), mode="reduced" if mode == "r" else mode)
        q, r = K.tensor(q, A), K.tensor(r, A)
        ctx.save_for_backward(A, q, r)
        if mode == "r":
            q = K.tensor(np.zeros(0), A)
        return q, r

    @staticmethod
    def backward(ctx, grad_q, grad_r):
        if ctx.mode == "r":
            raise RuntimeError("The derivative of linalg.qr depends on Q, which is not "
                               "computed when mode='r'. Please use linalg.qr(A, "
                               "mode='reduced') if you are going to differentiate through "
                               "linalg.qr.")
        A, q, r = ctx.saved_tensors
        m, n = A.shape[-2], A.shape[-1]
        if ctx.mode == "complete" and m > n:
            raise RuntimeError("The QR decomposition is not differentiable when "
                               "mode='complete' and nrows > ncols.")
        if m >= n:
            return _qr_square_backward(q, r, grad_q, grad_r), None
        Y = A[..., m:]
        grad_V = grad_r[..., m:]
        grad_X = _qr_square_backward(q, r[..., :m], grad_q + F.matmul(Y, mT(grad_V)),
                                     grad_r[..., :m])
        return F.cat([grad_X, F.matmul(q, grad_V)], -1), None


# ------------------------------------------------------------------------------ pinv
class Pinv(Function):
    """X = A^+ (singular values at or below the tolerance dropped). For a constant rank,
    with G = dX: dA = -X^T G X^T + (I - A X) G^T X X^T + X^T X G^T (I - X A)."""

    @staticmethod
    def forward(ctx, A, atol, rtol, hermitian):
        X = K.tensor(K.pinv_values(K.array(A), atol, rtol, hermitian), A)
        ctx.save_for_backward(A, X)
        return X

    @staticmethod
    def backward(ctx, grad):
        A, X = ctx.saved_tensors
        Xt = mT(X)
        gt = mT(grad)
        term = -F.matmul(Xt, F.matmul(grad, Xt))
        left = F.matmul(gt, F.matmul(X, Xt))  # G^T X X^T  (n x m)
        term = term + left - F.matmul(A, F.matmul(X, left))
        right = F.matmul(F.matmul(Xt, X), gt)  # X^T X G^T  (n x m)
        term = term + right - F.matmul(right, F.matmul(X, A))
        return term, None, None, None
