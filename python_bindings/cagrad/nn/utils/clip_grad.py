"""Gradient clipping by total norm or by value, with torch.nn.utils.clip_grad's rules.

The total norm is the norm of the per-tensor norms (each computed in its tensor's dtype),
as torch computes it on the CPU; clipping multiplies every gradient in place by
min(max_norm / (total_norm + 1e-6), 1). torch has foreach kernels for CPU tensors, so
foreach=True/False/None are all accepted; cagrad computes the same values either way.
"""

import math
import types
import warnings

from ... import _C
from ..._creation import tensor
from ..._functions import stack
from ..._grad_mode import no_grad


def _as_list(tensors):
    return [tensors] if isinstance(tensors, _C.TensorBase) else list(tensors)


def _vector_norm(values, norm_type):
    """The norm of order norm_type of all elements of values (any shape)."""
    if norm_type == math.inf:
        return values.abs().amax() if values.numel() else values.new_zeros(())
    if norm_type == -math.inf:
        return values.abs().amin()
    if norm_type == 0:
        return (values != 0).sum().to(values.dtype)
    if norm_type == 1:
        return values.abs().sum()
    if norm_type == 2:
        return (values * values).sum().sqrt()
    return values.abs().pow(norm_type).sum().pow(1.0 / norm_type)


def get_total_norm(tensors, norm_type=2.0, error_if_nonfinite=False, foreach=None):
    """The norm of the norms of tensors (the norm of their concatenation)."""
    tensors = _as_list(tensors)
    norm_type = float(norm_type)
    if not tensors:
        return tensor(0.0)
    with no_grad():
        norms = [_vector_norm(t, norm_type) for t in tensors]
        dtype = _widest_dtype(norms)
        total = _vector_norm(stack([n.to(dtype) for n in norms]), norm_type)
    if error_if_nonfinite and not math.isfinite(total.item()):
        raise RuntimeError(f"The total norm of order {norm_type} for gradients from "
                           "`parameters` is non-finite, so it cannot be clipped. To disable "
                           "this error and scale the gradients by the non-finite norm anyway, "
                           "set `error_if_nonfinite=False`")
    return total


def _widest_dtype(norms):
    # stack promotes mixed float32/float64 norms to float64, as torch.stack does.
    dtypes = {n.dtype for n in norms}
    return max(dtypes, key=lambda d: d.itemsize) if len(dtypes) > 1 else norms[0].dtype


def clip_grads_with_norm_(parameters, max_norm, total_norm, foreach=None):
    """Scale the .grad of parameters by min(max_norm / (total_norm + 1e-6), 1)."""
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    max_norm = float(max_norm)
    if not grads:
        return
    with no_grad():
        clip_coef = (max_norm / (total_norm + 1e-6)).clamp(max=1.0)
        for grad in grads:
            grad.mul_(clip_coef.to(grad.dtype))


def clip_grad_norm_(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                    foreach=None):
    """Clip the gradients of parameters so that their total norm is at most max_norm;
    returns the total norm before clipping (a 0-d tensor)."""
    is_generator = isinstance(parameters, types.GeneratorType)
    parameters = _as_list(parameters)
    if is_generator and not parameters:
        warnings.warn("`parameters` is an empty generator, no gradient clipping will occur.",
                      stacklevel=2)
    grads = [p.grad for p in parameters if p.grad is not None]
    total_norm = get_total_norm(grads, norm_type, error_if_nonfinite, foreach)
    clip_grads_with_norm_(parameters, max_norm, total_norm, foreach)
    return total_norm


def clip_grad_norm(parameters, max_norm, norm_type=2.0, error_if_nonfinite=False,
                   foreach=None):
    """Deprecated spelling of clip_grad_norm_ (torch warns with a FutureWarning)."""
    warnings.warn("`torch.nn.utils.clip_grad_norm` is now deprecated in favor of "
                  "`torch.nn.utils.clip_grad_norm_`.", FutureWarning, stacklevel=2)
    return clip_grad_norm_(parameters, max_norm, norm_type, error_if_nonfinite, foreach)


def clip_grad_value_(parameters, clip_value, foreach=None):
    """Clamp every gradient of parameters into [-clip_value, clip_value] in place."""
    clip_value = float(clip_value)
    grads = [p.grad for p in _as_list(parameters) if p.grad is not None]
    with no_grad():
        for grad in grads:
            grad.copy_(grad.clamp(-clip_value, clip_value))
