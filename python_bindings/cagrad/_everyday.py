"""Window functions, combinations, trapezoid integration and put / put_ (torch's names).

All are composites of differentiable cagrad ops (the windows are constants built from
numpy), so gradients and compiled-autograd capture come for free. Argument checks and
their messages follow torch 2.13.
"""

import itertools
import math

import numpy as np


from ._creation import get_default_dtype, tensor
from ._dtype import float32, float64, int64
from ._ops import inplace_assign

__all__ = ["bartlett_window", "blackman_window", "combinations", "cumulative_trapezoid",
           "hamming_window", "hann_window", "kaiser_window", "put", "put_", "trapezoid",
           "trapz"]


# ------------------------------------------------------------------------ windows
def _window(name, window_length, periodic, dtype, requires_grad, values):
    """A window of window_length points; values(n, N) gives the symmetric window of N
    points at positions n. A periodic window is the symmetric one of N + 1 points
    without its last point (torch's definition)."""
    if not isinstance(window_length, int) or isinstance(window_length, bool):
        raise TypeError(f"{name}(): argument 'window_length' (position 1) must be int, not "
                        f"{type(window_length).__name__}")
    if window_length < 0:
        raise RuntimeError(f"{name} requires non-negative window_length, got "
                           f"window_length={window_length}")
    dtype = get_default_dtype() if dtype is None else dtype
    if dtype not in (float32, float64):
        raise RuntimeError(f"{name} expects floating point dtypes, got: {dtype}")
    if window_length <= 1:
        data = np.ones(window_length)
    else:
        n = window_length + 1 if periodic else window_length
        data = values(np.arange(n, dtype=np.float64), n)[:window_length]
    return tensor(data, dtype=dtype, requires_grad=requires_grad)


def _cosine_sum(coefficients):
    # sum_k (-1)^k a_k cos(2 pi k n / (N - 1))
    def values(n, size):
        phase = 2 * math.pi * n / (size - 1)
        return sum((-1) ** k * a * np.cos(k * phase) for k, a in enumerate(coefficients))
    return values


def hann_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                pin_memory=False, requires_grad=False):
    return _window("hann_window", window_length, periodic, dtype, requires_grad,
                   _cosine_sum((0.5, 0.5)))


def hamming_window(window_length, periodic=True, alpha=0.54, beta=0.46, *, dtype=None,
                   layout=None, device=None, pin_memory=False, requires_grad=False):
    return _window("hamming_window", window_length, periodic, dtype, requires_grad,
                   _cosine_sum((alpha, beta)))


def blackman_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):
    return _window("blackman_window", window_length, periodic, dtype, requires_grad,
                   _cosine_sum((0.42, 0.5, 0.08)))


def bartlett_window(window_length, periodic=True, *, dtype=None, layout=None, device=None,
                    pin_memory=False, requires_grad=False):
    def values(n, size):
        return 1 - np.abs(2 * n / (size - 1) - 1)
    return _window("bartlett_window", window_length, periodic, dtype, requires_grad, values)


def kaiser_window(window_length, periodic=True, beta=12.0, *, dtype=None, layout=None,
                  device=None, pin_memory=False, requires_grad=False):
    def values(n, size):
        half = (size - 1) / 2
        return np.i0(beta * np.sqrt(np.clip(1 - ((n - half) / half) ** 2, 0, None))) \
            / np.i0(beta)
    return _window("kaiser_window", window_length, periodic, dtype, requires_grad, values)


# ------------------------------------------------------------------------ combinations
def combinations(input, r=2, with_replacement=False):
    """The r-element combinations of a 1-D tensor's entries, one per row (itertools'
    order); rows are gathered with index_select, so gradients reach input."""
    if input.dim() != 1:
        raise RuntimeError(f"Expect a 1D vector, but got shape {list(input.shape)}")
    if r < 0:
        raise RuntimeError(f"Expect a non-negative number, but got {r}")
    if r == 0:
        return input[:0]  # torch gives an empty 1-D tensor here
    pick = itertools.combinations_with_replacement if with_replacement \
        else itertools.combinations
    rows = list(pick(range(input.shape[0]), r))
    if not rows:
        return input.index_select(0, tensor([], dtype=int64)).reshape(0, r)
    index = tensor(np.asarray(rows, dtype=np.int64).reshape(-1))
    return input.index_select(0, index).reshape(len(rows), r)


# ------------------------------------------------------------------------ trapezoid
def _spacing(name, y, x, dx, dim):
    """The step between neighbouring samples along dim: a number, or a tensor that
    broadcasts against y's n - 1 intervals."""
    if x is None:
        return 1 if dx is None else dx
    if dx is not None:
        raise TypeError(f"{name}() received an invalid combination of arguments: give x or "
                        f"dx, not both")
    if x.dim() == 1:
        if x.shape[0] != y.shape[dim]:
            raise RuntimeError(f"{name}: There must be one `x` value for each sample point")
        step = x[1:] - x[:-1]
        trailing = y.dim() - 1 - dim
        return step.reshape((-1,) + (1,) * trailing)
    n = x.shape[dim]
    return x.narrow(dim, 1, n - 1) - x.narrow(dim, 0, n - 1)


def _intervals(name, y, x, dx, dim):
    dim = dim % y.dim() if y.dim() else 0
    n = y.shape[dim]
    step = _spacing(name, y, x, dx, dim) if n else 1
    if n == 0:
        return None, dim
    mid = (y.narrow(dim, 1, n - 1) + y.narrow(dim, 0, n - 1)) / 2
    return mid * step, dim


def trapezoid(y, x=None, *, dx=None, dim=-1):
    """The trapezoidal rule along dim, with sample points x or a constant spacing dx."""
    areas, dim = _intervals("trapezoid", y, x, dx, dim)
    if areas is None:  # no samples: zero, with dim reduced
        return y.sum(dim) * 0
    return areas.sum(dim)


def trapz(y, x=None, *, dx=None, dim=-1):
    """torch.trapz: the older name of trapezoid."""
    return trapezoid(y, x, dx=dx, dim=dim)


def cumulative_trapezoid(y, x=None, *, dx=None, dim=-1):
    """The running trapezoidal integral along dim (one entry fewer than y there)."""
    areas, dim = _intervals("cumulative_trapezoid", y, x, dx, dim)
    if areas is None:
        return y.narrow(dim, 0, 0)
    return areas.cumsum(dim)


# ------------------------------------------------------------------------ put / put_
def _dtype_letter(t):
    return {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}.get(
        str(t.dtype).replace("cagrad.", ""), str(t.dtype))


def put(input, index, source, accumulate=False):
    """input with source written (or added, accumulate=True) at index, index counting
    input's entries in row-major order (negative from the end); out of place."""
    from ._extra_ops import index_put
    if index.dtype is not int64:
        raise RuntimeError(f"put_(): Expected a long tensor for index, but got "
                           f"{_dtype_letter(index)}")
    if source.dtype != input.dtype:
        raise RuntimeError(f"put_(): self and source expected to have the same dtype, but got "
                           f"self.dtype = {_dtype_letter(input)} and source.dtype = "
                           f"{_dtype_letter(source)}")
    if source.numel() != index.numel():
        raise IndexError(f"put_(): Expected source and index to have the same number of "
                         f"elements, but got source.numel() = {source.numel()}, "
                         f"index.numel() = {index.numel()}")
    size = input.numel()
    positions = index.detach().numpy().reshape(-1).astype(np.int64)
    for p in positions:
        if not -size <= p < size:
            raise IndexError(f"out of range: tried to access index {p} on a tensor of "
                             f"{size} elements.")
    flat_index = tensor(np.where(positions < 0, positions + size, positions))
    flat = index_put(input.reshape(-1), (flat_index,), source.reshape(-1), accumulate)
    return flat.reshape(tuple(input.shape))


def put_(self, index, source, accumulate=False):
    """In place: put(self, index, source, accumulate), recorded in the autograd graph."""
    return inplace_assign(self, lambda x: put(x, index, source, accumulate),
                          (index, source))



