"""Channel-wise and alpha dropout modules: Dropout1d, Dropout2d, Dropout3d, AlphaDropout,
FeatureAlphaDropout (nn/_dropout.py does the work). nn.Dropout lives in layers.py."""

from . import functional as F
from .module import Module


class _DropoutNd(Module):
    _function = None  # the nn.functional dropout this module applies

    def __init__(self, p=0.5, inplace=False):
        super().__init__()
        if p < 0 or p > 1:
            raise ValueError(f"dropout probability has to be between 0 and 1, but got {p}")
        self.p = p
        self.inplace = inplace

    def forward(self, input):
        return type(self)._function(input, self.p, self.training, self.inplace)

    def extra_repr(self):
        return f"p={self.p}, inplace={self.inplace}"


class Dropout1d(_DropoutNd):
    _function = staticmethod(F.dropout1d)


class Dropout2d(_DropoutNd):
    _function = staticmethod(F.dropout2d)


class Dropout3d(_DropoutNd):
    _function = staticmethod(F.dropout3d)


class AlphaDropout(_DropoutNd):
    _function = staticmethod(F.alpha_dropout)


class FeatureAlphaDropout(_DropoutNd):
    _function = staticmethod(F.feature_alpha_dropout)
