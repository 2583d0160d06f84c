"""cagrad.testing: assert_close, make_tensor and the deprecated assert_allclose, with
torch.testing's arguments, default tolerances, pairing rules and messages.

assert_close walks (nested) sequences and mappings, pairs their leaves (None, bools,
Python/NumPy numbers, tensors and anything of one type that cagrad.as_tensor takes, such
as NumPy arrays), refuses what torch refuses, and compares. As in torch, every pair is
formed (and may fail with TypeError/ValueError) before any values are compared, and a
`msg` override applies to comparison failures only.
"""

import cmath
import collections.abc
import math
import warnings

import numpy as np

from . import _dtype
from ._dtype import bfloat16, bool as _bool, float16, float32, float64, int64

__all__ = ["assert_close", "make_tensor", "assert_allclose"]

# {NumPy dtype: (rtol, atol)}, torch's defaults; any other dtype compares exactly. cagrad's
# tensors are float32 or float64; float16 (and complex) values come from NumPy arrays.
_DEFAULT_TOLERANCES = {
    np.dtype(np.float16): (0.001, 1e-5),
    np.dtype(np.float32): (1.3e-6, 1e-5),
    np.dtype(np.float64): (1e-7, 1e-7),
    np.dtype(np.complex64): (1.3e-6, 1e-5),
    np.dtype(np.complex128): (1e-7, 1e-7),
}
# a Python number stands for a tensor of this dtype when tolerances are chosen
_NUMBER_DTYPES = {int: np.dtype(np.int64), float: np.dtype(np.float64),
                  complex: np.dtype(np.complex128)}


class _Failure(Exception):
    """One failed check: the exception type to raise, its text, and where in the nested
    inputs it happened (the keys and indices from the top)."""

    def __init__(self, error_type, text, path):
        super().__init__(text)
        self.error_type = error_type
        self.text = text
        self.path = path

    def as_error(self, msg=None):
        if isinstance(msg, str):
            return self.error_type(msg)
        text = self.text
        if self.path:
            text += "\n\nThe failure occurred for item " + "".join(str([k]) for k in self.path)
        return self.error_type(msg(text) if callable(msg) else text)


class _NotThisKind(Exception):
    """The inputs are not of the kind a pair maker handles: try the next one."""


def _tensor_type():
    from ._tensor import Tensor
    return Tensor


# ------------------------------------------------------------------ tolerances
def _tolerances(dtypes, rtol, atol, path):
    """(rtol, atol): both given, or the loosest defaults of dtypes; one alone is an error."""
    if (rtol is None) != (atol is None):
        missing = "rtol" if rtol is None else "atol"
        raise _Failure(ValueError, f"Both 'rtol' and 'atol' must be either specified or "
                                   f"omitted, but got no {missing}.", path)
    if rtol is not None:
        return rtol, atol
    chosen = [_DEFAULT_TOLERANCES.get(d, (0.0, 0.0)) for d in dtypes]
    return max(r for r, _ in chosen), max(a for _, a in chosen)


# ------------------------------------------------------------------ mismatch messages
def _diff_line(kind, diff, index, tol, exact):
    if index is None:
        line = f"{kind.title()} difference: {diff}"
    else:
        line = f"Greatest {kind} difference: {diff} at index {index}"
    return line if exact else line + f" (up to {tol} allowed)"


def _mismatch_text(what, extra, abs_diff, abs_index, rel_diff, rel_index, rtol, atol):
    exact = rtol == 0 and atol == 0
    lines = [f"{what} are not {'equal' if exact else 'close'}!", "", extra,
             _diff_line("absolute", abs_diff, abs_index, atol, exact),
             _diff_line("relative", rel_diff, rel_index, rtol, exact)]
    return "\n".join(lines)


def _scalar_mismatch_text(actual, expected, rtol, atol):
    abs_diff = abs(actual - expected)
    rel_diff = float("inf") if expected == 0 else abs_diff / abs(expected)
    return _mismatch_text("Scalars", f"Expected {expected} but got {actual}.", abs_diff, None,
                          rel_diff, None, rtol, atol)


def _index_of(flat_index, shape):
    return tuple(int(i) for i in np.unravel_index(flat_index, shape))


def _greatest(diffs, mismatched):
    """(value, flat index) of the greatest diff among the mismatched elements; NaN wins,
    and the first of equal values, as torch.max does."""
    masked = np.where(mismatched, diffs, np.zeros((), diffs.dtype))
    where = int(np.argmax(masked))
    return masked[where].item(), where


def _default_float():
    from ._creation import get_default_dtype
    return get_default_dtype()._numpy


def _tensor_mismatch_text(actual, expected, close, rtol, atol):
    total = close.size
    wrong = total - int(np.count_nonzero(close))
    extra = f"Mismatched elements: {wrong} / {total} ({wrong / total:.1%})"
    mismatched = ~close.reshape(-1)
    a, e = actual.reshape(-1), expected.reshape(-1)
    if a.dtype.kind not in "fc":
        # integers and bools: differences in int64, and int64 / int64 divides into
        # the default float dtype
        a, e = a.astype(np.int64), e.astype(np.int64)
    with np.errstate(all="ignore"):
        abs_diff = np.abs(a - e)
        rel_type = abs_diff.dtype if abs_diff.dtype.kind == "f" else _default_float()
        rel_diff = (abs_diff / np.abs(e)).astype(rel_type)
    abs_max, abs_at = _greatest(abs_diff, mismatched)
    rel_max, rel_at = _greatest(rel_diff, mismatched)
    return _mismatch_text("Tensor-likes", extra, abs_max, _index_of(abs_at, close.shape),
                          rel_max, _index_of(rel_at, close.shape), rtol, atol)


# ------------------------------------------------------------------ the pair kinds
class _NonePair:
    def __init__(self, actual, expected, path, options):
        if actual is not None and expected is not None:
            raise _NotThisKind
        self.actual, self.expected, self.path = actual, expected, path

    def compare(self):
        if not (self.actual is None and self.expected is None):
            raise _Failure(AssertionError,
                           f"None mismatch: {self.actual} is not {self.expected}", self.path)


class _BoolPair:
    _TYPES = (bool, np.bool_)

    def __init__(self, actual, expected, path, options):
        if not (isinstance(actual, self._TYPES) and isinstance(expected, self._TYPES)):
            raise _NotThisKind
        self.actual, self.expected, self.path = bool(actual), bool(expected), path

    def compare(self):
        if self.actual is not self.expected:
            raise _Failure(AssertionError,
                           f"Booleans mismatch: {self.actual} is not {self.expected}", self.path)


class _NumberPair:
    _TYPES = (int, float, complex, np.number)

    def __init__(self, actual, expected, path, options):
        if not (isinstance(actual, self._TYPES) and isinstance(expected, self._TYPES)):
            raise _NotThisKind
        self.actual, self.expected = (v.item() if isinstance(v, np.number) else v
                                      for v in (actual, expected))
        self.path = path
        for value in (self.actual, self.expected):
            if type(value) not in _NUMBER_DTYPES:  # a bool beside a number, an int subclass
                where = "".join(str([k]) for k in path) or "the top level"
                raise RuntimeError(f"assert_close cannot compare {type(actual).__name__}() "
                                   f"with {type(expected).__name__}() at item {where}: a bool "
                                   f"pairs only with a bool, a number with a number")
        self.rtol, self.atol = _tolerances(
            [_NUMBER_DTYPES[type(v)] for v in (self.actual, self.expected)],
            options["rtol"], options["atol"], path)
        self.equal_nan = options["equal_nan"]
        self.check_dtype = options["check_dtype"]

    def compare(self):
        actual, expected = self.actual, self.expected
        if self.check_dtype and type(actual) is not type(expected):
            raise _Failure(AssertionError, f"The (d)types do not match: {type(actual)} != "
                                           f"{type(expected)}.", self.path)
        if actual == expected:
            return
        if self.equal_nan and cmath.isnan(actual) and cmath.isnan(expected):
            return
        abs_diff = abs(actual - expected)
        if cmath.isfinite(abs_diff) and abs_diff <= self.atol + self.rtol * abs(expected):
            return
        raise _Failure(AssertionError,
                       _scalar_mismatch_text(actual, expected, self.rtol, self.atol), self.path)


class _Side:
    """One side of a tensor pair: its values as a NumPy array, and the attributes that
    assert_close checks. A NumPy array keeps its own dtype (as torch.as_tensor keeps it)."""

    def __init__(self, value):
        if isinstance(value, np.ndarray):
            if value.dtype.kind not in "biufc":
                raise _NotThisKind
            self.values = value
            self.dtype = _dtype.dtype_from_numpy(value.dtype) or _numpy_dtype_name(value.dtype)
            self.shape = _dtype.Size(value.shape)
            self.stride = tuple(s // value.itemsize for s in value.strides)
            self.device, self.layout = _dtype.device("cpu"), _dtype.strided
            return
        tensor = _as_tensor(value)
        self.values = tensor.detach().numpy()
        self.dtype, self.shape, self.stride = tensor.dtype, tensor.shape, tensor.stride()
        self.device, self.layout = tensor.device, getattr(tensor, "layout", _dtype.strided)


def _numpy_dtype_name(np_dtype):
    # float16 is a cagrad dtype name (cagrad computes in it nowhere); others are NumPy's
    return float16 if np_dtype == np.float16 else f"numpy.{np_dtype.name}"


def _as_tensor(value):
    """value as a cagrad tensor (tensors as they are); _NotThisKind when it cannot be one."""
    if isinstance(value, _tensor_type()):
        return value
    from ._creation import as_tensor
    try:
        return as_tensor(value)
    except Exception:
        raise _NotThisKind from None


def _common_dtype(a, b):
    """The NumPy dtype torch.promote_types gives: a higher category (bool < integer <
    float < complex) wins whatever its size, else the larger of the two."""
    order = "biufc"
    rank_a, rank_b = (order.index(d.kind) if d.kind != "u" else 1 for d in (a, b))
    if rank_a == rank_b or {a.kind, b.kind} == {"i", "u"}:
        return np.promote_types(a, b)
    higher, lower = (a, b) if rank_a > rank_b else (b, a)
    if higher.kind == "c" and lower.kind == "f":
        return np.promote_types(higher, lower)
    return higher


class _TensorPair:
    def __init__(self, actual, expected, path, options):
        related = isinstance(actual, type(expected)) or isinstance(expected, type(actual))
        if not related:
            raise _NotThisKind
        if not options["allow_subclasses"] and type(actual) is not type(expected):
            raise _NotThisKind
        self.actual, self.expected = _Side(actual), _Side(expected)
        self.path = path
        self.rtol, self.atol = _tolerances(
            [side.values.dtype for side in (self.actual, self.expected)],
            options["rtol"], options["atol"], path)
        self.options = options

    def _fail_attribute(self, name, actual_value, expected_value):
        raise _Failure(AssertionError, f"The values for attribute '{name}' do not match: "
                                       f"{actual_value} != {expected_value}.", self.path)

    def _compare_attributes(self, actual, expected):
        if actual.shape != expected.shape:
            self._fail_attribute("shape", actual.shape, expected.shape)
        if actual.layout != expected.layout:
            if self.options["check_layout"]:
                self._fail_attribute("layout", actual.layout, expected.layout)
        elif self.options["check_stride"] and actual.stride != expected.stride:
            self._fail_attribute("stride()", actual.stride, expected.stride)
        if self.options["check_device"] and actual.device != expected.device:
            self._fail_attribute("device", actual.device, expected.device)
        if self.options["check_dtype"] and actual.values.dtype != expected.values.dtype:
            self._fail_attribute("dtype", actual.dtype, expected.dtype)

    def compare(self):
        self._compare_attributes(self.actual, self.expected)
        a, e = self.actual.values, self.expected.values
        if a.dtype != e.dtype:
            common = _common_dtype(a.dtype, e.dtype)
            a, e = a.astype(common), e.astype(common)
        close = _isclose(a, e, self.rtol, self.atol, self.options["equal_nan"])
        if close.all():
            return
        if a.ndim == 0:
            text = _scalar_mismatch_text(a.item(), e.item(), self.rtol, self.atol)
        else:
            text = _tensor_mismatch_text(a, e, close, self.rtol, self.atol)
        raise _Failure(AssertionError, text, self.path)


def _isclose(a, e, rtol, atol, equal_nan):
    """torch.isclose on NumPy arrays of one dtype: equal, both NaN (with equal_nan), or a
    finite difference within atol + |rtol * e|, computed in the values' float dtype
    (integers and bools in the default float dtype, as torch.isclose converts them)."""
    close = a == e
    if a.dtype.kind in "fc" and equal_nan:
        close |= np.isnan(a) & np.isnan(e)
    if rtol == 0 and atol == 0:
        return close
    with np.errstate(all="ignore"):
        work = a.dtype if a.dtype.kind in "fc" else _default_float()
        a, e = a.astype(work), e.astype(work)
        diff = np.abs(a - e)
        real = np.finfo(work).dtype  # a complex dtype's tolerances are real numbers
        allowed = np.asarray(atol, real) + np.abs(np.asarray(rtol, real) * e)
        return close | (np.isfinite(diff) & (diff <= allowed))


_PAIR_KINDS = (_NonePair, _BoolPair, _NumberPair, _TensorPair)


# ------------------------------------------------------------------ pairing
def _is_sequence(value):
    return isinstance(value, collections.abc.Sequence) and not isinstance(value, str)


def _sorted_if_possible(keys):
    try:
        return sorted(keys)
    except Exception:
        return list(keys)


def _pairs(actual, expected, path, options):
    """Every leaf pair of the two nested inputs, depth first; _Failure on a structure
    mismatch or leaves that no pair kind takes."""
    if _is_sequence(actual) and _is_sequence(expected):
        if len(actual) != len(expected):
            raise _Failure(AssertionError, f"The length of the sequences mismatch: "
                                           f"{len(actual)} != {len(expected)}", path)
        found = []
        for i in range(len(actual)):
            found += _pairs(actual[i], expected[i], (*path, i), options)
        return found
    if isinstance(actual, collections.abc.Mapping) and isinstance(expected,
                                                                  collections.abc.Mapping):
        return _mapping_pairs(actual, expected, path, options)
    for kind in _PAIR_KINDS:
        try:
            return [kind(actual, expected, path, options)]
        except _NotThisKind:
            continue
    raise _Failure(TypeError, f"No comparison pair was able to handle inputs of type "
                              f"{type(actual)} and {type(expected)}.", path)


def _mapping_pairs(actual, expected, path, options):
    actual_keys, expected_keys = set(actual.keys()), set(expected.keys())
    if actual_keys != expected_keys:
        raise _Failure(AssertionError,
                       f"The keys of the mappings do not match:\n"
                       f"Missing keys in the actual mapping: "
                       f"{sorted(expected_keys - actual_keys)}\n"
                       f"Additional keys in the actual mapping: "
                       f"{sorted(actual_keys - expected_keys)}", path)
    found = []
    for key in _sorted_if_possible(actual_keys):
        found += _pairs(actual[key], expected[key], (*path, key), options)
    return found


def assert_close(actual, expected, *, allow_subclasses=True, rtol=None, atol=None,
                 equal_nan=False, check_device=True, check_dtype=True, check_layout=True,
                 check_stride=False, msg=None):
    """Raise AssertionError unless actual and expected are close (torch.testing.assert_close):
    |actual - expected| <= atol + rtol * |expected| elementwise, infinities equal only to
    themselves, NaNs equal only with equal_nan, and the same shape (and device, dtype,
    layout, strides as the check_* flags ask). msg replaces the message (a str) or edits
    it (a callable that gets the message)."""
    __tracebackhide__ = True
    options = dict(allow_subclasses=allow_subclasses, rtol=rtol, atol=atol, equal_nan=equal_nan,
                   check_device=check_device, check_dtype=check_dtype,
                   check_layout=check_layout, check_stride=check_stride)
    try:
        pairs = _pairs(actual, expected, (), options)
    except _Failure as failure:
        raise failure.as_error() from None
    for pair in pairs:
        try:
            pair.compare()
        except _Failure as failure:
            raise failure.as_error(msg) from None


_ALLCLOSE_TOLERANCES = {float16: (1e-3, 1e-3), float32: (1e-4, 1e-5), float64: (1e-5, 1e-8)}


def assert_allclose(actual, expected, rtol=None, atol=None, equal_nan=True, msg=""):
    """Deprecated in torch since 1.12 (a FutureWarning), kept there: assert_close with
    check_dtype=False, equal_nan=True and looser float tolerances."""
    warnings.warn("`cagrad.testing.assert_allclose()` is deprecated since 1.12 and will be "
                  "removed in a future release. Please use `cagrad.testing.assert_close()` "
                  "instead. You can find detailed upgrade instructions in "
                  "https://github.com/pytorch/pytorch/issues/61844.", FutureWarning,
                  stacklevel=2)
    from ._creation import tensor
    tensor_type = _tensor_type()
    if not isinstance(actual, tensor_type):
        actual = tensor(actual)
    if not isinstance(expected, tensor_type):
        expected = tensor(expected, dtype=actual.dtype)
    if rtol is None and atol is None:
        chosen = [_ALLCLOSE_TOLERANCES.get(t.dtype, (0.0, 0.0)) for t in (actual, expected)]
        rtol, atol = max(r for r, _ in chosen), max(a for _, a in chosen)
    assert_close(actual, expected, rtol=rtol, atol=atol, equal_nan=equal_nan, check_device=True,
                 check_dtype=False, check_stride=False, msg=msg or None)


# ------------------------------------------------------------------ make_tensor
def _checked_range(dtype, low, high, lowest, highest, default_low, default_high):
    """[low, high) from the arguments: defaults for None, errors as torch raises them,
    clamped into [lowest, highest); integer bounds rounded up."""
    low = default_low if low is None else low
    high = default_high if high is None else high
    if any(isinstance(v, float) and math.isnan(v) for v in (low, high)):
        raise ValueError(f"`low` and `high` cannot be NaN, but got low={low} and high={high}")
    if low == high and dtype.is_floating_point:
        warnings.warn("Passing `low==high` to `cagrad.testing.make_tensor` for floating or "
                      "complex types is deprecated since 2.1 and will be removed in 2.3. "
                      "Use `cagrad.full(...)` instead.", FutureWarning, stacklevel=3)
    elif low >= high:
        raise ValueError(f"`low` must be less than `high`, but got {low} >= {high}")
    elif high < lowest or low >= highest:
        raise ValueError(f"The value interval specified by `low` and `high` is [{low}, "
                         f"{high}), but {dtype} only supports [{lowest}, {highest})")
    low, high = min(max(low, lowest), highest), min(max(high, lowest), highest)
    if not dtype.is_floating_point:
        # ceil both: no value below low, and randint's high is exclusive already
        return math.ceil(low), math.ceil(high)
    return low, high


def _random_values(shape, dtype, device, low, high):
    from ._creation import empty
    from ._more_ops import finfo, iinfo
    from ._random import randint
    if dtype is _bool:
        low, high = _checked_range(dtype, low, high, 0, 2, 0, 2)
        return randint(low, high, shape, dtype=dtype, device=device)
    if dtype is int64:
        # randint cannot draw int64's maximum: the exclusive end stays at it
        limits = iinfo(dtype)
        low, high = _checked_range(dtype, low, high, limits.min, limits.max, -9, 10)
        return randint(low, high, shape, dtype=dtype, device=device)
    limits = finfo(dtype)
    low, high = _checked_range(dtype, low, high, limits.min, limits.max, -9, 9)
    result = empty(shape, dtype=dtype, device=device)
    if high - low >= limits.max:  # the span itself would overflow: draw half, then double
        return result.uniform_(low / 2, high / 2).mul_(2)
    return result.uniform_(low, high)


def make_tensor(*shape, dtype, device, low=None, high=None, requires_grad=False,
                noncontiguous=False, exclude_zero=False, memory_format=None):
    """A tensor of the shape drawn uniformly from [low, high) (torch.testing.make_tensor).
    Defaults: [-9, 9) for floats, [-9, 10) for int64, {False, True} for bool."""
    if len(shape) == 1 and isinstance(shape[0], collections.abc.Sequence):
        shape = shape[0]
    shape = tuple(shape)
    if noncontiguous and memory_format is not None:
        raise ValueError(f"The parameters `noncontiguous` and `memory_format` are mutually "
                         f"exclusive, but got noncontiguous={noncontiguous} and "
                         f"memory_format={memory_format}")
    if dtype in (float16, bfloat16):
        raise _dtype.unsupported_dtype_error(dtype)
    if dtype not in (float32, float64, int64, _bool):
        raise TypeError(f"The requested dtype '{dtype}' is not supported by "
                        f"cagrad.testing.make_tensor(): cagrad has float32, float64, int64 "
                        f"and bool (see docs/python-api.md)")
    if requires_grad and not dtype.is_floating_point:
        raise ValueError(f"`requires_grad=True` is not supported for boolean and integral "
                         f"dtypes, but got dtype={dtype}")
    noncontiguous = noncontiguous and math.prod(shape) > 1
    if noncontiguous:  # twice the last dimension, then every second element of it
        shape = (*shape[:-1], 2 * shape[-1])
    result = _random_values(shape, dtype, device, low, high)
    if noncontiguous:
        result = result[..., 1::2]
    elif memory_format is not None:
        result = result.clone(memory_format=memory_format)
    if exclude_zero:
        from ._more_ops import finfo
        result[result == 0] = finfo(dtype).tiny if dtype.is_floating_point else 1
    if dtype.is_floating_point:
        result.requires_grad = requires_grad
    return result


def __getattr__(name):
    # only reached for names cagrad lacks (FileCheck, ...)
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.testing' has no attribute {name!r}: cagrad.testing "
                         f"has assert_close, make_tensor and assert_allclose "
                         f"(see docs/python-api.md)")
