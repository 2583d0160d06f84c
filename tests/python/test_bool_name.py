"""cagrad.bool's dtype object matches torch.bool's attributes, pickles as itself and loads
from a checkpoint; what torch refuses for bool (a bool default dtype, a bool arange) cagrad
refuses alike. Computing with bool tensors is tested in test_bool_dtype.py."""

import io
import pickle

import pytest
import torch

from helpers import ca, same_outcome


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
    lambda L: L.set_default_dtype(L.bool), lambda L: L.arange(3, dtype=L.bool),
], ids=["set_default_dtype", "arange"])
def test_what_torch_refuses_for_bool_cagrad_refuses(make):
    same_outcome(make)
    assert ca.get_default_dtype() is ca.float32
