"""torch.as_strided / Tensor.as_strided against torch 2.13: sliding windows (their
gradients sum where windows overlap), a transpose and a diagonal read from the memory,
storage offsets, float32 and float64, eager and compiled, gradcheck and gradgradcheck,
an in-place op through the view, memory outside the input's elements or shared by them
(torch's gradient over memory positions), and torch's errors."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, error_of

CASES = {
    "windows": ((3, 3, 2), (4, 1, 1), None),
    "diagonal": ((3,), (5,), None),
    "transpose": ((4, 3), (1, 4), None),
    "offset_windows": ((2, 2, 2), (4, 1, 1), 5),
    "broadcast_row": ((3, 4), (0, 1), None),
}


@pytest.mark.parametrize("case", list(CASES))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_as_strided_matches_torch(case, dtype, compiled):
    size, stride, offset = CASES[case]

    def run(L):
        x = L.tensor(np.random.default_rng(0).standard_normal((3, 4)), dtype=getattr(L, dtype),
                     requires_grad=True)
        y = x * 1.5
        v = y.as_strided(size, stride, offset) if offset is not None else \
            L.as_strided(y, size, stride)
        w = L.tensor(np.random.default_rng(1).standard_normal(size), dtype=getattr(L, dtype))
        with compiled_ctx(compiled and L is ca):
            (v.tanh() * w).sum().backward()
        return v.detach(), x.grad, v.grad_fn.name(), v.storage_offset()
    got, want = run(ca), run(torch)
    assert_close(got[0], want[0])
    assert_close(got[1], want[1])
    assert got[2:] == want[2:]


def test_gradcheck_and_gradgradcheck():
    def f(x):
        return (x.as_strided((3, 2), (2, 1)) ** 2).sin()
    x = ca.randn(7, dtype=ca.float64, requires_grad=True)
    assert ca.autograd.gradcheck(f, (x,))
    assert ca.autograd.gradgradcheck(f, (x,))


def test_in_place_through_the_view_matches_torch():
    def run(L):
        x = L.arange(6.0, dtype=L.float64).requires_grad_(True)
        y = x * 2
        y.as_strided((2,), (3,), 1).mul_(5)
        (y * y).sum().backward()
        return y.detach(), x.grad
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


@pytest.mark.parametrize("case", ["lengths", "negative_stride", "out_of_storage", "offset"])
def test_errors_match_torch(case):
    def make(L):
        x = L.ones(4)
        {"lengths": lambda: x.as_strided((2,), (1, 1)),
         "negative_stride": lambda: x.as_strided((2,), (-1,)),
         "out_of_storage": lambda: x.as_strided((3,), (2,)),
         "offset": lambda: x.as_strided((2,), (1,), -1)}[case]()
    (ctype, cmsg), (ttype, tmsg) = error_of(ca, make), error_of(torch, make)
    assert ctype is ttype is RuntimeError
    assert tmsg in cmsg, (cmsg, tmsg)


@pytest.mark.parametrize("case", ["outside", "expanded_input", "unfold_of_unfold"])
def test_memory_outside_and_shared_by_the_elements_matches_torch(case):
    """torch's gradient works over memory positions: what a position no input element has
    gets is dropped, and input elements sharing a position split its gradient."""
    def run(L):
        x = L.tensor(np.arange(1.0, 7.0), dtype=L.float64, requires_grad=True)
        if case == "outside":
            v = x[1:3].as_strided((3,), (1,), 1)  # reads x[3], outside x[1:3]
        elif case == "expanded_input":
            v = x[:2].expand(3, 2).as_strided((2,), (1,), 0)
        else:
            v = x.reshape(2, 3).unfold(1, 2, 1).unfold(0, 2, 1)
        w = L.tensor(np.linspace(0.5, 2.0, v.numel()).reshape(tuple(v.shape)), dtype=L.float64)
        (v * w).sum().backward()
        return v.detach(), x.grad
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)


def test_in_place_through_a_view_made_under_saved_tensor_hooks():
    """the view's position maps were packed by the hooks: the in-place op unpacks them to
    scatter into the base and to rebuild the view's history."""
    def run(L):
        x = L.arange(6.0, dtype=L.float64).requires_grad_(True)
        with L.autograd.graph.saved_tensors_hooks(lambda t: t * 1, lambda t: t):
            y = x * 2
            v = y.as_strided((2,), (3,), 1)
        v.mul_(5)
        (y * y).sum().backward()
        return y.detach(), x.grad
    for c, t in zip(run(ca), run(torch)):
        assert_close(c, t)
