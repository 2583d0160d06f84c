"""default_collate and default_convert: turn the samples a dataset returns into batches
(torch.utils.data.default_collate / default_convert).

collate() dispatches on the type of a batch's first element through collate_fn_map, so a
custom collate_fn can reuse it with extra entries, as in PyTorch.
"""

import collections.abc
import copy
import re

import numpy as np

from ..._creation import as_tensor, tensor
from ..._dtype import float64
from ..._functions import stack
from ..._tensor import Tensor

__all__ = ["collate", "default_collate", "default_collate_fn_map", "default_convert"]

# numpy dtype codes of bytes, str, unicode and object arrays, which hold no numbers
_NOT_NUMERIC = re.compile(r"[SaUO]")

default_collate_err_msg_format = (
    "default_collate: batch must contain tensors, numpy arrays, numbers, dicts or lists; "
    "found {}")


def _is_numeric_array(arr):
    return _NOT_NUMERIC.search(arr.dtype.str) is None


def _is_numpy_value(data):
    """A numpy array or numpy scalar, but not a numpy string (np.str_, np.bytes_)."""
    return type(data).__module__ == "numpy" and not isinstance(data, (str, bytes))


def _rebuild_mapping(data, convert):
    """A mapping of data's type with convert applied to each value (a plain dict when
    that type cannot be built from one)."""
    if isinstance(data, collections.abc.MutableMapping):
        clone = copy.copy(data)
        clone.update({key: convert(key) for key in data})
        return clone
    try:
        return type(data)({key: convert(key) for key in data})
    except TypeError:
        return {key: convert(key) for key in data}


def _rebuild_sequence(data, items):
    """A sequence of data's type holding items (a list when that type cannot hold them,
    e.g. range)."""
    try:
        if isinstance(data, collections.abc.MutableSequence):
            clone = copy.copy(data)
            for i, item in enumerate(items):
                clone[i] = item
            return clone
        return type(data)(items)
    except TypeError:
        return list(items)


def default_convert(data):
    """Numpy arrays and numbers inside data as tensors, keeping the containers: what the
    DataLoader applies to each sample when batching is off (batch_size=None)."""
    if isinstance(data, Tensor):
        return data
    if _is_numpy_value(data):
        is_array = isinstance(data, np.ndarray)
        if is_array and not _is_numeric_array(data):
            return data
        return as_tensor(data if is_array else np.asarray(data))
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, lambda key: default_convert(data[key]))
    if isinstance(data, tuple) and hasattr(data, "_fields"):  # namedtuple
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


# ------------------------------------------------------------------------------ collate
def collate(batch, *, collate_fn_map=None):
    """Batch a list of samples of one structure: the leaf types are handled by
    collate_fn_map (looked up by exact type first, then by isinstance in insertion
    order), the containers (mappings, namedtuples, sequences) recursively."""
    elem = batch[0]
    elem_type = type(elem)
    handler = _find_handler(elem, collate_fn_map)
    if handler is not None:
        return handler(batch, collate_fn_map=collate_fn_map)
    recurse = lambda samples: collate(samples, collate_fn_map=collate_fn_map)  # noqa: E731
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, lambda key: recurse([d[key] for d in batch]))
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):  # namedtuple
        return elem_type(*(recurse(samples) for samples in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        return _collate_sequences(batch, recurse)
    raise TypeError(default_collate_err_msg_format.format(elem_type))


def _find_handler(elem, collate_fn_map):
    if not collate_fn_map:
        return None
    if type(elem) in collate_fn_map:
        return collate_fn_map[type(elem)]
    for collate_type, handler in collate_fn_map.items():
        if isinstance(elem, collate_type):
            return handler
    return None


def _collate_sequences(batch, recurse):
    """Transpose a batch of equal-length sequences and collate each position. Tuples
    give a list (as in PyTorch, for backward compatibility)."""
    elem = batch[0]
    if any(len(sample) != len(elem) for sample in batch):
        raise RuntimeError("each element in list of batch should be of equal size")
    # each column is a tuple, as PyTorch passes it on (strings come back as that tuple)
    columns = [recurse(samples) for samples in zip(*batch)]
    if isinstance(elem, tuple):
        return columns
    return _rebuild_sequence(elem, columns)


def collate_tensor_fn(batch, *, collate_fn_map=None):
    return stack(batch, 0)


def collate_numpy_array_fn(batch, *, collate_fn_map=None):
    if not _is_numeric_array(batch[0]):
        raise TypeError(default_collate_err_msg_format.format(batch[0].dtype))
    return collate([as_tensor(b) for b in batch], collate_fn_map=collate_fn_map)


def collate_numpy_scalar_fn(batch, *, collate_fn_map=None):
    # through an array, so that float64 scalars stay float64 (a list would give float32)
    return as_tensor(np.array(batch))


def collate_float_fn(batch, *, collate_fn_map=None):
    return tensor(batch, dtype=float64)


def collate_int_fn(batch, *, collate_fn_map=None):
    return tensor(batch)


def collate_str_fn(batch, *, collate_fn_map=None):
    return batch


default_collate_fn_map = {
    Tensor: collate_tensor_fn,
    np.ndarray: collate_numpy_array_fn,
    (np.bool_, np.number, np.object_): collate_numpy_scalar_fn,
    float: collate_float_fn,
    int: collate_int_fn,
    str: collate_str_fn,
    bytes: collate_str_fn,
}


def default_collate(batch):
    """Stack a list of samples into a batch: tensors, numpy arrays and numbers become one
    tensor with a new leading dimension (Python floats float64, ints int64); strings stay a
    list; dicts, namedtuples, lists and tuples are collated field by field (tuples give
    lists)."""
    return collate(batch, collate_fn_map=default_collate_fn_map)
