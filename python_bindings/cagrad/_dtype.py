"""dtype objects, cagrad.Size and cagrad.device: the small value types of the API."""

import numpy as np


class dtype:
    """A tensor element type, like torch.dtype. cagrad has exactly three of them."""

    __slots__ = ("_code", "_name", "is_floating_point", "itemsize", "_numpy")

    def __init__(self, code, name, is_floating_point, numpy_type):
        self._code = code  # the _C dtype code (= ca_dtype)
        self._name = name
        self.is_floating_point = is_floating_point
        self._numpy = np.dtype(numpy_type)
        self.itemsize = self._numpy.itemsize

    def __repr__(self):
        return "cagrad." + self._name

    def __reduce__(self):  # pickles as a reference to the module-level singleton
        return self._name


float32 = dtype(0, "float32", True, np.float32)
float64 = dtype(1, "float64", True, np.float64)
int64 = dtype(2, "int64", False, np.int64)

# index = _C dtype code
DTYPES = (float32, float64, int64)

# numpy dtypes that map onto a cagrad dtype without losing values
_FROM_NUMPY = {np.dtype(np.float32): float32, np.dtype(np.float64): float64,
               np.dtype(np.int64): int64}


def dtype_from_numpy(np_dtype):
    """The cagrad dtype for a numpy dtype, or None if cagrad has no such dtype."""
    return _FROM_NUMPY.get(np_dtype)


def check_dtype(value, what="dtype"):
    """Return value if it is a cagrad dtype, else raise TypeError saying which ones exist."""
    if type(value) is dtype:
        return value
    raise TypeError(f"{what} must be cagrad.float32, cagrad.float64 or cagrad.int64, not "
                    f"{value!r} (cagrad has no other dtypes)")


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
