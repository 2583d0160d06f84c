"""cagrad.save and cagrad.load: checkpoints in PyTorch's own zip format, so that files
move both ways between cagrad and torch.save/torch.load.

A checkpoint is an uncompressed zip archive holding, under one top-level folder:
``data.pkl`` (the pickled object, tensors replaced by references to storages),
``data/<key>`` (each storage's raw little-endian bytes, aligned to 64 bytes in the file),
``byteorder``, ``version`` and ``.data/serialization_id``. The pickle names torch's own
rebuild functions and types (``torch._utils._rebuild_tensor_v2``, ``torch.FloatStorage``,
``torch.Size``, ...), written as names without importing torch; on loading, cagrad maps
those names onto its own tensors, Parameters, dtypes and Sizes.
"""

import _compat_pickle
import codecs
import collections
import contextlib
import io
import os
import pickle
import secrets
import zipfile

import numpy as np

from . import _dtype
from ._pickle_torch import (StorageType, TorchPickler, collect_tensors, plan_storages,
                            torch_global)

__all__ = ["save", "load", "add_safe_globals", "get_safe_globals", "clear_safe_globals",
           "safe_globals"]

_API_DOC = "docs/python-api.md"
_ALIGNMENT = 64  # torch's default storage alignment (torch.utils.serialization.config)
_VERSION = "3\n"  # the archive format version torch 2.13 writes and reads


# ------------------------------------------------------------------------------- saving
def save(obj, f, pickle_module=pickle, pickle_protocol=2, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Save obj (tensors, Parameters, state_dicts, containers of them, or any picklable
    object) to f, a path, an os.PathLike or a writable binary file object, in the format
    torch.save writes, so that torch.load reads it."""
    if pickle_module is not pickle:
        raise NotImplementedError(f"cagrad.save() supports pickle_module=pickle only, not "
                                  f"{pickle_module!r}; see {_API_DOC}")
    if not _use_new_zipfile_serialization:
        raise NotImplementedError("cagrad.save() writes the zip format only "
                                  "(_use_new_zipfile_serialization=True); the legacy format "
                                  f"is not supported, see {_API_DOC}")
    tensors = collect_tensors(obj, pickle_protocol)
    storages = plan_storages(tensors)
    buffer = io.BytesIO()
    TorchPickler(buffer, pickle_protocol, storages).dump(obj)
    with _open_for(f, "wb") as stream:
        _write_archive(stream, _archive_name(f), buffer.getvalue(), storages,
                       not _disable_byteorder_record)


def _archive_name(f):
    # torch names the top-level folder after the file (model.pt -> model/), else "archive"
    if isinstance(f, (str, os.PathLike)):
        stem = os.path.splitext(os.path.basename(os.fspath(f)))[0]
        if stem and stem.isascii():
            return stem
    return "archive"


@contextlib.contextmanager
def _open_for(f, mode):
    if isinstance(f, (str, os.PathLike)):
        parent = os.path.dirname(os.path.abspath(os.fspath(f)))
        if "w" in mode and not os.path.isdir(parent):
            raise RuntimeError(f"Parent directory {parent} does not exist.")  # as torch.save
        with open(f, mode) as stream:
            yield stream
    else:
        needed = "write" if "w" in mode else "read"
        if not hasattr(f, needed):
            raise AttributeError(f"expected 'f' to be string, path, or a file-like object with "
                                 f"a '{needed}' attribute, got {type(f).__name__}")
        yield f


class _StreamFromHere:
    """A seekable stream seen from its current position: zipfile then writes offsets from
    the archive's start, as torch's reader (miniz) requires, even inside a larger file."""

    def __init__(self, stream):
        self.stream = stream
        self.start = stream.tell()

    def write(self, data):
        return self.stream.write(data)

    def tell(self):
        return self.stream.tell() - self.start

    def seek(self, offset, whence=0):
        return self.stream.seek(offset + (self.start if whence == 0 else 0),
                                whence) - self.start

    def seekable(self):
        return True

    def flush(self):
        self.stream.flush()


class _WriteOnly:
    """A stream that can only write (a pipe, a socket file): zipfile also wants flush()."""

    def __init__(self, stream):
        self.stream = stream

    def write(self, data):
        return self.stream.write(data)

    def flush(self):
        getattr(self.stream, "flush", lambda: None)()


def _write_archive(stream, name, pickled, storages, byteorder_record):
    seekable = getattr(stream, "seekable", lambda: False)()
    with zipfile.ZipFile(_StreamFromHere(stream) if seekable else _WriteOnly(stream), "w",
                         zipfile.ZIP_STORED) as archive:
        start = archive.fp.tell()  # 0, but for a stream that cannot tell where it is
        _write_record(archive, start, f"{name}/data.pkl", pickled)
        if byteorder_record:
            _write_record(archive, start, f"{name}/byteorder", b"little")
        _write_record(archive, start, f"{name}/.storage_alignment", str(_ALIGNMENT).encode())
        # no ".format_version": its "1" tells torch it may compute storage offsets from the
        # data descriptors miniz writes after each record, which zipfile does not write
        for storage in storages.in_key_order():
            _write_record(archive, start, f"{name}/data/{storage.key}", storage.payload())
        _write_record(archive, start, f"{name}/version", _VERSION.encode())
        serialization_id = str(secrets.randbits(128)).zfill(40)
        _write_record(archive, start, f"{name}/.data/serialization_id",
                      serialization_id.encode())


def _write_record(archive, start, name, data):
    """Store data uncompressed, its first byte at a multiple of _ALIGNMENT from the start of
    the archive (torch aligns storages so that it can map them into memory): the padding
    goes into the local header's extra field, as torch's writer does."""
    info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
    info.compress_type = zipfile.ZIP_STORED
    header_end = archive.fp.tell() - start + 30 + len(name.encode())
    if len(data) * 1.05 > zipfile.ZIP64_LIMIT:
        header_end += 20  # zipfile adds a zip64 field to the local header of such a record
    padding = -header_end % _ALIGNMENT
    if padding:
        padding += _ALIGNMENT if padding < 4 else 0  # room for the field's own 4-byte header
        info.extra = b"FB" + (padding - 4).to_bytes(2, "little") + b"Z" * (padding - 4)
    archive.writestr(info, data)


# ------------------------------------------------------------------------------ loading
def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None,
         **pickle_load_args):
    """Load an object that cagrad.save or torch.save wrote to f (a path, an os.PathLike or
    a readable binary file object). Tensors come back as cagrad tensors (float32, float64,
    int64), views of one storage as views of one shared buffer, nn.Parameters as cagrad
    Parameters.

    weights_only=True (the default, as in torch) unpickles only tensors, containers,
    numbers, strings, dtypes, Sizes, devices and the globals allowed by add_safe_globals;
    weights_only=False unpickles any object (only for files from a trusted source).
    mmap=True (f a path) maps the file: tensors view its pages, copy-on-write.
    """
    if weights_only is None:
        weights_only = pickle_module is None
    if pickle_module not in (None, pickle):
        raise NotImplementedError(f"cagrad.load() supports pickle_module=pickle only, not "
                                  f"{pickle_module!r}; see {_API_DOC}")
    if weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is "
                           "specified")
    if mmap and not isinstance(f, (str, os.PathLike)):
        raise ValueError("f must be a file path in order to use the mmap argument")
    _check_map_location(map_location)
    if "encoding" not in pickle_load_args:
        pickle_load_args["encoding"] = "utf-8"
    with _open_for(f, "rb") as stream:
        archive = _open_archive(stream)
        with archive:
            # mmap: tensors view the file's pages, copied on write (torch's MAP_PRIVATE)
            mapped = np.memmap(f, mode="c") if mmap else None
            return _unpickle_archive(archive, mapped, weights_only, map_location,
                                     pickle_load_args)


def _check_map_location(map_location):
    """None, 'cpu' or a cpu device; a dict whose targets are the CPU (e.g. {'cuda:0':
    'cpu'}); anything else names a device cagrad does not have."""
    if isinstance(map_location, dict):
        for target in map_location.values():
            _check_map_location(target)
        return
    if callable(map_location) and not isinstance(map_location, _dtype.device):
        raise NotImplementedError(f"cagrad.load() does not support a callable map_location: "
                                  f"cagrad keeps every storage on the CPU; pass "
                                  f"map_location='cpu' or None (see {_API_DOC})")
    if map_location is not None and str(map_location) not in ("cpu", "cpu:0"):
        _dtype.check_device(map_location)  # raises, naming the device


def _open_archive(stream):
    if not getattr(stream, "seekable", lambda: False)():
        stream = io.BytesIO(stream.read())
    start = stream.tell()
    magic = stream.read(4)
    stream.seek(start)
    if magic != b"PK\x03\x04":
        raise RuntimeError("cagrad.load() reads the zip checkpoints that torch.save has "
                           "written since PyTorch 1.6 and cagrad.save writes; this file is "
                           "not one (the legacy torch.save format is not supported, see "
                           f"{_API_DOC})")
    return zipfile.ZipFile(stream)


def _records(archive):
    """{record name below the top-level folder: ZipInfo}."""
    records = {}
    for info in archive.infolist():
        _, _, rest = info.filename.partition("/")
        records[rest] = info
    if "data.pkl" not in records:
        what = ("a TorchScript archive (torch.jit.save)" if "constants.pkl" in records
                else "a zip file without data.pkl")
        raise RuntimeError(f"cagrad.load() cannot read {what}: it reads checkpoints that "
                           f"torch.save or cagrad.save wrote (see {_API_DOC})")
    return records


def _record_bytes(archive, info, mapped):
    """A record's bytes as a writable uint8 array: a copy, or a view of the mapped file."""
    if mapped is None or info.compress_type != zipfile.ZIP_STORED:
        return np.frombuffer(bytearray(archive.read(info)), np.uint8)
    # the data follows the local header, whose name and extra field lengths are its last
    # four bytes (the central directory's extra field may differ from the local one)
    lengths = mapped[info.header_offset + 26:info.header_offset + 30].view("<u2")
    start = info.header_offset + 30 + int(lengths[0]) + int(lengths[1])
    return mapped[start:start + info.file_size]


def _unpickle_archive(archive, mapped, weights_only, map_location, pickle_load_args):
    records = _records(archive)
    byteorder = "little"
    if "byteorder" in records:
        byteorder = archive.read(records["byteorder"]).decode()
    storages = {}

    def storage_for(saved_id):
        if not (isinstance(saved_id, tuple) and len(saved_id) == 5 and saved_id[0] == "storage"
                and isinstance(saved_id[1], StorageType)):
            raise pickle.UnpicklingError(f"data.pkl refers to {saved_id!r}, which is not a "
                                         f"storage of this checkpoint")
        _, storage_type, key, location, numel = saved_id
        if key not in storages:
            _check_location(location, map_location)
            raw = _record_bytes(archive, records[f"data/{key}"], mapped)
            storages[key] = _LoadedStorage(storage_type, raw, numel, byteorder)
        return storages[key]

    unpickler = _CheckpointUnpickler(io.BytesIO(archive.read(records["data.pkl"])),
                                     weights_only, **pickle_load_args)
    unpickler.persistent_load = storage_for
    return unpickler.load()


def _check_location(location, map_location):
    if location.startswith("cpu") or map_location is not None:
        return  # a map_location has been checked to point to the CPU
    raise RuntimeError(f"Attempting to deserialize object on device {location!r}, but cagrad "
                       f"runs on the CPU only. Use cagrad.load with map_location='cpu' to "
                       f"map the storages to the CPU.")


class _LoadedStorage:
    """One storage of the checkpoint, as a writable numpy array that tensors view."""

    def __init__(self, storage_type, raw, numel, byteorder):
        if storage_type.dtype is None:
            raise TypeError(f"cagrad.load(): the checkpoint holds a tensor of dtype "
                            f"torch.{storage_type.torch_dtype}, which cagrad does not have "
                            f"(it has float32, float64, int64 and bool); convert it in PyTorch, "
                            f"e.g. with .float(), before saving")
        self.dtype = storage_type.dtype
        itemsize = self.dtype.itemsize
        if raw.size != numel * itemsize:
            raise RuntimeError(f"corrupt checkpoint: a storage holds {raw.size} bytes, its "
                               f"record says {numel} elements of {itemsize} bytes")
        if raw.ctypes.data % itemsize:  # a mapped record that is not aligned: copy it
            raw = raw.copy()
        array = raw.view(self.dtype._numpy)
        self.array = array.byteswap() if byteorder != "little" else array


# ------------------------------------------------------------------------ unpickling
# globals that weights_only=True allows beside the checkpoint's torch names
_SAFE_BUILTINS = {
    ("collections", "OrderedDict"): collections.OrderedDict,
    ("collections", "Counter"): collections.Counter,
    ("builtins", "set"): set,
    ("builtins", "bytearray"): bytearray,
    ("builtins", "complex"): complex,
    ("_codecs", "encode"): codecs.encode,  # how protocol 2 pickles bytes
}
_user_safe_globals = []


def add_safe_globals(safe_globals):
    """Allow these classes/functions in weights_only loads (torch's
    torch.serialization.add_safe_globals); only for ones you trust."""
    _user_safe_globals.extend(safe_globals)


def get_safe_globals():
    return list(_user_safe_globals)


def clear_safe_globals():
    _user_safe_globals.clear()


@contextlib.contextmanager
def safe_globals(safe_globals):
    """A context manager that allows these globals in weights_only loads inside it."""
    before = list(_user_safe_globals)
    add_safe_globals(safe_globals)
    try:
        yield
    finally:
        _user_safe_globals[:] = before


def _user_global(module, name):
    for obj in _user_safe_globals:
        if isinstance(obj, tuple):  # (obj, "module.name") as torch accepts
            obj, full_name = obj
        else:
            full_name = f"{obj.__module__}.{obj.__qualname__}"
        if full_name == f"{module}.{name}":
            return obj
    return None


class _CheckpointUnpickler(pickle.Unpickler):
    def __init__(self, file, weights_only, **kwargs):
        super().__init__(file, **kwargs)
        self.weights_only = weights_only

    def find_class(self, module, name):
        # protocol 2 (torch's default) names builtins as Python 2 did: __builtin__.set
        module, name = _compat_pickle.NAME_MAPPING.get((module, name), (module, name))
        module = _compat_pickle.IMPORT_MAPPING.get(module, module)
        if module == "torch" or module.startswith("torch."):
            return torch_global(module, name)
        found = _SAFE_BUILTINS.get((module, name)) or _user_global(module, name)
        if found is not None:
            return found
        if self.weights_only:
            raise pickle.UnpicklingError(
                f"Weights only load failed: the checkpoint names the global {module}.{name}, "
                f"which weights_only=True does not allow (it unpickles only tensors, "
                f"containers, numbers, strings, dtypes, Sizes and devices). If you trust the "
                f"file's source, either load it with weights_only=False (which can run "
                f"arbitrary code), or allow this global with "
                f"cagrad.serialization.add_safe_globals([{module}.{name}]) or the "
                f"cagrad.serialization.safe_globals([...]) context manager.")
        return super().find_class(module, name)

