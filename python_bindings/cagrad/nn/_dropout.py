"""Channel-wise dropout (dropout1d/2d/3d) and alpha_dropout of nn.functional.

The random mask comes from cagrad's global RNG (cagrad.rand), so masks differ from
PyTorch's for the same seed; the distribution and scaling are PyTorch's. The output is
input * mask (* scale), recorded by autograd like any product.
"""

import math
import warnings

from .. import _C
from .._creation import rand

__all__ = ["dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout"]

_SELU_ALPHA = 1.7580993408473766  # -SELU's scale * alpha: the value a dropped unit takes


def _check(fn, input, p, inplace):
    if not isinstance(input, _C.TensorBase):
        raise TypeError(f"{fn}(): argument 'input' must be Tensor, not "
                        f"{type(input).__name__}")
    if p < 0.0 or p > 1.0:
        raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
    if inplace:
        raise NotImplementedError(f"cagrad's {fn}() does not support inplace=True; use the "
                                  f"result of the out-of-place call")


def _keep_mask(input, p, per_channel):
    """1 with probability 1 - p, else 0: one draw per (sample, channel) when per_channel
    (broadcast over the other dims), else one per element."""
    shape = tuple(input.shape)
    if per_channel:
        shape = shape[:2] + (1,) * (len(shape) - 2)
    keep = _C.lt_scalar(rand(*shape, dtype=input.dtype), 1.0 - p)
    return _C.to_dtype(keep, input._dtype)  # 0/1 in input's dtype: arithmetic follows


def _feature_dropout(input, p, training):
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    return input * _keep_mask(input, p, True) * (1.0 / (1.0 - p))


def dropout1d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, L] (or [C, L]) input with probability p."""
    _check("dropout1d", input, p, inplace)
    if input.ndim not in (2, 3):
        raise RuntimeError(f"dropout1d: Expected 2D or 3D input, but received a {input.ndim}D "
                           f"input. Note that dropout1d exists to provide channel-wise dropout "
                           f"on inputs with 1 spatial dimension, a channel dimension, and an "
                           f"optional batch dimension (i.e. 2D or 3D inputs).")
    if input.ndim == 2:
        return _feature_dropout(input.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(input, p, training)


def dropout2d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, H, W] input with probability p. As PyTorch 2.13, a
    3-D input is read as [N, C, L] (with a warning), not as an unbatched [C, H, W]."""
    _check("dropout2d", input, p, inplace)
    if input.ndim not in (3, 4):
        warnings.warn(f"dropout2d: Received a {input.ndim}-D input to dropout2d, which is "
                      f"deprecated and will result in an error in a future release. To retain "
                      f"the behavior and silence this warning, please use dropout instead. "
                      f"Note that dropout2d exists to provide channel-wise dropout on inputs "
                      f"with 2 spatial dimensions, a channel dimension, and an optional batch "
                      f"dimension (i.e. 3D or 4D inputs).", stacklevel=2)
    if input.ndim == 3:
        warnings.warn("dropout2d: Received a 3D input to dropout2d and assuming that "
                      "channel-wise 1D dropout behavior is desired - input is interpreted as "
                      "shape (N, C, L), where C is the channel dim. This behavior will change "
                      "in a future release to interpret the input as one without a batch "
                      "dimension, i.e. shape (C, H, W). To maintain the 1D channel-wise "
                      "dropout behavior, please switch to using dropout1d instead.",
                      stacklevel=2)
    return _feature_dropout(input, p, training)


def dropout3d(input, p=0.5, training=True, inplace=False):
    """Zeroes whole channels of [N, C, D, H, W] (or [C, D, H, W]) input with probability p."""
    _check("dropout3d", input, p, inplace)
    if input.ndim not in (4, 5):
        warnings.warn(f"dropout3d: Received a {input.ndim}-D input to dropout3d, which is "
                      f"deprecated and will result in an error in a future release. To retain "
                      f"the behavior and silence this warning, please use dropout instead. "
                      f"Note that dropout3d exists to provide channel-wise dropout on inputs "
                      f"with 3 spatial dimensions, a channel dimension, and an optional batch "
                      f"dimension (i.e. 4D or 5D inputs).", stacklevel=2)
    if input.ndim != 5:
        return _feature_dropout(input.unsqueeze(0), p, training).squeeze(0)
    return _feature_dropout(input, p, training)


def _alpha_dropout(fn, input, p, training, inplace, per_channel):
    _check(fn, input, p, inplace)
    if not training or p == 0:
        return input
    if p == 1:
        return input * 0.0
    # Dropped units take SELU's negative saturation value; a and b restore the input's
    # mean and variance (for zero-mean, unit-variance input).
    keep = _keep_mask(input, p, per_channel)
    a = 1.0 / math.sqrt((_SELU_ALPHA * _SELU_ALPHA * p + 1) * (1 - p))
    b = (keep - 1.0) * (_SELU_ALPHA * a) + _SELU_ALPHA * a * p
    return input * (keep * a) + b


def alpha_dropout(input, p=0.5, training=False, inplace=False):
    """Dropout for SELU networks: keeps the input's mean and variance."""
    return _alpha_dropout("alpha_dropout", input, p, training, inplace, False)


def feature_alpha_dropout(input, p=0.5, training=False, inplace=False):
    """alpha_dropout with one draw per (sample, channel)."""
    return _alpha_dropout("feature_alpha_dropout", input, p, training, inplace, True)
