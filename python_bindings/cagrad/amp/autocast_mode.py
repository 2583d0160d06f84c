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
        return self

    def __exit__(self, exc_type, exc_value, traceback):
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
