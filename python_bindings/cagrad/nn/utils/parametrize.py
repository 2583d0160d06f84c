"""cagrad.nn.utils.parametrize: a module tensor recomputed from other tensors on each access.

register_parametrization(module, "weight", P) moves the module's weight to
module.parametrizations.weight.original (or original0, original1, ... when P.right_inverse
returns several tensors) and makes `module.weight` a property that returns P(original).
As in PyTorch, the module's class is swapped for a subclass named Parametrized<Class>
that carries the property, so other modules of the same class are unaffected.
"""

import contextlib

from ..._grad_mode import no_grad
from ..container import ModuleDict, ModuleList
from ..parameter import Parameter

__all__ = ["register_parametrization", "is_parametrized", "remove_parametrizations",
           "type_before_parametrizations", "cached", "ParametrizationList"]

_cache = {"enabled": 0, "values": {}}


@contextlib.contextmanager
def cached():
    """Inside the block each parametrized tensor is computed once and then reused."""
    _cache["enabled"] += 1
    try:
        yield
    finally:
        _cache["enabled"] -= 1
        if not _cache["enabled"]:
            _cache["values"].clear()


def _store(module, name, value, as_parameter):
    if as_parameter and not isinstance(value, Parameter):
        value = Parameter(value, requires_grad=value.requires_grad)
    if as_parameter:
        module.register_parameter(name, value)
    else:
        module.register_buffer(name, value)


class ParametrizationList(ModuleList):
    """The parametrizations of one tensor, applied in order, holding the original
    tensor(s) the first one reads."""

    def __init__(self, modules, original, unsafe=False):
        super().__init__(modules)
        self.unsafe = unsafe
        is_parameter = isinstance(original, Parameter)
        with no_grad():
            new = original
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    try:
                        new = module.right_inverse(new)
                    except NotImplementedError:
                        pass  # as torch: a right_inverse that cannot, the identity
        self.is_tensor = not isinstance(new, (tuple, list))
        self.ntensors = 1 if self.is_tensor else len(new)
        if self.is_tensor:
            # keep the original Parameter object (optimizers may already hold it)
            if new is not original:
                with no_grad():
                    original.copy_(new)
            _store(self, "original", original, is_parameter)
        else:
            for i, value in enumerate(new):
                value = value.detach()
                value.requires_grad_(original.requires_grad)
                _store(self, f"original{i}", value, is_parameter)

    def right_inverse(self, value):
        """Set the original tensor(s) so that the parametrized value becomes value."""
        with no_grad():
            for module in reversed(list(self)):
                if hasattr(module, "right_inverse"):
                    value = module.right_inverse(value)
                elif not self.unsafe:
                    raise RuntimeError(f"parametrization {type(module).__name__} does not "
                                       f"implement right_inverse.")
            if self.is_tensor:
                self.original.copy_(value)
            else:
                for i, part in enumerate(value):
                    getattr(self, f"original{i}").copy_(part)

    def forward(self):
        if self.is_tensor:
            value = self[0](self.original)
        else:
            value = self[0](*(getattr(self, f"original{i}") for i in range(self.ntensors)))
        for module in list(self)[1:]:
            value = module(value)
        return value


def _parametrized_value(module, name):
    if not _cache["enabled"]:
        return module.parametrizations[name]()
    key = (id(module), name)
    if key not in _cache["values"]:
        _cache["values"][key] = module.parametrizations[name]()
    return _cache["values"][key]


def _inject_class(module, class_name=None):
    """Give module a class of its own (a subclass of its class) to carry properties."""
    cls = type(module)
    name = class_name or f"Parametrized{cls.__name__}"
    new_cls = type(name, (cls,), {"_cagrad_base_class": cls})
    module.__class__ = new_cls


def _inject_property(module, name):
    def getter(self):
        return _parametrized_value(self, name)

    def setter(self, value):
        self.parametrizations[name].right_inverse(value)

    setattr(type(module), name, property(getter, setter))


def _take_original(module, name):
    """Remove the tensor `name` from the module's parameters or buffers and return it."""
    if name in module._parameters:
        original = module._parameters.pop(name)
    elif name in module._buffers:
        original = module._buffers.pop(name)
    else:
        raise ValueError(f"Module '{module}' does not have a parameter, a buffer, or a "
                         f"parametrized element with name '{name}'")
    return original


def register_parametrization(module, tensor_name, parametrization, *, unsafe=False):
    """Make module.<tensor_name> = parametrization(original), original being the tensor
    the module held (as mapped by parametrization.right_inverse, when it has one)."""
    parametrization.train(module.training)
    if is_parametrized(module, tensor_name):
        module.parametrizations[tensor_name].append(parametrization)
        return module
    original = _take_original(module, tensor_name)
    plist = ParametrizationList([parametrization], original, unsafe=unsafe)
    if not is_parametrized(module):
        _inject_class(module)
        module.parametrizations = ModuleDict()
    module.parametrizations[tensor_name] = plist
    _inject_property(module, tensor_name)
    return module


def is_parametrized(module, tensor_name=None):
    plists = module.__dict__.get("_modules", {}).get("parametrizations")
    if not isinstance(plists, ModuleDict) or not hasattr(type(module), "_cagrad_base_class"):
        return False
    return len(plists) > 0 if tensor_name is None else tensor_name in plists


def remove_parametrizations(module, tensor_name, leave_parametrized=True):
    """Put a plain tensor back: the current parametrized value (leave_parametrized) or
    the original tensor."""
    if not is_parametrized(module, tensor_name):
        raise ValueError(f"Module {module} does not have a parametrization on {tensor_name}")
    plist = module.parametrizations[tensor_name]
    if leave_parametrized and plist.is_tensor:
        with no_grad():
            value = getattr(module, tensor_name)
            plist.original.copy_(value)
        original = plist.original
    elif leave_parametrized:
        # as torch: the value is computed in the caller's grad mode, and it comes back as a
        # Parameter only if it requires grad (else, e.g. under no_grad, as a buffer)
        value = getattr(module, tensor_name)
        original = Parameter(value.detach(), value.requires_grad) if value.requires_grad \
            else value.detach()
    elif plist.is_tensor:
        original = plist.original
    else:
        raise ValueError("Cannot leave unparametrized (`leave_parametrized=False`) a tensor "
                         "that is parametrized in terms of a sequence of tensors.")
    delattr(type(module), tensor_name)
    del module.parametrizations[tensor_name]
    _store(module, tensor_name, original, isinstance(original, Parameter))
    if not module.parametrizations:
        del module.parametrizations
        module.__class__ = type(module)._cagrad_base_class
    return module


def type_before_parametrizations(module):
    """The module's class as it was before any parametrization."""
    return getattr(type(module), "_cagrad_base_class", type(module))

