"""Random generators and sampling: Generator, default_generator, randperm, randint,
multinomial, seed, initial_seed.

A cagrad Generator is a Python object around numpy's PCG64 bit generator. Its streams are
deterministic under a seed but differ from PyTorch's (whose Mersenne Twister streams are
not reproduced). randn/rand without generator= keep drawing from the C library's own RNG;
cagrad.manual_seed seeds both (see _creation.manual_seed).
"""

import operator
import os

import numpy as np

from . import _C
from ._dtype import check_device, check_dtype, device, float32, float64, int64

# torch.Generator()'s seed before anyone seeds it (torch's default_rng_seed_val)
_DEFAULT_SEED = 67280421310721
_U64 = 1 << 64
_DOCS = "see docs/python-api.md"


def _wrap_seed(seed):
    """A seed as torch keeps it: any int in [-2**63, 2**64), taken modulo 2**64."""
    if isinstance(seed, (bool, float)) or not hasattr(seed, "__index__"):
        raise RuntimeError(f"manual_seed expected a long, but got {type(seed).__name__}")
    seed = operator.index(seed)
    if not -(1 << 63) <= seed < _U64:
        raise ValueError("Overflow when unpacking long long")
    return seed % _U64


def _fresh_seed():
    """A non-deterministic 64-bit seed, as torch.seed() draws from the OS."""
    return int.from_bytes(os.urandom(8), "little")


def _split_u128(value):
    return [value & (_U64 - 1), value >> 64]


class Generator:
    """A random generator (torch.Generator): manual_seed, seed, initial_seed, get_state,
    set_state, device. Backed by numpy's PCG64; numbers differ from PyTorch's."""

    def __init__(self, device="cpu"):
        check_device(device)
        self.manual_seed(_DEFAULT_SEED)

    @property
    def device(self):
        return device("cpu")

    def manual_seed(self, seed):
        """Restart the stream from seed; returns this generator."""
        self._initial_seed = _wrap_seed(seed)
        self._np = np.random.Generator(np.random.PCG64(self._initial_seed))
        return self

    def seed(self):
        """Seed with a non-deterministic number from the OS and return it."""
        seed = _fresh_seed()
        self.manual_seed(seed)
        return seed

    def initial_seed(self):
        return self._initial_seed

    def get_state(self):
        """The state as an int64 tensor (torch returns a uint8 ByteTensor, which cagrad
        lacks); hand it to set_state to resume the stream where it was."""
        st = self._np.bit_generator.state
        words = ([self._initial_seed] + _split_u128(st["state"]["state"])
                 + _split_u128(st["state"]["inc"]) + [st["has_uint32"], st["uinteger"]])
        return _C.copy_from_buffer(np.array(words, dtype=np.uint64).view(np.int64))

    def set_state(self, new_state):
        """Resume the stream a get_state() tensor describes; returns this generator."""
        if not isinstance(new_state, _C.TensorBase) or new_state._dtype != int64._code or \
                tuple(new_state._shape) != (7,):
            raise TypeError(f"RNG state must be the int64 tensor Generator.get_state() "
                            f"returned (cagrad has no ByteTensor; {_DOCS})")
        seed, s_lo, s_hi, i_lo, i_hi, has32, uint = (
            int(w) for w in np.asarray(new_state.tolist(), dtype=np.int64).view(np.uint64))
        bit_gen = np.random.PCG64()
        bit_gen.state = {"bit_generator": "PCG64",
                         "state": {"state": s_lo | (s_hi << 64), "inc": i_lo | (i_hi << 64)},
                         "has_uint32": has32, "uinteger": uint}
        self._initial_seed = seed
        self._np = np.random.Generator(bit_gen)
        return self

    def __repr__(self):
        return f"<cagrad.Generator object at {id(self):#x}>"


# torch.default_generator: randperm, randint, multinomial and the samplers draw from it when
# no generator is given; like torch's, it starts from a non-deterministic seed.
default_generator = Generator().manual_seed(_fresh_seed())


def seed():
    """Seed the default generator and the C RNG (rand, randn, dropout) with a
    non-deterministic number, and return it (torch.seed)."""
    new_seed = default_generator.seed()
    _C.manual_seed(new_seed)
    return new_seed


def initial_seed():
    """The seed the default generator was last seeded with (torch.initial_seed)."""
    return default_generator.initial_seed()


def _numpy_rng(fname, generator):
    """The numpy Generator to draw from: generator's, or the default one's."""
    if generator is None:
        return default_generator._np
    if not isinstance(generator, Generator):
        raise TypeError(f"{fname}(): argument 'generator' must be cagrad.Generator, not "
                        f"{type(generator).__name__}")
    return generator._np


def _check_placement(device, layout, pin_memory, out, fname):
    from ._creation import _check_options  # _creation imports this module
    _check_options(fname, device, layout, pin_memory)
    if out is not None:
        raise NotImplementedError(f"cagrad's {fname}() has no out= argument; assign the "
                                  f"result instead ({_DOCS})")


def _make(arr, dtype, requires_grad):
    # np.asarray, not np.ascontiguousarray: that one turns a 0-d result into 1-d
    t = _C.copy_from_buffer(np.asarray(arr, dtype=dtype._numpy, order="C"))
    if requires_grad:
        if dtype is int64:
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        t.requires_grad = True
    return t


def _draw_floats(fname, generator, dtype_code, shape):
    """rand/randn values from a Generator, as a tensor of dtype_code (float32/float64)."""
    if not isinstance(generator, Generator):
        raise TypeError(f"{fname}(): argument 'generator' must be cagrad.Generator, not "
                        f"{type(generator).__name__}")
    np_dtype = {float32._code: np.float32, float64._code: np.float64}.get(dtype_code)
    if np_dtype is None:
        raise RuntimeError(f"{fname}: random values need a float dtype (float32 or float64)")
    draw = generator._np.random if fname == "rand" else generator._np.standard_normal
    return _C.copy_from_buffer(np.asarray(draw(shape, dtype=np_dtype)))


def randperm(n, *, generator=None, out=None, dtype=None, layout=None, device=None,
             requires_grad=False, pin_memory=False):
    """A random permutation of 0..n-1 (int64 unless dtype says otherwise)."""
    _check_placement(device, layout, pin_memory, out, "randperm")
    n = _int_arg("randperm", "n", 1, n)
    if n < 0:
        raise RuntimeError(f"Trying to create tensor with negative dimension {n}: [{n}]")
    dtype = int64 if dtype is None else check_dtype(dtype)
    return _make(_numpy_rng("randperm", generator).permutation(n), dtype, requires_grad)


def _int_arg(fname, name, position, value):
    if isinstance(value, bool) or not hasattr(value, "__index__"):
        raise TypeError(f"{fname}(): argument '{name}' (position {position}) must be int, "
                        f"not {type(value).__name__}")
    return operator.index(value)


def _randint_bounds(args, low, high, size):
    """(low, high, size) from either call form: randint(high, size) or
    randint(low, high, size), positionally or by keyword."""
    args = list(args)
    if size is None:
        if not args:
            raise TypeError("randint() missing required argument 'size'")
        size = args.pop()
    if high is None:
        if not args:
            raise TypeError("randint() missing required argument 'high'")
        high = args.pop()
    if args:
        if low is not None or len(args) > 1:
            raise TypeError("randint() received an invalid combination of arguments: it "
                            "takes (high, size) or (low, high, size)")
        low = args.pop()
    low = 0 if low is None else low
    if isinstance(size, int) or not hasattr(size, "__iter__"):
        raise TypeError(f"randint(): argument 'size' must be tuple of ints, not "
                        f"{type(size).__name__}")
    return (_int_arg("randint", "low", 0, low), _int_arg("randint", "high", 1, high),
            tuple(map(operator.index, size)))


def randint(*args, low=None, high=None, size=None, generator=None, out=None, dtype=None,
            layout=None, device=None, requires_grad=False, pin_memory=False):
    """Integers drawn uniformly from [low, high) (low defaults to 0), int64 unless dtype
    says otherwise. Takes torch's two forms: randint(high, size), randint(low, high, size)."""
    _check_placement(device, layout, pin_memory, out, "randint")
    low, high, size = _randint_bounds(args, low, high, size)
    if low >= high:
        raise RuntimeError(f"random_ expects 'from' to be less than 'to', but got "
                           f"from={low} >= to={high}")
    dtype = int64 if dtype is None else check_dtype(dtype)
    values = _numpy_rng("randint", generator).integers(low, high, size, dtype=np.int64)
    return _make(values, dtype, requires_grad)


def _check_probabilities(probs, num_samples, replacement):
    """PyTorch's checks of multinomial's arguments, in PyTorch's order."""
    if not isinstance(probs, _C.TensorBase):
        raise TypeError(f"multinomial(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(probs).__name__}")
    if probs._dtype == int64._code:
        raise RuntimeError("multinomial only supports floating-point dtypes for input, got: "
                           "Long")
    if probs.ndim not in (1, 2):
        raise RuntimeError("prob_dist must be 1 or 2 dim")
    if num_samples <= 0:
        raise RuntimeError("cannot sample n_sample <= 0 samples")
    if not replacement and num_samples > probs._shape[-1]:
        raise RuntimeError("cannot sample n_sample > prob_dist.size(-1) samples without "
                           "replacement")
    values = np.array(probs.detach().tolist(), dtype=np.float64).reshape(-1, probs._shape[-1])
    if not np.all(np.isfinite(values)) or np.any(values < 0):
        raise RuntimeError("probability tensor contains either `inf`, `nan` or element < 0")
    if np.any(values.sum(axis=1) <= 0):
        raise RuntimeError("invalid multinomial distribution (sum of probabilities <= 0)")
    return values


def _sample_with_replacement(rng, row, num_samples):
    """Inverse-CDF sampling: the first category whose running total exceeds u * total."""
    cumulative = np.cumsum(row)
    picks = np.searchsorted(cumulative, rng.random(num_samples) * cumulative[-1], side="right")
    # rounding can push u * total to the last running total: take the last possible category
    return np.minimum(picks, np.flatnonzero(row)[-1])


def _sample_without_replacement(rng, row, num_samples):
    """The num_samples largest p / E (E ~ Exp(1)) are a draw without replacement in
    proportion to p; zero-probability categories come last, in index order."""
    scores = row / rng.exponential(size=row.shape)
    return np.argsort(-scores, kind="stable")[:num_samples]


def multinomial(input, num_samples, replacement=False, *, generator=None, out=None):
    """num_samples category indices per row of input (1-D or 2-D, non-negative weights
    that need not sum to 1), drawn with or without replacement; an int64 tensor."""
    if out is not None:
        raise NotImplementedError(f"cagrad's multinomial() has no out= argument ({_DOCS})")
    num_samples = _int_arg("multinomial", "num_samples", 2, num_samples)
    rng = _numpy_rng("multinomial", generator)
    rows = _check_probabilities(input, num_samples, replacement)
    draw = _sample_with_replacement if replacement else _sample_without_replacement
    picks = np.array([draw(rng, row, num_samples) for row in rows], dtype=np.int64)
    return _make(picks.reshape(tuple(input._shape[:-1]) + (num_samples,)), int64, False)


def _random_seed(generator=None):
    """A non-negative int64 drawn from generator (default: the default generator), as
    torch.empty((), dtype=torch.int64).random_(generator=...) draws one: how samplers and
    the DataLoader derive their seeds."""
    return int(_numpy_rng("random_", generator).integers(0, 1 << 63))
