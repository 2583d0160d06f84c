"""Loads the OpenBLAS that cagrad._C links, when that is the scipy-openblas32 wheel.

_C names the library by its soname only. In a build tree the run path finds it; a
`pip install`ed cagrad was built in a temporary environment whose path is gone by then, so
the wheel's own loader maps the library first (RTLD_GLOBAL) and _C's link resolves to it.
`_build_config.py` is written by CMake next to _C.
"""

try:
    from ._build_config import BLAS
except ImportError:  # a build from before _build_config existed: nothing to preload
    BLAS = "unknown"

if BLAS == "scipy-openblas32":
    import scipy_openblas32

    scipy_openblas32.get_openblas_config()  # maps libscipy_openblas.so into the process
