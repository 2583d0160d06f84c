"""torch.backends.cudnn without cuDNN: is_available() is False, version() None; the flags
are settable module attributes with PyTorch's defaults."""

enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available():
    return False


def version():
    return None
