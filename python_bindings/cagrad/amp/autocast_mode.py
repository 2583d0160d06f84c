"""amp.autocast: PyTorch's mixed-precision context manager and decorator, for a library
that computes in float32/float64 only.

enabled=False is a no-op, as in PyTorch. enabled=True follows what PyTorch does where it
cannot autocast: for 'cuda' (and the other accelerators, which cagrad lacks) it warns and
disables itself; on the CPU a dtype that CPU autocast does not support (float32, float64)
warns and disables, as PyTorch does. CPU autocast to float16/bfloat16 (PyTorch's default
is bfloat16) would compute in a precision cagrad does not have, so it raises.
"""

import functools
import warnings

from .. import _dtype

# the device types PyTorch's autocast knows (anything else is a RuntimeError there too)
_DEVICE_TYPES = ("cpu", "cuda", "ipu", "xpu", "mkldnn", "opengl", "opencl", "ideep", "hip",
                 "ve", "fpga", "maia", "xla", "lazy", "vulkan", "mps", "meta", "hpu", "mtia",
                 "privateuseone")
_CPU_AUTOCAST_DTYPES = (_dtype.bfloat16, _dtype.float16)
# The devices with autocast state in PyTorch, and each one's default dtype ('hip' has a
# dtype but no enabled flag); asking about another device is a RuntimeError, as there.
# _dtypes is the state torch.get_autocast_dtype reads: an autocast block sets its dtype
# even when disabled and restores the old one on exit. Enabled is always False here
# (cagrad never autocasts), so only the dtypes are kept.
_DEFAULT_DTYPES = {"cpu": _dtype.bfloat16, "hpu": _dtype.bfloat16, "xla": _dtype.bfloat16,
                   "maia": _dtype.bfloat16, "cuda": _dtype.float16, "ipu": _dtype.float16,
                   "xpu": _dtype.float16, "mps": _dtype.float16, "mtia": _dtype.float16,
                   "privateuseone": _dtype.float16, "hip": _dtype.float16}
_dtypes = {}


def _check_device_type(device_type):
    if not isinstance(device_type, str):
        raise ValueError(f"Expected `device_type` of type `str`, got: `{type(device_type)}`")
    if device_type.partition(":")[0] not in _DEVICE_TYPES:
        raise RuntimeError(f"Expected one of {', '.join(_DEVICE_TYPES)} device type at start "
                           f"of device string: {device_type}")


class autocast:
    """autocast(device_type, dtype=None, enabled=True, cache_enabled=None): see the module
    doc. Usable as a context manager and as a decorator."""

    def __init__(self, device_type, dtype=None, enabled=True, cache_enabled=None):
        _check_device_type(device_type)
        self.device = device_type.partition(":")[0]
        default = _dtype.bfloat16 if device_type == "cpu" else _dtype.float16
        self.fast_dtype = default if dtype is None else dtype
        self._cache_enabled = True if cache_enabled is None else cache_enabled
        self._enabled = bool(enabled) and self._can_autocast()

    def _can_autocast(self):
        if self.device != "cpu":
            warnings.warn(f"{self.device.upper()} is not available in cagrad (it runs on the CPU "
                          f"only). Disabling autocast.", UserWarning, stacklevel=3)
            return False
        if self.fast_dtype not in _CPU_AUTOCAST_DTYPES:
            warnings.warn("In CPU autocast, but the target dtype is not supported. Disabling "
                          "autocast.\nCPU Autocast only supports dtypes of cagrad.bfloat16, "
                          "cagrad.float16 currently.", UserWarning, stacklevel=3)
            return False
        raise NotImplementedError(
            f"cagrad has no autocast to {self.fast_dtype!r}: it computes in float32 and float64 "
            f"only (no half-precision kernels). Run without autocast (or pass enabled=False); "
            f"results are then float32, as PyTorch's without autocast. See docs/python-api.md")

    def __enter__(self):
        self._prev_dtype = _dtypes.get(self.device)
        _dtypes[self.device] = self.fast_dtype
        return self

    def __exit__(self, exc_type, exc_value, traceback):
        if self._prev_dtype is None:
            _dtypes.pop(self.device, None)
        else:
            _dtypes[self.device] = self._prev_dtype
        return False

    def __call__(self, func):
        @functools.wraps(func)
        def run_in_autocast(*args, **kwargs):
            with self:
                return func(*args, **kwargs)

        return run_in_autocast


def is_autocast_available(device_type):
    """Whether autocast works for device_type: never in cagrad (float32/float64 only)."""
    _check_device_type(device_type)
    return False


def _device_type_arg(fname, device_type):
    if not isinstance(device_type, str):
        raise TypeError(f"{fname}(): argument 'device_type' (position 1) must be str, not "
                        f"{type(device_type).__name__}")
    _check_device_type(device_type)
    return device_type.partition(":")[0]


def is_autocast_enabled(device_type="cuda"):
    """torch.is_autocast_enabled(device_type): False, always: cagrad never autocasts (an
    enabled autocast either disables itself or raises, see the module doc). Without an
    argument it asks about CUDA, as PyTorch's legacy form does."""
    device = _device_type_arg("is_autocast_enabled", device_type)
    if device not in _DEFAULT_DTYPES or device == "hip":
        raise RuntimeError("unknown device type for autocast in "
                           "get_autocast_dispatch_key_from_device_type")
    return False


def get_autocast_dtype(device_type):
    """torch.get_autocast_dtype(device_type): the dtype the innermost autocast block for
    that device named (enabled or not), else PyTorch's default for the device."""
    device = _device_type_arg("get_autocast_dtype", device_type)
    if device not in _DEFAULT_DTYPES:
        raise RuntimeError("unsupported scalarType")
    return _dtypes.get(device, _DEFAULT_DTYPES[device])
