"""batch_norm, instance_norm, group_norm and rms_norm of nn.functional.

batch_norm in training mode (and instance_norm, which is batch_norm of a [1, N*C, *] view)
is one C op, NativeBatchNormBackward0, whose derivative the compiled backward fuses; it
also hands back the batch's mean and biased variance. Evaluation mode, group_norm and
rms_norm are composed of differentiable ops (mean/sub/mul/rsqrt). The running-statistics
update runs under no_grad on detached values: it records no autograd node.
"""

import math

from .. import _C
from .._grad_mode import no_grad

__all__ = ["batch_norm", "instance_norm", "group_norm", "rms_norm"]

_EPS = {"float32": 1.1920928955078125e-07, "float64": 2.220446049250313e-16}  # finfo.eps


def _tensor(fn, name, value):
    if not isinstance(value, _C.TensorBase):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    return value


def verify_batch_size(size):
    """PyTorch's check that training sees more than one value per channel."""
    values = size[0] * math.prod(size[2:])
    if values == 1:
        raise ValueError(f"Expected more than 1 value per channel when training, got input "
                         f"size {size}")


def _channel_shape(input):
    # [C] parameters broadcast against [N, C, *] as [1, C, 1, ...]
    return (1, input.shape[1]) + (1,) * (input.ndim - 2)


def _check_stat(name, stat, channels):
    if stat is not None and stat.numel() != channels:
        raise RuntimeError(f"{name} should contain {channels} elements not {stat.numel()}")


def _affine(out, weight, bias, shape):
    if weight is not None:
        out = out * weight.reshape(shape)
    if bias is not None:
        out = out + bias.reshape(shape)
    return out


def _moments(x, dims):
    """(mean, centered x, biased variance) over dims, keeping them for broadcasting."""
    mean = x.mean(dims, keepdim=True)
    centered = x - mean
    return mean, centered, (centered * centered).mean(dims, keepdim=True)


def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Normalizes each channel (dim 1) of input [N, C, *] over the other dims.

    Training uses the batch's statistics (biased variance) and, when running_mean and
    running_var are given, blends them into those in place: the mean, and the unbiased
    variance, with weight momentum. Evaluation uses the running statistics."""
    fn = "batch_norm"
    _tensor(fn, "input", input)
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float)):
        raise TypeError(f"batch_norm(): argument 'momentum' must be float, not "
                        f"{type(momentum).__name__}")
    channels = input.shape[1] if input.ndim > 1 else 0
    _check_stat("running_mean", running_mean, channels)
    _check_stat("running_var", running_var, channels)
    if training:
        verify_batch_size(input.shape)
        out, mean, var = _batch_norm_op(input, weight, bias, eps)
        if running_mean is not None or running_var is not None:
            count = input.numel() // channels
            _update_running(running_mean, running_var, mean, var, count, float(momentum))
        return out
    if running_mean is None:
        raise RuntimeError("running_mean must be defined in evaluation mode")
    if running_var is None:
        raise RuntimeError("running_var must be defined in evaluation mode")
    shape = _channel_shape(input)
    out = (input - running_mean.reshape(shape)) * (running_var.reshape(shape) + eps).rsqrt()
    return _affine(out, weight, bias, shape)


def _batch_norm_op(input, weight, bias, eps):
    """(out, batch mean, batch biased variance) of the C op; weight and bias may have any
    shape of C values, as PyTorch accepts."""
    if input.ndim < 2:
        raise IndexError(f"Dimension out of range (expected to be in range of "
                         f"[-{input.ndim}, {input.ndim - 1}], but got 1)")
    if str(input.dtype) == "cagrad.int64":
        raise NotImplementedError('"batch_norm" not implemented for \'Long\'')
    channels = input.shape[1]
    params = []
    for name, param in (("weight", weight), ("bias", bias)):
        if param is not None:
            _tensor("batch_norm", name, param)
            _check_stat(name, param, channels)
            _check_param_dtype(input, param)
            param = param.reshape(-1) if param.ndim != 1 else param
        params.append(param)
    return _C.batch_norm(input, params[0], params[1], float(eps))


def _check_param_dtype(input, param):
    if param.dtype == input.dtype:
        return
    if str(input.dtype) == "cagrad.float32":
        raise RuntimeError("mixed dtype (CPU): expect parameter to have scalar type of Float")
    raise RuntimeError("mixed dtype (CPU): all inputs must share same datatype.")


def _update_running(running_mean, running_var, mean, var, count, momentum):
    # In place and outside autograd: the buffers are state, not part of the graph.
    with no_grad():
        if running_mean is not None:
            batch_mean = mean.detach().reshape(-1).to(running_mean.dtype)
            running_mean.mul_(1 - momentum).add_(batch_mean * momentum)
        if running_var is not None:
            bessel = count / (count - 1) if count > 1 else math.inf
            unbiased = var.detach().reshape(-1).to(running_var.dtype) * bessel
            running_var.mul_(1 - momentum).add_(unbiased * momentum)


def instance_norm(input, running_mean=None, running_var=None, weight=None, bias=None,
                  use_input_stats=True, momentum=0.1, eps=1e-5):
    """Normalizes each (sample, channel) of input [N, C, *] over its spatial dims. With
    use_input_stats and running statistics given, those move toward the batch average of
    the per-instance statistics (mean, unbiased variance); without use_input_stats the
    running statistics normalize, as batch_norm's evaluation."""
    _tensor("instance_norm", "input", input)
    if not use_input_stats:
        if running_mean is None or running_var is None:
            raise RuntimeError("Expected running_mean and running_var to be defined when "
                               "use_input_stats is false")
        return batch_norm(input, running_mean, running_var, weight, bias, False, momentum, eps)
    size = input.shape
    if math.prod(size[2:]) == 1:
        raise ValueError(f"Expected more than 1 spatial element when training, got input "
                         f"size {size}")
    batch, channels = size[0], size[1]
    _check_stat("running_mean", running_mean, channels)
    _check_stat("running_var", running_var, channels)
    # batch_norm of x viewed as [1, N*C, *], the per-channel parameters repeated per sample
    per_instance = [_repeat_per_sample(name, p, batch, channels)
                    for name, p in (("weight", weight), ("bias", bias))]
    out, mean, var = _batch_norm_op(input.reshape((1, batch * channels) + tuple(size[2:])),
                                    per_instance[0], per_instance[1], eps)
    if running_mean is not None or running_var is not None:
        _update_running(running_mean, running_var, mean.reshape(batch, channels).mean(0),
                        var.reshape(batch, channels).mean(0), math.prod(size[2:]),
                        float(momentum))
    return out.reshape(tuple(size))


def _repeat_per_sample(name, param, batch, channels):
    if param is None:
        return None
    _tensor("instance_norm", name, param)
    _check_stat(name, param, channels)
    return param.reshape(1, channels).expand(batch, channels).reshape(batch * channels)


def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    """Normalizes input [N, C, *] over each group of C/num_groups channels (and all the
    other dims), then applies the per-channel weight and bias."""
    _tensor("group_norm", "input", input)
    if input.ndim < 2:
        raise RuntimeError(f"Expected at least 2 dimensions for input tensor but received "
                           f"{input.ndim}")
    batch, channels = input.shape[0], input.shape[1]
    if channels % num_groups != 0:
        raise RuntimeError(f"Expected number of channels in input to be divisible by "
                           f"num_groups, but got input of shape {list(input.shape)} and "
                           f"num_groups={num_groups}")
    verify_batch_size([batch * channels // num_groups, num_groups] + list(input.shape[2:]))
    grouped = input.reshape(batch, num_groups, -1)
    _, centered, var = _moments(grouped, (2,))
    out = (centered * (var + eps).rsqrt()).reshape(tuple(input.shape))
    return _affine(out, weight, bias, _channel_shape(input))


def rms_norm(input, normalized_shape, weight=None, eps=None):
    """input / sqrt(mean(input^2) + eps) over the trailing normalized_shape dims, times
    weight; eps=None is the dtype's machine epsilon, as PyTorch."""
    _tensor("rms_norm", "input", input)
    if isinstance(normalized_shape, int):
        normalized_shape = (normalized_shape,)
    normalized_shape = tuple(normalized_shape)
    count = len(normalized_shape)
    if count == 0 or tuple(input.shape[input.ndim - count:]) != normalized_shape:
        raise RuntimeError(f"Given normalized_shape={list(normalized_shape)}, expected input "
                           f"with shape [*{', '.join(map(str, normalized_shape))}], but got "
                           f"input of size{list(input.shape)}")
    if eps is None:
        eps = _EPS[str(input.dtype).split(".")[-1]]
    dims = tuple(range(input.ndim - count, input.ndim))
    out = input * ((input * input).mean(dims, keepdim=True) + eps).rsqrt()
    return out if weight is None else out * weight
