"""A two-layer graph convolutional network trained the way pytorch/examples' gcn trains on
Cora, here on a Cora-like random graph (a stochastic block model with bag-of-words
features) made with numpy, so every library sees the same graph.

The graph is built as the example builds it: an int64 sparse COO adjacency from the edge
list (torch.sparse_coo_tensor(edges.T, ...)), self loops by torch.eye(V) + adj, degrees by
torch.sum(dim=1), D^-1/2 with the infinities zeroed through a mask, torch.diag(d)
.to_sparse(), the renormalised D^-1/2 (A + I) D^-1/2 by sparse @ dense @ sparse, features
row-normalised the same way and passed on as a sparse tensor. Each GraphConv does
torch.mm(input, kernel) (sparse input in the first layer) and torch.spmm(adj, support);
the model adds ReLU, dropout and log_softmax, and trains with Adam(weight_decay) on
nn.NLLLoss over the training nodes, with accuracy by output.max(1)[1].eq(labels).

It is a plain PyTorch program. The tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave3.py).

    python gcn_style.py [--epochs N] [--hidden-dim N] [--dropout-p P] [--include-bias]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.optim import Adam


class GraphConv(nn.Module):
    """H' = A_hat (H W) (+ b), with A_hat the renormalised adjacency."""

    def __init__(self, input_dim, output_dim, use_bias=False):
        super().__init__()
        self.kernel = nn.Parameter(torch.Tensor(input_dim, output_dim))
        nn.init.xavier_normal_(self.kernel)
        self.bias = None
        if use_bias:
            self.bias = nn.Parameter(torch.Tensor(output_dim))
            nn.init.zeros_(self.bias)

    def forward(self, input_tensor, adj_mat):
        support = torch.mm(input_tensor, self.kernel)
        output = torch.spmm(adj_mat, support)
        if self.bias is not None:
            output = output + self.bias
        return output


class GCN(nn.Module):
    def __init__(self, input_dim, hidden_dim, output_dim, use_bias=True, dropout_p=0.1):
        super().__init__()
        self.gc1 = GraphConv(input_dim, hidden_dim, use_bias=use_bias)
        self.gc2 = GraphConv(hidden_dim, output_dim, use_bias=use_bias)
        self.dropout = nn.Dropout(dropout_p)

    def forward(self, input_tensor, adj_mat):
        x = self.gc1(input_tensor, adj_mat)
        x = F.relu(x)
        x = self.dropout(x)
        x = self.gc2(x, adj_mat)
        return F.log_softmax(x, dim=1)


def random_cora(n_nodes=120, n_classes=4, n_words=40, seed=0):
    """(word counts, labels, edges): nodes link mostly within their class, and each class
    uses its own words more often."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(n_classes, size=n_nodes)
    same = labels[:, None] == labels[None, :]
    links = rng.random((n_nodes, n_nodes)) < np.where(same, 0.08, 0.005)
    links = np.triu(links, 1)
    edges = np.argwhere(links).astype(np.int32)  # one direction per pair, as in cora.cites
    words = rng.random((n_nodes, n_words)) < 0.05
    topic = np.arange(n_words) % n_classes == labels[:, None]
    words |= topic & (rng.random((n_nodes, n_words)) < 0.3)
    words[n_nodes - 1] = False  # a node with no words: its scale is 1/0 = inf, zeroed
    return words.astype(np.int64), labels, edges


def load_graph(seed=0):
    counts, labels_np, edges = random_cora(seed=seed)
    features = torch.tensor(counts.astype(np.float32))
    scale_vector = torch.sum(features, dim=1)
    scale_vector = 1 / scale_vector
    scale_vector[scale_vector == float("inf")] = 0
    scale_vector = torch.diag(scale_vector).to_sparse()
    features = scale_vector @ features
    labels = torch.tensor(labels_np, dtype=torch.long)

    V, E = len(labels_np), edges.shape[0]
    adj_mat = torch.sparse_coo_tensor(edges.T, torch.ones(E), (V, V), dtype=torch.int64)
    adj_mat = torch.eye(V) + adj_mat
    degree_mat = torch.sum(adj_mat, dim=1)
    degree_mat = torch.sqrt(1 / degree_mat)
    degree_mat[degree_mat == float("inf")] = 0
    degree_mat = torch.diag(degree_mat).to_sparse()
    adj_mat = degree_mat @ adj_mat @ degree_mat
    return features.to_sparse(), labels, adj_mat.to_sparse()


def splits(n, seed=0):
    idx = torch.tensor(np.random.default_rng(seed + 1).permutation(n), dtype=torch.long)
    return idx[:40], idx[40:70], idx[70:]  # test, val, train


def accuracy(output, labels):
    preds = output.max(1)[1].type_as(labels)
    correct = preds.eq(labels).double()
    return (correct.sum() / len(labels)).item()


def train_step(model, optimizer, criterion, features, adj, labels, idx_train):
    model.train()
    optimizer.zero_grad()
    output = model(features, adj)
    loss = criterion(output[idx_train], labels[idx_train])
    loss.backward()
    optimizer.step()
    return loss.item(), accuracy(output[idx_train], labels[idx_train])


def evaluate(model, criterion, features, adj, labels, mask):
    model.eval()
    with torch.no_grad():
        output = model(features, adj)
        loss = criterion(output[mask], labels[mask])
    return loss.item(), accuracy(output[mask], labels[mask])


def main(argv=None):
    parser = argparse.ArgumentParser(description="GCN on a Cora-like random graph")
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--lr", type=float, default=0.01)
    parser.add_argument("--l2", type=float, default=5e-4)
    parser.add_argument("--dropout-p", type=float, default=0.5)
    parser.add_argument("--hidden-dim", type=int, default=16)
    parser.add_argument("--include-bias", action="store_true", default=False)
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    features, labels, adj_mat = load_graph()
    idx_test, idx_val, idx_train = splits(len(labels))
    gcn = GCN(features.shape[1], args.hidden_dim, labels.max().item() + 1, args.include_bias,
              args.dropout_p)
    optimizer = Adam(gcn.parameters(), lr=args.lr, weight_decay=args.l2)
    criterion = nn.NLLLoss()
    losses, accs, val = [], [], []
    for _ in range(args.epochs):
        loss, acc = train_step(gcn, optimizer, criterion, features, adj_mat, labels, idx_train)
        losses.append(loss)
        accs.append(acc)
        val.append(evaluate(gcn, criterion, features, adj_mat, labels, idx_val))
    test_loss, test_acc = evaluate(gcn, criterion, features, adj_mat, labels, idx_test)
    print(json.dumps({
        "losses": losses, "train_accs": accs, "val": val, "test_loss": test_loss,
        "test_acc": test_acc, "nnz": adj_mat._nnz(), "features_nnz": features._nnz(),
        "adj_row_sums": adj_mat.to_dense().sum(1)[:3].tolist(),
        "layout": str(adj_mat.layout).split(".")[-1], "n_classes": labels.max().item() + 1,
    }))


if __name__ == "__main__":
    main()
