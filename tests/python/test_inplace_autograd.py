"""In-place ops on tensors in the autograd graph, as PyTorch records them: `out +=
identity` in a residual block, `nn.ReLU(inplace=True)`, `y[mask] = 0`, `y.clamp_(...)`.
The op runs out of place and the tensor takes the result's values and history (C:
ca_tensor_rebase_), so gradients flow through it; compared with torch 2.13 in float32 and
float64, eagerly and under compiled autograd. Views of graph tensors: test_inplace_views.py."""
import numpy as np
import pytest
import torch
from helpers import assert_close, ca, compiled_ctx, error_of

STATEMENTS = [
    "y += x", "y -= 0.5 * x", "y *= x", "y /= (x * x + 1)", "y.add_(x, alpha=2)",
    "y.sub_(1)", "y.mul_(3)", "y.div_(2)", "y.clamp_(min=0)", "y.clamp_(-1, 1)",
    "y.masked_fill_(y > 1, 0.0)", "y.relu_()", "y.sigmoid_()", "y.tanh_()", "y.exp_()",
    "y.abs_()", "y.pow_(2)", "y.neg_()", "y.addcmul_(x, x, value=0.5)", "y.lerp_(x, 0.25)",
    "y.copy_(x.sin())", "y[0] = 5", "y[1:3] = 0.5", "y[y > 1] = -1", "y.clamp_min_(0.1)",
    "y += x; y *= 2",
]


def _run(L, stmt, dtype, compiled):
    x = L.tensor(np.array([0.5, -1.25, 2.0, 3.0]), dtype=getattr(L, dtype), requires_grad=True)
    ns = {"x": x, "y": x * 2 + 0.25, "L": L}
    with compiled_ctx(compiled and L is ca):
        exec(stmt, ns)  # noqa: S102 - the statement under test
        y = ns["y"]
        (y * L.tensor([1.0, 2.0, 3.0, 4.0], dtype=getattr(L, dtype))).sum().backward()
    return y.detach(), x.grad


@pytest.mark.parametrize("stmt", STATEMENTS)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_inplace_statement_matches_torch(stmt, dtype, compiled):
    cy, cg = _run(ca, stmt, dtype, compiled)
    ty, tg = _run(torch, stmt, dtype, False)
    assert_close(cy, ty)
    assert_close(cg, tg)


ASSIGNMENTS = [
    "y = L.zeros(2, 4); y[:, 1] = x[:2] * 3; y[0] = x",
    "y = x * 2; y[1:3] = w",
    "y = (x * 2).clone(); y[0] = w.sum()",
    "y = L.zeros(3, 4); y[1] = x; y[2, 1:3] = w * x[1:3]",
    "y = x * 1; y[y > 1] = w.sum()",
    "y = L.zeros(4, 2); y[:, 0] = x; y[..., 1] = w[0]",
]


@pytest.mark.parametrize("stmt", ASSIGNMENTS)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_assigning_into_a_tensor_in_the_graph(stmt, compiled):
    """`buf[t] = h` (an RNN collecting its states) and `y[mask] = v`: the gradient goes to
    the assigned value (summed over its broadcast) and not to the overwritten elements."""
    res = []
    for L in (ca, torch):
        x = L.tensor([0.5, -1.0, 2.0, 3.0], dtype=L.float64, requires_grad=True)
        w = L.tensor([4.0, 5.0], dtype=L.float64, requires_grad=True)
        ns = {"x": x, "w": w, "L": L}
        with compiled_ctx(compiled and L is ca):
            exec(stmt, ns)  # noqa: S102 - the statement under test
            y = ns["y"]
            (y * L.arange(1.0, y.numel() + 1, dtype=L.float64).reshape(y.shape)).sum().backward()
        res.append((y.detach(), x.grad, w.grad))
    for c, t in zip(*res):
        assert (c is None) == (t is None)
        if c is not None:
            assert_close(c, t)


def test_more_permissive_than_torch_where_the_saved_value_is_kept():
    """relu_ then mul_: torch's ReluBackward saved y itself and reports the change; cagrad's
    relu_ saved its own result, so the gradient is the out-of-place one."""
    x = ca.tensor([0.5, -1.0, 2.0], dtype=ca.float64, requires_grad=True)
    y = x * 2
    y.relu_().mul_(x)
    y.sum().backward()
    xt = torch.tensor([0.5, -1.0, 2.0], dtype=torch.float64, requires_grad=True)
    ((xt * 2).relu() * xt).sum().backward()
    assert_close(x.grad, xt.grad)


def test_version_and_history_move_to_the_result():
    x = ca.tensor([1.0, 2.0], requires_grad=True)
    y = x * 2
    assert y._version == 0
    y.add_(1)
    assert y._version == 1 and y.grad_fn.name() == "AddBackward0"
    y.relu_()
    assert y._version == 2 and y.grad_fn.name() == "ReluBackward0"


MODULES = ["ReLU", "LeakyReLU", "ELU", "Hardtanh", "ReLU6", "SiLU", "Hardswish", "SELU",
           "CELU", "Mish", "Hardsigmoid"]


@pytest.mark.parametrize("name", MODULES)
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_activation_modules_inplace_true(name, compiled):
    out = []
    for L in (ca, torch):
        x = L.tensor(np.linspace(-3, 3, 8), dtype=L.float32, requires_grad=True)
        h = x * 1.5
        with compiled_ctx(compiled and L is ca):
            y = getattr(L.nn, name)(inplace=True)(h)
            assert y is h  # written into its input, as torch
            (y * y).sum().backward()
        out.append((y.detach(), x.grad))
    assert_close(out[0][0], out[1][0])
    assert_close(out[0][1], out[1][1])


def _basic_block(L, seed, dtype):
    """torchvision's BasicBlock: conv-bn-relu(inplace)-conv-bn, out += identity, relu."""
    nn = L.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.bn1 = nn.BatchNorm2d(4)
            self.relu = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(4, 4, 3, padding=1, bias=False)
            self.bn2 = nn.BatchNorm2d(4)

        def forward(self, x):
            identity = x
            out = self.relu(self.bn1(self.conv1(x)))
            out = self.bn2(self.conv2(out))
            out += identity
            out = self.relu(out)
            return out

    block = Block().to(getattr(L, dtype))
    rng = np.random.default_rng(seed)
    with L.no_grad():
        for p in block.parameters():
            p.copy_(L.tensor(rng.standard_normal(tuple(p.shape)) * 0.3))
    return block


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
def test_residual_block_with_inplace_add_and_relu(dtype, compiled):
    grads = []
    for L in (ca, torch):
        block = _basic_block(L, 3, dtype)
        x = L.tensor(np.random.default_rng(4).standard_normal((2, 4, 6, 6)),
                     dtype=getattr(L, dtype), requires_grad=True)
        for _ in range(2):  # a second step hits the compiled cache
            block.zero_grad()
            x.grad = None
            with compiled_ctx(compiled and L is ca):
                block(x).pow(2).mean().backward()
        grads.append([x.grad] + [p.grad for p in block.parameters()])
    for c, t in zip(*grads):
        assert_close(c, t)


def test_leaf_error_is_torchs():
    def make(L):
        w = L.ones(3, requires_grad=True)
        w.add_(1)

    c, t = error_of(ca, make), error_of(torch, make)
    assert c[0] is t[0] is RuntimeError
    assert "a leaf Variable that requires grad is being used in an in-place operation" in c[1]


def test_saved_value_changed_in_place_fails_at_backward_as_torch():
    for L in (ca, torch):
        x = L.tensor([0.5, 1.0], requires_grad=True)
        y = x.exp()  # exp saves its result
        z = y * 1
        y.add_(1)
        with pytest.raises(RuntimeError, match="modified by an in-?place operation"):
            (z + y).sum().backward()


def test_outside_the_graph_inplace_still_writes_in_place():
    buf = ca.zeros(3)
    alias = buf[:]  # a view outside the graph sees the write
    ca.nn.functional.relu(buf.add_(ca.tensor([-1.0, 2.0, 3.0])), inplace=True)
    assert alias.tolist() == [0.0, 2.0, 3.0]
