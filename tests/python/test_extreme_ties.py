"""amax/amin and max()/min() over every dim split the gradient evenly among tied
elements, as torch's; max(dim)/min(dim) give it to the returned index. Values are
unchanged bit for bit; eagerly and under compiled autograd, float32 and float64."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx

X = np.array([[2.0, 5.0, 5.0, -1.0], [1.0, 1.0, 0.0, 1.0], [3.0, 3.0, 3.0, 3.0]])
CASES = ["x.amax(1)", "x.amax()", "x.max()", "x.amin(1, keepdim=True)", "x.min()",
         "x.amax((0, 1))", "x.amin(-1)", "L.amax(x, 0)", "x.max(1).values", "x.min(0)[0]"]


@pytest.mark.parametrize("expr", CASES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_ties_match_torch(expr, dtype, compiled):
    out = []
    for L in (ca, torch):
        x = L.tensor(X, dtype=getattr(L, dtype), requires_grad=True)
        with compiled_ctx(compiled and L is ca):
            y = eval(expr)  # noqa: S307 - the expression under test
            (y * 3).sum().backward()
        out.append((y.detach(), x.grad))
    assert_close(out[0][0], out[1][0], rtol=0, atol=0)
    assert_close(out[0][1], out[1][1])


def test_without_grad_the_values_are_the_plain_reduction():
    x = ca.tensor(X)
    assert x.amax(1).tolist() == [5.0, 1.0, 3.0] and x.max().item() == 5.0
    assert ca.tensor([3, 7, 7]).amax().item() == 7  # int64 keeps its own path
