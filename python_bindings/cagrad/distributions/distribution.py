"""Distribution: the base class of cagrad.distributions (torch.distributions.Distribution).

Shapes follow torch: a sample has shape sample_shape + batch_shape + event_shape, and
log_prob / entropy give one value per batch entry. Validation (on by default, as torch
under `python` without -O) checks parameters at construction and values in log_prob, and
raises torch's ValueErrors with torch's messages.
"""

import warnings

import cagrad

from . import constraints
from .utils import _size_text, _text

__all__ = ["Distribution"]


class Distribution:
    """A probability distribution with batch_shape and event_shape."""

    has_rsample = False
    has_enumerate_support = False
    _validate_args = __debug__

    @staticmethod
    def set_default_validate_args(value):
        """Turn argument validation on or off for every distribution made later (and
        for every existing one that did not set validate_args)."""
        if value not in [True, False]:
            raise ValueError
        Distribution._validate_args = value

    def __init__(self, batch_shape=(), event_shape=(), validate_args=None):
        self._batch_shape = cagrad.Size(batch_shape)
        self._event_shape = cagrad.Size(event_shape)
        if validate_args is not None:
            self._validate_args = validate_args
        if self._validate_args:
            self._check_parameters()
        super().__init__()

    def _check_parameters(self):
        try:
            arg_constraints = self.arg_constraints
        except NotImplementedError:
            arg_constraints = {}
            warnings.warn(f"{self.__class__} does not define `arg_constraints`. Please set "
                          "`arg_constraints = {}` or initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=3)
        for name, constraint in arg_constraints.items():
            if constraints.is_dependent(constraint):
                continue  # depends on other parameters: checked where it is used
            if name not in self.__dict__ and _is_lazy(type(self), name):
                continue  # the parameterisation not given (logits for probs=...)
            value = getattr(self, name)
            if not bool(constraint.check(value).all()):
                raise ValueError(
                    f"Expected parameter {name} ({type(value).__name__} of shape "
                    f"{tuple(value.shape)}) of distribution {self!r} to satisfy the "
                    f"constraint {constraint!r}, but found invalid values:\n{_text(value)}")

    # ------------------------------------------------------------------------ shapes
    @property
    def batch_shape(self):
        return self._batch_shape

    @property
    def event_shape(self):
        return self._event_shape

    def _extended_shape(self, sample_shape=()):
        return cagrad.Size(tuple(sample_shape)) + self._batch_shape + self._event_shape

    def expand(self, batch_shape, _instance=None):
        raise NotImplementedError

    def _get_checked_instance(self, cls, _instance=None):
        if _instance is None and type(self).__init__ != cls.__init__:
            raise NotImplementedError(
                f"Subclass {self.__class__.__name__} of {cls.__name__} that defines a "
                "custom __init__ method must also define a custom .expand() method.")
        return self.__new__(type(self)) if _instance is None else _instance

    def _expand_into(self, new, batch_shape, names, event_dims=0):
        """new: self with the named parameters expanded to batch_shape (plus their last
        event_dims dimensions), unvalidated again, as torch's expand()."""
        batch_shape = cagrad.Size(tuple(batch_shape))
        for name in names:
            if name in self.__dict__:
                value = self.__dict__[name]
                tail = tuple(value.shape[value.dim() - event_dims:]) if event_dims else ()
                setattr(new, name, value.expand(tuple(batch_shape) + tail))
        Distribution.__init__(new, batch_shape, self._event_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    # ------------------------------------------------------------------------ interface
    @property
    def arg_constraints(self):
        raise NotImplementedError

    @property
    def support(self):
        raise NotImplementedError

    @property
    def mean(self):
        raise NotImplementedError

    @property
    def mode(self):
        raise NotImplementedError(f"{self.__class__} does not implement mode")

    @property
    def variance(self):
        raise NotImplementedError

    @property
    def stddev(self):
        return self.variance.sqrt()

    def sample(self, sample_shape=()):
        """A draw without gradients (rsample under no_grad, where there is one)."""
        with cagrad.no_grad():
            return self.rsample(sample_shape)

    def rsample(self, sample_shape=()):
        raise NotImplementedError

    def sample_n(self, n):
        warnings.warn("sample_n will be deprecated. Use .sample((n,)) instead", UserWarning,
                      stacklevel=2)
        return self.sample(cagrad.Size((n,)))

    def log_prob(self, value):
        raise NotImplementedError

    def cdf(self, value):
        raise NotImplementedError

    def icdf(self, value):
        raise NotImplementedError

    def enumerate_support(self, expand=True):
        raise NotImplementedError

    def entropy(self):
        raise NotImplementedError

    def perplexity(self):
        return cagrad.exp(self.entropy())

    # ------------------------------------------------------------------------ validation
    def _validate_sample(self, value):
        """value's shape fits event_shape and broadcasts with batch_shape, and its
        entries lie in the support (torch's ValueErrors otherwise)."""
        if not cagrad.is_tensor(value):
            raise ValueError("The value argument to log_prob must be a Tensor")
        shape = tuple(value.shape)
        event = tuple(self._event_shape)
        if shape[len(shape) - len(event):] != event:
            raise ValueError("The right-most size of value must match event_shape: "
                             f"{_size_text(shape)} vs {_size_text(event)}.")
        expected = tuple(self._batch_shape) + event
        for have, want in zip(reversed(shape), reversed(expected)):
            if have != 1 and want != 1 and have != want:
                raise ValueError("Value is not broadcastable with batch_shape+event_shape: "
                                 f"{_size_text(shape)} vs {_size_text(expected)}.")
        try:
            support = self.support
        except NotImplementedError:
            warnings.warn(f"{self.__class__} does not define `support` to enable sample "
                          "validation. Please initialize the distribution with "
                          "`validate_args=False` to turn off validation.", stacklevel=3)
            return
        if not bool(support.check(value).all()):
            raise ValueError(
                f"Expected value argument ({type(value).__name__} of shape {shape}) to be "
                f"within the support ({support!r}) of the distribution {self!r}, but found "
                f"invalid values:\n{_text(value)}")

    def __repr__(self):
        names = [k for k in self.arg_constraints if k in self.__dict__]
        parts = []
        for name in names:
            value = self.__dict__[name]
            shown = _text(value) if value.numel() == 1 else _size_text(value.shape)
            parts.append(f"{name}: {shown}")
        return f"{type(self).__name__}({', '.join(parts)})"


def _is_lazy(cls, name):
    from .utils import lazy_property
    return isinstance(getattr(cls, name, None), lazy_property)
