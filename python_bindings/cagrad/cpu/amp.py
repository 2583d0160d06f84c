"""cagrad.cpu.amp: PyTorch's deprecated torch.cpu.amp.autocast, which is
amp.autocast('cpu', ...) after a FutureWarning (see amp/autocast_mode.py for what it does)."""

import warnings

from .. import _dtype
from ..amp import autocast_mode


class autocast(autocast_mode.autocast):
    def __init__(self, enabled=True, dtype=_dtype.bfloat16, cache_enabled=True):
        warnings.warn("`cagrad.cpu.amp.autocast(args...)` is deprecated. Please use "
                      "`cagrad.amp.autocast('cpu', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cpu", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
