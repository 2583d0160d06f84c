"""nn.utils.rnn's PackedSequence, pack_padded_sequence (enforce_sorted), pad_packed_sequence,
pack_sequence, unpad_sequence / unpack_sequence, and nn.RNN / LSTM / GRU run on a
PackedSequence, against torch 2.13: values, lengths, index tensors, errors, and the
gradients of the padded input, the initial states and every parameter (float32 and
float64, eager and compiled), plus gradcheck in float64."""

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])
SORTED_LENGTHS = [5, 3, 3, 1]
LENGTHS = [3, 5, 1, 3]


def rnn_utils(L):
    return L.nn.utils.rnn


def padded(L, dtype, batch_first=False, shape=(5, 4, 3), seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(dtype)
    if batch_first:
        x = x.transpose(1, 0, 2).copy()
    return L.tensor(x, requires_grad=True)


def backward(L, loss, compiled):
    if L is ca:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    else:
        loss.backward()


def weighted_sum(L, tensors, seed=3):
    rng = np.random.default_rng(seed)
    total = 0
    for t in tensors:
        w = L.tensor(rng.standard_normal(tuple(t.shape)).astype(str(t.dtype).split(".")[-1]))
        total = total + (t * w).sum()
    return total


# --- packing and unpacking -------------------------------------------------------------------

def pack_roundtrip(L, dtype, lengths, enforce_sorted, batch_first, total_length, compiled):
    R = rnn_utils(L)
    x = padded(L, dtype, batch_first)
    packed = R.pack_padded_sequence(x, lengths, batch_first=batch_first,
                                    enforce_sorted=enforce_sorted)
    out, lens = R.pad_packed_sequence(packed, batch_first=batch_first, padding_value=-2.0,
                                      total_length=total_length)
    backward(L, weighted_sum(L, [packed.data, out]), compiled)
    indices = [None if t is None else to_np(t) for t in packed[2:]]
    return [to_np(packed.data), to_np(packed.batch_sizes), *indices, to_np(out),
            to_np(lens), to_np(x.grad)]


@COMPILED
@DTYPE
@pytest.mark.parametrize("case", [(SORTED_LENGTHS, True, False, None),
                                  (LENGTHS, False, False, None),
                                  (LENGTHS, False, True, 7),
                                  (SORTED_LENGTHS, False, True, 5)],
                         ids=["sorted", "unsorted", "unsorted-batch_first-total", "sorted-free"])
def test_pack_pad_roundtrip_matches_torch(dtype, compiled, case):
    got = pack_roundtrip(ca, dtype, *case, compiled)
    want = pack_roundtrip(torch, dtype, *case, False)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        if a is None or b is None:
            assert a is None and b is None
        else:
            assert a.dtype == b.dtype and a.shape == b.shape
            np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_lengths_as_tensor_and_ties_keep_order():
    for lengths in ([2, 3, 2, 3], [1, 1, 1, 1]):
        got = pack_roundtrip(ca, "float64", ca.tensor(lengths), False, False, None, False)
        want = pack_roundtrip(torch, "float64", torch.tensor(lengths), False, False, None,
                              False)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)


def sequences(L, dtype, lengths=(4, 2, 3), grad=True):
    rng = np.random.default_rng(5)
    return [L.tensor(rng.standard_normal((n, 2)).astype(dtype), requires_grad=grad)
            for n in lengths]


@DTYPE
def test_pack_sequence_unpack_and_unpad(dtype):
    results = []
    for L in (ca, torch):
        R = rnn_utils(L)
        seqs = sequences(L, dtype)
        packed = R.pack_sequence(seqs, enforce_sorted=False)
        back = R.unpack_sequence(packed)
        pad, lens = R.pad_packed_sequence(packed)
        unpadded = R.unpad_sequence(pad.clone(), lens)  # (torch transposes it in place)
        unpadded_bf = R.unpad_sequence(pad.transpose(0, 1), lens, batch_first=True)
        weighted_sum(L, back + unpadded + unpadded_bf).backward()
        results.append([to_np(packed.data), to_np(packed.batch_sizes)]
                       + [to_np(t) for t in back + unpadded + unpadded_bf]
                       + [to_np(s.grad) for s in seqs])
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-6)


def test_packed_sequence_fields_repr_and_conversion():
    for L in (ca, torch):
        R = rnn_utils(L)
        p = R.pack_sequence([L.tensor([1.0, 2.0]), L.tensor([3.0])])
        assert p._fields == ("data", "batch_sizes", "sorted_indices", "unsorted_indices")
        assert p.sorted_indices is None and p.unsorted_indices is None
        assert repr(p).startswith("PackedSequence(data=tensor([1., 3., 2.]), "
                                  "batch_sizes=tensor([2, 1]), sorted_indices=None")
        assert p.double().data.dtype == L.float64 and p.to(L.float32) is p
        q = R.PackedSequence(p.data, p.batch_sizes, L.tensor([1, 0]))
        assert q.unsorted_indices.tolist() == [1, 0]
        assert R.PackedSequence((p.data, p.batch_sizes)).batch_sizes.tolist() == [2, 1]
        assert R.invert_permutation(L.tensor([2, 0, 1])).tolist() == [1, 2, 0]
        assert not p.is_cuda


@pytest.mark.parametrize("make", [
    lambda L: L.nn.utils.rnn.pack_padded_sequence(L.zeros(3, 2, 1), [1, 2]),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(L.zeros(3, 2, 1), [2, 0]),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(L.zeros(3, 2, 1), [2, 2, 1]),
    lambda L: L.nn.utils.rnn.pack_padded_sequence(L.zeros(0, 2, 1), [2, 1]),
    lambda L: L.nn.utils.rnn.pack_sequence([L.ones(1), L.ones(2)]),
    lambda L: L.nn.utils.rnn.pad_packed_sequence(
        L.nn.utils.rnn.pack_sequence([L.ones(3), L.ones(2)]), total_length=2),
], ids=["unsorted", "zero-length", "wrong-count", "empty", "pack_sequence-unsorted",
        "total_length"])
def test_errors_match_torch(make):
    got, want = error_of(ca, make), error_of(torch, make)
    assert got == want and got[0] is not None


# --- recurrent modules on packed input --------------------------------------------------------

MODULES = [
    ("RNN", {}),
    ("RNN", dict(nonlinearity="relu", bidirectional=True)),
    ("GRU", dict(num_layers=2)),
    ("GRU", dict(bidirectional=True, batch_first=True)),
    ("LSTM", {}),
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)),
]
MODULE_IDS = [f"{c}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}"
              for c, kw in MODULES]


def twin(cls, kwargs, dtype):
    torch.manual_seed(0)
    ref = getattr(torch.nn, cls)(3, 4, **kwargs, dtype=getattr(torch, dtype))
    mod = getattr(ca.nn, cls)(3, 4, **kwargs, dtype=getattr(ca, dtype))
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    return mod, ref


def initial_states(L, module, dtype, batch):
    rng = np.random.default_rng(11)
    layers = module.num_layers * (2 if module.bidirectional else 1)
    h_size = module.proj_size or module.hidden_size if hasattr(module, "proj_size") else 4
    shapes = [(layers, batch, h_size)]
    if isinstance(module, L.nn.LSTM):
        shapes.append((layers, batch, module.hidden_size))
    return [L.tensor(rng.standard_normal(s).astype(dtype), requires_grad=True) for s in shapes]


def run_packed(L, module, dtype, lengths, enforce_sorted, with_states, compiled):
    R = rnn_utils(L)
    bf = module.batch_first
    x = padded(L, dtype, bf)
    packed = R.pack_padded_sequence(x, lengths, batch_first=bf, enforce_sorted=enforce_sorted)
    states = initial_states(L, module, dtype, len(lengths)) if with_states else []
    hx = None if not states else (tuple(states) if len(states) == 2 else states[0])
    out, final = module(packed, hx)
    assert type(out).__name__ == "PackedSequence"
    finals = list(final) if isinstance(final, tuple) else [final]
    pad, _ = R.pad_packed_sequence(out, batch_first=bf)
    backward(L, weighted_sum(L, [pad] + finals), compiled)
    grads = [x.grad] + [s.grad for s in states] + [p.grad for p in module.parameters()]
    return [out.data, out.batch_sizes, pad] + finals + grads


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls,kwargs", MODULES, ids=MODULE_IDS)
@pytest.mark.parametrize("lengths,enforce_sorted,with_states",
                         [(SORTED_LENGTHS, True, False), (LENGTHS, False, True)],
                         ids=["sorted-zero-state", "unsorted-given-state"])
def test_recurrent_modules_on_packed_input(cls, kwargs, dtype, compiled, lengths,
                                           enforce_sorted, with_states):
    mod, ref = twin(cls, kwargs, dtype)
    got = run_packed(ca, mod, dtype, lengths, enforce_sorted, with_states, compiled)
    want = run_packed(torch, ref, dtype, lengths, enforce_sorted, with_states, False)
    assert len(got) == len(want)
    for i, (a, b) in enumerate(zip(got, want)):
        assert_close(a, b, **TOL_SUM[dtype], msg=f"result {i}")


def test_final_state_is_each_sequences_last_step():
    """h_n of a packed batch equals running each sequence alone (unpadded)."""
    mod, _ = twin("GRU", {}, "float64")
    x = padded(ca, "float64")
    packed = ca.nn.utils.rnn.pack_padded_sequence(x, LENGTHS, enforce_sorted=False)
    _, h_n = mod(packed)
    for b, n in enumerate(LENGTHS):
        _, h_alone = mod(x[:n, b:b + 1])
        assert_close(h_n[:, b], h_alone[:, 0])


def test_packed_gradcheck_float64():
    mod, _ = twin("LSTM", dict(bidirectional=True), "float64")
    R = ca.nn.utils.rnn

    def f(x, h0):
        packed = R.pack_padded_sequence(x, [3, 1, 2], enforce_sorted=False)
        out, (h, c) = mod(packed, (h0, h0 * 0.5))
        return R.pad_packed_sequence(out)[0], h, c

    x = ca.tensor(np.random.default_rng(2).standard_normal((3, 3, 3)), requires_grad=True)
    h0 = ca.tensor(np.random.default_rng(4).standard_normal((2, 3, 4)), requires_grad=True)
    assert ca.autograd.gradcheck(f, (x, h0))


def test_packed_state_shape_error_matches_torch():
    def make(L):
        R = L.nn.utils.rnn
        gru = L.nn.GRU(3, 4)
        packed = R.pack_padded_sequence(L.zeros(2, 3, 3), [2, 2, 1])
        gru(packed, L.zeros(1, 2, 4))
    got, want = error_of(ca, make), error_of(torch, make)
    assert got[0] is want[0] is RuntimeError
    assert got[1] == want[1]


# --- a small seq2seq program: packed GRU encoder + GRU decoder ---------------------------------

def seq2seq_losses(L, state, steps, compiled):
    """Reverse-a-sequence task in the style of pytorch/examples: embedded variable-length
    sources packed (enforce_sorted=False) into a bidirectional GRU encoder whose final
    states start a GRU decoder run with teacher forcing; SGD with gradient clipping.
    Returns every step's loss and the model."""
    vocab, emb, hidden = 9, 6, 5
    R = L.nn.utils.rnn

    class Seq2Seq(L.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = L.nn.Embedding(vocab, emb, padding_idx=0)
            self.encoder = L.nn.GRU(emb, hidden, batch_first=True, bidirectional=True)
            self.bridge = L.nn.Linear(2 * hidden, hidden)
            self.decoder = L.nn.GRU(emb, hidden, batch_first=True)
            self.head = L.nn.Linear(hidden, vocab)

        def forward(self, src, lengths, tgt_in):
            packed = R.pack_padded_sequence(self.embed(src), lengths, batch_first=True,
                                            enforce_sorted=False)
            _, h = self.encoder(packed)
            h0 = self.bridge(L.cat([h[0], h[1]], -1)).tanh().unsqueeze(0)
            out, _ = self.decoder(self.embed(tgt_in), h0)
            return self.head(out)

    model = Seq2Seq()
    if state is not None:
        model.load_state_dict({k: L.tensor(v) for k, v in state.items()})
    opt = L.optim.SGD(model.parameters(), lr=0.5, momentum=0.9)
    rng = np.random.default_rng(0)
    losses = []
    for _ in range(steps):
        lengths = [4, 2, 5, 3]
        src = np.zeros((4, 5), dtype=np.int64)
        for b, n in enumerate(lengths):
            src[b, :n] = rng.integers(2, vocab, n)
        tgt = np.zeros((4, 6), dtype=np.int64)
        tgt[:, 0] = 1  # start token
        for b, n in enumerate(lengths):
            tgt[b, 1:n + 1] = src[b, :n][::-1]
        tgt_t = L.tensor(tgt)
        logits = model(L.tensor(src), L.tensor(lengths), tgt_t[:, :-1])
        loss = L.nn.functional.cross_entropy(logits.reshape(-1, vocab),
                                             tgt_t[:, 1:].reshape(-1), ignore_index=0)
        opt.zero_grad()
        with compiled_ctx(compiled and L is ca):
            loss.backward()
        L.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        losses.append(loss.item())
    return losses, model


@COMPILED
def test_seq2seq_packed_gru_trains_like_torch(compiled):
    torch.manual_seed(0)
    _, ref = seq2seq_losses(torch, None, 0, False)
    state = {k: to_np(v) for k, v in ref.state_dict().items()}
    want, _ = seq2seq_losses(torch, state, 6, False)
    got, _ = seq2seq_losses(ca, state, 6, compiled)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5)
    assert got[-1] < got[0]
