"""Vector and tensor products that PyTorch has beside matmul: dot, vdot, inner, ger, addr,
tensordot and chain_matmul, as composites of matmul, so their gradients and compiled
capture come from matmul's."""
import functools
import operator

from . import _functions
from ._ops import _SCALAR_TYPE


def dot(input, other, *, out=None):
    """The inner product of two 1-D tensors of the same size and dtype (a 0-d tensor)."""
    if out is not None:
        raise NotImplementedError("dot(out=...) is not supported; see docs/python-api.md")
    if input.dim() != 1 or other.dim() != 1:
        raise RuntimeError(f"1D tensors expected, but got {input.dim()}D and {other.dim()}D "
                           f"tensors")
    if input.dtype != other.dtype:
        raise RuntimeError(f"dot : expected both vectors to have same dtype, but found "
                           f"{_SCALAR_TYPE[input.dtype]} and {_SCALAR_TYPE[other.dtype]}")
    n, m = input.shape[0], other.shape[0]
    if n != m:
        raise RuntimeError(f"inconsistent tensor size, expected tensor [{n}] and src [{m}] to "
                           f"have the same number of elements, but got {n} and {m} elements "
                           f"respectively")
    if not input.dtype.is_floating_point:  # no integer GEMM: exact products summed
        return (input * other).sum()
    return _functions.matmul(input, other)


vdot = dot  # no complex dtypes: the conjugate is the tensor itself


def inner(input, other, *, out=None):
    """Sum over the last dims: shape input.shape[:-1] + other.shape[:-1]; a 0-d operand
    scales the other."""
    if out is not None:
        raise NotImplementedError("inner(out=...) is not supported; see docs/python-api.md")
    if input.dim() == 0 or other.dim() == 0:
        return input * other
    if input.shape[-1] != other.shape[-1]:
        raise RuntimeError(f"inner() the last dimension must match on both input tensors but "
                           f"got shapes {list(input.shape)} and {list(other.shape)}")
    return tensordot(input, other, dims=([input.dim() - 1], [other.dim() - 1]))


def _dims_lists(a, b, dims):
    if isinstance(dims, int) or (hasattr(dims, "dim") and dims.dim() == 0):
        k = int(dims)
        if k < 0:
            raise RuntimeError(f"tensordot expects dims >= 0, but got dims={k}")
        if k > a.dim() or k > b.dim():
            raise RuntimeError(f"tensordot expects dims < ndim_a or ndim_b, but got dims={k}")
        return list(range(a.dim() - k, a.dim())), list(range(k))
    da, db = dims[0], dims[1]
    da = [int(d) for d in (da.tolist() if hasattr(da, "tolist") else
                           (da if isinstance(da, (list, tuple)) else [da]))]
    db = [int(d) for d in (db.tolist() if hasattr(db, "tolist") else
                           (db if isinstance(db, (list, tuple)) else [db]))]
    if len(da) != len(db):
        raise RuntimeError("both dimension lists should have same length")
    return [d % a.dim() if a.dim() else d for d in da], [d % b.dim() if b.dim() else d for d in db]


def tensordot(a, b, dims=2, out=None):
    """Contract dims of a with dims of b: the free dims of a, then those of b."""
    if out is not None:
        raise NotImplementedError("tensordot(out=...) is not supported; see docs/python-api.md")
    da, db = _dims_lists(a, b, dims)
    for i, j in zip(da, db):
        if a.shape[i] != b.shape[j]:
            raise RuntimeError(f"contracted dimensions need to match, but first has size "
                               f"{a.shape[i]} in dim {i - a.dim() if dims == len(da) else i} "
                               f"and second has size {b.shape[j]} in dim {j}")
    free_a = [d for d in range(a.dim()) if d not in da]
    free_b = [d for d in range(b.dim()) if d not in db]
    k = functools.reduce(operator.mul, [a.shape[d] for d in da], 1)
    m = functools.reduce(operator.mul, [a.shape[d] for d in free_a], 1)
    n = functools.reduce(operator.mul, [b.shape[d] for d in free_b], 1)
    left = a.permute(*(free_a + da)).reshape(m, k)
    right = b.permute(*(db + free_b)).reshape(k, n)
    prod = _functions.matmul(left, right) if a.dtype.is_floating_point else \
        (left.unsqueeze(2) * right.unsqueeze(0)).sum(1)
    return prod.reshape(*([a.shape[d] for d in free_a] + [b.shape[d] for d in free_b]))


def ger(input, vec2):
    """outer(input, vec2) of two 1-D tensors (torch's older name)."""
    for name, t in (("self", input), ("vec2", vec2)):
        if t.dim() != 1:
            raise RuntimeError(f"outer: Expected 1-D argument {name}, but got {t.dim()}-D")
    return input.reshape(-1, 1) * vec2.reshape(1, -1)


def addr(input, vec1, vec2, *, beta=1, alpha=1, out=None):
    """beta * input + alpha * outer(vec1, vec2); input broadcasts to the outer product."""
    if out is not None:
        raise NotImplementedError("addr(out=...) is not supported; see docs/python-api.md")
    prod = ger(vec1, vec2)
    base = input.expand(prod.shape[0], prod.shape[1])  # torch's error when it cannot
    if beta == 0:  # beta 0 ignores input, NaN included, as torch
        return prod * alpha if alpha != 1 else prod
    return base * beta + (prod * alpha if alpha != 1 else prod) if beta != 1 else \
        base + (prod * alpha if alpha != 1 else prod)


def chain_matmul(*matrices, out=None):
    """matrices[0] @ matrices[1] @ ... (torch's deprecated name for linalg.multi_dot)."""
    if out is not None:
        raise NotImplementedError("chain_matmul(out=...) is not supported; see "
                                  "docs/python-api.md")
    if not matrices:
        raise RuntimeError("chain_matmul(): Expected one or more matrices")
    for i, t in enumerate(matrices):
        if t.dim() != 2:
            raise RuntimeError(f"Tensor dimension is {t.dim()}, expected 2 instead.")
    if len(matrices) == 1:
        return matrices[0].clone()
    return functools.reduce(_functions.matmul, matrices)
