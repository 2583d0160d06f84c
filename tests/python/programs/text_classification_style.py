"""A bag-of-words text classifier trained the way PyTorch's text_sentiment_ngrams tutorial
trains: nn.EmbeddingBag(mode='mean') fed one flat tensor of token ids plus offsets (made
with torch.tensor(lengths[:-1]).cumsum(dim=0)) by a DataLoader collate_fn, uniform_
initialisation, CrossEntropyLoss, SGD(lr=5) with StepLR(1, gamma=0.1), clip_grad_norm_(0.1),
random_split with a seeded torch.Generator for the validation set, and accuracy counted with
(logits.argmax(1) == label).sum().item().

The "news" is synthetic: each class draws most of its words from its own part of the
vocabulary. It is a plain PyTorch program. The tests run it with real torch and, unchanged,
with `python -m cagrad.as_torch` (tests/python/test_programs_more.py).

    python text_classification_style.py [--epochs N] [--mode mean|sum|max]
"""

import argparse
import json
import time

import numpy as np
import torch
from torch import nn
from torch.utils.data import DataLoader
from torch.utils.data.dataset import random_split

VOCAB, NUM_CLASS = 60, 4


def synthetic_news(n, seed):
    """n (label, token list) pairs; class c prefers tokens c*15 .. c*15+14."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        label = int(rng.integers(0, NUM_CLASS))
        length = int(rng.integers(3, 12))
        own = rng.random(length) < 0.7
        tokens = np.where(own, label * 15 + rng.integers(0, 15, length),
                          rng.integers(0, VOCAB, length))
        out.append((label, [int(t) for t in tokens]))
    return out


def collate_batch(batch):
    label_list, text_list, offsets = [], [], [0]
    for _label, _text in batch:
        label_list.append(_label)
        processed_text = torch.tensor(_text, dtype=torch.int64)
        text_list.append(processed_text)
        offsets.append(processed_text.size(0))
    label_list = torch.tensor(label_list, dtype=torch.int64)
    offsets = torch.tensor(offsets[:-1]).cumsum(dim=0)
    text_list = torch.cat(text_list)
    return label_list, text_list, offsets


class TextClassificationModel(nn.Module):
    def __init__(self, vocab_size, embed_dim, num_class, mode="mean"):
        super().__init__()
        self.embedding = nn.EmbeddingBag(vocab_size, embed_dim, mode=mode, sparse=False)
        self.fc = nn.Linear(embed_dim, num_class)
        self.init_weights()

    def init_weights(self):
        initrange = 0.5
        self.embedding.weight.data.uniform_(-initrange, initrange)
        self.fc.weight.data.uniform_(-initrange, initrange)
        self.fc.bias.data.zero_()

    def forward(self, text, offsets):
        return self.fc(self.embedding(text, offsets))


def train_step(model, criterion, optimizer, label, text, offsets):
    optimizer.zero_grad()
    predicted_label = model(text, offsets)
    loss = criterion(predicted_label, label)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 0.1)
    optimizer.step()
    return predicted_label, loss


def train(model, criterion, optimizer, dataloader, log):
    model.train()
    total_acc, total_count = 0, 0
    start_time = time.time()
    for label, text, offsets in dataloader:
        predicted_label, loss = train_step(model, criterion, optimizer, label, text, offsets)
        total_acc += (predicted_label.argmax(1) == label).sum().item()
        total_count += label.size(0)
        log.append(loss.item())
    return total_acc / total_count, time.time() - start_time


def evaluate(model, criterion, dataloader):
    model.eval()
    total_acc, total_count = 0, 0
    with torch.no_grad():
        for label, text, offsets in dataloader:
            predicted_label = model(text, offsets)
            criterion(predicted_label, label)
            total_acc += (predicted_label.argmax(1) == label).sum().item()
            total_count += label.size(0)
    return total_acc / total_count


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--lr", type=float, default=5.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--mode", default="mean", choices=["mean", "sum", "max"])
    args = parser.parse_args(argv)
    torch.manual_seed(0)
    train_dataset, test_dataset = synthetic_news(160, 0), synthetic_news(64, 1)
    num_train = int(len(train_dataset) * 0.95)
    split_train_, split_valid_ = random_split(
        train_dataset, [num_train, len(train_dataset) - num_train],
        generator=torch.Generator().manual_seed(42))
    loaders = [DataLoader(d, batch_size=args.batch_size, shuffle=s, collate_fn=collate_batch)
               for d, s in ((split_train_, True), (split_valid_, False), (test_dataset, False))]
    train_loader, valid_loader, test_loader = loaders
    model = TextClassificationModel(VOCAB, 16, NUM_CLASS, mode=args.mode)
    criterion = torch.nn.CrossEntropyLoss()
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    scheduler = torch.optim.lr_scheduler.StepLR(optimizer, 1.0, gamma=0.1)
    total_accu, log, accs = None, [], []
    for epoch in range(1, args.epochs + 1):
        train_acc, _elapsed = train(model, criterion, optimizer, train_loader, log)
        accu_val = evaluate(model, criterion, valid_loader)
        if total_accu is not None and total_accu > accu_val:
            scheduler.step()
        else:
            total_accu = accu_val
        accs.append([train_acc, accu_val])
    test_acc = evaluate(model, criterion, test_loader)
    print(json.dumps({"losses": log, "accs": accs, "test_acc": test_acc,
                      "lr": scheduler.get_last_lr()[0],
                      "split": [len(split_train_), len(split_valid_)]}))


if __name__ == "__main__":
    main()
