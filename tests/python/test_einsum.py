"""cagrad.einsum (_einsum.py), F.conv1d / nn.Conv1d and F.pad (nn/_conv_pad.py) against
torch 2.13: values and gradients in float32/float64, eager and compiled, float64 finite
differences, the call forms, and errors."""

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, ca, error_of

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)

EQUATIONS = [
    ("ij,jk->ik", [(3, 4), (4, 5)]),
    ("ij,jk", [(3, 4), (4, 5)]),  # implicit output: ik
    ("ba,ca", [(3, 4), (2, 4)]),  # implicit output sorted: bc
    ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
    ("i,i->", [(5,), (5,)]),
    ("i,j->ij", [(3,), (4,)]),
    ("ij->ji", [(3, 4)]),
    ("ij->", [(3, 4)]),
    ("ijk->j", [(2, 3, 4)]),
    ("ii->i", [(4, 4)]),  # diagonal
    ("ii", [(4, 4)]),  # trace
    ("bii->b", [(2, 3, 3)]),
    ("iji->j", [(3, 2, 3)]),
    ("...ij,...jk->...ik", [(2, 3, 4), (4, 5)]),  # ellipsis broadcast
    ("...ij,...jk", [(2, 1, 3, 4), (3, 4, 2)]),
    ("b...,b...->b", [(2, 3, 4), (2, 3, 4)]),
    ("i...->...", [(3, 2, 4)]),  # ellipsis kept, i summed
    ("...i->", [(3, 2, 4)]),
    ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),  # attention scores
    ("ij,jk,kl->il", [(2, 3), (3, 4), (4, 5)]),
    ("ab,bc,ca->", [(2, 3), (3, 4), (4, 2)]),
    ("ij,kj,j->ik", [(2, 4), (3, 4), (4,)]),
    ("i,i,i->i", [(4,), (4,), (4,)]),
    ("bn,anm,bm->ba", [(2, 3), (5, 3, 4), (2, 4)]),  # bilinear
    ("ij,ij->ij", [(3, 1), (3, 4)]),  # size-1 broadcast of a labelled dim
    (" i j , j k -> i k ", [(3, 4), (4, 5)]),  # spaces
    ("Aa,aB->AB", [(2, 3), (3, 4)]),
]


def einsum_fn(equation):
    return lambda L, *ops: L.einsum(equation, *ops)


@COMPILED
@DTYPE
@pytest.mark.parametrize("equation,shapes", EQUATIONS, ids=[e for e, _ in EQUATIONS])
def test_einsum_matches_torch(equation, shapes, dtype, compiled, rng):
    arrays = [rng.standard_normal(s) for s in shapes]
    check_against_torch(einsum_fn(equation), arrays, dtype, compiled, msg=equation)


@COMPILED
@pytest.mark.parametrize("equation,shapes", EQUATIONS[::3], ids=[e for e, _ in EQUATIONS[::3]])
def test_einsum_gradcheck_float64(equation, shapes, compiled, rng):
    check_numeric_gradient(einsum_fn(equation), [rng.standard_normal(s) for s in shapes],
                           compiled)


def test_einsum_call_forms(rng):
    a, b = rng.standard_normal((2, 3)), rng.standard_normal((3, 4))
    for fn in (lambda L, x, y: L.einsum("ij,jk->ik", [x, y]),
               lambda L, x, y: L.einsum("ij,jk->ik", (x, y)),
               lambda L, x, y: L.einsum(x, [0, 1], y, [1, 2], [0, 2]),
               lambda L, x, y: L.einsum(x, [0, 1], y, [1, 2]),
               lambda L, x, y: L.einsum(x, [Ellipsis, 1], y, [1, 2], [Ellipsis, 2])):
        check_against_torch(fn, [a, b], "float64")


BAD_CALLS = {
    "too_many_operands": lambda L: L.einsum("ij->i", L.ones(2, 2), L.ones(2, 2)),
    "too_few_operands": lambda L: L.einsum("ij,jk->ik", L.ones(2, 2)),
    "output_repeated": lambda L: L.einsum("ij->ii", L.ones(2, 2)),
    "output_unknown": lambda L: L.einsum("ij->k", L.ones(2, 2)),
    "wrong_rank": lambda L: L.einsum("ijk->i", L.ones(2, 2)),
    "size_mismatch": lambda L: L.einsum("ij,jk->ik", L.ones(2, 3), L.ones(4, 2)),
    "diagonal_mismatch": lambda L: L.einsum("ii->i", L.ones(2, 3)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_einsum_errors(case):
    got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    assert got[1].startswith("einsum():") and expected[1].startswith("einsum():")


EXACT_MESSAGES = ["too_many_operands", "too_few_operands", "output_repeated", "output_unknown",
                  "diagonal_mismatch", "size_mismatch", "wrong_rank"]


@pytest.mark.parametrize("case", EXACT_MESSAGES)
def test_einsum_error_messages_are_torchs(case):
    assert error_of(ca, BAD_CALLS[case]) == error_of(torch, BAD_CALLS[case])


# --- conv1d -------------------------------------------------------------------------------

CONV1D = [
    ((2, 3, 9), (4, 3, 3), {}),
    ((2, 4, 10), (6, 2, 3), {"stride": 2, "padding": 1, "dilation": 2, "groups": 2}),
    ((2, 3, 8), (5, 3, 4), {"padding": "same", "dilation": 1}),
    ((2, 3, 8), (5, 3, 3), {"padding": "valid", "stride": (3,)}),
    ((3, 7), (2, 3, 2), {"padding": (2,)}),  # unbatched
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("xshape,wshape,kwargs", CONV1D, ids=[str(i) for i in range(len(CONV1D))])
def test_conv1d_matches_torch(xshape, wshape, kwargs, dtype, compiled, rng):
    arrays = [rng.standard_normal(xshape), rng.standard_normal(wshape),
              rng.standard_normal(wshape[0])]
    check_against_torch(lambda L, x, w, b: L.nn.functional.conv1d(x, w, b, **kwargs), arrays,
                        dtype, compiled)
    check_against_torch(lambda L, x, w: L.conv1d(x, w, **kwargs), arrays[:2], dtype, compiled)


@COMPILED
def test_conv1d_gradcheck_float64(compiled, rng):
    xshape, wshape, kwargs = CONV1D[1]
    arrays = [rng.standard_normal(xshape), rng.standard_normal(wshape),
              rng.standard_normal(wshape[0])]
    check_numeric_gradient(lambda L, x, w, b: L.nn.functional.conv1d(x, w, b, **kwargs),
                           arrays, compiled)


@pytest.mark.parametrize("kwargs", [{}, {"stride": 2, "padding": 1, "dilation": 2, "groups": 2,
                                         "bias": False}, {"padding": "same"},
                                    {"padding": 2, "padding_mode": "reflect"},
                                    {"padding": "same", "padding_mode": "circular",
                                     "dilation": 3},
                                    {"padding": 1, "padding_mode": "replicate", "stride": 2}])
def test_conv1d_module(kwargs, rng):
    mods = {L: L.nn.Conv1d(4, 6, 3, **kwargs).double() for L in (ca, torch)}
    assert repr(mods[ca]) == repr(mods[torch])
    assert [(n, tuple(p.shape)) for n, p in mods[ca].named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in mods[torch].named_parameters()]
    mods[ca].load_state_dict({k: ca.tensor(v.numpy()) for k, v in
                              mods[torch].state_dict().items()})
    check_against_torch(lambda L, x: mods[L](x), [rng.standard_normal((2, 4, 9))], "float64")
    for (n, c), (_, t) in zip(mods[ca].named_parameters(), mods[torch].named_parameters()):
        assert_close(c.grad, t.grad, msg=n)


def test_conv1d_module_errors():
    for kwargs, exc in (({"padding": "same", "stride": 2}, ValueError),
                        ({"groups": 3}, ValueError), ({"padding": "full"}, ValueError)):
        for L in (ca, torch):
            with pytest.raises(exc):
                L.nn.Conv1d(4, 6, 3, **kwargs)
    for L in (ca, torch):
        with pytest.raises(ValueError, match="padding_mode must be one of"):
            L.nn.Conv1d(4, 6, 3, padding_mode="mirror")


# --- pad ----------------------------------------------------------------------------------

PADS = [
    ((2, 3), (1, 2), {}),
    ((2, 3, 4), (1, 0, 2, 1), {"value": 1.5}),
    ((2, 3, 4), (0, 1, 1, 1, 2, 0), {}),
    ((2, 5), (-1, 2), {}),  # crop one, pad two
    ((2, 3, 5), (-2, -1, 1, -1), {"value": -3.0}),
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("shape,pad,kwargs", PADS, ids=[str(i) for i in range(len(PADS))])
def test_pad_constant_matches_torch(shape, pad, kwargs, dtype, compiled, rng):
    check_against_torch(lambda L, x: L.nn.functional.pad(x, pad, **kwargs),
                        [rng.standard_normal(shape)], dtype, compiled)


def test_pad_errors():
    for pad in ((1,), (1, 1, 1, 1, 1, 1)):
        for L in (ca, torch):
            with pytest.raises(RuntimeError):
                L.nn.functional.pad(L.ones(2, 2), pad)



NON_CONSTANT = [
    ((2, 5), (1, 2)),
    ((2, 3, 5), (2, 1)),
    ((2, 4, 5), (1, 2, 3, 0)),
    ((1, 2, 3, 4), (1, 1, 2, 0)),
    ((1, 2, 3, 4, 3), (1, 2, 2, 1, 0, 2)),
    ((2, 6), (-1, 3)),
    ((2, 6), (2, -2)),
]


@COMPILED
@DTYPE
@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape,pad", NON_CONSTANT, ids=[str(i) for i in range(len(NON_CONSTANT))])
def test_pad_modes_match_torch(shape, pad, mode, dtype, compiled, rng):
    check_against_torch(lambda L, x: L.nn.functional.pad(x, pad, mode=mode),
                        [rng.standard_normal(shape)], dtype, compiled)


PAD_BAD = {
    "reflect_too_wide": lambda L: L.nn.functional.pad(L.ones(2, 3, 4), (4, 0), mode="reflect"),
    "circular_twice": lambda L: L.nn.functional.pad(L.ones(2, 3, 4), (5, 0), mode="circular"),
    "value_with_mode": lambda L: L.nn.functional.pad(L.ones(2, 3), (1, 1), mode="replicate",
                                                     value=1.0),
    "bad_mode": lambda L: L.nn.functional.pad(L.ones(2, 3), (1, 1), mode="mirror"),
    "too_many_dims": lambda L: L.nn.functional.pad(L.ones(2, 3, 4), (1,) * 6, mode="reflect"),
    "one_d": lambda L: L.nn.functional.pad(L.ones(4), (1, 1), mode="circular"),
}


@pytest.mark.parametrize("case", sorted(PAD_BAD))
def test_pad_mode_errors_match_torch(case):
    assert error_of(ca, PAD_BAD[case]) == error_of(torch, PAD_BAD[case])


def test_pad_negative_output_size_message():
    msgs = []
    for L in (ca, torch):
        with pytest.raises(RuntimeError) as info:
            L.nn.functional.pad(L.ones(2, 3), (-2, -2))
        with pytest.raises(RuntimeError, match="length must be non-negative"):
            L.nn.functional.pad(L.ones(2, 3), (-5, 3))
        msgs.append(str(info.value))
    assert msgs[0] == msgs[1]


def test_pad_value_dtype_float64(rng):
    x = rng.standard_normal((2, 2))
    out = ca.nn.functional.pad(ca.tensor(x), (1, 1), value=np.pi)
    assert out.dtype == ca.float64
    assert_close(out, torch.nn.functional.pad(torch.tensor(x), (1, 1), value=np.pi))
