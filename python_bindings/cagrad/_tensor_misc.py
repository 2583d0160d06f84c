"""Tensor.type(), apply_(), map_(), torch.signbit, torch.histogram and the print options
(set_printoptions / get_printoptions).

None of these has a gradient in PyTorch: their values are computed with numpy.
"""

import contextlib
from collections import namedtuple

import numpy as np

from . import _C
from . import _tensor_repr
from ._dtype import DTYPES, check_dtype
from ._dtype import dtype as _dtype_type

_TensorBase = _C.TensorBase
_FLOATS = (0, 1)
_TYPE_NAMES = {0: "Float", 1: "Double", 2: "Long", 3: "Bool"}
# the legacy tensor type names: torch.FloatTensor is float32, ...
_LEGACY = {"FloatTensor": "float32", "DoubleTensor": "float64", "LongTensor": "int64",
           "BoolTensor": "bool"}


def _const(arr):
    return _C.copy_from_buffer(np.array(arr, order="C"))  # keeps 0-d (ascontiguousarray does not)


def _legacy_name(t):
    return f"torch.{_TYPE_NAMES[t._dtype]}Tensor"


# ------------------------------------------------------------------------------ type()
def type_(self, dtype=None, non_blocking=False, **kwargs):
    """With no argument, the legacy type name ('torch.FloatTensor'); with a dtype or such a
    name, self converted to it (self itself when it already has it)."""
    if dtype is None:
        return _legacy_name(self)
    if isinstance(dtype, str):
        dtype = _dtype_from_name(dtype)
    elif isinstance(dtype, type) and type(getattr(dtype, "dtype", None)) is _dtype_type:
        dtype = dtype.dtype  # a legacy type: t.type(torch.DoubleTensor) (_legacy_tensors.py)
    elif type(dtype) is not _dtype_type:
        raise TypeError(f"type(): expected a dtype or a type name string, got "
                        f"{type(dtype).__name__}")
    return self.to(check_dtype(dtype))


def _dtype_from_name(name):
    parts = name.split(".")
    if len(parts) == 3 and parts[0] in ("torch", "cagrad") and parts[1] == "cuda":
        raise RuntimeError(f"type({name!r}): cagrad runs on the CPU only (see "
                           f"docs/python-api.md)")
    if len(parts) != 2 or parts[0] not in ("torch", "cagrad") or parts[1] not in _LEGACY:
        raise ValueError(f"invalid type: {name!r}")
    return DTYPES[[str(d).split(".")[-1] for d in DTYPES].index(_LEGACY[parts[1]])]


# ------------------------------------------------------------------------------ apply_, map_
def _check_no_grad(self, fname):
    if self.requires_grad:
        raise RuntimeError(f"Can't call {fname}() on Variable that requires grad. Use "
                           f"var.detach().{fname}() instead.")


def _python_values(arr):
    return arr.astype(object).reshape(-1)


def _write_back(self, values):
    arr = np.asarray(values, dtype=object).reshape(self._shape).astype(
        np.asarray(memoryview(self)).dtype)
    _C.copy_(self, _const(arr))
    return self


def apply_(self, callable):
    """In place: every element x becomes callable(x) (a Python number in, one out), as
    torch's CPU-only apply_; slow by design (one Python call per element)."""
    _check_no_grad(self, "apply_")
    values = _python_values(np.asarray(memoryview(self)))
    return _write_back(self, [callable(v.item() if hasattr(v, "item") else v) for v in values])


def map_(self, tensor, callable):
    """In place: self[i] = callable(self[i], tensor[i]), tensor broadcast to self's shape."""
    _check_no_grad(self, "map_")
    if not isinstance(tensor, _TensorBase) or tensor._dtype != self._dtype:
        got = _legacy_name(tensor) if isinstance(tensor, _TensorBase) else type(tensor).__name__
        raise TypeError(f"map_: expected {_legacy_name(self)} for 'other' (got {got})")
    mine = np.asarray(memoryview(self))
    other = np.broadcast_to(np.asarray(memoryview(tensor)), mine.shape)
    return _write_back(self, [callable(a.item(), b.item())
                              for a, b in zip(mine.reshape(-1), other.reshape(-1))])


# ------------------------------------------------------------------------------ signbit
def signbit(input, *, out=None):
    """True where the sign bit is set (negative numbers and -0.0), as a bool tensor."""
    if out is not None:
        raise NotImplementedError("cagrad's signbit() does not support out=; use the "
                                  "returned tensor")
    if not isinstance(input, _TensorBase):
        raise TypeError(f"signbit(): argument 'input' (position 1) must be Tensor, not "
                        f"{type(input).__name__}")
    arr = np.asarray(memoryview(input))
    return _const(np.signbit(arr) if arr.dtype != np.bool_ else np.zeros(arr.shape, bool))


# ------------------------------------------------------------------------------ histogram
histogram_result = namedtuple("histogram", ["hist", "bin_edges"])


def _edges(arr, bins, range, dtype):
    if isinstance(bins, _TensorBase):
        if bins.ndim != 1:
            raise RuntimeError("torch.histogramdd(): bins tensor should have one dimension, "
                               f"but got {bins.ndim} dimensions in the bins tensor for "
                               f"dimension 0")
        return np.asarray(memoryview(bins)).astype(dtype)
    if isinstance(bins, bool) or not isinstance(bins, int):
        raise TypeError(f"histogram(): argument 'bins' must be int or Tensor, not "
                        f"{type(bins).__name__}")
    if bins <= 0:
        raise RuntimeError(f"torch.histogram(): bins must be > 0, but got {bins} for "
                           f"dimension 0")
    if range is not None:
        lo, hi = (float(v) for v in range)
    else:
        lo, hi = (float(arr.min()), float(arr.max())) if arr.size else (0.0, 0.0)
    if lo > hi:
        raise RuntimeError(f"torch.histogramdd: min should not exceed max, but got min "
                           f"{lo:g} max {hi:g} for dimension 0")
    if lo == hi:  # PyTorch widens an empty range by half a unit on each side
        lo, hi = lo - 0.5, hi + 0.5
    return np.linspace(lo, hi, bins + 1).astype(dtype)


def histogram(input, bins, *, range=None, weight=None, density=False, out=None):  # noqa: A002
    """(hist, bin_edges) of input's values: bins equal-width bins over range (default: the
    values' min and max) or the given edges (a 1-d tensor); the last bin includes its right
    edge. weight weighs each value; density divides by the total times the bin width."""
    if out is not None:
        raise NotImplementedError("cagrad's histogram() does not support out=; use the "
                                  "returned tensors")
    if input._dtype not in _FLOATS:
        raise NotImplementedError(f"\"histogramdd\" not implemented for "
                                  f"'{_TYPE_NAMES[input._dtype]}'")
    arr = np.asarray(memoryview(input)).reshape(-1)
    edges = _edges(arr, bins, range, arr.dtype)
    w = None
    if weight is not None:
        if tuple(weight._shape) != tuple(input._shape):
            raise RuntimeError("torch.histogramdd(): if weight tensor is provided it should "
                               "have the same shape as the input tensor excluding its "
                               "innermost dimension")
        w = np.asarray(memoryview(weight)).reshape(-1).astype(np.float64)
    hist, _ = np.histogram(arr.astype(np.float64), bins=edges.astype(np.float64), weights=w)
    hist = hist.astype(np.float64)
    if density:
        total = hist.sum()
        hist = hist / (total * np.diff(edges.astype(np.float64)))
    return histogram_result(_const(hist.astype(arr.dtype)), _const(edges))


# ------------------------------------------------------------------------------ printoptions
_PROFILES = {"default": dict(precision=4, threshold=1000, edgeitems=3, linewidth=80),
             "short": dict(precision=2, threshold=1000, edgeitems=2, linewidth=80),
             "full": dict(precision=4, threshold=np.inf, edgeitems=3, linewidth=80)}
_OPTION_NAMES = {"precision": "_PRECISION", "threshold": "_THRESHOLD",
                 "edgeitems": "_EDGEITEMS", "linewidth": "_LINEWIDTH"}
_state = {"sci_mode": None}


class _SciFormatter(_tensor_repr._Formatter):
    """The repr's formatter with sci_mode forced (True/False) when set_printoptions says."""

    def __init__(self, values):
        super().__init__(values)
        if _state["sci_mode"] is not None and self.floating:
            self.sci = bool(_state["sci_mode"])
            nz = values[np.isfinite(values) & (values != 0)].astype(np.float64)
            samples = (nz.min(), nz.max(), nz[np.abs(nz).argmin()]) if nz.size else ()
            self.width = max([1] + [len(self._plain(float(v))) for v in samples])


_tensor_repr._Formatter = _SciFormatter


def set_printoptions(precision=None, threshold=None, edgeitems=None, linewidth=None,
                     profile=None, sci_mode=None):
    """torch.set_printoptions: how repr(tensor) prints floats (precision digits, sci_mode
    True/False/None for automatic), when it summarises (more than threshold elements,
    edgeitems at each end) and the line width; profile 'default', 'short' or 'full' first
    resets them."""
    if profile is not None:
        if profile not in _PROFILES:
            raise ValueError(f"Invalid profile: {profile}")
        for name, value in _PROFILES[profile].items():
            setattr(_tensor_repr, _OPTION_NAMES[name], value)
    given = dict(precision=precision, threshold=threshold, edgeitems=edgeitems,
                 linewidth=linewidth)
    for name, value in given.items():
        if value is not None:
            setattr(_tensor_repr, _OPTION_NAMES[name], value)
    _state["sci_mode"] = sci_mode


def get_printoptions():
    """The current print options, as torch.get_printoptions()."""
    options = {name: getattr(_tensor_repr, attr) for name, attr in _OPTION_NAMES.items()}
    options["sci_mode"] = _state["sci_mode"]
    return options


@contextlib.contextmanager
def printoptions(**kwargs):
    """torch._tensor_str.printoptions: set the options for a `with` block."""
    saved = get_printoptions()
    set_printoptions(**kwargs)
    try:
        yield
    finally:
        set_printoptions(**saved)
