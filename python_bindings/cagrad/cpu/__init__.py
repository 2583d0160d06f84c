"""cagrad.cpu: torch.cpu's device functions (cagrad's one device is the CPU) and the
deprecated cpu.amp.autocast."""

from . import amp


def is_available():
    return True


def device_count():
    return 1


def current_device():
    return "cpu"


def synchronize(device=None):
    """A no-op: cagrad's CPU work has finished when a call returns, as in PyTorch."""
