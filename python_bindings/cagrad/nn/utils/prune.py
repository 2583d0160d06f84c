"""torch.nn.utils.prune: pruning by masks, with PyTorch's names and module layout.

Pruning parameter `name` of a module moves the Parameter to `name + "_orig"`, registers
the 0/1 mask as the buffer `name + "_mask"`, and sets `name` to mask * orig as a plain
attribute that a forward pre-hook (the pruning method itself) recomputes before every
forward, exactly as PyTorch does; state_dict keys (weight_orig, weight_mask) therefore
match PyTorch's checkpoints. Gradients reach `name_orig` through the product.

Masks are not differentiable, so the built-in methods compute them with numpy; a custom
BasePruningMethod's compute_mask gets and returns cagrad tensors. Random methods draw from
cagrad's generator (cagrad.manual_seed), so they are reproducible but not torch's picks.
"""

import numbers
from abc import ABC, abstractmethod
from collections.abc import Iterable

import numpy as np

from ... import _creation
from ..._grad_mode import no_grad

__all__ = ["BasePruningMethod", "CustomFromMask", "Identity", "L1Unstructured",
           "LnStructured", "PruningContainer", "RandomStructured", "RandomUnstructured",
           "custom_from_mask", "global_unstructured", "identity", "is_pruned",
           "l1_unstructured", "ln_structured", "random_structured", "random_unstructured",
           "remove"]


def _np(t):
    return np.array(t.detach().numpy(), copy=True)


def _like(array, t):
    """A cagrad tensor of array's values with t's dtype."""
    return _creation.tensor(np.ascontiguousarray(array), dtype=t.dtype)


class BasePruningMethod(ABC):
    """The base of pruning methods: compute_mask(t, default_mask) says which entries
    stay (1) and go (0); apply() installs the method on a module's parameter."""

    _tensor_name = None

    def __call__(self, module, inputs):
        # the forward pre-hook: the pruned tensor from the current orig and mask
        setattr(module, self._tensor_name, self.apply_mask(module))

    @abstractmethod
    def compute_mask(self, t, default_mask):
        """The mask for tensor t, starting from default_mask (the current mask)."""

    def apply_mask(self, module):
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned")
        orig = getattr(module, self._tensor_name + "_orig")
        mask = getattr(module, self._tensor_name + "_mask")
        return mask.to(dtype=orig.dtype) * orig

    @classmethod
    def apply(cls, module, name, *args, importance_scores=None, **kwargs):
        """Prune module.<name> with cls(*args, **kwargs), combined with an earlier pruning
        of the same parameter through a PruningContainer; returns the method."""
        method = _combined_method(cls, module, name, args, kwargs)
        orig = getattr(module, name)
        if importance_scores is not None and tuple(importance_scores.shape) != \
                tuple(orig.shape):
            raise AssertionError(f"importance_scores should have the same shape as parameter "
                                 f"{name} of {module}")
        first_time = not isinstance(method, PruningContainer)
        if first_time:
            # the Parameter itself moves to name_orig (an optimizer holding it still works)
            del module._parameters[name]
            module.register_parameter(name + "_orig", orig)
            default_mask = _creation.ones_like(orig)
        else:
            default_mask = getattr(module, name + "_mask").detach().clone()
        try:
            scores = orig if importance_scores is None else importance_scores
            mask = method.compute_mask(scores, default_mask=default_mask)
            module.register_buffer(name + "_mask", mask)
            setattr(module, name, method.apply_mask(module))
            module.register_forward_pre_hook(method)
        except Exception:
            if first_time:  # leave the module as it was
                orig = getattr(module, name + "_orig")
                del module._parameters[name + "_orig"]
                module.__dict__.pop(name, None)
                module.register_parameter(name, orig)
            raise
        return method

    def prune(self, t, default_mask=None, importance_scores=None):
        """t with this method's mask applied (the module is not touched)."""
        if importance_scores is not None and tuple(importance_scores.shape) != \
                tuple(t.shape):
            raise AssertionError("importance_scores should have the same shape as tensor t")
        scores = t if importance_scores is None else importance_scores
        default_mask = _creation.ones_like(t) if default_mask is None else default_mask
        return t * self.compute_mask(scores, default_mask=default_mask)

    def remove(self, module):
        """Make the pruning permanent: name becomes a Parameter holding mask * orig;
        name_orig, name_mask and the hook go."""
        if self._tensor_name is None:
            raise AssertionError(f"Module {module} has to be pruned before pruning can be "
                                 f"removed")
        name = self._tensor_name
        weight = self.apply_mask(module)
        module.__dict__.pop(name, None)
        orig = module._parameters[name + "_orig"]
        with no_grad():
            orig.copy_(weight.detach())
        del module._parameters[name + "_orig"]
        del module._buffers[name + "_mask"]
        setattr(module, name, orig)


def _combined_method(cls, module, name, args, kwargs):
    """cls's method for name, merged with a pruning hook already on name (whose hook
    entry is dropped: the merged method is registered again)."""
    old, keys = None, []
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            old = hook
            keys.append(key)
    if len(keys) > 1:
        raise AssertionError(f"Only one hook should be found; found {len(keys)} hooks "
                             f"pruning parameter {name} of module {module}")
    for key in keys:
        del module._forward_pre_hooks[key]
    method = cls(*args, **kwargs)
    method._tensor_name = name
    if isinstance(old, PruningContainer):
        old.add_pruning_method(method)
        return old
    if old is not None:
        container = PruningContainer(old)
        container.add_pruning_method(method)
        return container
    return method


class PruningContainer(BasePruningMethod):
    """A sequence of pruning methods on one parameter; each new one prunes what the
    earlier ones left (for unstructured methods: among the entries still 1)."""

    def __init__(self, *args):
        self._pruning_methods = ()
        if len(args) == 1 and not isinstance(args[0], Iterable):
            self._tensor_name = args[0]._tensor_name
            self.add_pruning_method(args[0])
        elif len(args) == 1 and isinstance(args[0], Iterable):
            for method in args[0]:
                self.add_pruning_method(method)
        else:
            for method in args:
                self.add_pruning_method(method)

    def add_pruning_method(self, method):
        if not isinstance(method, BasePruningMethod) and method is not None:
            raise TypeError(f"{type(method)} is not a BasePruningMethod subclass")
        if method is not None and self._tensor_name != method._tensor_name:
            raise ValueError(f"Can only add pruning methods acting on the parameter named "
                             f"'{self._tensor_name}' to PruningContainer. Found "
                             f"'{method._tensor_name}'")
        self._pruning_methods += (method,)

    def __len__(self):
        return len(self._pruning_methods)

    def __iter__(self):
        return iter(self._pruning_methods)

    def __getitem__(self, idx):
        return self._pruning_methods[idx]

    def compute_mask(self, t, default_mask):
        method = self._pruning_methods[-1]
        mask, values = _np(default_mask), _np(t)
        region = _region(method, values, mask)
        part = method.compute_mask(_like(values[region], t),
                                   default_mask=_like(mask[region], default_mask))
        mask[region] = _np(part)
        return _like(mask, default_mask)


def _region(method, values, mask):
    """The index of the part of t the newest method prunes: the entries still kept
    (unstructured), the channels along method.dim still kept (structured), or all."""
    kind = getattr(method, "PRUNING_TYPE", None)
    if kind == "unstructured":
        return mask == 1
    if kind == "structured":
        if not hasattr(method, "dim"):
            raise AttributeError('Pruning methods of PRUNING_TYPE "structured" need to have '
                                 'the attribute `dim` defined.')
        dim = method.dim if method.dim >= 0 else values.ndim + method.dim
        if dim < 0:
            raise IndexError(f"Index is out of bounds for tensor of size {values.ndim}")
        others = tuple(d for d in range(values.ndim) if d != dim)
        region = [slice(None)] * values.ndim
        region[dim] = mask.sum(axis=others) != 0
        return tuple(region)
    if kind == "global":
        return tuple(slice(None) for _ in range(values.ndim))
    raise ValueError(f"Unrecognized PRUNING_TYPE {kind}")


# ----------------------------------------------------------------- amounts and checks
def _check_amount_type(amount):
    if not isinstance(amount, numbers.Real):
        raise TypeError(f"Invalid type for amount: {amount}. Must be int or float.")
    integral = isinstance(amount, numbers.Integral)
    if (integral and amount < 0) or (not integral and not 0.0 <= float(amount) <= 1.0):
        raise ValueError(f"amount={amount} should either be a float in the range [0, 1] or "
                         f"a non-negative integer")


def _count(amount, size):
    """How many of size entries (or channels) to prune."""
    if isinstance(amount, numbers.Integral):
        if amount > size:
            raise ValueError(f"amount={amount} should be smaller than the number of "
                             f"parameters to prune={size}")
        return int(amount)
    return round(amount * size)


def _check_structured(t):
    if t.dim() <= 1:
        raise ValueError(f"Structured pruning can only be applied to multidimensional "
                         f"tensors. Found tensor of shape {t.shape} with {t.dim()} dims")


def _smallest(scores, k):
    """Positions of the k smallest scores (ties: the first positions)."""
    return np.argsort(scores, kind="stable")[:k]


def _channel_mask(shape, dim, kept_channels):
    mask = np.zeros(shape)
    index = [slice(None)] * len(shape)
    index[dim] = kept_channels
    mask[tuple(index)] = 1
    return mask


# ------------------------------------------------------------------------ the methods
class Identity(BasePruningMethod):
    """Prunes nothing: the mask is all ones (a module gains orig, mask and the hook)."""

    PRUNING_TYPE = "unstructured"

    def compute_mask(self, t, default_mask):
        return default_mask

    @classmethod
    def apply(cls, module, name):
        return super().apply(module, name)


class RandomUnstructured(BasePruningMethod):
    """Prunes `amount` entries (a count, or a fraction) chosen at random."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _check_amount_type(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        mask = _np(default_mask)
        k = _count(self.amount, mask.size)
        if k:
            draws = _np(_creation.rand(mask.size, dtype=t.dtype))
            mask.reshape(-1)[_smallest(draws, k)] = 0
        return _like(mask, default_mask)

    @classmethod
    def apply(cls, module, name, amount):
        return super().apply(module, name, amount=amount)


class L1Unstructured(BasePruningMethod):
    """Prunes the `amount` entries of smallest absolute value (of importance_scores when
    given)."""

    PRUNING_TYPE = "unstructured"

    def __init__(self, amount):
        _check_amount_type(amount)
        self.amount = amount

    def compute_mask(self, t, default_mask):
        mask = _np(default_mask)
        k = _count(self.amount, mask.size)
        if k:
            mask.reshape(-1)[_smallest(np.abs(_np(t)).reshape(-1), k)] = 0
        return _like(mask, default_mask)

    @classmethod
    def apply(cls, module, name, amount, importance_scores=None):
        return super().apply(module, name, amount=amount,
                             importance_scores=importance_scores)


class RandomStructured(BasePruningMethod):
    """Prunes `amount` whole channels along dim, chosen at random."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, dim=-1):
        _check_amount_type(amount)
        self.amount, self.dim = amount, dim

    def compute_mask(self, t, default_mask):
        values = _np(t)
        _check_structured(t)
        size = values.shape[self.dim]
        k = _count(self.amount, size)
        if k == 0:
            return default_mask
        draws = _np(_creation.rand(size))
        kept = np.sort(np.argsort(draws, kind="stable")[k:])
        mask = _channel_mask(values.shape, self.dim, kept) * _np(default_mask)
        return _like(mask, default_mask)

    @classmethod
    def apply(cls, module, name, amount, dim=-1):
        return super().apply(module, name, amount=amount, dim=dim)


class LnStructured(BasePruningMethod):
    """Prunes the `amount` channels along dim of smallest L`n` norm."""

    PRUNING_TYPE = "structured"

    def __init__(self, amount, n, dim=-1):
        _check_amount_type(amount)
        self.amount, self.n, self.dim = amount, n, dim

    def compute_mask(self, t, default_mask):
        values = _np(t)
        _check_structured(t)
        size = values.shape[self.dim]
        k = _count(self.amount, size)
        if k == 0:
            return default_mask
        norms = _channel_norms(values, self.n, self.dim)
        # keep the size - k largest norms (ties: torch's topk order is not specified)
        kept = np.sort(np.argsort(-norms, kind="stable")[:size - k])
        mask = _channel_mask(values.shape, self.dim, kept) * _np(default_mask)
        return _like(mask, default_mask)

    @classmethod
    def apply(cls, module, name, amount, n, dim, importance_scores=None):
        return super().apply(module, name, amount=amount, n=n, dim=dim,
                             importance_scores=importance_scores)


def _channel_norms(values, n, dim):
    """The L`n` norm of each slice of values along dim (n: a number, inf, -inf or 'fro')."""
    dim = dim % values.ndim
    flat = np.moveaxis(values, dim, 0).reshape(values.shape[dim], -1)
    if n == "fro":
        n = 2
    if not isinstance(n, numbers.Real):
        raise NotImplementedError(f"ln_structured(n={n!r}) is not supported by cagrad: n must "
                                  f"be a number, inf, -inf or 'fro' (see docs/python-api.md)")
    return np.linalg.norm(flat, ord=n, axis=1) if n != 0 else np.count_nonzero(flat, axis=1)


class CustomFromMask(BasePruningMethod):
    """Prunes where a given mask is 0."""

    PRUNING_TYPE = "global"

    def __init__(self, mask):
        self.mask = mask

    def compute_mask(self, t, default_mask):
        if tuple(default_mask.shape) != tuple(self.mask.shape):
            raise AssertionError("default_mask and mask must have the same shape")
        return default_mask * self.mask.to(dtype=default_mask.dtype)

    @classmethod
    def apply(cls, module, name, mask):
        return super().apply(module, name, mask=mask)


# ------------------------------------------------------------------------ functions
def identity(module, name):
    Identity.apply(module, name)
    return module


def random_unstructured(module, name, amount):
    RandomUnstructured.apply(module, name, amount)
    return module


def l1_unstructured(module, name, amount, importance_scores=None):
    L1Unstructured.apply(module, name, amount=amount, importance_scores=importance_scores)
    return module


def random_structured(module, name, amount, dim):
    RandomStructured.apply(module, name, amount, dim)
    return module


def ln_structured(module, name, amount, n, dim, importance_scores=None):
    LnStructured.apply(module, name, amount, n, dim, importance_scores=importance_scores)
    return module


def custom_from_mask(module, name, mask):
    CustomFromMask.apply(module, name, mask)
    return module


def global_unstructured(parameters, pruning_method, importance_scores=None, **kwargs):
    """Prune the (module, name) pairs together: pruning_method (an unstructured method
    class) picks among all their entries at once, e.g. the globally smallest 20%."""
    if not isinstance(parameters, Iterable):
        raise TypeError("global_unstructured(): parameters is not an Iterable")
    parameters = list(parameters)
    importance_scores = importance_scores if importance_scores is not None else {}
    if not isinstance(importance_scores, dict):
        raise TypeError("global_unstructured(): importance_scores must be of type dict")
    scores = np.concatenate([
        _np(importance_scores.get((module, name), getattr(module, name))).reshape(-1)
        for module, name in parameters])
    masks = np.concatenate([
        _np(getattr(module, name + "_mask", _creation.ones_like(getattr(module, name))))
        .reshape(-1) for module, name in parameters])
    method = pruning_method(**kwargs)
    method._tensor_name = "temp"
    if method.PRUNING_TYPE != "unstructured":
        raise TypeError(f'Only "unstructured" PRUNING_TYPE supported for the '
                        f'`pruning_method`. Found method {pruning_method} of type '
                        f'{method.PRUNING_TYPE}')
    container = PruningContainer(method)
    first = getattr(parameters[0][0], parameters[0][1])
    final = _np(container.compute_mask(_like(scores, first), _like(masks, first)))
    start = 0
    for module, name in parameters:
        param = getattr(module, name)
        count = param.numel()
        part = final[start:start + count].reshape(tuple(param.shape))
        custom_from_mask(module, name, mask=_like(part, param))
        start += count


def remove(module, name):
    """Make the pruning of module.<name> permanent (see BasePruningMethod.remove)."""
    for key, hook in module._forward_pre_hooks.items():
        if isinstance(hook, BasePruningMethod) and hook._tensor_name == name:
            hook.remove(module)
            del module._forward_pre_hooks[key]
            return module
    raise ValueError(f"Parameter '{name}' of module {module} has to be pruned before pruning "
                     f"can be removed")


def is_pruned(module):
    """Whether module or one of its submodules carries a pruning hook."""
    return any(isinstance(hook, BasePruningMethod)
               for _, sub in module.named_modules()
               for hook in sub._forward_pre_hooks.values())
