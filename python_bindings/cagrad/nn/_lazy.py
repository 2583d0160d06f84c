"""Lazy modules: LazyLinear, LazyConv1d/2d, LazyBatchNorm1d/2d (torch.nn's names).

A lazy module is built without its input size; its parameters are UninitializedParameter
(and its running statistics UninitializedBuffer) until the first forward, which reads the
size from the input, creates the parameters as the plain module would (same shapes, same
initialisation) and turns the module into that plain class (LazyLinear becomes Linear),
as in PyTorch. load_state_dict() into a lazy module takes the sizes from the checkpoint.

One difference: PyTorch materialises the placeholder objects in place; cagrad cannot
change a tensor's shape in place, so the module gets new Parameter objects. Build the
optimizer after the first forward (PyTorch recommends that too), see docs/python-api.md.
"""

from .. import _creation
from .._tensor import Tensor
from .conv import Conv1d
from .layers import Conv2d, Linear
from .module import Module
from .normalization import BatchNorm1d, BatchNorm2d
from .parameter import Parameter

__all__ = ["LazyBatchNorm1d", "LazyBatchNorm2d", "LazyConv1d", "LazyConv2d", "LazyLinear",
           "LazyModuleMixin", "UninitializedBuffer", "UninitializedParameter"]

_SHAPE_ERROR = ("Can't access the shape of an uninitialized parameter or buffer. This error "
                "usually happens in `load_state_dict` when trying to load an uninitialized "
                "parameter into an initialized one. Call `forward` to initialize the "
                "parameters before accessing their attributes.")


class _Uninitialized:
    """What the placeholders share: no shape, a short repr, and detach() is itself (so a
    lazy module's state_dict() holds the placeholders, as torch's does)."""

    @property
    def shape(self):
        raise RuntimeError(_SHAPE_ERROR)

    def size(self, dim=None):
        raise RuntimeError(_SHAPE_ERROR)

    def detach(self):
        return self

    def share_memory_(self):
        raise RuntimeError("Can't share memory on an uninitialized parameter or buffer. Call "
                           "`forward` to initialize the parameters before calling "
                           "`module.share_memory()`.")

    def materialize(self, shape, device=None, dtype=None):
        raise NotImplementedError(
            f"{type(self).__name__}.materialize() is not supported by cagrad: a tensor's "
            "shape cannot change in place; lazy modules create new parameters on their first "
            "forward instead (see docs/python-api.md, Everyday names (wave 3))")

    def __repr__(self):
        return f"<{type(self).__name__}>"


class UninitializedParameter(_Uninitialized, Parameter):
    """A parameter whose shape is not known yet (a lazy module's, until its first forward)."""

    def __new__(cls, requires_grad=True, device=None, dtype=None):
        return super().__new__(cls, _creation.empty(0, dtype=dtype), requires_grad)


class UninitializedBuffer(_Uninitialized, Tensor):
    """A buffer whose shape is not known yet."""

    def __new__(cls, requires_grad=False, device=None, dtype=None):
        buf = Tensor.__new__(cls, _creation.empty(0, dtype=dtype))
        buf.requires_grad = requires_grad
        return buf


def is_lazy(value):
    return isinstance(value, _Uninitialized)


_MODULE_STATE = frozenset(vars(Module()))  # training, the registries, the hook dicts


def _copy_attributes(source, target):
    """source's own attributes (sizes, kernel_size, padding, ...) onto target, but not
    the Module machinery (registries, hooks, training flag)."""
    for name, value in vars(source).items():
        if name not in _MODULE_STATE:
            object.__setattr__(target, name, value)


class LazyModuleMixin:
    """The lazy behaviour. A subclass sets cls_to_become and defines _plain_module(size)
    (the plain module built for an input size) and _size_of(input) / _size_from_state."""

    cls_to_become = None

    def _lazy_init(self, args, kwargs):
        object.__setattr__(self, "_lazy_args", (args, kwargs))
        handle = self.register_forward_pre_hook(self._infer_parameters)
        object.__setattr__(self, "_initialize_hook", handle)

    def has_uninitialized_params(self):
        return any(is_lazy(v) for v in (*self._parameters.values(), *self._buffers.values()))

    def initialize_parameters(self, input):
        if self.has_uninitialized_params():
            self._materialize(self._size_of(input))

    def _materialize(self, size):
        # build the plain module for this size and take over its members, keeping this
        # object (its hooks, training flag and place in the parent)
        args, kwargs = self._lazy_args
        plain = self._plain_module(size, *args, **kwargs)
        for name in list(self._parameters):
            self._parameters[name] = plain._parameters[name]
        for name in list(self._buffers):
            self._buffers[name] = plain._buffers[name]
        _copy_attributes(plain, self)

    def _infer_parameters(self, module, args):
        self.initialize_parameters(*args)
        if self.has_uninitialized_params():
            raise RuntimeError(f"module {self._get_name()} has not been fully initialized")
        self._initialize_hook.remove()
        object.__delattr__(self, "_initialize_hook")
        object.__delattr__(self, "_lazy_args")
        self.__class__ = self.cls_to_become

    def _load_local_state(self, state_dict, prefix, missing, errors):
        # a checkpoint of the plain module gives the sizes: materialise, then load
        if self.has_uninitialized_params():
            for name, value in self._parameters.items():
                loaded = state_dict.get(prefix + name)
                if is_lazy(value) and loaded is not None and not is_lazy(loaded):
                    self._materialize(self._size_from_state(name, tuple(loaded.shape)))
                    break
        if self.has_uninitialized_params():
            return  # nothing to load into (torch also keeps placeholders here)
        super()._load_local_state(state_dict, prefix, missing, errors)


class LazyLinear(LazyModuleMixin, Linear):
    """Linear whose in_features is input.shape[-1] of the first forward."""

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        Module.__init__(self)
        self.in_features, self.out_features = 0, out_features
        self.weight = UninitializedParameter(dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self._lazy_init((out_features,), dict(bias=bias, dtype=dtype))

    def reset_parameters(self):
        if not self.has_uninitialized_params():
            super().reset_parameters()

    @staticmethod
    def _plain_module(size, *args, **kwargs):
        return Linear(size, *args, **kwargs)

    @staticmethod
    def _size_of(input):
        return input.shape[-1]

    @staticmethod
    def _size_from_state(name, shape):
        return shape[1] if name == "weight" else None


class _LazyConv(LazyModuleMixin):
    _spatial = 1

    def _conv_init(self, out_channels, kernel_size, stride, padding, dilation, groups, bias,
                   padding_mode, dtype):
        Module.__init__(self)
        plain = self.cls_to_become(groups, out_channels, kernel_size, stride, padding,
                                   dilation, groups, bias, padding_mode, dtype=dtype)
        # the plain attributes (kernel_size as a tuple, padding, ...) with in_channels 0
        _copy_attributes(plain, self)
        self.in_channels = 0
        self.weight = UninitializedParameter(dtype=dtype)
        if bias:
            self.bias = UninitializedParameter(dtype=dtype)
        else:
            self.register_parameter("bias", None)
        self._lazy_init((out_channels, kernel_size, stride, padding, dilation, groups, bias,
                         padding_mode), dict(dtype=dtype))

    def _plain_module(self, size, *args, **kwargs):
        return self.cls_to_become(size, *args, **kwargs)

    def _size_of(self, input):
        no_batch = self._spatial + 1
        if input.dim() not in (no_batch, no_batch + 1):
            raise RuntimeError(
                f"Expected {no_batch}D (unbatched) or {no_batch + 1}D (batched) input to "
                f"{type(self).__name__}, but got input of size: {input.shape}")
        size = input.shape[1] if input.dim() == no_batch + 1 else input.shape[0]
        if size % self.groups != 0:
            raise ValueError("in_channels must be divisible by groups")
        return size

    def _size_from_state(self, name, shape):
        return shape[1] * self.groups if name == "weight" else None


class LazyConv1d(_LazyConv, Conv1d):
    """Conv1d whose in_channels is the first input's channel count."""

    cls_to_become = Conv1d

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        self._conv_init(out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, dtype)


class LazyConv2d(_LazyConv, Conv2d):
    """Conv2d whose in_channels is the first input's channel count."""

    cls_to_become = Conv2d
    _spatial = 2

    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, padding_mode="zeros", device=None, dtype=None):
        self._conv_init(out_channels, kernel_size, stride, padding, dilation, groups, bias,
                        padding_mode, dtype)


class _LazyBatchNorm(LazyModuleMixin):
    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True,
                 device=None, dtype=None):
        Module.__init__(self)
        self.num_features, self.eps, self.momentum = 0, eps, momentum
        self.affine, self.track_running_stats = affine, track_running_stats
        if affine:
            self.weight = UninitializedParameter(dtype=dtype)
            self.bias = UninitializedParameter(dtype=dtype)
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        if track_running_stats:
            self.register_buffer("running_mean", UninitializedBuffer(dtype=dtype))
            self.register_buffer("running_var", UninitializedBuffer(dtype=dtype))
            self.register_buffer("num_batches_tracked", _creation.tensor(0))
        else:
            for name in ("running_mean", "running_var", "num_batches_tracked"):
                self.register_buffer(name, None)
        self._lazy_init((), dict(eps=eps, momentum=momentum, affine=affine,
                                 track_running_stats=track_running_stats, dtype=dtype))

    def reset_parameters(self):
        if not self.has_uninitialized_params():
            super().reset_parameters()

    def reset_running_stats(self):
        if not self.has_uninitialized_params():
            super().reset_running_stats()

    def _plain_module(self, size, **kwargs):
        plain = self.cls_to_become(size, **kwargs)
        # the step count survives initialisation, as torch keeps the buffer
        if self.num_batches_tracked is not None:
            plain._buffers["num_batches_tracked"] = self.num_batches_tracked
        return plain

    @staticmethod
    def _size_of(input):
        return input.shape[1]

    @staticmethod
    def _size_from_state(name, shape):
        return shape[0]

    def _load_local_state(self, state_dict, prefix, missing, errors):
        if self.has_uninitialized_params() and not self.affine:
            # no parameters: the running statistics carry the size
            loaded = state_dict.get(prefix + "running_mean")
            if loaded is not None and not is_lazy(loaded):
                self._materialize(tuple(loaded.shape)[0])
        super()._load_local_state(state_dict, prefix, missing, errors)


class LazyBatchNorm1d(_LazyBatchNorm, BatchNorm1d):
    """BatchNorm1d whose num_features is input.shape[1] of the first forward."""

    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyBatchNorm, BatchNorm2d):
    """BatchNorm2d whose num_features is input.shape[1] of the first forward."""

    cls_to_become = BatchNorm2d
