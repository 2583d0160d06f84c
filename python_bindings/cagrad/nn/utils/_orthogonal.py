"""nn.utils.parametrizations.orthogonal: a matrix (or a batch of them) kept orthogonal
(orthonormal columns when tall, rows when wide), with torch's three maps and its dynamic
trivialization (a stored base B: Q = B @ map(X)).

The maps are composites of cagrad's differentiable ops: matrix_exp and cayley (a
linalg.solve) of the skew-symmetric part of tril(X), and householder (a product of
Householder reflectors written out with matmuls). Only real matrices: cagrad has no
complex dtypes.
"""

import numpy as np

from ... import _C, _creation, _functions, linalg
from ..._grad_mode import no_grad
from ..._more_ops import eye as _eye
from ..module import Module
from . import parametrize

__all__ = ["orthogonal"]

_MAPS = ("matrix_exp", "cayley", "householder")


def _is_orthogonal(q):
    n, k = q.shape[-2], q.shape[-1]
    eps = 10.0 * n * float(np.finfo(np.float64 if "64" in str(q.dtype) else np.float32).eps)
    eye = _eye(k, dtype=q.dtype)
    return bool(((q.mT @ q - eye).abs() <= eps).all())


def _make_orthogonal(a):
    """The Q of a = QR with diag(R) >= 0 (a tall)."""
    q, r = linalg.qr(a)
    return q * r.diagonal(dim1=-2, dim2=-1).sign().unsqueeze(-2)


def _householder_product(a, tau):
    """The first k columns of H_1 ... H_k, H_i = I - tau_i v_i v_i^T with v_i the i-th
    column of the strictly lower part of a [..., n, k] plus e_i (LAPACK's orgqr)."""
    n, k = a.shape[-2], a.shape[-1]
    eye = _eye(n, dtype=a.dtype)
    q = eye.expand(*a.shape[:-2], n, n)
    for i in reversed(range(k)):  # H_i (H_{i+1} ... H_k): apply each reflector on the left
        v = (a[..., :, i] + eye[:, i]).unsqueeze(-1)  # [..., n, 1]
        q = q - tau[..., i].unsqueeze(-1).unsqueeze(-1) * (v @ (v.mT @ q))
    return q[..., :k]


def _geqrf(q):
    """LAPACK geqrf of a real [..., n, k] array (numpy): reflectors below the diagonal,
    R on and above it, and tau; no gradient (right_inverse runs under no_grad)."""
    a = np.array(q, copy=True)
    n, k = a.shape[-2:]
    tau = np.zeros(a.shape[:-2] + (k,), dtype=a.dtype)
    for idx in np.ndindex(a.shape[:-2]):
        m = a[idx]
        for j in range(min(n, k)):
            alpha, rest = m[j, j], m[j + 1:, j]
            xnorm = np.linalg.norm(rest)
            if xnorm == 0.0:
                continue  # H = I, tau = 0
            beta = -np.copysign(np.hypot(alpha, xnorm), alpha)
            tau[idx + (j,)] = (beta - alpha) / beta
            v = np.concatenate([[1.0], rest / (alpha - beta)]).astype(a.dtype)
            m[j + 1:, j] = v[1:]
            m[j, j] = beta
            trailing = m[j:, j + 1:]
            trailing -= tau[idx + (j,)] * np.outer(v, v @ trailing)
    return a, tau


class _Orthogonal(Module):
    def __init__(self, weight, orthogonal_map, *, use_trivialization=True):
        super().__init__()
        self.shape = weight.shape
        self.orthogonal_map = orthogonal_map
        if use_trivialization:
            self.register_buffer("base", None)

    def forward(self, X):
        n, k = X.shape[-2], X.shape[-1]
        transposed = n < k
        if transposed:
            X = X.mT
            n, k = k, n
        if self.orthogonal_map in ("matrix_exp", "cayley"):
            X = X.tril()
            if n != k:
                X = _functions.cat([X, _creation.zeros(*X.shape[:-2], n, n - k,
                                                       dtype=X.dtype)], -1)
            A = X - X.mT
            if self.orthogonal_map == "matrix_exp":
                Q = linalg.matrix_exp(A)
            else:  # Cayley: (I - A/2)^-1 (I + A/2)
                eye = _eye(n, dtype=A.dtype)
                Q = linalg.solve(eye - 0.5 * A, eye + 0.5 * A)
            if n != k:
                Q = Q[..., :k]
        else:
            A = X.tril(-1)
            tau = 2.0 / (1.0 + (A * A).sum(-2))
            Q = _householder_product(A, tau)
            # the diagonal's integer part (torch's .int(): 0 or +-1 after right_inverse)
            Q = Q * X.diagonal(dim1=-2, dim2=-1).detach().trunc().unsqueeze(-2)
        if "base" in self._buffers:
            Q = self.base @ Q
        return Q.mT if transposed else Q

    def right_inverse(self, Q):
        with no_grad():
            return self._right_inverse(Q)

    def _right_inverse(self, Q):
        if tuple(Q.shape) != tuple(self.shape):
            raise ValueError(f"Expected a matrix or batch of matrices of shape {self.shape}. "
                             f"Got a tensor of shape {Q.shape}.")
        q_init = Q
        n, k = Q.shape[-2], Q.shape[-1]
        transpose = n < k
        if transpose:
            Q = Q.mT
            n, k = k, n
        if "base" not in self._buffers:
            if self.orthogonal_map != "householder":
                raise NotImplementedError("It is not possible to assign to the matrix "
                                          "exponential or the Cayley parametrizations when "
                                          "use_trivialization=False.")
            a, tau = _geqrf(Q.detach().numpy())
            d = np.arange(k)  # the diagonal: the signs of R, flipped where tau == 0
            a[..., d, d] = np.sign(a[..., d, d]) * np.where(tau == 0.0, -1.0, 1.0)
            A = _creation.tensor(a, dtype=Q.dtype)
            return A.mT if transpose else A
        if n == k:
            Q = _make_orthogonal(Q) if not _is_orthogonal(Q) else Q.clone()
        else:  # complete the columns with random ones, then orthonormalise
            extra = _creation.randn(*Q.shape[:-2], n, n - k, dtype=Q.dtype)
            Q = _make_orthogonal(_functions.cat([Q, extra], -1))
        self.base = Q
        neg_id = _creation.zeros(*q_init.shape, dtype=q_init.dtype)
        neg_id.diagonal(dim1=-2, dim2=-1).fill_(-1.0)
        return neg_id


def orthogonal(module, name="weight", orthogonal_map=None, *, use_trivialization=True):
    """Parametrize module.<name> (a matrix or batch of matrices) as an orthogonal one."""
    weight = getattr(module, name, None)
    if not isinstance(weight, _C.TensorBase):
        raise ValueError(f"Module '{module}' has no parameter or buffer with name '{name}'")
    if weight.ndim < 2:
        raise ValueError(f"Expected a matrix or batch of matrices. Got a tensor of "
                         f"{weight.ndim} dimensions.")
    if orthogonal_map is None:
        orthogonal_map = "matrix_exp" if weight.shape[-2] == weight.shape[-1] else "householder"
    if orthogonal_map not in _MAPS:
        raise ValueError(f'orthogonal_map has to be one of "matrix_exp", "cayley", '
                         f'"householder". Got: {orthogonal_map}')
    orth = _Orthogonal(weight, orthogonal_map, use_trivialization=use_trivialization)
    parametrize.register_parametrization(module, name, orth, unsafe=True)
    return module
