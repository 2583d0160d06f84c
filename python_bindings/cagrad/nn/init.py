"""cagrad.nn.init: in-place initializers with torch.nn.init's names and formulas.

Each fills its tensor under no_grad and returns it. The distributions are PyTorch's; the
random stream is cagrad's global one (seeded by cagrad.manual_seed), or a cagrad.Generator
passed as generator=, so the values differ from torch's.
"""

import math
import warnings

import numpy as np

from .._creation import rand, rand_like, randn, randn_like
from .._creation import tensor as _tensor
from .._grad_mode import no_grad
from .._more_ops import eye
from .._random import randperm

__all__ = ["calculate_gain", "uniform_", "normal_", "constant_", "zeros_", "ones_",
           "xavier_uniform_", "kaiming_uniform_", "xavier_normal_", "kaiming_normal_",
           "trunc_normal_", "orthogonal_", "eye_", "dirac_", "sparse_"]


_LINEAR_GAIN = ("linear", "sigmoid", "conv1d", "conv2d", "conv3d", "conv_transpose1d",
                "conv_transpose2d", "conv_transpose3d")


def calculate_gain(nonlinearity, param=None):
    """The recommended gain for a nonlinearity (torch.nn.init.calculate_gain)."""
    if nonlinearity in _LINEAR_GAIN:
        return 1
    if nonlinearity == "tanh":
        return 5.0 / 3
    if nonlinearity == "relu":
        return math.sqrt(2.0)
    if nonlinearity == "leaky_relu":
        slope = 0.01 if param is None else param
        if isinstance(slope, bool) or not isinstance(slope, (int, float)):
            raise ValueError(f"negative_slope {slope} not a valid number")
        return math.sqrt(2.0 / (1 + slope**2))
    if nonlinearity == "selu":
        return 3.0 / 4
    raise ValueError(f"Unsupported nonlinearity {nonlinearity}")


def _uniform_draw(tensor, generator):
    """U[0, 1) draws shaped like tensor: from generator, or from the global C stream."""
    if generator is None:
        return rand_like(tensor)
    return rand(*tensor.shape, dtype=tensor.dtype, generator=generator)


def _normal_draw(tensor, generator):
    """N(0, 1) draws shaped like tensor: from generator, or from the global C stream."""
    if generator is None:
        return randn_like(tensor)
    return randn(*tensor.shape, dtype=tensor.dtype, generator=generator)


def uniform_(tensor, a=0.0, b=1.0, generator=None):
    """Fill with values drawn from U(a, b)."""
    with no_grad():
        tensor.copy_(_uniform_draw(tensor, generator) * (b - a) + a)
    return tensor


def normal_(tensor, mean=0.0, std=1.0, generator=None):
    """Fill with values drawn from N(mean, std**2)."""
    with no_grad():
        tensor.copy_(_normal_draw(tensor, generator) * std + mean)
    return tensor


def constant_(tensor, val):
    with no_grad():
        return tensor.fill_(val)


def zeros_(tensor):
    return constant_(tensor, 0.0)


def ones_(tensor):
    return constant_(tensor, 1.0)


def _fan_in_and_fan_out(tensor):
    if tensor.ndim < 2:
        raise ValueError("Fan in and fan out can not be computed for tensor with fewer than "
                         "2 dimensions")
    receptive_field = math.prod(tensor.shape[2:])
    return tensor.shape[1] * receptive_field, tensor.shape[0] * receptive_field


def xavier_uniform_(tensor, gain=1.0, generator=None):
    """U(-b, b) with b = gain * sqrt(6 / (fan_in + fan_out)) (Glorot & Bengio, 2010)."""
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    bound = gain * math.sqrt(6.0 / float(fan_in + fan_out))
    return uniform_(tensor, -bound, bound, generator)


def xavier_normal_(tensor, gain=1.0, generator=None):
    """N(0, std**2) with std = gain * sqrt(2 / (fan_in + fan_out))."""
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    std = gain * math.sqrt(2.0 / float(fan_in + fan_out))
    return normal_(tensor, 0.0, std, generator)


def _kaiming_gain_over_sqrt_fan(tensor, a, mode, nonlinearity):
    if mode not in ("fan_in", "fan_out"):
        raise ValueError(f"Mode {mode} not supported, please use one of ['fan_in', "
                         f"'fan_out']")
    fan_in, fan_out = _fan_in_and_fan_out(tensor)
    fan = fan_in if mode == "fan_in" else fan_out
    return calculate_gain(nonlinearity, a) / math.sqrt(fan)


def kaiming_uniform_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """U(-b, b) with b = gain * sqrt(3 / fan) (He et al., 2015)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    bound = math.sqrt(3.0) * _kaiming_gain_over_sqrt_fan(tensor, a, mode, nonlinearity)
    return uniform_(tensor, -bound, bound, generator)


def kaiming_normal_(tensor, a=0, mode="fan_in", nonlinearity="leaky_relu", generator=None):
    """N(0, std**2) with std = gain / sqrt(fan) (He et al., 2015)."""
    if 0 in tensor.shape:
        warnings.warn("Initializing zero-element tensors is a no-op", stacklevel=2)
        return tensor
    std = _kaiming_gain_over_sqrt_fan(tensor, a, mode, nonlinearity)
    return normal_(tensor, 0.0, std, generator)


def trunc_normal_(tensor, mean=0.0, std=1.0, a=-2.0, b=2.0, generator=None):
    """N(mean, std**2) restricted to [a, b]. Drawn by inverting the normal CDF on a uniform
    draw between CDF(a) and CDF(b): one draw per entry, always inside the bounds (PyTorch
    uses rejection sampling; the distribution is the same)."""
    if mean < a - 2 * std or mean > b + 2 * std:
        warnings.warn("mean is more than 2 std from [a, b] in nn.init.trunc_normal_. "
                      "The distribution of values may be incorrect.", stacklevel=2)

    def cdf(x):
        return (1.0 + math.erf((x - mean) / (std * math.sqrt(2.0)))) / 2.0

    low, high = cdf(a), cdf(b)
    with no_grad():
        u = _uniform_draw(tensor, generator) * (high - low) + low
        values = (u * 2 - 1).erfinv() * (std * math.sqrt(2.0)) + mean
        tensor.copy_(values.clamp(a, b))
    return tensor


def orthogonal_(tensor, gain=1, generator=None):
    """A (semi-)orthogonal matrix (trailing dims flattened), times gain: the Q of a QR of a
    normal draw, its columns' signs fixed by R's diagonal (Saxe et al., 2013)."""
    if tensor.ndim < 2:
        raise ValueError("Only tensors with 2 or more dimensions are supported")
    if tensor.numel() == 0:
        return tensor
    rows = tensor.shape[0]
    cols = tensor.numel() // rows
    flat = np.asarray(_normal_draw(tensor, generator).numpy(), dtype=np.float64)
    flat = flat.reshape(rows, cols)
    if rows < cols:
        flat = flat.T
    q, r = np.linalg.qr(flat)
    q = q * np.sign(np.diag(r))
    if rows < cols:
        q = q.T
    with no_grad():
        tensor.copy_(_tensor(q.reshape(tensor.shape) * gain, dtype=tensor.dtype))
    return tensor


def eye_(tensor):
    """The identity matrix (ones on the main diagonal of a 2-D tensor)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    with no_grad():
        tensor.copy_(eye(*tensor.shape, dtype=tensor.dtype))
    return tensor


def dirac_(tensor, groups=1):
    """A 3-, 4- or 5-D conv weight that passes its first channels through unchanged (per
    group): a one at the kernel's centre for output channel d of each group and input d."""
    if tensor.ndim not in (3, 4, 5):
        raise ValueError("Only tensors with 3, 4, or 5 dimensions are supported")
    if tensor.shape[0] % groups != 0:
        raise ValueError("dim 0 must be divisible by groups")
    per_group = tensor.shape[0] // groups
    values = np.zeros(tuple(tensor.shape))
    centre = tuple(k // 2 for k in tensor.shape[2:])
    for g in range(groups):
        for d in range(min(per_group, tensor.shape[1])):
            values[(g * per_group + d, d) + centre] = 1
    with no_grad():
        tensor.copy_(_tensor(values, dtype=tensor.dtype))
    return tensor


def sparse_(tensor, sparsity, std=0.01, generator=None):
    """N(0, std**2) entries with ceil(sparsity * rows) of each column set to zero (at
    random rows; Martens, 2010)."""
    if tensor.ndim != 2:
        raise ValueError("Only tensors with 2 dimensions are supported")
    rows, cols = tensor.shape
    num_zeros = math.ceil(sparsity * rows)
    values = np.array(_normal_draw(tensor, generator).numpy(), dtype=np.float64) * std
    for col in range(cols):
        # PyTorch draws these permutations from the default generator, not generator=
        values[randperm(rows).numpy()[:num_zeros], col] = 0
    with no_grad():
        tensor.copy_(_tensor(values, dtype=tensor.dtype))
    return tensor
