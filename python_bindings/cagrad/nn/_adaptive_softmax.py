"""nn.AdaptiveLogSoftmaxWithLoss: the adaptive softmax of Grave et al. (2016), with
torch's parameters (head, tail[i] = Sequential(Linear, Linear), no tail biases), so
state_dicts load both ways.

The head scores the shortlist (the first cutoffs[0] classes) plus one entry per tail
cluster; a class in cluster i has log p = head[shortlist + i] + log_softmax(tail_i)[c].
forward only runs each tail on the rows whose target falls in its cluster; the pieces
are put back in row order with one index_select, so the whole loss is a composite of
differentiable ops (eager and compiled backward).
"""

from collections import namedtuple

import numpy as np

from .. import _C, _functions
from .._creation import tensor, zeros
from .._dtype import check_device
from .container import ModuleList, Sequential
from .layers import Linear
from .module import Module

__all__ = ["AdaptiveLogSoftmaxWithLoss"]

_ASMoutput = namedtuple("_ASMoutput", ["output", "loss"])


def _check_cutoffs(cutoffs, n_classes):
    if len(cutoffs) == 0:
        raise ValueError("cutoffs should be a sequence of length larger than 0")
    if (cutoffs != sorted(cutoffs) or min(cutoffs) <= 0 or max(cutoffs) > n_classes - 1
            or len(set(cutoffs)) != len(cutoffs) or any(int(c) != c for c in cutoffs)):
        raise ValueError("cutoffs should be a sequence of unique, positive integers sorted in "
                         "an increasing order, where each value is between 1 and n_classes-1")


class AdaptiveLogSoftmaxWithLoss(Module):
    """forward(input [N, in_features] or [in_features], target [N] or []) returns
    (output: the target's log-probability per row, loss: the mean of -output)."""

    def __init__(self, in_features, n_classes, cutoffs, div_value=4.0, head_bias=False,
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        cutoffs = list(cutoffs)
        _check_cutoffs(cutoffs, n_classes)
        self.in_features = in_features
        self.n_classes = n_classes
        self.cutoffs = cutoffs + [n_classes]
        self.div_value = div_value
        self.head_bias = head_bias
        self.shortlist_size = self.cutoffs[0]
        self.n_clusters = len(self.cutoffs) - 1
        self.head_size = self.shortlist_size + self.n_clusters
        self.head = Linear(in_features, self.head_size, bias=head_bias, dtype=dtype)
        self.tail = ModuleList()
        for i in range(self.n_clusters):
            # each cluster projects to a smaller hidden size, div_value times per level
            hidden = int(in_features // (div_value ** (i + 1)))
            size = self.cutoffs[i + 1] - self.cutoffs[i]
            self.tail.append(Sequential(Linear(in_features, hidden, bias=False, dtype=dtype),
                                        Linear(hidden, size, bias=False, dtype=dtype)))

    def reset_parameters(self):
        self.head.reset_parameters()
        for projection in self.tail:
            for layer in projection:
                layer.reset_parameters()

    def forward(self, input_, target_):
        input, target, batched = self._batched(input_, target_)
        labels = np.asarray(target.detach().numpy()).astype(np.int64).reshape(-1)
        bounds = [0] + self.cutoffs
        if labels.size and (labels.min() < 0 or labels.max() >= self.n_classes):
            raise RuntimeError(f"Target values should be in [0, {self.n_classes - 1}], but "
                               f"values in range [{labels.min()}, {labels.max()}] were found. ")
        cluster = np.searchsorted(np.array(self.cutoffs), labels, side="right")
        # the head entry each row reads: its class, or its cluster's entry
        head_index = np.where(cluster == 0, labels, self.shortlist_size + cluster - 1)
        head_logprob = self.head(input).log_softmax(1)
        output = head_logprob.gather(1, tensor(head_index[:, None])).squeeze(1)
        pieces, order = [], []
        for i in range(1, len(bounds) - 1):
            rows = np.nonzero(cluster == i)[0]
            if rows.size == 0:
                continue
            local = self.tail[i - 1](input.index_select(0, tensor(rows))).log_softmax(1)
            pieces.append(local.gather(1, tensor(labels[rows, None] - bounds[i])).squeeze(1))
            order.append(rows)
        if pieces:
            output = output + self._in_row_order(pieces, order, cluster, input)
        loss = (-output).mean()
        return _ASMoutput(output if batched else output.squeeze(0), loss)

    @staticmethod
    def _in_row_order(pieces, order, cluster, input):
        """The tails' values in row order, 0 for shortlist rows: one cat of the pieces
        (and zeros), then the inverse permutation."""
        shortlist = np.nonzero(cluster == 0)[0]
        pieces = [zeros(shortlist.size, dtype=input.dtype)] + pieces
        rows = np.concatenate([shortlist] + order)
        inverse = np.empty_like(rows)
        inverse[rows] = np.arange(rows.size)
        return _functions.cat(pieces, 0).index_select(0, tensor(inverse))

    def _batched(self, input, target):
        """torch's shape checks; a 0-d target with a 1-d input is one row."""
        if not isinstance(input, _C.TensorBase) or not isinstance(target, _C.TensorBase):
            raise TypeError("AdaptiveLogSoftmaxWithLoss.forward() takes two Tensors")
        if target.ndim == 1:
            if input.shape[0] != target.shape[0]:
                raise RuntimeError("Input and target should have the same size in the batch "
                                   "dimension.")
            if input.ndim != 2:
                raise RuntimeError(f"1D target tensor expects 2D input tensors, but found "
                                   f"inputs with size {list(input.shape)}")
            return input, target, True
        if target.ndim == 0:
            if input.ndim != 1:
                raise RuntimeError(f"0D target tensor expects 1D input tensors, but found "
                                   f"inputs with size {list(input.shape)}")
            return input.unsqueeze(0), target.unsqueeze(0), False
        raise RuntimeError("0D or 1D target tensor expected, multi-target not supported")

    def _full_log_prob(self, input, head_output):
        """[N, n_classes]: the shortlist's head log-probabilities, then each cluster's
        log_softmax shifted by its head entry."""
        head_logprob = head_output.log_softmax(1)
        parts = [head_logprob.narrow(1, 0, self.shortlist_size)]
        for i, projection in enumerate(self.tail):
            entry = head_logprob.narrow(1, self.shortlist_size + i, 1)
            parts.append(projection(input).log_softmax(1) + entry)
        return _functions.cat(parts, 1)

    def log_prob(self, input):
        """Log-probabilities of every class, [N, n_classes]."""
        return self._full_log_prob(input, self.head(input))

    def predict(self, input):
        """The most likely class per row, [N] int64: the head's argmax where that is a
        shortlist class, else the argmax of the full distribution."""
        head_output = self.head(input)
        best = np.asarray(head_output.argmax(1).numpy()).astype(np.int64)
        outside = np.nonzero(best >= self.shortlist_size)[0]
        if outside.size:
            rows = tensor(outside)
            full = self._full_log_prob(input.index_select(0, rows),
                                       head_output.index_select(0, rows))
            best[outside] = np.asarray(full.argmax(1).numpy())
        return tensor(best)
