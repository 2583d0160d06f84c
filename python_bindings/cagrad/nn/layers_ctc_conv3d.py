"""CTCLoss, Conv3d, ConvTranspose3d and AdaptiveAvgPool3d: modules over F.ctc_loss,
F.conv3d, F.conv_transpose3d and F.adaptive_avg_pool3d (nn/_ctc.py, nn/_conv3d.py),
with torch.nn's constructor arguments, attributes, parameters and initialization."""

from .._dtype import check_device
from . import functional as F
from ._adaptive_softmax import AdaptiveLogSoftmaxWithLoss
from ._conv3d import _triple
from .conv_transpose import _ConvTransposeNd
from .layers import _ConvNd
from .loss import _Loss
from .module import Module

__all__ = ["CTCLoss", "Conv3d", "ConvTranspose3d", "AdaptiveAvgPool3d",
           "AdaptiveLogSoftmaxWithLoss"]


class CTCLoss(_Loss):
    def __init__(self, blank=0, reduction="mean", zero_infinity=False):
        super().__init__(reduction=reduction)
        self.blank = blank
        self.zero_infinity = zero_infinity

    def forward(self, log_probs, targets, input_lengths, target_lengths):
        return F.ctc_loss(log_probs, targets, input_lengths, target_lengths, self.blank,
                          self.reduction, self.zero_infinity)


class Conv3d(_ConvNd):
    """weight [out_channels, in_channels/groups, kD, kH, kW], bias [out_channels]; every
    padding_mode of torch (the non-zero ones pad with F.pad first, as torch)."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        check_device(device)
        self._check_groups(in_channels, out_channels, groups)
        kernel_size = _triple("Conv3d", "kernel_size", kernel_size)
        stride = _triple("Conv3d", "stride", stride)
        dilation = _triple("Conv3d", "dilation", dilation)
        if not isinstance(padding, str):
            padding = _triple("Conv3d", "padding", padding)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    bias, padding_mode, dtype)

    def forward(self, input):
        if self.padding_mode == "zeros":
            return F.conv3d(input, self.weight, self.bias, self.stride, self.padding,
                            self.dilation, self.groups)
        input = F.pad(input, self._padding_widths(), mode=self.padding_mode)
        return F.conv3d(input, self.weight, self.bias, self.stride, 0, self.dilation,
                        self.groups)

    def _padding_widths(self):
        """F.pad's widths (last dim first); 'same' puts the odd extra one at the end."""
        widths = []
        for i in (2, 1, 0):
            if self.padding == "valid":
                widths += [0, 0]
            elif self.padding == "same":
                total = self.dilation[i] * (self.kernel_size[i] - 1)
                widths += [total // 2, total - total // 2]
            else:
                widths += [self.padding[i]] * 2
        return tuple(widths)


class ConvTranspose3d(_ConvTransposeNd):
    """weight [in_channels, out_channels/groups, kD, kH, kW], bias [out_channels]."""

    _RANK = 3

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        fn = "ConvTranspose3d"
        self._setup_transposed(in_channels, out_channels,
                               _triple(fn, "kernel_size", kernel_size),
                               _triple(fn, "stride", stride), _triple(fn, "padding", padding),
                               _triple(fn, "output_padding", output_padding), groups, bias,
                               _triple(fn, "dilation", dilation), padding_mode, dtype)

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return F.conv_transpose3d(input, self.weight, self.bias, self.stride, self.padding,
                                  output_padding, self.groups, self.dilation)


class AdaptiveAvgPool3d(Module):
    def __init__(self, output_size):
        super().__init__()
        self.output_size = output_size

    def forward(self, input):
        return F.adaptive_avg_pool3d(input, self.output_size)

    def extra_repr(self):
        return f"output_size={self.output_size}"
