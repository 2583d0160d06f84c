"""torch.sparse: the COO operations cagrad has (see _sparse.py and docs/python-api.md).

`torch.sparse.mm(sparse, dense)` and `torch.sparse.sum(sparse, dim)` are composites of dense
ops, differentiable with respect to the dense operand and to the sparse tensor's values.
"""

import warnings

from ._sparse import SparseCOOTensor, sparse_coo_tensor, sparse_sum
from ._sparse import masked_mm as _mm

__all__ = ["mm", "sum", "SparseCOOTensor", "FloatTensor", "DoubleTensor", "LongTensor"]


def mm(mat1, mat2, reduce=None):
    """torch.sparse.mm(sparse, dense): the dense product (reduce='sum' only). As in
    PyTorch, the gradient to a sparse operand keeps to its pattern, unlike torch.mm's."""
    if reduce not in (None, "sum"):
        raise NotImplementedError(f"cagrad's torch.sparse.mm does not support "
                                  f"reduce={reduce!r} (see docs/python-api.md)")
    return _mm(mat1, mat2)


def sum(input, dim=None, dtype=None):  # noqa: A001 (torch.sparse.sum, as in PyTorch)
    """torch.sparse.sum: all dims give a dense 0-d tensor, some dims a sparse tensor."""
    return sparse_sum(input, dim, dtype=dtype)


def _legacy(name):
    """torch.sparse.FloatTensor(indices, values, size) and kin (pygcn's spelling). As in
    PyTorch 2.13 the values keep their dtype whatever the name, with its deprecation
    warning."""

    def make(indices, values, size=None):
        warnings.warn("torch.sparse.SparseTensor(indices, values, shape, *, device=) is "
                      "deprecated.  Please use torch.sparse_coo_tensor(indices, values, "
                      "shape, dtype=, device=).", UserWarning, stacklevel=2)
        return sparse_coo_tensor(indices, values, size)

    make.__name__ = make.__qualname__ = name
    return make


FloatTensor, DoubleTensor, LongTensor = (_legacy(n) for n in
                                         ("FloatTensor", "DoubleTensor", "LongTensor"))
