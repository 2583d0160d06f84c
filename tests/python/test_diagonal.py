"""torch.diagonal / Tensor.diagonal for any number of dims (offset, negative and reversed
dims) and torch.diag_embed, against torch 2.13: values and gradients in float32 and
float64, eagerly and under compiled autograd, finite differences in float64, errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import ca, needs_cagrad, to_np

pytestmark = needs_cagrad

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)

X4 = np.random.default_rng(0).standard_normal((2, 3, 4, 5))
V3 = np.random.default_rng(1).standard_normal((2, 3, 4))

DIAGONAL_ARGS = [(0, 0, 1), (0, -2, -1), (1, -2, -1), (-2, -1, -2), (2, 1, 3), (-1, 3, 0),
                 (3, 2, 0), (7, 0, 1), (-7, 1, 2)]


@pytest.mark.parametrize("offset,dim1,dim2", DIAGONAL_ARGS)
@DTYPE
@COMPILED
def test_diagonal_matches_torch(offset, dim1, dim2, dtype, compiled):
    def fn(L, x):
        return x.diagonal(offset, dim1, dim2) * 2 + L.diagonal(x, offset=offset, dim1=dim1,
                                                                dim2=dim2)
    check_against_torch(fn, [X4], dtype, compiled=compiled)


@pytest.mark.parametrize("offset,dim1,dim2", [(0, -2, -1), (1, 0, 2), (-1, 2, 0), (2, -1, 1)])
@DTYPE
@COMPILED
def test_diag_embed_matches_torch(offset, dim1, dim2, dtype, compiled):
    def fn(L, v):
        return L.diag_embed(v, offset, dim1, dim2) + v.diag_embed(offset, dim1, dim2)
    check_against_torch(fn, [V3], dtype, compiled=compiled)


@DTYPE
def test_diagonal_keeps_2d_behaviour_and_trace(dtype):
    a = X4[0, 0].astype(dtype)
    for offset in (-3, -1, 0, 2, 5):
        np.testing.assert_array_equal(to_np(ca.tensor(a).diagonal(offset)),
                                      to_np(torch.tensor(a).diagonal(offset)))
    check_against_torch(lambda L, x: L.trace(x) + L.diag(x, 1).sum(), [a], dtype)


def test_diagonal_and_diag_embed_finite_differences():
    check_numeric_gradient(lambda L, x: x.diagonal(1, -1, 0), [X4])
    check_numeric_gradient(lambda L, v: L.diag_embed(v, -1, 0, 2), [V3])


def test_diagonal_of_zeros_batched_is_the_briefs_example():
    assert tuple(ca.zeros(2, 3, 3).diagonal(dim1=-2, dim2=-1).shape) == (2, 3)


ERRORS = {
    "same_dims": lambda L: L.zeros(2, 3).diagonal(dim1=0, dim2=0),
    "same_dims_negative": lambda L: L.zeros(2, 3).diagonal(dim1=0, dim2=-2),
    "one_d": lambda L: L.zeros(3).diagonal(),
    "zero_d": lambda L: L.zeros(()).diagonal(),
    "dim_out_of_range": lambda L: L.zeros(2, 3).diagonal(dim1=2),
    "embed_0d": lambda L: L.diag_embed(L.zeros(())),
    "embed_same_dims": lambda L: L.diag_embed(L.zeros(3), dim1=0, dim2=0),
    "embed_out_of_range": lambda L: L.diag_embed(L.zeros(3), dim1=3),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    def error(L):
        try:
            ERRORS[name](L)
        except Exception as e:  # noqa: BLE001 - compared below
            return type(e).__name__, str(e)
        return None
    assert error(ca) == error(torch) is not None
