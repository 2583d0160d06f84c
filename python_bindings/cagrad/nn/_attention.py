"""scaled_dot_product_attention, composed of matmul, masked_fill, softmax and dropout.

As in PyTorch, a bool attn_mask keeps the positions where it is True; a float mask is
added to the scores.
"""

import math

from .. import _C
from .._creation import arange
from . import functional as F

__all__ = ["scaled_dot_product_attention"]

_INT64, _BOOL = 2, 3  # _C dtype codes


def _check_qkv(query, key, value):
    for name, t in (("query", query), ("key", key), ("value", value)):
        if not isinstance(t, _C.TensorBase):
            raise TypeError(f"scaled_dot_product_attention(): argument '{name}' must be "
                            f"Tensor, not {type(t).__name__}")
    if not query.dtype == key.dtype == value.dtype:
        raise RuntimeError(f"Expected query, key, and value to have the same dtype, but got "
                           f"query.dtype: {_dtype_name(query)} key.dtype: {_dtype_name(key)} "
                           f"and value.dtype: {_dtype_name(value)} instead.")


def _dtype_name(t):
    # PyTorch names dtypes by their C type in these messages
    return {"float32": "float", "float64": "double", "int64": "long int"}[
        str(t.dtype).split(".")[-1]]


def is_boolean_mask(mask):
    """True for a mask that selects (nonzero = attend), False for an additive one."""
    if not isinstance(mask, _C.TensorBase):
        raise TypeError(f"scaled_dot_product_attention(): argument 'attn_mask' must be "
                        f"Tensor, not {type(mask).__name__}")
    if mask._dtype == _BOOL:
        return True
    if mask._dtype == _INT64:
        raise RuntimeError("Expected attn_mask dtype to be bool or float or to match query "
                           "dtype, but got attn_mask.dtype: long int")
    return False


def _causal_keep(rows, cols):
    # position i may attend to j <= i (the top-left aligned lower triangle, as torch)
    return _C.le(arange(cols).reshape(1, cols), arange(rows).reshape(rows, 1))


def _repeat_heads(t, repeats):
    """[..., H, S, E] -> [..., H * repeats, S, E], each head repeated in place (as
    repeat_interleave on dim -3)."""
    if repeats == 1:
        return t
    shape = tuple(t.shape)
    expanded = t.unsqueeze(-3).expand(*shape[:-2], repeats, *shape[-2:])
    return expanded.reshape(*shape[:-3], shape[-3] * repeats, *shape[-2:])


def _gqa(query, key, value):
    heads, kv_heads, v_heads = query.shape[-3], key.shape[-3], value.shape[-3]
    if heads % kv_heads != 0 or heads % v_heads != 0:
        raise RuntimeError("Number of heads in key and value must divide the number of heads "
                           "in query")
    return _repeat_heads(key, heads // kv_heads), _repeat_heads(value, heads // v_heads)


def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """softmax(query @ key^T * scale + mask) @ value over the last two dims.

    query [..., L, E], key [..., S, E], value [..., S, Ev]; scale defaults to
    1/sqrt(E). A row that may attend to nothing gives zeros (as PyTorch's CPU kernel).
    dropout_p > 0 drops attention weights whether or not the caller is training."""
    _check_qkv(query, key, value)
    if is_causal and attn_mask is not None:  # PyTorch documents this as an error
        raise RuntimeError("_scaled_dot_product_attention: Explicit attn_mask should not be "
                           "set when is_causal=True")
    if enable_gqa:
        key, value = _gqa(query, key, value)
    scale = 1.0 / math.sqrt(query.shape[-1]) if scale is None else float(scale)
    scores = _C.mul_scalar(query @ key.transpose(-2, -1), scale)
    masked = False
    if is_causal:
        scores = _block(scores, _causal_keep(query.shape[-2], key.shape[-2]))
        masked = True
    if attn_mask is not None:
        if is_boolean_mask(attn_mask):
            scores = _block(scores, attn_mask)
        else:  # a float mask of another float dtype adds in the scores' (torch's result)
            scores = scores + (attn_mask if attn_mask._dtype == scores._dtype
                               else _C.to_dtype(attn_mask, scores._dtype))
        masked = True
    weights = _masked_softmax(scores) if masked else scores.softmax(-1)
    if dropout_p > 0.0:
        weights = F.dropout(weights, dropout_p, True)
    return weights @ value


def _block(scores, keep):
    # -inf where keep is 0: those positions get no weight
    return scores.masked_fill(_C.eq_scalar(keep, 0), -math.inf)


def _masked_softmax(scores):
    """softmax over the last dim, with rows that are all -inf giving zeros (not nan)."""
    empty = _C.eq_scalar(scores.detach().amax(-1, keepdim=True), -math.inf)
    weights = scores.masked_fill(empty, 0.0).softmax(-1)
    return weights.masked_fill(empty, 0.0)
