"""Conv1d: a 1-D convolution layer over F.conv1d (conv2d on a height-1 image); padding
modes other than 'zeros' pad with F.pad first, as PyTorch does."""


from .._dtype import check_device
from . import functional as F
from .layers import _ConvNd


def _single(name, value):
    return (F._conv_pad._single(name, value),)


class Conv1d(_ConvNd):
    """weight [out_channels, in_channels/groups, kernel_size], bias [out_channels]."""

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        check_device(device)
        self._check_groups(in_channels, out_channels, groups)
        kernel_size = _single("kernel_size", kernel_size)
        stride = _single("stride", stride)
        dilation = _single("dilation", dilation)
        if not isinstance(padding, str):
            padding = _single("padding", padding)
        self._setup(in_channels, out_channels, kernel_size, stride, padding, dilation, groups,
                    bias, padding_mode, dtype)

    def forward(self, input):
        padding = self.padding if isinstance(self.padding, str) else self.padding[0]
        if self.padding_mode != "zeros":
            input = F.pad(input, self._padding_widths(), mode=self.padding_mode)
            padding = 0
        return F.conv1d(input, self.weight, self.bias, self.stride[0], padding,
                        self.dilation[0], self.groups)

    def _padding_widths(self):
        """(before, after) for F.pad; 'same' puts the odd extra one at the end."""
        if self.padding == "valid":
            return (0, 0)
        if self.padding == "same":
            total = self.dilation[0] * (self.kernel_size[0] - 1)
            return (total // 2, total - total // 2)
        return (self.padding[0], self.padding[0])
