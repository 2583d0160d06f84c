"""A leaf's first .grad takes the leaf's strides when the leaf is dense but not
contiguous (a transposed weight gets a transposed gradient), else it is contiguous, as
PyTorch's AccumulateGrad lays it out; compared with torch 2.13, eager and compiled, with
the values."""

import pytest

from autograd_port_helpers import data, parity

MODES = ["eager", "compiled"]

LEAVES = {
    "transposed": lambda L: data(L, (3, 4), seed=1).t(),
    "permuted_3d": lambda L: data(L, (2, 3, 4), seed=1).permute(2, 0, 1),
    "contiguous": lambda L: data(L, (4, 3), seed=1),
    "sliced_not_dense": lambda L: data(L, (4, 6), seed=1)[:, ::2],
    "expanded": lambda L: data(L, (1, 3), seed=1).expand(4, 3),
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("leaf", sorted(LEAVES))
def test_first_grad_layout_follows_the_leaf(leaf, mode):
    def make(L):
        x = LEAVES[leaf](L).detach().requires_grad_()
        w = data(L, tuple(x.shape), seed=2)
        (x * w).sum().backward()
        return x.grad.stride(), x.grad
    parity(make, mode)


@pytest.mark.parametrize("mode", MODES)
def test_a_matmul_gradient_into_a_transposed_weight(mode):
    # a GEMM writes a leaf's gradient itself when it can: here through the leaf's layout
    def make(L):
        w = data(L, (5, 3), seed=1).t().detach().requires_grad_()
        x = data(L, (4, 3), seed=2)
        (x @ w).tanh().sum().backward()
        first = (w.grad.stride(), w.grad.clone())
        (x @ w).tanh().sum().backward()  # then accumulated in place, the layout kept
        return first, w.grad.stride(), w.grad
    parity(make, mode)
