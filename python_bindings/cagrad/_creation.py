"""Tensor creation: tensor, as_tensor, from_numpy, from_dlpack, zeros, ones, ..., arange,
and the global settings they read (default dtype, seed, threads).

Results are instances of cagrad.Tensor: _tensor.py registers the class with _C.
"""

import collections.abc as _abc
import operator

import numpy as np

from . import _C
from ._dtype import bool as bool_dtype
from ._dtype import (check_device, check_dtype, check_layout, check_memory_format,
                     check_pin_memory, dtype_from_numpy, float32, float64, int64)
from ._random import _draw_floats, default_generator

_TensorBase = _C.TensorBase

# The dtype of floating-point data whose dtype is not given (torch.get_default_dtype()).
_default_float = float32


def get_default_dtype():
    return _default_float


def set_default_dtype(d):
    """Set the dtype of Python float data and of zeros/ones/randn/... without a dtype."""
    global _default_float
    if not check_dtype(d).is_floating_point:  # int64, bool
        raise TypeError("only floating-point types are supported as the default type")
    _default_float = d


def manual_seed(seed):
    """Seed the C RNG behind randn, rand and dropout, and the default Generator behind
    randperm, randint, multinomial and the data samplers. Returns the default Generator."""
    generator = default_generator.manual_seed(int(seed))  # torch also takes int(seed)
    _C.manual_seed(generator.initial_seed())
    return generator


# get_rng_state()'s layout: the C RNG's (seed, offset), then the default Generator's words
_C_RNG_WORDS = 2
_RNG_STATE_WORDS = _C_RNG_WORDS + 7  # Generator.get_state() has 7


def get_rng_state():
    """The whole default random state as one int64 tensor of 9 words, as torch's one
    ByteTensor covers all its CPU draws: [0:2] the C RNG behind randn, rand and dropout
    (seed, offset), [2:9] cagrad.default_generator's state (Generator.get_state(): the
    initial seed, then numpy PCG64's state) behind randperm, randint, multinomial and the
    data samplers. Words are 64-bit, stored as int64. Hand it to set_rng_state()."""
    seed, offset = _C.rng_get_state()
    c_words = np.array([seed, offset], dtype=np.uint64).view(np.int64)
    words = np.concatenate([c_words, default_generator.get_state().numpy()])
    return _C.copy_from_buffer(words)


def set_rng_state(new_state):
    """Restore both RNGs to a state get_rng_state() returned."""
    if not isinstance(new_state, _TensorBase):
        raise TypeError(f"expected the int64 tensor get_rng_state() returned, but got "
                        f"{type(new_state).__name__}")
    if new_state._dtype != int64._code:
        raise TypeError("RNG state must be the int64 tensor get_rng_state() returned "
                        "(cagrad has no ByteTensor; see docs/python-api.md)")
    if new_state.numel() != _RNG_STATE_WORDS or new_state.ndim != 1:
        raise RuntimeError(f"Expected an RNG state of size {_RNG_STATE_WORDS} but found the "
                           f"input RNG state size to be {new_state.numel()}")
    words = np.asarray(new_state.tolist(), dtype=np.int64)
    default_generator.set_state(_C.copy_from_buffer(words[_C_RNG_WORDS:]))
    seed, offset = words[:_C_RNG_WORDS].view(np.uint64)
    _C.rng_set_state(int(seed), int(offset))


set_num_threads = _C.set_num_threads
get_num_threads = _C.get_num_threads


def _check_options(fname, device, layout=None, pin_memory=False):
    """The placement arguments every creation function takes: the CPU, strided, unpinned
    (PyTorch's no-ops on the CPU) are accepted; anything else raises, naming it."""
    check_device(device)
    check_layout(fname, layout)
    check_pin_memory(fname, pin_memory)


def _finish(t, requires_grad):
    if requires_grad:
        if t._dtype == bool_dtype._code:  # torch's creation message
            raise RuntimeError("Only Tensors of floating point and complex dtype can require "
                               "gradients")
        t.requires_grad = True
    return t


# ------------------------------------------------------------------------------ from data
# numpy kinds whose values convert to an int64 tensor without loss
_INT_KINDS = ("i", "u")


def _numpy_float_width(data):
    """The widest numpy float scalar (np.float32/np.float64) in nested Python data, in
    bytes, or 0: torch.tensor([np.float64(1.0)]) is float64 where [1.0] is float32."""
    widest, stack = 0, [data]
    while stack:
        item = stack.pop()
        if isinstance(item, np.floating):
            widest = max(widest, item.itemsize)
        elif isinstance(item, (list, tuple)) or (isinstance(item, _abc.Sequence)
                                                 and not isinstance(item, (str, bytes))):
            stack.extend(item)
    return widest


def _target_dtype(arr, from_python, data=None):
    """The cagrad dtype for data that numpy read as arr, following torch.tensor's rules."""
    kind = arr.dtype.kind
    if kind == "f":
        if from_python and data is not None and _numpy_float_width(data) == 8:
            return float64
        if from_python or arr.dtype.itemsize < 4:  # Python floats, float16 -> default
            return _default_float
        return float64 if arr.dtype.itemsize == 8 else float32
    if kind in _INT_KINDS:
        if arr.dtype == np.uint64 and arr.size and arr.max() > np.iinfo(np.int64).max:
            raise ValueError("uint64 values above 2**63-1 do not fit in cagrad.int64")
        return int64
    if kind == "b":
        return bool_dtype
    raise TypeError(f"cannot make a tensor from data of numpy dtype {arr.dtype}: cagrad has "
                    f"float32, float64, int64 and bool tensors only")


def tensor(data, dtype=None, device=None, requires_grad=False, pin_memory=False):
    """A new tensor holding a copy of data (a number, nested lists, a numpy array, a Tensor).

    Like torch.tensor: Python floats give the default dtype (float32), Python ints give
    int64, Python bools give bool, numpy arrays keep float32/float64/int64/bool.
    """
    _check_options("tensor", device, pin_memory=pin_memory)
    if dtype is not None:
        check_dtype(dtype)
    if isinstance(data, _TensorBase) and (dtype is None or dtype._code == data._dtype):
        return _finish(_C.copy_from_buffer(data), requires_grad)
    # Python numbers and lists take torch's default dtypes; arrays (numpy, or anything with
    # __array__) keep theirs; np.float64 subclasses float, hence the exact type test.
    # Any Python sequence (a deque of returns, a range) reads as Python data, as in torch
    from_python = isinstance(data, _abc.Sequence) and not isinstance(data, (str, bytes)) \
        or type(data) in (int, float)
    arr = np.asarray(data)
    target = _target_dtype(arr, from_python, data) if dtype is None else check_dtype(dtype)
    # order="C" flips negative strides, which _C.copy_from_buffer does not take
    t = _C.copy_from_buffer(np.asarray(arr, dtype=target._numpy, order="C"))
    return _finish(t, requires_grad)


def from_numpy(ndarray):
    """A tensor sharing memory with a numpy array (float32, float64, int64 or bool)."""
    if not isinstance(ndarray, np.ndarray):
        raise TypeError(f"expected np.ndarray (got {type(ndarray).__name__})")
    if dtype_from_numpy(ndarray.dtype) is None:
        raise TypeError(f"can't convert np.ndarray of type {ndarray.dtype}. The only supported "
                        f"types are: float64, float32, int64 and bool (native byte order). Convert "
                        f"with arr.astype(np.float32), or use cagrad.tensor(arr) to copy.")
    if any(s < 0 for s in ndarray.strides):
        raise ValueError("At least one stride in the given numpy array is negative; tensors "
                         "with negative strides are not supported. Make a copy with "
                         "array.copy() first.")
    return _C.from_buffer(ndarray)


def as_tensor(data, dtype=None, device=None):
    """data as a tensor, sharing memory when data already is a tensor or a numpy array of
    that dtype, copying otherwise."""
    check_device(device)
    if isinstance(data, _TensorBase):
        if dtype is None or check_dtype(dtype)._code == data._dtype:
            return data
        return _C.to_dtype(data, dtype._code)
    if isinstance(data, np.ndarray):
        d = dtype_from_numpy(data.dtype)
        if d is not None and (dtype is None or dtype is d) and min(data.strides, default=0) >= 0:
            return _C.from_buffer(data)
    return tensor(data, dtype=dtype)


def from_dlpack(ext_tensor):
    """A tensor sharing memory with any DLPack producer (an object with __dlpack__, e.g. a
    torch or JAX array on the CPU) or with a DLPack capsule."""
    if not hasattr(ext_tensor, "__dlpack__"):
        return _C.from_dlpack(ext_tensor)  # a capsule; _C raises TypeError for anything else
    device_type, _ = ext_tensor.__dlpack_device__()
    if device_type != 1:  # kDLCPU
        raise BufferError(f"cagrad.from_dlpack: the producer's data lives on DLPack device "
                          f"type {device_type}, but cagrad reads CPU memory only; move it to "
                          f"the CPU first (e.g. t.cpu())")
    try:
        capsule = ext_tensor.__dlpack__(max_version=(1, 0))
    except TypeError:  # a producer older than DLPack 1.0 takes no max_version
        capsule = ext_tensor.__dlpack__()
    return _C.from_dlpack(capsule)


# ------------------------------------------------------------------------------ from sizes
def _size(fname, sizes, size):
    """The shape from zeros(2, 3), zeros((2, 3)), zeros([2, 3]) or zeros(size=(2, 3))."""
    if size is not None:
        if sizes:
            raise TypeError(f"{fname}() got the size both positionally and as size=")
        sizes = (size,)
    if len(sizes) == 1 and not hasattr(sizes[0], "__index__"):
        sizes = sizes[0]
    try:
        return tuple(map(operator.index, sizes))
    except TypeError:
        raise TypeError(f"{fname}(): size must be ints or one sequence of ints, got "
                        f"{sizes!r}") from None


def _float_dtype(dtype):
    return _default_float._code if dtype is None else check_dtype(dtype)._code


def zeros(*sizes, size=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False):
    _check_options("zeros", device, layout, pin_memory)
    return _finish(_C.zeros(_float_dtype(dtype), _size("zeros", sizes, size)), requires_grad)


def ones(*sizes, size=None, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False):
    _check_options("ones", device, layout, pin_memory)
    return _finish(_C.ones(_float_dtype(dtype), _size("ones", sizes, size)), requires_grad)


def empty(*sizes, size=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False, memory_format=None):
    _check_options("empty", device, layout, pin_memory)
    check_memory_format("empty", memory_format)
    return _finish(_C.empty(_float_dtype(dtype), _size("empty", sizes, size)), requires_grad)


def randn(*sizes, size=None, dtype=None, layout=None, device=None, requires_grad=False,
          pin_memory=False, generator=None):
    _check_options("randn", device, layout, pin_memory)
    return _finish(_random_floats("randn", generator, _float_dtype(dtype),
                                  _size("randn", sizes, size)), requires_grad)


def rand(*sizes, size=None, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False, generator=None):
    _check_options("rand", device, layout, pin_memory)
    return _finish(_random_floats("rand", generator, _float_dtype(dtype),
                                  _size("rand", sizes, size)), requires_grad)


def _random_floats(fname, generator, dtype_code, shape):
    """rand/randn values: from the C RNG, or from a cagrad.Generator when one is given."""
    if generator is None:
        return getattr(_C, fname)(dtype_code, shape)
    return _draw_floats(fname, generator, dtype_code, shape)


def _scalar_dtype(value):
    """torch's dtype for a Python number: bool -> bool, float -> default float, int -> int64."""
    if isinstance(value, (bool, np.bool_)):
        return bool_dtype._code
    if isinstance(value, (int, np.integer)):
        return int64._code
    if isinstance(value, (float, np.floating)):
        return _default_float._code
    raise TypeError(f"fill_value must be a number, not {type(value).__name__}")


def _filled(code, shape, fill_value):
    """_C.full, except an int64 fill past 2**53, which a C double would round: numpy writes it
    exactly (and refuses one outside int64, as PyTorch does, with OverflowError)."""
    if code == int64._code and type(fill_value) is int and abs(fill_value) > 2**53:
        return tensor(np.full(tuple(shape), fill_value, dtype=np.int64))
    return _C.full(code, shape, fill_value)


def full(size, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
         pin_memory=False):
    _check_options("full", device, layout, pin_memory)
    code = _scalar_dtype(fill_value) if dtype is None else check_dtype(dtype)._code
    return _finish(_filled(code, _size("full", (size,), None), fill_value), requires_grad)


def _like_dtype(input, dtype):
    return input._dtype if dtype is None else check_dtype(dtype)._code


def _check_like(fname, input, device, layout, pin_memory, memory_format):
    _check_options(fname, device, layout, pin_memory)
    check_memory_format(fname, memory_format, like=input)


def zeros_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
               pin_memory=False, memory_format=None):
    _check_like("zeros_like", input, device, layout, pin_memory, memory_format)
    return _finish(_C.zeros(_like_dtype(input, dtype), input._shape), requires_grad)


def ones_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
              pin_memory=False, memory_format=None):
    _check_like("ones_like", input, device, layout, pin_memory, memory_format)
    return _finish(_C.ones(_like_dtype(input, dtype), input._shape), requires_grad)


def empty_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
               pin_memory=False, memory_format=None):
    _check_like("empty_like", input, device, layout, pin_memory, memory_format)
    return _finish(_C.empty(_like_dtype(input, dtype), input._shape), requires_grad)


def full_like(input, fill_value, *, dtype=None, layout=None, device=None, requires_grad=False,
              pin_memory=False, memory_format=None):
    _check_like("full_like", input, device, layout, pin_memory, memory_format)
    return _finish(_filled(_like_dtype(input, dtype), input._shape, fill_value), requires_grad)


def randn_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
               pin_memory=False, memory_format=None):
    _check_like("randn_like", input, device, layout, pin_memory, memory_format)
    return _finish(_C.randn(_like_dtype(input, dtype), input._shape), requires_grad)


def rand_like(input, *, dtype=None, layout=None, device=None, requires_grad=False,
              pin_memory=False, memory_format=None):
    _check_like("rand_like", input, device, layout, pin_memory, memory_format)
    return _finish(_C.rand(_like_dtype(input, dtype), input._shape), requires_grad)


def arange(start, end=None, step=1, *, dtype=None, layout=None, device=None,
           requires_grad=False, pin_memory=False):
    """Values from start up to (not including) end, step apart. Like torch.arange, int
    arguments give int64 and any float argument gives the default float dtype."""
    _check_options("arange", device, layout, pin_memory)
    if end is None:
        start, end = 0, start
    for v in (start, end, step):
        if not isinstance(v, (int, float, np.integer, np.floating)) or isinstance(v, bool):
            raise TypeError(f"arange() takes numbers for start, end and step, not "
                            f"{type(v).__name__}")
    if dtype is None:
        all_int = all(isinstance(v, (int, np.integer)) for v in (start, end, step))
        code = int64._code if all_int else _default_float._code
    else:
        code = check_dtype(dtype)._code
    if code == bool_dtype._code:  # torch has no bool arange kernel either
        raise NotImplementedError("\"arange_cpu\" not implemented for 'Bool'")
    return _finish(_C.arange(float(start), float(end), float(step), code), requires_grad)
