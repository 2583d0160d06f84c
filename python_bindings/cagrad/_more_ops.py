"""Everyday tensor functions built as composites of cagrad's differentiable ops.

Reductions/statistics (var, std, prod, norm, ...), shape helpers (flip, roll, repeat, ...)
and math constants. Each is a composition of existing ops, so autograd (eager and compiled)
differentiates it without a dedicated backward.
"""

import math
import warnings
import operator

import numpy as np

from . import _bool_ops
from . import _ops
from . import _functions as F

pi = math.pi
e = math.e
inf = math.inf
nan = math.nan
builtin_max = max  # the builtin, before any local name could shadow it


# ------------------------------------------------------------------------ statistics
def _reduced_dims(input, dim):
    """dim=None/int/sequence as a tuple of non-negative dims (None = every dim)."""
    ndim = input.dim()
    if dim is None:
        return tuple(range(ndim))
    dims = F._dims(dim, "var")
    return tuple(d + ndim if d < 0 else d for d in dims) if ndim else dims


def _var_args(dim, unbiased, correction, keepdim, fname):
    # torch accepts var(x, unbiased) and var(x, dim, unbiased, keepdim) besides correction=
    if isinstance(dim, bool):
        dim, unbiased = None, dim
    if unbiased is not None and correction is not None:
        raise TypeError(f"{fname}() received an invalid combination of arguments: "
                        f"unbiased and correction cannot both be given")
    if correction is None:
        correction = 1 if unbiased is None or unbiased else 0
    return dim, correction, keepdim


def _var_mean(input, dim, correction, keepdim):
    dims = _reduced_dims(input, dim)
    count = 1
    for d in dims:
        count *= input.shape[d]
    centre = F.mean(input, dims or None, keepdim=True)
    deviation = input - centre
    squares = F.sum(deviation * deviation, dims or None, keepdim=keepdim)
    # count - correction <= 0 gives inf/nan, as in torch
    variance = squares / builtin_max(count - correction, 0)
    mean_out = centre if keepdim else F.mean(input, dims or None, keepdim=False)
    return variance, mean_out


def var(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction, keepdim = _var_args(dim, unbiased, correction, keepdim, "var")
    return _var_mean(input, dim, correction, keepdim)[0]


def std(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    return var(input, dim, unbiased, keepdim, correction=correction).sqrt()


def var_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    dim, correction, keepdim = _var_args(dim, unbiased, correction, keepdim, "var_mean")
    return _var_mean(input, dim, correction, keepdim)


def std_mean(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    variance, mean_out = var_mean(input, dim, unbiased, keepdim, correction=correction)
    return variance.sqrt(), mean_out


def prod(input, dim=None, keepdim=False, *, dtype=None):
    """Product as successive multiplications of slices: exact gradients even with zeros."""
    if dtype is not None:
        input = F._cast(input, dtype)
    input = _bool_ops.reduce_input(input, "prod")  # torch multiplies bools into int64
    if dim is None:
        flat = input.reshape(-1)
        result = _prod_dim(flat, 0) if flat.shape[0] else F.sum(flat) * 0 + 1
        return result
    d = F._dim(dim, "prod")
    if input.dim() == 0:
        return input.clone()
    result = _prod_dim(input, d) if input.shape[d] else F.sum(input, d) * 0 + 1
    return result.unsqueeze(d) if keepdim else result


def _prod_dim(input, dim):
    slices = F.unbind(input, dim)
    result = slices[0]
    for piece in slices[1:]:
        result = result * piece
    return result


def norm(input, p="fro", dim=None, keepdim=False, dtype=None):
    if dtype is not None:
        input = F._cast(input, dtype)
    if not input.is_floating_point():  # torch's error (abs would refuse a bool otherwise)
        raise RuntimeError(f"linalg.vector_norm: Expected a floating point or complex tensor "
                           f"as input. Got {_bool_ops.TYPE_NAME[input._dtype]}")
    magnitude = input.abs()
    if p == "fro" or p == 2:
        # sqrt(sum x^2): the gradient at all-zero input is nan in cagrad, 0 in torch
        return F.sum(input * input, dim, keepdim=keepdim).sqrt()
    if p == 1:
        return F.sum(magnitude, dim, keepdim=keepdim)
    if p == math.inf:
        return F.amax(magnitude, () if dim is None else dim, keepdim=keepdim)
    if p == -math.inf:
        return F.amin(magnitude, () if dim is None else dim, keepdim=keepdim)
    if isinstance(p, (int, float)) and not isinstance(p, bool) and p > 0:
        return F.sum(F.pow(magnitude, p), dim, keepdim=keepdim) ** (1.0 / p)
    raise NotImplementedError(f"cagrad: norm with p={p!r} is not supported (p='fro', 'inf' "
                              f"or a positive number); see docs/python-api.md")


def count_nonzero(input, dim=None):
    # an int64 count has no gradient, so counting on the numpy view is exact and cheap
    from ._creation import tensor
    values = input.detach().numpy()
    axis = None if dim is None else tuple(_dim_list(dim))
    return tensor(np.count_nonzero(values, axis=axis))


# ------------------------------------------------------------------------ shape helpers
def _dim_list(dims):
    if isinstance(dims, int):
        return [dims]
    return [operator.index(d) for d in dims]


def flip(input, dims):
    from ._creation import arange
    result = input
    for d in _dim_list(dims):
        size = result.shape[d]
        reversed_index = arange(size - 1, -1, -1)
        result = F.index_select(result, d, reversed_index)
    return result


def roll(input, shifts, dims=None):
    if dims is None:
        return roll(input.reshape(-1), shifts, 0).reshape(input.shape)
    shift_list, dim_list = _dim_list(shifts), _dim_list(dims)
    if len(shift_list) != len(dim_list):
        raise RuntimeError(f"shifts and dimensions must align. shifts: {len(shift_list)}, "
                           f"dims:{len(dim_list)}")
    result = input
    for shift, d in zip(shift_list, dim_list):
        size = result.shape[d]
        if size == 0:
            continue
        shift %= size
        if shift:
            tail = F.narrow(result, d, size - shift, shift)
            head = F.narrow(result, d, 0, size - shift)
            result = F.cat([tail, head], d)
    return result


def _sizes(sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        return tuple(sizes[0])
    return tuple(sizes)


def repeat(input, *sizes):
    reps = _sizes(sizes)
    if len(reps) < input.dim():
        raise RuntimeError("Number of dimensions of repeat dims can not be smaller than "
                           "number of dimensions of tensor")
    lead = len(reps) - input.dim()
    shape = (1,) * lead + tuple(input.shape)
    # put a size-1 axis before each dim, expand it to the repeat count, fold it in
    spread = input.reshape([v for s in shape for v in (1, s)])
    grown = spread.expand([v for r, s in zip(reps, shape) for v in (r, s)])
    return grown.reshape([r * s for r, s in zip(reps, shape)])


def tile(input, dims):
    reps = tuple(dims)
    if len(reps) < input.dim():
        reps = (1,) * (input.dim() - len(reps)) + reps
    return repeat(input, reps)


def broadcast_to(input, size):
    return input.expand(tuple(size))


def broadcast_shapes(*shapes):
    ndim = builtin_max((len(s) for s in shapes), default=0)
    out = [1] * ndim
    for arg, shape in enumerate(shapes):
        for i, size in enumerate(shape):
            at = ndim - len(shape) + i
            if out[at] == 1:
                out[at] = size
            elif size not in (1, out[at]):
                raise RuntimeError(f"Attempting to broadcast a dimension of length {size} at "
                                   f"{at - ndim}! Mismatching argument at index {arg} had "
                                   f"{tuple(shape)}; but expected shape should be "
                                   f"broadcastable to {out}")
    from ._dtype import Size
    return Size(out)


def broadcast_tensors(*tensors):
    shape = broadcast_shapes(*(t.shape for t in tensors))
    # as in torch, a tensor already of the broadcast shape comes back itself, not a view:
    # Normal(loc, scale).loc is then loc, a leaf whose .grad fills
    return tuple(t if t.shape == shape else t.expand(shape) for t in tensors)


def atleast_1d(*tensors):
    return _atleast(tensors, lambda t: t.reshape(1) if t.dim() == 0 else t)


def atleast_2d(*tensors):
    def lift(t):
        return t.reshape(1, -1) if t.dim() < 2 else t
    return _atleast(tensors, lift)


def _atleast(tensors, lift):
    if len(tensors) == 1 and isinstance(tensors[0], (tuple, list)):
        return tuple(lift(t) for t in tensors[0])
    if len(tensors) == 1:
        return lift(tensors[0])
    return tuple(lift(t) for t in tensors)


def hstack(tensors):
    lifted = atleast_1d(list(tensors))
    return F.cat(list(lifted), 0 if lifted[0].dim() == 1 else 1)


def vstack(tensors):
    return F.cat(list(atleast_2d(list(tensors))), 0)


def column_stack(tensors):
    columns = [t.reshape(-1, 1) if t.dim() < 2 else t for t in tensors]
    return F.cat(columns, 1)


def repeat_interleave(input, repeats, dim=None):
    if not isinstance(repeats, int):
        raise NotImplementedError("cagrad: repeat_interleave takes an int repeats only; see "
                                  "docs/python-api.md")
    if dim is None:
        input, dim = input.reshape(-1), 0
    d = dim + input.dim() if dim < 0 else dim
    shape = list(input.shape)
    spread = input.unsqueeze(d + 1)
    grown = spread.expand(shape[:d + 1] + [repeats] + shape[d + 1:])
    return grown.reshape(shape[:d] + [shape[d] * repeats] + shape[d + 1:])


def outer(input, vec2):
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


def _diagonal_dims(dim1, dim2, ndim):
    """dim1 and dim2 of an ndim-d tensor as non-negative ints, with torch's errors."""
    dims = []
    top = ndim or 1  # a 0-d tensor takes dims -1 and 0, as everywhere in torch
    for d in (dim1, dim2):
        d = operator.index(d)
        if not -top <= d < top:
            raise IndexError(f"Dimension out of range (expected to be in range of "
                             f"[{-top}, {top - 1}], but got {d})")
        dims.append(d + top if d < 0 else d)
    if dims[0] == dims[1]:
        raise RuntimeError(f"diagonal dimensions cannot be identical {dim1}, {dim2}")
    return dims


def diagonal(input, offset=0, dim1=0, dim2=1):
    """torch.diagonal for any ndim: the diagonal of the (dim1, dim2) planes, appended as
    the last dim. A copy (torch returns a view), built from a permute, a reshape and a
    strided slice, so autograd differentiates it in eager and compiled mode."""
    d1, d2 = _diagonal_dims(dim1, dim2, input.dim())
    offset = operator.index(offset)
    rest = [d for d in range(input.dim()) if d not in (d1, d2)]
    planes = F.permute(input, rest + [d1, d2])
    rows, cols = input.shape[d1], input.shape[d2]
    length = builtin_max(0, min(rows, cols - offset) if offset >= 0 else
                         min(rows + offset, cols))
    flat = planes.reshape(list(planes.shape[:-2]) + [rows * cols])
    if length == 0:
        return flat[..., 0:0]
    start = offset if offset >= 0 else -offset * cols
    # entries of one diagonal sit cols + 1 apart in a plane's row-major flattening
    return flat[..., start:start + (length - 1) * (cols + 1) + 1:cols + 1]


def diag_embed(input, offset=0, dim1=-2, dim2=-1):
    """torch.diag_embed: the last dim of input on the offset diagonal of new (dim1, dim2)
    planes of an (ndim + 1)-d result, zeros elsewhere; a composite (differentiable)."""
    from ._creation import zeros
    if input.dim() < 1:
        raise IndexError("Dimension out of range (expected to be in range of [-1, 0], but "
                         "got -2)")
    ndim = input.dim() + 1
    d1, d2 = _diagonal_dims(dim1, dim2, ndim)
    offset = operator.index(offset)
    n, k = input.shape[-1], abs(offset)
    square = input.unsqueeze(-1) * eye(n, dtype=input.dtype)
    batch = list(input.shape[:-1])
    if k:
        # offset > 0 puts the square k columns right (k zero rows below it); < 0 k rows down
        side = zeros(batch + [n, k], dtype=input.dtype)
        band = zeros(batch + [k, n + k], dtype=input.dtype)
        if offset > 0:
            square = F.cat([F.cat([side, square], -1), band], -2)
        else:
            square = F.cat([band, F.cat([square, side], -1)], -2)
    # the planes are the last two dims; move them to d1 and d2 (the rest keep their order)
    order = [None] * ndim
    order[d1], order[d2] = ndim - 2, ndim - 1
    others = iter(range(ndim - 2))
    return F.permute(square, [o if o is not None else next(others) for o in order])


def diag(input, diagonal=0):
    if input.dim() == 2:
        return globals()["diagonal"](input, diagonal)
    if input.dim() != 1:
        raise RuntimeError(f"diag(): Supports 1D or 2D tensors. Got {input.dim()}D")
    from ._creation import zeros
    n, k = input.shape[0], abs(diagonal)
    square = input.reshape(-1, 1) * eye(n, dtype=input.dtype)
    side = zeros(n, k, dtype=input.dtype)
    band = zeros(k, n + k, dtype=input.dtype)
    # offset k > 0 shifts the square right (rows on top); k < 0 shifts it down
    if diagonal >= 0:
        return F.cat([F.cat([side, square], 1), band], 0)
    return F.cat([band, F.cat([square, side], 1)], 0)


def trace(input):
    if input.dim() != 2:
        raise RuntimeError("trace: expected a matrix, but got tensor with dim "
                           f"{input.dim()}")
    return F.sum(diagonal(input))


# ------------------------------------------------------------------------ creation
def eye(n, m=None, *, dtype=None, layout=None, device=None, requires_grad=False,
        pin_memory=False):
    from ._creation import _check_options, arange
    _check_options("eye", device, layout, pin_memory)
    cols = n if m is None else m
    rows_index = arange(n).reshape(-1, 1)
    cols_index = arange(cols).reshape(1, -1)
    out = F.eq(rows_index, cols_index)
    from ._creation import get_default_dtype
    out = F._cast(out, dtype or get_default_dtype())
    out.requires_grad_(requires_grad)
    return out


def _linear_steps(start, end, steps, np_dtype):
    # torch fills the first half forward from start and the second half back from end,
    # so both ends are exact; the same scheme here gives the same values
    if steps < 0:
        raise RuntimeError("number of steps must be non-negative")
    index = np.arange(steps, dtype=np_dtype)
    if steps <= 1:
        return np.full(steps, start, dtype=np_dtype)
    step = (np_dtype(end) - np_dtype(start)) / np_dtype(steps - 1)
    forward = np_dtype(start) + step * index
    backward = np_dtype(end) - step * (np_dtype(steps - 1) - index)
    return np.where(index < steps // 2, forward, backward).astype(np_dtype)


def _float_dtype(dtype):
    from ._creation import get_default_dtype
    from ._dtype import float64
    chosen = dtype or get_default_dtype()
    return chosen, (np.float64 if chosen == float64 else np.float32)


def linspace(start, end, steps, *, dtype=None, layout=None, device=None,
             requires_grad=False):
    from ._creation import _check_options, tensor
    _check_options("linspace", device, layout)
    chosen, np_dtype = _float_dtype(dtype)
    return tensor(_linear_steps(start, end, steps, np_dtype), dtype=chosen,
                  requires_grad=requires_grad)


def logspace(start, end, steps, base=10.0, *, dtype=None, layout=None, device=None,
             requires_grad=False):
    from ._creation import _check_options, tensor
    _check_options("logspace", device, layout)
    chosen, np_dtype = _float_dtype(dtype)
    exponents = _linear_steps(start, end, steps, np.float64)
    return tensor(np.power(np.float64(base), exponents).astype(np_dtype), dtype=chosen,
                  requires_grad=requires_grad)


# ------------------------------------------------------------------------ tests and masks
def isnan(input):
    return F.ne(input, input)  # only nan differs from itself


def isinf(input):
    if not input.is_floating_point():  # bool and int64 hold no infinity (abs refuses bools)
        return F.ne(input, input)
    return F.eq(input.abs(), math.inf)


def isfinite(input):
    if not input.is_floating_point():  # every bool and int64 is finite (bools cannot subtract)
        return F.eq(input, input)
    return F.eq(input - input, 0)  # x - x is nan exactly for nan and +-inf


def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    limits = np.finfo(np.float64 if str(input.dtype).endswith("float64") else np.float32)
    posinf = float(limits.max) if posinf is None else posinf
    neginf = float(limits.min) if neginf is None else neginf
    result = F.masked_fill(input, isnan(input), nan)
    result = F.masked_fill(result, F.eq(input, math.inf), posinf)
    return F.masked_fill(result, F.eq(input, -math.inf), neginf)


def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    if input._dtype != other._dtype:  # torch compares tensors of one dtype only
        raise RuntimeError(f"{_bool_ops.TYPE_NAME[input._dtype]} did not match "
                           f"{_bool_ops.TYPE_NAME[other._dtype]}")
    with _no_grad():
        gap = (input - other).abs()
        close = F.le(gap, atol + rtol * other.abs())
        close = F.logical_or(close, F.eq(input, other))  # equal infinities
        if equal_nan:
            close = F.logical_or(close, F.logical_and(isnan(input), isnan(other)))
    return close


def allclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    return bool(F.all(isclose(input, other, rtol, atol, equal_nan)).item())


def equal(input, other):
    if tuple(input.shape) != tuple(other.shape):
        return False
    return bool(np.array_equal(input.detach().numpy(), other.detach().numpy()))


def masked_select(input, mask):
    shape = broadcast_shapes(input.shape, mask.shape)
    flat_mask = F.ne(mask.expand(shape).reshape(-1), 0)
    return input.expand(shape).reshape(-1)[flat_mask]


def nonzero(input, *, as_tuple=False):
    from ._creation import tensor
    positions = np.argwhere(input.detach().numpy())
    if as_tuple:
        return tuple(tensor(positions[:, i].copy()) for i in range(positions.shape[1]))
    return tensor(positions.reshape(-1, input.dim()))


def sign(input):
    if input._dtype == _bool_ops.BOOL:  # torch: a bool's sign is itself
        return input.clone()
    with _no_grad():
        return (F.gt(input, 0).to(input.dtype) - F.lt(input, 0).to(input.dtype))


def _no_grad():
    from ._grad_mode import no_grad
    return no_grad()


# ------------------------------------------------------------------------ small names
class finfo:
    """Limits of a cagrad float dtype (float32, float64), as torch.finfo."""

    def __init__(self, type=None):
        from ._creation import get_default_dtype
        from ._dtype import float32, float64
        chosen = get_default_dtype() if type is None else type
        if chosen not in (float32, float64):
            raise TypeError(f"finfo(): cagrad has float32 and float64 only, not {chosen}; "
                            f"see docs/python-api.md")
        limits = np.finfo(np.float64 if chosen == float64 else np.float32)
        self.dtype = str(chosen).split(".")[-1]
        self.bits = limits.bits
        self.eps = float(limits.eps)
        self.max = float(limits.max)
        self.min = float(limits.min)
        self.tiny = self.smallest_normal = float(limits.tiny)
        self.resolution = 10.0 ** -int(limits.precision)

    def __repr__(self):
        return (f"finfo(resolution={self.resolution}, min={self.min}, max={self.max}, "
                f"eps={self.eps}, smallest_normal={self.tiny}, tiny={self.tiny}, "
                f"dtype={self.dtype})")


class iinfo:
    """Limits of cagrad's integer dtype (int64), as torch.iinfo."""

    def __init__(self, type):
        from ._dtype import int64
        if type != int64:
            raise TypeError(f"iinfo(): cagrad has int64 only as integer dtype, not {type}; "
                            f"see docs/python-api.md")
        limits = np.iinfo(np.int64)
        self.dtype, self.bits = "int64", limits.bits
        self.max, self.min = int(limits.max), int(limits.min)

    def __repr__(self):
        return f"iinfo(min={self.min}, max={self.max}, dtype={self.dtype})"


_settings = {"deterministic": False, "warn_only": False, "matmul_precision": "highest"}


def use_deterministic_algorithms(mode, *, warn_only=False):
    # cagrad's kernels are deterministic already: the setting is recorded for the getters
    if not isinstance(mode, bool):
        raise TypeError("use_deterministic_algorithms(): argument 'mode' must be bool, "
                        f"not {type(mode).__name__}")
    _settings["deterministic"], _settings["warn_only"] = mode, warn_only


def are_deterministic_algorithms_enabled():
    return _settings["deterministic"]


def is_deterministic_algorithms_warn_only_enabled():
    return _settings["warn_only"]


def set_float32_matmul_precision(precision):
    # recorded only: cagrad's float32 matmul always computes in full float32
    if precision not in ("highest", "high", "medium"):
        # torch warns and keeps the current setting
        warnings.warn(f"{precision} is not one of 'highest', 'high', or 'medium'; the "
                      f"current set_float32_matmul_precision call has no effect.")
        return
    _settings["matmul_precision"] = precision


def get_float32_matmul_precision():
    return _settings["matmul_precision"]


# ------------------------------------------------------------------------ in-place methods
# Computed out of place, then self takes the result: in the graph its values and history
# (grad_fn is the op's node, ClampBackward1, as PyTorch's), else its values through copy_,
# which bumps the version counter; an int64 self refuses a float result (_ops.inplace_assign).
def clamp_(self, min=None, max=None):
    return _ops.inplace_assign(self, lambda x: F.clamp(x, min, max), (min, max))


def masked_fill_(self, mask, value):
    return _ops.inplace_assign(self, lambda x: F.masked_fill(x, mask, value), (mask, value))


def addcmul_(self, tensor1, tensor2, *, value=1):
    return _ops.inplace_assign(self, lambda x: addcmul(x, tensor1, tensor2, value=value),
                               (tensor1, tensor2))


def addcdiv_(self, tensor1, tensor2, *, value=1):
    return _ops.inplace_assign(self, lambda x: addcdiv(x, tensor1, tensor2, value=value),
                               (tensor1, tensor2))


def addcmul(input, tensor1, tensor2, *, value=1):
    input, tensor1, tensor2 = _bool_ops.promoted(input, tensor1, tensor2)  # torch's dtype
    return input + value * (tensor1 * tensor2)


_ADDCDIV_INTEGER_ERROR = (
    "Integer division with addcdiv is no longer supported, and in a future  release addcdiv "
    "will perform a true division of tensor1 and tensor2. The historic addcdiv behavior can "
    "be implemented as (input + value * torch.trunc(tensor1 / tensor2)).to(input.dtype) for "
    "integer inputs and as (input + value * tensor1 / tensor2) for float inputs. The future "
    "addcdiv behavior is just the latter implementation: (input + value * tensor1 / tensor2), "
    "for all dtypes.")


def addcdiv(input, tensor1, tensor2, *, value=1):
    if not (tensor1.is_floating_point() or tensor2.is_floating_point()):
        raise RuntimeError(_ADDCDIV_INTEGER_ERROR)  # torch's, for int64 and bool divisions
    input, tensor1, tensor2 = _bool_ops.promoted(input, tensor1, tensor2)  # torch's dtype
    return input + value * (tensor1 / tensor2)


def lerp(input, end, weight):
    input, end, weight = _bool_ops.lerp_operands(input, end, weight)
    return input + weight * (end - input)


def lerp_(self, end, weight):
    return _bool_ops.copy_result(self, lerp(self, end, weight))


def uniform_(self, a=0.0, b=1.0, *, generator=None):
    from ._creation import rand
    draw = rand(tuple(self.shape), dtype=self.dtype, generator=generator)
    return self.copy_(draw * (b - a) + a)


def normal_(self, mean=0.0, std=1.0, *, generator=None):
    from ._creation import randn
    draw = randn(tuple(self.shape), dtype=self.dtype, generator=generator)
    return self.copy_(draw * std + mean)
