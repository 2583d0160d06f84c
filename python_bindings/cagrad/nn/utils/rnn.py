"""cagrad.nn.utils.rnn, as torch.nn.utils.rnn: pad_sequence, PackedSequence and the
functions that pack and unpack it (nn.RNN/LSTM/GRU accept a PackedSequence)."""

from collections import namedtuple

from ... import _C, _functions
from ..._creation import full, tensor
from ..._dtype import float32, float64, int64

__all__ = ["pad_sequence", "PackedSequence", "invert_permutation", "pack_padded_sequence",
           "pad_packed_sequence", "pack_sequence", "unpad_sequence", "unpack_sequence"]


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


# --- packed sequences ------------------------------------------------------------------
# A PackedSequence stores the time steps of a batch of sequences, sorted by decreasing
# length, one after another: data [sum of lengths, *] holds step 0 of every sequence,
# then step 1 of those at least 2 long, ...; batch_sizes[t] is how many sequences are
# longer than t. Packing and unpacking are narrow/cat/index_select of existing ops, so
# gradients (eager and compiled) flow through them.

class PackedSequence(namedtuple("PackedSequence",
                                ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """(data, batch_sizes, sorted_indices, unsorted_indices); unsorted_indices defaults to
    the inverse of sorted_indices. Built by pack_padded_sequence / pack_sequence."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes=None, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None:
            unsorted_indices = invert_permutation(sorted_indices)
        if batch_sizes is None:  # PackedSequence((data, batch_sizes), ...)
            if not (isinstance(data, (list, tuple)) and len(data) == 2):
                raise AssertionError("Expected data to be a list or tuple of length 2")
            data, batch_sizes = data
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """data converted (the index tensors stay int64); self if nothing changes."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        return type(self)(data, self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    def cpu(self, *args, **kwargs):
        return self

    def double(self):
        return self.to(dtype=float64)

    def float(self):
        return self.to(dtype=float32)

    def long(self):
        return self.to(dtype=int64)

    @property
    def is_cuda(self):
        return False

    def is_pinned(self):
        return False


def invert_permutation(permutation):
    """The inverse of a 1-D permutation tensor (None stays None)."""
    if permutation is None:
        return None
    order = [int(i) for i in permutation.tolist()]
    inverse = [0] * len(order)
    for position, index in enumerate(order):
        inverse[index] = position
    return tensor(inverse, dtype=int64)


def _int_list(lengths):
    if isinstance(lengths, _C.TensorBase):
        return [int(v) for v in lengths.tolist()]
    return [int(v) for v in lengths]


def _check_lengths(lengths, batch):
    if len(lengths) != batch:
        raise RuntimeError(f"Expected `len(lengths)` to be equal to batch_size, but got "
                           f"{len(lengths)} (batch_size={batch})")
    if lengths[-1] <= 0:
        raise RuntimeError("Length of all samples has to be greater than 0, but found an "
                           "element in 'lengths' that is <= 0")
    if any(a < b for a, b in zip(lengths, lengths[1:])):
        raise RuntimeError("`lengths` array must be sorted in decreasing order when "
                           "`enforce_sorted` is True. You can pass `enforce_sorted=False` to "
                           "pack_padded_sequence and/or pack_sequence to sidestep this "
                           "requirement if you do not need ONNX exportability.")


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded batch [T, B, *] ([B, T, *] with batch_first) of sequences with the
    given lengths; with enforce_sorted=False the batch is sorted by decreasing length
    first (sorted_indices records the order)."""
    lengths = _int_list(lengths)
    sorted_indices = None
    if not enforce_sorted:
        # a stable sort, as torch's CPU sort: equal lengths keep their order
        order = sorted(range(len(lengths)), key=lambda i: -lengths[i])
        sorted_indices = tensor(order, dtype=int64)
        lengths = [lengths[i] for i in order]
        input = input.index_select(0 if batch_first else 1, sorted_indices)
    if input.numel() == 0:
        raise RuntimeError("Cannot pack empty tensors.")
    if batch_first:
        input = input.transpose(0, 1)
    _check_lengths(lengths, input.shape[1])
    steps = lengths[0]
    batch_sizes = [sum(1 for n in lengths if n > t) for t in range(steps)]
    data = _functions.cat([input[t].narrow(0, 0, b) for t, b in enumerate(batch_sizes)], 0)
    return PackedSequence(data, tensor(batch_sizes, dtype=int64), sorted_indices, None)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """(padded [T, B, *] ([B, T, *] with batch_first), lengths int64 [B]): the inverse of
    pack_padded_sequence, in the batch's original order; T is total_length if given."""
    batch_sizes = _int_list(sequence.batch_sizes)
    steps = len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest "
                             f"sequence in input, but got total_length={total_length} and max "
                             f"sequence length being {steps}")
        steps = total_length
    data, batch = sequence.data, batch_sizes[0]
    rows, offset = [], 0
    for size in batch_sizes:
        rows.append(_padded(data.narrow(0, offset, size), batch, padding_value, False))
        offset += size
    padded = _padded(_functions.stack(rows, 0), steps, padding_value, False)
    lengths = [sum(1 for b in batch_sizes if b > i) for i in range(batch)]
    if batch_first:
        padded = padded.transpose(0, 1)
    if sequence.unsorted_indices is not None:
        padded = padded.index_select(0 if batch_first else 1, sequence.unsorted_indices)
        lengths = [lengths[int(i)] for i in sequence.unsorted_indices.tolist()]
    return padded, tensor(lengths, dtype=int64)


def pack_sequence(sequences, enforce_sorted=True):
    """Packs a list of tensors [L_i, *] (pad_sequence, then pack_padded_sequence)."""
    lengths = [s.shape[0] for s in sequences]
    return pack_padded_sequence(pad_sequence(sequences), lengths,
                                enforce_sorted=enforce_sorted)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The list of sequences [L_i, *] in a padded batch. (torch also transposes a
    time-major padded_sequences in place; cagrad leaves its argument as it is.)"""
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [seq.narrow(0, 0, n) for seq, n in zip(padded_sequences.unbind(0), _int_list(lengths))]


def unpack_sequence(packed_sequences):
    """The list of sequences [L_i, *] in a PackedSequence, in their original order."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)
