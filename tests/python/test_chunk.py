"""chunk as torch: ceil(size / chunks) per piece (so possibly fewer pieces), `chunks` empty
views of a size-0 dim, torch's error for chunks <= 0, and gradients through the pieces."""
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, error_of


@pytest.mark.parametrize("shape,chunks,dim", [((2, 0), 3, -1), ((2, 0), 3, 0), ((0,), 2, 0),
                                              ((5,), 2, 0), ((6,), 4, 0), ((3, 7), 3, 1),
                                              ((4, 2), 8, 0)])
def test_chunk_shapes_match_torch(shape, chunks, dim):
    got = [tuple(c.shape) for c in ca.zeros(*shape).chunk(chunks, dim)]
    want = [tuple(c.shape) for c in torch.zeros(*shape).chunk(chunks, dim)]
    assert got == want


@pytest.mark.parametrize("chunks", [0, -2])
def test_chunk_count_error(chunks):
    def make(L):
        return L.ones(3).chunk(chunks)

    assert error_of(ca, make) == error_of(torch, make)


@pytest.mark.parametrize("compiled", [False, True])
def test_gradient_through_chunks(compiled):
    grads = []
    for L in (ca, torch):
        x = L.arange(14.0, dtype=L.float64).reshape(2, 7).requires_grad_(True)
        a, b, c = x.chunk(3, 1)
        with compiled_ctx(compiled and L is ca):
            ((a * 2).sum() + (b ** 2).sum() - c.sum()).backward()
        grads.append(x.grad)
    assert_close(grads[0], grads[1])
