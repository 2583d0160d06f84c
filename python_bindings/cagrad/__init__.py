"""cagrad: a compiled-autograd engine in C with PyTorch's Python API.

Code that stays inside the supported subset runs unchanged with `import cagrad as torch`
and gives the same gradients. docs/python-api.md lists the subset and every difference.
"""

import warnings as _warnings

from . import _blas_preload  # noqa: F401  (before _C: maps the OpenBLAS it links)
from . import _C
from ._dtype import (Size, channels_last, channels_last_3d, contiguous_format, device, dtype,
                     float32, float64, int64, layout, memory_format, preserve_format, strided)
from ._tensor import Tensor
from ._creation import (arange, as_tensor, empty, empty_like, from_dlpack, from_numpy, full,
                        full_like, get_default_dtype, get_num_threads, get_rng_state,
                        manual_seed, ones, set_rng_state,
                        ones_like, rand, rand_like, randn, randn_like, set_default_dtype,
                        set_num_threads, tensor, zeros, zeros_like)
from ._random import (Generator, default_generator, initial_seed, multinomial, randint,
                      randperm, seed)
from ._sampling import bernoulli, normal, poisson  # distributions (_sampling.py)
from ._grad_mode import enable_grad, inference_mode, is_grad_enabled, no_grad, set_grad_enabled
from ._functions import (absolute, add, all, amax, amin, any, argmax, argmin, as_strided, bmm, cat,
                         chunk, clamp, clip, clone, concat, concatenate, detach, div,
                         divide, eq, flatten, gather, ge, greater, greater_equal, gt,
                         index_fill, index_select, is_floating_point, is_tensor, le, less, less_equal,
                         log_softmax, logical_and, logical_not, logical_or, logical_xor,
                         logsumexp, lt, masked_fill, matmul, max, maximum, mean, min,
                         minimum, mm, mul, multiply, narrow, ne, negative, not_equal,
                         numel, permute, pow, reshape, select, softmax, split, squeeze,
                         stack, sub, subtract, sum, swapaxes, swapdims, t, transpose,
                         true_divide, unbind, unsqueeze, where)
from ._order import argsort, cumprod, cumsum, sort, topk
from ._bool_ops import can_cast, promote_types, result_type  # torch's type promotion
from ._scatter import index_add, scatter, scatter_add
from ._ops import PY_TORCH as _PY_TORCH
from ._ops import aliases as _aliases
from ._ops import namespace as _namespace
from ._graph_break import graph_break
from ._explain import ExplainOutput, explain
from . import autograd, compiled_autograd, memory, nn, optim, utils
# checkpoints in PyTorch's zip format (after nn: they rebuild nn.Parameters), and the names
# of what a CPU library lacks (CUDA, accelerators, mixed precision, distributed, compile)
from . import serialization
from .serialization import load, save
from . import accelerator, amp, backends, cpu, cuda, distributed
from ._dtype import bfloat16, float16
from ._dtype import bool  # noqa: A004 (torch.bool: a name only, see _dtype.py)
from .amp import GradScaler, autocast  # torch.GradScaler is torch.amp.GradScaler
from .amp.autocast_mode import get_autocast_dtype, is_autocast_enabled
from ._compile import compile  # noqa: A004 (torch.compile, as in PyTorch)

# the ops of the C registry that PyTorch has as torch.<name> (relu, tanh, ...)
globals().update(_namespace(_PY_TORCH))
globals().update(_aliases())  # their other names: arcsin, arccos, ..., fix
conv2d = nn.functional.conv2d  # torch.conv2d, as in PyTorch
conv1d = nn.functional.conv1d  # torch.conv1d
# torch.<name> for these nn.functional composites too, as in PyTorch (h14)
conv_transpose1d = nn.functional.conv_transpose1d
conv_transpose2d = nn.functional.conv_transpose2d
pixel_shuffle = nn.functional.pixel_shuffle
pixel_unshuffle = nn.functional.pixel_unshuffle
from ._einsum import einsum  # noqa: E402
from ._more_ops import (  # noqa: E402  (composites of the ops above: _more_ops.py)
                        addcdiv, addcmul, allclose, are_deterministic_algorithms_enabled,
                        atleast_1d, atleast_2d, broadcast_shapes, broadcast_tensors,
                        broadcast_to, column_stack, count_nonzero, diag, diagonal, e, equal,
                        eye, finfo, flip, get_float32_matmul_precision, hstack, iinfo, inf,
                        is_deterministic_algorithms_warn_only_enabled, isclose, isfinite,
                        isinf, isnan, lerp, linspace, logspace, masked_select, nan,
                        nan_to_num, nonzero, norm, outer, pi, prod, repeat_interleave, roll,
                        set_float32_matmul_precision, sign, std, std_mean, tile, trace,
                        use_deterministic_algorithms, var, var_mean, vstack)
from ._more_ops2 import (  # noqa: E402  (shape, index and counting helpers: _more_ops2.py)
                         argwhere, block_diag, bincount, bucketize, cartesian_prod, cross,
                         diff, histc, kron, meshgrid, moveaxis, movedim, narrow_copy, rot90,
                         searchsorted, take, take_along_dim, tril_indices, triu_indices,
                         unflatten, unique, unique_consecutive, vander)
from ._more_stats import (  # noqa: E402  (order statistics and moments: _more_stats.py)
                          aminmax, corrcoef, cov, cummax, cummin, kthvalue, logcumsumexp,
                          median, mode, nanmean, nanmedian, nanquantile, nansum, quantile)
from . import linalg  # noqa: E402
# torch.diag_embed and Tensor.diag_embed (diagonal itself is bound in _tensor.py)
from ._more_ops import diag_embed  # noqa: E402
Tensor.diag_embed = diag_embed
# torch's top-level linear-algebra names and Tensor methods (_linalg_ops.py)
from ._linalg_ops import cholesky_inverse, cholesky_solve, logdet, matrix_exp  # noqa: E402
from ._linalg_ops import torch_slogdet as slogdet  # noqa: E402
from ._linalg_ops import det, matrix_power  # noqa: E402
from ._linalg_ops import inv as inverse  # noqa: E402
from ._linalg_ops import pinv as pinverse  # noqa: E402
Tensor.inverse, Tensor.det, Tensor.logdet, Tensor.slogdet = inverse, det, logdet, slogdet
Tensor.matrix_power, Tensor.matrix_exp, Tensor.pinverse = matrix_power, matrix_exp, pinverse
Tensor.cholesky_solve, Tensor.cholesky_inverse = cholesky_solve, cholesky_inverse
from .linalg import _cdist as cdist  # noqa: E402
# torch.testing (assert_close, make_tensor) and torch.is_inference_mode_enabled
from . import testing  # noqa: E402
from ._grad_mode import is_inference_mode_enabled  # noqa: E402
# matrix-product accumulations, tensor_split, index_put, memory methods; torch.func, jit
from ._extra_ops import (  # noqa: E402
                         addbmm, addmm, addmv, baddbmm, index_put, mv, tensor_split)
from . import func, jit  # noqa: E402
from . import distributions  # noqa: E402  (torch.distributions)
from .autograd.anomaly_mode import (  # noqa: E402
                                    is_anomaly_check_nan_enabled, is_anomaly_enabled)

# torch's dtype aliases
float = float32  # noqa: A001 (torch.float, as in PyTorch)
double = float64
long = int64
half = float16  # a name only: cagrad computes in float32, float64 and int64

__version__ = _C.VERSION  # the linked library's ca_version(); pyproject.toml repeats it


def show_config():
    """cagrad's configuration as text: version, kernel ISA, threads, and the BLAS (which
    OpenBLAS, its version, core and threading), like ``torch.__config__.show()``."""
    return _C.show_config()


def _warn_if_blas_is_slow():
    # once per process, at import: OpenBLAS kernels below what the CPU supports
    warning = _C.blas_info()["warning"]
    if warning:
        _warnings.warn("cagrad: " + warning, RuntimeWarning, stacklevel=3)


_warn_if_blas_is_slow()

# `sys.modules["torch"] = cagrad` in a program: `import torch.nn` then finds cagrad.nn
from . import as_torch as _as_torch  # noqa: E402

_as_torch.register_finder()


def __getattr__(name):
    # only reached for names cagrad lacks: say that it is a subset, not a typo
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad' has no attribute {name!r}: cagrad implements a "
                         f"subset of torch's API, listed in docs/python-api.md")
# dot, vdot, inner, ger, addr, tensordot, chain_matmul as functions and methods (_products.py)
from . import _products  # noqa: E402
from ._products import addr, chain_matmul, dot, ger, inner, tensordot, vdot  # noqa: E402
for _name in ("dot", "vdot", "inner", "ger", "addr"):
    setattr(Tensor, _name, getattr(_products, _name))
del _name
# masked_scatter, index_copy, scatter_reduce (_ops_extra3.py) as functions and methods
from . import _ops_extra3  # noqa: E402
from ._ops_extra3 import index_copy, masked_scatter, scatter_reduce  # noqa: E402
for _name in ("masked_scatter", "masked_scatter_", "index_copy", "index_copy_",
              "scatter_reduce", "scatter_reduce_"):
    setattr(Tensor, _name, getattr(_ops_extra3, _name))
del _name
# bitwise ops and operators on int64/bool (_bitwise.py); Tensor.type/apply_/map_,
# signbit, histogram and the print options (_tensor_misc.py)
from . import _bitwise, _tensor_misc  # noqa: E402
from ._bitwise import (bitwise_and, bitwise_left_shift, bitwise_not, bitwise_or,  # noqa: E402
                       bitwise_right_shift, bitwise_xor)
from ._tensor_misc import (get_printoptions, histogram, set_printoptions,  # noqa: E402
                           signbit)
for _name in _bitwise.METHODS:
    setattr(Tensor, _name, getattr(_bitwise, _name))
Tensor.type = _tensor_misc.type_
Tensor.apply_, Tensor.map_ = _tensor_misc.apply_, _tensor_misc.map_
Tensor.signbit, Tensor.histogram = signbit, histogram
del _name
# lgamma, digamma, polygamma, mvlgamma, i0 (_special_fns.py) and torch.special
from . import _special_fns, special  # noqa: E402
from ._special_fns import digamma, i0, lgamma, mvlgamma, polygamma  # noqa: E402
for _name in ("lgamma", "digamma", "mvlgamma", "i0", "lgamma_", "digamma_", "mvlgamma_",
              "i0_", "polygamma_"):
    setattr(Tensor, _name, getattr(_special_fns, _name))
Tensor.polygamma = _special_fns.polygamma_method
del _name
# Tensor.unfold(dimension, size, step): sliding windows, a composite (_more_ops2.py)
from ._more_ops2 import tensor_unfold as _tensor_unfold  # noqa: E402
Tensor.unfold = _tensor_unfold
# torch.vmap (cagrad.func.vmap: a loop over the batch, see _func_transforms.py)
from .func import vmap  # noqa: E402
# torch.multiprocessing, torch.profiler and torch.autograd.profiler (CPU, see profiler.py)
from . import multiprocessing, profiler  # noqa: E402
from .autograd import profiler as _autograd_profiler  # noqa: E402, F401
# torch.optim.swa_utils (AveragedModel, SWALR, update_bn, EMA/SWA avg fns)
from .optim import swa_utils as _swa_utils  # noqa: E402, F401
# torch.clamp_min / clamp_max and the in-place forms the registry's list lacks (pow_, clip_,
# sign_, nan_to_num_, clamp_min_, clamp_max_): recorded in the autograd graph like the others
def clamp_min(input, min):  # noqa: F811 - torch's parameter name shadows cagrad.min here
    return clamp(input, min=min)  # noqa: F821


def clamp_max(input, max):  # noqa: F811 - likewise
    return clamp(input, max=max)  # noqa: F821


Tensor.clamp_min, Tensor.clamp_max = clamp_min, clamp_max
from . import _ops as _ops_module  # noqa: E402
for _name, _fn in (("pow", pow), ("clip", clip), ("sign", sign),  # noqa: F821
                   ("nan_to_num", nan_to_num), ("clamp_min", clamp_min),  # noqa: F821
                   ("clamp_max", clamp_max)):
    setattr(Tensor, f"{_name}_", _ops_module._inplace_method(_name, _fn))
del _name, _fn
# sparse COO tensors as Python objects over dense ops: torch.sparse_coo_tensor, torch.sparse,
# spmm, mm / matmul with a sparse operand, Tensor.to_sparse / is_sparse / layout (_sparse.py)
from . import _sparse, sparse  # noqa: E402
from ._sparse import sparse_coo, sparse_coo_tensor, spmm  # noqa: E402
mm = _sparse.sparse_aware(mm, _sparse.mm)  # noqa: F821
matmul = _sparse.sparse_aware(matmul, _sparse.matmul)  # noqa: F821
_sparse.install(Tensor)
# the legacy tensor types torch.FloatTensor, DoubleTensor, LongTensor, BoolTensor
from ._legacy_tensors import legacy_types as _legacy_types  # noqa: E402
globals().update(_legacy_types())
# window functions, combinations, trapezoid / cumulative_trapezoid, put / Tensor.put_
# (_everyday.py), and torch.mps (no Metal backend: is_available() is False)
from . import _everyday, mps  # noqa: E402
from ._everyday import (bartlett_window, blackman_window, combinations,  # noqa: E402
                        cumulative_trapezoid, hamming_window, hann_window, kaiser_window,
                        put, trapezoid, trapz)
Tensor.put_, Tensor.put = _everyday.put_, _everyday.put
# Tensor.untyped_storage() / storage() / storage_offset(): read-only views (_storage.py)
from . import _storage  # noqa: E402
from ._storage import TypedStorage, UntypedStorage  # noqa: E402
Tensor.untyped_storage, Tensor.storage = _storage.untyped_storage, _storage.storage
Tensor.storage_offset = _storage.storage_offset
# Tensor.fill_diagonal_ (a masked_fill_ on the main diagonal), torch.fliplr / flipud
from ._flip_fill import fill_diagonal_ as _fill_diagonal_, fliplr, flipud  # noqa: E402
Tensor.fill_diagonal_, Tensor.fliplr, Tensor.flipud = _fill_diagonal_, fliplr, flipud
# torch._foreach_add_ / _foreach_lerp_ / ...: per-tensor ops over lists (_foreach.py)
from . import _foreach  # noqa: E402
globals().update(_foreach.namespace())
# more Tensor methods and their torch.* functions: ravel, fmax, hsplit, index_reduce, eq_,
# addmm_, old linear algebra (cholesky, qr, svd, triangular_solve), ... (_tensor_more.py)
from . import _tensor_more  # noqa: E402
globals().update(_tensor_more.namespace())
_tensor_more.install(Tensor)
# more torch.* names from a dir(torch) census: isin, gradient, pdist, atleast_3d, torch.<op>
# spellings of nn.functional ops, torch.abs_(x) forms, sym_*, settings (_census_*.py)
from . import _census_misc, _census_ops, compiler  # noqa: E402
globals().update({_k: _v for _k, _v in _census_misc.namespace(
    Tensor, (_census_ops, _census_misc)).items() if _k not in globals()})
_census_misc.install(Tensor)
