"""Conv1d: a 1-D convolution layer over F.conv1d (conv2d on a height-1 image); padding
modes other than 'zeros' pad with F.pad first, as PyTorch does."""

import math

from .._creation import empty
from .._dtype import check_device
from . import functional as F
from .layers import _default_init
from .module import Module
from .parameter import Parameter


def _single(name, value):
    return (F._conv_pad._single(name, value),)


class Conv1d(Module):
    """weight [out_channels, in_channels/groups, kernel_size], bias [out_channels]."""

    _PADDING_MODES = ("zeros", "reflect", "replicate", "circular")

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, padding_mode="zeros", device=None, dtype=None):
        super().__init__()
        check_device(device)
        _check_groups(in_channels, out_channels, groups)
        self.kernel_size = _single("kernel_size", kernel_size)
        self.stride = _single("stride", stride)
        self.dilation = _single("dilation", dilation)
        self.padding = _padding(padding, self.stride)
        _check_padding_mode(padding_mode)
        self.in_channels = in_channels
        self.out_channels = out_channels
        self.transposed = False
        self.output_padding = (0,)
        self.groups = groups
        self.padding_mode = padding_mode
        self.weight = Parameter(empty(out_channels, in_channels // groups, *self.kernel_size,
                                      dtype=dtype))
        if bias:
            self.bias = Parameter(empty(out_channels, dtype=dtype))
        else:
            self.register_parameter("bias", None)
        self.reset_parameters()

    def reset_parameters(self):
        _default_init(self.weight, self.bias,
                      self.in_channels // self.groups * math.prod(self.kernel_size))

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

    def extra_repr(self):
        text = (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}")
        if self.padding != (0,):
            text += f", padding={self.padding}"
        if self.dilation != (1,):
            text += f", dilation={self.dilation}"
        if self.groups != 1:
            text += f", groups={self.groups}"
        if self.bias is None:
            text += ", bias=False"
        if self.padding_mode != "zeros":
            text += f", padding_mode={self.padding_mode}"
        return text


def _check_groups(in_channels, out_channels, groups):
    if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0:
        raise ValueError("groups must be a positive integer")
    if in_channels % groups != 0:
        raise ValueError("in_channels must be divisible by groups")
    if out_channels % groups != 0:
        raise ValueError("out_channels must be divisible by groups")


def _padding(padding, stride):
    if not isinstance(padding, str):
        return _single("padding", padding)
    if padding not in ("same", "valid"):
        raise ValueError(f"Invalid padding string {padding!r}, should be one of "
                         f"{{'valid', 'same'}}")
    if padding == "same" and stride != (1,):
        raise ValueError("padding='same' is not supported for strided convolutions")
    return padding


def _check_padding_mode(padding_mode):
    if padding_mode not in Conv1d._PADDING_MODES:
        raise ValueError(f"padding_mode must be one of {set(Conv1d._PADDING_MODES)}, but got "
                         f"padding_mode='{padding_mode}'")
