"""Integer arithmetic as PyTorch does it: %, // and fmod exact on int64 (the sign rules of
remainder and fmod, rounding down, ZeroDivisionError), and true division of integers
giving the default float dtype. Training scripts reach these through `correct / total`,
`index // width` and `index % width`."""
import pytest
import torch
from helpers import ca, error_of, same_outcome

import cagrad

A = [5, -7, 9, 0, -12, 2**62, -(2**63)]
B = [2, 3, -4, 7, -5, 3, -1]

BINARY = {
    "mod": lambda L, a, b: a % b,
    "floordiv": lambda L, a, b: a // b,
    "truediv": lambda L, a, b: a / b,
    "remainder": lambda L, a, b: L.remainder(a, b),
    "fmod": lambda L, a, b: L.fmod(a, b),
    "floor_divide": lambda L, a, b: L.floor_divide(a, b),
    "div": lambda L, a, b: L.div(a, b),
}


def _both(fn):
    """fn(L) with each library: (values, dtype name) of cagrad's and torch's result."""
    out = []
    for L in (ca, torch):
        r = fn(L)
        out.append((r.tolist(), str(r.dtype).split(".")[-1]))
    return out


@pytest.mark.parametrize("name", sorted(BINARY))
@pytest.mark.parametrize("other", ["tensor", "int", "negint", "float", "reflected"])
def test_integer_binary_matches_torch(name, other):
    def run(L):
        a = L.tensor(A)
        f = BINARY[name]
        if other == "tensor":
            return f(L, a, L.tensor(B))
        if other == "int":
            return f(L, a, 3)
        if other == "negint":
            return f(L, a, -4)
        if other == "float":
            return f(L, a, 2.5)
        if name in ("remainder", "fmod", "floor_divide", "div"):
            return f(L, L.tensor(7), a.clamp(min=1))  # 0-d tensor first: no number overload
        return f(L, 7, a.clamp(min=1))

    c, t = _both(run)
    assert c == t


@pytest.mark.parametrize("name", ["mod", "floordiv", "remainder", "fmod", "floor_divide"])
@pytest.mark.parametrize("divisor", ["scalar", "tensor"])
def test_zero_divisor_raises_like_torch(name, divisor):
    def make(L):
        a = L.tensor([4, 5])
        b = 0 if divisor == "scalar" else L.tensor([1, 0])
        return BINARY[name](L, a, b)

    assert error_of(ca, make) == error_of(torch, make)
    assert error_of(ca, make)[0] is RuntimeError


def test_bool_and_counts_divide_as_floats():
    """The accuracy line of every training script: (pred == y).sum() / len, and .item()."""
    def run(L):
        pred, y = L.tensor([1, 2, 3, 3]), L.tensor([1, 2, 0, 3])
        correct = (pred == y).sum()
        return L.stack([correct / 4, correct / pred.numel(), 100.0 * correct / 4])

    c, t = _both(run)
    assert c == t
    assert c[1] == "float32"


def test_default_dtype_decides_the_float():
    prev = ca.get_default_dtype()
    ca.set_default_dtype(ca.float64)
    torch.set_default_dtype(torch.float64)
    try:
        c, t = _both(lambda L: L.tensor([1, 2]) / 3)
    finally:
        ca.set_default_dtype(prev)
        torch.set_default_dtype(torch.float32)
    assert c == t and c[1] == "float64"


@pytest.mark.parametrize("stmt", ["a %= 3", "a //= -2", "a /= 2", "a.remainder_(4)",
                                  "a.fmod_(-4)", "a.floor_divide_(3)"])
def test_in_place_forms(stmt):
    def make(L):
        a = L.tensor([5, -7, 9])
        exec(stmt, {}, {"a": a})
        return a.tolist()

    same_outcome(make)
    if "/=" not in stmt:
        ns = {"a": ca.tensor([5, -7, 9])}
        exec(stmt, {}, ns)
        assert ns["a"].dtype == ca.int64


def test_float_operand_keeps_gradients():
    """int64 beside a float tensor promotes; the float side's gradient is torch's."""
    grads = []
    for L in (ca, torch):
        f = L.tensor([1.5, -2.0, 3.25], requires_grad=True)
        (f % L.tensor([2, 3, -2]) + f / L.tensor([2, 4, 8]) + L.fmod(f, L.tensor([1, 2, 2]))).sum().backward()
        grads.append(f.grad.tolist())
    assert grads[0] == grads[1]


def test_int_results_never_require_grad():
    r = cagrad.tensor([5, 7]) % 3
    assert not r.requires_grad and r.grad_fn is None


@pytest.mark.parametrize("expr", ["a * 2.5", "2.5 * a", "a + 0.5", "a - 0.5", "0.5 - a",
                                  "a.clamp(min=0.5)", "a.clamp(0, 2.5)", "a.clamp(max=-2.5)"])
def test_int64_with_a_python_float_promotes(expr):
    c, t = _both(lambda L: eval(expr, {}, {"a": L.tensor([5, -7, 9])}))
    assert c == t and c[1] == "float32"


@pytest.mark.parametrize("stmt", ["a += 2.5", "a *= 1.5", "a.add_(1.5)", "a.fill_(-2.7)",
                                  "a[1] = 3.9", "a[a > 0] = -1.5"])
def test_int64_in_place_with_a_float(stmt):
    """In-place arithmetic refuses the float result; fill_ and assignment truncate."""
    def make(L):
        a = L.tensor([5, -7, 9])
        exec(stmt, {}, {"a": a})
        return a.tolist()

    same_outcome(make)
