"""MultivariateNormal(loc, covariance_matrix= | precision_matrix= | scale_tril=).

Everything goes through the lower Cholesky factor L of the covariance (scale_tril):
rsample = loc + L @ eps, log_prob by a triangular solve, entropy from L's diagonal.
cagrad.linalg has no cholesky or solve_triangular, so both are written here as
composites of differentiable ops (a loop over the n rows): exact in value and gradient,
and fine for the small event sizes of models (cost grows as n^2 ops).
"""

import math

import numpy as np

import cagrad

from . import constraints
from .distribution import Distribution
from .utils import _standard_normal, lazy_property

__all__ = ["MultivariateNormal"]


# ---------------------------------------------------------------------- linear algebra
def _not_positive_definite_order(matrix):
    """0 when every matrix of the batch is positive-definite, else the order of the first
    leading minor that is not (as torch's cholesky message names it)."""
    values = np.asarray(matrix.detach().numpy(), dtype=np.float64)
    n = values.shape[-1]
    for square in values.reshape(-1, n, n):
        for order in range(1, n + 1):
            try:
                np.linalg.cholesky(square[:order, :order])
            except np.linalg.LinAlgError:
                return order
    return 0


def _cholesky_ok(matrix):
    """One bool per matrix of the batch: whether its Cholesky factorisation exists."""
    values = np.asarray(matrix.detach().numpy(), dtype=np.float64)
    n = values.shape[-1]
    flat = values.reshape(-1, n, n)
    ok = np.empty(len(flat), dtype=bool)
    for i, square in enumerate(flat):
        try:
            np.linalg.cholesky(square)
            ok[i] = True
        except np.linalg.LinAlgError:
            ok[i] = False
    return cagrad.tensor(ok.reshape(values.shape[:-2])) > 0


def _cholesky(matrix):
    """The lower Cholesky factor of a batch of symmetric positive-definite matrices,
    built column by column from the lower triangle of `matrix`."""
    order = _not_positive_definite_order(matrix)
    if order:
        raise RuntimeError(
            "linalg.cholesky: The factorization could not be completed because the input is "
            f"not positive-definite (the leading minor of order {order} is not "
            "positive-definite).")
    matrix = _symmetric_gradient(matrix)
    n = matrix.shape[-1]
    rows = cagrad.arange(n)
    columns = []
    for j in range(n):
        rest = matrix[..., :, j]
        for column in columns:
            rest = rest - column * column[..., j:j + 1]
        below = (rows >= j).to(matrix.dtype)  # entries above the diagonal stay 0
        columns.append(rest / rest[..., j:j + 1].sqrt() * below)
    return cagrad.stack(columns, dim=-1)


def _diagonal(matrix):
    """The diagonals of a batch of square matrices (cagrad's diagonal() takes 2-D input
    only): every (n+1)-th entry of each flattened matrix."""
    n = matrix.shape[-1]
    return matrix.reshape(tuple(matrix.shape[:-2]) + (n * n,))[..., ::n + 1]


def _symmetric_gradient(matrix):
    """matrix's lower triangle mirrored (all torch's cholesky reads), whose gradient is
    the symmetric one torch's cholesky backward gives: that of (A + A')/2."""
    mirrored = matrix.tril() + matrix.tril(-1).transpose(-2, -1)
    halves = (matrix + matrix.transpose(-2, -1)) / 2
    return halves + (mirrored - halves).detach()


def _solve_lower(lower, rhs):
    """X with lower @ X = rhs (forward substitution), lower (..., n, n), rhs (..., n, m);
    the batch dimensions broadcast."""
    n = lower.shape[-1]
    solved = []
    for i in range(n):
        row = rhs[..., i:i + 1, :]
        if solved:
            row = row - lower[..., i:i + 1, :i] @ cagrad.cat(solved, dim=-2)
        solved.append(row / lower[..., i:i + 1, i:i + 1])
    return cagrad.cat(solved, dim=-2)


def _mahalanobis(lower, diff):
    """diff' (L L')^-1 diff for vectors diff (..., n): the squared norm of L^-1 diff."""
    solved = _solve_lower(lower, diff.unsqueeze(-1)).squeeze(-1)
    return solved.pow(2).sum(-1)


def _precision_to_scale_tril(precision):
    """The lower factor L with L L' = P^-1. The Cholesky factor of P with rows and columns
    reversed, reversed back, is an upper triangular U with U U' = P; so L = (U')^-1."""
    n = precision.shape[-1]
    upper = _cholesky(precision.flip((-2, -1))).flip((-2, -1))
    identity = cagrad.eye(n, dtype=precision.dtype)
    return _solve_lower(upper.transpose(-2, -1), identity)


def _lower_inverse(lower):
    n = lower.shape[-1]
    return _solve_lower(lower, cagrad.eye(n, dtype=lower.dtype))


# ---------------------------------------------------------------------- the distribution
class MultivariateNormal(Distribution):
    """The Gaussian with mean vector loc and covariance given by exactly one of
    covariance_matrix, precision_matrix (its inverse) or scale_tril (its lower Cholesky
    factor)."""

    arg_constraints = {"loc": constraints.real_vector,
                       "covariance_matrix": constraints.positive_definite,
                       "precision_matrix": constraints.positive_definite,
                       "scale_tril": constraints.lower_cholesky}
    support = constraints.real_vector
    has_rsample = True

    def __init__(self, loc, covariance_matrix=None, precision_matrix=None, scale_tril=None,
                 validate_args=None):
        if loc.dim() < 1:
            raise ValueError("loc must be at least one-dimensional.")
        given = [(name, m) for name, m in (("scale_tril", scale_tril),
                                           ("covariance_matrix", covariance_matrix),
                                           ("precision_matrix", precision_matrix))
                 if m is not None]
        if len(given) != 1:
            raise ValueError("Exactly one of covariance_matrix or precision_matrix or "
                             "scale_tril may be specified.")
        name, matrix = given[0]
        if matrix.dim() < 2:
            what = "scale_tril matrix" if name == "scale_tril" else name
            raise ValueError(f"{what} must be at least two-dimensional, with optional "
                             "leading batch dimensions")
        batch_shape = tuple(cagrad.broadcast_shapes(tuple(matrix.shape[:-2]),
                                                    tuple(loc.shape[:-1])))
        setattr(self, name, matrix.expand(batch_shape + (-1, -1)))
        self.loc = loc.expand(batch_shape + (-1,))
        super().__init__(batch_shape, tuple(self.loc.shape[-1:]), validate_args=validate_args)
        if name == "scale_tril":
            self._unbroadcasted_scale_tril = matrix
        elif name == "covariance_matrix":
            self._unbroadcasted_scale_tril = _cholesky(matrix)
        else:
            self._unbroadcasted_scale_tril = _precision_to_scale_tril(matrix)

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(MultivariateNormal, _instance)
        batch_shape = tuple(batch_shape)
        new.loc = self.loc.expand(batch_shape + tuple(self.event_shape))
        new._unbroadcasted_scale_tril = self._unbroadcasted_scale_tril
        for name in ("covariance_matrix", "scale_tril", "precision_matrix"):
            if name in self.__dict__:
                setattr(new, name, self.__dict__[name].expand(batch_shape + (-1, -1)))
        Distribution.__init__(new, batch_shape, self.event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def _matrix_shape(self):
        return tuple(self._batch_shape) + tuple(self._event_shape) * 2

    @lazy_property
    def scale_tril(self):
        return self._unbroadcasted_scale_tril.expand(self._matrix_shape())

    @lazy_property
    def covariance_matrix(self):
        lower = self._unbroadcasted_scale_tril
        return (lower @ lower.transpose(-2, -1)).expand(self._matrix_shape())

    @lazy_property
    def precision_matrix(self):
        inverse = _lower_inverse(self._unbroadcasted_scale_tril)
        return (inverse.transpose(-2, -1) @ inverse).expand(self._matrix_shape())

    @property
    def mean(self):
        return self.loc

    @property
    def mode(self):
        return self.loc

    @property
    def variance(self):
        per_row = self._unbroadcasted_scale_tril.pow(2).sum(-1)
        return per_row.expand(tuple(self._batch_shape) + tuple(self._event_shape))

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(sample_shape)
        eps = _standard_normal(shape, self.loc.dtype)
        return self.loc + (self._unbroadcasted_scale_tril @ eps.unsqueeze(-1)).squeeze(-1)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        lower = self._unbroadcasted_scale_tril
        distance = _mahalanobis(lower, value - self.loc)
        half_log_det = _diagonal(lower).log().sum(-1)
        n = self._event_shape[0]
        return -0.5 * (n * math.log(2 * math.pi) + distance) - half_log_det

    def entropy(self):
        lower = self._unbroadcasted_scale_tril
        half_log_det = _diagonal(lower).log().sum(-1)
        n = self._event_shape[0]
        entropy = 0.5 * n * (1.0 + math.log(2 * math.pi)) + half_log_det
        return entropy.expand(tuple(self._batch_shape)) if self._batch_shape else entropy


def _kl_mvn_mvn(p, q):
    """KL between two MultivariateNormals with the same event size."""
    if p.event_shape != q.event_shape:
        # torch's message, with the run of spaces its line continuation leaves in it
        raise ValueError("KL-divergence between two Multivariate Normals with" + " " * 26
                         + "different event shapes cannot be computed")
    p_lower, q_lower = p._unbroadcasted_scale_tril, q._unbroadcasted_scale_tril
    log_dets = (_diagonal(q_lower).log().sum(-1)
                - _diagonal(p_lower).log().sum(-1))
    n = p.event_shape[0]
    batch = tuple(cagrad.broadcast_shapes(tuple(q_lower.shape[:-2]), tuple(p_lower.shape[:-2])))
    ratio = _solve_lower(q_lower.expand(batch + (n, n)), p_lower.expand(batch + (n, n)))
    trace = ratio.pow(2).sum((-2, -1))
    distance = _mahalanobis(q_lower, q.loc - p.loc)
    return log_dets + 0.5 * (trace + distance - n)
