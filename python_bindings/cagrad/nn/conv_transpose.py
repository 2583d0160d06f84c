"""ConvTranspose1d / ConvTranspose2d: transposed-convolution layers over
F.conv_transpose1d / F.conv_transpose2d, with PyTorch's weight layout
[in_channels, out_channels/groups, *kernel_size], initialization, repr and forward's
output_size argument."""

import math

from .._dtype import check_device
from . import functional as F
from .layers import _ConvNd, _default_init

__all__ = ["ConvTranspose1d", "ConvTranspose2d"]


def _single(name, value):
    return (F._conv_pad._single(name, value),)


class _ConvTransposeNd(_ConvNd):
    """What ConvTranspose1d and ConvTranspose2d share: parameters, init and the
    output_padding an output_size asks for (the repr is _ConvNd's)."""

    _RANK = 0

    def _setup_transposed(self, in_channels, out_channels, kernel_size, stride, padding,
                          output_padding, groups, bias, dilation, padding_mode, dtype):
        if padding_mode != "zeros":
            raise ValueError(f'Only "zeros" padding mode is supported for '
                             f"{type(self).__name__}")
        self._check_groups(in_channels, out_channels, groups)
        self._set_fields(in_channels, out_channels, kernel_size, stride, padding, dilation,
                         True, output_padding, groups, bias, padding_mode, dtype)

    def reset_parameters(self):
        # PyTorch's fan_in of this weight layout: its dim 1 (out/groups) times the kernel
        _default_init(self.weight, self.bias,
                      self.weight.shape[1] * math.prod(self.kernel_size))

    def _output_padding(self, input, output_size):
        if output_size is None:
            return self.output_padding
        rank = self._RANK
        outer = 2 if input.ndim == rank + 2 else 1
        if len(output_size) == outer + rank:
            output_size = output_size[outer:]
        if len(output_size) != rank:
            raise ValueError(f"ConvTranspose{rank}D: for {input.ndim}D input, output_size "
                             f"must have {rank} or {outer + rank} elements (got "
                             f"{len(output_size)})")
        spatial = input.shape[outer:]
        smallest = [(n - 1) * s - 2 * p + d * (k - 1) + 1 for n, s, p, d, k in
                    zip(spatial, self.stride, self.padding, self.dilation, self.kernel_size)]
        largest = [m + s - 1 for m, s in zip(smallest, self.stride)]
        for size, low, high in zip(output_size, smallest, largest):
            if size < low or size > high:
                raise ValueError(f"requested an output size of {output_size}, but valid sizes "
                                 f"range from {smallest} to {largest} (for an input of "
                                 f"{input.shape[outer:]})")
        return tuple(size - low for size, low in zip(output_size, smallest))


class ConvTranspose1d(_ConvTransposeNd):
    """weight [in_channels, out_channels/groups, kernel_size], bias [out_channels]."""

    _RANK = 1

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        self._setup_transposed(in_channels, out_channels, _single("kernel_size", kernel_size),
                               _single("stride", stride), _single("padding", padding),
                               _single("output_padding", output_padding), groups, bias,
                               _single("dilation", dilation), padding_mode, dtype)

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return F.conv_transpose1d(input, self.weight, self.bias, self.stride[0],
                                  self.padding[0], output_padding[0], self.groups,
                                  self.dilation[0])


class ConvTranspose2d(_ConvTransposeNd):
    """weight [in_channels, out_channels/groups, kH, kW], bias [out_channels]."""

    _RANK = 2

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0,
                 output_padding=0, groups=1, bias=True, dilation=1, padding_mode="zeros",
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        self._setup_transposed(in_channels, out_channels, F._pair("kernel_size", kernel_size),
                               F._pair("stride", stride), F._pair("padding", padding),
                               F._pair("output_padding", output_padding), groups, bias,
                               F._pair("dilation", dilation), padding_mode, dtype)

    def forward(self, input, output_size=None):
        output_padding = self._output_padding(input, output_size)
        return F.conv_transpose2d(input, self.weight, self.bias, self.stride, self.padding,
                                  output_padding, self.groups, self.dilation)

