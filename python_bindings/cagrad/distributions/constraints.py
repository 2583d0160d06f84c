"""Constraints: the sets a distribution's parameters and values must lie in.

`check(value)` gives a bool tensor, one entry per event (of `event_dim` dimensions); the
reprs are torch's, since they appear in the validation messages. Only the constraints
that the distributions of this package use are here (see docs/python-api.md).
"""

from .utils import _text

__all__ = ["Constraint", "boolean", "dependent", "dependent_property", "greater_than",
           "half_open_interval", "independent", "integer_interval", "interval",
           "is_dependent", "less_than", "lower_cholesky", "nonnegative", "one_hot",
           "positive", "positive_definite", "real", "real_vector", "simplex",
           "unit_interval"]


class Constraint:
    """A region of values; subclasses define check(value)."""

    is_discrete = False
    event_dim = 0

    def check(self, value):
        raise NotImplementedError

    def __repr__(self):
        return type(self).__name__.lstrip("_") + "()"


class _Dependent(Constraint):
    """A constraint that depends on other parameters, so cannot be checked on its own."""

    def __init__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        self._is_discrete = is_discrete
        self._event_dim = event_dim

    @property
    def is_discrete(self):
        if self._is_discrete is NotImplemented:
            raise NotImplementedError(".is_discrete cannot be determined statically")
        return self._is_discrete

    @property
    def event_dim(self):
        if self._event_dim is NotImplemented:
            raise NotImplementedError(".event_dim cannot be determined statically")
        return self._event_dim

    def __call__(self, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        is_discrete = self._is_discrete if is_discrete is NotImplemented else is_discrete
        event_dim = self._event_dim if event_dim is NotImplemented else event_dim
        return _Dependent(is_discrete=is_discrete, event_dim=event_dim)

    def check(self, value):
        raise ValueError("Cannot determine validity of dependent constraint")


def is_dependent(constraint):
    return isinstance(constraint, _Dependent)


class dependent_property(property, _Dependent):  # noqa: N801 (torch's name)
    """A property whose value is a constraint built from the instance's parameters (a
    Uniform's support); on the class it reads as a dependent constraint."""

    def __init__(self, fn=None, *, is_discrete=NotImplemented, event_dim=NotImplemented):
        property.__init__(self, fn)
        _Dependent.__init__(self, is_discrete=is_discrete, event_dim=event_dim)

    def __call__(self, fn):
        return dependent_property(fn, is_discrete=self._is_discrete,
                                  event_dim=self._event_dim)


class _Boolean(Constraint):
    is_discrete = True

    def check(self, value):
        return (value == 0) | (value == 1)


class _OneHot(Constraint):
    is_discrete = True
    event_dim = 1

    def check(self, value):
        zero_or_one = ((value == 0) | (value == 1)).all(-1)
        return zero_or_one & (value.sum(-1) == 1)


class _IntegerInterval(Constraint):
    is_discrete = True

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return _whole(value) & (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self):
        return (f"IntegerInterval(lower_bound={_text(self.lower_bound)}, "
                f"upper_bound={_text(self.upper_bound)})")


def _whole(value):
    """value % 1 == 0, entrywise. cagrad's remainder takes floats only, and an integer
    tensor is whole throughout."""
    if value.is_floating_point():
        return value % 1 == 0
    return value == value


class _Real(Constraint):
    def check(self, value):
        return value == value  # NaN is the one real-typed value that is not a real


class _GreaterThan(Constraint):
    def __init__(self, lower_bound):
        self.lower_bound = lower_bound

    def check(self, value):
        return value > self.lower_bound

    def __repr__(self):
        return f"GreaterThan(lower_bound={_text(self.lower_bound)})"


class _LessThan(Constraint):
    def __init__(self, upper_bound):
        self.upper_bound = upper_bound

    def check(self, value):
        return value < self.upper_bound

    def __repr__(self):
        return f"LessThan(upper_bound={_text(self.upper_bound)})"


class _GreaterThanEq(_GreaterThan):
    def check(self, value):
        return value >= self.lower_bound

    def __repr__(self):
        return f"GreaterThanEq(lower_bound={_text(self.lower_bound)})"


class _Interval(Constraint):
    """The closed interval [lower_bound, upper_bound]."""

    def __init__(self, lower_bound, upper_bound):
        self.lower_bound = lower_bound
        self.upper_bound = upper_bound

    def check(self, value):
        return (value >= self.lower_bound) & (value <= self.upper_bound)

    def __repr__(self):
        return (f"{type(self).__name__.lstrip('_')}(lower_bound={_text(self.lower_bound)}, "
                f"upper_bound={_text(self.upper_bound)})")


class _HalfOpenInterval(_Interval):
    """[lower_bound, upper_bound): a Uniform's support."""

    def check(self, value):
        return (value >= self.lower_bound) & (value < self.upper_bound)


class _Simplex(Constraint):
    event_dim = 1

    def check(self, value):
        # the same tolerance as torch, so that the same normalised inputs pass
        return (value >= 0).all(-1) & ((value.sum(-1) - 1).abs() < 1e-6)


class _IndependentConstraint(Constraint):
    """base_constraint, with `reinterpreted_batch_ndims` more dimensions in each event."""

    def __init__(self, base_constraint, reinterpreted_batch_ndims):
        self.base_constraint = base_constraint
        self.reinterpreted_batch_ndims = reinterpreted_batch_ndims

    @property
    def is_discrete(self):
        return self.base_constraint.is_discrete

    @property
    def event_dim(self):
        return self.base_constraint.event_dim + self.reinterpreted_batch_ndims

    def check(self, value):
        result = self.base_constraint.check(value)
        dims = self.reinterpreted_batch_ndims
        if result.dim() < dims:
            raise ValueError(f"Expected value.dim() >= {self.event_dim} but got "
                             f"{value.dim()}")
        return result.reshape(tuple(result.shape[:result.dim() - dims]) + (-1,)).all(-1)

    def __repr__(self):
        return (f"IndependentConstraint({self.base_constraint!r}, "
                f"{self.reinterpreted_batch_ndims})")


class _LowerCholesky(Constraint):
    """Lower-triangular matrices with a positive diagonal."""

    event_dim = 2

    def check(self, value):
        lower = (value.tril() == value).reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)
        from .multivariate_normal import _diagonal
        positive = (_diagonal(value) > 0).all(-1)
        return lower & positive


class _PositiveDefinite(Constraint):
    """Symmetric matrices whose eigenvalues are all positive (checked by a Cholesky
    factorisation: it succeeds exactly for these)."""

    event_dim = 2

    def check(self, value):
        from .multivariate_normal import _cholesky_ok
        symmetric = _symmetric(value)
        return symmetric & _cholesky_ok(value)


def _symmetric(value):
    # torch.isclose(value, value.mT, atol=1e-6): rtol 1e-5 of the transpose
    mirror = value.transpose(-2, -1)
    close = (value - mirror).abs() <= 1e-6 + 1e-5 * mirror.abs()
    return close.reshape(tuple(value.shape[:-2]) + (-1,)).all(-1)


dependent = _Dependent()
boolean = _Boolean()
one_hot = _OneHot()
integer_interval = _IntegerInterval
real = _Real()
real_vector = _IndependentConstraint(real, 1)
greater_than = _GreaterThan
less_than = _LessThan
positive = _GreaterThan(0.0)
nonnegative = _GreaterThanEq(0.0)
unit_interval = _Interval(0.0, 1.0)
interval = _Interval
half_open_interval = _HalfOpenInterval
simplex = _Simplex()
independent = _IndependentConstraint
lower_cholesky = _LowerCholesky()
positive_definite = _PositiveDefinite()
