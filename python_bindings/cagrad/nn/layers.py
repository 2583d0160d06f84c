"""Layers with parameters or modes: Linear, Conv2d (and _ConvNd, which Conv1d shares),
LayerNorm, Embedding, Dropout, Identity, Flatten.

Constructors take PyTorch's arguments, including device= (which must be the CPU) and
dtype=; parameters are initialized with PyTorch's distributions.
"""

import math

from .._creation import empty, ones, zeros
from .._dtype import check_device
from .._grad_mode import no_grad
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


class Identity(Module):
    """Returns its input; the arguments are accepted and ignored, as in PyTorch."""

    def __init__(self, *args, **kwargs):
        super().__init__()

    def forward(self, input):
        return input


def _default_init(weight, bias, fan_in):
    """PyTorch's default for Linear and Conv2d: kaiming_uniform with a=sqrt(5), which is
    U(-1/sqrt(fan_in), 1/sqrt(fan_in)), and the bias uniform in the same bound."""
    init.kaiming_uniform_(weight, a=math.sqrt(5))
    if bias is not None:
        bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0
        init.uniform_(bias, -bound, bound)


class Linear(Module):
    """y = x @ weight.T + bias, with weight [out_features, in_features]."""

    def __init__(self, in_features, out_features, bias=True, device=None, dtype=None):
        super().__init__()
        check_device(device)
        self.in_features = in_features
        self.out_features = out_features
        self.weight = Parameter(empty(out_features, in_features, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_features, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        _default_init(self.weight, self.bias, self.in_features)

    def forward(self, input):
        return F.linear(input, self.weight, self.bias)

    def extra_repr(self):
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class _ConvNd(Module):
    """What Conv1d and Conv2d share, as PyTorch's _ConvNd does: the argument checks, the
    parameters (weight [out_channels, in_channels/groups, *kernel_size], bias
    [out_channels]) with their initialization, and the repr. A subclass checks groups, turns
    kernel_size, stride, dilation and a numeric padding into tuples of its rank, then calls
    _setup."""

    _PADDING_MODES = ("zeros", "reflect", "replicate", "circular")

    @staticmethod
    def _check_groups(in_channels, out_channels, groups):
        if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
            raise ValueError("groups must be a positive integer")
        if in_channels % groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        if out_channels % groups != 0:
            raise ValueError("out_channels must be divisible by groups")

    def _check_padding_mode(self, padding_mode):
        if padding_mode not in self._PADDING_MODES:
            raise ValueError(f"padding_mode must be one of {set(self._PADDING_MODES)}, but got "
                             f"padding_mode='{padding_mode}'")

    def _setup(self, in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
               bias, padding_mode, dtype):
        rank = len(kernel_size)
        if isinstance(padding, str):
            if padding not in ("same", "valid"):
                raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                                 f"{{'valid', 'same'}}")
            if padding == "same" and stride != (1,) * rank:
                raise ValueError("padding='same' is not supported for strided convolutions")
        self._check_padding_mode(padding_mode)
        self._set_fields(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         False, (0,) * rank, groups, bias, padding_mode, dtype)

    def _set_fields(self, in_channels, out_channels, kernel_size, stride, padding, dilation,
                    transposed, output_padding, groups, bias, padding_mode, dtype):
        """PyTorch's _ConvNd attributes and parameters: the weight is [out, in/groups, *k],
        or [in, out/groups, *k] for a transposed convolution; then reset_parameters()."""
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.kernel_size = kernel_size
        self.stride = stride
        self.padding = padding
        self.dilation = dilation
        self.transposed = transposed
        self.output_padding = output_padding
        self.groups = groups
        self.padding_mode = padding_mode
        rows, cols = (in_channels, out_channels) if transposed else (out_channels, in_channels)
        self.weight = Parameter(empty(rows, cols // groups, *kernel_size, dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        # fan_in = in/groups * the kernel's size
        _default_init(self.weight, self.bias,
                      self.in_channels // self.groups * math.prod(self.kernel_size))

    def extra_repr(self):
        rank = len(self.kernel_size)
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,) * rank:
            text += f", padding={self.padding}"
        if self.dilation != (1,) * rank:
            text += f", dilation={self.dilation}"
        if self.output_padding != (0,) * rank:  # the transposed convolutions' (as torch)
            text += f", output_padding={self.output_padding}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


class Conv2d(_ConvNd):
    """A 2-D convolution: weight [out_channels, in_channels/groups, kH, kW], bias
    [out_channels]. Only padding_mode='zeros' is implemented."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        check_device(device)
        self._check_groups(in_channels, out_channels, groups)
        kernel_size = F._pair("kernel_size", kernel_size)
        stride = F._pair("stride", stride)
        dilation = F._pair("dilation", dilation)
        if not isinstance(padding, str):
            padding = F._pair("padding", padding)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    bias, padding_mode, dtype)

    def _check_padding_mode(self, padding_mode):
        super()._check_padding_mode(padding_mode)
        if padding_mode != "zeros":
            raise NotImplementedError(f"cagrad's Conv2d does not support "
                                      f"padding_mode='{padding_mode}'; only 'zeros' is "
                                      f"implemented")

    def forward(self, input):
        return F.conv2d(input, self.weight, self.bias, self.stride, self.padding,
                        self.dilation, self.groups)


class LayerNorm(Module):
    """Normalizes over the trailing dims given by normalized_shape, then scales and shifts."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, bias=True,
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype))
            if bias:
                self.bias = Parameter(zeros(self.normalized_shape, dtype=dtype))
            else:
                self.register_parameter("bias", None)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.weight is not None:
            init.ones_(self.weight)
        if self.bias is not None:
            init.zeros_(self.bias)

    def forward(self, input):
        return F.layer_norm(input, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}, bias={self.bias is not None}")


class Embedding(Module):
    """A lookup table: row i of weight [num_embeddings, embedding_dim] for index i."""

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, scale_grad_by_freq=False, sparse=False, _weight=None,
                 _freeze=False, device=None, dtype=None):
        super().__init__()
        check_device(device)
        self.num_embeddings = num_embeddings
        self.embedding_dim = embedding_dim
        if padding_idx is not None:
            padding_idx = F._padding_index(padding_idx, num_embeddings)
        self.padding_idx = padding_idx
        self.max_norm = max_norm
        self.norm_type = norm_type
        self.scale_grad_by_freq = scale_grad_by_freq
        self.sparse = sparse
        if _weight is None:
            self.weight = Parameter(empty(num_embeddings, embedding_dim, dtype=dtype),
                                    requires_grad=not _freeze)
            self.reset_parameters()
        else:
            if tuple(_weight.shape) != (num_embeddings, embedding_dim):
                raise ValueError("Shape of weight does not match num_embeddings and "
                                 "embedding_dim")
            self.weight = Parameter(_weight, requires_grad=not _freeze)

    def reset_parameters(self):
        init.normal_(self.weight)
        if self.padding_idx is not None:
            with no_grad():
                self.weight[self.padding_idx].zero_()

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0, scale_grad_by_freq=False, sparse=False):
        """An Embedding whose weight is (an alias of) the 2-D tensor embeddings."""
        if embeddings.ndim != 2:
            raise ValueError("Embeddings parameter is expected to be 2-dimensional")
        rows, cols = embeddings.shape
        return cls(rows, cols, padding_idx, max_norm, norm_type, scale_grad_by_freq, sparse,
                   _weight=embeddings, _freeze=freeze)

    def forward(self, input):
        return F.embedding(input, self.weight, self.padding_idx, self.max_norm,
                           self.norm_type, self.scale_grad_by_freq, self.sparse)

    def extra_repr(self):
        text = f"{self.num_embeddings}, {self.embedding_dim}"
        if self.padding_idx is not None:
            text += f", padding_idx={self.padding_idx}"
        if self.max_norm is not None:
            text += f", max_norm={self.max_norm}"
        if self.norm_type != 2:
            text += f", norm_type={self.norm_type}"
        if self.scale_grad_by_freq:
            text += ", scale_grad_by_freq=True"
        if self.sparse:
            text += ", sparse=True"
        return text


class Dropout(Module):
    """Zeroes elements with probability p in training mode (scaling the rest by 1/(1-p));
    the identity in eval mode."""

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return F.dropout(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Flatten(Module):
    """Flattens dims start_dim..end_dim into one (by default all but the batch dim)."""

    def __init__(self, start_dim=1, end_dim=-1):
        super().__init__()
        self.start_dim = start_dim
        self.end_dim = end_dim

    def forward(self, input):
        return input.flatten(self.start_dim, self.end_dim)

    def extra_repr(self):
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"
