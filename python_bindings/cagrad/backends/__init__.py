"""cagrad.backends: torch.backends' flags and build queries, answered for cagrad (a CPU
library built on its own thread pool and OpenBLAS: no CUDA, cuDNN, MPS, oneDNN or OpenMP).
The flags are settable and start at PyTorch's defaults; cagrad's CPU kernels compute the
same whatever they hold (TF32, cuDNN and oneDNN choices only exist on hardware it lacks)."""

from . import cuda, cudnn, mkl, mkldnn, mps, openmp

__all__ = ["cuda", "cudnn", "mkl", "mkldnn", "mps", "openmp"]
