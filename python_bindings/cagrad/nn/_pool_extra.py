"""nn.functional names filled in by the census (h39): adaptive_avg_pool1d,
adaptive_max_pool3d, lp_pool1d/2d/3d, fractional_max_pool2d/3d, the *_with_indices
spellings, max_unpool3d, multilabel_margin_loss, pdist, native_channel_shuffle, the
in-place activations (relu_, elu_, ...) and multi_head_attention_forward.

All are composites of existing differentiable ops, so autograd and compiled capture come
for free. Fractional pooling draws its window starts from `_random_samples` exactly as
torch's kernel does (the arithmetic in the input's float type), so given the same samples
the windows, values and indices match torch's.
"""

import math

import numpy as np

from .._creation import rand, tensor
from . import _layers_more, _pool_more
from . import functional as F
from ._pool_more import _batched, _int64, _restore
from .pooling import _input, _int, _pair

__all__ = ["adaptive_avg_pool1d", "adaptive_max_pool3d", "adaptive_max_pool3d_with_indices",
           "lp_pool1d", "lp_pool2d", "lp_pool3d", "fractional_max_pool2d",
           "fractional_max_pool3d", "fractional_max_pool2d_with_indices",
           "fractional_max_pool3d_with_indices", "max_pool1d_with_indices",
           "max_pool2d_with_indices", "max_unpool3d", "multilabel_margin_loss", "pdist",
           "native_channel_shuffle", "relu_", "elu_", "leaky_relu_", "hardtanh_", "selu_",
           "celu_", "multi_head_attention_forward"]


# --- adaptive pooling, *_with_indices, max_unpool3d ------------------------------------------

def adaptive_avg_pool1d(input, output_size):
    """The 2-d op on a height-1 view, as torch does."""
    _input("adaptive_avg_pool1d", input)
    size = (output_size,) if _int(output_size) else tuple(output_size)
    if len(size) != 1:
        raise RuntimeError(f"adaptive_avg_pool1d() argument 'output_size' should contain one "
                           f"int (got {len(size)})")
    if input.ndim not in (2, 3):
        raise RuntimeError(f"Expected 2 to 3 dimensions, but got {input.ndim}-dimensional "
                           f"tensor for argument #1 'self' (while checking arguments for "
                           f"adaptive_avg_pool1d)")
    return F.adaptive_avg_pool2d(input.unsqueeze(-2), (1, size[0])).squeeze(-2)


def adaptive_max_pool3d_with_indices(input, output_size, return_indices=True):
    if _input("adaptive_max_pool3d", input).ndim not in (4, 5):
        raise RuntimeError(f"adaptive_max_pool3d(): Expected 4D or 5D tensor, but got: "
                           f"{list(input.shape)}")
    return _pool_more._adaptive_max("adaptive_max_pool3d", input, output_size, 3)


def adaptive_max_pool3d(input, output_size, return_indices=False):
    out, indices = adaptive_max_pool3d_with_indices(input, output_size)
    return (out, indices) if return_indices else out


def max_pool1d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return F.max_pool1d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_pool2d_with_indices(input, kernel_size, stride=None, padding=0, dilation=1,
                            ceil_mode=False, return_indices=True):
    return F.max_pool2d(input, kernel_size, stride, padding, dilation, ceil_mode, True)


def max_unpool3d(input, indices, kernel_size, stride=None, padding=0, output_size=None):
    if _input("max_unpool3d", input).ndim not in (4, 5):
        raise RuntimeError(f"Input to max_unpooling3d should be a 4d or 5d Tensor, but got a "
                           f"tensor with {input.ndim} dimensions.")
    return _pool_more._max_unpool("max_unpool3d", input, indices, kernel_size, stride,
                                  padding, output_size, 3)


# --- power-average pooling ---------------------------------------------------------------------

def _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, n, avg_pool):
    kernel = _pair(f"lp_pool{n}d", "kernel_size", kernel_size, n)
    powered = input.pow(norm_type)
    if stride is None:
        out = avg_pool(powered, kernel_size, padding=0, ceil_mode=ceil_mode)
    else:
        out = avg_pool(powered, kernel_size, stride, 0, ceil_mode)
    # (sum of x^p)^(1/p): the average times the window size; the sign/relu pair keeps a
    # negative average (odd p) from making nan, as torch
    return (out.sign() * F.relu(out.abs())).mul(math.prod(kernel)).pow(1.0 / norm_type)


def lp_pool1d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 1, F.avg_pool1d)


def lp_pool2d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 2, F.avg_pool2d)


def lp_pool3d(input, norm_type, kernel_size, stride=None, ceil_mode=False):
    return _lp_pool(input, norm_type, kernel_size, stride, ceil_mode, 3, _pool_more.avg_pool3d)


# --- fractional max pooling ---------------------------------------------------------------------

def _intervals(samples, length, out, pool, np_dtype):
    """Window starts of one dim for every (batch, plane): [B, C, out], in torch's
    arithmetic (the input's float type; int() truncates the non-negative products)."""
    starts = np.full(samples.shape + (out,), length - pool, dtype=np.int64)
    if out > 1:
        alpha = np_dtype(length - pool) / np_dtype(out - 1)
        s = samples.astype(np_dtype)[..., None]
        i = np.arange(out - 1, dtype=np_dtype)
        starts[..., :-1] = ((i + s) * alpha).astype(np.int64) - (s * alpha).astype(np.int64)
    return starts


def _fractional_index(samples, sizes, outs, kernel, np_dtype):
    """Flat input indices [B, C, P, K] of every window: each (batch, plane) has its own
    window starts, drawn from its samples (torch's 2-d kernel keeps the width's sample
    first, its 3-d kernel keeps (T, H, W))."""
    b, c, n = samples.shape
    order = [1, 0] if n == 2 else [0, 1, 2]  # sample slot of each spatial dim
    strides = [math.prod(sizes[d + 1:]) for d in range(n)]
    flat = np.zeros((b, c) + tuple(outs) + tuple(kernel), dtype=np.int64)
    for d in range(n):
        starts = _intervals(samples[:, :, order[d]], sizes[d], outs[d], kernel[d], np_dtype)
        shape_o, shape_k = [b, c] + [1] * (2 * n), [1] * (2 * n)
        shape_o[2 + d], shape_k[n + d] = outs[d], kernel[d]
        taps = np.arange(kernel[d]).reshape([1, 1] + shape_k)
        flat = flat + (starts.reshape(shape_o) + taps) * strides[d]
    return flat.reshape(b, c, math.prod(outs), math.prod(kernel))


def _ratio(fn, output_ratio, n):
    sequence = isinstance(output_ratio, (tuple, list))
    if n == 2 and not sequence:  # torch's 2-d function takes len() of it (its 3-d does not)
        raise TypeError(f"object of type '{type(output_ratio).__name__}' has no len()")
    if n == 2 and len(output_ratio) > 2:
        raise ValueError(f"{fn} requires output_ratio to either be a single Int or tuple of "
                         f"Ints.")
    ratio = tuple(output_ratio) if sequence else (output_ratio,)
    return ratio * n if len(ratio) == 1 else ratio


def _checked_samples(samples, x, n):
    """The samples of x's batch (torch takes the first N rows of a larger batch)."""
    if samples.ndim != 3:
        raise RuntimeError(f"Expect _random_samples to have 3 dimensions, got {samples.ndim}")
    if samples.shape[0] < x.shape[0]:
        raise RuntimeError("Expect _random_samples.size(0) no less then input batch size.")
    if samples.shape[1] != x.shape[1]:
        raise RuntimeError("Expect _random_samples.size(1) equals to input channel size.")
    if samples.shape[2] != n:
        raise RuntimeError(f"Expect _random_samples.size(2) equals to {n}; got "
                           f"{samples.shape[2]}.")
    if samples.dtype != x.dtype:
        raise RuntimeError("Expect _random_samples to have the same dtype as input")
    return samples[:x.shape[0]]


def _fractional(fn, input, kernel_size, output_size, output_ratio, samples, n):
    if output_size is None and output_ratio is None:
        raise ValueError(f"{fn} requires specifying either an output_size or an output_ratio")
    kernel = _pair(fn, "kernel_size", kernel_size, n)
    x, batched = _batched(fn, input, n)
    sizes = tuple(x.shape[2:])
    if output_size is None:
        ratio = _ratio(fn, output_ratio, n)
        outs = tuple(int(s * r) for s, r in zip(sizes, ratio))
    else:
        outs = _pair(fn, "output_size", output_size, n)
    names = ("time", "height", "width")[3 - n:]
    for name, k, o, s in zip(names, kernel, outs, sizes):
        if o + k - 1 > s - (n == 3):  # torch's 3-d kernel wants one more input element
            where = fn if n == 2 else f"{fn}_out"  # (torch's 3-d kernel's own name)
            raise RuntimeError(f"{where}(): pool {name} {k} too large relative to input "
                               f"{name} {s}")
    if samples is None:  # torch's draw: one sample per (batch, plane, dim) in [0, 1)
        samples = rand(x.shape[0], x.shape[1], n, dtype=x.dtype)
    samples = _checked_samples(samples, x, n)
    np_dtype = np.float64 if str(x.dtype).endswith("float64") else np.float32
    index = _fractional_index(samples.detach().numpy().astype(np_dtype), sizes, outs, kernel,
                              np_dtype)
    b, c = x.shape[:2]
    table = tensor(index.reshape(b, c, -1), dtype=_int64())
    windows = x.reshape(b, c, -1).gather(2, table).reshape(b, c, *index.shape[2:])
    values, arg = windows.max(-1)  # the first largest tap, as torch's strict > scan
    indices = tensor(index, dtype=_int64()).gather(3, arg.unsqueeze(-1)).squeeze(-1)
    shape = (b, c, *outs)
    return _restore(values.reshape(shape), batched), _restore(indices.reshape(shape), batched)


def fractional_max_pool2d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return _fractional("fractional_max_pool2d", input, kernel_size, output_size, output_ratio,
                       _random_samples, 2)


def fractional_max_pool3d_with_indices(input, kernel_size, output_size=None, output_ratio=None,
                                       return_indices=False, _random_samples=None):
    return _fractional("fractional_max_pool3d", input, kernel_size, output_size, output_ratio,
                       _random_samples, 3)


def fractional_max_pool2d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    out, indices = fractional_max_pool2d_with_indices(input, kernel_size, output_size,
                                                      output_ratio, False, _random_samples)
    return (out, indices) if return_indices else out


def fractional_max_pool3d(input, kernel_size, output_size=None, output_ratio=None,
                          return_indices=False, _random_samples=None):
    out, indices = fractional_max_pool3d_with_indices(input, kernel_size, output_size,
                                                      output_ratio, False, _random_samples)
    return (out, indices) if return_indices else out


# --- multilabel_margin_loss, pdist, channel shuffle ----------------------------------------------

_DTYPE_WORDS = {"cagrad.float32": "Float", "cagrad.float64": "Double", "cagrad.int32": "Int",
                "cagrad.bool": "Bool"}


def _multilabel_targets(input, target):
    """(target indices [N, T], valid [N, T], is_target [N, C]) as numpy: each row's
    targets are its entries before the first -1."""
    if target.dtype != _int64():
        raise RuntimeError(f"expected scalar type Long but found "
                           f"{_DTYPE_WORDS.get(str(target.dtype), str(target.dtype))}")
    t = target.detach().numpy().reshape(-1, input.shape[-1] if input.ndim else 1)
    n, c = t.shape
    if t.size and (t.min() < -1 or t.max() >= c):
        raise RuntimeError("argument #2 'target' is out of range")
    valid = np.cumprod(t >= 0, axis=1).astype(bool)
    is_target = np.zeros((n, c), dtype=bool)
    rows = np.nonzero(valid)[0]
    is_target[rows, t[valid]] = True
    return np.where(valid, t, 0), valid, is_target


def multilabel_margin_loss(input, target, size_average=None, reduce=None, reduction="mean"):
    """sum over (target j, non-target i) of max(0, 1 - (x[y_j] - x[i])) / C per sample."""
    code = F._reduction_code("multilabel_margin_loss", size_average, reduce, reduction)
    F._tensor("multilabel_margin_loss", "input", input)
    F._tensor("multilabel_margin_loss", "target", target)
    if input.ndim > 2 or (input.ndim and input.shape[-1] == 0):
        raise RuntimeError(f"Expected non-empty vector or matrix with optional 0-dim batch "
                           f"size, but got: {list(input.shape)}")
    if tuple(target.shape) != tuple(input.shape):
        raise RuntimeError(f"inconsistent target size: {list(target.shape)} for input of "
                           f"size: {list(input.shape)}")
    x = input.reshape(-1, input.shape[-1] if input.ndim else 1)
    idx, valid, is_target = _multilabel_targets(input, target)
    c = x.shape[1]
    picked = x.gather(1, tensor(idx, dtype=_int64()))  # x[y_j], [N, T]
    hinge = F.relu(1.0 - picked.unsqueeze(2) + x.unsqueeze(1))  # [N, T, C]
    pairs = valid[:, :, None] & ~is_target[:, None, :]
    per_sample = (hinge * tensor(pairs.astype(np.float64), dtype=x.dtype)).sum((1, 2)) / c
    if code == 0:
        return per_sample.reshape(input.shape[:-1]) if input.ndim else per_sample.reshape(())
    return per_sample.mean() if code == 1 else per_sample.sum()


def pdist(input, p=2):
    """The p-norm distances between the rows of input [N, M], pairs i < j in row-major
    order: an N * (N - 1) / 2 vector."""
    F._tensor("pdist", "input", input)
    if input.ndim != 2:
        raise RuntimeError(f"pdist only supports 2D tensors, got: {input.ndim}D")
    if not input.dtype.is_floating_point:
        raise RuntimeError("pdist only supports floating-point dtypes")
    if p < 0:
        raise RuntimeError("pdist only supports non-negative p values")
    i, j = np.triu_indices(input.shape[0], 1)
    diff = (input.index_select(0, tensor(i, dtype=_int64()))
            - input.index_select(0, tensor(j, dtype=_int64())))
    if p == math.inf:
        # torch's pdist gives each coordinate that ties for the max the whole gradient
        # (vector_norm shares it among them): the max's value plus a zero-valued sum whose
        # gradient is exactly that
        size = diff.abs()
        top = size.detach().amax(1, keepdim=True)
        ties = (size.detach() == top).to(diff.dtype)
        return top.squeeze(1) + (ties * (size - size.detach())).sum(1)
    from .. import linalg
    return linalg.vector_norm(diff, p, dim=1)


def native_channel_shuffle(input, groups):
    return _layers_more.channel_shuffle(input, groups)


# --- in-place activations (recorded in the graph through the inplace= path) --------------------

def relu_(input):
    return F.relu(input, inplace=True)


def elu_(input, alpha=1.0):
    return F.elu(input, alpha, inplace=True)


def leaky_relu_(input, negative_slope=0.01):
    return F.leaky_relu(input, negative_slope, inplace=True)


def hardtanh_(input, min_val=-1.0, max_val=1.0):
    return F.hardtanh(input, min_val, max_val, inplace=True)


def selu_(input):
    return F.selu(input, inplace=True)


def celu_(input, alpha=1.0):
    return F.celu(input, alpha, inplace=True)


# --- multi_head_attention_forward --------------------------------------------------------------

class _Weights:
    """The attributes MultiheadAttention's attention math reads, from explicit tensors, so
    the functional form runs the module's own code."""

    def __init__(self, **fields):
        self.__dict__.update(fields)

    def out_proj(self, x):
        return F.linear(x, self.out_proj_weight, self.out_proj_bias)

    def _project(self, query, key, value):
        from .multihead import MultiheadAttention
        return MultiheadAttention._project(self, query, key, value)

    def _checked_attn_mask(self, mask, tgt_len, src_len, bsz):
        from .multihead import MultiheadAttention
        return MultiheadAttention._checked_attn_mask(self, mask, tgt_len, src_len, bsz)


def multi_head_attention_forward(query, key, value, embed_dim_to_check, num_heads,
                                 in_proj_weight, in_proj_bias, bias_k, bias_v, add_zero_attn,
                                 dropout_p, out_proj_weight, out_proj_bias, training=True,
                                 key_padding_mask=None, need_weights=True, attn_mask=None,
                                 use_separate_proj_weight=False, q_proj_weight=None,
                                 k_proj_weight=None, v_proj_weight=None, static_k=None,
                                 static_v=None, average_attn_weights=True, is_causal=False):
    """Inputs [L, N, E] or unbatched [L, E] (no batch_first here, as torch)."""
    from .multihead import MultiheadAttention
    if static_k is not None or static_v is not None:
        raise NotImplementedError("cagrad's multi_head_attention_forward() does not support "
                                  "static_k / static_v (see docs/python-api.md, More nn names)")
    e = query.shape[-1]
    if e != embed_dim_to_check:
        raise AssertionError(f"was expecting embedding dimension of {embed_dim_to_check}, but "
                             f"got {e}")
    if e % num_heads:
        raise AssertionError(f"embed_dim {e} not divisible by num_heads {num_heads}")
    if is_causal and attn_mask is None:
        raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use the "
                           "Transformer module method `generate_square_subsequent_mask` to "
                           "create this mask.")
    if use_separate_proj_weight and None in (q_proj_weight, k_proj_weight, v_proj_weight):
        raise AssertionError("use_separate_proj_weight is True but q_proj_weight, "
                             "k_proj_weight or v_proj_weight is None")
    w = _Weights(embed_dim=e, num_heads=num_heads, head_dim=e // num_heads,
                 _qkv_same_embed_dim=not use_separate_proj_weight,
                 in_proj_weight=in_proj_weight, in_proj_bias=in_proj_bias,
                 q_proj_weight=q_proj_weight, k_proj_weight=k_proj_weight,
                 v_proj_weight=v_proj_weight, bias_k=bias_k, bias_v=bias_v,
                 add_zero_attn=add_zero_attn, dropout=dropout_p, training=training,
                 out_proj_weight=out_proj_weight, out_proj_bias=out_proj_bias)
    batched = query.ndim == 3
    if not batched:
        query, key, value = (t.unsqueeze(1) for t in (query, key, value))
        if key_padding_mask is not None:
            key_padding_mask = key_padding_mask.unsqueeze(0)
    out, weights = MultiheadAttention._attend(w, query, key, value, key_padding_mask,
                                              attn_mask, need_weights)
    if need_weights and average_attn_weights:
        weights = weights.mean(1)
    if not batched:
        out = out.squeeze(1)
        weights = weights.squeeze(0)
    return out, (weights if need_weights else None)

