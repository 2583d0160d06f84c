"""cagrad.mps: torch.mps's names on a machine without Apple's Metal backend.

cagrad computes on the CPU only: is_available() is False and device_count() 0; seeding is
a no-op and synchronize / empty_cache raise PyTorch's errors for a machine without MPS.
"""

__all__ = ["device_count", "empty_cache", "is_available", "manual_seed", "seed",
           "synchronize"]


def is_available():
    return False


def device_count():
    return 0


def manual_seed(seed):
    int(seed)  # a bad seed still raises, as in PyTorch


def seed():
    """A no-op without MPS."""


def empty_cache():
    raise RuntimeError("Cannot execute emptyCache() without MPS backend.")


def synchronize():
    raise RuntimeError("Cannot execute deviceSynchronize() without MPS backend.")
