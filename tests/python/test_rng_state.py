"""get_rng_state()/set_rng_state(): one state covers every default random stream, as
torch's does: the C RNG (randn, rand, dropout) and cagrad.default_generator (randperm,
randint, multinomial, the data samplers)."""

import pytest
import torch

from helpers import ca


def _draw_everything():
    data = ca.utils.data.TensorDataset(ca.arange(10.0))
    loader = ca.utils.data.DataLoader(data, batch_size=3, shuffle=True)
    return (ca.randn(4).tolist(), ca.rand(2).tolist(), ca.randperm(8).tolist(),
            ca.randint(0, 100, (5,)).tolist(),
            ca.multinomial(ca.tensor([0.2, 0.3, 0.5]), 4, replacement=True).tolist(),
            ca.nn.functional.dropout(ca.ones(8), 0.5).tolist(),
            [batch[0].tolist() for batch in loader])


def test_restoring_the_state_repeats_every_stream():
    ca.manual_seed(11)
    ca.randn(3), ca.randperm(4)  # mid-stream, not just after seeding
    state = ca.get_rng_state()
    first = _draw_everything()
    second = _draw_everything()
    ca.set_rng_state(state)
    again = _draw_everything()
    assert again == first
    # each stream moved on between the two draws, so the restore is what repeats them
    assert all(a != b for a, b in zip(first, second))


def test_state_is_a_fresh_int64_tensor_of_nine_words():
    ca.manual_seed(0)
    state = ca.get_rng_state()
    assert state.dtype is ca.int64 and tuple(state.shape) == (9,)
    # words [2:] are the default Generator's state, word 2 its seed
    assert state[2:].tolist() == ca.default_generator.get_state().tolist()
    assert state[2].item() == ca.initial_seed() == 0
    ca.randn(2)
    assert ca.get_rng_state().tolist() != state.tolist()  # a snapshot, not a live view


def test_setting_a_state_leaves_generators_of_their_own_alone():
    g = ca.Generator().manual_seed(5)
    expected = ca.randperm(6, generator=ca.Generator().manual_seed(5)).tolist()
    ca.set_rng_state(ca.get_rng_state())
    assert ca.randperm(6, generator=g).tolist() == expected


def test_wrong_size_raises_like_torch():
    with pytest.raises(RuntimeError, match="RNG state size to be 3") as torch_error:
        torch.set_rng_state(torch.zeros(3, dtype=torch.uint8))
    with pytest.raises(type(torch_error.value), match="of size 9 but found the input RNG "
                                                       "state size to be 3"):
        ca.set_rng_state(ca.zeros(3, dtype=ca.int64))


def test_wrong_size_changes_nothing():
    ca.manual_seed(3)
    expected = ca.randn(2).tolist(), ca.randperm(5).tolist()
    ca.manual_seed(3)
    with pytest.raises(RuntimeError):
        ca.set_rng_state(ca.zeros(10, dtype=ca.int64))
    assert (ca.randn(2).tolist(), ca.randperm(5).tolist()) == expected


@pytest.mark.parametrize("bad", [[1, 2], "state"], ids=["list", "str"])
def test_non_tensor_state_raises_type_error_like_torch(bad):
    for lib in (torch, ca):
        with pytest.raises(TypeError):
            lib.set_rng_state(bad)


def test_float_state_raises_type_error_like_torch():
    with pytest.raises(TypeError):
        torch.set_rng_state(torch.zeros(5056))
    with pytest.raises(TypeError, match="int64 tensor get_rng_state"):
        ca.set_rng_state(ca.zeros(9))
