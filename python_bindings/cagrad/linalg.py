"""cagrad.linalg: torch.linalg for real float32/float64 tensors with batch dims.

Here: the norms and products that are composites of cagrad's differentiable ops
(vector_norm, matrix_norm, norm, cross, vecdot) and torch.cdist. The decompositions and
solvers (inv, det, solve, cholesky, eigh, qr, svd, pinv, lstsq, ...) live in _linalg_ops.py
(numpy.linalg forwards, autograd Functions in _linalg_autograd.py). Not implemented: the
non-symmetric eigen-decomposition (eig, eigvals), LU (lu, lu_factor, lu_solve), ldl_*,
householder_product, tensorinv, tensorsolve, cond, and complex dtypes (docs/python-api.md).
"""

import math
import operator

from . import _C
from . import _functions as F
from ._grad_mode import no_grad
from ._more_ops2 import _cross, _no_out, _wrap
from ._linalg_kernels import LinAlgError
from ._linalg_ops import (cholesky, cholesky_ex, cond, det, diagonal, eigh, eigvalsh, inv,
                          inv_ex, lstsq, matrix_exp, matrix_power, matrix_rank, multi_dot,
                          pinv, qr, slogdet, solve, solve_ex, solve_triangular, svd, svdvals)

__all__ = ["LinAlgError", "cholesky", "cholesky_ex", "cond", "cross", "det", "diagonal", "eigh",
           "eigvalsh", "inv", "inv_ex", "lstsq", "matmul", "matrix_exp", "matrix_norm",
           "matrix_power", "matrix_rank", "multi_dot", "norm", "pinv", "qr", "slogdet", "solve",
           "solve_ex", "solve_triangular", "svd", "svdvals", "vecdot", "vector_norm"]


def __getattr__(name):
    # only reached for what cagrad.linalg lacks (eig, lu, ...): say so
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.linalg' has no attribute {name!r}: cagrad.linalg "
                         f"has {', '.join(__all__)} only; see docs/python-api.md")


def matmul(input, other, *, out=None):
    _no_out("linalg.matmul", out)
    return F.matmul(input, other)


def vecdot(x, y, *, dim=-1, out=None):
    """Sum of x * y along dim (broadcast), for real tensors."""
    _no_out("linalg.vecdot", out)
    return F.sum(x * y, dim)


def _float_input(fname, input, dtype):
    input = F._cast(input, dtype)
    if not input.is_floating_point():
        raise RuntimeError(f"{fname}: Expected a floating point or complex tensor as input. "
                           f"Got Long")
    return input


def _safe_sqrt(squares):
    """sqrt with gradient 0 (not nan) where the sum of squares is 0, as PyTorch's norms."""
    positive = F.gt(squares, 0)
    return F.where(positive, F.where(positive, squares, 1.0).sqrt(), 0.0)


def _reduce_dims(input, dim):
    if dim is None:
        return None
    dims = [dim] if isinstance(dim, int) else list(dim)
    return tuple(_wrap(d, input.dim()) for d in dims) or None


def vector_norm(x, ord=2, dim=None, keepdim=False, *, dtype=None, out=None):
    if isinstance(ord, str):
        raise TypeError(f"linalg_vector_norm(): argument 'ord' (position 2) must be Number, "
                        f"not {type(ord).__name__}")
    _no_out("linalg.vector_norm", out)
    x = _float_input("linalg.vector_norm", x, dtype)
    dims = _reduce_dims(x, dim)
    magnitude = x.abs()
    if ord == 2:
        return _safe_sqrt(F.sum(x * x, dims, keepdim))
    if ord == math.inf:
        return F.amax(magnitude, dims or (), keepdim)
    if ord == -math.inf:
        return F.amin(magnitude, dims or (), keepdim)
    if ord == 0:
        # a count: its gradient is 0, as in torch (x * 0 is exactly 0 where x == 0)
        return F.sum(F.where(F.ne(F.detach(x), 0), 1.0, x * 0), dims, keepdim)
    if ord == 1:
        return F.sum(magnitude, dims, keepdim)
    return _p_norm(magnitude, ord, dims, keepdim)


def _p_norm(magnitude, ord, dims, keepdim):
    """sum(|x|^p)^(1/p), with gradient 0 (not nan) where the norm is 0, as in torch: those
    slices are computed from ones and then replaced by 0."""
    with no_grad():
        value = F.sum(F.pow(F.detach(magnitude), ord), dims, True) ** (1.0 / ord)
    zero = F.eq(value, 0)
    safe = F.where(zero.expand(magnitude.shape), 1.0, magnitude)
    result = F.where(zero, 0.0, F.sum(F.pow(safe, ord), dims, True) ** (1.0 / ord))
    if keepdim:
        return result
    return result.reshape([]) if dims is None else result.squeeze(dims)


def matrix_norm(A, ord="fro", dim=(-2, -1), keepdim=False, *, dtype=None, out=None):
    _no_out("linalg.matrix_norm", out)
    A = _float_input("linalg.matrix_norm", A, dtype)
    if A.dim() < 2:
        raise RuntimeError("linalg.matrix_norm: The input tensor A must have at least 2 "
                           "dimensions.")
    rows, cols = (_wrap(d, A.dim()) for d in dim)
    if rows == cols:
        raise RuntimeError(f"linalg.matrix_norm: dims must be different. Got ({rows}, {cols})")
    if ord == "fro":
        return vector_norm(A, 2, (rows, cols), keepdim)
    if ord in ("nuc", 2, -2):
        return _spectral_norm(A, ord, rows, cols, keepdim)
    if ord not in (1, -1, math.inf, -math.inf):
        raise RuntimeError(f"linalg.matrix_norm: Order {ord} not supported.")
    # 1/-1: largest/smallest column sum of |A|; inf/-inf: the same over rows
    summed, picked = (rows, cols) if abs(ord) == 1 else (cols, rows)
    sums = F.sum(A.abs(), summed, keepdim=True)
    pick = F.amax if ord > 0 else F.amin
    result = pick(sums, picked, keepdim=True)
    return result if keepdim else result.squeeze(max(rows, cols)).squeeze(min(rows, cols))


def _spectral_norm(A, ord, rows, cols, keepdim):
    """'nuc' (sum), 2 (largest) or -2 (smallest) of the singular values of the (rows, cols)
    matrices: differentiable through svdvals."""
    planes = F.permute(A, [d for d in range(A.dim()) if d not in (rows, cols)] + [rows, cols])
    singular = svdvals(planes)
    if ord == "nuc":
        result = F.sum(singular, -1)
    else:
        result = (F.amax if ord == 2 else F.amin)(singular, -1)
    if keepdim:
        for d in sorted((rows, cols)):
            result = result.unsqueeze(d)
    return result


def norm(A, ord=None, dim=None, keepdim=False, *, dtype=None, out=None):
    _no_out("linalg.norm", out)
    if dim is not None and not isinstance(dim, (tuple, list)):
        dim = (operator.index(dim),)
    if ord is None:
        if dim is not None and len(dim) == 2:
            return matrix_norm(A, "fro", dim, keepdim, dtype=dtype)
        return vector_norm(A, 2, dim, keepdim, dtype=dtype)
    if dim is None:
        if A.dim() not in (1, 2):
            raise RuntimeError(f"linalg.norm: If dim is not specified but ord is, the input "
                               f"must be 1D or 2D. Got {A.dim()}D.")
        dim = tuple(range(A.dim()))
    if len(dim) == 2:
        return matrix_norm(A, ord, dim, keepdim, dtype=dtype)
    if len(dim) != 1:
        raise RuntimeError(f"linalg.norm: If dim is specified, it must be of length 1 or 2. "
                           f"Got {list(dim)}")
    if isinstance(ord, str):
        raise RuntimeError(f"linalg.matrix_norm: dim must be a 2-tuple. Got {dim[0]}")
    return vector_norm(A, ord, dim, keepdim, dtype=dtype)


def cross(input, other, *, dim=-1, out=None):
    _no_out("linalg.cross", out)
    return _cross(input, other, dim)


def _cdist(x1, x2, p=2.0, compute_mode="use_mm_for_euclid_dist_if_necessary"):
    """torch.cdist: the p-norm distance between each row of x1 and each row of x2."""
    if x1.dim() < 2 or x2.dim() < 2:
        bad, name = (x1, "X1") if x1.dim() < 2 else (x2, "X2")
        raise RuntimeError(f"cdist only supports at least 2D tensors, {name} got: "
                           f"{bad.dim()}D")
    if x1.shape[-1] != x2.shape[-1]:
        raise RuntimeError(f"X1 and X2 must have the same number of columns. X1: "
                           f"{x1.shape[-1]} X2: {x2.shape[-1]}")
    if p < 0:
        raise RuntimeError("cdist only supports non-negative p values")
    if not isinstance(x1, _C.TensorBase) or not x1.is_floating_point():
        raise RuntimeError("cdist only supports floating-point dtypes, X1 got: Long")
    if _euclid_by_matmul(compute_mode, p, x1.shape[-2], x2.shape[-2]):
        return _euclidean_by_matmul(x1, x2)
    differences = x1.unsqueeze(-2) - x2.unsqueeze(-3)
    return vector_norm(differences, p, -1)


_COMPUTE_MODES = ("use_mm_for_euclid_dist_if_necessary", "use_mm_for_euclid_dist",
                  "donot_use_mm_for_euclid_dist")


def _euclid_by_matmul(compute_mode, p, rows1, rows2):
    """PyTorch's choice: p=2 distances through a matmul when asked, or by default when
    either side has more than 25 rows (less memory than all the differences)."""
    if compute_mode not in _COMPUTE_MODES:
        raise ValueError(f"{compute_mode} is not a valid value for compute_mode")
    if p != 2 or compute_mode == _COMPUTE_MODES[2]:
        return False
    return compute_mode == _COMPUTE_MODES[1] or rows1 > 25 or rows2 > 25


def _euclidean_by_matmul(x1, x2):
    # |a - b|^2 = |a|^2 + |b|^2 - 2 a.b; rounding can make it slightly negative, and sqrt
    # needs a positive floor (PyTorch's 1e-30) for a finite gradient
    squares1 = F.sum(x1 * x1, -1, keepdim=True)
    squares2 = F.sum(x2 * x2, -1, keepdim=True)
    products = F.matmul(x1, F.transpose(x2, -2, -1))
    squared = squares1 + F.transpose(squares2, -2, -1) - 2 * products
    return F.clamp(squared, min=1e-30).sqrt()
