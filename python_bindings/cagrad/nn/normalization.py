"""Normalization layers: BatchNorm1d/2d/3d, InstanceNorm1d/2d/3d, GroupNorm and RMSNorm
(nn/_norm.py does the math). Parameters, buffers, their names, state_dict keys and train/eval behaviour are
PyTorch's."""

import warnings

from .._creation import empty, ones, tensor, zeros
from .._dtype import check_device, int64
from .._grad_mode import no_grad
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter


def _affine_bias(module, bias, values):
    """Register the affine bias (bias=True) or None (bias=False, as PyTorch 2.13)."""
    if bias:
        module.bias = Parameter(values)
    else:
        module.register_parameter("bias", None)


class _BatchNorm(Module):
    """Shared by BatchNorm1d/2d/3d, which differ only in the input dims they accept."""

    _dims = ()  # the accepted input.ndim values
    _expected = ""  # how the error message names them

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True,
                 track_running_stats=True, device=None, dtype=None, *, bias=True):
        super().__init__()
        check_device(device)
        self.num_features = num_features
        self.eps = eps
        self.momentum = momentum
        self.affine = affine
        self.track_running_stats = track_running_stats
        if affine:
            self.weight = Parameter(empty(num_features, dtype=dtype))
            _affine_bias(self, bias, empty(num_features, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", zeros(num_features, dtype=dtype))
            self.register_buffer("running_var", ones(num_features, dtype=dtype))
            self.register_buffer("num_batches_tracked", tensor(0, dtype=int64))
        else:
            self.register_buffer("running_mean", None)
            self.register_buffer("running_var", None)
            self.register_buffer("num_batches_tracked", None)
        self.reset_parameters()

    def reset_running_stats(self):
        if self.track_running_stats:
            with no_grad():
                self.running_mean.zero_()
                self.running_var.fill_(1)
                self.num_batches_tracked.zero_()

    def reset_parameters(self):
        self.reset_running_stats()
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def _check_input_dim(self, input):
        if input.ndim not in self._dims:
            raise ValueError(f"expected {self._expected} input (got {input.ndim}D input)")

    def _average_factor(self):
        """The momentum of this step's running-statistics update; with momentum=None, a
        cumulative average (1 / number of batches seen)."""
        if not (self.training and self.track_running_stats):
            return 0.0 if self.momentum is None else self.momentum
        if self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked.add_(1)
            if self.momentum is None:
                # the count only scales the no-grad running update: no graph break
                return 1.0 / self.num_batches_tracked._item()
        return 0.0 if self.momentum is None else self.momentum

    def forward(self, input):
        self._check_input_dim(input)
        factor = self._average_factor()
        # batch statistics in training, and in eval when there are no running ones
        use_batch = self.training or (self.running_mean is None and self.running_var is None)
        # running statistics are updated only when they are tracked and we train
        update = not self.training or self.track_running_stats
        return F.batch_norm(input, self.running_mean if update else None,
                            self.running_var if update else None, self.weight, self.bias,
                            use_batch, factor, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.affine}, bias={self.bias is not None}, "
                f"track_running_stats={self.track_running_stats}")


class BatchNorm1d(_BatchNorm):
    """Batch normalization over [N, C] or [N, C, L] input."""

    _dims = (2, 3)
    _expected = "2D or 3D"


class BatchNorm2d(_BatchNorm):
    """Batch normalization over [N, C, H, W] input."""

    _dims = (4,)
    _expected = "4D"


class BatchNorm3d(_BatchNorm):
    """Batch normalization over [N, C, D, H, W] input."""

    _dims = (5,)
    _expected = "5D"


class _InstanceNorm(_BatchNorm):
    """Shared by InstanceNorm1d/2d/3d: no affine and no running statistics by default;
    an input with one dim fewer is a single unbatched sample."""

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=False,
                 track_running_stats=False, device=None, dtype=None, *, bias=True):
        super().__init__(num_features, eps, momentum, affine, track_running_stats, device,
                         dtype, bias=bias)

    def forward(self, input):
        self._check_input_dim(input)
        unbatched = self._dims[0]
        feature_dim = input.ndim - unbatched
        if input.shape[feature_dim] != self.num_features:
            if self.affine:
                raise ValueError(f"expected input's size at dim={feature_dim} to match "
                                 f"num_features ({self.num_features}), but got: "
                                 f"{input.shape[feature_dim]}.")
            warnings.warn(f"input's size at dim={feature_dim} does not match num_features. "
                          f"You can silence this warning by not passing in num_features, "
                          f"which is not used because affine=False", stacklevel=2)
        if input.ndim == unbatched:
            return self._normalize(input.unsqueeze(0)).squeeze(0)
        return self._normalize(input)

    def _normalize(self, input):
        # unlike BatchNorm, momentum=None means no update and the counter stays put
        return F.instance_norm(input, self.running_mean, self.running_var, self.weight,
                               self.bias, self.training or not self.track_running_stats,
                               0.0 if self.momentum is None else self.momentum, self.eps)


class InstanceNorm1d(_InstanceNorm):
    """Instance normalization over [N, C, L] or unbatched [C, L] input."""

    _dims = (2, 3)
    _expected = "2D or 3D"


class InstanceNorm2d(_InstanceNorm):
    """Instance normalization over [N, C, H, W] or unbatched [C, H, W] input."""

    _dims = (3, 4)
    _expected = "3D or 4D"


class InstanceNorm3d(_InstanceNorm):
    """Instance normalization over [N, C, D, H, W] or unbatched [C, D, H, W] input."""

    _dims = (4, 5)
    _expected = "4D or 5D"


class GroupNorm(Module):
    """Normalizes [N, C, *] input over groups of C/num_groups channels."""

    def __init__(self, num_groups, num_channels, eps=1e-5, affine=True, device=None,
                 dtype=None, *, bias=True):
        super().__init__()
        check_device(device)
        if num_channels % num_groups != 0:
            raise ValueError(f"num_channels ({num_channels}) must be divisible by num_groups "
                             f"({num_groups})")
        self.num_groups = num_groups
        self.num_channels = num_channels
        self.eps = eps
        self.affine = affine
        if affine:
            self.weight = Parameter(ones(num_channels, dtype=dtype))
            _affine_bias(self, bias, zeros(num_channels, dtype=dtype))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self):
        if self.affine:
            init.ones_(self.weight)
            if self.bias is not None:
                init.zeros_(self.bias)

    def forward(self, input):
        return F.group_norm(input, self.num_groups, self.weight, self.bias, self.eps)

    def extra_repr(self):
        return (f"{self.num_groups}, {self.num_channels}, eps={self.eps}, affine={self.affine}, "
                f"bias={self.bias is not None}")


class RMSNorm(Module):
    """Scales the trailing normalized_shape dims by their root mean square."""

    def __init__(self, normalized_shape, eps=None, elementwise_affine=True, device=None,
                 dtype=None):
        super().__init__()
        check_device(device)
        if isinstance(normalized_shape, int):
            normalized_shape = (normalized_shape,)
        self.normalized_shape = tuple(normalized_shape)
        self.eps = eps
        self.elementwise_affine = elementwise_affine
        if elementwise_affine:
            self.weight = Parameter(ones(self.normalized_shape, dtype=dtype))
        else:
            self.register_parameter("weight", None)

    def reset_parameters(self):
        if self.elementwise_affine:
            init.ones_(self.weight)

    def forward(self, x):
        return F.rms_norm(x, self.normalized_shape, self.weight, self.eps)

    def extra_repr(self):
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")
