"""cagrad.nn.utils.rnn: pad_sequence, as torch.nn.utils.rnn (no PackedSequence: see
docs/python-api.md)."""

from ... import _functions
from ..._creation import full

__all__ = ["pad_sequence"]


def _padded(sequence, length, padding_value, left):
    """sequence [L, *] extended to [length, *] with padding_value rows (cat keeps the
    gradient of the original rows)."""
    missing = length - sequence.shape[0]
    if missing == 0:
        return sequence
    filler = full((missing, *sequence.shape[1:]), padding_value, dtype=sequence.dtype)
    return _functions.cat([filler, sequence] if left else [sequence, filler], 0)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks tensors [L_i, *] of different lengths into [max L, B, *] (or [B, max L, *]
    with batch_first), padding each one's end (or start, padding_side='left')."""
    if padding_side not in ("left", "right"):
        raise RuntimeError(f"Expected padding_side to be one of left or right, but got "
                           f"{padding_side}.")
    sequences = list(sequences)
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    length = max(sequence.shape[0] for sequence in sequences)
    padded = [_padded(s, length, padding_value, padding_side == "left") for s in sequences]
    return _functions.stack(padded, 0 if batch_first else 1)
