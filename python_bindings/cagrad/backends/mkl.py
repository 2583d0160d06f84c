"""torch.backends.mkl: cagrad links OpenBLAS, not MKL."""


def is_available():
    return False
