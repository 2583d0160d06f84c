"""Helpers shared by the distributions: broadcasting of parameters, the probs <-> logits
conversions, lazily computed attributes, and the text torch's messages give a Size."""

import functools

import cagrad

__all__ = ["broadcast_all", "clamp_probs", "lazy_property", "logits_to_probs",
           "probs_to_logits"]

euler_constant = 0.57721566490153286060


def _is_number(value):
    return isinstance(value, (int, float))  # bools too, as torch's Number


def broadcast_all(*values):
    """The values as tensors of one broadcast shape. Numbers become tensors of the dtype
    of the first tensor among the values (the default dtype when there is none)."""
    if not all(cagrad.is_tensor(v) or _is_number(v) for v in values):
        raise ValueError("Input arguments must all be instances of Number, torch.Tensor or "
                         "objects implementing __torch_function__.")
    first = next((v for v in values if cagrad.is_tensor(v)), None)
    dtype = cagrad.get_default_dtype() if first is None else first.dtype
    tensors = [v if cagrad.is_tensor(v) else cagrad.tensor(v, dtype=dtype) for v in values]
    return cagrad.broadcast_tensors(*tensors)


def _standard_normal(shape, dtype):
    """N(0, 1) draws from cagrad's generator: constants of the graph, so that
    loc + eps * scale differentiates in loc and scale only."""
    return cagrad.randn(tuple(shape), dtype=dtype)


def _sum_rightmost(value, dims):
    """value summed over its `dims` last dimensions."""
    if dims == 0:
        return value
    return value.reshape(tuple(value.shape[:value.dim() - dims]) + (-1,)).sum(-1)


def clamp_probs(probs):
    """probs clamped into [eps, 1 - eps], eps the machine epsilon of their dtype, so that
    the logarithms below stay finite."""
    eps = cagrad.finfo(probs.dtype).eps
    return probs.clamp(min=eps, max=1 - eps)


def logits_to_probs(logits, is_binary=False):
    """Log-odds to probabilities (sigmoid), or unnormalised log-probabilities along the
    last dimension to probabilities (softmax)."""
    if is_binary:
        return cagrad.sigmoid(logits)
    return cagrad.softmax(logits, dim=-1)


def probs_to_logits(probs, is_binary=False):
    """The inverse of logits_to_probs, on clamped probabilities."""
    clamped = clamp_probs(probs)
    if is_binary:
        return cagrad.log(clamped) - cagrad.log1p(-clamped)
    return cagrad.log(clamped)


class lazy_property:
    """An attribute computed on first access (with gradients recorded, whatever the grad
    mode then) and then stored on the instance, so later reads do not recompute it."""

    def __init__(self, wrapped):
        self.wrapped = wrapped
        functools.update_wrapper(self, wrapped)

    def __get__(self, instance, owner=None):
        if instance is None:
            return self
        with cagrad.enable_grad():
            value = self.wrapped(instance)
        setattr(instance, self.wrapped.__name__, value)
        return value


def _text(value):
    """f"{value}" as torch gives it: a 0-d tensor as its Python number (torch's
    Tensor.__format__ takes .item() for 0-d tensors; cagrad's prints the tensor)."""
    if cagrad.is_tensor(value) and value.dim() == 0:
        return f"{value.item()}"
    return f"{value}"


def _size_text(shape):
    """A shape as torch's messages print a Size: torch.Size([2, 3])."""
    return f"torch.Size({list(shape)})"
