"""torch.backends.cuda without CUDA: is_built() is False; the matmul flags are settable and
hold PyTorch's defaults."""


class _MatmulFlags:
    """backends.cuda.matmul: the precision flags of CUDA matmuls (unused without CUDA)."""

    def __init__(self):
        self.allow_tf32 = False
        self.allow_fp16_reduced_precision_reduction = True
        self.allow_bf16_reduced_precision_reduction = True


matmul = _MatmulFlags()


def is_built():
    return False
