"""cagrad.accelerator: torch.accelerator's answers on a machine without one (cagrad computes
on the CPU only)."""


def is_available():
    return False


def current_accelerator(check_available=False):
    return None


def device_count():
    return 0
