"""The atheris target's kept inputs (tests/fuzz/pycorpus: seeds, and each mismatch with
torch it found, once fixed) replayed through tests/fuzz/fuzz_python.run, which compares
every op's value or exception type, and the gradients eager and compiled, with torch; and
the behaviours those inputs found, checked directly."""

import os
import sys

import numpy as np
import pytest
import torch

from helpers import ca, outcome

FUZZ_DIR = os.path.join(os.path.dirname(__file__), "..", "fuzz")
sys.path.insert(0, FUZZ_DIR)
import fuzz_python  # noqa: E402

CORPUS = os.path.join(FUZZ_DIR, "pycorpus")
INPUTS = sorted(os.listdir(CORPUS))


def test_the_corpus_has_its_regressions():
    assert sum(name.startswith("regress_") for name in INPUTS) >= 3


@pytest.mark.parametrize("name", INPUTS)
def test_kept_input_replays_like_torch(name):
    with open(os.path.join(CORPUS, name), "rb") as f:
        fuzz_python.run(ca, torch, f.read())


@pytest.mark.parametrize("case", [
    lambda L: L.cat([L.tensor(1.0), L.tensor(2.0)]),
    lambda L: L.empty(0).amax(0),
    lambda L: L.empty(0, 3).max(0),
    lambda L: L.empty(0).max(),
], ids=["cat-0d", "amax-empty-dim", "max-empty-dim", "max-whole-empty"])
def test_error_types_match_torch(case):
    kind, want = outcome(lambda: case(ca))[0], outcome(lambda: case(torch))[0]
    assert kind == want != "ok"


@pytest.mark.parametrize("dim", [0, 1, 5, -3])
def test_cat_of_legacy_empty_tensors_takes_any_dim(dim):
    for L in (ca, torch):
        x = L.empty(0, requires_grad=True)
        y = L.cat([x, L.empty(0)], dim=dim)
        assert tuple(y.shape) == (0,)
        y.sum().backward()
        assert tuple(x.grad.shape) == (0,)
    np.testing.assert_array_equal(ca.cat([ca.empty(0), ca.ones(2, 3)], 1).numpy(), np.ones((2, 3)))
