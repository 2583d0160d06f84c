"""Sequence-to-sequence "translation" with attention, trained the way PyTorch's seq2seq
tutorial trains it, with batches: an nn.Embedding + bidirectional nn.GRU encoder over
nn.utils.rnn.pack_padded_sequence (unsorted lengths) and pad_packed_sequence, a decoder
with additive (Bahdanau) attention computed with torch.bmm, a padding mask and F.softmax,
teacher forcing chosen per batch with Python's random, F.log_softmax + nn.NLLLoss with
ignore_index on the padding, a DataLoader whose collate_fn pads with
nn.utils.rnn.pad_sequence, one optimizer per network, and greedy decoding under no_grad.

The toy language maps a sequence of words to its reverse with every word shifted by one,
made with numpy, so every library sees the same data. It is a plain PyTorch program; the
tests run it with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave4.py).

    python seq2seq_style.py [--epochs N] [--teacher-forcing-ratio R] [--hidden N]
"""

import argparse
import json
import random

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence, pad_sequence
from torch.utils.data import DataLoader

PAD, SOS, EOS = 0, 1, 2
N_WORDS = 10


def make_pairs(n, seed, min_len=2, max_len=6):
    rng = np.random.default_rng(seed)
    pairs = []
    for _ in range(n):
        src = rng.integers(3, N_WORDS - 1, rng.integers(min_len, max_len + 1))
        tgt = src[::-1] + 1
        pairs.append((torch.tensor(src.tolist() + [EOS]), torch.tensor(tgt.tolist() + [EOS])))
    return pairs


def collate(batch):
    src, tgt = zip(*batch)
    lengths = torch.tensor([len(s) for s in src])
    return pad_sequence(src, batch_first=True, padding_value=PAD), lengths, \
        pad_sequence(tgt, batch_first=True, padding_value=PAD)


class EncoderRNN(nn.Module):
    def __init__(self, n_words, hidden, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(n_words, hidden, padding_idx=PAD)
        self.gru = nn.GRU(hidden, hidden, batch_first=True, bidirectional=True)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, src, lengths):
        embedded = self.dropout(self.embedding(src))
        packed = pack_padded_sequence(embedded, lengths, batch_first=True, enforce_sorted=False)
        out, hidden = self.gru(packed)
        out, _ = pad_packed_sequence(out, batch_first=True, total_length=src.size(1))
        h = out.size(-1) // 2
        # the two directions summed, as the tutorial's bidirectional variants do
        return out[:, :, :h] + out[:, :, h:], (hidden[0] + hidden[1]).unsqueeze(0)


class BahdanauAttention(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.Wa = nn.Linear(hidden, hidden)
        self.Ua = nn.Linear(hidden, hidden)
        self.Va = nn.Linear(hidden, 1)

    def forward(self, query, keys, mask):
        scores = self.Va(torch.tanh(self.Wa(query) + self.Ua(keys))).squeeze(2).unsqueeze(1)
        scores = scores.masked_fill(~mask.unsqueeze(1), float("-inf"))
        weights = F.softmax(scores, dim=-1)
        return torch.bmm(weights, keys), weights


class AttnDecoderRNN(nn.Module):
    def __init__(self, hidden, n_words, dropout_p=0.1):
        super().__init__()
        self.embedding = nn.Embedding(n_words, hidden)
        self.attention = BahdanauAttention(hidden)
        self.gru = nn.GRU(2 * hidden, hidden, batch_first=True)
        self.out = nn.Linear(hidden, n_words)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, enc_out, enc_hidden, mask, steps, target=None):
        batch = enc_out.size(0)
        inp = torch.empty(batch, 1, dtype=torch.long).fill_(SOS)
        hidden, outputs, attentions = enc_hidden, [], []
        for i in range(steps):
            out, hidden, attn = self.step(inp, hidden, enc_out, mask)
            outputs.append(out)
            attentions.append(attn)
            if target is not None:
                inp = target[:, i].unsqueeze(1)  # teacher forcing
            else:
                _, top = out.topk(1)
                inp = top.squeeze(-1).detach()
        outputs = F.log_softmax(torch.cat(outputs, dim=1), dim=-1)
        return outputs, hidden, torch.cat(attentions, dim=1)

    def step(self, inp, hidden, enc_out, mask):
        embedded = self.dropout(self.embedding(inp))
        query = hidden.permute(1, 0, 2)
        context, attn = self.attention(query, enc_out, mask)
        out, hidden = self.gru(torch.cat((embedded, context), dim=2), hidden)
        return self.out(out), hidden, attn


def train_step(encoder, decoder, enc_opt, dec_opt, criterion, batch, teacher_forcing):
    src, lengths, tgt = batch
    enc_opt.zero_grad()
    dec_opt.zero_grad()
    mask = src != PAD
    enc_out, enc_hidden = encoder(src, lengths)
    out, _, _ = decoder(enc_out, enc_hidden, mask, tgt.size(1),
                        tgt if teacher_forcing else None)
    loss = criterion(out.view(-1, out.size(-1)), tgt.view(-1))
    loss.backward()
    nn.utils.clip_grad_norm_(list(encoder.parameters()) + list(decoder.parameters()), 5.0)
    enc_opt.step()
    dec_opt.step()
    return loss.item()


def evaluate(encoder, decoder, batch):
    """Greedy decoding: the share of target words (up to EOS) decoded right."""
    encoder.eval()
    decoder.eval()
    src, lengths, tgt = batch
    with torch.no_grad():
        enc_out, enc_hidden = encoder(src, lengths)
        out, _, attn = decoder(enc_out, enc_hidden, src != PAD, tgt.size(1))
    encoder.train()
    decoder.train()
    pred = out.argmax(-1)
    keep = tgt != PAD
    return ((pred == tgt) & keep).sum().item() / keep.sum().item(), attn


def main(argv=None):
    parser = argparse.ArgumentParser(description="seq2seq with attention")
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--teacher-forcing-ratio", type=float, default=0.5)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    random.seed(args.seed)
    train = DataLoader(make_pairs(64, seed=1), batch_size=args.batch_size, shuffle=False,
                       collate_fn=collate)
    test_batch = collate(make_pairs(16, seed=2))
    encoder, decoder = EncoderRNN(N_WORDS, args.hidden), AttnDecoderRNN(args.hidden, N_WORDS)
    enc_opt = torch.optim.Adam(encoder.parameters(), lr=args.lr)
    dec_opt = torch.optim.Adam(decoder.parameters(), lr=args.lr)
    criterion = nn.NLLLoss(ignore_index=PAD)
    losses, accs, forced = [], [], 0
    for _ in range(args.epochs):
        for batch in train:
            tf = random.random() < args.teacher_forcing_ratio
            forced += tf
            losses.append(train_step(encoder, decoder, enc_opt, dec_opt, criterion, batch, tf))
        accs.append(evaluate(encoder, decoder, test_batch)[0])
    _, attn = evaluate(encoder, decoder, test_batch)
    src, lengths, _ = test_batch
    print(json.dumps({
        "losses": losses, "accs": accs, "forced": forced, "attn_shape": list(attn.shape),
        "attn_row_sums": attn.sum(-1).flatten().tolist(),
        # attention never looks at padding
        "attn_on_pad": float(attn.masked_fill((src != PAD).unsqueeze(1), 0).abs().max()),
        "padded_shape": list(src.shape), "max_len": int(lengths.max()),
    }))


if __name__ == "__main__":
    main()
