"""dtype objects, cagrad.Size, cagrad.device, memory formats and layouts: the small value
types of the API, and the checks of the creation arguments that name them."""

import builtins

import numpy as np


class dtype:
    """A tensor element type, like torch.dtype. cagrad computes in four of them (float32,
    float64, int64, bool); float16 and bfloat16 exist as names only, so that code and
    checkpoints that mention them load, and using one to make or convert a tensor raises
    TypeError."""

    __slots__ = ("_code_or_none", "_name", "is_floating_point", "itemsize", "_numpy")

    def __init__(self, code, name, is_floating_point, numpy_type, itemsize=None):
        self._code_or_none = code  # the _C dtype code (= ca_dtype); None: not computed
        self._name = name
        self.is_floating_point = is_floating_point
        self._numpy = None if numpy_type is None else np.dtype(numpy_type)
        self.itemsize = itemsize or self._numpy.itemsize

    @property
    def _code(self):
        # every path that makes or converts a tensor reads the code: a name-only dtype stops
        # there with the error that says which dtypes cagrad has
        if self._code_or_none is None:
            raise unsupported_dtype_error(self)
        return self._code_or_none

    @property
    def is_complex(self):
        return False

    @property
    def is_signed(self):
        return self._name != "bool"

    def __repr__(self):
        return "cagrad." + self._name

    def __reduce__(self):  # pickles as a reference to the module-level singleton
        return self._name


float32 = dtype(0, "float32", True, np.float32)
float64 = dtype(1, "float64", True, np.float64)
int64 = dtype(2, "int64", False, np.int64)
bool = dtype(3, "bool", False, np.bool_)  # noqa: A001 (torch.bool, as in PyTorch)
# dtypes that cagrad names but does not compute in (see unsupported_dtype_error)
float16 = dtype(None, "float16", True, np.float16)
bfloat16 = dtype(None, "bfloat16", True, None, itemsize=2)  # numpy has no bfloat16

# index = _C dtype code
DTYPES = (float32, float64, int64, bool)
BOOL_CODE = 3  # bool's _C dtype code, for the hot paths that test it


def unsupported_dtype_error(value):
    return TypeError(f"cagrad does not compute in {value!r}: its tensors are cagrad.float32, "
                     f"cagrad.float64, cagrad.int64 or cagrad.bool (see docs/python-api.md); "
                     f"use one of those, e.g. cagrad.float32 where PyTorch code asks for half "
                     f"precision")

# numpy dtypes that map onto a cagrad dtype without losing values
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
               np.dtype(np.int64): int64, np.dtype(np.bool_): bool}


def dtype_from_numpy(np_dtype):
    """The cagrad dtype for a numpy dtype, or None if cagrad has no such dtype."""
    return _FROM_NUMPY.get(np_dtype)


def check_dtype(value, what="dtype"):
    """Return value if it is a cagrad dtype (Python's bool standing for cagrad.bool, as torch
    accepts it), else raise TypeError saying which ones exist."""
    if type(value) is dtype:
        if value._code_or_none is None:
            raise unsupported_dtype_error(value)
        return value
    if value is builtins.bool:
        return bool
    raise TypeError(f"{what} must be cagrad.float32, cagrad.float64, cagrad.int64 or "
                    f"cagrad.bool, not {value!r} (cagrad has no other dtypes)")


class Size(tuple):
    """The shape of a tensor: a tuple of ints, like torch.Size."""

    __slots__ = ()

    def __repr__(self):
        return f"cagrad.Size({list(self)})"

    def numel(self):
        n = 1
        for s in self:
            n *= s
        return n

    def __getitem__(self, key):  # slices of a Size stay Sizes, as in torch
        r = tuple.__getitem__(self, key)
        return Size(r) if isinstance(key, slice) else r

    def __add__(self, other):
        return Size(tuple.__add__(self, other))


class device:
    """A device, like torch.device. cagrad computes on the CPU only."""

    __slots__ = ("type", "index")

    def __init__(self, type="cpu", index=None):
        if isinstance(type, device):
            type, index = type.type, type.index
        elif not isinstance(type, str):
            raise TypeError(f"expected a device such as 'cpu' or cagrad.device('cpu'), not "
                            f"{type!r}")
        elif ":" in type:
            type, _, num = type.partition(":")
            index = int(num)
        if type != "cpu" or index not in (None, 0):
            raise RuntimeError(f"cagrad runs on the CPU only; device {type!r} (index {index}) "
                               f"is not available. Use 'cpu' or leave device unset.")
        self.type = type
        self.index = index

    def __repr__(self):
        return "device(type='cpu')"

    def __str__(self):
        return "cpu"

    def __eq__(self, other):
        if isinstance(other, device):
            return True
        if isinstance(other, str):
            return other in ("cpu", "cpu:0")
        return NotImplemented

    def __hash__(self):
        return hash("cpu")


CPU = device("cpu")


def check_device(dev):
    """Accept None, 'cpu', 'cpu:0' or a cagrad.device; anything else raises RuntimeError."""
    if dev is not None and dev is not CPU:
        device(dev)


class memory_format:
    """A memory layout request, like torch.memory_format. cagrad makes every new tensor
    contiguous (row-major), so it accepts contiguous_format, and preserve_format where the
    result is contiguous anyway; channels_last and channels_last_3d raise."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "cagrad." + self._name

    def __reduce__(self):  # pickles as a reference to the module-level singleton
        return self._name


contiguous_format = memory_format("contiguous_format")
preserve_format = memory_format("preserve_format")
channels_last = memory_format("channels_last")
channels_last_3d = memory_format("channels_last_3d")


class layout:
    """A tensor layout, like torch.layout. cagrad has strided tensors only."""

    __slots__ = ("_name",)

    def __init__(self, name):
        self._name = name

    def __repr__(self):
        return "cagrad." + self._name

    def __reduce__(self):
        return self._name


strided = layout("strided")


def check_pin_memory(fname, pin_memory):
    """pin_memory=False is PyTorch's no-op on the CPU; True asks for pinned memory."""
    if pin_memory:
        raise NotImplementedError(f"cagrad's {fname}() does not support pin_memory=True: "
                                  f"cagrad runs on the CPU only and has no pinned memory; "
                                  f"leave pin_memory unset")


def check_layout(fname, value):
    if value is not None and value is not strided:
        raise NotImplementedError(f"cagrad's {fname}() does not support layout={value!r}: "
                                  f"cagrad has strided (dense) tensors only")


def _row_major(t):
    """Whether t's dims (those of size > 1 that are not expanded) come in order of
    decreasing stride: then PyTorch's preserve_format gives a contiguous result too."""
    last = None
    for size, stride in zip(t._shape, t._strides):
        if size > 1 and stride != 0:
            if last is not None and stride > last:
                return False
            last = stride
    return True


def suggests_channels_last(t):
    """Whether PyTorch would call t's strides channels-last (4-D) or channels-last-3d (5-D):
    c10's is_channels_last_strides_2d/3d, whose to(memory_format=contiguous_format) copies
    such a tensor and returns any other one unchanged."""
    order = {4: (1, 3, 2, 0), 5: (1, 4, 3, 2, 0)}.get(len(t._shape))
    shape, strides = t._shape, t._strides
    if order is None or strides[1] == 0:
        return False
    low = 0
    for d in order:
        if shape[d] == 0 or strides[d] < low or (d == 0 and low == strides[1]):
            return False
        low = strides[d] * max(shape[d], 1)
    return True


def check_memory_format(fname, value, like=None):
    """Accept None (the default), contiguous_format, and preserve_format when `like` (the
    input whose layout it keeps) is in row-major order, so that PyTorch's result would be
    contiguous like cagrad's. Anything else raises: cagrad's results are always contiguous,
    so accepting it would differ silently. Without an input (empty(), contiguous()),
    preserve_format is a RuntimeError, as in PyTorch."""
    if value is None or value is contiguous_format:
        return
    if type(value) is not memory_format:
        raise TypeError(f"{fname}(): memory_format must be a cagrad.memory_format such as "
                        f"cagrad.contiguous_format, not {value!r}")
    if value is preserve_format and like is None:
        raise RuntimeError(f"{fname}(): memory_format=cagrad.preserve_format is unsupported "
                           f"here (there is no input whose layout to keep); use "
                           f"cagrad.contiguous_format")
    if value is preserve_format and _row_major(like):
        return
    why = ("the input's dims are not in row-major order, and cagrad's result is contiguous "
           "where PyTorch's would keep the input's strides" if value is preserve_format
           else "cagrad's tensors are always contiguous (row-major)")
    raise NotImplementedError(f"cagrad's {fname}() does not support memory_format={value!r}: "
                              f"{why}; use memory_format=cagrad.contiguous_format")
