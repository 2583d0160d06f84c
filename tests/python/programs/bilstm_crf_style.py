"""A BiLSTM-CRF sequence tagger trained the way PyTorch's "Advanced: Making Dynamic Decisions
and the Bi-LSTM CRF" tutorial and the pytorch-crf package train one, on batches: nn.Embedding
with padding_idx, a bidirectional nn.LSTM with batch_first, a Linear layer to emission
scores, and a linear-chain CRF with start, end and transition scores. The CRF's partition
function runs the forward algorithm with torch.logsumexp over the transitions (masked
positions keep their scores through torch.where); the gold path's score picks emissions
with gather and transitions with advanced indexing (transitions[tags[:, :-1], tags[:, 1:]]);
Viterbi decoding takes max over previous tags, keeps the argmax indices, and backtracks in
Python under torch.no_grad(). It trains with SGD with momentum and weight decay.

The sentences are made with numpy (tags follow from each word's class and the previous
tag), so every library sees the same data. It is a plain PyTorch program; the tests run it
with real torch and, unchanged, with `python -m cagrad.as_torch`
(tests/python/test_programs_wave5a.py).

    python bilstm_crf_style.py [--epochs N] [--hidden H]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn

PAD = 0
N_WORDS, N_TAGS = 20, 4


class CRF(nn.Module):
    def __init__(self, num_tags):
        super().__init__()
        self.start = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.end = nn.Parameter(torch.empty(num_tags).uniform_(-0.1, 0.1))
        self.transitions = nn.Parameter(torch.empty(num_tags, num_tags).uniform_(-0.1, 0.1))

    def log_partition(self, emissions, mask):
        """log of the sum over all tag paths of exp(score), by the forward algorithm."""
        alpha = self.start + emissions[:, 0]
        for t in range(1, emissions.shape[1]):
            # alpha[b, i] + transitions[i, j] + emissions[b, t, j], summed out over i
            nxt = torch.logsumexp(alpha.unsqueeze(2) + self.transitions
                                  + emissions[:, t].unsqueeze(1), dim=1)
            alpha = torch.where(mask[:, t].unsqueeze(1), nxt, alpha)
        return torch.logsumexp(alpha + self.end, dim=1)

    def gold_score(self, emissions, tags, mask):
        maskf = mask.to(emissions.dtype)
        emit = emissions.gather(2, tags.unsqueeze(2)).squeeze(2)
        trans = self.transitions[tags[:, :-1], tags[:, 1:]]
        last = tags.gather(1, (mask.sum(1) - 1).unsqueeze(1)).squeeze(1)
        return (self.start[tags[:, 0]] + (emit * maskf).sum(1)
                + (trans * maskf[:, 1:]).sum(1) + self.end[last])

    def neg_log_likelihood(self, emissions, tags, mask):
        return (self.log_partition(emissions, mask) - self.gold_score(emissions, tags, mask)).mean()

    @torch.no_grad()
    def viterbi(self, emissions, mask):
        score = self.start + emissions[:, 0]
        history = []
        for t in range(1, emissions.shape[1]):
            nxt, idx = (score.unsqueeze(2) + self.transitions).max(dim=1)
            nxt = nxt + emissions[:, t]
            score = torch.where(mask[:, t].unsqueeze(1), nxt, score)
            history.append(idx)
        score = score + self.end
        best_score, best_last = score.max(dim=1)
        lengths = mask.sum(1).tolist()
        paths = []
        for b in range(emissions.shape[0]):
            tag = int(torch.argmax(score[b]))
            assert tag == int(best_last[b])
            path = [tag]
            for hist in reversed(history[:lengths[b] - 1]):
                tag = int(hist[b, tag])
                path.append(tag)
            paths.append(path[::-1])
        return best_score, paths


class BiLSTMCRF(nn.Module):
    def __init__(self, n_words=N_WORDS, n_tags=N_TAGS, emb=8, hidden=16):
        super().__init__()
        self.embed = nn.Embedding(n_words, emb, padding_idx=PAD)
        self.lstm = nn.LSTM(emb, hidden // 2, num_layers=1, bidirectional=True, batch_first=True)
        self.hidden2tag = nn.Linear(hidden, n_tags)
        self.crf = CRF(n_tags)

    def emissions(self, words):
        out, _ = self.lstm(self.embed(words))
        return self.hidden2tag(out)

    def loss(self, words, tags, mask):
        return self.crf.neg_log_likelihood(self.emissions(words), tags, mask)

    def decode(self, words, mask):
        return self.crf.viterbi(self.emissions(words), mask)


def make_data(n, max_len, seed):
    """Word ids 1..19 in classes by id % 4; a tag is the class, except that a word of class 3
    right after tag 1 is tagged 1 again (so the previous tag matters)."""
    rng = np.random.default_rng(seed)
    words = np.zeros((n, max_len), dtype=np.int64)
    tags = np.zeros((n, max_len), dtype=np.int64)
    lengths = rng.integers(max_len // 2, max_len + 1, n)
    for b in range(n):
        prev = -1
        for t in range(lengths[b]):
            w = int(rng.integers(1, N_WORDS))
            tag = 1 if (w % 4 == 3 and prev == 1) else w % 4
            words[b, t], tags[b, t], prev = w, tag, tag
    return words, tags, lengths


def tensors(words, tags, lengths):
    mask = torch.arange(words.shape[1])[None, :] < torch.from_numpy(lengths)[:, None]
    return torch.from_numpy(words), torch.from_numpy(tags), mask


def train_step(model, optimizer, words, tags, mask):
    model.train()
    optimizer.zero_grad()
    loss = model.loss(words, tags, mask)
    loss.backward()
    optimizer.step()
    return loss.item()


def accuracy(model, words, tags, mask):
    model.eval()
    _, paths = model.decode(words, mask)
    gold = tags.tolist()
    right = sum(int(tag == gold[b][i]) for b, path in enumerate(paths)
                for i, tag in enumerate(path))
    return right / int(mask.sum())


def main(argv=None):
    parser = argparse.ArgumentParser(description="BiLSTM-CRF tagger")
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--hidden", type=int, default=16)
    parser.add_argument("--lr", type=float, default=0.05)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    words, tags, mask = tensors(*make_data(48, 7, seed=1))
    model = BiLSTMCRF(hidden=args.hidden)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9, weight_decay=1e-4)
    losses, accs = [], []
    for _ in range(args.epochs):
        for i in range(0, len(words), args.batch_size):
            sl = slice(i, i + args.batch_size)
            losses.append(train_step(model, optimizer, words[sl], tags[sl], mask[sl]))
        accs.append(accuracy(model, words, tags, mask))
    with torch.no_grad():
        em = model.emissions(words[:4])
        scores, paths = model.crf.viterbi(em, mask[:4])
        z = model.crf.log_partition(em, mask[:4])
        best = model.crf.gold_score(em, torch.tensor([p + [0] * (7 - len(p)) for p in paths]),
                                    mask[:4])
    print(json.dumps({
        "losses": losses, "accs": accs, "paths": paths,
        "path_lengths": [len(p) for p in paths], "lengths": mask[:4].sum(1).tolist(),
        "viterbi_is_path_score": float((scores - best).abs().max()),
        "below_partition": bool((scores <= z + 1e-5).all()),
        "pad_row": model.embed.weight[PAD].tolist(),
        "n_params": sum(p.numel() for p in model.parameters()),
    }))


if __name__ == "__main__":
    main()
