"""torch.nn modules filled in by the census (h39): AdaptiveAvgPool1d, AdaptiveMaxPool3d,
LPPool1d/2d/3d, FractionalMaxPool2d/3d, MaxUnpool3d, MultiLabelMarginLoss, NLLLoss2d,
CrossMapLRN2d, SyncBatchNorm, nn.Buffer and the missing Lazy* modules.

Each module is a thin holder of torch's attributes over a function of nn.functional.
"""

import warnings

import numpy as np

from .. import distributed
from .._creation import empty, tensor
from .._tensor import Tensor
from . import _lazy
from . import functional as F
from .layers_ctc_conv3d import Conv3d, ConvTranspose3d
from .conv_transpose import ConvTranspose1d, ConvTranspose2d
from .layers_more import _MaxUnpoolNd, _tuple
from .loss import NLLLoss, _Loss
from .module import Module
from .normalization import (BatchNorm3d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d,
                            _BatchNorm)

__all__ = ["AdaptiveAvgPool1d", "AdaptiveMaxPool3d", "LPPool1d", "LPPool2d", "LPPool3d",
           "FractionalMaxPool2d", "FractionalMaxPool3d", "MaxUnpool3d", "MultiLabelMarginLoss",
           "NLLLoss2d", "CrossMapLRN2d", "SyncBatchNorm", "Buffer", "LazyBatchNorm3d",
           "LazyConv3d", "LazyConvTranspose1d", "LazyConvTranspose2d", "LazyConvTranspose3d",
           "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


# --- pooling ---------------------------------------------------------------------------------

class AdaptiveAvgPool1d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool1d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class AdaptiveMaxPool3d(Module):
    def __init__(self, output_size, return_indices=False):
        super().__init__()
        self.output_size = output_size
        self.return_indices = return_indices

    def forward(self, input):
        return F.adaptive_max_pool3d(input, self.output_size, self.return_indices)

    def extra_repr(self):
        return f"output_size={self.output_size}"


class _LPPoolNd(Module):
    _pool = None

    def __init__(self, norm_type, kernel_size, stride=None, ceil_mode=False):
        super().__init__()
        self.norm_type = norm_type
        self.kernel_size = kernel_size
        self.stride = stride
        self.ceil_mode = ceil_mode

    def forward(self, input):
        return type(self)._pool(input, float(self.norm_type), self.kernel_size, self.stride,
                                self.ceil_mode)

    def extra_repr(self):
        return (f"norm_type={self.norm_type}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, ceil_mode={self.ceil_mode}")


class LPPool1d(_LPPoolNd):
    _pool = staticmethod(F.lp_pool1d)


class LPPool2d(_LPPoolNd):
    _pool = staticmethod(F.lp_pool2d)


class LPPool3d(_LPPoolNd):
    _pool = staticmethod(F.lp_pool3d)


class _FractionalMaxPoolNd(Module):
    _n = 2

    def __init__(self, kernel_size, output_size=None, output_ratio=None, return_indices=False,
                 _random_samples=None):
        super().__init__()
        n, name = self._n, type(self).__name__
        self.kernel_size = _tuple(kernel_size, n)
        self.return_indices = return_indices
        self.register_buffer("_random_samples", _random_samples)
        self.output_size = _tuple(output_size, n) if output_size is not None else None
        self.output_ratio = _tuple(output_ratio, n) if output_ratio is not None else None
        if output_size is None and output_ratio is None:
            raise ValueError(f"{name} requires specifying either an output size, or a pooling "
                             f"ratio")
        if output_size is not None and output_ratio is not None:
            raise ValueError("only one of output_size and output_ratio may be specified")
        if self.output_ratio is not None and not all(0 < r < 1 for r in self.output_ratio):
            raise ValueError(f"output_ratio must be between 0 and 1 (got {output_ratio})")

    def forward(self, input):
        pool = F.fractional_max_pool2d if self._n == 2 else F.fractional_max_pool3d
        return pool(input, self.kernel_size, self.output_size, self.output_ratio,
                    self.return_indices, _random_samples=self._random_samples)


class FractionalMaxPool2d(_FractionalMaxPoolNd):
    _n = 2


class FractionalMaxPool3d(_FractionalMaxPoolNd):
    _n = 3


class MaxUnpool3d(_MaxUnpoolNd):
    _n = 3

    def forward(self, input, indices, output_size=None):
        return F.max_unpool3d(input, indices, self.kernel_size, self.stride, self.padding,
                              output_size)


# --- losses and normalization ----------------------------------------------------------------

class MultiLabelMarginLoss(_Loss):
    def forward(self, input, target):
        return F.multilabel_margin_loss(input, target, reduction=self.reduction)


class NLLLoss2d(NLLLoss):
    """NLLLoss under its deprecated 2-d name (NLLLoss takes [N, C, H, W] input too)."""

    def __init__(self, weight=None, size_average=None, ignore_index=-100, reduce=None,
                 reduction="mean"):
        warnings.warn("`NLLLoss2d` has been deprecated. Please use `NLLLoss` instead as a "
                      "drop-in replacement and see https://pytorch.org/docs/main/nn.html"
                      "#torch.nn.NLLLoss for more details.", FutureWarning, stacklevel=2)
        super().__init__(weight, size_average, ignore_index, reduce, reduction)


class CrossMapLRN2d(Module):
    """Response normalisation across channels of [N, C, H, W] input (the legacy form):
    x / (k + alpha / size * sum of x^2 over a window of channels)^beta.

    The window is torch's: channels c - (size - 1) // 2 .. c + (size - 1) // 2 and, from
    channel (size - 1) // 2 + 2 on, channel 0 as well (torch's running sum never takes
    channel 0 back out); values match torch's, the gradient is that of these values."""

    def __init__(self, size, alpha=1e-4, beta=0.75, k=1):
        super().__init__()
        self.size, self.alpha, self.beta, self.k = size, alpha, beta, k

    def _window(self, channels):
        pre_pad = int((self.size - 1) / 2 + 1)
        window = np.zeros((channels, channels))
        for c in range(channels):
            window[c, max(0, c - pre_pad + 1):c + pre_pad] = 1.0
            window[c, 0] = 1.0
        return window

    def forward(self, input):
        if input.ndim != 4:
            raise ValueError(f"CrossMapLRN2d: Expected input to be 4D, got {input.ndim}D "
                             f"instead.")
        n, c, h, w = input.shape
        window = tensor(self._window(c), dtype=input.dtype)
        total = (window @ (input * input).reshape(n, c, h * w)).reshape(n, c, h, w)
        return input * (self.k + self.alpha / self.size * total).pow(-self.beta)

    def extra_repr(self):
        return f"{self.size}, alpha={self.alpha}, beta={self.beta}, k={self.k}"


class SyncBatchNorm(_BatchNorm):
    """BatchNorm over any [N, C, *] input. Without an initialised multi-process group (and
    always in eval) torch falls back to plain batch norm; cagrad has no GPU, so a
    synchronised step raises what torch raises for a CPU input."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, process_group=None, device=None, dtype=None, *,
                 bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)
        self.process_group = process_group

    def _check_input_dim(self, input):
        if input.ndim < 2:
            raise ValueError(f"expected at least 2D input (got {input.ndim}D input)")
        if input.shape[1] == 0:
            raise ValueError("SyncBatchNorm number of input channels should be non-zero")

    def forward(self, input):
        self._check_input_dim(input)
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        if use_batch and self.training and distributed.is_available() \
                and distributed.is_initialized():
            raise ValueError("SyncBatchNorm expected input tensor to be on GPU or XPU or "
                             "privateuseone")
        return super().forward(input)

    @classmethod
    def convert_sync_batchnorm(cls, module, process_group=None):
        """module with every BatchNorm*d replaced by a SyncBatchNorm sharing its
        parameters and running statistics (a BatchNorm module itself: a new one)."""
        output = module
        if isinstance(module, _BatchNorm) and not isinstance(module, _InstanceNormTypes):
            output = cls(module.num_features, module.eps, module.momentum, module.affine,
                         module.track_running_stats, process_group,
                         bias=module.bias is not None)
            if module.affine:
                output.weight = module.weight
                output.bias = module.bias
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                output._buffers[name] = module._buffers[name]
            output.training = module.training
            if hasattr(module, "qconfig"):
                output.qconfig = module.qconfig
        for name, child in module.named_children():
            output.add_module(name, cls.convert_sync_batchnorm(child, process_group))
        return output


# cagrad's InstanceNorm derives from its _BatchNorm; torch's does not, so it is not converted
_InstanceNormTypes = (InstanceNorm1d, InstanceNorm2d, InstanceNorm3d)


# --- nn.Buffer ---------------------------------------------------------------------------------

class _BufferMeta(type):
    # a Buffer is a plain tensor marked _is_buffer, as in torch: isinstance checks the mark
    def __instancecheck__(cls, instance):
        return isinstance(instance, Tensor) and getattr(instance, "_is_buffer", False)


class Buffer(metaclass=_BufferMeta):
    """nn.Buffer(data, persistent=True): assigning it to a module attribute registers a
    buffer (persistent=False keeps it out of state_dict)."""

    def __new__(cls, data=None, *, persistent=True):
        if data is None:
            data = empty(0)
        t = data.detach()
        t.requires_grad_(data.requires_grad)
        t.persistent = persistent
        t._is_buffer = True
        return t


# --- lazy modules --------------------------------------------------------------------------------

class LazyBatchNorm3d(_lazy._LazyBatchNorm, BatchNorm3d):
    """BatchNorm3d whose num_features is input.shape[1] of the first forward."""

    cls_to_become = BatchNorm3d


class _LazyInstanceNorm(_lazy._LazyBatchNorm):
    """torch's lazy instance norms keep the lazy base's defaults: affine=True and
    track_running_stats=True (unlike InstanceNorm*d's), and read num_features from
    input.shape[1] (an unbatched input's second dim: as torch)."""


class LazyInstanceNorm1d(_LazyInstanceNorm, InstanceNorm1d):
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyInstanceNorm, InstanceNorm2d):
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyInstanceNorm, InstanceNorm3d):
    cls_to_become = InstanceNorm3d


class LazyConv3d(_lazy._LazyConv, Conv3d):
    """Conv3d whose in_channels is the first input's channel count."""

    cls_to_become = Conv3d
    _spatial = 3

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        self._conv_init(out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, dtype)


class _LazyConvTranspose(_lazy._LazyConv):
    """The transposed convolutions' argument order; weight [in, out / groups, *k]."""

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0,
                 groups=1, bias=True, dilation=1, padding_mode="zeros", device=None,
                 dtype=None):
        Module.__init__(self)
        plain = self.cls_to_become(groups, out_channels, kernel_size, stride, padding,
                                   output_padding, groups, bias, dilation, padding_mode,
                                   dtype=dtype)
        _lazy._copy_attributes(plain, self)
        self.in_channels = 0
        self.weight = _lazy.UninitializedParameter(dtype=dtype)
        if bias:
            self.bias = _lazy.UninitializedParameter(dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self._lazy_init((out_channels, kernel_size, stride, padding, output_padding, groups,
                         bias, dilation, padding_mode), dict(dtype=dtype))

    def _size_from_state(self, name, shape):
        return shape[0] if name == "weight" else None


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    cls_to_become = ConvTranspose1d
    _spatial = 1


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    cls_to_become = ConvTranspose2d
    _spatial = 2


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    cls_to_become = ConvTranspose3d
    _spatial = 3
