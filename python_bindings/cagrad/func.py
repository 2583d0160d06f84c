"""cagrad.func: torch.func.functional_call (call a module with other tensors in place of
its parameters and buffers), stack_module_state (model ensembling) and the transforms grad,
grad_and_value, vjp, jvp, linearize, jacrev, jacfwd, hessian and vmap (_func_transforms.py:
built on reverse mode; vmap is a loop over the batch, not a batching transform)."""

from ._func_transforms import (grad, grad_and_value, hessian, jacfwd, jacrev, jvp, linearize,
                               vjp, vmap)
from .nn.module import Module

__all__ = ["functional_call", "grad", "grad_and_value", "hessian", "jacfwd", "jacrev", "jvp",
           "linearize", "stack_module_state", "vjp", "vmap"]


def stack_module_state(models):
    """(params, buffers): each name's tensors of every model stacked along a new dim 0, as
    torch.func.stack_module_state prepares an ensemble for vmap over functional_call.
    The stacked parameters are new leaves that require grad as the models' did."""
    from ._functions import stack

    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: Expected at least one model, got 0.")
    if len({m.training for m in models}) > 1:
        raise RuntimeError("stack_module_state: Expected all models to have the same "
                           "training/eval mode.")
    first_params, first_buffers = dict(models[0].named_parameters()), dict(models[0].named_buffers())
    for m in models[1:]:
        if (list(dict(m.named_parameters())) != list(first_params)
                or list(dict(m.named_buffers())) != list(first_buffers)):
            raise RuntimeError("stack_module_state: Expected all models to have the same "
                               "parameter and buffer names.")

    def stacked(name, getter, parameter):
        values = [getter(m)[name] for m in models]
        out = stack([v.detach() for v in values])
        return out.requires_grad_(values[0].requires_grad) if parameter else out

    params = {n: stacked(n, lambda m: dict(m.named_parameters()), True) for n in first_params}
    buffers = {n: stacked(n, lambda m: dict(m.named_buffers()), False) for n in first_buffers}
    return params, buffers


def _merged(parameter_and_buffer_dicts):
    if isinstance(parameter_and_buffer_dicts, dict):
        return dict(parameter_and_buffer_dicts)
    merged = {}
    for mapping in parameter_and_buffer_dicts:
        repeated = sorted(set(merged) & set(mapping))
        if repeated:
            raise ValueError(f"{repeated} appeared in multiple dictionaries; behavior of "
                             f"functional call is ambiguous")
        merged.update(mapping)
    return merged


def _owner(module, dotted):
    """(submodule, attribute name) for a dotted name such as 'layers.0.weight'."""
    *path, name = dotted.split(".")
    for part in path:
        module = getattr(module, part)
    return module, name


def _tied_names(module, given):
    """Every name of a parameter/buffer that shares its tensor with a given name (tied
    weights), mapped to the given tensor."""
    by_id = {}
    for name, tensor in list(module.named_parameters(remove_duplicate=False)) + \
            list(module.named_buffers(remove_duplicate=False)):
        by_id.setdefault(id(tensor), []).append(name)
    extra = {}
    for names in by_id.values():
        chosen = [n for n in names if n in given]
        for name in names:
            if chosen and name not in given:
                extra[name] = given[chosen[0]]
    return extra


def _check_strict(module, given):
    expected = {n for n, _ in module.named_parameters(remove_duplicate=False)}
    expected |= {n for n, _ in module.named_buffers(remove_duplicate=False)}
    unexpected = sorted(set(given) - expected)
    missing = sorted(expected - set(given))
    if unexpected or missing:
        lines = [f"Error(s) in reparametrizing for {type(module).__name__}:"]
        if unexpected:
            lines.append("\tUnexpected key(s): " + ", ".join(f"'{k}'" for k in unexpected) + ".")
        if missing:
            lines.append("\tMissing key(s): " + ", ".join(f"'{k}'" for k in missing) + ".")
        raise RuntimeError("\n".join(lines))


def _swap_in(module, name, tensor):
    """Put tensor at name; return how to put the original back."""
    owner, attr = _owner(module, name)
    for registry in (owner._parameters, owner._buffers):
        if attr in registry:
            original = registry[attr]
            registry[attr] = tensor  # a plain tensor may stand in for a Parameter here

            def restore(registry=registry, attr=attr, original=original):
                registry[attr] = original
            return restore
    missing = object()
    original = owner.__dict__.get(attr, missing)
    object.__setattr__(owner, attr, tensor)

    def restore_attribute():
        if original is missing:
            owner.__dict__.pop(attr, None)
        else:
            object.__setattr__(owner, attr, original)
    return restore_attribute


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *,
                    tie_weights=True, strict=False):
    """module(*args, **kwargs) with the given tensors standing in for the parameters and
    buffers of the same names (dotted, as in state_dict), which are put back afterwards;
    gradients flow to the given tensors (MAML-style inner loops)."""
    if not isinstance(module, Module):
        raise TypeError(f"functional_call(): expected a Module, got {type(module).__name__}")
    given = _merged(parameter_and_buffer_dicts)
    if tie_weights:
        given.update(_tied_names(module, given))
    if strict:
        _check_strict(module, given)
    if args is None:
        args = ()
    elif not isinstance(args, tuple):
        args = (args,)
    restores = []
    try:
        for name, tensor in given.items():
            restores.append(_swap_in(module, name, tensor))
        return module(*args, **(kwargs or {}))
    finally:
        for restore in reversed(restores):
            restore()


def __getattr__(name):
    if name.startswith("__"):
        raise AttributeError(name)
    raise AttributeError(f"module 'cagrad.func' has no attribute {name!r}: cagrad.func has "
                         f"{', '.join(__all__)} (see docs/python-api.md)")
