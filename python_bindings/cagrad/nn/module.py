"""nn.Module: the base class of layers, with torch.nn.Module's registration rules.

Assigning a Parameter, a Module or (after register_buffer) a Tensor to an attribute
registers it in _parameters, _modules or _buffers; everything else is a plain attribute.
The recursive walks (parameters(), state_dict(), train(), ...) visit children in
registration order, so names and orders match PyTorch's for the same module tree.
"""

from collections import OrderedDict, namedtuple
from collections.abc import Mapping

from .. import _C
from .._dtype import check_device, check_memory_format, dtype, float32, float64, memory_format
from .._grad_mode import no_grad, zero_grads
from . import _hooks
from .parameter import Parameter


def _typename(obj):
    cls = type(obj)
    if cls.__module__ == "builtins":
        return cls.__qualname__
    return f"{cls.__module__}.{cls.__qualname__}"


def _check_member_name(module, kind, name, registry):
    if not isinstance(name, str):
        raise TypeError(f"{kind} name should be a string. Got {_typename(name)}")
    if "." in name:
        # torch's add_module (only) also names the offending key
        got = f", got: {name}" if kind == "module" else ""
        raise KeyError(f'{kind} name can\'t contain "."{got}')
    if name == "":
        raise KeyError(f'{kind} name can\'t be empty string ""')
    if hasattr(module, name) and name not in registry:
        raise KeyError(f"attribute '{name}' already exists")


def _addindent(text, spaces):
    """Indent every line but the first (blank lines stay empty), for nested reprs."""
    first, *rest = text.split("\n")
    return "\n".join([first] + [" " * spaces + line if line.strip() else "" for line in rest])


class _IncompatibleKeys(namedtuple("IncompatibleKeys", ["missing_keys", "unexpected_keys"])):
    __slots__ = ()

    def __repr__(self):
        if not self.missing_keys and not self.unexpected_keys:
            return "<All keys matched successfully>"
        return super().__repr__()


class Module:
    """Base class for all neural-network modules; subclasses define forward()."""

    def __init__(self, *args, **kwargs):
        if args or kwargs:
            raise TypeError(f"{type(self).__name__}.__init__() got unexpected arguments "
                            f"{args or ''}{kwargs or ''}")
        # object.__setattr__: our __setattr__ needs these dicts to exist already.
        object.__setattr__(self, "training", True)
        object.__setattr__(self, "_parameters", OrderedDict())
        object.__setattr__(self, "_buffers", OrderedDict())
        object.__setattr__(self, "_non_persistent_buffers_set", set())
        object.__setattr__(self, "_modules", OrderedDict())
        for name in _HOOK_DICTS:
            object.__setattr__(self, name, OrderedDict())
        object.__setattr__(self, "_is_full_backward_hook", None)

    def forward(self, *args, **kwargs):
        raise NotImplementedError(f'Module [{type(self).__name__}] is missing the required '
                                  f'"forward" function')

    def __call__(self, *args, **kwargs):
        if not _hooks.has_hooks(self):
            return self.forward(*args, **kwargs)
        return _hooks.call_with_hooks(self, args, kwargs)

    # --- hooks (run by __call__; see _hooks.py) --------------------------------------------

    def register_forward_pre_hook(self, hook, *, prepend=False, with_kwargs=False):
        """hook(module, args) -> None or new args (with_kwargs: hook(module, args, kwargs)
        -> None or (new_args, new_kwargs)) before forward."""
        handle = _hooks.RemovableHandle(self._forward_pre_hooks,
                                        extra_dict=self._forward_pre_hooks_with_kwargs)
        self._forward_pre_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_pre_hooks_with_kwargs[handle.id] = True
        _place(self._forward_pre_hooks, handle, prepend)
        return handle

    def register_forward_hook(self, hook, *, prepend=False, with_kwargs=False,
                              always_call=False):
        """hook(module, args, output) (with_kwargs: hook(module, args, kwargs, output)) ->
        None or a replacement output, after forward; always_call: also when it raised."""
        handle = _hooks.RemovableHandle(self._forward_hooks, extra_dict=[
            self._forward_hooks_with_kwargs, self._forward_hooks_always_called])
        self._forward_hooks[handle.id] = hook
        if with_kwargs:
            self._forward_hooks_with_kwargs[handle.id] = True
        if always_call:
            self._forward_hooks_always_called[handle.id] = True
        _place(self._forward_hooks, handle, prepend)
        return handle

    def register_full_backward_pre_hook(self, hook, prepend=False):
        """hook(module, grad_output) -> None or a replacement grad_output, when the
        gradients of the module's outputs are known."""
        handle = _hooks.RemovableHandle(self._backward_pre_hooks)
        self._backward_pre_hooks[handle.id] = hook
        _place(self._backward_pre_hooks, handle, prepend)
        return handle

    def register_full_backward_hook(self, hook, prepend=False):
        """hook(module, grad_input, grad_output) -> None or a replacement grad_input, when
        the gradients of the module's positional inputs are known."""
        if self._is_full_backward_hook is False:
            raise RuntimeError("Cannot use both regular backward hooks and full backward "
                               "hooks on a single Module. Please use only one of them.")
        self._is_full_backward_hook = True
        handle = _hooks.RemovableHandle(self._backward_hooks)
        self._backward_hooks[handle.id] = hook
        _place(self._backward_hooks, handle, prepend)
        return handle

    def register_backward_hook(self, hook):
        raise NotImplementedError(_hooks._NON_FULL)

    # --- lookup by qualified name ----------------------------------------------------------

    def get_submodule(self, target):
        """The descendant named by target ("net_b.linear"); "" is self."""
        if target == "":
            return self
        module = self
        for item in target.split("."):
            if not hasattr(module, item):
                raise AttributeError(f"{module._get_name()} has no attribute `{item}`")
            module = getattr(module, item)
            if not isinstance(module, Module):
                raise AttributeError(f"`{item}` is not an nn.Module")
        return module

    def _attribute_at(self, target):
        """(module, name) of "net_b.linear.weight", with torch's error when it is missing."""
        module_path, _, name = target.rpartition(".")
        module = self.get_submodule(module_path)
        if not hasattr(module, name):
            raise AttributeError(f"{module._get_name()} has no attribute `{name}`")
        return module, name

    def get_parameter(self, target):
        module, name = self._attribute_at(target)
        param = getattr(module, name)
        if not isinstance(param, Parameter):
            raise AttributeError(f"`{name}` is not an nn.Parameter")
        return param

    def get_buffer(self, target):
        module, name = self._attribute_at(target)
        if name not in module._buffers:
            raise AttributeError(f"`{name}` is not a buffer")
        return getattr(module, name)

    # --- registration --------------------------------------------------------------------

    def register_parameter(self, name, param):
        if "_parameters" not in self.__dict__:
            raise AttributeError("cannot assign parameter before Module.__init__() call")
        _check_member_name(self, "parameter", name, self._parameters)
        if param is not None:
            if not isinstance(param, Parameter):
                raise TypeError(f"cannot assign '{_typename(param)}' object to parameter "
                                f"'{name}' (cagrad.nn.Parameter or None required)")
            if param.grad_fn is not None:
                raise ValueError(f"Cannot assign non-leaf Tensor to parameter '{name}'. Model "
                                 f"parameters must be created explicitly. To express '{name}' "
                                 f"as a function of another Tensor, compute the value in the "
                                 f"forward() method.")
        self._parameters[name] = param

    def register_buffer(self, name, tensor, persistent=True):
        """A tensor that is state but not a parameter (saved by state_dict if persistent)."""
        if "_buffers" not in self.__dict__:
            raise AttributeError("cannot assign buffer before Module.__init__() call")
        _check_member_name(self, "buffer", name, self._buffers)
        if tensor is not None and not isinstance(tensor, _C.TensorBase):
            raise TypeError(f"cannot assign '{_typename(tensor)}' object to buffer '{name}' "
                            f"(cagrad Tensor or None required)")
        self._buffers[name] = tensor
        if persistent:
            self._non_persistent_buffers_set.discard(name)
        else:
            self._non_persistent_buffers_set.add(name)

    def add_module(self, name, module):
        if module is not None and not isinstance(module, Module):
            raise TypeError(f"{_typename(module)} is not a Module subclass")
        _check_member_name(self, "module", name, self._modules)
        self._modules[name] = module

    register_module = add_module

    def __setattr__(self, name, value):
        params = self.__dict__.get("_parameters")
        modules = self.__dict__.get("_modules")
        buffers = self.__dict__.get("_buffers")
        if isinstance(value, Parameter):
            if params is None:
                raise AttributeError("cannot assign parameters before Module.__init__() call")
            self._forget(name, keep=params)
            self.register_parameter(name, value)
        elif params is not None and name in params:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as parameter '{name}' "
                                f"(cagrad.nn.Parameter or None expected)")
            params[name] = None
        elif isinstance(value, Module):
            if modules is None:
                raise AttributeError("cannot assign module before Module.__init__() call")
            self._forget(name, keep=modules)
            modules[name] = value
        elif modules is not None and name in modules:
            if value is not None:
                raise TypeError(f"cannot assign '{_typename(value)}' as child module '{name}' "
                                f"(cagrad.nn.Module or None expected)")
            modules[name] = None
        elif buffers is not None and getattr(value, "_is_buffer", False):
            # nn.Buffer(t, persistent=...) registers a buffer, as torch's rule
            self.register_buffer(name, value, value.__dict__.get("persistent", True))
        elif buffers is not None and name in buffers:
            if value is not None and not isinstance(value, _C.TensorBase):
                raise TypeError(f"cannot assign '{_typename(value)}' as buffer '{name}' "
                                f"(cagrad.Tensor or None expected)")
            buffers[name] = value
        else:
            object.__setattr__(self, name, value)

    def _forget(self, name, keep):
        """Drop name from every place but `keep`, the registry it is about to be stored in
        (where a reassignment keeps its position, hence its order in parameters())."""
        self.__dict__.pop(name, None)
        for registry in (self._parameters, self._buffers, self._modules):
            if registry is not keep:
                registry.pop(name, None)
        self._non_persistent_buffers_set.discard(name)

    def __getattr__(self, name):
        # Only called when normal lookup fails: look in the registries.
        for registry in ("_parameters", "_buffers", "_modules"):
            members = self.__dict__.get(registry)
            if members is not None and name in members:
                return members[name]
        raise AttributeError(f"'{type(self).__name__}' object has no attribute '{name}'")

    def __delattr__(self, name):
        for registry in (self._parameters, self._buffers, self._modules):
            if name in registry:
                del registry[name]
                self._non_persistent_buffers_set.discard(name)
                return
        object.__delattr__(self, name)

    # --- traversal -----------------------------------------------------------------------

    def named_modules(self, memo=None, prefix="", remove_duplicate=True):
        """(name, module) for self and every descendant, depth first; a module reachable
        twice is yielded once unless remove_duplicate is False."""
        if memo is None:
            memo = set()
        if remove_duplicate:
            if id(self) in memo:
                return
            memo.add(id(self))
        yield prefix, self
        for name, module in self._modules.items():
            if module is not None:
                child_prefix = f"{prefix}.{name}" if prefix else name
                yield from module.named_modules(memo, child_prefix, remove_duplicate)

    def modules(self):
        for _, module in self.named_modules():
            yield module

    def named_children(self):
        seen = set()
        for name, module in self._modules.items():
            if module is not None and id(module) not in seen:
                seen.add(id(module))
                yield name, module

    def children(self):
        for _, module in self.named_children():
            yield module

    def _named_members(self, registry, prefix, recurse, remove_duplicate):
        """(qualified name, tensor) from each module's registry, skipping None entries and,
        with remove_duplicate, tensors shared between modules (tied weights)."""
        seen = set()
        owners = (self.named_modules(prefix=prefix, remove_duplicate=remove_duplicate)
                  if recurse else [(prefix, self)])
        for owner_prefix, owner in owners:
            for name, tensor in getattr(owner, registry).items():
                if tensor is None or id(tensor) in seen:
                    continue
                if remove_duplicate:
                    seen.add(id(tensor))
                yield (f"{owner_prefix}.{name}" if owner_prefix else name), tensor

    def named_parameters(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_parameters", prefix, recurse, remove_duplicate)

    def parameters(self, recurse=True):
        for _, param in self.named_parameters(recurse=recurse):
            yield param

    def named_buffers(self, prefix="", recurse=True, remove_duplicate=True):
        return self._named_members("_buffers", prefix, recurse, remove_duplicate)

    def buffers(self, recurse=True):
        for _, buf in self.named_buffers(recurse=recurse):
            yield buf

    def apply(self, fn):
        """Call fn on every descendant, then on self (children first); returns self."""
        for module in self.children():
            module.apply(fn)
        fn(self)
        return self

    # --- modes and gradients -------------------------------------------------------------

    def train(self, mode=True):
        if not isinstance(mode, bool):
            raise ValueError("training mode is expected to be boolean")
        self.training = mode
        for module in self.children():
            module.train(mode)
        return self

    def eval(self):
        return self.train(False)

    def requires_grad_(self, requires_grad=True):
        for param in self.parameters():
            param.requires_grad_(requires_grad)
        return self

    def zero_grad(self, set_to_none=True):
        """Reset the .grad of every parameter: to None (the default), or to zeros in place."""
        zero_grads(self.parameters(), set_to_none)

    def share_memory(self):
        """Tensor.share_memory_() on every parameter and buffer (and their grads): processes
        forked or spawned with the module afterwards update the same memory (Hogwild)."""
        for tensor in list(self.parameters()) + list(self.buffers()):
            tensor.share_memory_()
            if tensor.grad is not None:
                tensor.grad.share_memory_()
        return self

    # --- state_dict ----------------------------------------------------------------------

    def state_dict(self, *, destination=None, prefix="", keep_vars=False):
        """OrderedDict of every parameter and persistent buffer, by qualified name
        ("0.weight"); values are detached aliases (keep_vars=True: the tensors themselves)."""
        if destination is None:
            destination = OrderedDict()
        for name, tensor in self._local_state().items():
            destination[prefix + name] = tensor if keep_vars else tensor.detach()
        for name, module in self._modules.items():
            if module is not None:
                module.state_dict(destination=destination, prefix=f"{prefix}{name}.",
                                  keep_vars=keep_vars)
        return destination

    def _local_state(self):
        """This module's own parameters and persistent buffers, without None entries."""
        state = {k: v for k, v in self._parameters.items() if v is not None}
        state.update((k, v) for k, v in self._buffers.items()
                     if v is not None and k not in self._non_persistent_buffers_set)
        return state

    def load_state_dict(self, state_dict, strict=True, assign=False):
        """Copy state_dict's values into the parameters and buffers in place (under
        no_grad). Missing and unexpected keys are errors if strict, else returned; a shape
        mismatch is always an error. All problems are reported in one RuntimeError."""
        if assign:
            raise NotImplementedError("cagrad's load_state_dict() does not support "
                                      "assign=True; values are always copied in place")
        if not isinstance(state_dict, Mapping):
            raise TypeError(f"Expected state_dict to be dict-like, got {type(state_dict)}.")
        missing, errors = [], []
        with no_grad():
            for prefix, module in self._state_modules():
                module._load_local_state(state_dict, prefix, missing, errors)
        unexpected = self._unexpected_keys(state_dict)
        if strict:
            if unexpected:
                errors.insert(0, "Unexpected key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in unexpected)))
            if missing:
                errors.insert(0, "Missing key(s) in state_dict: {}. ".format(
                    ", ".join(f'"{k}"' for k in missing)))
        if errors:
            raise RuntimeError("Error(s) in loading state_dict for {}:\n\t{}".format(
                type(self).__name__, "\n\t".join(errors)))
        return _IncompatibleKeys(missing, unexpected)

    def _load_local_state(self, state_dict, prefix, missing, errors):
        for name, tensor in self._local_state().items():
            key = prefix + name
            if key not in state_dict:
                missing.append(key)
                continue
            value = state_dict[key]
            if not isinstance(value, _C.TensorBase):
                errors.append(f'While copying the parameter named "{key}", expected a cagrad '
                              f'Tensor from checkpoint but received {type(value)}')
            elif value.shape != tensor.shape:
                errors.append(f"size mismatch for {key}: copying a param with shape "
                              f"{value.shape} from checkpoint, the shape in current model "
                              f"is {tensor.shape}.")
            else:
                tensor.copy_(value)  # converts the dtype, as torch's copy_ does

    def _unexpected_keys(self, state_dict):
        expected = {prefix + name for prefix, module in self._state_modules()
                    for name in module._local_state()}
        return [key for key in state_dict.keys() if key not in expected]

    def _state_modules(self):
        """(key prefix, module) for every module whose entries state_dict() holds: a module
        reachable under two names appears under both, as in state_dict()."""
        for name, module in self.named_modules(remove_duplicate=False):
            yield (name + "." if name else ""), module

    # --- dtype conversion ----------------------------------------------------------------

    def to(self, *args, **kwargs):
        """to(dtype), to(device), to(tensor) or to(device, dtype). cagrad computes on the
        CPU only, so only the dtype changes anything: floating-point parameters (with their
        .grad) and buffers are converted, integer ones are kept."""
        fmt = kwargs.pop("memory_format", None)
        target = _parse_to(args, kwargs)
        if fmt is not None:
            self._check_memory_format(fmt)
        if target is not None:
            if not target.is_floating_point:
                raise TypeError(f"nn.Module.to only accepts floating point dtypes, but got "
                                f"desired dtype={target}")
            converted = {}  # id(old) -> (old, new): tied weights stay tied
            with no_grad():
                for module in self.modules():
                    module._convert_local(target, converted)
        return self

    def _check_memory_format(self, fmt):
        """Module.to(memory_format=...) changes the layout of 4-D and 5-D parameters and
        buffers only, as in PyTorch; cagrad's are row-major, so contiguous_format and
        preserve_format keep them, and channels_last(_3d) raises (check_memory_format)."""
        if type(fmt) is not memory_format:
            raise TypeError(f"to() received an invalid combination of arguments - got "
                            f"(memory_format={type(fmt).__name__}, ...)")
        ranks = {"channels_last": 4, "channels_last_3d": 5}
        for t in list(self.parameters()) + list(self.buffers()):
            if t.ndim in (4, 5):
                rank = ranks.get(str(fmt).rpartition(".")[2], t.ndim)
                if rank != t.ndim:
                    raise RuntimeError(f"required rank {rank} tensor to use "
                                       f"{str(fmt).rpartition('.')[2]} format")
                check_memory_format("to", fmt, like=t)

    def float(self):
        return self.to(float32)

    def double(self):
        return self.to(float64)

    def cpu(self):
        return self

    def _convert_local(self, target, converted):
        # cagrad tensors cannot swap their storage (no settable .data), so a converted
        # parameter is a new Parameter object: build optimizers after converting.
        for name, param in self._parameters.items():
            if _needs_conversion(param, target):
                if id(param) not in converted:
                    converted[id(param)] = param, _converted_parameter(param, target)
                self._parameters[name] = converted[id(param)][1]
        for name, buf in self._buffers.items():
            if _needs_conversion(buf, target):
                self._buffers[name] = buf.to(target)

    # --- repr ----------------------------------------------------------------------------

    def extra_repr(self):
        """The text inside this module's parentheses in repr(); override in layers."""
        return ""

    def _get_name(self):
        return type(self).__name__

    def __repr__(self):
        extra = self.extra_repr()
        extra_lines = extra.split("\n") if extra else []
        child_lines = [f"({name}): {_addindent(repr(module), 2)}"
                       for name, module in self._modules.items()]
        if not child_lines and len(extra_lines) == 1:
            return f"{self._get_name()}({extra_lines[0]})"
        body = "\n  ".join(extra_lines + child_lines)
        return f"{self._get_name()}(\n  {body}\n)" if body else f"{self._get_name()}()"


_HOOK_DICTS = ("_forward_pre_hooks", "_forward_pre_hooks_with_kwargs", "_forward_hooks",
               "_forward_hooks_with_kwargs", "_forward_hooks_always_called",
               "_backward_pre_hooks", "_backward_hooks")


def _place(hooks, handle, prepend):
    if prepend:
        hooks.move_to_end(handle.id, last=False)


def _needs_conversion(tensor, target):
    return tensor is not None and tensor.dtype.is_floating_point and tensor.dtype is not target


def _converted_parameter(param, target):
    new = Parameter(param.to(target), param.requires_grad)
    if param.grad is not None:
        new.grad = param.grad.to(target)
    return new


def _parse_to(args, kwargs):
    """The dtype a Module.to() call asks for (None: keep), checking any device is the CPU."""
    target = kwargs.pop("dtype", None)
    check_device(kwargs.pop("device", None))
    kwargs.pop("non_blocking", None)
    if kwargs:
        raise TypeError(f"to() got unexpected keyword arguments {sorted(kwargs)}")
    for arg in args:
        if isinstance(arg, dtype):
            target = arg
        elif isinstance(arg, _C.TensorBase):
            target = arg.dtype
        elif not isinstance(arg, bool):  # to(device, dtype, non_blocking)
            check_device(arg)
    return target
