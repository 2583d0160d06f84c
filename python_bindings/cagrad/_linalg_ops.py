"""torch.linalg's decompositions and solvers for cagrad (re-exported by linalg.py), with
torch's argument checks, named-tuple results and messages.

Values come from numpy.linalg (_linalg_kernels.py); gradients from the autograd Functions
of _linalg_autograd.py; the rest (solve with left=False, cholesky_solve, lstsq,
matrix_power, multi_dot, matrix_exp, logdet) are composites of those and cagrad ops.
"""

import math
from collections import namedtuple

import numpy as np

from . import _C
from . import _functions as F
from . import _linalg_autograd as A_
from . import _linalg_kernels as K
from ._grad_mode import no_grad
from ._linalg_autograd import mT
from ._linalg_kernels import LinAlgError
from ._more_ops2 import _no_out

_TensorBase = _C.TensorBase
_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long"}

# torch.return_types.<name>: named tuples, printed and indexed the same way
linalg_inv_ex = namedtuple("linalg_inv_ex", ["inverse", "info"])
linalg_cholesky_ex = namedtuple("linalg_cholesky_ex", ["L", "info"])
linalg_slogdet = namedtuple("linalg_slogdet", ["sign", "logabsdet"])
slogdet_result = namedtuple("slogdet", ["sign", "logabsdet"])
linalg_eigh = namedtuple("linalg_eigh", ["eigenvalues", "eigenvectors"])
linalg_qr = namedtuple("linalg_qr", ["Q", "R"])
linalg_svd = namedtuple("linalg_svd", ["U", "S", "Vh"])
linalg_solve_ex = namedtuple("linalg_solve_ex", ["result", "info"])
linalg_lstsq = namedtuple("linalg_lstsq", ["solution", "residuals", "rank", "singular_values"])


# ------------------------------------------------------------------------------ checks
def _type_name(t):
    return _TYPE_NAMES.get(t._dtype, "Bool")


def _check_input(fname, A, arg="A", square=True, floating=True):
    """torch's checks of a matrix argument: a tensor of >= 2 dims, floating, square."""
    if not isinstance(A, _TensorBase):
        raise TypeError(f"{fname}(): argument '{arg}' must be Tensor, not {type(A).__name__}")
    if A.dim() < 2:
        raise RuntimeError(f"{fname}: The input tensor {arg} must have at least 2 dimensions.")
    if floating and not A.is_floating_point():
        raise RuntimeError(f"{fname}: Expected a floating point or complex tensor as input. "
                           f"Got {_type_name(A)}")
    if square and A.shape[-1] != A.shape[-2]:
        raise RuntimeError(f"{fname}: {arg} must be batches of square matrices, but they are "
                           f"{A.shape[-2]} by {A.shape[-1]} matrices")


def _check_floating(A, message, error=RuntimeError):
    """A kernel's own dtype error, which torch raises before the usual checks for some ops."""
    if isinstance(A, _TensorBase) and not A.is_floating_point():
        raise error(message.replace("{type}", _type_name(A)))


_NOT_FLOAT = "This function doesn't handle types other than float and double"


def _check_same_dtype(fname, A, B):
    if A._dtype != B._dtype:
        raise RuntimeError(f"{fname}: Expected A and B to have the same dtype, but found A "
                           f"of type {_type_name(A)} and B of type {_type_name(B)} instead")


def _check_batches(A, B):
    """The batch dims of A and B broadcast: torch's message (B's size named first) if not."""
    a, b = list(B.shape[:-2]), list(A.shape[:-2])
    ndim = max(len(a), len(b))
    for offset in range(1, min(len(a), len(b)) + 1):
        x, y = a[-offset], b[-offset]
        if x != y and x != 1 and y != 1:
            raise RuntimeError(f"The size of tensor a ({x}) must match the size of tensor b "
                               f"({y}) at non-singleton dimension {ndim - offset}")


def _int_info(infos):
    # torch's info is int32; cagrad has no int32, so it is int64 (docs/python-api.md)
    return K.int_tensor(infos)


# ------------------------------------------------------------------------------ inverses
def inv(A, *, out=None):
    """The inverse of each square matrix of A; LinAlgError for a singular one."""
    _no_out("linalg.inv", out)
    _check_input("linalg.inv", A)
    return A_.Inv.apply(A)


def inv_ex(A, *, check_errors=False, out=None):
    """(inverse, info): info 0 where inverted, else getrf's first zero pivot (then the
    inverse there is NaN: undefined, as in torch). check_errors raises instead."""
    _no_out("linalg.inv_ex", out)
    _check_input("linalg.inv", A)
    try:
        inverse = A_.Inv.apply(A)
        return linalg_inv_ex(inverse, _int_info(np.zeros(A.shape[:-2], dtype=np.int64)))
    except LinAlgError:
        if check_errors:
            raise
    values, infos = K.inv(K.array(A), check=False)
    return linalg_inv_ex(K.tensor(values, A), _int_info(infos))


def det(A, *, out=None):
    _no_out("linalg.det", out)
    _check_input("linalg.det", A)
    return A_.Det.apply(A)


def slogdet(A, *, out=None):
    """(sign, log |det A|), torch.return_types.linalg_slogdet; sign has no gradient."""
    _no_out("linalg.slogdet", out)
    _check_input("linalg.slogdet", A)
    return linalg_slogdet(*A_.Slogdet.apply(A))


def torch_slogdet(A):
    """torch.slogdet (the same values, named torch.return_types.slogdet)."""
    return slogdet_result(*slogdet(A))


def logdet(A):
    """log det A: NaN where det A < 0 and -inf where it is 0, as torch.logdet."""
    _check_input("logdet", A)
    sign, logabs = A_.Slogdet.apply(A)
    return logabs + sign.log()  # sign has no gradient: log(-1) = nan, log(0) = -inf


# ------------------------------------------------------------------------------ solvers
def _is_vector_rhs(A, B):
    """torch's rule: B is a (batch of) vector(s) when 1-D or A's shape without its last dim."""
    return B.dim() == 1 or (B.dim() == A.dim() - 1 and tuple(B.shape) == tuple(A.shape[:-1]))


def solve(A, B, *, left=True, out=None):
    """X with A X = B (left) or X A = B; batch dims broadcast; B may be a vector."""
    _no_out("linalg.solve", out)
    _check_input("linalg.solve", A)
    if not isinstance(B, _TensorBase):
        raise TypeError(f"linalg_solve(): argument 'B' must be Tensor, not {type(B).__name__}")
    _check_same_dtype("linalg.solve", A, B)
    vector = _is_vector_rhs(A, B)
    rhs = B.unsqueeze(-1) if vector else B
    n = A.shape[-1]
    if rhs.shape[-2 if left else -1] != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve: Incompatible shapes of A and B for the equation "
                           f"{equation} ({n}x{n} and {rhs.shape[-2]}x{rhs.shape[-1]})")
    if vector and not left:
        raise RuntimeError("linalg.solve: Vector broadcasting of the left hand side is not "
                           "supported for left=False. In this case linalg.solve is "
                           "equivalent to B / A.squeeze(-1)")
    _check_batches(A, rhs)
    if not left:  # X A = B  <=>  A^T X^T = B^T
        return mT(A_.Solve.apply(mT(A), mT(rhs)))
    X = A_.Solve.apply(A, rhs)
    return X.squeeze(-1) if vector else X


def solve_ex(A, B, *, left=True, check_errors=False, out=None):
    """(result, info): info is getrf's first zero pivot of each singular matrix (0 where
    solved), whose result is NaN (undefined, as in torch); check_errors raises instead.
    The others are solved (and differentiable) as in solve()."""
    _no_out("linalg.solve_ex", out)
    try:
        X = solve(A, B, left=left)
        return linalg_solve_ex(X, _int_info(np.zeros(A.shape[:-2], dtype=np.int64)))
    except LinAlgError as e:
        if check_errors:
            raise LinAlgError(str(e).replace("torch.linalg.solve:",
                                             "torch.linalg.solve_ex:", 1)) from None
    from ._more_ops import eye
    infos = K.lu_infos(K.array(A))
    singular = K.tensor(infos != 0, A).unsqueeze(-1).unsqueeze(-1)
    # solve the others with the singular matrices swapped for the identity, then NaN them
    fixed = F.where(singular, eye(A.shape[-1], dtype=A.dtype), A)
    X = solve(fixed, B, left=left)
    mask = singular if X.dim() == A.dim() else singular.squeeze(-1)
    return linalg_solve_ex(F.where(mask, float("nan"), X), _int_info(infos))


_REQUIRED = object()


def solve_triangular(A, B, *, upper=_REQUIRED, left=True, unitriangular=False, out=None):
    """X with T X = B (left) or X T = B, T the upper or lower triangle of A (with ones on
    the diagonal if unitriangular). A zero on T's diagonal gives inf/nan, as in torch."""
    if upper is _REQUIRED:
        raise TypeError('linalg_solve_triangular() missing 1 required positional arguments: '
                        '"upper"')
    _no_out("linalg.solve_triangular", out)
    _check_floating(A, "\"triangular_solve_cpu\" not implemented for '{type}'",
                    NotImplementedError)
    _check_input("linalg.solve_triangular", A)
    _check_input("linalg.solve_triangular", B, "B", square=False)
    n = A.shape[-1]
    if B.shape[-2 if left else -1] != n:
        equation = "AX = B" if left else "XA = B"
        raise RuntimeError(f"linalg.solve_triangular: Incompatible shapes of A and B for the "
                           f"equation {equation} ({n}x{n} and {B.shape[-2]}x{B.shape[-1]})")
    _check_batches(A, B)
    if A._dtype != B._dtype:  # torch computes in A's dtype here
        B = F._cast(B, A.dtype)
    upper = bool(upper)
    if left:
        return A_.SolveTriangular.apply(A, B, upper, bool(unitriangular))
    # X T = B  <=>  T^T X^T = B^T, T^T triangular on the other side
    return mT(A_.SolveTriangular.apply(mT(A), mT(B), not upper, bool(unitriangular)))


# ------------------------------------------------------------------------------ Cholesky
def cholesky(A, *, upper=False, out=None):
    """L (lower, L L^T = A) or U (upper, U^T U = A); reads one triangle of A (lower for L,
    upper for U). LinAlgError with torch's message when A is not positive-definite."""
    _no_out("linalg.cholesky", out)
    _check_input("linalg.cholesky", A)
    if upper:
        return mT(A_.Cholesky.apply(mT(A)))
    return A_.Cholesky.apply(A)


def cholesky_ex(A, *, upper=False, check_errors=False, out=None):
    """(L, info): info 0 where factored, else the order of the first leading minor that is
    not positive-definite (L is then partial: undefined, as in torch)."""
    _no_out("linalg.cholesky_ex", out)
    _check_input("linalg.cholesky", A)
    try:
        L = cholesky(A, upper=upper)
        return linalg_cholesky_ex(L, _int_info(np.zeros(A.shape[:-2], dtype=np.int64)))
    except LinAlgError:
        if check_errors:
            raise
    values, infos = K.cholesky(K.array(mT(A) if upper else A), check=False)
    L = K.tensor(values, A)
    return linalg_cholesky_ex(mT(L) if upper else L, _int_info(infos))


def cholesky_solve(B, L, upper=False, *, out=None):
    """torch.cholesky_solve: X with (L L^T) X = B (or (U^T U) X = B when upper)."""
    _no_out("cholesky_solve", out)
    _check_input("cholesky_solve", L, "A")
    _check_input("cholesky_solve", B, "B", square=False)
    if B.shape[-2] != L.shape[-1]:
        raise RuntimeError(f"Incompatible matrix sizes for cholesky_solve: each A matrix is "
                           f"{L.shape[-1]} by {L.shape[-1]} but each b matrix is "
                           f"{B.shape[-2]} by {B.shape[-1]}")
    if B._dtype != L._dtype:
        raise RuntimeError(f"Expected b and A to have the same dtype, but found b of type "
                           f"{_type_name(B)} and A of type {_type_name(L)} instead.")
    _check_batches(L, B)
    return A_.CholeskySolve.apply(B, L, bool(upper))


def cholesky_inverse(L, upper=False, *, out=None):
    """torch.cholesky_inverse: (L L^T)^-1 (or (U^T U)^-1) from the factor."""
    _no_out("cholesky_inverse", out)
    _check_input("cholesky_inverse", L)
    from ._more_ops import eye
    n = L.shape[-1]
    identity = eye(n, dtype=L.dtype).expand(list(L.shape[:-2]) + [n, n])
    return A_.CholeskySolve.apply(identity, L, bool(upper))


# ------------------------------------------------------------------------------ spectra
def _check_uplo(UPLO):
    """'L' or 'U', either case (as torch)."""
    if not isinstance(UPLO, str) or UPLO.upper() not in ("L", "U"):
        raise RuntimeError(f"Expected UPLO argument to be 'L' or 'U', but got {UPLO}")
    return UPLO.upper()


_EIGH_DTYPE = "\"linalg_eigh_cpu\" not implemented for '{type}'"


def eigh(A, UPLO="L", *, out=None):
    """(eigenvalues ascending, eigenvectors as columns) of symmetric A, read from the
    UPLO triangle. Gradients assume distinct eigenvalues (torch's formula)."""
    _no_out("linalg.eigh", out)
    _check_floating(A, _EIGH_DTYPE, NotImplementedError)
    _check_input("linalg.eigh", A)
    return linalg_eigh(*A_.Eigh.apply(A, _check_uplo(UPLO)))


def eigvalsh(A, UPLO="L", *, out=None):
    _no_out("linalg.eigvalsh", out)
    _check_floating(A, _EIGH_DTYPE, NotImplementedError)
    _check_input("linalg.eigvalsh", A)
    return A_.Eigh.apply(A, _check_uplo(UPLO))[0]


def _check_driver(driver):
    if driver is not None:
        raise RuntimeError("torch.linalg.svd: keyword argument `driver=` is only supported on "
                           "CUDA inputs with cuSOLVER backend.")


def svd(A, full_matrices=True, *, driver=None, out=None):
    """(U, S, Vh) with A = U diag(S) Vh, S descending. Gradients assume distinct nonzero
    singular values (torch's formula); the extra columns of a full U/Vh get none."""
    _no_out("linalg.svd", out)
    _check_input("linalg.svd", A, square=False)
    _check_driver(driver)
    return linalg_svd(*A_.Svd.apply(A, bool(full_matrices), True))


def svdvals(A, *, driver=None, out=None):
    _no_out("linalg.svdvals", out)
    _check_input("linalg.svd", A, square=False)
    _check_driver(driver)
    return A_.Svd.apply(A, False, False)[1]


_QR_MODES = ("reduced", "complete", "r")


def qr(A, mode="reduced", *, out=None):
    """(Q, R) with A = QR; mode 'r' gives an empty Q (and no gradient, as in torch)."""
    _no_out("linalg.qr", out)
    if mode not in _QR_MODES:
        raise RuntimeError(f"qr received unrecognized mode '{mode}' but expected one of "
                           f"'reduced' (default), 'r', or 'complete'")
    _check_input("linalg.qr", A, square=False)
    return linalg_qr(*A_.Qr.apply(A, mode))


# ------------------------------------------------------------------------------ pinv, rank
def _tolerances(atol, rtol):
    """atol/rtol as numbers or numpy arrays (tensors' values)."""
    def value(x):
        if x is None:
            return None
        if isinstance(x, _TensorBase):
            return np.asarray(F.detach(x))
        return float(x)
    return value(atol), value(rtol)


def pinv(A, rcond=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """The pseudo-inverse; singular values <= max(atol, rtol * largest) count as zero.
    rcond (torch's older positional form) is rtol with atol = 0. Gradients assume the
    rank does not change nearby (torch's formula)."""
    _no_out("linalg.pinv", out)
    if not isinstance(A, _TensorBase) or A.dim() < 2 or not A.is_floating_point():
        what = (f"{_type_name(A)}{{{list(A.shape)}}}" if isinstance(A, _TensorBase)
                else type(A).__name__)
        raise RuntimeError(f"linalg.pinv({what}): expected a tensor with 2 or more dimensions "
                           f"of float, double, cfloat or cdouble types")
    if rcond is not None:
        atol, rtol = 0.0, rcond
    atol, rtol = _tolerances(atol, rtol)
    if hermitian:
        _check_input("linalg.eigh", A)
    return A_.Pinv.apply(A, atol, rtol, bool(hermitian))


def matrix_rank(A, tol=None, hermitian=False, *, atol=None, rtol=None, out=None):
    """The number of singular values above max(atol, rtol * largest), as int64 (no
    gradient). tol (torch's older positional form) is atol with rtol = 0."""
    _no_out("linalg.matrix_rank", out)
    if isinstance(A, _TensorBase) and A.dim() < 2:
        raise RuntimeError("torch.linalg.matrix_rank: The input tensor input must have at "
                           "least 2 dimensions.")
    _check_floating(A, _NOT_FLOAT)
    _check_input("torch.linalg.matrix_rank", A, "input", square=False)
    if hermitian:
        _check_input("linalg.eigh", A)
    if tol is not None:
        atol, rtol = tol, 0.0
    atol, rtol = _tolerances(atol, rtol)
    return K.int_tensor(K.rank_values(K.array(F.detach(A)), atol, rtol, bool(hermitian)))


_LSTSQ_DRIVERS = ("gels", "gelsy", "gelsd", "gelss")


def lstsq(A, B, rcond=None, *, driver=None):
    """(solution, residuals, rank, singular_values) of min ||A X - B||, as torch on the CPU.

    The solution is always pinv(A) @ B (the minimum-norm least-squares solution, what
    gelsy/gelsd/gelss give; 'gels' assumes full rank), with pinv's gradient as torch's.
    The other fields take each driver's shape: residuals (the squared residual per column)
    for gels/gelsd/gelss when m > n and A has full rank, rank for all but gels, singular
    values for gelsd/gelss."""
    if driver is not None and driver not in _LSTSQ_DRIVERS:
        raise RuntimeError("torch.linalg.lstsq: parameter `driver` should be one of "
                           "(gels, gelsy, gelsd, gelss)")
    driver = driver or "gelsy"
    _check_floating(A, _NOT_FLOAT)
    _check_input("torch.linalg.lstsq", A, "input", square=False)
    if not isinstance(B, _TensorBase) or not 0 <= A.dim() - B.dim() <= 1:
        raise RuntimeError("torch.linalg.lstsq: input.dim() must be greater or equal to "
                           "other.dim() and (input.dim() - other.dim()) <= 1")
    vector = B.dim() == A.dim() - 1  # B holds vectors: solved as one-column matrices
    if vector:
        B = B.unsqueeze(-1)
    fields = _lstsq(A, B, rcond, driver)
    if not vector:
        return fields
    solution, residuals, rank, singular = fields
    return linalg_lstsq(solution.squeeze(-1), residuals.squeeze(-1) if residuals.numel()
                        else residuals, rank, singular)


def _lstsq(A, B, rcond, driver):
    _check_input("torch.linalg.lstsq", B, "other", square=False)
    if A._dtype != B._dtype:
        raise RuntimeError(f"torch.linalg.lstsq: Expected input and other to have the same "
                           f"dtype, but got input's dtype {_type_name(A)} and other's dtype "
                           f"{_type_name(B)}")
    if A.shape[-2] != B.shape[-2]:
        raise RuntimeError("torch.linalg.lstsq: input.size(-2) should match other.size(-2)")
    m, n = A.shape[-2], A.shape[-1]
    if rcond is None:
        rcond = float(np.finfo(np.float64 if A._dtype == 1 else np.float32).eps) * max(m, n)
    solution = F.matmul(A_.Pinv.apply(A, None, float(rcond), False), B)
    values = K.array(F.detach(A))
    empty = K.tensor(np.zeros(0), A)
    rank = K.int_tensor(np.zeros(0)) if driver == "gels" else \
        K.int_tensor(K.rank_values(values, None, float(rcond), False))
    singular = empty
    if driver in ("gelsd", "gelss"):
        singular = K.tensor(np.linalg.svd(values, compute_uv=False), A)
    residuals = empty
    full_rank = driver == "gels" or bool((K.rank_values(values, None, float(rcond), False)
                                          == n).all())
    if driver != "gelsy" and m > n and full_rank:
        difference = F.matmul(A, solution) - B
        residuals = F.sum(difference * difference, -2)
    return linalg_lstsq(solution, residuals, rank, singular)


_COND_NORMS = ("fro", "nuc", math.inf, -math.inf, 1, -1)


def cond(A, p=None, *, out=None):
    """The condition number: largest / smallest singular value for p None, 2 (and the
    reverse for -2), else norm(A, p) * norm(inv(A), p) for square A (inf where singular)."""
    _no_out("linalg.cond", out)
    if p not in (None, 2, -2) and p not in _COND_NORMS:
        raise RuntimeError(f"linalg.cond got an invalid norm type: {p}")
    if isinstance(A, _TensorBase) and A.dim() < 2:
        raise RuntimeError("linalg.cond: The input tensor must have at least 2 dimensions.")
    if p in (None, 2, -2):
        _check_input("linalg.cond", A, square=False)
        singular = svdvals(A)
        top, bottom = singular[..., 0], singular[..., -1]
        return bottom / top if p == -2 else top / bottom
    _check_input(f"linalg.cond(ord={p})", A)
    from .linalg import matrix_norm
    inverse, info = inv_ex(A)
    singular = info != 0
    # a singular matrix's inverse is NaN: zeros keep its (discarded) norm finite
    inverse = F.where(singular.unsqueeze(-1).unsqueeze(-1), 0.0, inverse)
    ratio = matrix_norm(A, p) * matrix_norm(inverse, p)
    return F.where(singular, math.inf, ratio)


def diagonal(A, *, offset=0, dim1=-2, dim2=-1):
    """torch.linalg.diagonal: torch.diagonal with the last two dims by default."""
    from ._more_ops import diagonal as _diagonal
    return _diagonal(A, offset, dim1, dim2)


# ------------------------------------------------------------------------------ products
def matrix_power(A, n, *, out=None):
    """A^n by repeated squaring (n < 0: of inv(A)); n = 0 gives the identity."""
    _no_out("linalg.matrix_power", out)
    if isinstance(n, bool) or not isinstance(n, int):
        raise TypeError(f"linalg_matrix_power(): argument 'n' (position 2) must be int, not "
                        f"{type(n).__name__}")
    if isinstance(A, _TensorBase) and A._dtype == 2 and n >= 0 and A.dim() >= 2:
        _check_input("linalg.matrix_power", A, floating=False)
        # int64 has no gradient and cagrad's matmul is float only: exact numpy products
        return K.int_tensor(np.linalg.matrix_power(K.array(A), n))
    # n < 0 on int64: inv's dtype error, as torch
    _check_input("linalg.matrix_power", A, floating=n >= 0)
    if n == 0:
        from ._more_ops import eye
        return eye(A.shape[-1], dtype=A.dtype).expand(A.shape).contiguous()
    if n < 0:
        A, n = inv(A), -n
    result = None
    base = A
    while n:
        if n & 1:
            result = base if result is None else F.matmul(result, base)
        n >>= 1
        if n:
            base = F.matmul(base, base)
    return F.clone(result) if result is A else result  # a new tensor, as torch, for n = 1


def multi_dot(tensors, *, out=None):
    """The product of a chain of matrices (the first may be a row vector, the last a column
    vector), multiplied left to right (torch picks the cheapest order: the values differ
    by rounding only)."""
    _no_out("linalg.multi_dot", out)
    tensors = list(tensors)
    if len(tensors) < 2:
        raise RuntimeError(f"multi_dot(): expected at least 2 tensors but got {len(tensors)}")
    first, last = tensors[0].dim(), tensors[-1].dim()
    if first not in (1, 2):
        raise RuntimeError(f"multi_dot(): the first tensor must be 1D or 2D but got {first}D")
    for i, t in enumerate(tensors[1:-1], 1):
        if t.dim() != 2:
            raise RuntimeError(f"multi_dot(): tensor {i} must be 2D but got {t.dim()}D")
    if last not in (1, 2):
        raise RuntimeError(f"multi_dot(): the last tensor must be 1D or 2D but got {last}D")
    names = {0: "float", 1: "double", 2: "long"}
    for i, t in enumerate(tensors[1:], 1):
        if t._dtype != tensors[0]._dtype:
            raise RuntimeError(f"multi_dot(): all tensors must have be the same dtype but "
                               f"tensor 0 is {names[tensors[0]._dtype]} and tensor {i} "
                               f"{names[t._dtype]}")
    mats = list(tensors)
    if tensors[0]._dtype == 2:  # int64: no gradient, and cagrad's matmul is float only
        return K.int_tensor(np.linalg.multi_dot([K.array(t) for t in tensors]))
    mats[0] = mats[0].unsqueeze(0) if first == 1 else mats[0]
    mats[-1] = mats[-1].unsqueeze(-1) if last == 1 else mats[-1]
    for i in range(len(mats) - 1):
        if mats[i].shape[-1] != mats[i + 1].shape[0]:
            raise RuntimeError(f"multi_dot(): tensors {i} and {i + 1} with shapes "
                               f"{list(mats[i].shape)} and {list(mats[i + 1].shape)} cannot "
                               f"be multiplied")
    result = mats[0]
    for m in mats[1:]:
        result = F.matmul(result, m)
    if first == 1:
        result = result.squeeze(0)
    return result.squeeze(-1) if last == 1 else result


def matrix_exp(A):
    """exp(A) by scaling and squaring: the Taylor series to degree 18 of A / 2^s (whose
    1-norm is at most 1/2, leaving a truncation error below 1e-22) squared s times. A
    composite of matmuls, so its gradient is that of the same computation."""
    _check_input("linalg.matrix_exp", A)
    from ._more_ops import eye
    with no_grad():
        values = np.abs(K.array(F.detach(A)))
        norm = float(values.sum(axis=-2).max()) if values.size else 0.0
    squarings = max(0, math.ceil(math.log2(norm / 0.5))) if norm > 0.5 else 0
    X = A / float(2 ** squarings)
    identity = eye(A.shape[-1], dtype=A.dtype)
    result = identity
    for k in range(18, 0, -1):  # Horner: I + X/1 (I + X/2 (I + ... (I + X/18)))
        result = identity + F.matmul(X, result) / float(k)
    for _ in range(squarings):
        result = F.matmul(result, result)
    return result
