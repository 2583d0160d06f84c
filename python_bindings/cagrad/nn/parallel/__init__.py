"""cagrad.nn.parallel: DataParallel and DistributedDataParallel for a CPU-only library.

DataParallel does what PyTorch's does on a machine without GPUs: it wraps the module
(registered as .module, so state_dict keys start with "module.") and runs it as is.
DistributedDataParallel needs a process group, which cagrad cannot make, so it raises.
"""

from ..module import Module

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


class DistributedDataParallel(Module):
    def __init__(self, module, *args, **kwargs):
        raise RuntimeError("cagrad.nn.parallel.DistributedDataParallel needs a process group, "
                           "and cagrad has no distributed support "
                           "(cagrad.distributed.is_available() is False); use the module "
                           "directly. See docs/python-api.md")
