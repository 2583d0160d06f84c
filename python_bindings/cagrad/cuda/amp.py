"""cagrad.cuda.amp: PyTorch's deprecated torch.cuda.amp.GradScaler/autocast, which are
amp.GradScaler('cuda', ...) and amp.autocast('cuda', ...) after a FutureWarning; without
CUDA both warn and disable themselves, as in PyTorch."""

import warnings

from .. import _dtype
from ..amp import autocast_mode, grad_scaler


class GradScaler(grad_scaler.GradScaler):
    def __init__(self, init_scale=2.0**16, growth_factor=2.0, backoff_factor=0.5,
                 growth_interval=2000, enabled=True):
        warnings.warn("`cagrad.cuda.amp.GradScaler(args...)` is deprecated. Please use "
                      "`cagrad.amp.GradScaler('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", init_scale=init_scale, growth_factor=growth_factor,
                         backoff_factor=backoff_factor, growth_interval=growth_interval,
                         enabled=enabled)


class autocast(autocast_mode.autocast):
    def __init__(self, enabled=True, dtype=_dtype.float16, cache_enabled=True):
        warnings.warn("`cagrad.cuda.amp.autocast(args...)` is deprecated. Please use "
                      "`cagrad.amp.autocast('cuda', args...)` instead.", FutureWarning,
                      stacklevel=2)
        super().__init__("cuda", dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
