"""Order statistics and moments as composites: median, nanmedian, kthvalue, mode, quantile,
nanquantile, nansum, nanmean, aminmax, cov, corrcoef, cummax, cummin, logcumsumexp.

Which element is picked (the order) is found with numpy on a detached copy; the value is
then gathered from the input with cagrad's differentiable gather, so the gradient flows to
the picked element exactly as PyTorch's index-based backward sends it.
"""

import warnings
from collections import namedtuple

import numpy as np

from . import _C
from . import _functions as F
from ._functions import _ValuesIndices
from ._more_ops import diagonal, isfinite, isnan
from ._more_ops2 import _from_numpy, _no_out, _values, _wrap, movedim
from ._order import cumsum


def _pair_repr(self):
    fields = ",".join(f"\n{field}={value!r}" for field, value in zip(self._fields, self))
    return f"cagrad.return_types.{type(self).__name__}({fields})"


def _result_type(name, fields=("values", "indices")):
    """A torch.return_types-like named pair, printed like PyTorch's."""
    base = namedtuple(name, fields)
    if fields == ("values", "indices"):
        cls = type(name, (_ValuesIndices, base), {"__slots__": ()})
    else:
        cls = type(name, (base,), {"__slots__": (), "__repr__": _pair_repr})
    cls.__name__ = name
    return cls


_Median = _result_type("median")
_NanMedian = _result_type("nanmedian")
_KthValue = _result_type("kthvalue")
_Mode = _result_type("mode")
_CumMax = _result_type("cummax")
_CumMin = _result_type("cummin")
_AMinMax = _result_type("aminmax", ("min", "max"))


# ------------------------------------------------------------------------ picking
def _rows(input, dim):
    """(numpy values with dim moved last, wrapped dim) of a tensor."""
    d = _wrap(dim, input.dim())
    values = _values(input)
    return (np.moveaxis(values, d, -1) if values.ndim else values.reshape(1)), d


def _gather_picked(input, d, index_last, keepdim):
    """input's values at index_last (dim d moved last, one index per row), and the indices,
    shaped as torch's reduction along d (keepdim or not)."""
    if input.dim() == 0:
        return input.clone(), _from_numpy(np.zeros((), dtype=np.int64))
    index = _from_numpy(np.ascontiguousarray(np.moveaxis(index_last[..., None], -1, d)))
    values = F.gather(input, d, index)
    if not keepdim:
        return values.squeeze(d), index.squeeze(d)
    return values, index


def _sorted_order(rows):
    return np.argsort(rows, axis=-1, kind="stable")  # nan sorts last, as in torch


def _nan_rows(rows):
    return np.isnan(rows).any(axis=-1) if rows.dtype.kind == "f" else np.zeros(
        rows.shape[:-1], dtype=bool)


def _first_nan(rows):
    return np.argmax(np.isnan(rows), axis=-1)


def _pick_at(rows, positions):
    order = _sorted_order(rows)
    return np.take_along_axis(order, positions[..., None], -1)[..., 0]


def _check_nonempty(fname, rows, d):
    if rows.shape[-1] == 0:
        raise IndexError(f"{fname}(): Expected reduction dim {d} to have non-zero size.")


def median(input, dim=None, keepdim=False):
    """No dim: the lower median of all values (nan if any is nan); with dim: (values,
    indices) along dim."""
    if dim is None:
        return _median_all(input, ignore_nan=False)
    rows, d = _rows(input, dim)
    _check_nonempty("median", rows, d)
    index = _pick_at(rows, np.full(rows.shape[:-1], (rows.shape[-1] - 1) // 2, np.int64))
    nan_rows = _nan_rows(rows)
    index = np.where(nan_rows, _first_nan(rows), index) if nan_rows.any() else index
    return _Median(*_gather_picked(input, d, index, keepdim))


def nanmedian(input, dim=None, keepdim=False):
    """median that skips nan (nan only where every value is nan)."""
    if dim is None:
        return _median_all(input, ignore_nan=True)
    rows, d = _rows(input, dim)
    _check_nonempty("nanmedian", rows, d)
    valid = (~np.isnan(rows)).sum(-1) if rows.dtype.kind == "f" else np.full(
        rows.shape[:-1], rows.shape[-1])
    # a row of nan only gives the middle one, as torch
    index = _pick_at(rows, np.where(valid > 0, valid - 1, rows.shape[-1] - 1) // 2)
    return _NanMedian(*_gather_picked(input, d, index, keepdim))


def _median_all(input, ignore_nan):
    flat = _values(input).reshape(-1)
    kept = flat[~np.isnan(flat)] if ignore_nan and flat.dtype.kind == "f" else flat
    if kept.size == 0 or (flat.dtype.kind == "f" and np.isnan(kept).any()):
        chosen = np.array(np.nan, dtype=flat.dtype)
    else:
        chosen = np.sort(kept)[(kept.size - 1) // 2]
    value = _from_numpy(np.asarray(chosen, dtype=flat.dtype))
    if not input.is_floating_point() or not input.requires_grad:
        return value
    # forward: exactly the chosen value; backward: shared evenly by the elements equal to
    # it, as PyTorch's evenly-distributed gradient of a full median
    ties = F.eq(input, value)
    share = F.sum(F.where(ties, input - F.detach(input), 0.0)) / F.sum(ties)
    return value + share


def kthvalue(input, k, dim=-1, keepdim=False):
    rows, d = _rows(input, dim)
    if not 1 <= k <= rows.shape[-1]:
        raise RuntimeError(f"kthvalue(): selected number k out of range for dimension {d}")
    index = _pick_at(rows, np.full(rows.shape[:-1], k - 1, np.int64))
    return _KthValue(*_gather_picked(input, d, index, keepdim))


def mode(input, dim=-1, keepdim=False):
    """The most frequent value along dim (the smallest among equally frequent ones) and the
    last position where it occurs."""
    rows, d = _rows(input, dim)
    _check_nonempty("mode", rows, d)
    flat = rows.reshape(-1, rows.shape[-1])
    index = np.array([_mode_position(row) for row in flat], dtype=np.int64)
    return _Mode(*_gather_picked(input, d, index.reshape(rows.shape[:-1]), keepdim))


def _mode_position(row):
    found, counts = np.unique(row, return_counts=True, equal_nan=False)  # nan: each its own
    winner = found[np.argmax(counts)]  # argmax: the first (smallest) of the most frequent
    return np.flatnonzero(row == winner)[-1]


# ------------------------------------------------------------------------ quantiles
_INTERPOLATIONS = ("linear", "lower", "higher", "midpoint", "nearest")


def _quantile_q(fname, input, q):
    if not input.is_floating_point():
        raise RuntimeError(f"{fname}() input tensor must be either float or double dtype")
    if isinstance(q, _C.TensorBase):
        if q.dtype != input.dtype:
            raise RuntimeError(f"{fname}() q tensor must be same dtype as the input tensor")
        if q.dim() > 1:
            raise RuntimeError(f"{fname}() q must be a scalar or 1D tensor")
        levels, scalar = _values(q).astype(np.float64).reshape(-1), q.dim() == 0
    else:
        levels, scalar = np.array([float(q)]), True
    if levels.size and (levels.min() < 0 or levels.max() > 1):
        raise RuntimeError(f"{fname}() q values must be in the range [0, 1]")
    return levels, scalar


def _ranks(levels, valid, interpolation):
    """(lower, upper, weight) positions in the sorted rows for each level; valid is the
    count of usable values per row."""
    rank = levels * (np.maximum(valid, 1) - 1)[..., None]
    if interpolation == "nearest":
        rank = np.round(rank)  # half to even, as torch.round
    lower, upper = np.floor(rank), np.ceil(rank)
    weight = rank - lower
    if interpolation == "lower":
        upper, weight = lower, weight * 0
    elif interpolation == "higher":
        lower, weight = upper, weight * 0
    elif interpolation == "midpoint":
        weight = np.where(upper > lower, 0.5, 0.0)
    return lower.astype(np.int64), upper.astype(np.int64), weight


def _quantile(fname, input, q, dim, keepdim, interpolation, ignore_nan):
    if interpolation not in _INTERPOLATIONS:
        raise RuntimeError(f"{fname}() interpolation must be one of linear, lower, higher, "
                           f"midpoint or nearest. Got {interpolation}")
    levels, scalar = _quantile_q(fname, input, q)
    source = input.reshape(-1) if dim is None else input
    rows, d = _rows(source, 0 if dim is None else dim)
    if rows.shape[-1] == 0:
        raise RuntimeError(f"{fname}() input tensor must be non-empty")
    count = rows.shape[-1]
    valid = (~np.isnan(rows)).sum(-1) if ignore_nan else np.full(rows.shape[:-1], count)
    lower, upper, weight = _ranks(levels, valid, interpolation)
    # rows that give nan point at their last sorted entry, a nan
    unusable = (valid == 0) if ignore_nan else _nan_rows(rows)
    lower[unusable], upper[unusable] = count - 1, count - 1
    order = _from_numpy(np.ascontiguousarray(_sorted_order(rows)))
    moved = source.reshape(1) if source.dim() == 0 else movedim(source, d, -1)
    ordered = F.gather(moved, -1, order)
    low_values = F.gather(ordered, -1, _from_numpy(lower))
    high_values = F.gather(ordered, -1, _from_numpy(upper))
    fraction = _fraction(q, interpolation, weight, valid, lower, rows.dtype)
    result = low_values + fraction * (high_values - low_values)  # levels last
    return _quantile_shape(result, input, dim, d, keepdim, scalar)


def _fraction(q, interpolation, weight, valid, lower, dtype):
    """The interpolation weights; for linear with a tensor q, q * (count - 1) - lower,
    so q gets its gradient, as in torch."""
    if interpolation != "linear" or not isinstance(q, _C.TensorBase) or not q.requires_grad:
        return _from_numpy(weight.astype(dtype))
    span = _from_numpy((np.maximum(valid, 1) - 1)[..., None].astype(dtype))
    return q.reshape(-1) * span - _from_numpy(lower.astype(dtype))


def _quantile_shape(result, input, dim, d, keepdim, scalar):
    result = movedim(result, -1, 0)  # torch puts the q dim first
    if keepdim:
        if dim is None:
            result = result.reshape([result.shape[0]] + [1] * input.dim())
        else:
            result = result.unsqueeze(d + 1)
    return result.squeeze(0) if scalar else result


def quantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    _no_out("quantile", out)
    return _quantile("quantile", input, q, dim, keepdim, interpolation, ignore_nan=False)


def nanquantile(input, q, dim=None, keepdim=False, *, interpolation="linear", out=None):
    _no_out("nanquantile", out)
    return _quantile("nanquantile", input, q, dim, keepdim, interpolation, ignore_nan=True)


# ------------------------------------------------------------------------ nan-skipping
def nansum(input, dim=None, keepdim=False, *, dtype=None):
    input = F._cast(input, dtype)
    if input.is_floating_point():
        input = F.where(isnan(input), 0.0, input)
    return F.sum(input, dim, keepdim)


def nanmean(input, dim=None, keepdim=False, *, dtype=None):
    input = F._cast(input, dtype)
    if not input.is_floating_point():
        raise RuntimeError("nanmean(): expected input to have floating point dtype but got "
                           "Long")
    present = F.logical_not(isnan(input))
    return nansum(input, dim, keepdim) / F.sum(present, dim, keepdim)


def aminmax(input, *, dim=None, keepdim=False):
    if dim is None and input.numel() == 0:
        raise RuntimeError("aminmax(): cannot compute aminmax over an empty dimension as the "
                           "operation has no identity.")
    dims = () if dim is None else dim
    if dim is None and keepdim:
        dims = tuple(range(input.dim()))
    return _AMinMax(F.amin(input, dims, keepdim), F.amax(input, dims, keepdim))


# ------------------------------------------------------------------------ moments
def cov(input, *, correction=1, fweights=None, aweights=None):
    if input.dim() > 2:
        raise RuntimeError(f"cov(): expected input to have two or fewer dimensions but got "
                           f"an input with {input.dim()} dimensions")
    if not input.is_floating_point():  # torch computes integer data in the default dtype
        from ._creation import get_default_dtype
        input = input.to(get_default_dtype())
    observations = input.reshape(1, -1) if input.dim() < 2 else input
    count = observations.shape[1]
    weights = _cov_weights(fweights, aweights, count, observations.dtype)
    if weights is None:
        total = count
        centre = F.mean(observations, 1, keepdim=True)
        factor = count - correction
    else:
        total = F.sum(weights)
        centre = F.sum(observations * weights, 1, keepdim=True) / total
        factor = total - (correction if aweights is None else
                          correction * F.sum(weights * aweights) / total)
    deviation = observations - centre
    weighted = deviation if weights is None else deviation * weights
    if isinstance(factor, _C.TensorBase):
        factor = F.clamp(factor, min=0)
    elif factor <= 0:
        warnings.warn("cov(): degrees of freedom is <= 0. Correction should be strictly less "
                      "than the number of observations.", UserWarning, stacklevel=2)
        factor = 0
    result = F.matmul(weighted, deviation.t()) / factor
    return result.reshape(()) if observations.shape[0] == 1 else result


def _cov_weights(fweights, aweights, count, dtype):
    weights = None
    for name, w in (("fweights", fweights), ("aweights", aweights)):
        if w is None:
            continue
        if w.dim() > 1:
            raise RuntimeError(f"cov(): expected {name} to have one or fewer dimensions but "
                               f"got {name} with {w.dim()} dimensions")
        if w.numel() != count:
            raise RuntimeError(f"cov(): expected {name} to have the same numel as there are "
                               f"observations in the input but got {w.numel()} != {count}")
        if name == "fweights" and w.is_floating_point():
            raise RuntimeError("cov(): expected fweights to have integral dtype")
        if name == "aweights" and not w.is_floating_point():
            raise RuntimeError("cov(): expected aweights to have floating point dtype")
        if _values(w).min(initial=0) < 0:
            raise RuntimeError(f"cov(): {name} cannot be negative")
        w = w.to(dtype)
        weights = w if weights is None else weights * w
    return weights


def corrcoef(input):
    c = cov(input)
    if c.dim() == 0:
        return c / c
    spread = diagonal(c).sqrt()
    c = c / spread.reshape(-1, 1)
    c = c / spread.reshape(1, -1)
    return F.clamp(c, -1, 1)


# ------------------------------------------------------------------------ running
def _running_pick(input, dim, better, result_type):
    rows, d = _rows(input, dim)
    count = rows.shape[-1]
    index = np.zeros(rows.shape, dtype=np.int64)
    if count:
        best, best_at = rows[..., 0].copy(), np.zeros(rows.shape[:-1], dtype=np.int64)
        for i in range(count):
            x = rows[..., i]
            # ties move to the later position; a nan wins and then stays, as in torch
            take = better(x, best) | (x == best)
            if rows.dtype.kind == "f":
                take = np.isnan(x) | (take & ~np.isnan(best))
            best, best_at = np.where(take, x, best), np.where(take, i, best_at)
            index[..., i] = best_at
    if input.dim() == 0:
        return result_type(input.clone(), _from_numpy(np.zeros((), dtype=np.int64)))
    picks = _from_numpy(np.ascontiguousarray(np.moveaxis(index, -1, d)))
    return result_type(F.gather(input, d, picks), picks)


def cummax(input, dim):
    return _running_pick(input, dim, np.greater, _CumMax)


def cummin(input, dim):
    return _running_pick(input, dim, np.less, _CumMin)


def logcumsumexp(input, dim):
    """log(cumsum(exp(x))) along dim. Each row is shifted by its largest finite value before
    exp; where the finite values of a row span more than the dtype's exp range, it is
    computed instead as a logsumexp over a lower-triangular mask (n x n per row)."""
    d = _wrap(dim, input.dim())
    if input.dim() == 0:
        return input.clone()
    rows = _values(input)
    finite = rows[np.isfinite(rows)]
    span = float(finite.max() - finite.min()) if finite.size else 0.0
    if span < _EXP_RANGE[rows.dtype.itemsize]:
        peak = F.amax(F.detach(input), d, keepdim=True)
        peak = F.where(F.logical_not(isfinite(peak)), 0.0, peak)
        return cumsum((input - peak).exp(), d).log() + peak
    return _masked_logcumsumexp(input, d)


# below exp(-range) a float underflows; past it the shifted cumsum would lose the prefix
_EXP_RANGE = {4: 80.0, 8: 700.0}


def _masked_logcumsumexp(input, d):
    count = input.shape[d]
    later = np.triu(np.ones((count, count), dtype=bool), 1)  # column j > row i: masked
    mask = _from_numpy(np.where(later, -np.inf, 0.0).astype(_values(input).dtype))
    moved = movedim(input, d, -1).unsqueeze(-2)  # (..., 1, n) + (n, n): row i sees j <= i
    return movedim(F.logsumexp(moved + mask, -1), -1, d)

