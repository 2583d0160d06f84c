"""Tensor.untyped_storage(), Tensor.storage() and Tensor.storage_offset(): read-only views
of the memory under a tensor, with torch's UntypedStorage / TypedStorage methods.

A cagrad view shares the memory of its root tensor (t._base, a contiguous tensor that owns
it), so a storage is that root's memory: its whole size, not just the view's, as in
PyTorch. Writing through a storage is not supported (cagrad's version counters would not
see it); see docs/python-api.md.
"""

import warnings

import numpy as np

__all__ = ["TypedStorage", "UntypedStorage", "storage", "storage_offset", "untyped_storage"]

_DOCS = "docs/python-api.md"


def _root(t):
    return t if t._base is None else t._base


def _root_array(t):
    """The root tensor's values as a read-only flat numpy array (no copy)."""
    array = np.asarray(_root(t).detach().numpy()).reshape(-1)
    array = array.view()
    array.flags.writeable = False
    return array


class _Storage:
    def __init__(self, tensor):
        self._tensor = tensor  # keeps the memory alive
        self._array = _root_array(tensor)

    @property
    def device(self):
        return self._tensor.device

    def data_ptr(self):
        return _root(self._tensor).data_ptr()

    def nbytes(self):
        return self._array.nbytes

    def __len__(self):
        return self.size()

    def __iter__(self):
        return iter(self.tolist())

    def __setitem__(self, index, value):
        raise NotImplementedError(f"cagrad's {type(self).__name__} is read-only: write "
                                  f"through the tensor instead (see {_DOCS})")

    def fill_(self, value):
        self.__setitem__(slice(None), value)

    def cpu(self):
        return self

    def is_shared(self):
        return False

    def __repr__(self):
        lines = [f" {v}" for v in self.tolist()]
        lines.append(f"[{self._title()} of size {self.size()}]")
        return "\n".join(lines)


class UntypedStorage(_Storage):
    """The bytes of a tensor's memory."""

    def _bytes(self):
        return self._array.view(np.uint8)

    def size(self):
        return self.nbytes()

    def element_size(self):
        return 1

    def tolist(self):
        return self._bytes().tolist()

    def __getitem__(self, index):
        item = self._bytes()[index]
        return item.tolist() if isinstance(item, np.ndarray) else int(item)

    def _title(self):
        return "torch.storage.UntypedStorage(device=cpu)"


class TypedStorage(_Storage):
    """The elements of a tensor's memory, of its dtype (deprecated in PyTorch)."""

    @property
    def dtype(self):
        return self._tensor.dtype

    def size(self):
        return self._array.size

    def element_size(self):
        return self._array.itemsize

    def tolist(self):
        return self._array.tolist()

    def __getitem__(self, index):
        item = self._array[index]
        return item.tolist() if isinstance(item, np.ndarray) else item.item()

    def untyped(self):
        return UntypedStorage(self._tensor)

    def _title(self):
        name = str(self.dtype).replace("cagrad.", "torch.")
        return f"torch.storage.TypedStorage(dtype={name}, device=cpu)"


def untyped_storage(self):
    return UntypedStorage(self)


def storage(self):
    warnings.warn(
        "TypedStorage is deprecated. It will be removed in the future and UntypedStorage will "
        "be the only storage class. This should only matter to you if you are using storages "
        "directly.  To access UntypedStorage directly, use tensor.untyped_storage() instead "
        "of tensor.storage()", UserWarning, stacklevel=2)
    return TypedStorage(self)


def storage_offset(self):
    """Where the tensor starts in its storage, in elements."""
    return (self.data_ptr() - _root(self).data_ptr()) // self.element_size()
