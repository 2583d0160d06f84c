"""A two-layer graph attention network (Velickovic et al.) on a small random graph, written
the way public PyTorch GAT code (pyGAT and its sparse variant) writes it: per-layer weights
as nn.Parameter set with nn.init.xavier_uniform_(gain=1.414), per-edge attention logits
a^T [W h_i || W h_j] split into two halves and passed through F.leaky_relu(0.2), then a
softmax over each node's neighbours, either dense (the logits of non-edges masked with
masked_fill(-inf) on the adjacency matrix, F.softmax over rows) or over an edge list (the
rows' maxima by scatter_reduce("amax"), exp, the denominators and the messages summed with
index_add; or, as pyGAT's sparse GAT, by torch.sparse.mm of a torch.sparse_coo_tensor whose
values are the edge weights), attention dropout, several heads concatenated after F.elu, an averaging output
head, log_softmax and F.nll_loss on a boolean train mask, with Adam and weight decay.

The graph and features are made with numpy, so every library sees the same data. It is a
plain PyTorch program; the tests run it with real torch and, unchanged, with
`python -m cagrad.as_torch` (tests/python/test_programs_wave5b.py).

    python gat_style.py [--attention dense|edges|sparse] [--epochs N] [--heads N]
"""

import argparse
import json

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F


class GraphAttentionLayer(nn.Module):
    def __init__(self, in_features, out_features, dropout, alpha=0.2, concat=True,
                 attention="dense"):
        super().__init__()
        self.dropout, self.alpha, self.concat = dropout, alpha, concat
        self.attention = attention
        self.W = nn.Parameter(torch.empty(in_features, out_features))
        nn.init.xavier_uniform_(self.W.data, gain=1.414)
        self.a = nn.Parameter(torch.empty(2 * out_features, 1))
        nn.init.xavier_uniform_(self.a.data, gain=1.414)

    def forward(self, h, adj, edges):
        Wh = torch.mm(h, self.W)  # (N, out_features)
        f = Wh.shape[1]
        # a^T [Wh_i || Wh_j] = Wh_i . a[:f] + Wh_j . a[f:]
        src_score = torch.matmul(Wh, self.a[:f, :])
        dst_score = torch.matmul(Wh, self.a[f:, :])
        if self.attention == "dense":
            h_prime = self._dense(Wh, src_score, dst_score, adj)
        elif self.attention == "sparse":
            h_prime = self._sparse(Wh, src_score, dst_score, edges)
        else:
            h_prime = self._edges(Wh, src_score, dst_score, edges)
        return F.elu(h_prime) if self.concat else h_prime

    def _dense(self, Wh, src_score, dst_score, adj):
        e = F.leaky_relu(src_score + dst_score.T, negative_slope=self.alpha)
        e = e.masked_fill(adj == 0, float("-inf"))
        attention = F.softmax(e, dim=1)
        attention = F.dropout(attention, self.dropout, training=self.training)
        return torch.matmul(attention, Wh)

    def _edges(self, Wh, src_score, dst_score, edges):
        row, col = edges  # node row attends to its neighbour col
        n = Wh.shape[0]
        e = F.leaky_relu(src_score[row, 0] + dst_score[col, 0], negative_slope=self.alpha)
        # subtract each row's maximum (a constant per row: no gradient needed through it)
        top = torch.full((n,), float("-inf"), dtype=e.dtype).scatter_reduce(
            0, row, e.detach(), reduce="amax", include_self=True)
        w = torch.exp(e - top[row])
        denom = torch.zeros(n, dtype=e.dtype).index_add(0, row, w)
        attention = F.dropout(w / denom[row], self.dropout, training=self.training)
        return torch.zeros_like(Wh).index_add_(0, row, attention.unsqueeze(1) * Wh[col])


    def _sparse(self, Wh, src_score, dst_score, edges):
        """As pyGAT's sparse GAT: the edge weights as the values of a sparse COO matrix,
        the row sums and the messages by sparse-dense products."""
        row, col = edges
        n = Wh.shape[0]
        e = F.leaky_relu(src_score[row, 0] + dst_score[col, 0], negative_slope=self.alpha)
        top = torch.full((n,), float("-inf"), dtype=e.dtype).scatter_reduce(
            0, row, e.detach(), reduce="amax", include_self=True)
        w = torch.exp(e - top[row])
        rowsum = torch.sparse.mm(torch.sparse_coo_tensor(edges, w, (n, n)),
                                 torch.ones(n, 1, dtype=w.dtype))
        w = F.dropout(w, self.dropout, training=self.training)
        h_prime = torch.sparse.mm(torch.sparse_coo_tensor(edges, w, (n, n)), Wh)
        return h_prime.div(rowsum)


class GAT(nn.Module):
    def __init__(self, nfeat, nhid, nclass, dropout=0.6, alpha=0.2, nheads=2,
                 attention="dense"):
        super().__init__()
        self.dropout = dropout
        self.attentions = nn.ModuleList(
            [GraphAttentionLayer(nfeat, nhid, dropout, alpha, True, attention)
             for _ in range(nheads)])
        self.out_att = GraphAttentionLayer(nhid * nheads, nclass, dropout, alpha, False,
                                           attention)

    def forward(self, x, adj, edges):
        x = F.dropout(x, self.dropout, training=self.training)
        x = torch.cat([att(x, adj, edges) for att in self.attentions], dim=1)
        x = F.dropout(x, self.dropout, training=self.training)
        x = F.elu(self.out_att(x, adj, edges))
        return F.log_softmax(x, dim=1)


def random_graph(n=40, n_classes=3, n_feat=8, seed=0):
    """Features, labels, a symmetric 0/1 adjacency with self-loops (mostly within a class)."""
    rng = np.random.default_rng(seed)
    labels = rng.integers(0, n_classes, n)
    centres = rng.normal(0, 1, (n_classes, n_feat))
    feats = centres[labels] + rng.normal(0, 1.0, (n, n_feat))
    same = labels[:, None] == labels[None, :]
    p = np.where(same, 0.25, 0.03)
    adj = np.triu(rng.uniform(size=(n, n)) < p, 1)
    adj = (adj | adj.T | np.eye(n, dtype=bool)).astype(np.float32)
    return feats.astype(np.float32), labels.astype(np.int64), adj


def train_step(model, optimizer, x, adj, edges, labels, mask):
    model.train()
    optimizer.zero_grad()
    out = model(x, adj, edges)
    loss = F.nll_loss(out[mask], labels[mask])
    loss.backward()
    optimizer.step()
    return loss.item()


@torch.no_grad()
def evaluate(model, x, adj, edges, labels, mask):
    model.eval()
    out = model(x, adj, edges)
    return F.nll_loss(out[mask], labels[mask]).item(), \
        (out[mask].argmax(1) == labels[mask]).double().mean().item(), out


def load_graph(seed=0):
    feats, labels, adj = random_graph(seed=seed)
    x, y, adj = torch.from_numpy(feats), torch.from_numpy(labels), torch.from_numpy(adj)
    edges = adj.nonzero().t()  # (2, E): row, col of every nonzero, self-loops included
    n = len(y)
    train_mask = torch.zeros(n, dtype=torch.bool)
    train_mask[: n // 2] = True
    return x, y, adj, edges, train_mask


def main(argv=None):
    parser = argparse.ArgumentParser(description="GAT")
    parser.add_argument("--attention", choices=["dense", "edges", "sparse"], default="dense")
    parser.add_argument("--epochs", type=int, default=40)
    parser.add_argument("--hidden", type=int, default=4)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--dropout", type=float, default=0.3)
    parser.add_argument("--lr", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=2)
    args = parser.parse_args(argv)
    torch.manual_seed(args.seed)
    x, y, adj, edges, train_mask = load_graph()
    test_mask = ~train_mask
    model = GAT(x.shape[1], args.hidden, int(y.max()) + 1, args.dropout, 0.2, args.heads,
                args.attention)
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr, weight_decay=5e-4)
    losses = [train_step(model, optimizer, x, adj, edges, y, train_mask)
              for _ in range(args.epochs)]
    train_loss, train_acc, _ = evaluate(model, x, adj, edges, y, train_mask)
    test_loss, test_acc, out = evaluate(model, x, adj, edges, y, test_mask)
    # the first head's attention rows sum to one and are zero off the graph
    layer = model.attentions[0]
    with torch.no_grad():
        Wh = x @ layer.W
        f = Wh.shape[1]
        e = F.leaky_relu(Wh @ layer.a[:f] + (Wh @ layer.a[f:]).T, 0.2)
        att = torch.softmax(e.masked_fill(adj == 0, float("-inf")), dim=1)
    print(json.dumps({
        "losses": losses, "train": [train_loss, train_acc], "test": [test_loss, test_acc],
        "n_edges": int(edges.shape[1]), "n_train": int(train_mask.sum()),
        "att_row_sums": att.sum(1).tolist()[:5],
        "att_off_graph": float(att[adj == 0].abs().max()),
        "out_shape": list(out.shape),
        "prob_sums": out.exp().sum(1).tolist()[:3],
    }))


if __name__ == "__main__":
    main()
