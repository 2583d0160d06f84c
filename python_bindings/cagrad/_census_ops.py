"""Top-level torch functions found missing by a census of dir(torch) (torch's names and
semantics): isin, angle, rsub, row_stack / atleast_3d / dstack, unravel_index, pdist and
torch.gradient. (_tensor_more.py has the Tensor-method ones: fmax, hsplit, the scatters...)

Differentiable ones are composites of existing cagrad ops (where, cat, narrow, norms), so
gradients and compiled-autograd capture come for free. isin and unravel_index compute on
numpy copies: their results are bool / int64, with no gradient in torch either.
"""

import builtins
import math

import numpy as np

from ._tensor import Tensor
from ._creation import get_default_dtype, tensor
from ._dtype import bool as bool_, float32, float64, int64


__all__ = ["alias_copy", "angle", "atleast_3d", "binomial", "cond", "constant_pad_nd",
           "convolution", "dstack", "feature_dropout", "feature_dropout_", "get_device_module",
           "gradient", "histogramdd", "is_distributed", "is_storage", "is_vulkan_available",
           "isin", "lu_solve", "lu_unpack", "norm_except_dim", "pdist", "row_stack", "rsub",
           "slice_copy", "split_with_sizes_copy", "unravel_index", "while_loop"]

_FLOATS = (float32, float64)
_range = builtins.range  # histogramdd takes a parameter named range


def _ca():
    # the package namespace, imported late: this module is loaded by cagrad/__init__.py
    import cagrad
    return cagrad


def _as_tensor(x, like=None):
    if isinstance(x, Tensor):
        return x
    dtype = like.dtype if like is not None and isinstance(x, float) is False else None
    if isinstance(x, bool):
        dtype = bool_
    elif isinstance(x, float) and (like is None or like.dtype not in _FLOATS):
        dtype = get_default_dtype()
    return tensor(x, dtype=dtype)


def _from_numpy(arr, dtype):
    # np.array, not ascontiguousarray: that one turns a 0-d result into shape (1,)
    return tensor(np.array(arr, order="C"), dtype=dtype)


# ------------------------------------------------------------------ elementwise
def isin(elements, test_elements, *, assume_unique=False, invert=False):
    """Whether each element of elements is in test_elements (either may be a scalar)."""
    if not isinstance(elements, Tensor) and not isinstance(test_elements, Tensor):
        raise TypeError("isin() received an invalid combination of arguments - got "
                        "(Number, Number), but expected at least one Tensor")
    a = elements.detach().numpy() if isinstance(elements, Tensor) else np.asarray(elements)
    b = test_elements.detach().numpy() if isinstance(test_elements, Tensor) \
        else np.asarray(test_elements)
    return _from_numpy(np.isin(a, b, invert=invert), bool_)


def angle(input):
    """The angle of a real number: pi for negatives, 0 otherwise, NaN kept; gradient 0."""
    ca = _ca()
    x = input if input.dtype in _FLOATS else input.to(get_default_dtype())
    pi, zero = tensor(math.pi, dtype=x.dtype), tensor(0.0, dtype=x.dtype)
    return x * 0 + ca.where(x < 0, pi, zero)


def rsub(input, other, *, alpha=1):
    """other - alpha * input."""
    return other - (input if alpha == 1 else input * alpha)


# ------------------------------------------------------------------ shapes
def row_stack(tensors):
    return _ca().vstack(tensors)


def atleast_3d(*tensors):
    """0-d -> (1, 1, 1), (n,) -> (1, n, 1), (m, n) -> (m, n, 1), as torch."""
    if len(tensors) == 1 and not isinstance(tensors[0], Tensor):
        tensors = tuple(tensors[0])
        return tuple(atleast_3d(t) for t in tensors)
    if len(tensors) > 1:
        return tuple(atleast_3d(t) for t in tensors)
    t = tensors[0]
    if t.dim() == 0:
        return t.reshape(1, 1, 1)
    if t.dim() == 1:
        return t.reshape(1, -1, 1)
    if t.dim() == 2:
        return t.unsqueeze(-1)
    return t


def dstack(tensors):
    if len(tensors) == 0:
        raise RuntimeError("dstack expects a non-empty TensorList")
    return _ca().cat([atleast_3d(t) for t in tensors], 2)


def unravel_index(indices, shape):
    """Flat indices into coordinates of shape: a tuple of int64 tensors, one per dim."""
    indices = indices if isinstance(indices, Tensor) else tensor(indices)
    if indices.dtype in _FLOATS or indices.dtype == bool_:
        raise TypeError(f"expected 'indices' to be integer dtype, but got "
                        f"{_ca().float32 if indices.dtype == float32 else indices.dtype}")
    shape = (shape,) if isinstance(shape, int) else tuple(shape)
    if any(s < 0 for s in shape):
        raise ValueError("'shape' cannot have negative values, but got "
                         f"{tuple(shape)}")
    # torch does no range check: coordinate k is (index // stride_k) mod shape_k, floored,
    # so out-of-range and negative indices wrap
    flat = indices.detach().numpy().astype(np.int64)
    coords, stride = [], 1
    for size in reversed(shape):
        coords.append(np.floor_divide(flat, stride) % size if size else flat * 0)
        stride *= size
    coords.reverse()
    return tuple(_from_numpy(np.asarray(c, dtype=np.int64), int64) for c in coords)


# ------------------------------------------------------------------ distances, norms
def pdist(input, p=2):
    """Distances between the rows of an (N, M) input for i < j, as a vector of N(N-1)/2."""
    if input.dim() != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.dim()}D")
    n = input.shape[0]
    rows, cols = np.triu_indices(n, 1)
    diff = input[_from_numpy(rows, int64)] - input[_from_numpy(cols, int64)]
    return _ca().linalg.vector_norm(diff, p, dim=1)


# ------------------------------------------------------------------ torch.gradient
def _edge_rows(f, d, n):
    return [f.narrow(d, i, 1) for i in range(n)], [f.narrow(d, f.shape[d] - n + i, 1)
                                                    for i in range(n)]


def _gradient_uniform(f, d, h, edge_order):
    size = f.shape[d]
    interior = (f.narrow(d, 2, size - 2) - f.narrow(d, 0, size - 2)) / (2 * h)
    (a0, a1, a2), (b0, b1, b2) = _edge_rows(f, d, 3) if edge_order == 2 and size >= 3 \
        else (_edge_rows(f, d, 2)[0] + [None], [None] + _edge_rows(f, d, 2)[1])
    if edge_order == 1:
        first, last = (a1 - a0) / h, (b2 - b1) / h
    else:
        first = (-1.5 * a0 + 2 * a1 - 0.5 * a2) / h
        last = (0.5 * b0 - 2 * b1 + 1.5 * b2) / h
    return _ca().cat([first, interior, last], d)


def _coef(values, f, d):
    # a per-position coefficient vector, shaped to broadcast along dim d of f
    shape = [1] * f.dim()
    shape[d] = len(values)
    return _from_numpy(np.asarray(values, dtype=np.float64), f.dtype).reshape(shape)


def _gradient_coords(f, d, x, edge_order):
    # numpy's non-uniform formulas: second order inside, first or second at the edges
    size = f.shape[d]
    hl, hr = x[1:-1] - x[:-2], x[2:] - x[1:-1]
    lo, mid, hi = f.narrow(d, 0, size - 2), f.narrow(d, 1, size - 2), f.narrow(d, 2, size - 2)
    interior = (lo * _coef(-hr / (hl * (hl + hr)), f, d)
                + mid * _coef((hr - hl) / (hl * hr), f, d)
                + hi * _coef(hl / (hr * (hl + hr)), f, d))
    (a0, a1, a2), (b0, b1, b2) = _edge_rows(f, d, 3) if size >= 3 else \
        (_edge_rows(f, d, 2)[0] + [None], [None] + _edge_rows(f, d, 2)[1])
    if edge_order == 1:
        first = (a1 - a0) / float(x[1] - x[0])
        last = (b2 - b1) / float(x[-1] - x[-2])
    else:
        d1, d2 = float(x[1] - x[0]), float(x[2] - x[1])
        first = (a0 * (-(2 * d1 + d2) / (d1 * (d1 + d2))) + a1 * ((d1 + d2) / (d1 * d2))
                 + a2 * (-d1 / (d2 * (d1 + d2))))
        d1, d2 = float(x[-2] - x[-3]), float(x[-1] - x[-2])
        first_last = (b0 * (d2 / (d1 * (d1 + d2))) + b1 * (-(d1 + d2) / (d1 * d2))
                      + b2 * ((2 * d2 + d1) / (d2 * (d1 + d2))))
        last = first_last
    return _ca().cat([first, interior, last], d)


def _gradient_spacing(spacing, dims, input, dim_given):
    if isinstance(spacing, (int, float)) and not isinstance(spacing, bool):
        return [float(spacing)] * len(dims)
    spacing = list(spacing)
    if len(spacing) != len(dims) and not dim_given:
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar, or a "
                           f"list of length equal to 'self.dim() = {input.dim()}', since dim "
                           f"argument was not given, but got a list of length {len(spacing)}")
    if len(spacing) != len(dims):
        raise RuntimeError(f"torch.gradient expected spacing to be unspecified, a scalar or "
                           f"it's spacing and dim arguments to have the same length, but got "
                           f"a spacing argument of length {len(spacing)} and a dim argument of "
                           f"length {len(dims)}.")
    out = []
    for s, d in zip(spacing, dims):
        if isinstance(s, Tensor):
            if s.dim() != 1 or s.shape[0] != input.shape[d]:
                raise RuntimeError("torch.gradient expected each tensor to be on the same "
                                   "device and have the size of the dimension it spaces")
            out.append(s.detach().numpy().astype(np.float64))
        else:
            out.append(float(s))
    return out


def gradient(input, *, spacing=1, dim=None, edge_order=1):
    """Central differences along each dim (one-sided at the edges), as torch.gradient: a
    tuple with one tensor per dim. spacing is a scalar, a list of scalars or a list of
    coordinate tensors (treated as constants: torch gives them no gradient either)."""
    if edge_order not in (1, 2):
        raise RuntimeError("torch.gradient only supports edge_order=1 and edge_order=2.")
    dims = list(range(input.dim())) if dim is None else \
        ([dim] if isinstance(dim, int) else list(dim))
    dims = [d % input.dim() for d in dims]
    for d in dims:
        if input.shape[d] < edge_order + 1:
            raise RuntimeError("torch.gradient expected each dimension size to be at least "
                               "edge_order+1")
    f = input if input.dtype in _FLOATS else input.to(get_default_dtype())
    results = []
    spacings = _gradient_spacing(spacing, dims, input, dim is not None)
    for d, h in zip(dims, spacings):
        if isinstance(h, np.ndarray):
            results.append(_gradient_coords(f, d, h, edge_order))
        else:
            results.append(_gradient_uniform(f, d, h, edge_order))
    return tuple(results)


# ------------------------------------------------------------------ control flow (eager)
def _check_pred(pred):
    if isinstance(pred, Tensor):
        if pred.numel() != 1:
            raise RuntimeError(f"Expected pred to be bool or single-element tensor, but got "
                               f"{pred}.")
        return bool(pred.item())
    if not isinstance(pred, (bool, int)):
        raise RuntimeError(f"Expected pred to be bool or tensor, but got {pred}.")
    return bool(pred)


def cond(pred, true_fn, false_fn, operands=()):
    """torch.cond run eagerly: calls the chosen branch on operands (a tuple or list). The
    other branch is not traced, so its outputs are not checked against the taken one's."""
    if not isinstance(operands, (tuple, list)):
        raise RuntimeError("Expect operands to be a tuple of possibly nested dict/list/tuple "
                           "that only consists of tensor leaves, but got "
                           f"{operands}.")
    if not callable(true_fn) or not callable(false_fn):
        raise RuntimeError("Expect both branches to be callable.")
    return (true_fn if _check_pred(pred) else false_fn)(*operands)


def while_loop(cond_fn, body_fn, carried_inputs):
    """torch.while_loop run eagerly: carried = body_fn(*carried) while cond_fn(*carried)."""
    if not isinstance(carried_inputs, (tuple, list)):
        raise RuntimeError("carried_inputs must be a tuple or list, got "
                           f"{type(carried_inputs)}")
    carried = tuple(carried_inputs)
    while _check_pred(cond_fn(*carried)):
        out = body_fn(*carried)
        carried = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(carried) != len(carried_inputs):
            raise RuntimeError(f"body_fn should return the same number of elements as "
                               f"carried_inputs, got {len(carried)} and "
                               f"{len(carried_inputs)}")
    return carried


# ------------------------------------------------------------------ functional leftovers
def _F():
    from .nn import functional
    return functional


def constant_pad_nd(input, pad, value=0):
    return _F().pad(input, list(pad), mode="constant", value=value)


def convolution(input, weight, bias, stride, padding, dilation, transposed, output_padding,
                groups):
    """aten's generic convolution: conv{1,2,3}d or conv_transpose{1,2,3}d by weight's rank."""
    n = weight.dim() - 2
    if n not in (1, 2, 3):
        raise RuntimeError(f"convolution: expected a 3-D, 4-D or 5-D weight, got {weight.dim()}-D")
    F = _F()
    if transposed:
        return getattr(F, f"conv_transpose{n}d")(input, weight, bias, stride, padding,
                                                  output_padding, groups, dilation)
    return getattr(F, f"conv{n}d")(input, weight, bias, stride, padding, dilation, groups)


def feature_dropout(input, p, train):
    """Zeroes whole channels (input[n, c]) with probability p, scaling the kept by 1/(1-p)."""
    if p < 0 or p > 1:
        raise RuntimeError(f"dropout probability has to be between 0 and 1, but got {p}")
    if not train or p == 0:
        return input
    if input.dim() < 2:
        raise RuntimeError("Feature dropout requires at least 2 dimensions in the input")
    ca = _ca()
    if p == 1:
        return input * 0
    shape = tuple(input.shape[:2]) + (1,) * (input.dim() - 2)
    keep = ca.bernoulli(ca.full(shape, 1 - p, dtype=input.dtype))
    return input * keep / (1 - p)


def feature_dropout_(input, p, train):
    return input.copy_(feature_dropout(input.detach(), p, train)) if train and p else input


def norm_except_dim(v, pow=2, dim=0):  # noqa: A002 - torch's parameter name
    """The pow-norm of v over every dim but dim (keepdim), or over all of v for dim=-1."""
    ca = _ca()
    if dim == -1:
        return ca.linalg.vector_norm(v, pow)
    others = [d for d in range(v.dim()) if d != dim % v.dim()]
    return ca.linalg.vector_norm(v, pow, dim=others, keepdim=True)


def binomial(count, prob, generator=None):
    """Binomial(count, prob) draws from cagrad's generator (no gradient, as in torch)."""
    from ._random import _numpy_rng
    for name, t in (("count", count), ("prob", prob)):
        if t.dtype not in _FLOATS:
            kind = "Long" if t.dtype == int64 else "Bool"
            raise ValueError(f"binomial only supports floating-point dtypes for {name}, got: "
                             f"{kind}")
    c, q = np.broadcast_arrays(count.detach().numpy(), prob.detach().numpy())
    draws = _numpy_rng("binomial", generator).binomial(c.astype(np.int64), q)
    return _from_numpy(draws.astype(np.float64), count.dtype)


# ------------------------------------------------------------------ histogramdd
class _HistogramddResult(tuple):
    """torch.return_types.histogramdd: (hist, bin_edges)."""

    def __new__(cls, hist, bin_edges):
        return super().__new__(cls, (hist, bin_edges))

    hist = property(lambda self: self[0])
    bin_edges = property(lambda self: self[1])


def histogramdd(input, bins, *, range=None, weight=None, density=False):  # noqa: A002
    """Counts of the points input[..., :] (D coordinates each) in a D-dim grid of bins:
    bins is an int, D ints or D edge tensors; range gives D (min, max) pairs flattened."""
    if input.dtype not in _FLOATS:
        raise RuntimeError(f"torch.histogramdd: input tensor and bins tensors should have the "
                           f"same dtype, but got input {input.dtype}")
    points = input.detach().numpy().reshape(-1, input.shape[-1])
    dims = points.shape[1]
    if isinstance(bins, (list, tuple)) and bins and isinstance(bins[0], Tensor):
        np_bins = [b.detach().numpy() for b in bins]
    else:
        np_bins = [bins] * dims if isinstance(bins, int) else list(bins)
    np_range = None if range is None else [(range[2 * i], range[2 * i + 1])
                                           for i in _range(dims)]
    w = None if weight is None else weight.detach().numpy().reshape(-1)
    hist, edges = np.histogramdd(points, bins=np_bins, range=np_range, weights=w,
                                 density=density)
    return _HistogramddResult(_from_numpy(hist, input.dtype),
                              [_from_numpy(e, input.dtype) for e in edges])




# ------------------------------------------------------------------ small predicates
def is_storage(obj):
    from ._storage import TypedStorage, UntypedStorage
    return isinstance(obj, (TypedStorage, UntypedStorage))


def is_distributed(input):
    return False


def is_vulkan_available():
    return False


def get_device_module(device=None):
    """torch.cpu for the CPU (or None), torch.cuda / torch.mps modules for those names."""
    ca = _ca()
    name = "cpu" if device is None else str(getattr(device, "type", device)).split(":")[0]
    if name not in ("cpu", "cuda", "mps"):
        raise RuntimeError(f"cagrad has device modules for cpu, cuda and mps only, not "
                           f"'{name}' (see docs/python-api.md)")
    return getattr(ca, name)


def _no_lu(name):
    def fn(*args, **kwargs):
        raise NotImplementedError(f"cagrad has no LU factorization (torch.{name}, torch.lu, "
                                  "torch.linalg.lu_factor); see docs/python-api.md")
    fn.__name__ = name
    return fn


lu_solve = _no_lu("lu_solve")
lu_unpack = _no_lu("lu_unpack")


def slice_copy(input, dim=0, start=None, end=None, step=1):
    index = [slice(None)] * input.dim()
    index[dim] = slice(start, end, step)
    return input[tuple(index)].clone()


def split_with_sizes_copy(input, split_sizes, dim=0):
    return tuple(t.clone() for t in _ca().split(input, list(split_sizes), dim))


def alias_copy(input):
    return input.clone()
