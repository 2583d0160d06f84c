"""cagrad.cuda: torch.cuda's names as PyTorch has them on a machine without CUDA.

cagrad computes on the CPU only. is_available() is False and device_count() 0; the seeding
functions are no-ops (PyTorch queues them until CUDA initialises, which never happens there);
the functions that need a device (synchronize, current_device) raise AssertionError as
PyTorch's do when it has no CUDA. amp holds the deprecated cuda.amp.GradScaler/autocast.
"""

from . import amp

_NOT_COMPILED = ("cagrad is not compiled with CUDA enabled: it computes on the CPU only "
                 "(see docs/python-api.md)")


def is_available():
    return False


def device_count():
    return 0


def is_initialized():
    return False


def manual_seed(seed):
    """A no-op without CUDA (the CPU generator is seeded by cagrad.manual_seed)."""
    int(seed)  # PyTorch converts the seed, so a bad one still raises


def manual_seed_all(seed):
    int(seed)


def seed():
    """A no-op without CUDA, as in PyTorch."""


def seed_all():
    """A no-op without CUDA, as in PyTorch."""


def empty_cache():
    """A no-op without CUDA, as in PyTorch (cagrad.memory.empty_cache frees host caches)."""


def synchronize(device=None):
    raise AssertionError(_NOT_COMPILED)


def current_device():
    raise AssertionError(_NOT_COMPILED)


def is_bf16_supported(including_emulation=True):
    return False


def get_device_name(device=None):
    raise AssertionError(_NOT_COMPILED)


def get_device_capability(device=None):
    raise AssertionError(_NOT_COMPILED)


def get_device_properties(device=None):
    raise AssertionError(_NOT_COMPILED)
