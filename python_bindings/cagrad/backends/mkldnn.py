"""torch.backends.mkldnn: cagrad does not use oneDNN (its kernels are its own and
OpenBLAS); the enabled flag is settable, with PyTorch's default."""

enabled = True


def is_available():
    return False
