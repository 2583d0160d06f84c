"""nn.MultiheadAttention, composed of linear, matmul, softmax and dropout.

Parameters and their names are PyTorch's (in_proj_weight, or q/k/v_proj_weight when kdim
or vdim differ from embed_dim; in_proj_bias; out_proj; bias_k/bias_v). Masks follow
PyTorch's MultiheadAttention convention, the opposite of scaled_dot_product_attention's:
a boolean mask (a tagged 0/1 tensor, see nn/_attention.py) marks the positions to IGNORE;
a float mask is added to the attention scores.
"""

import math

from .. import _C
from .._creation import empty, zeros
from .._dtype import bool as _bool_dtype
from .._dtype import check_device
from .._functions import cat
from . import functional as F
from . import init
from ._attention import _masked_softmax
from .layers import Linear
from .module import Module
from .parameter import Parameter


class NonDynamicallyQuantizableLinear(Linear):
    """Linear under the name PyTorch gives MultiheadAttention's out_proj."""


def _additive_mask(mask, name, dtype):
    """A mask as a float tensor to add to the scores: -inf where a boolean mask is set."""
    if mask is None:
        return None
    if mask.dtype is _bool_dtype:
        return _C.where_scalar(_C.eq_scalar(mask, 0), zeros(tuple(mask.shape), dtype=dtype),
                               -math.inf)
    if not mask.is_floating_point():
        raise AssertionError(f"only bool and floating types of {name} are supported")
    return mask


class MultiheadAttention(Module):
    """Attention over num_heads heads of size embed_dim // num_heads, as torch.nn's."""

    def __init__(self, embed_dim, num_heads, dropout=0.0, bias=True, add_bias_kv=False,
                 add_zero_attn=False, kdim=None, vdim=None, batch_first=False, device=None,
                 dtype=None):
        super().__init__()
        check_device(device)
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(f"embed_dim and num_heads must be greater than 0, got embed_dim="
                             f"{embed_dim} and num_heads={num_heads} instead")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.dropout = dropout
        self.batch_first = batch_first
        self.head_dim = embed_dim // num_heads
        if self.head_dim * num_heads != embed_dim:
            raise AssertionError("embed_dim must be divisible by num_heads")
        self._make_parameters(bias, add_bias_kv, dtype)
        self.add_zero_attn = add_zero_attn
        self._reset_parameters()

    def _make_parameters(self, bias, add_bias_kv, dtype):
        # registration order = PyTorch's, so that state_dict keys come out in its order
        e = self.embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(empty(3 * e, e, dtype=dtype))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = Parameter(empty(e, e, dtype=dtype))
            self.k_proj_weight = Parameter(empty(e, self.kdim, dtype=dtype))
            self.v_proj_weight = Parameter(empty(e, self.vdim, dtype=dtype))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(empty(3 * e, dtype=dtype))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = NonDynamicallyQuantizableLinear(e, e, bias=bias, dtype=dtype)
        if add_bias_kv:
            self.bias_k = Parameter(empty(1, 1, e, dtype=dtype))
            self.bias_v = Parameter(empty(1, 1, e, dtype=dtype))
        else:
            self.bias_k = self.bias_v = None

    def _reset_parameters(self):
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            for w in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                init.xavier_uniform_(w)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        for b in (self.bias_k, self.bias_v):
            if b is not None:  # xavier_normal_ of a [1, 1, E] tensor: fan_in = fan_out = E
                init.normal_(b, 0.0, math.sqrt(2.0 / (2 * self.embed_dim)))

    def _project(self, query, key, value):
        e = self.embed_dim
        bias = self.in_proj_bias
        b_q, b_k, b_v = (None,) * 3 if bias is None else (bias[:e], bias[e:2 * e], bias[2 * e:])
        if self._qkv_same_embed_dim:
            w = self.in_proj_weight
            w_q, w_k, w_v = w[:e], w[e:2 * e], w[2 * e:]
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        return F.linear(query, w_q, b_q), F.linear(key, w_k, b_k), F.linear(value, w_v, b_v)

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True,
                attn_mask=None, average_attn_weights=True, is_causal=False):
        """(attention output, head-averaged weights or None); inputs [L, N, E] ([N, L, E]
        with batch_first) or unbatched [L, E]."""
        batched = query.ndim == 3
        if batched and self.batch_first:
            query, key, value = (t.transpose(0, 1) for t in (query, key, value))
        if not batched:
            query, key, value = (t.unsqueeze(1) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = key_padding_mask.unsqueeze(0)
        if is_causal and attn_mask is None:
            raise RuntimeError("Need attn_mask if specifying the is_causal hint. You may use "
                               "the Transformer module method `generate_square_subsequent_mask` "
                               "to create this mask.")
        out, weights = self._attend(query, key, value, key_padding_mask, attn_mask,
                                    need_weights)
        if need_weights and average_attn_weights:
            weights = weights.mean(1)
        if not batched:
            out = out.squeeze(1)
            weights = None if weights is None else weights.squeeze(0)
        elif self.batch_first:
            out = out.transpose(0, 1)
        return out, (weights if need_weights else None)

    def _attend(self, query, key, value, key_padding_mask, attn_mask, need_weights):
        tgt_len, bsz, e = query.shape
        heads, hd = self.num_heads, self.head_dim
        kpm = _additive_mask(key_padding_mask, "key_padding_mask", query.dtype)
        mask = self._checked_attn_mask(_additive_mask(attn_mask, "attn_mask", query.dtype),
                                       tgt_len, key.shape[0], bsz)
        q, k, v = self._project(query, key, value)
        if self.bias_k is not None:
            k = cat([k, self.bias_k.expand(1, bsz, e)])
            v = cat([v, self.bias_v.expand(1, bsz, e)])
            mask, kpm = _pad_masks(mask, kpm)
        q = q.reshape(tgt_len, bsz * heads, hd).transpose(0, 1)
        k = k.reshape(k.shape[0], bsz * heads, hd).transpose(0, 1)
        v = v.reshape(v.shape[0], bsz * heads, hd).transpose(0, 1)
        if self.add_zero_attn:
            k = cat([k, zeros(bsz * heads, 1, hd, dtype=k.dtype)], 1)
            v = cat([v, zeros(bsz * heads, 1, hd, dtype=v.dtype)], 1)
            mask, kpm = _pad_masks(mask, kpm)
        src_len = k.shape[1]
        if kpm is not None:
            kpm = kpm.reshape(bsz, 1, 1, src_len).expand(bsz, heads, 1, src_len)
            kpm = kpm.reshape(bsz * heads, 1, src_len)
            mask = kpm if mask is None else mask + kpm
        scores = (q * math.sqrt(1.0 / hd)) @ k.transpose(-2, -1)
        if mask is not None:
            scores = scores + mask
        # PyTorch's need_weights path softmaxes plainly (nan for a row with no key); its
        # other path (scaled_dot_product_attention) gives zeros there
        weights = scores.softmax(-1) if need_weights or mask is None else _masked_softmax(
            scores)
        if self.training and self.dropout > 0.0:
            weights = F.dropout(weights, self.dropout, True)
        out = (weights @ v).transpose(0, 1).reshape(tgt_len * bsz, e)
        out = self.out_proj(out).reshape(tgt_len, bsz, e)
        return out, weights.reshape(bsz, heads, tgt_len, src_len)

    def _checked_attn_mask(self, mask, tgt_len, src_len, bsz):
        if mask is None:
            return None
        if mask.ndim == 2:
            if tuple(mask.shape) != (tgt_len, src_len):
                raise RuntimeError(f"The shape of the 2D attn_mask is {mask.shape}, but should "
                                   f"be {(tgt_len, src_len)}.")
            return mask.unsqueeze(0)
        if mask.ndim == 3:
            expected = (bsz * self.num_heads, tgt_len, src_len)
            if tuple(mask.shape) != expected:
                raise RuntimeError(f"The shape of the 3D attn_mask is {mask.shape}, but should "
                                   f"be {expected}.")
            return mask
        raise RuntimeError(f"attn_mask's dimension {mask.ndim} is not supported")


def _pad_masks(mask, kpm):
    # one more key (bias_k or the zero key) that every query may attend to
    return (None if mask is None else F.pad(mask, (0, 1)),
            None if kpm is None else F.pad(kpm, (0, 1)))
