"""cagrad.nn.parallel: DataParallel and DistributedDataParallel for a CPU-only library.

DataParallel does what PyTorch's does on a machine without GPUs: it wraps the module
(registered as .module, so state_dict keys start with "module.") and runs it as is.
DistributedDataParallel (distributed.py) averages gradients across the ranks of
cagrad.distributed (Open MPI).
"""

from ..module import Module
from .distributed import DistributedDataParallel

__all__ = ["DataParallel", "DistributedDataParallel"]


class DataParallel(Module):
    """Runs `module` unchanged: with no GPUs there is nothing to replicate onto (device_ids
    is [], whatever was given, as in PyTorch)."""

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        self.module = module
        self.device_ids = []

    def forward(self, *inputs, **kwargs):
        return self.module(*inputs, **kwargs)
