"""A character-level GRU language model trained the way pytorch/examples'
word_language_model and the classic char-RNN tutorials train: the corpus batchified into
columns, truncated back-propagation through time with the hidden state detached between
windows (repackage_hidden), nn.Embedding -> nn.GRU(num_layers=2) -> nn.Linear with tied
input/output sizes, init_hidden from weight.new_zeros, uniform_ initialisation,
clip_grad_norm_, a hand-written SGD update through p.data.add_(p.grad, alpha=-lr), the
learning rate divided by 4 when the validation loss stops falling, the whole model saved
with torch.save(model) and loaded back, and text sampled with torch.multinomial on
output.div(temperature).exp(). With --optimizer ntasgd it trains as AWD-LSTM does instead:
SGD with weight decay, switched to ASGD(t0=0, lambd=0.) when the validation loss is not
monotone (or after --asgd-after epochs), and evaluated with the averaged weights by
swapping each p.data for optimizer.state[p]['ax'] and back.

It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python char_rnn_style.py [--epochs N] [--save PATH] [--temperature T]
                             [--optimizer manual|ntasgd] [--asgd-after N]
"""

import argparse
import json
import math

import torch
import torch.nn as nn

TEXT = ("the quick brown fox jumps over the lazy dog. " * 12
        + "pack my box with five dozen liquor jugs. " * 12)


class Corpus:
    def __init__(self, text):
        self.chars = sorted(set(text))
        self.idx = {c: i for i, c in enumerate(self.chars)}
        ids = torch.tensor([self.idx[c] for c in text], dtype=torch.long)
        cut = int(len(ids) * 0.9)
        self.train, self.valid = ids[:cut], ids[cut:]


def batchify(data, bsz):
    nbatch = data.size(0) // bsz
    data = data.narrow(0, 0, nbatch * bsz)
    return data.view(bsz, -1).t().contiguous()  # seq_len x bsz


def get_batch(source, i, bptt):
    seq_len = min(bptt, len(source) - 1 - i)
    data = source[i:i + seq_len]
    target = source[i + 1:i + 1 + seq_len].view(-1)
    return data, target


class RNNModel(nn.Module):
    def __init__(self, ntoken, ninp, nhid, nlayers, dropout=0.0):
        super().__init__()
        self.ntoken = ntoken
        self.drop = nn.Dropout(dropout)
        self.encoder = nn.Embedding(ntoken, ninp)
        self.rnn = nn.GRU(ninp, nhid, nlayers, dropout=dropout)
        self.decoder = nn.Linear(nhid, ntoken)
        self.nhid, self.nlayers = nhid, nlayers
        initrange = 0.1
        nn.init.uniform_(self.encoder.weight, -initrange, initrange)
        nn.init.zeros_(self.decoder.bias)
        nn.init.uniform_(self.decoder.weight, -initrange, initrange)

    def forward(self, input, hidden):
        emb = self.drop(self.encoder(input))
        output, hidden = self.rnn(emb, hidden)
        output = self.drop(output)
        decoded = self.decoder(output).view(-1, self.ntoken)
        return nn.functional.log_softmax(decoded, dim=1), hidden

    def init_hidden(self, bsz):
        weight = next(self.parameters())
        return weight.new_zeros(self.nlayers, bsz, self.nhid)


def repackage_hidden(h):
    """Wraps hidden states in new Tensors, to detach them from their history."""
    if isinstance(h, torch.Tensor):
        return h.detach()
    return tuple(repackage_hidden(v) for v in h)


def train_window(model, criterion, data, targets, hidden, lr, clip, optimizer=None):
    hidden = repackage_hidden(hidden)
    model.zero_grad()
    output, hidden = model(data, hidden)
    loss = criterion(output, targets)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    if optimizer is not None:
        optimizer.step()
    else:
        for p in model.parameters():
            p.data.add_(p.grad, alpha=-lr)
    return loss.item(), hidden


def evaluate_averaged(model, optimizer, criterion, source, bsz, bptt):
    """AWD-LSTM's evaluation under ASGD: the averaged weights in, evaluate, the last back."""
    tmp = {}
    for prm in model.parameters():
        tmp[prm] = prm.data.clone()
        prm.data = optimizer.state[prm]["ax"].clone()
    val_loss = evaluate(model, criterion, source, bsz, bptt)
    for prm in model.parameters():
        prm.data = tmp[prm].clone()
    return val_loss


def evaluate(model, criterion, source, bsz, bptt):
    model.eval()
    total_loss = 0.0
    hidden = model.init_hidden(bsz)
    with torch.no_grad():
        for i in range(0, source.size(0) - 1, bptt):
            data, targets = get_batch(source, i, bptt)
            output, hidden = model(data, hidden)
            hidden = repackage_hidden(hidden)
            total_loss += len(data) * criterion(output, targets).item()
    return total_loss / (len(source) - 1)


def sample(model, corpus, n, temperature):
    model.eval()
    hidden = model.init_hidden(1)
    input = torch.randint(len(corpus.chars), (1, 1), dtype=torch.long)
    out = []
    with torch.no_grad():
        for _ in range(n):
            output, hidden = model(input, hidden)
            word_weights = output.squeeze().div(temperature).exp().cpu()
            word_idx = torch.multinomial(word_weights, 1)[0]
            input.fill_(word_idx)
            out.append(corpus.chars[word_idx])
    return "".join(out)


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--clip", type=float, default=0.25)
    parser.add_argument("--bptt", type=int, default=12)
    parser.add_argument("--save", default=None)
    parser.add_argument("--temperature", type=float, default=0.8)
    parser.add_argument("--optimizer", default="manual", choices=["manual", "ntasgd"])
    parser.add_argument("--wdecay", type=float, default=1.2e-6)
    parser.add_argument("--nonmono", type=int, default=1)
    parser.add_argument("--asgd-after", type=int, default=None)
    args = parser.parse_args(argv)
    torch.manual_seed(1111)
    corpus = Corpus(TEXT)
    train_data, val_data = batchify(corpus.train, 8), batchify(corpus.valid, 2)
    ntokens = len(corpus.chars)
    model = RNNModel(ntokens, 16, 32, 2)
    criterion = nn.NLLLoss()
    lr, best_val_loss, losses, val_losses = args.lr, None, [], []
    optimizer, switched = None, None
    if args.optimizer == "ntasgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, weight_decay=args.wdecay)
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = model.init_hidden(8)
        for i in range(0, train_data.size(0) - 1, args.bptt):
            data, targets = get_batch(train_data, i, args.bptt)
            loss, hidden = train_window(model, criterion, data, targets, hidden, lr, args.clip,
                                        optimizer)
            losses.append(loss)
        if optimizer is not None and "t0" in optimizer.param_groups[0]:
            val_loss = evaluate_averaged(model, optimizer, criterion, val_data, 2, args.bptt)
        else:
            val_loss = evaluate(model, criterion, val_data, 2, args.bptt)
            nonmono = (len(val_losses) > args.nonmono
                       and val_loss > min(val_losses[:-args.nonmono]))
            if optimizer is not None and (nonmono or epoch == args.asgd_after):
                optimizer = torch.optim.ASGD(model.parameters(), lr=args.lr, t0=0, lambd=0.0,
                                             weight_decay=args.wdecay)
                switched = epoch
        val_losses.append(val_loss)
        if not best_val_loss or val_loss < best_val_loss:
            if args.save:
                with open(args.save, "wb") as f:
                    torch.save(model, f)
            best_val_loss = val_loss
        elif optimizer is None:
            lr /= 4.0  # anneal the learning rate if no improvement has been seen
    if args.save:
        with open(args.save, "rb") as f:
            model = torch.load(f, weights_only=False)
    test_loss = evaluate(model, criterion, val_data, 2, args.bptt)
    text = sample(model, corpus, 40, args.temperature)
    print(json.dumps({"losses": losses, "val_losses": val_losses, "test_loss": test_loss,
                      "ppl": math.exp(test_loss), "lr": lr, "sample": text,
                      "switched_to_asgd": switched}))


if __name__ == "__main__":
    main()
