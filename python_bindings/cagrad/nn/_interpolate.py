"""nn.functional.interpolate (and upsample*) as index_select composites.

Each spatial dim is resampled on its own (all these modes are separable): 'nearest' /
'nearest-exact' pick one source index per output position (index_select, whose backward
adds the gradient back to the picked rows); 'linear' / 'bilinear' / 'trilinear' mix two
neighbouring rows with weights 1-lambda and lambda; 'bicubic' mixes four (clamped at the
edges) with the cubic convolution weights. The indices and weights are computed
in NumPy with PyTorch's formulas and precision (float32 for nearest's scale; the input's
dtype for the linear weights), so the picked rows match PyTorch's exactly.
"""

import math
import operator
import warnings

import numpy as np

from .._creation import tensor as _as_tensor
from .._dtype import float32, int64
from . import functional as F

__all__ = ["interpolate", "upsample", "upsample_nearest", "upsample_bilinear"]

_MODES = ("nearest", "linear", "bilinear", "bicubic", "trilinear", "area", "nearest-exact",
          "lanczos")
_INTERPOLATING = ("linear", "bilinear", "bicubic", "trilinear")
_RANK_OF_MODE = {"linear": 3, "bilinear": 4, "trilinear": 5}
_CUBIC_A = -0.75  # the cubic convolution kernel's parameter (Keys), as PyTorch
_DOCS = "see docs/python-api.md"


def _spatial_sizes(input, size, scale_factor, recompute_scale_factor):
    """(output sizes, scale factors or Nones) for each spatial dim, as PyTorch reads them."""
    dims = input.ndim - 2
    spatial = list(input.shape[2:])
    if size is not None and scale_factor is not None:
        raise ValueError("only one of size or scale_factor should be defined")
    if size is not None:
        if recompute_scale_factor:
            raise ValueError("recompute_scale_factor is not meaningful with an explicit size.")
        sizes = _per_dim(size, dims, spatial, "output size of", "output size in (o1, o2, ...,oK)")
        if not all(isinstance(s, int) or hasattr(s, "__index__") for s in sizes):
            raise TypeError(f"expected size to be one of int or Tuple[int] or Tuple[int, int] "
                            f"or Tuple[int, int, int], but got size with types "
                            f"{[type(s) for s in sizes]}")
        return [operator.index(s) for s in sizes], [None] * dims
    if scale_factor is None:
        raise ValueError("either size or scale_factor should be defined")
    scales = _per_dim(scale_factor, dims, spatial, "scale_factor of shape",
                      "scale_factor in (s1, s2, ...,sK)")
    sizes = [int(math.floor(n * float(s))) for n, s in zip(spatial, scales)]
    if recompute_scale_factor:
        return sizes, [None] * dims
    return sizes, [float(s) for s in scales]


def _per_dim(value, dims, spatial, what, form):
    if not isinstance(value, (list, tuple)):
        return [value] * dims
    if len(value) != dims:
        raise ValueError(f"Input and {what.split()[0]} must have the same number of spatial "
                         f"dimensions, but got input with spatial dimensions of {spatial} and "
                         f"{what} {list(value)}. Please provide input tensor in (N, C, d1, d2, "
                         f"...,dK) format and {form} format.")
    return list(value)


def _nearest_indices(in_size, out_size, scale, exact):
    """The source row of each output row: floor((dst [+ 0.5]) * s) in float32, s = 1/scale
    when a scale factor is given, else in/out (PyTorch's nearest / nearest-exact)."""
    step = np.float32(1.0 / scale) if scale else np.float32(in_size / out_size)
    dst = np.arange(out_size, dtype=np.float32) + np.float32(0.5 if exact else 0.0)
    src = np.floor(dst * step).astype(np.int64)
    return np.minimum(src, in_size - 1)


def _linear_weights(in_size, out_size, scale, align_corners, np_dtype):
    """(lower index, upper index, lambda) per output row, in the input's precision."""
    one = np_dtype(1)
    if align_corners:
        step = np_dtype((in_size - 1) / (out_size - 1)) if out_size > 1 else np_dtype(0)
        src = np.arange(out_size, dtype=np_dtype) * step
    else:
        step = np_dtype(1.0 / scale) if scale and scale > 0 else np_dtype(in_size / out_size)
        src = (np.arange(out_size, dtype=np_dtype) + np_dtype(0.5)) * step - np_dtype(0.5)
        src = np.maximum(src, np_dtype(0))
    low = src.astype(np.int64)
    lam = np.clip(src - low.astype(np_dtype), 0, one).astype(np_dtype)
    high = low + (low < in_size - 1)
    return low, high, lam


def _cubic_weights(in_size, out_size, scale, align_corners, np_dtype):
    """(four clamped source rows, four weights) per output row for bicubic: the source
    position is not clamped at 0 (unlike linear), the taps are."""
    if align_corners:
        step = np_dtype((in_size - 1) / (out_size - 1)) if out_size > 1 else np_dtype(0)
        src = np.arange(out_size, dtype=np_dtype) * step
    else:
        step = np_dtype(1.0 / scale) if scale and scale > 0 else np_dtype(in_size / out_size)
        src = (np.arange(out_size, dtype=np_dtype) + np_dtype(0.5)) * step - np_dtype(0.5)
    base = np.floor(src)
    t = (src - base).astype(np_dtype)
    a = np_dtype(_CUBIC_A)

    def near(x):  # |x| <= 1
        return ((a + 2) * x - (a + 3)) * x * x + 1

    def far(x):  # 1 < |x| < 2
        return ((a * x - 5 * a) * x + 8 * a) * x - 4 * a

    one = np_dtype(1)
    weights = [far(t + one), near(t), near(one - t), far(2 * one - t)]
    rows = [np.clip(base.astype(np.int64) + k, 0, in_size - 1) for k in (-1, 0, 1, 2)]
    return rows, [w.astype(np_dtype) for w in weights]


def _resample_cubic(x, dim, in_size, out_size, scale, align_corners):
    np_dtype = np.float32 if x.dtype == float32 else np.float64
    rows, weights = _cubic_weights(in_size, out_size, scale, align_corners, np_dtype)
    shape = [1] * x.ndim
    shape[dim] = out_size
    total = None
    for tap_rows, tap_weights in zip(rows, weights):
        term = _select(x, dim, tap_rows) * _as_tensor(tap_weights.reshape(shape),
                                                       dtype=x.dtype)
        total = term if total is None else total + term
    return total


def _select(x, dim, rows):
    return x.index_select(dim, _as_tensor(rows, dtype=int64))


def _resample_linear(x, dim, in_size, out_size, scale, align_corners):
    np_dtype = np.float32 if x.dtype == float32 else np.float64
    low, high, lam = _linear_weights(in_size, out_size, scale, align_corners, np_dtype)
    shape = [1] * x.ndim
    shape[dim] = out_size
    lam_t = _as_tensor(lam.reshape(shape), dtype=x.dtype)
    return _select(x, dim, low) * (1 - lam_t) + _select(x, dim, high) * lam_t


def _check_mode(input, mode, align_corners, antialias):
    if (mode not in _MODES or input.ndim not in (3, 4, 5)
            or (mode == "bicubic" and input.ndim != 4)):
        raise NotImplementedError(f"Input Error: Only 3D, 4D and 5D input Tensors supported "
                                  f"(got {input.ndim}D) for the modes: nearest | linear | "
                                  f"bilinear | bicubic | trilinear | lanczos | area | "
                                  f"nearest-exact (got {mode})")
    if align_corners is not None and mode not in _INTERPOLATING:
        raise ValueError("align_corners option can only be set with the interpolating modes: "
                         "linear | bilinear | bicubic | trilinear")
    rank = _RANK_OF_MODE.get(mode)
    if rank is not None and input.ndim != rank:
        raise NotImplementedError(f"Got {input.ndim}D input, but {mode} mode needs {rank}D "
                                  f"input")
    if antialias and not (mode in ("bilinear", "bicubic", "lanczos") and input.ndim == 4):
        raise ValueError("Anti-alias option is restricted to bilinear, bicubic, and lanczos "
                         "modes and requires a 4-D tensor as input")


def _unsupported(input, mode, antialias):
    if antialias:
        F._unsupported("interpolate", "antialias=True", f"; {_DOCS}")
    if mode == "lanczos":
        raise ValueError("Lanczos mode requires antialias=True")
    if mode == "area" and input.ndim == 5:
        F._unsupported("interpolate", "mode='area' on 5-D (volumetric) input", f"; {_DOCS}")


def interpolate(input, size=None, scale_factor=None, mode="nearest", align_corners=None,
                recompute_scale_factor=None, antialias=False):
    """Resamples the spatial dims of [N, C, L], [N, C, H, W] or [N, C, D, H, W] input to
    size (or by scale_factor): modes 'nearest', 'nearest-exact', 'linear' (3-D),
    'bilinear' and 'bicubic' (4-D), 'trilinear' (5-D), 'area' (adaptive average pooling;
    3-D and 4-D)."""
    F._tensor("interpolate", "input", input)
    _check_mode(input, mode, align_corners, antialias)
    sizes, scales = _spatial_sizes(input, size, scale_factor,
                                   recompute_scale_factor or (mode == "area" and size is None))
    _unsupported(input, mode, antialias)
    spatial = list(input.shape[2:])
    if min(spatial) <= 0 or min(sizes) <= 0:
        raise RuntimeError(_size_message(spatial, sizes))
    if mode == "area":
        return _area(input, sizes)
    x = input
    for i, (in_size, out_size, scale) in enumerate(zip(spatial, sizes, scales)):
        dim = 2 + i
        if mode in ("nearest", "nearest-exact"):
            x = _select(x, dim, _nearest_indices(in_size, out_size, scale,
                                                 mode == "nearest-exact"))
        elif mode == "bicubic":
            x = _resample_cubic(x, dim, in_size, out_size, scale, bool(align_corners))
        else:
            x = _resample_linear(x, dim, in_size, out_size, scale, bool(align_corners))
    return x


def _size_message(spatial, sizes):
    names = {1: "W", 2: "HW", 3: "DHW"}[len(spatial)]
    given = ", ".join(f"{n}: {s}" for n, s in zip(names, spatial))
    wanted = ", ".join(f"{n}: {s}" for n, s in zip(names, sizes))
    return (f"Input and output sizes should be greater than 0, but got input ({given}) "
            f"output ({wanted})")


def _area(input, sizes):
    if input.ndim == 4:
        return F.adaptive_avg_pool2d(input, tuple(sizes))
    # a length is a height-1 image
    return F.adaptive_avg_pool2d(input.unsqueeze(2), (1, sizes[0])).squeeze(2)


def _deprecated(name):
    warnings.warn(f"`nn.functional.{name}` is deprecated. Use `nn.functional.interpolate` "
                  f"instead.", stacklevel=3)


def upsample(input, size=None, scale_factor=None, mode="nearest", align_corners=None):
    """Deprecated (as in PyTorch) in favour of interpolate, which it calls."""
    _deprecated("upsample")
    return interpolate(input, size, scale_factor, mode, align_corners)


def upsample_nearest(input, size=None, scale_factor=None):
    _deprecated("upsample_nearest")
    return interpolate(input, size, scale_factor, mode="nearest")


def upsample_bilinear(input, size=None, scale_factor=None):
    _deprecated("upsample_bilinear")
    return interpolate(input, size, scale_factor, mode="bilinear", align_corners=True)
