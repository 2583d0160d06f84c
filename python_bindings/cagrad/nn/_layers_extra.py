"""Functional forms of the extra layers: prelu, bilinear, embedding_bag.

Composed of recorded differentiable ops (where, matmul, embedding, index_select, sums), so
autograd and the compiled backward differentiate them with no dedicated kernel. The bag
layout of embedding_bag (which index goes to which bag) is integer data read once in
Python; the values and their gradients stay in the graph.
"""

import numpy as np

from .. import _C, _functions

__all__ = ["prelu", "bilinear", "embedding_bag"]

_MODES = ("sum", "mean", "max")


def _tensor(fn, name, value):
    if not isinstance(value, _C.TensorBase):
        raise TypeError(f"{fn}(): argument '{name}' must be Tensor, not {type(value).__name__}")
    return value


def prelu(input, weight):
    """input where input > 0, else weight * input; a weight of several entries scales the
    channels (dim 1; an input of fewer dims has one channel)."""
    _tensor("prelu", "input", input)
    _tensor("prelu", "weight", weight)
    if weight.numel() != 1:
        channels = input.shape[1] if input.dim() >= 2 else 1
        if weight.numel() != channels:
            raise RuntimeError(f"Mismatch of parameter numbers and input channel size. Found "
                               f"parameter numbers = {weight.numel()} and channel size = "
                               f"{channels}.")
        shape = [1] * input.dim()
        shape[1] = channels
        weight = weight.reshape(tuple(shape))
    elif input.dim() > 0:
        weight = weight.reshape(())
    return _functions.where(_C.gt_scalar(input, 0.0), input, weight * input)


def bilinear(input1, input2, weight, bias=None):
    """y[..., o] = sum_ij input1[..., i] * weight[o, i, j] * input2[..., j] + bias[o]."""
    _tensor("bilinear", "input1", input1)
    _tensor("bilinear", "input2", input2)
    _tensor("bilinear", "weight", weight)
    if weight.dim() != 3:
        raise RuntimeError(f"bilinear(): weight must be three-dimensional, but got "
                           f"{weight.dim()} dimension(s)")
    out_features, in1, in2 = weight.shape
    if input1.shape[-1] != in1 or input2.shape[-1] != in2:
        raise RuntimeError(f"bilinear(): input sizes do not match weight: input1 last dim "
                           f"{input1.shape[-1]} vs {in1}, input2 last dim {input2.shape[-1]} "
                           f"vs {in2}")
    if tuple(input1.shape[:-1]) != tuple(input2.shape[:-1]):
        raise RuntimeError(f"bilinear(): input batch dimensions do not match: got "
                           f"{list(input1.shape[:-1])} and {list(input2.shape[:-1])}")
    # input1 @ W as [..., out * in2], then the dot with input2 along in2
    mixed = input1.matmul(weight.permute(1, 0, 2).reshape(in1, out_features * in2))
    mixed = mixed.reshape(tuple(input1.shape[:-1]) + (out_features, in2))
    out = (mixed * input2.unsqueeze(-2)).sum(-1)
    return out if bias is None else out + bias


def _bag_bounds(input, offsets, include_last_offset):
    """(starts, ends) of each bag as numpy arrays, with torch's offset checks."""
    n = input.numel()
    offs = np.asarray(offsets.numpy(), dtype=np.int64).reshape(-1)
    if offs.size and offs[0] != 0:
        raise RuntimeError(f"offsets[0] has to be 0, i.e., the first sequence in the "
                           f"mini-batch has to start from position 0. However, got {offs[0]}")
    if offs.size and offs[-1] > n:
        raise RuntimeError(f"offsets[-1] can not be greater than input's length {n} but got "
                           f"offsets[-1] of {offs[-1]}")
    if include_last_offset:
        starts, ends = offs[:-1], offs[1:]
    else:
        starts, ends = offs, np.append(offs[1:], n)
    return starts, np.maximum(ends, starts)


def _bag_layout(indices, starts, ends, padding_idx):
    """[bags, longest] positions into the flat input (0 where unused) and the mask of the
    positions used (the padding index counts as unused, as in torch)."""
    longest = int((ends - starts).max()) if starts.size else 0
    slot = np.arange(max(longest, 1))
    positions = starts[:, None] + slot[None, :]
    used = positions < ends[:, None]
    positions = np.where(used, positions, 0)
    if padding_idx is not None and indices.size:
        used &= indices[positions] != padding_idx
    return positions, used


def _check_bag_args(input, weight, offsets, per_sample_weights, mode):
    if per_sample_weights is not None and tuple(input.shape) != tuple(per_sample_weights.shape):
        raise ValueError(f"embedding_bag: If per_sample_weights ({per_sample_weights.shape}) "
                         f"is not None, then it must have the same shape as the input "
                         f"({input.shape})")
    if weight.dim() != 2:
        raise ValueError(f"weight has to be a 2D Tensor, but got Tensor of dimension "
                         f"{weight.dim()}")
    if input.dim() == 2 and offsets is not None:
        raise ValueError(f"if input is 2D, then offsets has to be None, as input is treated is "
                         f"a mini-batch of fixed length sequences. However, found offsets of "
                         f"type {type(offsets)}")
    if input.dim() == 1 and offsets is None:
        raise ValueError("offsets has to be a 1D Tensor but got None")
    if input.dim() == 1 and offsets.dim() != 1:
        raise ValueError("offsets has to be a 1D Tensor")
    if input.dim() not in (1, 2):
        raise ValueError(f"input has to be 1D or 2D Tensor, but got Tensor of dimension "
                         f"{input.dim()}")
    if mode not in _MODES:
        raise ValueError("mode has to be one of sum, mean or max")
    if per_sample_weights is not None and mode != "sum":
        raise NotImplementedError(f"embedding_bag: per_sample_weights was not None. "
                                  f"per_sample_weights is only supported for mode='sum' (got "
                                  f"mode='{mode}'). Please open a feature request on GitHub.")


def embedding_bag(input, weight, offsets=None, max_norm=None, norm_type=2,
                  scale_grad_by_freq=False, mode="mean", sparse=False, per_sample_weights=None,
                  include_last_offset=False, padding_idx=None):
    """Sums, means or maxima of bags of embedding rows: a 2-D input is one bag per row; a
    1-D input is cut into bags at offsets. Empty bags give zeros."""
    _tensor("embedding_bag", "input", input)
    _tensor("embedding_bag", "weight", weight)
    _check_bag_args(input, weight, offsets, per_sample_weights, mode)
    if max_norm is not None:
        raise NotImplementedError("cagrad's embedding_bag() does not support max_norm=... "
                                  "(see docs/python-api.md)")
    if scale_grad_by_freq or sparse:
        raise NotImplementedError("cagrad's embedding_bag() does not support "
                                  "scale_grad_by_freq=True or sparse=True (see "
                                  "docs/python-api.md)")
    if padding_idx is not None:
        padding_idx = padding_idx % weight.shape[0]
    if input.dim() == 2:
        bags, length = input.shape
        starts = np.arange(bags, dtype=np.int64) * length
        ends = starts + length
        input = input.reshape(-1)
        if per_sample_weights is not None:
            per_sample_weights = per_sample_weights.reshape(-1)
    else:
        starts, ends = _bag_bounds(input, offsets, include_last_offset)
    indices = np.asarray(input.numpy(), dtype=np.int64)
    positions, used = _bag_layout(indices, starts, ends, padding_idx)
    return _reduce_bags(input, weight, per_sample_weights, positions, used, mode)


def _reduce_bags(input, weight, per_sample_weights, positions, used, mode):
    from .._creation import tensor
    flat = tensor(positions.reshape(-1))
    shape = positions.shape
    rows = _C.embedding(weight, input.index_select(0, flat).reshape(shape)) if input.numel() \
        else _C.embedding(weight, tensor(np.zeros(shape, dtype=np.int64)))
    mask = tensor(used)
    if mode == "max":
        picked = _functions.where(mask.unsqueeze(-1), rows, float("-inf")).max(1)[0]
        return _functions.where(tensor(used.any(1)).unsqueeze(-1), picked, 0.0)
    scale = mask.to(weight.dtype)
    if per_sample_weights is not None:
        scale = scale * per_sample_weights.index_select(0, flat).reshape(shape)
    total = (rows * scale.unsqueeze(-1)).sum(1)
    if mode == "sum":
        return total
    counts = np.maximum(used.sum(1), 1).astype(np.float64)
    return total / tensor(counts[:, None]).to(weight.dtype)
