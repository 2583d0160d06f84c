"""cagrad.nn.Module and friends, against torch.nn running the same code: registration
order, named_parameters keys, state_dict / load_state_dict (round trip, strict errors),
train/eval flags, zero_grad, and the layers' parameter shapes and initial-value ranges."""

import math

import numpy as np
import pytest
import torch

from helpers import STANDIN, TOL_SUM, assert_close, ca, to_np, torch_gradient

LIBS = pytest.mark.parametrize("L", [ca, torch], ids=["cagrad", "torch"])


def make_net(L):
    nn = L.nn

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(4)
            self.fc = nn.Linear(4, 4)
            self.scale = nn.Parameter(L.ones(4))
            self.plain = 3  # not registered
            self.act = nn.GELU()

        def forward(self, x):
            return self.act(self.fc(self.norm(x))) * self.scale

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 4)
            self.blocks = nn.Sequential(Block(), nn.ReLU(), Block())
            self.head = nn.Linear(4, 3, bias=False)
            self.drop = nn.Dropout(0.1)

        def forward(self, idx):
            return self.head(self.drop(self.blocks(self.emb(idx))))

    return Net()


EXPECTED_NAMES = [
    "emb.weight",
    # a module's own parameters come before its children's (torch's named_modules walk)
    "blocks.0.scale",
    "blocks.0.norm.weight", "blocks.0.norm.bias", "blocks.0.fc.weight", "blocks.0.fc.bias",
    "blocks.2.scale",
    "blocks.2.norm.weight", "blocks.2.norm.bias", "blocks.2.fc.weight", "blocks.2.fc.bias",
    "head.weight",
]


@LIBS
def test_named_parameters_registration_order(L):
    net = make_net(L)
    names = [n for n, _ in net.named_parameters()]
    assert names == EXPECTED_NAMES
    params = list(net.parameters())
    assert len(params) == len(EXPECTED_NAMES)
    for (n, p), q in zip(net.named_parameters(), params):
        assert p is q, n
        assert isinstance(p, L.nn.Parameter) and isinstance(p, L.Tensor)
        assert p.requires_grad and p.is_leaf


def test_parameter_shapes_match_torch():
    cn, tn = make_net(ca), make_net(torch)
    for (n, cp), (_, tp) in zip(cn.named_parameters(), tn.named_parameters()):
        assert tuple(cp.shape) == tuple(tp.shape), n
        assert cp.dtype == ca.float32


def test_linear_init_range_like_torch():
    lin = ca.nn.Linear(50, 20)
    bound = 1.0 / math.sqrt(50)  # kaiming_uniform(a=sqrt(5)) and the bias both give this
    w, b = to_np(lin.weight), to_np(lin.bias)
    assert w.shape == (20, 50) and b.shape == (20,)
    assert np.abs(w).max() <= bound and np.abs(b).max() <= bound
    assert w.std() > bound / 3  # not all zeros: spread like U(-bound, bound)
    ln, emb = ca.nn.LayerNorm(6), ca.nn.Embedding(7, 3)
    np.testing.assert_array_equal(to_np(ln.weight), np.ones(6, np.float32))
    np.testing.assert_array_equal(to_np(ln.bias), np.zeros(6, np.float32))
    e = to_np(emb.weight)
    assert abs(e.mean()) < 0.8 and 0.3 < e.std() < 2.0  # N(0, 1)


def test_parameter_constructor():
    p = ca.nn.Parameter(ca.zeros(3))
    assert p.requires_grad and p.is_leaf and isinstance(p, ca.Tensor)
    q = ca.nn.Parameter(ca.zeros(3), requires_grad=False)
    assert not q.requires_grad


def test_parameter_shares_storage_with_source():
    src = ca.zeros(3)
    p = ca.nn.Parameter(src)
    with ca.no_grad():
        p.add_(ca.ones(3))
    np.testing.assert_array_equal(to_np(src), [1.0, 1.0, 1.0])  # torch shares too


@LIBS
def test_plain_attributes_and_reassignment(L):
    m = L.nn.Linear(2, 2)
    m.note = "x"
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"]
    m.bias = None
    assert [n for n, _ in m.named_parameters()] == ["weight"]
    m.extra = L.nn.Parameter(L.ones(1))
    assert [n for n, _ in m.named_parameters()] == ["weight", "extra"]


# ---------------------------------------------------------------------------------------
# state_dict
# ---------------------------------------------------------------------------------------
@LIBS
def test_state_dict_keys_and_values(L):
    net = make_net(L)
    sd = net.state_dict()
    assert list(sd.keys()) == EXPECTED_NAMES
    for n, p in net.named_parameters():
        np.testing.assert_array_equal(to_np(sd[n]), to_np(p))
        assert not sd[n].requires_grad, "state_dict values are detached"


def test_state_dict_round_trip_gives_same_outputs():
    a, b = make_net(ca), make_net(ca)
    idx = ca.tensor(np.array([[1, 2, 3], [4, 5, 9]], dtype=np.int64))
    a.eval()
    b.eval()
    assert not np.allclose(to_np(a(idx)), to_np(b(idx)))
    res = b.load_state_dict(a.state_dict())
    assert list(res.missing_keys) == [] and list(res.unexpected_keys) == []
    np.testing.assert_array_equal(to_np(a(idx)), to_np(b(idx)))
    # loading copies values: changing a afterwards does not change b
    with ca.no_grad():
        a.head.weight.zero_()
    assert not np.allclose(to_np(a(idx)), to_np(b(idx)))


def test_load_state_dict_from_torch_via_numpy():
    tn, cn = make_net(torch), make_net(ca)
    sd = {k: ca.tensor(v.numpy().copy()) for k, v in tn.state_dict().items()}
    cn.load_state_dict(sd)
    tn.eval()
    cn.eval()
    idx = np.array([[0, 3, 7]], dtype=np.int64)
    assert_close(cn(ca.tensor(idx)), tn(torch.tensor(idx)), rtol=1e-5, atol=1e-6)


@LIBS
def test_load_state_dict_strict_errors(L):
    net = make_net(L)
    sd = net.state_dict()
    missing = dict(sd)
    del missing["head.weight"]
    with pytest.raises(RuntimeError, match="Missing key"):
        net.load_state_dict(missing)
    extra = dict(sd)
    extra["bogus.weight"] = L.zeros(1)
    with pytest.raises(RuntimeError, match="Unexpected key"):
        net.load_state_dict(extra)
    bad = dict(sd)
    bad["head.weight"] = L.zeros(5, 5)
    with pytest.raises(RuntimeError, match="size mismatch"):
        net.load_state_dict(bad)


@LIBS
def test_load_state_dict_non_strict_reports_keys(L):
    net = make_net(L)
    sd = dict(net.state_dict())
    del sd["emb.weight"]
    sd["bogus"] = L.zeros(1)
    res = net.load_state_dict(sd, strict=False)
    assert list(res.missing_keys) == ["emb.weight"]
    assert list(res.unexpected_keys) == ["bogus"]


# ---------------------------------------------------------------------------------------
# train / eval, zero_grad
# ---------------------------------------------------------------------------------------
def _all_modules(m):
    out = [m]
    for child in m._modules.values():
        out += _all_modules(child)
    return out


@LIBS
def test_train_eval_flags_recursive(L):
    net = make_net(L)
    assert net.training and all(m.training for m in _all_modules(net))
    r = net.eval()
    assert r is net
    assert not net.training and not any(m.training for m in _all_modules(net))
    net.train()
    assert all(m.training for m in _all_modules(net))
    net.train(False)
    assert not net.blocks[0].fc.training


@LIBS
def test_zero_grad(L):
    net = make_net(L)
    idx = L.tensor(np.array([[1, 2]], dtype=np.int64))
    net(idx).sum().backward()
    assert all(p.grad is not None for p in net.parameters())
    net.zero_grad(set_to_none=False)
    assert all(p.grad is not None and not to_np(p.grad).any() for p in net.parameters())
    net(idx).sum().backward()
    net.zero_grad()  # set_to_none=True by default (torch 2.x)
    assert all(p.grad is None for p in net.parameters())


@LIBS
def test_sequential_indexing_len_iter(L):
    s = L.nn.Sequential(L.nn.Linear(2, 3), L.nn.ReLU(), L.nn.Linear(3, 1))
    assert len(s) == 3
    assert isinstance(s[0], L.nn.Linear) and isinstance(s[-1], L.nn.Linear)
    assert [type(m).__name__ for m in s] == ["Linear", "ReLU", "Linear"]


def test_modules_forward_match_torch():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((3, 6)).astype(np.float32)
    pairs = [
        (ca.nn.ReLU(), torch.nn.ReLU()),
        (ca.nn.GELU(), torch.nn.GELU()),
        (ca.nn.GELU(approximate="tanh"), torch.nn.GELU(approximate="tanh")),
        (ca.nn.Dropout(0.0), torch.nn.Dropout(0.0)),
    ]
    for cm, tm in pairs:
        assert_close(cm(ca.tensor(x)), tm(torch.tensor(x)), msg=type(cm).__name__)
    for cm, tm in [(ca.nn.Linear(6, 4), torch.nn.Linear(6, 4)),
                   (ca.nn.LayerNorm(6), torch.nn.LayerNorm(6)),
                   (ca.nn.LayerNorm(6, eps=1e-3, elementwise_affine=False),
                    torch.nn.LayerNorm(6, eps=1e-3, elementwise_affine=False))]:
        with ca.no_grad():
            for cp, tp in zip(cm.parameters(), tm.parameters()):
                cp.copy_(ca.tensor(tp.detach().numpy().copy()))
        assert_close(cm(ca.tensor(x)), tm(torch.tensor(x)), rtol=1e-5, atol=1e-5,
                     msg=type(cm).__name__)


# Every activation module cagrad exports (nn.activation.__all__): torch.nn's class of the
# same name, built with its defaults, has the same repr and the same values and gradients.
ACTIVATION_MODULES = [] if STANDIN else list(ca.nn.activation.__all__)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("name", ACTIVATION_MODULES)
def test_activation_modules_match_torch(name, dtype):
    kwargs = {"dim": -1} if name in ("Softmax", "LogSoftmax") else {}
    cm, tm = getattr(ca.nn, name)(**kwargs), getattr(torch.nn, name)(**kwargs)
    assert repr(cm) == repr(tm)
    x = np.random.default_rng(1).standard_normal((4, 5)).astype(dtype) * 3
    cx, tx = ca.tensor(x, requires_grad=True), torch.tensor(x, requires_grad=True)
    cy, ty = cm(cx), tm(tx)
    assert_close(cy, ty, msg=name)
    cy.sum().backward()
    ty.sum().backward()
    assert_close(cx.grad, torch_gradient(name.lower(), tx.grad), **TOL_SUM[dtype],
                 msg=f"{name} gradient")


@LIBS
def test_hardtanh_module_arguments(L):
    with pytest.raises(AssertionError, match="max_val .* must be greater than min_val"):
        L.nn.Hardtanh(1.0, 1.0)
    with pytest.warns(FutureWarning, match="min_value.*deprecated"):
        m = L.nn.Hardtanh(min_value=-2.0)
    assert (m.min_val, m.max_val) == (-2.0, 1.0)
    assert repr(L.nn.Hardtanh(-2, 3, True)) == "Hardtanh(min_val=-2, max_val=3, inplace=True)"
