"""Containers: Sequential, ModuleList, ModuleDict, ParameterList and ParameterDict.
Children are registered under "0", "1", ... (or their keys), so parameter names match
PyTorch's ("0.weight", "layers.enc.bias", "params.0")."""

import operator
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .. import _C
from .module import Module, _addindent
from .parameter import Parameter


def _absolute_index(idx, length):
    idx = operator.index(idx)
    if not -length <= idx < length:
        raise IndexError(f"index {idx} is out of range")
    return idx % length


class _IndexedModules(Module):
    """Indexing, len, iteration and deletion shared by Sequential and ModuleList."""

    def _key(self, idx):
        return list(self._modules)[_absolute_index(idx, len(self._modules))]

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return self._from_items(list(self._modules.items())[idx])
        return self._modules[self._key(idx)]

    def __setitem__(self, idx, module):
        setattr(self, self._key(idx), module)

    def __delitem__(self, idx):
        keys = list(self._modules)[idx] if isinstance(idx, slice) else [self._key(idx)]
        for key in keys:
            del self._modules[key]
        self._store(list(self._modules.values()))

    def pop(self, idx):
        module = self[idx]
        del self[idx]
        return module

    def _store(self, modules):
        """Register modules under "0".."n-1": after a deletion or an insertion the keys
        are renumbered, as in PyTorch."""
        self._modules.clear()
        for i, module in enumerate(modules):
            self.add_module(str(i), module)

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, module)
        self._store(modules)


class Sequential(_IndexedModules):
    """Calls its children in order, each on the previous one's output.

    Sequential(m0, m1, ...) names them "0", "1", ...; Sequential(OrderedDict) uses its keys.
    """

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for key, module in args[0].items():
                self.add_module(key, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def _from_items(self, items):
        return type(self)(OrderedDict(items))

    def forward(self, input):
        for module in self:
            input = module(input)
        return input


class ModuleList(_IndexedModules):
    """A list of modules whose parameters belong to the owning Module."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def _from_items(self, items):
        return type(self)(module for _, module in items)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __repr__(self):
        # Runs of identical children print once, as "(0-2): 3 x Linear(...)".
        runs = []  # [first index, last index, repr]
        for i, module in enumerate(self):
            text = repr(module)
            if runs and runs[-1][2] == text:
                runs[-1][1] = i
            else:
                runs.append([i, i, text])
        if not runs:
            return self._get_name() + "()"
        lines = [_addindent(f"({first}): {text}" if first == last else
                            f"({first}-{last}): {last - first + 1} x {text}", 2)
                 for first, last, text in runs]
        return self._get_name() + "(\n  " + "\n  ".join(lines) + "\n)"


def _check_pairs(owner, pairs):
    """Yield (key, value) from an iterable of pairs, with torch's errors for bad elements."""
    for j, pair in enumerate(pairs):
        if not isinstance(pair, Iterable):
            raise TypeError(f"{owner} update sequence element #{j} should be Iterable; is"
                            + type(pair).__name__)
        if len(pair) != 2:
            raise ValueError(f"{owner} update sequence element #{j} has length {len(pair)}; "
                             "2 is required")
        yield pair[0], pair[1]


class ModuleDict(Module):
    """An ordered dict of modules whose parameters belong to the owning Module."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.update(modules)

    def __getitem__(self, key):
        return self._modules[key]

    def __setitem__(self, key, module):
        self.add_module(key, module)

    def __delitem__(self, key):
        del self._modules[key]

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules)

    def __contains__(self, key):
        return key in self._modules

    def clear(self):
        self._modules.clear()

    def pop(self, key):
        module = self[key]
        del self[key]
        return module

    def keys(self):
        return self._modules.keys()

    def items(self):
        return self._modules.items()

    def values(self):
        return self._modules.values()

    def update(self, modules):
        """Add (key, module) entries from a mapping (in its order) or from pairs."""
        if not isinstance(modules, Iterable):
            raise TypeError("ModuleDict.update should be called with an iterable of key/value "
                            "pairs, but got " + type(modules).__name__)
        pairs = (modules.items() if isinstance(modules, (Mapping, ModuleDict))
                 else _check_pairs("ModuleDict", modules))
        for key, module in pairs:
            self[key] = module


def _as_parameter(value):
    """Tensors stored in a ParameterList/Dict become Parameters (other objects are kept)."""
    if isinstance(value, _C.TensorBase) and not isinstance(value, Parameter):
        return Parameter(value)
    return value


_TENSOR_TYPENAMES = {"float32": "FloatTensor", "float64": "DoubleTensor",
                     "int64": "LongTensor"}


def _entry_repr(key, value, type_text):
    """One line of a ParameterList/Dict repr: "  (key): Parameter containing: [...]"."""
    if not isinstance(value, _C.TensorBase):
        return f"  ({key}): Object of type: {type(value).__name__}"
    kind = "Parameter" if isinstance(value, Parameter) else "Tensor"
    size = "x".join(str(n) for n in value.shape)
    return f"  ({key}): {kind} containing: [{type_text(value)} of size {size}]"


class ParameterList(Module):
    """A list of parameters (tensors are wrapped in Parameter) registered as "0", "1", ..."""

    def __init__(self, values=None):
        super().__init__()
        self._size = 0
        if values is not None:
            self += values

    def _attr(self, idx):
        return str(_absolute_index(idx, len(self)))

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(self[i] for i in range(*idx.indices(len(self))))
        return getattr(self, self._attr(idx))

    def __setitem__(self, idx, value):
        setattr(self, self._attr(idx), _as_parameter(value))

    def __len__(self):
        return self._size

    def __iter__(self):
        return (self[i] for i in range(len(self)))

    def __iadd__(self, values):
        return self.extend(values)

    def __dir__(self):
        return [key for key in super().__dir__() if not key.isdigit()]

    def append(self, value):
        self._size += 1
        self[self._size - 1] = value
        return self

    def extend(self, values):
        if not isinstance(values, Iterable) or isinstance(values, _C.TensorBase):
            raise TypeError("ParameterList.extend should be called with an iterable, but got "
                            + type(values).__name__)
        for value in values:
            self.append(value)
        return self

    def extra_repr(self):
        return "\n".join(_entry_repr(i, value, lambda t: t.dtype)
                         for i, value in enumerate(self))

    def __call__(self, *args, **kwargs):
        raise RuntimeError("ParameterList should not be called.")


class ParameterDict(Module):
    """An ordered dict of parameters (tensors are wrapped in Parameter), each registered
    under its key."""

    def __init__(self, parameters=None):
        super().__init__()
        self._keys = {}  # insertion-ordered keys; the values live in the registries
        if parameters is not None:
            self.update(parameters)

    @staticmethod
    def _attr(key):
        if not isinstance(key, str):
            raise TypeError("Index given to ParameterDict cannot be used as a key as it is not "
                            f"a string (type is '{type(key).__name__}'). Open an issue on "
                            "github if you need non-string keys.")
        return key

    def __getitem__(self, key):
        return getattr(self, self._attr(key))

    def __setitem__(self, key, value):
        self._keys[key] = None
        setattr(self, self._attr(key), _as_parameter(value))

    def __delitem__(self, key):
        del self._keys[key]
        delattr(self, self._attr(key))

    def __len__(self):
        return len(self._keys)

    def __iter__(self):
        return iter(self._keys)

    def __reversed__(self):
        return reversed(self._keys)

    def __contains__(self, key):
        return key in self._keys

    def copy(self):
        return ParameterDict(OrderedDict((key, self[key]) for key in self._keys))

    def setdefault(self, key, default=None):
        if key not in self:
            self[key] = default
        return self[key]

    def clear(self):
        for key in list(self._keys):
            del self[key]

    def pop(self, key):
        value = self[key]
        del self[key]
        return value

    def popitem(self):
        """Remove and return the last inserted (key, value)."""
        if not self._keys:
            raise KeyError("popitem(): dictionary is empty")
        key = next(reversed(self._keys))
        return key, self.pop(key)

    def get(self, key, default=None):
        return self[key] if key in self else default

    def fromkeys(self, keys, default=None):
        return ParameterDict((key, default) for key in keys)

    def keys(self):
        return self._keys.keys()

    def items(self):
        return ((key, self[key]) for key in self._keys)

    def values(self):
        return (self[key] for key in self._keys)

    def update(self, parameters):
        """Add entries from an OrderedDict/ParameterDict (in order), another mapping (in
        sorted key order, as torch does) or an iterable of pairs."""
        if not isinstance(parameters, Iterable):
            raise TypeError("ParametersDict.update should be called with an iterable of "
                            "key/value pairs, but got " + type(parameters).__name__)
        if isinstance(parameters, (OrderedDict, ParameterDict)):
            pairs = parameters.items()
        elif isinstance(parameters, Mapping):
            pairs = sorted(parameters.items())
        else:
            pairs = _check_pairs("ParameterDict", parameters)
        for key, value in pairs:
            self[key] = value

    def extra_repr(self):
        return "\n".join(_entry_repr(key, value, _tensor_typename)
                         for key, value in self.items())

    def __call__(self, input):
        raise RuntimeError("ParameterDict should not be called.")

    def __or__(self, other):
        merged = self.copy()
        merged.update(other)
        return merged

    def __ror__(self, other):
        merged = other.copy()
        merged.update(self)
        return merged

    def __ior__(self, other):
        self.update(other)
        return self


def _tensor_typename(tensor):
    # torch.typename(): "torch.FloatTensor"; cagrad names its own package.
    return "cagrad." + _TENSOR_TYPENAMES[str(tensor.dtype).split(".")[-1]]
