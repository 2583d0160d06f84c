"""cagrad.nn.functional: torch.nn.functional's names, signatures and defaults.

Each function checks its arguments in Python (so a wrong kind or value fails with
PyTorch's exception type and a message naming the argument) and then makes one call into
the C core, which records the op for autograd. Arguments that PyTorch accepts but cagrad
does not implement raise NotImplementedError naming the argument.
"""

import warnings

from .. import _C, _bool_ops, _functions, _ops

__all__ = [
    "softmax", "log_softmax", "cross_entropy", "nll_loss", "mse_loss", "layer_norm", "linear",
    "conv2d", "embedding", "dropout",
]

# The ops of the C registry that PyTorch has in nn.functional (relu, gelu, elu, ...): one
# function each, shared with torch.<name> and Tensor.<name> (_ops.py).
globals().update(_ops.namespace(_ops.PY_NN))
__all__ += sorted(_ops.namespace(_ops.PY_NN))

# pooling (pooling.py, with its modules)
from .pooling import (adaptive_avg_pool2d, avg_pool1d, avg_pool2d, max_pool1d,  # noqa: E402
                      max_pool2d)

__all__ += ["max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "max_pool1d", "avg_pool1d"]

_REDUCTIONS = {"none": 0, "mean": 1, "sum": 2}  # = ca_reduction
_INT64 = 2  # the _C dtype code of int64 class indices


def _tensor(fn, name, value):
    if not isinstance(value, _C.TensorBase):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    return value


def _optional_tensor(fn, name, value):
    return None if value is None else _tensor(fn, name, value)


def _unsupported(fn, what, hint=""):
    raise NotImplementedError(f"cagrad's {fn}() does not support {what}{hint}")




def _reduction_code(fn, size_average, reduce, reduction):
    if size_average is not None or reduce is not None:
        reduction = _legacy_reduction(size_average, reduce)
    try:
        return _REDUCTIONS[reduction]
    except (KeyError, TypeError):
        # PyTorch's words first (code may match them), then what the valid values are
        raise ValueError(f"{reduction} is not a valid value for reduction (in {fn}(); use "
                         f"'none', 'mean' or 'sum')") from None


def _legacy_reduction(size_average, reduce):
    """PyTorch's mapping of the deprecated size_average/reduce flags, with its warning."""
    if reduce is not None and not reduce:
        reduction = "none"
    elif size_average is not None and not size_average:
        reduction = "sum"
    else:
        reduction = "mean"
    warnings.warn(f"size_average and reduce args will be deprecated, please use "
                  f"reduction='{reduction}' instead.", stacklevel=4)
    return reduction


def _dim(fn, dim):
    # PyTorch picks an implicit dim with a deprecation warning; that guess is often
    # wrong, so cagrad asks for the dim instead of guessing.
    if dim is None:
        raise TypeError(f"{fn}(): pass dim explicitly, e.g. {fn}(x, dim=-1); the implicit "
                        f"dimension choice (dim=None) is deprecated in PyTorch and not "
                        f"supported by cagrad")
    return dim


# --- activations -------------------------------------------------------------------------

# torch.softmax's code, with nn.functional's signature: dim may be omitted (and is asked for)
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _functions.softmax(_tensor("softmax", "input", input), _dim("softmax", dim), dtype)


def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    return _functions.log_softmax(_tensor("log_softmax", "input", input), _dim("log_softmax", dim),
                                  dtype)


# --- losses ------------------------------------------------------------------------------

def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100,
                  reduce=None, reduction="mean", label_smoothing=0.0):
    code = _reduction_code("cross_entropy", size_average, reduce, reduction)
    _tensor("cross_entropy", "input", input)
    _tensor("cross_entropy", "target", target)
    weight = _optional_tensor("cross_entropy", "weight", weight)
    if weight is None and label_smoothing == 0.0 and target._dtype == _INT64:
        return _C.cross_entropy(input, target, code, ignore_index)
    # class weights, label smoothing, probability targets: composites
    return _losses_extra.cross_entropy_with_options(input, target, weight, code,
                                                    ignore_index, float(label_smoothing))


def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    code = _reduction_code("nll_loss", size_average, reduce, reduction)
    _tensor("nll_loss", "input", input)
    _tensor("nll_loss", "target", target)
    if weight is not None:  # composite
        weight = _tensor("nll_loss", "weight", weight)
        return _losses_extra.weighted_nll_loss(input, target, weight, code, ignore_index)
    return _C.nll_loss(input, target, code, ignore_index)


def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    if weight is not None:
        _unsupported("mse_loss", "weight=...")
    code = _reduction_code("mse_loss", size_average, reduce, reduction)
    _tensor("mse_loss", "input", input)
    _tensor("mse_loss", "target", target)
    if input._shape != target._shape:  # legal, but usually a bug: PyTorch warns too
        warnings.warn(f"Using a target size ({target.shape}) that is different to the input "
                      f"size ({input.shape}). This will likely lead to incorrect results due "
                      f"to broadcasting. Please ensure they have the same size.", stacklevel=2)
    input, target = _bool_ops.promoted_pair(input, target)  # torch's result dtype
    return _C.mse_loss(input, target, code)


# --- layers ------------------------------------------------------------------------------

def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    return _C.layer_norm(_tensor("layer_norm", "input", input), tuple(normalized_shape),
                         _optional_tensor("layer_norm", "weight", weight),
                         _optional_tensor("layer_norm", "bias", bias), float(eps))


def linear(input, weight, bias=None):
    return _C.linear(_tensor("linear", "input", input), _tensor("linear", "weight", weight),
                     _optional_tensor("linear", "bias", bias))


def _pair(name, value):
    """An int or a sequence of 1 or 2 ints as a (height, width) pair, as conv2d reads its
    stride, padding and dilation."""
    if isinstance(value, bool) or not isinstance(value, (int, tuple, list)):
        raise TypeError(f"conv2d(): argument '{name}' must be an int or a tuple of ints, not "
                        f"{type(value).__name__}")
    if isinstance(value, int):
        return (value, value)
    value = tuple(value)
    if len(value) == 1:
        value = value * 2
    if len(value) != 2 or not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise RuntimeError(f"expected {name} to be a single integer value or a list of 2 "
                           f"values to match the convolution dimensions, but got "
                           f"{name}={list(value)}")
    return value


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-D cross-correlation of input [N, C, H, W] (or [C, H, W]) with weight
    [out_channels, C/groups, kH, kW], zero padding; padding may be 'valid' or 'same'."""
    _tensor("conv2d", "input", input)
    _tensor("conv2d", "weight", weight)
    _optional_tensor("conv2d", "bias", bias)
    stride = _pair("stride", stride)
    dilation = _pair("dilation", dilation)
    if isinstance(groups, bool) or not isinstance(groups, int):
        raise TypeError(f"conv2d(): argument 'groups' must be int, not {type(groups).__name__}")
    if not isinstance(padding, str):
        padding = _pair("padding", padding)
        return _C.conv2d(input, weight, bias, stride, padding, padding, dilation, groups)
    if padding == "valid":
        return _C.conv2d(input, weight, bias, stride, (0, 0), (0, 0), dilation, groups)
    if padding != "same":
        raise RuntimeError(f"Invalid padding string: {padding!r}")
    if stride != (1, 1):
        raise RuntimeError("padding='same' is not supported for strided convolutions")
    if weight.ndim != 4:  # the C call says what is wrong with it
        return _C.conv2d(input, weight, bias, stride, (0, 0), (0, 0), dilation, groups)
    # The output keeps the input's size: a total padding of d*(k-1) per dim, the extra one
    # (when it is odd) at the end, as PyTorch.
    totals = [d * (k - 1) for d, k in zip(dilation, weight._shape[2:])]
    start = tuple(t // 2 for t in totals)
    end = tuple(t - s for t, s in zip(totals, start))
    return _C.conv2d(input, weight, bias, stride, start, end, dilation, groups)


def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if scale_grad_by_freq:
        _unsupported("embedding", "scale_grad_by_freq=True")
    if sparse:
        _unsupported("embedding", "sparse=True", " (cagrad has no sparse gradients)")
    _tensor("embedding", "input", input)
    if max_norm is not None:  # torch renormalises the looked-up rows of weight in place
        _layers_more.embedding_renorm_(weight, input, max_norm, norm_type)
    out = _C.embedding(_tensor("embedding", "weight", weight), input)
    if padding_idx is None:
        return out
    padding_idx = _padding_index(padding_idx, weight._shape[0])
    if not weight.requires_grad:
        return out
    # The padding row reads as usual but must get no gradient: take the value from a
    # detached alias at the padded positions, so backward sends them zeros.
    keep = _C.unsqueeze(_C.ne_scalar(input, float(padding_idx)), -1)
    return _C.where(keep, out, _C.detach(out))


def _padding_index(padding_idx, num_embeddings):
    """padding_idx in [0, num_embeddings), as PyTorch normalizes it."""
    if not -num_embeddings <= padding_idx < num_embeddings:
        raise ValueError(f"Padding_idx must be within num_embeddings: got padding_idx="
                         f"{padding_idx} for {num_embeddings} embeddings")
    return padding_idx % num_embeddings


def dropout(input, p=0.5, training=True, inplace=False):
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    _tensor("dropout", "input", input)
    if inplace:  # out of place, then into input (recorded in the graph), as torch
        return _ops.inplace_assign(input, lambda x: _C.dropout(x, float(p), bool(training)))
    return _C.dropout(input, float(p), bool(training))


# --- composites (losses, normalization, dropout family, attention, conv1d, pad) ------------
# Written with the differentiable ops above in their own modules; imported last because
# they use this module's helpers.
from . import _attention, _conv_pad, _dropout, _losses, _norm  # noqa: E402
from ._attention import *  # noqa: E402,F403
from ._conv_pad import *  # noqa: E402,F403
from ._dropout import *  # noqa: E402,F403
from ._losses import *  # noqa: E402,F403
from ._norm import *  # noqa: E402,F403

__all__ += (_losses.__all__ + _norm.__all__ + _dropout.__all__ + _attention.__all__
            + _conv_pad.__all__)

# one_hot, pixel shuffles, unfold/fold, interpolate, transposed convolutions (h14)
from . import _conv_transpose, _interpolate, _shape_ops  # noqa: E402
from ._conv_transpose import *  # noqa: E402,F403
from ._interpolate import *  # noqa: E402,F403
from ._shape_ops import *  # noqa: E402,F403

__all__ += _shape_ops.__all__ + _interpolate.__all__ + _conv_transpose.__all__

# cross_entropy options, margin / embedding / likelihood losses, extra layers
from . import _layers_extra, _losses_extra  # noqa: E402
from ._layers_extra import *  # noqa: E402,F403
from ._losses_extra import *  # noqa: E402,F403

__all__ += _losses_extra.__all__ + _layers_extra.__all__

# glu, threshold, channel_shuffle, local_response_norm, multi_margin_loss, gumbel_softmax,
# 3-d / adaptive-max pooling and unpooling, affine_grid / grid_sample
from . import _grid, _layers_more, _pool_more  # noqa: E402
from ._grid import *  # noqa: E402,F403
from ._layers_more import *  # noqa: E402,F403
from ._pool_more import *  # noqa: E402,F403

__all__ += _layers_more.__all__ + _pool_more.__all__ + _grid.__all__

# ctc_loss, conv3d / conv_transpose3d, adaptive_avg_pool3d
from . import _conv3d, _ctc  # noqa: E402
from ._conv3d import *  # noqa: E402,F403
from ._ctc import *  # noqa: E402,F403

__all__ += _ctc.__all__ + _conv3d.__all__

# adaptive_avg_pool1d, lp/fractional pooling, in-place activations, pdist, ... (h39 census)
from . import _pool_extra  # noqa: E402
from ._pool_extra import *  # noqa: E402,F403

__all__ += _pool_extra.__all__
