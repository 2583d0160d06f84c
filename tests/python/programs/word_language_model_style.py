"""A word-level language model trained the way pytorch/examples' word_language_model
trains it, with its two model families:

- RNNModel: nn.Embedding -> dropout -> nn.LSTM (or GRU, RNN_TANH) with inter-layer dropout
  -> dropout -> nn.Linear, weights tied when asked, uniform_ init, init_hidden from
  weight.new_zeros, hidden states detached between windows (repackage_hidden);
- TransformerModel: a subclass of nn.Transformer whose encoder is used alone, with
  sinusoidal PositionalEncoding in a registered buffer, the square subsequent mask as
  torch.log(torch.tril(torch.ones(sz, sz))) kept between calls, and its own
  Linear decoder and Embedding.

The corpus is a Dictionary of words tokenised into a LongTensor, batchified by
narrow/view/t().contiguous(); get_batch slices bptt rows; the loss is NLLLoss on
log_softmax; each step clips with clip_grad_norm_ and updates by hand with
p.data.add_(p.grad, alpha=-lr); the learning rate is divided by 4 when validation stops
improving, the best model is saved whole with torch.save(model, f), loaded back (and
flatten_parameters() called on its RNN), and test perplexity reported with math.exp.

It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave3.py).

    python word_language_model_style.py [--model LSTM|GRU|RNN_TANH|Transformer]
        [--epochs N] [--bptt N] [--tied] [--save PATH]
"""

import argparse
import json
import math
import os

import torch
import torch.nn as nn
import torch.nn.functional as F

WORDS = ("the cat sat on the mat . the dog lay on the rug . a bird sang in the tree . "
         "the cat saw the bird . the dog saw the cat . a bird saw the dog . ")


class Dictionary:
    def __init__(self):
        self.word2idx = {}
        self.idx2word = []

    def add_word(self, word):
        if word not in self.word2idx:
            self.idx2word.append(word)
            self.word2idx[word] = len(self.idx2word) - 1
        return self.word2idx[word]

    def __len__(self):
        return len(self.idx2word)


class Corpus:
    def __init__(self, text=WORDS, repeats=(12, 2, 2)):
        self.dictionary = Dictionary()
        self.train, self.valid, self.test = (self.tokenize(text * r) for r in repeats)

    def tokenize(self, text):
        ids = []
        for line in text.split(" . "):
            words = line.split() + ["<eos>"]
            ids.append(torch.tensor([self.dictionary.add_word(w) for w in words]).type(
                torch.int64))
        return torch.cat(ids)


class RNNModel(nn.Module):
    """Container module with an encoder, a recurrent module, and a decoder."""

    def __init__(self, rnn_type, ntoken, ninp, nhid, nlayers, dropout=0.5, tie_weights=False):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        if rnn_type in ["LSTM", "GRU"]:
            self.rnn = getattr(nn, rnn_type)(ninp, nhid, nlayers, dropout=dropout)
        else:
            nonlinearity = {"RNN_TANH": "tanh", "RNN_RELU": "relu"}[rnn_type]
            self.rnn = nn.RNN(ninp, nhid, nlayers, nonlinearity=nonlinearity, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        if tie_weights:
            if nhid != ninp:
                raise ValueError("When using the tied flag, nhid must be equal to emsize")
            self.decoder.weight = self.encoder.weight
        self.init_weights()
        self.rnn_type, self.nhid, self.nlayers = rnn_type, nhid, nlayers

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output)
        decoded = decoded.view(-1, self.ntoken)
        return F.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        if self.rnn_type == "LSTM":
            return (weight.new_zeros(self.nlayers, bsz, self.nhid),
                    weight.new_zeros(self.nlayers, bsz, self.nhid))
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


class PositionalEncoding(nn.Module):
    """Sines and cosines of the position at geometric wavelengths, added to the input."""

    def __init__(self, d_model, dropout=0.1, max_len=500):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float()
                             * (-math.log(10000.0) / d_model))
        pe[:, 0::2] = torch.sin(position * div_term)
        pe[:, 1::2] = torch.cos(position * div_term)
        pe = pe.unsqueeze(0).transpose(0, 1)
        self.register_buffer("pe", pe)

    def forward(self, x):
        x = x + self.pe[:x.size(0), :]
        return self.dropout(x)


class TransformerModel(nn.Transformer):
    """Container module with an encoder, a transformer module, and a decoder."""

    def __init__(self, ntoken, ninp, nhead, nhid, nlayers, dropout=0.5):
        super().__init__(d_model=ninp, nhead=nhead, dim_feedforward=nhid,
                         num_encoder_layers=nlayers, num_decoder_layers=1, dropout=dropout)
        self.model_type = "Transformer"
        self.src_mask = None
        self.pos_encoder = PositionalEncoding(ninp, dropout)
        self.input_emb = nn.Embedding(ntoken, ninp)
        self.ninp = ninp
        self.decoder = nn.Linear(ninp, ntoken)  # replaces nn.Transformer's decoder stack
        self.init_weights()

    def _generate_square_subsequent_mask(self, sz):
        return torch.log(torch.tril(torch.ones(sz, sz)))

    def init_weights(self):
        initrange = 0.1
        nn.init.uniform_(self.input_emb.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, src, has_mask=True):
        if has_mask:
            device = src.device
            if self.src_mask is None or self.src_mask.size(0) != len(src):
                mask = self._generate_square_subsequent_mask(len(src)).to(device)
                self.src_mask = mask
        else:
            self.src_mask = None
        src = self.input_emb(src) * math.sqrt(self.ninp)
        src = self.pos_encoder(src)
        output = self.encoder(src, mask=self.src_mask)
        output = self.decoder(output)
        return F.log_softmax(output, dim=-1)


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def train_window(model, criterion, data, targets, hidden, lr, clip):
    """One window of truncated BPTT with the hand-written SGD update."""
    model.zero_grad()
    if isinstance(model, TransformerModel):
        output = model(data)
        output = output.view(-1, output.size(-1))
    else:
        hidden = repackage_hidden(hidden)
        output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    for p in model.parameters():
        p.data.add_(p.grad, alpha=-lr)
    return loss.item(), hidden


def evaluate(model, criterion, data_source, bptt, eval_batch_size):
    model.eval()
    total_loss = 0.
    ntokens = model.decoder.out_features
    hidden = None if isinstance(model, TransformerModel) else model.init_hidden(eval_batch_size)
    with torch.no_grad():
        for i in range(0, data_source.size(0) - 1, bptt):
            data, targets = get_batch(data_source, i, bptt)
            if hidden is None:
                output = model(data).view(-1, ntokens)
            else:
                output, hidden = model(data, hidden)
                hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(data_source) - 1)


def build(args, ntokens):
    if args.model == "Transformer":
        return TransformerModel(ntokens, args.emsize, args.nhead, args.nhid, args.nlayers,
                                args.dropout)
    return RNNModel(args.model, ntokens, args.emsize, args.nhid, args.nlayers, args.dropout,
                    args.tied)


def main(argv=None):
    parser = argparse.ArgumentParser(description="word language model")
    parser.add_argument("--model", type=str, default="LSTM")
    parser.add_argument("--emsize", type=int, default=16)
    parser.add_argument("--nhid", type=int, default=16)
    parser.add_argument("--nlayers", type=int, default=2)
    parser.add_argument("--nhead", type=int, default=2)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=4)
    parser.add_argument("--bptt", type=int, default=8)
    parser.add_argument("--dropout", type=float, default=0.2)
    parser.add_argument("--tied", action="store_true")
    parser.add_argument("--seed", type=int, default=1111)
    parser.add_argument("--save", type=str, default="")
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    corpus = Corpus()
    eval_batch_size = 2
    train_data = batchify(corpus.train, args.batch_size)
    val_data = batchify(corpus.valid, eval_batch_size)
    test_data = batchify(corpus.test, eval_batch_size)
    ntokens = len(corpus.dictionary)
    model = build(args, ntokens)
    criterion = nn.NLLLoss()
    lr, best_val_loss, losses, val_losses, lrs = args.lr, None, [], [], []
    for _ in range(args.epochs):
        model.train()
        hidden = None if args.model == "Transformer" else model.init_hidden(args.batch_size)
        for i in range(0, train_data.size(0) - 1, args.bptt):
            data, targets = get_batch(train_data, i, args.bptt)
            loss, hidden = train_window(model, criterion, data, targets, hidden, lr, args.clip)
            losses.append(loss)
        val_loss = evaluate(model, criterion, val_data, args.bptt, eval_batch_size)
        val_losses.append(val_loss)
        if not best_val_loss or val_loss < best_val_loss:
            if args.save:
                with open(args.save, "wb") as f:
                    torch.save(model, f)
            best_val_loss = val_loss
        else:
            lr /= 4.0
        lrs.append(lr)
    if args.save and os.path.exists(args.save):
        with open(args.save, "rb") as f:
            model = torch.load(f, weights_only=False)
            if args.model in ["RNN_TANH", "RNN_RELU", "LSTM", "GRU"]:
                model.rnn.flatten_parameters()
    test_loss = evaluate(model, criterion, test_data, args.bptt, eval_batch_size)
    print(json.dumps({
        "losses": losses, "val_losses": val_losses, "lrs": lrs, "test_loss": test_loss,
        "test_ppl": math.exp(test_loss), "ntokens": ntokens,
        "train_shape": list(train_data.shape),
        "n_params": sum(p.numel() for p in model.parameters()),
        "mask_row": None if args.model != "Transformer" else model.src_mask[1].tolist(),
    }))


if __name__ == "__main__":
    main()
