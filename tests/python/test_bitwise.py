"""Bitwise ops and operators (& | ^ ~ << >>) on int64 and bool tensors against torch 2.13:
values, result dtypes, in-place forms, shifts past 63, and torch's errors for floats."""

import operator

import numpy as np
import pytest
import torch

from helpers import assert_close, ca, error_of

A = np.array([5, -6, 7, 0, 2**62 + 3, -(2**40)])
B = np.array([3, 12, -1, 9, 2**61, 7])
SHIFTS = np.array([1, 2, 63, 64, 70, -1])
BOOL_A = np.array([True, False, True, False, True, False])
BOOL_B = np.array([True, True, False, False, True, False])


def _t(L, arr):
    return L.tensor(arr)


BINARY = {
    "and": (operator.and_, "bitwise_and"),
    "or": (operator.or_, "bitwise_or"),
    "xor": (operator.xor, "bitwise_xor"),
}


def _both(fn):
    return fn(ca), fn(torch)


@pytest.mark.parametrize("name", sorted(BINARY))
def test_binary_ops_match_torch(name):
    op, fname = BINARY[name]
    cases = [
        lambda L: op(_t(L, A), _t(L, B)),
        lambda L: op(_t(L, A), 6),
        lambda L: op(6, _t(L, A)),
        lambda L: op(_t(L, BOOL_A), _t(L, BOOL_B)),
        lambda L: op(_t(L, BOOL_A), True),
        lambda L: op(_t(L, BOOL_A), 1),  # a Python int makes int64
        lambda L: op(_t(L, BOOL_A), _t(L, A)),  # bool with int64 promotes
        lambda L: getattr(L, fname)(_t(L, A), _t(L, B)),
        lambda L: getattr(L, fname)(_t(L, A), 3),
        lambda L: getattr(_t(L, A), fname)(_t(L, B[:1])),  # broadcasting
        lambda L: op(_t(L, A.reshape(2, 3)), _t(L, B[:3])),
    ]
    for case in cases:
        c, t = _both(case)
        assert str(c.dtype).split(".")[-1] == str(t.dtype).split(".")[-1]
        assert_close(c, t)


def test_not_and_invert_match_torch():
    for case in (lambda L: ~_t(L, A), lambda L: ~_t(L, BOOL_A),
                 lambda L: L.bitwise_not(_t(L, A)), lambda L: _t(L, BOOL_A).bitwise_not()):
        c, t = _both(case)
        assert_close(c, t)


@pytest.mark.parametrize("op", [operator.lshift, operator.rshift])
def test_shifts_match_torch_including_out_of_range_amounts(op):
    small = np.array([5, -6, 7, 1, -1, 3])
    for case in (lambda L: op(_t(L, small), _t(L, SHIFTS)), lambda L: op(_t(L, A), 3),
                 lambda L: op(2, _t(L, np.abs(SHIFTS) % 60)),
                 lambda L: op(_t(L, BOOL_A), 1)):
        c, t = _both(case)
        assert_close(c, t)
    name = "bitwise_left_shift" if op is operator.lshift else "bitwise_right_shift"
    c, t = _both(lambda L: getattr(L, name)(_t(L, small), _t(L, SHIFTS)))
    assert_close(c, t)


def test_in_place_forms_match_torch():
    def run(L):
        a = _t(L, A.copy())
        a &= _t(L, B)
        b = _t(L, A.copy())
        b |= 12
        c = _t(L, A.copy())
        c ^= _t(L, B)
        d = _t(L, A.copy() % 1000)
        d <<= 2
        e = _t(L, A.copy())
        e >>= 3
        f = _t(L, BOOL_A.copy())
        f &= _t(L, BOOL_B)
        g = _t(L, A.copy())
        same = g.bitwise_xor_(_t(L, B)) is g
        h = _t(L, A.copy())
        h.bitwise_not_()
        i = _t(L, A.copy())
        i.bitwise_left_shift_(1)
        return same, a, b, c, d, e, f, g, h, i
    c, t = run(ca), run(torch)
    assert c[0] and t[0]
    for x, y in zip(c[1:], t[1:]):
        assert_close(x, y)


ERRORS = {
    "float and": lambda L: L.tensor([1.5]) & L.tensor([1]),
    "float bitwise_and": lambda L: L.bitwise_and(L.tensor([1.0]), L.tensor([1.0])),
    "int and float number": lambda L: L.tensor([1]) & 1.5,
    "float lshift": lambda L: L.tensor([1.5]) << 1,
    "float rshift": lambda L: L.tensor([1.5]) >> 1,
    "float invert": lambda L: ~L.tensor([1.5]),
    "bool in place with int64": lambda L: L.tensor([True]).bitwise_and_(L.tensor([3])),
    "double bitwise_or": lambda L: L.bitwise_or(L.tensor([1], dtype=L.float64), 1),
}


@pytest.mark.parametrize("name", sorted(ERRORS))
def test_errors_match_torch(name):
    assert error_of(ca, ERRORS[name]) == error_of(torch, ERRORS[name])


def test_float_masks_keep_their_logical_operators():
    """cagrad's older behaviour (kept): & | ^ on float 0/1 masks are logical ops."""
    m, n = ca.tensor([1.0, 0.0, 1.0]), ca.tensor([1.0, 1.0, 0.0])
    np.testing.assert_array_equal((m & n).numpy(), [True, False, False])
    np.testing.assert_array_equal((m | n).numpy(), [True, True, True])
    np.testing.assert_array_equal((m ^ n).numpy(), [False, True, True])


def test_results_are_outside_the_graph():
    x = ca.tensor([1.0, 2.0], requires_grad=True)
    out = (x > 1) & (x < 3)
    assert not out.requires_grad and out.grad_fn is None
