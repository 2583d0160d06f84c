"""torch's dtype promotion where programs meet it most: cat and stack of tensors of
different dtypes (bool < int64 < float32 < float64), integer powers (int64 and bool bases
and exponents give int64; a float exponent the default float dtype) and clamp of int64 and
bool tensors, compared with torch 2.13 (values, dtypes, errors, and gradients through a
promoted cat)."""

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, same_outcome

MASK, LONGS, FLOATS = [True, False, True], [3, -4, 5], [1.5, -2.0, 0.25]


def operands(L):
    return (L.tensor(MASK), L.tensor(LONGS), L.tensor(FLOATS),
            L.tensor(FLOATS, dtype=L.float64))


def same(make):
    """make(L) gives the same dtype and values in both libraries."""
    c, t = make(ca), make(torch)
    assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    assert_close(c, t, rtol=0, atol=0)


@pytest.mark.parametrize("pick", [(0, 2), (1, 2), (0, 1), (2, 3), (0, 3), (1, 3), (0, 1, 2, 3)])
def test_cat_and_stack_promote_like_torch(pick):
    same(lambda L: L.cat([operands(L)[k] for k in pick]))
    same(lambda L: L.stack([operands(L)[k] for k in pick], dim=1))


def test_gradients_flow_through_a_promoted_cat():
    grads = {}
    for L in (ca, torch):
        x = L.tensor(FLOATS, requires_grad=True)
        y = L.tensor(FLOATS, dtype=L.float64, requires_grad=True)
        out = L.cat([x, y, L.tensor(LONGS)])
        (out * L.arange(9, dtype=L.float64)).sum().backward()
        grads[L] = (x.grad, y.grad)
    for got, want in zip(grads[ca], grads[torch]):
        assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1]
        assert_close(got, want, rtol=0, atol=0)


POWERS = [
    lambda L: L.tensor(LONGS) ** 3,
    lambda L: L.tensor(LONGS) ** L.tensor([0, 2, 3]),
    lambda L: 2 ** L.tensor([0, 5, 31]),
    lambda L: L.tensor(MASK) ** 2,
    lambda L: 3 ** L.tensor(MASK),
    lambda L: L.tensor(MASK) ** True,
    lambda L: L.tensor(LONGS) ** 0.5,
    lambda L: 2.0 ** L.tensor(LONGS),
    lambda L: L.pow(L.tensor(LONGS), 2),
    lambda L: L.tensor([3, -1, 1, 0, -2]) ** L.tensor([-1, -3, -2, -1, -2]),
]


@pytest.mark.parametrize("k", range(len(POWERS)))
def test_integer_powers_like_torch(k):
    c, t = POWERS[k](ca), POWERS[k](torch)
    assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
    np.testing.assert_allclose(np.asarray(c), t.numpy(), rtol=1e-6, equal_nan=True)


@pytest.mark.parametrize("make", [
    lambda L: L.tensor(LONGS) ** -1,
    lambda L: L.tensor(MASK) ** L.tensor(MASK),
])
def test_integer_power_errors_like_torch(make):
    same_outcome(make)


@pytest.mark.parametrize("make", [
    lambda L: L.tensor(LONGS).clamp(-3, 4),
    lambda L: L.tensor(LONGS).clamp(min=0),
    lambda L: L.tensor(LONGS).clamp(max=-1),
    lambda L: L.tensor(MASK).clamp(0, 1),
    lambda L: L.clamp(L.tensor(LONGS), -1, 1),
])
def test_clamp_of_int64_and_bool_like_torch(make):
    same(make)
