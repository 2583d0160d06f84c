"""cagrad.bool: a dtype name only (as float16/bfloat16), matching torch.bool's attributes;
making or converting a tensor with it raises a TypeError that says what to use instead."""

import io
import pickle

import pytest
import torch

from helpers import assert_close, ca

BOOL_ERROR = r"cagrad\.bool.*float32.*float64.*int64.*0/1 tensors.*tagged as masks"


def test_bool_dtype_object_matches_torch():
    c, t = ca.bool, torch.bool
    assert isinstance(c, ca.dtype)
    assert c.itemsize == t.itemsize
    assert c.is_floating_point == t.is_floating_point
    assert c.is_complex == t.is_complex and c.is_signed == t.is_signed
    assert repr(c) == repr(t).replace("torch.", "cagrad.")


def test_bool_dtype_pickles_as_the_same_object():
    assert pickle.loads(pickle.dumps(ca.bool)) is ca.bool


def test_torch_bool_in_a_checkpoint_loads_as_cagrad_bool():
    buf = io.BytesIO()
    torch.save({"mask_dtype": torch.bool}, buf)
    assert ca.load(io.BytesIO(buf.getvalue()))["mask_dtype"] is ca.bool


@pytest.mark.parametrize("make", [
    lambda L: L.zeros(2, dtype=L.bool), lambda L: L.ones(2, 3, dtype=L.bool),
    lambda L: L.full((2,), 1, dtype=L.bool), lambda L: L.tensor([True, False], dtype=L.bool),
    lambda L: L.empty(2, dtype=L.bool), lambda L: L.arange(3, dtype=L.bool),
    lambda L: L.ones(2).to(L.bool), lambda L: L.ones(2).to(dtype=L.bool),
    lambda L: L.zeros_like(L.ones(2), dtype=L.bool), lambda L: L.ones(2).bool(),
    lambda L: L.set_default_dtype(L.bool),
], ids=["zeros", "ones", "full", "tensor", "empty", "arange", "to", "to_kw", "zeros_like",
        "method", "set_default_dtype"])
def test_bool_raises_naming_itself_and_the_mask_alternative(make):
    with pytest.raises(TypeError, match=BOOL_ERROR):
        make(ca)
    assert ca.get_default_dtype() is ca.float32


def test_comparisons_give_the_zero_one_masks_the_error_points_to():
    # what the message tells users to rely on: a tagged 0/1 mask that indexes like a bool
    values = [[1.0, -2.0, 3.0], [-4.0, 5.0, -6.0]]
    results = []
    for L in (ca, torch):
        x = L.tensor(values)
        mask = x > 0
        results.append((mask, x[mask], x.masked_fill(mask, 0.0)))
    for c, t in zip(*results):
        assert_close(c, t, check_dtype=False)
    assert results[0][0].dtype is ca.float32
