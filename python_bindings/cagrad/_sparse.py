"""Sparse COO tensors: the small surface a graph network (a GCN) reaches for.

A sparse tensor here is a Python object, not a cagrad Tensor: it holds an int64 index
tensor (sparse_dim x nnz) and a dense values tensor (nnz), and every operation on it is a
composite of dense cagrad ops. So gradients reach the values (and any dense operand) and a
compiled backward captures these ops like any others, with no sparse kernels in C:

- to_dense: zeros, index_add of the values at the flat positions, reshape;
- sparse @ dense: index_select of the dense rows named by the column indices, scaled by the
  values, index_add into the rows named by the row indices;
- dense @ sparse: the same on the transposes;
- coalesce: numpy finds the unique positions (indices never need gradients), index_add sums
  the values of repeated positions.

Only COO tensors with scalar values (dense_dim() == 0) are supported; anything else on them
raises an error that names it and points to docs/python-api.md.
"""

import operator

import numpy as np

from . import _C
from ._dtype import layout

_DOCS = "docs/python-api.md"
_TensorBase = _C.TensorBase

sparse_coo = layout("sparse_coo")


def _cagrad():
    import cagrad  # lazily: this module is imported while the package is


    return cagrad


def _unsupported(what):
    return NotImplementedError(f"cagrad's sparse COO tensors do not support {what}: only "
                               f"the operations listed in {_DOCS} (section 'Sparse tensors "
                               f"and more example programs') are implemented")


# ------------------------------------------------------------------------- construction
def _as_index(indices):
    """indices as an int64 (sparse_dim, nnz) cagrad tensor, from a tensor, array or list."""
    ca = _cagrad()
    if isinstance(indices, _TensorBase):
        if indices.is_floating_point():
            raise RuntimeError(f"indices must be an int64 tensor, got {indices.dtype}")
        return indices.detach()
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iub":
        raise RuntimeError(f"indices must be an int64 tensor, got numpy {arr.dtype}")
    return ca.tensor(arr.astype(np.int64))


def _as_values(values, dtype):
    ca = _cagrad()
    if not isinstance(values, _TensorBase):
        values = ca.tensor(values, dtype=dtype)
    return values.to(dtype) if dtype is not None and values.dtype != dtype else values


def sparse_coo_tensor(indices, values, size=None, *, dtype=None, device=None,
                      requires_grad=False, check_invariants=None, is_coalesced=None):
    """torch.sparse_coo_tensor: a COO tensor of `values` at the columns of `indices`."""
    ca = _cagrad()
    if device is not None and str(ca.device(device)) != "cpu":
        raise RuntimeError(f"cagrad is a CPU library: sparse_coo_tensor(device={device!r})")
    idx = _as_index(indices)
    vals = _as_values(values, dtype)
    if idx.ndim != 2:
        raise RuntimeError(f"indices must be sparse_dim x nnz, but got: {list(idx.shape)}")
    if vals.ndim != 1:
        raise _unsupported("values with dense dimensions (hybrid COO tensors, values.dim() "
                           f"= {vals.ndim} != 1)")
    if idx.shape[1] != vals.shape[0]:
        raise RuntimeError(f"indices and values must have same nnz, but got nnz from indices: "
                           f"{idx.shape[1]}, nnz from values: {vals.shape[0]}")
    idx_np = idx.numpy()
    if size is None:  # PyTorch infers the smallest size that holds every index
        size = tuple(int(m) + 1 for m in idx_np.max(axis=1)) if idx_np.shape[1] else \
            (0,) * idx_np.shape[0]
    size = tuple(operator.index(s) for s in size)
    if len(size) != idx.shape[0]:
        raise RuntimeError(f"number of dimensions must be sparse_dim ({idx.shape[0]}) + "
                           f"dense_dim (0), but got {len(size)}")
    for d, s in enumerate(size):  # cheap, and an index past the size would corrupt to_dense
        if idx_np.shape[1] and (idx_np[d].min() < 0 or idx_np[d].max() >= s):
            bad = idx_np[d].max() if idx_np[d].max() >= s else idx_np[d].min()
            raise RuntimeError(f"size is inconsistent with indices: for dim {d}, size is {s} "
                               f"but found index {bad}")
    if requires_grad:
        vals.requires_grad_(True)
    return SparseCOOTensor(idx, vals, size, bool(is_coalesced))


def to_sparse(self, sparse_dim=None, *, layout=None, blocksize=None, dense_dim=None):
    """Tensor.to_sparse(): the nonzero entries of a dense tensor, coalesced."""
    if layout is not None and layout is not sparse_coo:
        raise _unsupported(f"to_sparse(layout={layout!r}) (COO only)")
    if blocksize is not None or dense_dim not in (None, 0):
        raise _unsupported("to_sparse with blocksize or dense_dim")
    if sparse_dim is not None and sparse_dim != self.ndim:
        raise _unsupported(f"to_sparse(sparse_dim={sparse_dim}) of a {self.ndim}-d tensor "
                           "(hybrid COO tensors)")
    ca = _cagrad()
    nz = np.nonzero(self.detach().numpy())  # row-major order: the result is coalesced
    idx = ca.tensor(np.stack(nz).astype(np.int64).reshape(self.ndim, -1))
    flat = np.ravel_multi_index(nz, self.shape) if self.ndim else np.zeros(len(nz[0]), int)
    vals = self.reshape(-1).index_select(0, ca.tensor(np.asarray(flat, dtype=np.int64)))
    out = SparseCOOTensor(idx, vals, tuple(self.shape), True)
    out._origin = self  # torch.mm & co. pass a dense, unmasked gradient back to it
    return out


# --------------------------------------------------------------------------- the tensor
class SparseCOOTensor:
    """A COO tensor: _indices (sparse_dim x nnz, int64), _values (nnz), a size."""

    is_sparse = True
    layout = sparse_coo
    is_sparse_csr = False
    # the dense tensor this one was made from by to_sparse(), when that tensor needs a
    # gradient: PyTorch's mm/spmm/matmul give a sparse operand a dense gradient (not one
    # masked to its pattern), which reaches that tensor as if the product had been dense
    _origin = None

    def __init__(self, indices, values, size, coalesced=False):
        self._idx, self._vals, self._size = indices, values, tuple(size)
        self._coalesced = coalesced

    # ---- metadata
    @property
    def shape(self):
        return _cagrad().Size(self._size)

    def size(self, dim=None):
        return self.shape if dim is None else self._size[dim]

    @property
    def dtype(self):
        return self._vals.dtype

    @property
    def device(self):
        return self._vals.device

    @property
    def is_cuda(self):
        return False

    @property
    def requires_grad(self):
        return self._vals.requires_grad

    @property
    def grad_fn(self):
        return self._vals.grad_fn

    @property
    def ndim(self):
        return len(self._size)

    def dim(self):
        return len(self._size)

    def sparse_dim(self):
        return len(self._size)

    def dense_dim(self):
        return 0

    def _nnz(self):
        return self._vals.shape[0]

    def numel(self):
        return int(np.prod(self._size, dtype=np.int64))

    def is_coalesced(self):
        return self._coalesced

    def is_floating_point(self):
        return self._vals.is_floating_point()

    # ---- the parts
    def _indices(self):
        return self._idx

    def _values(self):
        return self._vals.detach()  # as in PyTorch: a view that does not track gradients

    def indices(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get indices on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._idx

    def values(self):
        if not self._coalesced:
            raise RuntimeError("Cannot get values on an uncoalesced tensor, please call "
                               ".coalesce() first")
        return self._vals

    def _flat(self):
        """Each entry's position in the row-major flattened dense tensor (numpy)."""
        if self._nnz() == 0:
            return np.zeros(0, dtype=np.int64)
        return np.ravel_multi_index(tuple(self._idx.numpy()), self._size).astype(np.int64)

    def coalesce(self):
        """Sorted unique indices, the values of repeated ones summed (differentiable)."""
        if self._coalesced:
            return self
        ca = _cagrad()
        uniq, inverse = np.unique(self._flat(), return_inverse=True)
        idx = np.stack(np.unravel_index(uniq, self._size)).astype(np.int64)
        vals = ca.zeros(len(uniq), dtype=self.dtype).index_add(
            0, ca.tensor(inverse.reshape(-1).astype(np.int64)), self._vals)
        return SparseCOOTensor(ca.tensor(idx.reshape(len(self._size), -1)), vals,
                               self._size, True)

    def to_dense(self, dtype=None, *, masked_grad=None):
        ca = _cagrad()
        vals = self._vals if dtype is None else self._vals.to(dtype)
        out = ca.zeros(self.numel(), dtype=vals.dtype)
        if self._nnz():
            out = out.index_add(0, ca.tensor(self._flat()), vals)
        return out.reshape(self._size)

    # ---- conversions that keep the indices
    def _with_values(self, values, coalesced=None):
        keep = self._coalesced if coalesced is None else coalesced
        return SparseCOOTensor(self._idx, values, self._size, keep)

    def to(self, *args, **kwargs):
        if any(type(a) is layout for a in list(args) + list(kwargs.values())):
            raise _unsupported("to(layout=...)")
        out = self._with_values(self._vals.to(*args, **kwargs))
        if self._origin is not None:  # x.to_sparse().to(device) still passes mm's dense grad
            out._origin = self._origin.to(*args, **kwargs)
        return out

    def cpu(self):
        return self

    def float(self):
        return self.to(_cagrad().float32)

    def double(self):
        return self.to(_cagrad().float64)

    def long(self):
        return self.to(_cagrad().int64)

    def detach(self):
        return self._with_values(self._vals.detach())

    def clone(self):
        return self._with_values(self._vals.clone())

    def requires_grad_(self, requires_grad=True):
        self._vals.requires_grad_(requires_grad)
        return self

    def to_sparse(self, sparse_dim=None, **kw):
        return self

    def t(self):
        if self.ndim != 2:
            raise RuntimeError(f"t() expects a tensor with <= 2 sparse and 0 dense dimensions, "
                               f"but self is {self.ndim} sparse and 0 dense dimensions")
        return self.transpose(0, 1)

    def transpose(self, dim0, dim1):
        order = list(range(self.ndim))
        order[dim0], order[dim1] = order[dim1], order[dim0]
        size = tuple(self._size[d] for d in order)
        idx = self._idx.index_select(0, _cagrad().tensor(order))
        out = SparseCOOTensor(idx, self._vals, size, False)
        if self._origin is not None:
            out._origin = self._origin.transpose(dim0, dim1)
        return out

    @property
    def T(self):  # noqa: N802 (PyTorch's name)
        return self.t()

    # ---- arithmetic
    def __mul__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, _TensorBase)
                                               and other.ndim == 0):
            return self._with_values(self._vals * other)
        raise _unsupported(f"sparse * {type(other).__name__} (only a scalar factor)")

    __rmul__ = __mul__

    def __truediv__(self, other):
        if isinstance(other, (int, float)) or (isinstance(other, _TensorBase)
                                               and other.ndim == 0):
            return self._with_values(self._vals / other)
        raise _unsupported(f"sparse / {type(other).__name__} (only a scalar divisor)")

    def __neg__(self):
        return self._with_values(-self._vals)

    def __add__(self, other):
        if isinstance(other, SparseCOOTensor):
            return _sparse_add(self, other)
        if isinstance(other, _TensorBase):
            raise RuntimeError("add(sparse, dense) is not supported. Use add(dense, sparse) "
                               "instead.")
        raise _unsupported(f"sparse + {type(other).__name__}")

    def __radd__(self, other):  # dense + sparse is dense, as in PyTorch
        if isinstance(other, _TensorBase):
            return other + self.to_dense()
        raise _unsupported(f"{type(other).__name__} + sparse")

    def __sub__(self, other):
        if isinstance(other, SparseCOOTensor):
            return _sparse_add(self, -other)
        return self.__add__(other)  # the same refusal of sparse - dense

    def __rsub__(self, other):
        if isinstance(other, _TensorBase):
            return other - self.to_dense()
        raise _unsupported(f"{type(other).__name__} - sparse")

    def __matmul__(self, other):
        return matmul(self, other)

    def __rmatmul__(self, other):
        return matmul(other, self)

    def mm(self, mat2):
        return mm(self, mat2)

    def matmul(self, other):
        return matmul(self, other)

    def sum(self, dim=None, keepdim=False, dtype=None):
        return sparse_sum(self, dim, dtype=dtype)

    # ---- display and the rest
    def __len__(self):
        return self._size[0]

    def __repr__(self):
        pad = " " * len("tensor(indices=")
        idx = repr(self._idx).replace("\n", "\n" + pad)
        vals = repr(self._vals).replace("\n", "\n" + " " * len("       values="))
        size = "(" + ", ".join(map(str, self._size)) + ("," if len(self._size) == 1 else "") + ")"
        return (f"tensor(indices={idx},\n       values={vals},\n       size={size}, "
                f"nnz={self._nnz()}, layout={sparse_coo!r})")

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        raise AttributeError(f"'{name}' is not supported on cagrad's sparse COO tensors "
                             f"(see {_DOCS}, section 'Sparse tensors and more example "
                             f"programs'); use .to_dense() first")


def _sparse_add(a, b):
    ca = _cagrad()
    if a._size != b._size:
        raise RuntimeError(f"add: expected 'self' and 'other' to have same size, but self has "
                           f"size {list(a._size)} while other has size {list(b._size)}")
    dtype = ca.promote_types(a.dtype, b.dtype)
    if a._idx is b._idx:  # one pattern (s + s, s + 2 * s): PyTorch adds the values
        return a._with_values(a._vals.to(dtype) + b._vals.to(dtype))
    # else the entries of both, coalesced only when both were (as PyTorch's results are)
    idx = ca.cat([a._idx, b._idx], 1)
    vals = ca.cat([a._vals.to(dtype), b._vals.to(dtype)])
    out = SparseCOOTensor(idx, vals, a._size, False)
    return out.coalesce() if a._coalesced and b._coalesced else out


# -------------------------------------------------------------------------- products
def _sparse_dense_mm(s, d):
    """(m x k sparse) @ (k x n dense): scaled rows of d, added into the output's rows."""
    ca = _cagrad()
    if s.ndim != 2 or d.ndim != 2:
        raise RuntimeError(f"mm: expected 2-D matrices, got a {s.ndim}-D sparse and a "
                           f"{d.ndim}-D dense tensor")
    if s._size[1] != d.shape[0]:
        raise RuntimeError(f"mat1 and mat2 shapes cannot be multiplied ({s._size[0]}x"
                           f"{s._size[1]} and {d.shape[0]}x{d.shape[1]})")
    if s.dtype != d.dtype:
        raise RuntimeError(f"expected mat1 and mat2 to have the same dtype, but got: "
                           f"{s.dtype} != {d.dtype}")
    rows = d.index_select(0, s._idx[1]) * s._vals.unsqueeze(1)
    out = ca.zeros(s._size[0], d.shape[1], dtype=d.dtype)
    return out.index_add(0, s._idx[0], rows) if s._nnz() else out


def _dense_grad_origin(s):
    """The dense tensor s came from, if the product's gradient must reach it unmasked."""
    o = s._origin
    return o if o is not None and o.requires_grad and _cagrad().is_grad_enabled() else None


def mm(mat1, mat2):
    """torch.mm with either operand sparse COO; the result is dense."""
    if isinstance(mat1, SparseCOOTensor) and isinstance(mat2, SparseCOOTensor):
        raise _unsupported("sparse @ sparse")
    for s in (mat1, mat2):
        if isinstance(s, SparseCOOTensor) and _dense_grad_origin(s) is not None:
            a, b = (s._origin, mat2) if s is mat1 else (mat1, s._origin)
            return _cagrad()._functions.mm(a, b)  # equal values, PyTorch's gradient
    return masked_mm(mat1, mat2)


def masked_mm(mat1, mat2):
    """The product whose gradient to a sparse operand keeps to its pattern (sparse.mm)."""
    if isinstance(mat1, SparseCOOTensor) and isinstance(mat2, SparseCOOTensor):
        raise _unsupported("sparse @ sparse")
    if isinstance(mat1, SparseCOOTensor):
        return _sparse_dense_mm(mat1, mat2)
    if isinstance(mat2, SparseCOOTensor):  # A @ S = (S^T @ A^T)^T
        return _sparse_dense_mm(mat2.t(), mat1.t()).t()
    return _cagrad()._functions.mm(mat1, mat2)


def matmul(input, other):
    """torch.matmul / @ with a sparse COO operand: 2-D @ 2-D, or a 2-D sparse @ a vector."""
    if not isinstance(input, SparseCOOTensor) and not isinstance(other, SparseCOOTensor):
        return _cagrad()._functions.matmul(input, other)
    if isinstance(input, SparseCOOTensor) and isinstance(other, _TensorBase) and \
            other.ndim == 1:
        return mm(input, other.unsqueeze(1)).squeeze(1)
    return mm(input, other)


def spmm(input, mat2):
    """torch.spmm(sparse, dense): sparse @ dense, dense."""
    return mm(input, mat2)


def sparse_sum(input, dim=None, dtype=None):
    """torch.sparse.sum: a dense 0-d tensor over all dims, else a coalesced sparse tensor."""
    if not isinstance(input, SparseCOOTensor):
        raise TypeError(f"torch.sparse.sum expects a sparse COO tensor, got "
                        f"{type(input).__name__}")
    vals = input._vals if dtype is None else input._vals.to(dtype)
    if dim is None:
        return vals.sum()
    dims = {d % input.ndim for d in ((dim,) if isinstance(dim, int) else dim)}
    if len(dims) == input.ndim:
        return vals.sum()
    keep = [d for d in range(input.ndim) if d not in dims]
    idx = input._idx.index_select(0, _cagrad().tensor(keep))
    size = tuple(input._size[d] for d in keep)
    return SparseCOOTensor(idx, vals, size, False).coalesce()


# ------------------------------------------------------------ hooks into the package
def sparse_aware(dense_fn, sparse_fn):
    """torch.<name> that takes sparse operands to sparse_fn, and the rest to dense_fn."""

    def fn(*args, **kwargs):
        if any(isinstance(a, SparseCOOTensor) for a in args):
            return sparse_fn(*args, **kwargs)
        return dense_fn(*args, **kwargs)

    fn.__name__, fn.__qualname__, fn.__doc__ = dense_fn.__name__, dense_fn.__name__, \
        dense_fn.__doc__
    return fn


def install(tensor_cls):
    """Dense tensors answer is_sparse (False), layout (strided) and to_sparse()."""
    from ._dtype import strided

    tensor_cls.is_sparse = property(lambda self: False)
    tensor_cls.layout = property(lambda self: strided)
    tensor_cls.to_sparse = to_sparse
