"""Containers: Sequential and ModuleList. Children are registered under "0", "1", ...
(or Sequential's OrderedDict keys), so parameter names match PyTorch's ("0.weight")."""

import operator
from collections import OrderedDict

from .module import Module, _addindent


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
