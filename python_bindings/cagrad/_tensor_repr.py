"""repr(tensor) as PyTorch prints it (its default print options): the number format, the
summarised edges of big tensors, and the dtype / grad_fn / requires_grad suffixes."""

import numpy as np

from . import _creation
from ._dtype import DTYPES
from .autograd import graph as _graph

_INT64, _BOOL = 2, 3  # _C dtype codes


def _node_name(t):
    """The PyTorch name of t's grad_fn (AddBackward0), or None."""
    name = t._grad_fn_name
    return None if name is None else _graph.python_name(name)


# torch's default print options
_PRECISION = 4
_LINEWIDTH = 80
_EDGEITEMS = 3
_THRESHOLD = 1000


class _Formatter:
    """Formats the elements of one tensor as torch does: ints as they are; floats as '1.'
    when all are integers, '1.5000' fixed point, or '1.5000e+09' when the magnitudes span
    too much; all right-aligned to the width of the widest nonzero finite value."""

    def __init__(self, values):
        self.floating = values.dtype.kind == "f"
        self.int_mode = self.sci = False
        if not self.floating:
            self.width = max(len(str(values.min())), len(str(values.max())))
            return
        nz = values[np.isfinite(values) & (values != 0)].astype(np.float64)
        self.int_mode = bool(np.all(nz == np.ceil(nz)))
        self.width = 1
        if nz.size:
            mags = np.abs(nz)
            lo, hi = mags.min(), mags.max()
            self.sci = hi / lo > 1000.0 or hi > 1.0e8 or (not self.int_mode and lo < 1.0e-4)
            # the widest strings come from the extremes and the smallest magnitude
            samples = (nz.min(), nz.max(), nz[mags.argmin()])
            self.width = max(len(self._plain(float(v))) for v in samples)

    def _plain(self, v):
        if not self.floating:
            return str(v)
        if self.sci:
            return f"{v:.{_PRECISION}e}"
        if self.int_mode:
            return f"{v:.0f}." if np.isfinite(v) else f"{v:.0f}"
        return f"{v:.{_PRECISION}f}"

    def __call__(self, v):
        return self._plain(v).rjust(self.width)


def _summarized(arr):
    """Only the first and last _EDGEITEMS entries along every long dim."""
    for d in range(arr.ndim):
        if arr.shape[d] > 2 * _EDGEITEMS:
            keep = list(range(_EDGEITEMS)) + list(range(-_EDGEITEMS, 0))
            arr = arr.take(keep, axis=d)
    return arr


def _array_str(arr, indent, summarize, fmt):
    if arr.ndim == 0:
        return fmt(arr.item())
    long_dim = summarize and arr.shape[0] > 2 * _EDGEITEMS
    if arr.ndim == 1:
        items = arr.tolist()
        if long_dim:
            cells = [fmt(v) for v in items[:_EDGEITEMS]] + [" ..."] + [
                fmt(v) for v in items[-_EDGEITEMS:]]
        else:
            cells = [fmt(v) for v in items]
        per_line = max(1, (_LINEWIDTH - indent) // (fmt.width + 2))
        lines = [", ".join(cells[i:i + per_line]) for i in range(0, len(cells), per_line)]
        return "[" + (",\n" + " " * (indent + 1)).join(lines) + "]"
    rows = range(arr.shape[0])
    if long_dim:
        rows = list(range(_EDGEITEMS)) + [None] + list(range(-_EDGEITEMS, 0))
    parts = ["..." if i is None else _array_str(arr[i], indent + 1, summarize, fmt)
             for i in rows]
    return "[" + ("," + "\n" * (arr.ndim - 1) + " " * (indent + 1)).join(parts) + "]"


def _repr(t):
    arr = np.asarray(memoryview(t))
    prefix = "tensor("
    indent = len(prefix)
    extras = []
    dtype = DTYPES[t._dtype]
    default = _creation.get_default_dtype()
    if arr.size == 0:
        body = "[]"
        if arr.ndim != 1:
            extras.append(f"size={tuple(arr.shape)}")
        if dtype is not default:
            extras.append(f"dtype={dtype!r}")
    else:
        summarize = arr.size > _THRESHOLD
        fmt = _Formatter((_summarized(arr) if summarize else arr).reshape(-1))
        body = _array_str(arr, indent, summarize, fmt)
        if dtype is not default and t._dtype != _INT64 and t._dtype != _BOOL:
            extras.append(f"dtype={dtype!r}")
    name = _node_name(t)
    if name is not None:
        extras.append(f"grad_fn=<{name}>")
    elif t.requires_grad:
        extras.append("requires_grad=True")
    # suffixes go on the last line while it fits in the line width, else on their own
    out = [prefix, body]
    last_len = len(body) - body.rfind("\n") - 1 + (indent if "\n" not in body else 0)
    for extra in extras:
        if last_len + len(extra) + 2 > _LINEWIDTH:
            out.append(",\n" + " " * indent + extra)
            last_len = indent + len(extra)
        else:
            out.append(", " + extra)
            last_len += len(extra) + 2
    out.append(")")
    return "".join(out)
