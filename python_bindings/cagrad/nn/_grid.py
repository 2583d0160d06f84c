"""affine_grid (2-D and 3-D) and grid_sample (4-D input; bilinear and nearest; padding
zeros, border and reflection; align_corners) as composites.

grid_sample maps each grid point from [-1, 1] to pixel coordinates, clips or reflects it
(border / reflection), then reads the neighbouring pixels with index_select from the
flattened input and blends them with the bilinear weights. Everything but floor/round is
a differentiable op, so the gradients of input and grid are torch's: a clipped coordinate
gets no gradient, a reflected one a negated one.
"""

import warnings

from .. import _functions
from .._creation import full
from .._more_ops import linspace
from .._more_ops2 import meshgrid
from .._dtype import int64

__all__ = ["affine_grid", "grid_sample"]

_ALIGN_WARNING = ("Default grid_sample and affine_grid behavior has changed to "
                  "align_corners=False since 1.3.0. Please specify align_corners=True if the "
                  "old behavior is desired. See the documentation of grid_sample for details.")


def _base(n, align_corners, dtype):
    """The n normalized coordinates of pixel centres (or corners) along one axis."""
    if n <= 1:
        return full((n,), 0.0, dtype=dtype) if n == 1 else linspace(-1, 1, 0, dtype=dtype)
    coords = linspace(-1, 1, n, dtype=dtype)
    return coords if align_corners else coords * ((n - 1) / n)


def affine_grid(theta, size, align_corners=None):
    """[N, H, W, 2] (or [N, D, H, W, 3]) sampling grid: theta [N, 2, 3] ([N, 3, 4]) applied
    to the normalized coordinates (x, y[, z], 1) of the output pixels."""
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    if not theta.dtype.is_floating_point:
        raise ValueError(f"Expected theta to have floating point type, but got {theta.dtype}")
    size = list(size)
    if len(size) not in (4, 5):
        raise NotImplementedError(f"affine_grid only supports 4D and 5D sizes, for 2D and 3D "
                                  f"affine transforms, respectively. Got size {size}.")
    dims = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[-2:]) != (dims, dims + 1):
        kind = "2D" if dims == 2 else "3D"
        raise ValueError(f"Expected a batch of {kind} affine matrices of shape "
                         f"Nx{dims}x{dims + 1} for size {size}. Got {theta.shape}.")
    spatial = size[2:]
    if align_corners and min(spatial) == 1:
        warnings.warn("Since version 1.3.0, affine_grid behavior has changed for unit-size "
                      "grids when align_corners=True. This is not an intended use case of "
                      "affine_grid. See the documentation of affine_grid for details.",
                      stacklevel=2)
    elif min(size) <= 0:
        raise ValueError(f"Expected non-zero, positive output size. Got {size}")
    axes = [_base(n, align_corners, theta.dtype) for n in reversed(spatial)]  # x, y[, z]
    mesh = meshgrid(*reversed(axes), indexing="ij")  # [z,] y, x order
    columns = list(reversed(mesh)) + [full(tuple(spatial), 1.0, dtype=theta.dtype)]
    base = _functions.stack(columns, -1).reshape(1, -1, dims + 1)
    grid = base @ theta.transpose(1, 2)
    return grid.reshape(size[0], *spatial, dims)


def _unnormalize(coord, size, align_corners):
    if align_corners:
        return (coord + 1) / 2 * (size - 1)
    return ((coord + 1) * size - 1) / 2


def _reflect(coord, low2, high2):
    """coord reflected into [low2 / 2, high2 / 2] (torch's reflect_coordinates)."""
    if low2 == high2:
        return coord * 0
    low, span = low2 / 2, (high2 - low2) / 2
    dist = (coord - low).abs()
    flips = (dist / span).floor().detach()
    extra = dist - flips * span
    even = (flips.remainder(2) == 0)
    return _functions.where(even, extra + low, span - extra + low)


def _source_coord(coord, size, padding_mode, align_corners):
    coord = _unnormalize(coord, size, align_corners)
    if padding_mode == "border":
        coord = coord.clamp(0, size - 1)
    elif padding_mode == "reflection":
        if align_corners:
            coord = _reflect(coord, 0, 2 * (size - 1))
        else:
            coord = _reflect(coord, -1, 2 * size - 1)
        coord = coord.clamp(0, size - 1)
    return coord


def _read(flat, ys, xs, height, width):
    """flat [N, C, H*W + 1] read at integer pixel (ys, xs) [N, P] (float tensors of whole
    numbers); out-of-range pixels read the zero sentinel. Returns [N, C, P]."""
    n, c = flat.shape[:2]
    inside = (ys >= 0) & (ys <= height - 1) & (xs >= 0) & (xs <= width - 1)
    sentinel = full(tuple(ys.shape), float(height * width), dtype=ys.dtype)
    index = _functions.where(inside, ys * width + xs, sentinel).to(int64)
    # one index_select per sample: the batch rows read different pixels
    rows = [flat[i].index_select(1, index[i]) for i in range(n)]
    return _functions.stack(rows, 0)


def grid_sample(input, grid, mode="bilinear", padding_mode="zeros", align_corners=None):
    """input [N, C, H, W] sampled at grid [N, Ho, Wo, 2] ((x, y) in [-1, 1]) -> [N, C, Ho, Wo]."""
    if mode not in ("bilinear", "nearest", "bicubic"):
        raise ValueError(f"nn.functional.grid_sample(): expected mode to be 'bilinear', "
                         f"'nearest' or 'bicubic', but got: '{mode}'")
    if padding_mode not in ("zeros", "border", "reflection"):
        raise ValueError(f"nn.functional.grid_sample(): expected padding_mode to be 'zeros', "
                         f"'border', or 'reflection', but got: '{padding_mode}'")
    if align_corners is None:
        warnings.warn(_ALIGN_WARNING, stacklevel=2)
        align_corners = False
    if mode == "bicubic" or input.ndim != 4:
        what = "mode='bicubic'" if mode == "bicubic" else f"{input.ndim}-D input"
        raise NotImplementedError(f"cagrad's grid_sample() does not support {what} (4-D "
                                  f"input, bilinear or nearest only; see docs/python-api.md)")
    n, c, height, width = input.shape
    if grid.ndim != 4 or grid.shape[0] != n or grid.shape[-1] != 2:
        raise RuntimeError(f"grid_sampler(): expected grid to have size {n} in first dimension "
                           f"and size 2 in last dimension, but got grid with sizes "
                           f"{list(grid.shape)}")
    if grid.dtype != input.dtype:
        raise RuntimeError("grid_sampler(): expected input and grid to have same dtype, but "
                           f"input has {input.dtype} and grid has {grid.dtype}")
    out_h, out_w = grid.shape[1:3]
    points = grid.reshape(n, -1, 2)
    xs = _source_coord(points[..., 0], width, padding_mode, align_corners)
    ys = _source_coord(points[..., 1], height, padding_mode, align_corners)
    flat = _functions.cat([input.reshape(n, c, -1), full((n, c, 1), 0.0, dtype=input.dtype)], 2)
    if mode == "nearest":
        out = _read(flat, ys.round().detach(), xs.round().detach(), height, width)
        # torch's grid gradient is zeros here (not None): tie the grid in with weight 0
        out = out + ((xs - xs.detach()) + (ys - ys.detach())).unsqueeze(1) * 0
        return out.reshape(n, c, out_h, out_w)
    x0, y0 = xs.floor().detach(), ys.floor().detach()
    wx1, wy1 = xs - x0, ys - y0
    wx0, wy0 = 1 - wx1, 1 - wy1
    out = 0
    for dy, wy in ((0, wy0), (1, wy1)):
        for dx, wx in ((0, wx0), (1, wx1)):
            weight = (wy * wx).unsqueeze(1)
            out = out + _read(flat, y0 + dy, x0 + dx, height, width) * weight
    return out.reshape(n, c, out_h, out_w)
