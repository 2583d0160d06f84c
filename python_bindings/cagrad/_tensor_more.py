"""More of torch 2.13's Tensor methods (and the torch.* functions of the same names): the
ones real programs call that cagrad lacked. See docs/python-api.md, "More Tensor methods".

Everything is a composite of existing cagrad ops, so gradients and compiled-autograd capture
come from those ops. Integer-only ops (gcd, lcm) and the bit-level float ops (frexp's
exponent, nextafter) compute their values with numpy: they have no gradient to carry, or
a simple one that a small autograd.Function supplies. In-place forms go through
_ops.inplace_assign, so they are recorded in the autograd graph like clamp_ or addcmul_.
"""

import sys
import warnings
from collections import namedtuple

import numpy as np

from . import _bool_ops, _ops
from ._dtype import float64, int64
from .autograd import Function

_DOCS = "see docs/python-api.md"


def _ca():
    """The cagrad package (this module is imported while it initialises)."""
    return sys.modules[__package__]


def _torch_name(dtype):
    """torch's short dtype name in messages (Float, Double, Long, Bool)."""
    return {"float32": "Float", "float64": "Double", "int64": "Long", "bool": "Bool"}[
        dtype._name]


# ---------------------------------------------------------------- small queries and views


def ravel(input):
    return input.reshape(-1)


def positive(input):
    if input.dtype is _ca().bool:
        raise RuntimeError("The `+` operator, on a bool tensor is not supported.")
    return input  # torch returns the tensor itself


def is_nonzero(input):
    n = input.numel()
    if n == 0:
        raise RuntimeError("Boolean value of Tensor with no values is ambiguous")
    if n > 1:
        raise RuntimeError("Boolean value of Tensor with more than one value is ambiguous")
    return bool(input.item() != 0)  # NaN is nonzero, as in torch


def is_same_size(input, other):
    return tuple(input.shape) == tuple(other.shape)


def is_signed(input):
    return input.dtype is not _ca().bool  # float32/float64/int64 are signed


def _false(input):
    """is_complex / is_conj / is_neg / is_inference: cagrad tensors are real, and
    inference_mode tensors are ordinary ones."""
    return False


def _itself(input):
    """conj / resolve_conj / resolve_neg of a real tensor: the tensor itself (as torch)."""
    return input


def _output_nr(self):
    return _ca()._C.output_nr(self)


def _itemsize(self):
    return self.dtype.itemsize


def _nbytes(self):
    return self.numel() * self.dtype.itemsize


def isposinf(input):
    if not input.is_floating_point():
        return _ca().zeros_like(input, dtype=_ca().bool)
    return input == float("inf")


def isneginf(input):
    if not input.is_floating_point():
        return _ca().zeros_like(input, dtype=_ca().bool)
    return input == float("-inf")


def isreal(input):
    return _ca().ones_like(input, dtype=_ca().bool)  # no complex tensors in cagrad


def _no_dtype(method, torch_dtype):
    def refuse(self, memory_format=None):
        raise TypeError(f"cagrad does not compute in cagrad.{torch_dtype} (Tensor.{method}()): "
                        f"its tensors are cagrad.float32, cagrad.float64, cagrad.int64 or "
                        f"cagrad.bool ({_DOCS}); use Tensor.long() for integers")

    refuse.__name__ = refuse.__qualname__ = method
    return refuse


def adjoint(input):
    if input.dim() < 2:
        raise RuntimeError(f"tensor.adjoint() is only supported on matrices or batches of "
                           f"matrices. Got {input.dim()}-D tensor.")
    return input.transpose(-2, -1)


def _mH(self):
    if self.dim() < 2:
        raise RuntimeError(f"tensor.mH is only supported on matrices or batches of matrices. "
                           f"Got {self.dim()}-D tensor.")
    return self.transpose(-2, -1)


def _H(self):
    if self.dim() == 0:
        warnings.warn("Tensor.H is deprecated on 0-D tensors. Consider using x.conj().")
        return self
    if self.dim() != 2:
        hint = " For batches of matrices, consider using tensor.mH" if self.dim() > 2 else ""
        raise RuntimeError(f"tensor.H is only supported on matrices (2-D tensors). Got "
                           f"{self.dim()}-D tensor.{hint}")
    return self.transpose(0, 1)


# ---------------------------------------------------------------- elementwise math


class _NoDerivative(Function):
    """Values from fn(*inputs); a backward through them raises torch's 'not implemented'
    error (torch's heaviside has no derivative)."""

    @staticmethod
    def forward(ctx, name, fn, *inputs):
        ctx.op_name = name
        return fn(*inputs)

    @staticmethod
    def backward(ctx, *grads):
        raise RuntimeError(f"derivative for {ctx.op_name} is not implemented")


class _FirstGets(Function):
    """Values given; the gradient flows to the first input where it differs from the
    second, zeros to the second (torch's nextafter derivative: none where they are
    equal, the result being the second then)."""

    @staticmethod
    def forward(ctx, input, other, values):
        ctx.shapes = input.shape, other.shape
        ctx.mask = (input != other).to(input.dtype)
        return values

    @staticmethod
    def backward(ctx, grad):
        shape, other_shape = ctx.shapes
        return ((grad * ctx.mask).sum_to_size(shape),
                _ca().zeros(other_shape, dtype=grad.dtype), None)


class _ZeroGrad(Function):
    """Values given, zero gradients to the tensor inputs: keeps a comparison written in
    place (eq_, lt_, ...) in the graph, as torch's EqBackward does."""

    @staticmethod
    def forward(ctx, values, *inputs):
        ctx.shapes = [(t.shape, t.dtype) for t in inputs]
        return values

    @staticmethod
    def backward(ctx, grad):
        zeros = _ca().zeros
        return (None,) + tuple(zeros(shape, dtype=dtype) for shape, dtype in ctx.shapes)


def _in_graph_comparison(fn):
    """x <- fn(x, *args) cast to x's dtype, still in the graph when an operand is (zero
    gradient)."""
    def compute(x, *args, **kwargs):
        values = fn(x, *args, **kwargs).to(x.dtype)
        grads = [t for t in (x,) + args if _is_tensor(t) and t.requires_grad
                 and t.is_floating_point()]
        return _ZeroGrad.apply(values, *grads) if grads else values

    return compute


def _is_tensor(x):
    return isinstance(x, _ca().Tensor)


def fmax(input, other):
    a, b = _bool_ops.promoted_pair(input, other)
    # a wins where it is the larger or b is NaN: NaN only when both are (torch's rule,
    # and the gradient goes to the same side as torch's)
    return _ca().where(_ca().logical_or(a >= b, b.isnan()), a, b)


def fmin(input, other):
    a, b = _bool_ops.promoted_pair(input, other)
    return _ca().where(_ca().logical_or(a <= b, b.isnan()), a, b)


def _as_double(x):
    return x.double() if hasattr(x, "double") else float(x)


def float_power(input, exponent):
    """pow computed in float64 whatever the operands (torch's float_power)."""
    return _ca().pow(_as_double(input), _as_double(exponent))


def float_power_(self, exponent):
    if self.dtype is not float64:
        raise RuntimeError(f"the base given to float_power_ has dtype {_torch_name(self.dtype)}"
                           f" but the operation's result requires dtype Double")
    return _ops.inplace_assign(self, lambda x: float_power(x * 1, exponent), (exponent,))


def _heaviside_values(x, values):
    ca = _ca()
    return ca.where(x == 0, values, (x > 0).to(x.dtype))


def heaviside(input, values):
    if input.dtype is not values.dtype:
        raise RuntimeError("heaviside is not yet implemented for tensors with different "
                           "dtypes.")
    return _NoDerivative.apply("aten::heaviside", _heaviside_values, input, values)


def heaviside_(self, values):
    return _ops.inplace_assign(self, lambda x: heaviside(x, values), (values,))


def _integer_pair(name, input, other):
    for t in (input, other):
        if t.dtype is not int64:
            raise NotImplementedError(f'"{name}_cpu" not implemented for '
                                      f"'{_torch_name(t.dtype)}'")
    return input.detach().numpy(), other.detach().numpy()


def gcd(input, other):
    a, b = _integer_pair("gcd", input, other)
    return _ca().tensor(np.gcd(a, b), dtype=int64)


def lcm(input, other):
    a, b = _integer_pair("lcm", input, other)
    return _ca().tensor(np.lcm(a, b), dtype=int64)


def gcd_(self, other):
    return _ops.inplace_assign(self, lambda x: gcd(x, other), (other,))


def lcm_(self, other):
    return _ops.inplace_assign(self, lambda x: lcm(x, other), (other,))


def _float_result_dtype(*tensors):
    ca = _ca()
    dtype = ca.result_type(*tensors)
    return dtype if dtype.is_floating_point else ca.get_default_dtype()


def ldexp(input, other):
    """input * 2**other, the power taken in the result's float dtype (a float64 input
    with a large exponent does not overflow float32)."""
    if not _is_tensor(other):
        other = _ca().tensor(other)
    dtype = _float_result_dtype(input, other)
    return input * _ca().pow(2.0, other.to(dtype))


def ldexp_(self, other):
    if not self.is_floating_point():
        raise RuntimeError(f"ldexp can't be cast to the desired output type "
                           f"{_torch_name(self.dtype)}")
    return _ops.inplace_assign(self, lambda x: ldexp(x, other), (other,))


frexp_result = namedtuple("frexp", ["mantissa", "exponent"])


def frexp(input):
    """(mantissa, exponent) with input = mantissa * 2**exponent, |mantissa| in [0.5, 1).
    The exponent is int64 (torch: int32, a dtype cagrad lacks); the mantissa is
    input * 2**-exponent, so its gradient is torch's (grad / 2**exponent)."""
    if not input.is_floating_point():
        raise RuntimeError("torch.frexp() only supports floating-point dtypes")
    _, e = np.frexp(input.detach().numpy())
    exponent = _ca().tensor(e.astype(np.int64), dtype=int64)
    # 2**-e in two halves: for a subnormal input 2**-e alone overflows
    half = (-exponent).div(2, rounding_mode="floor")
    scale = [_ca().pow(2.0, k.to(input.dtype)) for k in (half, -exponent - half)]
    return frexp_result(input * scale[0] * scale[1], exponent)


def nextafter(input, other):
    a, b = _bool_ops.promoted_pair(input, other)
    if not a.is_floating_point():
        raise NotImplementedError(f'"nextafter_cpu" not implemented for '
                                  f"'{_torch_name(a.dtype)}'")
    values = np.nextafter(*np.broadcast_arrays(a.detach().numpy(), b.detach().numpy()))
    result = _ca().tensor(np.ascontiguousarray(values), dtype=a.dtype)
    if a.requires_grad or b.requires_grad:
        return _FirstGets.apply(a, b, result)
    return result


def nextafter_(self, other):
    return _ops.inplace_assign(self, lambda x: nextafter(x, other), (other,))


def dist(input, other, p=2):
    return _ca().linalg.vector_norm(input - other, ord=p)


def _check_renorm(p, maxnorm):
    if not p > 0:
        raise RuntimeError("renorm: non-positive-norm not supported")
    if maxnorm < 0:
        raise RuntimeError(f"renorm: expected maxnorm to be >= 0 but got {maxnorm}")


def renorm(input, p, dim, maxnorm):
    """Each slice along dim whose p-norm exceeds maxnorm scaled to norm maxnorm (torch's
    factor maxnorm / (norm + 1e-7), differentiated through the norm as torch does)."""
    _check_renorm(p, maxnorm)
    if input.dim() < 2:
        raise RuntimeError(f"renorm: input needs at least 2 dimensions, got {input.dim()} "
                           f"dimensions")
    dim = dim % input.dim()
    others = [d for d in range(input.dim()) if d != dim]
    norm = _ca().linalg.vector_norm(input, ord=p, dim=others, keepdim=True)
    factor = _ca().where(norm > maxnorm, maxnorm / (norm + 1e-7), _ca().ones_like(norm))
    return input * factor


def renorm_(self, p, dim, maxnorm):
    # x * 1: the norm's inner nodes save their input, which must not be self (written over)
    return _ops.inplace_assign(self, lambda x: renorm(x * 1, p, dim, maxnorm))


def hardshrink(input, lambd=0.5):
    from .nn import functional as F
    return F.hardshrink(input, lambd)


def prelu(input, weight):
    from .nn import functional as F
    return F.prelu(input, weight)


# ---------------------------------------------------------------- shapes and splits


def diagflat(input, offset=0):
    return _ca().diag(input.reshape(-1), offset)


def _directional_split(name, input, sections, min_dim, dim):
    if input.dim() < min_dim:
        raise RuntimeError(f"torch.{name} requires a tensor with at least {min_dim} dimension, "
                           f"but got a tensor with {input.dim()} dimensions!")
    if isinstance(sections, int):
        size = input.shape[dim]
        if sections == 0 or size % sections:
            raise RuntimeError(f"torch.{name} attempted to split along dimension {dim}, but the "
                               f"size of the dimension {size} is not divisible by the "
                               f"split_size {sections}!")
    return tuple(_ca().tensor_split(input, sections, dim))


def hsplit(input, indices_or_sections):
    dim = 1 if input.dim() > 1 else 0
    return _directional_split("hsplit", input, indices_or_sections, 1, dim)


def vsplit(input, indices_or_sections):
    return _directional_split("vsplit", input, indices_or_sections, 2, 0)


def dsplit(input, indices_or_sections):
    return _directional_split("dsplit", input, indices_or_sections, 3, 2)


def split_with_sizes(input, split_sizes, dim=0):
    sizes = [int(s) for s in split_sizes]
    if sum(sizes) != input.shape[dim]:  # torch's message names dim as given
        raise RuntimeError(f"split_with_sizes expects split_sizes to sum exactly to "
                           f"{input.shape[dim]} (input tensor's size at dimension {dim}), but "
                           f"got split_sizes={sizes}")
    return tuple(input.split(sizes, dim))


def unsafe_split(input, split_size, dim=0):
    return tuple(input.split(split_size, dim))  # cagrad's split outputs are ordinary views


def unsafe_chunk(input, chunks, dim=0):
    return tuple(input.chunk(chunks, dim))


def msort(input):
    return _ca().sort(input, dim=0).values


def _size_args(size):
    if len(size) == 1 and not isinstance(size[0], int):
        return tuple(size[0])
    return tuple(size)


def sum_to_size(self, *size):
    """self summed down to size (size must expand to self's shape): the gradient of an
    expand, as torch's Tensor.sum_to_size."""
    size, shape = _size_args(size), tuple(self.shape)
    lead = len(shape) - len(size)
    if lead < 0 or any(s not in (1, t) for s, t in zip(size, shape[lead:])):
        raise RuntimeError(f"size {{{list(size)}}} is not expandable to size {{{list(shape)}}}.")
    if size == shape:
        return self
    out = self.sum(dim=tuple(range(lead))) if lead else self
    dims = tuple(i for i, (s, t) in enumerate(zip(size, shape[lead:])) if s == 1 and t != 1)
    return out.sum(dim=dims, keepdim=True) if dims else out


def _check_src(src, slice_):
    if tuple(src.shape) != tuple(slice_.shape):
        raise RuntimeError(f"expected src to have a size equal to the slice of self. src size = "
                           f"{list(src.shape)}, slice size = {list(slice_.shape)}")


def _scatter_into(input, src, index):
    """A copy of input whose input[index] is src (clone + setitem: both differentiable)."""
    _check_src(src, input[index])
    out = input.clone()
    out[index] = src
    return out


def select_scatter(input, src, dim, index):
    dim = dim % max(input.dim(), 1)
    return _scatter_into(input, src, (slice(None),) * dim + (index,))


def slice_scatter(input, src, dim=0, start=None, end=None, step=1):
    dim = dim % max(input.dim(), 1)
    return _scatter_into(input, src, (slice(None),) * dim + (slice(start, end, step),))


def diagonal_scatter(input, src, offset=0, dim1=0, dim2=1):
    _check_src(src, input.diagonal(offset, dim1, dim2))
    n = max(input.dim(), 1)
    if dim1 % n > dim2 % n:  # the same diagonal; cagrad's swapped-dims diagonal is a copy
        offset, dim1, dim2 = -offset, dim2, dim1
    out = input.clone()
    out.diagonal(offset, dim1, dim2).copy_(src)
    return out


_INDEX_REDUCE = ("prod", "mean", "amax", "amin")


def index_reduce(input, dim, index, source, reduce, *, include_self=True):
    """scatter_reduce with index spread over source's other dimensions."""
    if reduce not in _INDEX_REDUCE:
        raise RuntimeError(f"index_reduce(): Expected reduce to be one of prod, mean, amax or "
                           f"amin but got {reduce}.")
    dim = dim % max(input.dim(), 1)
    shape = [1] * source.dim()
    if source.dim():
        shape[dim] = -1
    spread = index.reshape(shape).expand(*source.shape)
    return _ca().scatter_reduce(input, dim, spread, source, reduce, include_self=include_self)


def index_reduce_(self, dim, index, source, reduce, *, include_self=True):
    return _ops.inplace_assign(
        self, lambda x: index_reduce(x, dim, index, source, reduce, include_self=include_self),
        (index, source))


def nonzero_static(input, *, size, fill_value=-1):
    """nonzero's rows, cut or padded with fill_value to exactly size rows."""
    nz = _ca().nonzero(input)
    n = nz.shape[0]
    if n >= size:
        return nz[:size]
    pad = _ca().full((size - n, nz.shape[1]), fill_value, dtype=int64)
    return _ca().cat([nz, pad])


def new_empty_strided(self, size, stride, *, dtype=None, device=None, requires_grad=False,
                      layout=None, pin_memory=False):
    size, stride = tuple(size), tuple(stride)
    extent = 0 if 0 in size else 1 + sum((n - 1) * s for n, s in zip(size, stride))
    base = self.new_zeros((extent,), dtype=dtype)  # zeros: cagrad has no uninitialised memory
    return base.as_strided(size, stride).requires_grad_(requires_grad)


# ---------------------------------------------------------------- in-place forms


_COMPARISONS = frozenset(("eq", "ne", "lt", "le", "gt", "ge"))
_LOGICAL = frozenset(("logical_and", "logical_or", "logical_xor", "logical_not"))


def _write_values(self, fn, args):
    """torch's logical_*_: the values written into self outside autograd; self keeps its
    grad_fn (gradients pass through it as before) and a leaf is allowed."""
    values = fn(self, *args)
    with _ca().no_grad():
        return self.copy_(values)


_ELEMENTWISE = _COMPARISONS | _LOGICAL | {"mul", "sub"}


def _check_operands(name, self, args):
    """torch's errors for an elementwise in-place op: a logical op takes a tensor, and
    the operands must broadcast to self's shape."""
    if name.startswith("logical") and args and not _is_tensor(args[0]):
        raise TypeError(f"{name}_(): argument 'other' (position 1) must be Tensor, not "
                        f"{type(args[0]).__name__}")
    shapes = [tuple(t.shape) for t in args[:1] if _is_tensor(t)]
    if shapes:
        full = tuple(np.broadcast_shapes(tuple(self.shape), *shapes))
        if full != tuple(self.shape):
            raise RuntimeError(f"output with shape {list(self.shape)} doesn't match the "
                               f"broadcast shape {list(full)}")


def _inplace(name, fn_name):
    def method(self, *args, **kwargs):
        fn = getattr(_ca(), fn_name)
        if fn_name in _ELEMENTWISE:
            _check_operands(name, self, args)
        if fn_name in _LOGICAL:
            return _write_values(self, fn, args)
        if fn_name in _COMPARISONS:
            fn = _in_graph_comparison(fn)
        return _ops.inplace_assign(self, lambda x: fn(x, *args, **kwargs), args, kwargs)

    method.__name__ = method.__qualname__ = f"{name}_"
    return method


# Tensor.<name>_ -> torch.<fn>(self, ...) written back into self
_INPLACE = {"eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt", "ge": "ge",
            "greater": "gt", "greater_equal": "ge", "less": "lt", "less_equal": "le",
            "not_equal": "ne", "logical_and": "logical_and", "logical_or": "logical_or",
            "logical_xor": "logical_xor", "logical_not": "logical_not", "absolute": "abs",
            "negative": "neg", "multiply": "mul", "subtract": "sub", "addmm": "addmm",
            "addbmm": "addbmm", "baddbmm": "baddbmm", "addmv": "addmv", "addr": "addr"}


# ---------------------------------------------------------------- old linear algebra

_REMOVED = {
    "solve": "`torch.solve` is deprecated in favor of `torch.linalg.solve`. `torch.linalg.solve` "
             "has its arguments reversed and does not return the LU factorization.\n\nTo get "
             "the LU factorization see `torch.lu`, which can be used with `torch.lu_solve` or "
             "`torch.lu_unpack`.\nX = torch.solve(B, A).solution should be replaced with:\nX = "
             "torch.linalg.solve(A, B)",
    "lstsq": "`torch.lstsq` is deprecated in favor of `torch.linalg.lstsq`.\n`torch.linalg."
             "lstsq` has reversed arguments and does not return the QR decomposition in the "
             "returned tuple (although it returns other information about the problem).\n\nTo "
             "get the QR decomposition consider using `torch.linalg.qr`.\n\nThe returned "
             "solution in `torch.lstsq` stored the residuals of the solution in the last m - n "
             "columns of the returned value whenever m > n. In torch.linalg.lstsq, the "
             "residuals are in the field 'residuals' of the returned named tuple.\n\nThe "
             "unpacking of the solution, as in\nX, _ = torch.lstsq(B, A).solution[:A.size(1)]"
             "\nshould be replaced with:\nX = torch.linalg.lstsq(A, B).solution",
    "symeig": "The default behavior has changed from using the upper triangular portion of the "
              "matrix by default to using the lower triangular portion.\n\nL, _ = "
              "torch.symeig(A, upper=upper) should be replaced with:\nL = torch.linalg."
              "eigvalsh(A, UPLO='U' if upper else 'L')\n\nand\n\nL, V = torch.symeig(A, "
              "eigenvectors=True) should be replaced with:\nL, V = torch.linalg.eigh(A, "
              "UPLO='U' if upper else 'L')",
    "eig": "`torch.linalg.eig` returns complex tensors of dtype `cfloat` or `cdouble` rather "
           "than real tensors mimicking complex tensors.\n\nL, _ = torch.eig(A) should be "
           "replaced with:\nL_complex = torch.linalg.eigvals(A)\n\nand\n\nL, V = torch.eig(A, "
           "eigenvectors=True) should be replaced with:\nL_complex, V_complex = "
           "torch.linalg.eig(A)",
}


def _removed(name):
    def removed(*args, **kwargs):
        raise RuntimeError("This function was deprecated since version 1.9 and is now "
                           "removed. " + _REMOVED[name])

    removed.__name__ = removed.__qualname__ = name
    return removed


def _deprecated(old, new):
    warnings.warn(f"torch.{old} is deprecated in favor of torch.linalg.{new} and will be "
                  f"removed in a future PyTorch release.", UserWarning, stacklevel=3)


def cholesky(input, upper=False):
    _deprecated("cholesky", "cholesky")
    return _ca().linalg.cholesky(input, upper=upper)


qr_result = namedtuple("qr", ["Q", "R"])
svd_result = namedtuple("svd", ["U", "S", "V"])
triangular_solve_result = namedtuple("triangular_solve", ["solution", "cloned_coefficient"])


def qr(input, some=True):
    _deprecated("qr", "qr")
    return qr_result(*_ca().linalg.qr(input, "reduced" if some else "complete"))


def svd(input, some=True, compute_uv=True):
    """(U, S, V): V, not V^H, and zero-filled U and V when not compute_uv (torch's
    Tensor.svd)."""
    ca = _ca()
    if not compute_uv:
        *batch, m, n = input.shape
        return svd_result(ca.zeros(*batch, m, m, dtype=input.dtype),
                          ca.linalg.svdvals(input), ca.zeros(*batch, n, n, dtype=input.dtype))
    u, s, vh = ca.linalg.svd(input, full_matrices=not some)
    return svd_result(u, s, vh.transpose(-2, -1))


def triangular_solve(input, A, upper=True, transpose=False, unitriangular=False):
    """X with op(T) X = input, T the upper/lower triangle of A, op transposing if asked;
    returned with a copy of A (torch's old result)."""
    _deprecated("triangular_solve", "solve_triangular")
    t = A.transpose(-2, -1) if transpose else A
    x = _ca().linalg.solve_triangular(t, input, upper=upper != bool(transpose),
                                      unitriangular=unitriangular)
    return triangular_solve_result(x, A.clone())


def lu(*args, **kwargs):
    raise NotImplementedError("cagrad has no LU factorization (Tensor.lu / torch.lu, "
                              f"torch.linalg.lu_factor); {_DOCS}")


# ---------------------------------------------------------------- installation

# torch.<name> functions this module adds (all are Tensor methods too)
_FUNCTIONS = {
    "ravel": ravel, "positive": positive, "is_nonzero": is_nonzero,
    "is_same_size": is_same_size, "is_signed": is_signed, "is_complex": _false,
    "is_conj": _false, "is_neg": _false, "is_inference": _false, "conj": _itself,
    "resolve_conj": _itself, "resolve_neg": _itself, "isposinf": isposinf,
    "isneginf": isneginf, "isreal": isreal, "fmax": fmax, "fmin": fmin,
    "float_power": float_power, "heaviside": heaviside, "gcd": gcd, "lcm": lcm,
    "ldexp": ldexp, "frexp": frexp, "nextafter": nextafter, "dist": dist, "renorm": renorm,
    "diagflat": diagflat, "hsplit": hsplit, "vsplit": vsplit, "dsplit": dsplit,
    "split_with_sizes": split_with_sizes, "unsafe_chunk": unsafe_chunk,
    "unsafe_split": unsafe_split, "unsafe_split_with_sizes": split_with_sizes,
    "msort": msort, "select_scatter": select_scatter, "slice_scatter": slice_scatter,
    "diagonal_scatter": diagonal_scatter, "index_reduce": index_reduce,
    "hardshrink": hardshrink, "prelu": prelu, "nonzero_static": nonzero_static,
    "adjoint": adjoint, "cholesky": cholesky, "qr": qr, "svd": svd, "lu": lu,
    "triangular_solve": triangular_solve, "solve": _removed("solve"),
    "lstsq": _removed("lstsq"), "symeig": _removed("symeig"), "eig": _removed("eig"),
}

# Tensor methods only (no torch.<name> function, or one cagrad already has)
_METHODS = {
    "float_power_": float_power_, "heaviside_": heaviside_, "gcd_": gcd_, "lcm_": lcm_,
    "ldexp_": ldexp_, "nextafter_": nextafter_, "renorm_": renorm_,
    "index_reduce_": index_reduce_, "sum_to_size": sum_to_size,
    "new_empty_strided": new_empty_strided,
    "int": _no_dtype("int", "int32"), "short": _no_dtype("short", "int16"),
    "char": _no_dtype("char", "int8"), "byte": _no_dtype("byte", "uint8"),
}

_PROPERTIES = {"output_nr": _output_nr, "itemsize": _itemsize, "nbytes": _nbytes,
               "real": _itself, "mH": _mH, "H": _H}


def namespace():
    """The torch.* names to add to cagrad (only those it lacks)."""
    ca = _ca()
    return {k: v for k, v in _FUNCTIONS.items() if not hasattr(ca, k)}


def install(tensor_cls):
    """Attach the methods and properties tensor_cls lacks."""
    methods = dict(_FUNCTIONS, **_METHODS)
    methods.update({f"{k}_": _inplace(k, v) for k, v in _INPLACE.items()})
    for name, fn in methods.items():
        if not hasattr(tensor_cls, name):
            setattr(tensor_cls, name, fn)
    for name, fget in _PROPERTIES.items():
        if not hasattr(tensor_cls, name):
            setattr(tensor_cls, name, property(fget))
