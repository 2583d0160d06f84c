"""Sampling from distributions: normal, bernoulli, poisson (functions) and the in-place
samplers Tensor.random_, bernoulli_, exponential_, geometric_, cauchy_, log_normal_.

Draws come from cagrad's Generators (numpy's PCG64, see _random.py): deterministic under
cagrad.manual_seed or a generator's seed, but not PyTorch's numbers. Argument checks and
their messages follow torch 2.13. No sampler differentiates through its draw: where torch
records a node whose gradient is zero (normal's mean and std, bernoulli's probabilities,
poisson's rates), the result carries a node that gives zeros too.
"""

import math
import operator
import warnings

import numpy as np

from . import _C
from ._dtype import DTYPES, check_dtype, float32, float64, int64
from ._functions import broadcast_shape, zero_grad_link
from ._random import _DOCS, _check_placement, _make, _numpy_rng

_NP_FLOAT = {float32._code: np.float32, float64._code: np.float64}


# ------------------------------------------------------------------------------ helpers
def _fmt(value):
    """A float as C++'s default stream prints it in torch's messages: -1, 0.5, 1e+10."""
    return f"{value:g}"


def _is_number(value):
    return isinstance(value, (int, float))  # bools too, as torch's normal() takes them


def _to_numpy(t):
    return t.detach().numpy()


def _float_kind(fname, t):
    """torch's error for an int64 tensor where a sampler needs floats."""
    if t._dtype == int64._code:
        raise NotImplementedError(f'"{fname}" not implemented for \'Long\'')


# ------------------------------------------------------------------------------ normal
def _normal_std_check(std):
    if isinstance(std, _C.TensorBase):
        values = _to_numpy(std)
        if values.size and not np.all(values >= 0):  # nan fails too
            raise RuntimeError("normal expects all elements of std >= 0.0")
    elif not std >= 0.0:
        raise RuntimeError(f"normal expects std >= 0.0, but found std {_fmt(std)}")


def _normal_overload_error(mean, std, extra=""):
    def name(v):
        return "Tensor" if isinstance(v, _C.TensorBase) else type(v).__name__
    return TypeError(f"normal() received an invalid combination of arguments - got "
                     f"({name(mean)}, {name(std)}{extra}), but expected one of: "
                     f"(Tensor mean, Tensor std), (Tensor mean, float std), "
                     f"(float mean, Tensor std), (float mean, float std, tuple of ints size)")


def _normal_tensors(mean, std, rng):
    """normal() with a tensor mean and/or std: broadcast, in the dtype of mean when it is a
    tensor, else of std (as torch, which does not promote here)."""
    tensors = [t for t in (mean, std) if isinstance(t, _C.TensorBase)]
    for t in tensors:
        _float_kind("normal_kernel_cpu", t)
    code = tensors[0]._dtype
    np_dtype = _NP_FLOAT[code]
    mean_values = _to_numpy(mean) if isinstance(mean, _C.TensorBase) else mean
    std_values = _to_numpy(std) if isinstance(std, _C.TensorBase) else std
    _normal_std_check(std)
    shape = _broadcast_shape(mean, std)
    draw = rng.standard_normal(shape, dtype=np_dtype)
    values = np.asarray(mean_values, np_dtype) + np.asarray(std_values, np_dtype) * draw
    return zero_grad_link(_make(values, DTYPES[code], False), (mean, std))


def _broadcast_shape(mean, std):
    shapes = [tuple(t._shape) for t in (mean, std) if isinstance(t, _C.TensorBase)]
    return shapes[0] if len(shapes) == 1 else broadcast_shape(*shapes)


def _normal_size(size):
    if size is None or isinstance(size, (int, float)) or not hasattr(size, "__iter__"):
        return None
    size = tuple(operator.index(s) for s in size)
    for s in size:
        if s < 0:
            raise RuntimeError(f"Trying to create tensor with negative dimension {s}: "
                               f"{list(size)}")
    return size


def normal(mean=0.0, std=1.0, size=None, *, generator=None, out=None, dtype=None,
           layout=None, device=None, pin_memory=False, requires_grad=False):
    """Normal draws with torch's four forms: normal(Tensor mean, Tensor std) (broadcast),
    normal(Tensor mean, float std=1), normal(float mean, Tensor std), and
    normal(float mean, float std, size, dtype=..., requires_grad=...)."""
    if out is not None:
        raise NotImplementedError(f"cagrad's normal() has no out= argument ({_DOCS})")
    tensor_form = isinstance(mean, _C.TensorBase) or isinstance(std, _C.TensorBase)
    if tensor_form:
        if size is not None:
            raise _normal_overload_error(mean, std, ", size=tuple")
        if not (isinstance(mean, _C.TensorBase) or _is_number(mean)) or \
                not (isinstance(std, _C.TensorBase) or _is_number(std)):
            raise _normal_overload_error(mean, std)
        return _normal_tensors(mean, std, _numpy_rng("normal", generator))
    shape = _normal_size(size)
    if shape is None or not _is_number(mean) or not _is_number(std):
        extra = "" if size is None else f", {type(size).__name__}"
        raise _normal_overload_error(mean, std, extra)
    _check_placement(device, layout, pin_memory, None, "normal")
    return _normal_floats(float(mean), float(std), shape, dtype, requires_grad, generator)


def _normal_floats(mean, std, shape, dtype, requires_grad, generator):
    from ._creation import get_default_dtype
    dtype = get_default_dtype() if dtype is None else check_dtype(dtype)
    _normal_std_check(std)
    if dtype is int64:
        raise NotImplementedError("\"normal_kernel_cpu\" not implemented for 'Long'")
    np_dtype = _NP_FLOAT[dtype._code]
    draw = _numpy_rng("normal", generator).standard_normal(shape, dtype=np_dtype)
    values = np_dtype(mean) + np_dtype(std) * draw
    return _make(values, dtype, requires_grad)


# ------------------------------------------------------------------------------ bernoulli
_P_IN_ERROR = ("Expected p_in >= 0 && p_in <= 1 to be true, but got false.  (Could this "
               "error message be improved?  If so, please report an enhancement request to "
               "PyTorch.)")


def _check_p_scalar(p):
    if not 0 <= p <= 1:  # nan fails too
        raise RuntimeError(f"bernoulli_ expects p to be in [0, 1], but got p={_fmt(p)}")


def _check_p_tensor(probs):
    values = _to_numpy(probs).astype(np.float64)
    if values.size and not np.all((values >= 0) & (values <= 1)):
        raise RuntimeError(_P_IN_ERROR)
    return values


def _bernoulli_draw(probs, shape, dtype_code, rng):
    """0/1 values (dtype_code) that are 1 with probability probs (broadcast to shape)."""
    ones = rng.random(shape) < probs
    np_dtype = _NP_FLOAT.get(dtype_code, np.int64)
    return _make(ones.astype(np_dtype), DTYPES[dtype_code], False)


def _bernoulli_combination_error(fname, args):
    got = ", ".join(args)
    return TypeError(f"{fname}() received an invalid combination of arguments - got ({got}), "
                     f"but expected one of: (Tensor input, *, Generator generator), "
                     f"(Tensor input, float p, *, Generator generator)")


def bernoulli(input, p=None, *, generator=None, out=None):
    """0/1 draws: with probability input (each element in [0, 1]) when p is None, else
    with probability p (a float) in input's shape and dtype."""
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"bernoulli(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    if out is not None:
        raise NotImplementedError(f"cagrad's bernoulli() has no out= argument ({_DOCS})")
    rng = _numpy_rng("bernoulli", generator)
    if p is None:
        _float_kind("bernoulli_tensor_cpu_p_", input)
        probs = _check_p_tensor(input)
        draw = _bernoulli_draw(probs, tuple(input._shape), input._dtype, rng)
        return zero_grad_link(draw, (input,))
    if not isinstance(p, (int, float)):
        raise _bernoulli_combination_error("bernoulli", ["Tensor", type(p).__name__])
    _check_p_scalar(p)
    draw = _bernoulli_draw(p, tuple(input._shape), input._dtype, rng)
    return _not_differentiable(draw, input)


def _not_differentiable(values, source):
    """values, marked as needing grad when source does, with a node whose backward raises
    torch's error: torch records such a node for bernoulli(x, p) (a draw with a float p
    has no derivative defined)."""
    if not (source.requires_grad and _C.is_grad_enabled()):
        return values
    return _bernoulli_no_derivative().apply(source, values)


def _bernoulli_no_derivative():
    from .autograd.function import Function  # autograd imports the tensor class

    class BernoulliNoDerivative(Function):
        @staticmethod
        def forward(ctx, _source, values):
            return values.clone()

        @staticmethod
        def backward(ctx, grad):
            raise RuntimeError("derivative for aten::bernoulli is not implemented")

    return BernoulliNoDerivative


def bernoulli_method(self, p=None, *, generator=None):
    """Tensor.bernoulli(): bernoulli(self) or bernoulli(self, p) with a float p."""
    if p is not None and not isinstance(p, (int, float)):
        raise _bernoulli_combination_error("bernoulli", [type(p).__name__])
    return bernoulli(self, p, generator=generator)


def bernoulli_(self, p=0.5, *, generator=None):
    """Fill self with 0/1 draws, 1 with probability p: a float, or a tensor that
    broadcasts to self's shape."""
    rng = _numpy_rng("bernoulli_", generator)
    shape = tuple(self._shape)
    if isinstance(p, _C.TensorBase):
        _float_kind("bernoulli_tensor_cpu_p_", p)  # an int64 self is fine, an int64 p not
        probs = _check_p_tensor(p)
        probs = _expand_probabilities(p, probs, shape)
    elif isinstance(p, (int, float)):
        _check_p_scalar(p)
        probs = p
    else:
        raise _bernoulli_combination_error("bernoulli_", [type(p).__name__])
    return self.copy_(_bernoulli_draw(probs, shape, self._dtype, rng))


def _expand_probabilities(p, probs, shape):
    try:
        return np.broadcast_to(probs, shape)
    except ValueError:
        p.expand(shape)  # raises torch's expand error
        raise


# ------------------------------------------------------------------------------ random_
_DIGITS = {float32._code: 24, float64._code: 53}
_INT64_MAX = (1 << 63) - 1


def _random_bound(value, position):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"random_() received an invalid combination of arguments - got "
                        f"({type(value).__name__}), but expected one of: (*, Generator "
                        f"generator), (int to, *, Generator generator), (int from, int to, *, "
                        f"Generator generator)")
    value = operator.index(value)
    if not -(1 << 63) <= value <= _INT64_MAX:
        raise ValueError("Overflow when unpacking long long")
    return value


def _random_args(args, kwargs):
    """(from, to) of random_(), random_(to), random_(from, to) and random_(from, None);
    to is None for the dtype's upper limit."""
    if len(args) > 2:
        raise TypeError(f"random_() takes 2 positional arguments but {len(args)} were given")
    unknown = set(kwargs) - {"from", "to"}
    if unknown:
        raise TypeError(f"random_() got an unexpected keyword argument '{unknown.pop()}'")
    if len(args) == 1 and "from" not in kwargs and "to" not in kwargs:
        return 0, _random_bound(args[0], 0)  # random_(to)
    named = dict(zip(("from", "to"), args))
    named.update(kwargs)
    low = _random_bound(named.get("from", 0), 0)
    high = named.get("to")
    return low, None if high is None else _random_bound(high, 1)


def _warn_float_bounds(dtype_code, low, high_inclusive):
    digits = _DIGITS[dtype_code]
    limit, kind = 1 << digits, ("float" if dtype_code == float32._code else "double")
    for name, value in (("from", low), ("to - 1", high_inclusive)):
        if not -limit <= value <= limit:
            warnings.warn(f"{name} is out of bounds [-(2^{digits}), 2^{digits}]. Due to "
                          f"precision limitations {kind} can support discrete uniform "
                          f"distribution only within this range. This warning will become an "
                          f"error in version 1.7 release, please fix the code in advance",
                          UserWarning, stacklevel=4)


def _random_inclusive_range(dtype_code, low, high):
    """[low, high_inclusive] as torch draws it for the dtype."""
    if high is not None:
        if low >= high:
            raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                               f"from={low} >= to={high}")
        high_inclusive = high - 1
        if dtype_code in _DIGITS:
            _warn_float_bounds(dtype_code, low, high_inclusive)
        return low, high_inclusive
    if dtype_code not in _DIGITS:
        return low, _INT64_MAX
    limit = 1 << _DIGITS[dtype_code]
    if low >= limit:
        raise RuntimeError(f"random_ expects 'from' casted to dtype to be less than or equal "
                           f"to 'to_inc' casted to dtype, but got from={low} > to_inc={limit}")
    return low, limit


def random_(self, *args, generator=None, **kwargs):
    """Fill self with integers drawn uniformly from [from, to - 1]; from defaults to 0 and
    to to the dtype's limit (2**24 for float32, 2**53 for float64, both included;
    2**63 - 1 for int64), as torch."""
    low, high = _random_args(args, kwargs)
    low, high_inclusive = _random_inclusive_range(self._dtype, low, high)
    rng = _numpy_rng("random_", generator)
    values = rng.integers(low, high_inclusive, tuple(self._shape), dtype=np.int64,
                          endpoint=True)
    return self.copy_(_make(values.astype(_NP_FLOAT.get(self._dtype, np.int64)),
                            DTYPES[self._dtype], False))


# ------------------------------------------------------------------------------ continuous
def _continuous_kind(self, name, spelled):
    if self._dtype == int64._code:
        raise RuntimeError(f"{name} distribution is a continuous probability distribution. "
                           f"dtype must be a floating point but you specified {spelled}")


def _float_arg(fname, name, position, value):
    if isinstance(value, bool) or not isinstance(value, (int, float)) and \
            not (isinstance(value, _C.TensorBase) and value.dim() == 0):
        raise TypeError(f"{fname}(): argument '{name}' (position {position}) must be float, "
                        f"not {type(value).__name__}")
    return float(value)


def _fill(self, values):
    return self.copy_(_make(values, DTYPES[self._dtype], False))


def exponential_(self, lambd=1.0, *, generator=None):
    """Fill self with draws of the exponential distribution of rate lambd (> 0)."""
    lambd = _float_arg("exponential_", "lambd", 1, lambd)
    if not lambd > 0:
        raise RuntimeError(f"exponential_ expects lambda > 0.0, but found lambda="
                           f"{_fmt(lambd)}")
    _continuous_kind(self, "Exponential", "Long")
    np_dtype = _NP_FLOAT[self._dtype]
    draw = _numpy_rng("exponential_", generator).standard_exponential(
        tuple(self._shape), dtype=np_dtype)
    return _fill(self, draw / np_dtype(lambd))


def geometric_(self, p, *, generator=None):
    """Fill self with the number of Bernoulli(p) trials up to the first success (1, 2,
    ...); p in (0, 1). int64 tensors are allowed."""
    p = _float_arg("geometric_", "p", 1, p)
    if not 0 < p < 1:
        raise RuntimeError(f"geometric_ expects p to be in (0, 1), but got p={_fmt(p)}")
    draw = _numpy_rng("geometric_", generator).geometric(p, tuple(self._shape))
    return _fill(self, draw)


def cauchy_(self, median=0.0, sigma=1.0, *, generator=None):
    """Fill self with Cauchy draws: median + sigma * tan(pi * (u - 1/2)); sigma > 0."""
    median = _float_arg("cauchy_", "median", 1, median)
    sigma = _float_arg("cauchy_", "sigma", 2, sigma)
    if not sigma > 0:
        raise RuntimeError(f"cauchy_ expects sigma > 0.0, but found sigma={_fmt(sigma)}")
    _continuous_kind(self, "Cauchy", "long int")
    draw = _numpy_rng("cauchy_", generator).standard_cauchy(tuple(self._shape))
    return _fill(self, median + sigma * draw)


def log_normal_(self, mean=1.0, std=2.0, *, generator=None):
    """Fill self with exp(N(mean, std**2)) draws; std > 0."""
    mean = _float_arg("log_normal_", "mean", 1, mean)
    std = _float_arg("log_normal_", "std", 2, std)
    if not std > 0:
        raise RuntimeError(f"log_normal_ expects std > 0.0, but found std={_fmt(std)}")
    _float_kind("log_normal_cpu", self)
    np_dtype = _NP_FLOAT[self._dtype]
    draw = _numpy_rng("log_normal_", generator).standard_normal(
        tuple(self._shape), dtype=np_dtype)
    return _fill(self, np.exp(np_dtype(mean) + np_dtype(std) * draw))


# ------------------------------------------------------------------------------ poisson
# numpy's Poisson sampler refuses rates above this (torch returns an undefined value)
_POISSON_MAX_RATE = float(np.iinfo(np.int64).max) - 10 * math.sqrt(np.iinfo(np.int64).max)


def poisson(input, generator=None):
    """Poisson draws with the rates in input (non-negative), in input's dtype."""
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"poisson(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    rng = _numpy_rng("poisson", generator)
    _float_kind("poisson_cpu", input)
    rates = _to_numpy(input).astype(np.float64)
    if rates.size and not np.all(rates >= 0):
        raise RuntimeError("invalid Poisson rate, expected rate to be non-negative")
    if rates.size and np.max(rates) > _POISSON_MAX_RATE:
        raise RuntimeError(f"poisson(): cagrad cannot sample rates above "
                           f"{_POISSON_MAX_RATE:g} (torch returns an undefined value for "
                           f"them); {_DOCS}")
    values = np.asarray(rng.poisson(rates), dtype=_NP_FLOAT[input._dtype])
    return zero_grad_link(_make(values, DTYPES[input._dtype], False), (input,))
