"""nn.PReLU, nn.Bilinear, nn.EmbeddingBag (F.prelu, F.bilinear, F.embedding_bag) and the
weight-norm reparametrisations (nn.utils.weight_norm, nn.utils.parametrizations.weight_norm,
nn.utils.parametrize) against torch 2.13: values and gradients in float32/float64, eager
and compiled, float64 gradients against finite differences, parameter names, state_dict
keys, reprs and argument errors."""

import warnings

import numpy as np
import pytest
import torch

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


def _bag_inputs():
    indices = np.array([1, 2, 4, 5, 4, 3, 2, 0])
    return indices, np.array([0, 2, 2, 5]), np.array([0, 2, 2, 5, 8])


def cases(rng):
    """name -> (fn(L, *inputs), inputs, indices to differentiate)."""
    x4 = rng.standard_normal((2, 3, 4, 2))
    x2 = rng.standard_normal((5, 3))
    w3 = rng.uniform(0.1, 0.5, 3)
    w1 = np.array([0.3])
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 5))
    bw, bb = rng.standard_normal((2, 3, 5)), rng.standard_normal(2)
    table = rng.standard_normal((6, 3))
    indices, offsets, last_offsets = _bag_inputs()
    psw = rng.standard_normal(8)
    F = lambda L: L.nn.functional  # noqa: E731
    out = {
        "prelu_channels": (lambda L, x, w: F(L).prelu(x, w), [x4, w3], [0, 1]),
        "prelu_shared": (lambda L, x, w: F(L).prelu(x, w), [x2, w1], [0, 1]),
        "prelu_1d_shared": (lambda L, x, w: F(L).prelu(x, w), [x2[0], w1], [0, 1]),
        "bilinear": (lambda L, x, y, w, c: F(L).bilinear(x, y, w, c), [a, b, bw, bb],
                     [0, 1, 2, 3]),
        "bilinear_batched_nobias": (lambda L, x, y, w: F(L).bilinear(x, y, w),
                                    [a.reshape(2, 2, 3), b.reshape(2, 2, 5), bw], [0, 1, 2]),
        "bag_sum_psw": (lambda L, i, o, w, p: F(L).embedding_bag(
            i, w, o, mode="sum", per_sample_weights=p), [indices, offsets, table, psw], [2, 3]),
        "bag_2d_mean": (lambda L, i, w: F(L).embedding_bag(i, w),
                        [indices.reshape(2, 4), table], [1]),
    }
    for mode in ("sum", "mean", "max"):
        out[f"bag_{mode}"] = (lambda L, i, o, w, m=mode: F(L).embedding_bag(i, w, o, mode=m),
                              [indices, offsets, table], [2])
        out[f"bag_{mode}_padding"] = (
            lambda L, i, o, w, m=mode: F(L).embedding_bag(i, w, o, mode=m, padding_idx=2),
            [indices, offsets, table], [2])
        out[f"bag_{mode}_last_offset"] = (
            lambda L, i, o, w, m=mode: F(L).embedding_bag(i, w, o, mode=m,
                                                          include_last_offset=True),
            [indices, last_offsets, table], [2])
    return out


NAMES = sorted(cases(np.random.default_rng(0)))


@COMPILED
@DTYPE
@pytest.mark.parametrize("name", NAMES)
def test_layer_matches_torch(name, dtype, compiled, rng):
    fn, inputs, needs_grad = cases(rng)[name]
    check_against_torch(fn, inputs, dtype, compiled, needs_grad, msg=name)


GRADCHECK = ["prelu_channels", "prelu_shared", "bilinear", "bilinear_batched_nobias",
             "bag_sum_psw", "bag_mean", "bag_max_padding", "bag_2d_mean"]


@COMPILED
@pytest.mark.parametrize("name", GRADCHECK)
def test_layer_gradcheck_float64(name, compiled, rng):
    fn, inputs, needs_grad = cases(rng)[name]
    check_numeric_gradient(fn, inputs, compiled, needs_grad)


def _copy_parameters(c_module, t_module):
    with ca.no_grad():
        for (name, p_c), (_, p_t) in zip(c_module.named_parameters(),
                                         t_module.named_parameters()):
            p_c.copy_(ca.tensor(p_t.detach().numpy()))


MODULES = {
    "PReLU": (lambda L: L.nn.PReLU(3, init=0.1), [(2, 3, 4)]),
    "PReLU_default": (lambda L: L.nn.PReLU(), [(4, 5)]),
    "Bilinear": (lambda L: L.nn.Bilinear(3, 4, 2), [(5, 3), (5, 4)]),
    "Bilinear_nobias": (lambda L: L.nn.Bilinear(3, 4, 2, bias=False), [(5, 3), (5, 4)]),
}


@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules_match_torch(name, rng):
    make, shapes = MODULES[name]
    c_mod, t_mod = make(ca).double(), make(torch).double()
    assert [n for n, _ in c_mod.named_parameters()] == [n for n, _ in t_mod.named_parameters()]
    assert [tuple(p.shape) for p in c_mod.parameters()] == \
        [tuple(p.shape) for p in t_mod.parameters()]
    assert repr(c_mod) == repr(t_mod)
    _copy_parameters(c_mod, t_mod)
    inputs = [rng.standard_normal(s) for s in shapes]
    out_c = c_mod(*[ca.tensor(x) for x in inputs])
    out_t = t_mod(*[torch.tensor(x) for x in inputs])
    assert_close(out_c, out_t)
    out_c.sum().backward()
    out_t.sum().backward()
    for p_c, p_t in zip(c_mod.parameters(), t_mod.parameters()):
        assert_close(p_c.grad, p_t.grad)


def test_prelu_init_value_and_bilinear_bound():
    assert float(ca.nn.PReLU(init=0.3).weight[0]) == pytest.approx(0.3)
    weights = ca.nn.Bilinear(4, 2, 3).weight.detach().numpy()
    assert np.abs(weights).max() <= 0.5  # U(-1/sqrt(in1), 1/sqrt(in1))
    assert np.abs(weights).max() > 0.25


@pytest.mark.parametrize("mode", ["sum", "mean", "max"])
def test_embedding_bag_module_matches_torch(mode, rng):
    indices, offsets, _ = _bag_inputs()
    table = rng.standard_normal((6, 3))
    outs = []
    for L in (ca, torch):
        bag = L.nn.EmbeddingBag.from_pretrained(L.tensor(table), freeze=False, mode=mode,
                                                padding_idx=4)
        out = bag(L.tensor(indices), L.tensor(offsets))
        out.sum().backward()
        outs.append((out, bag.weight.grad, repr(bag), list(bag.state_dict())))
    assert_close(outs[0][0], outs[1][0])
    assert_close(outs[0][1], outs[1][1])
    assert outs[0][2:] == outs[1][2:]


def test_embedding_bag_padding_row_starts_at_zero():
    bag = ca.nn.EmbeddingBag(5, 3, padding_idx=1)
    assert np.all(bag.weight.detach().numpy()[1] == 0)
    assert repr(bag) == repr(torch.nn.EmbeddingBag(5, 3, padding_idx=1))


BAD_CALLS = {
    "bag_offsets_start": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2]), L.ones(4, 2), L.tensor([1])),
    "bag_offsets_past_end": lambda L: L.nn.functional.embedding_bag(
        L.tensor([1, 2]), L.ones(4, 2), L.tensor([0, 5])),
    "bag_no_offsets": lambda L: L.nn.functional.embedding_bag(L.tensor([1, 2]), L.ones(4, 2)),
    "bag_2d_offsets": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2]]), L.ones(4, 2), L.tensor([0])),
    "bag_mode": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2]]), L.ones(4, 2), mode="min"),
    "bag_weight_dim": lambda L: L.nn.functional.embedding_bag(L.tensor([[1, 2]]), L.ones(4)),
    "bag_psw_mean": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2]]), L.ones(4, 2), per_sample_weights=L.ones(1, 2)),
    "bag_psw_shape": lambda L: L.nn.functional.embedding_bag(
        L.tensor([[1, 2]]), L.ones(4, 2), mode="sum", per_sample_weights=L.ones(2)),
    "bag_3d_input": lambda L: L.nn.functional.embedding_bag(L.tensor([[[1]]]), L.ones(4, 2)),
    "prelu_channels": lambda L: L.nn.functional.prelu(L.ones(2, 3), L.ones(2)),
    "prelu_1d_channels": lambda L: L.nn.functional.prelu(L.ones(3), L.ones(3)),
    "weight_norm_twice": lambda L: L.nn.utils.weight_norm(L.nn.utils.weight_norm(
        L.nn.Linear(2, 2))),
    "remove_parametrizations_missing": lambda L: L.nn.utils.parametrize.remove_parametrizations(
        L.nn.Linear(2, 2), "weight"),
    "spectral_norm_iterations": lambda L: L.nn.utils.spectral_norm(
        L.nn.Linear(2, 2), n_power_iterations=0),
    "spectral_norm_twice": lambda L: L.nn.utils.spectral_norm(L.nn.utils.spectral_norm(
        L.nn.Linear(2, 2))),
    "remove_spectral_norm_missing": lambda L: L.nn.utils.remove_spectral_norm(
        L.nn.Linear(2, 2)),
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_errors_match_torch(case):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        got, expected = error_of(ca, BAD_CALLS[case]), error_of(torch, BAD_CALLS[case])
    assert expected[0] is not None
    assert got[0] is expected[0], (got, expected)
    if case not in ("bag_2d_offsets", "bag_psw_shape", "remove_parametrizations_missing"):
        # the others name torch's classes; torch prints a tensor after its first line
        assert got[1] == expected[1].split("\n")[0].rstrip(), (got, expected)


# --- weight norm -----------------------------------------------------------------------------

def _normed_linear(L, api, dim, weight, bias):
    layer = L.nn.Linear(3, 4).double()
    with L.no_grad():
        layer.weight.copy_(L.tensor(weight))
        layer.bias.copy_(L.tensor(bias))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the old API's FutureWarning (tested below)
        if api == "old":
            L.nn.utils.weight_norm(layer, dim=dim)
        else:
            L.nn.utils.parametrizations.weight_norm(layer, dim=dim)
    return layer


@COMPILED
@pytest.mark.parametrize("api", ["old", "new"])
@pytest.mark.parametrize("dim", [0, 1, None, -1])
def test_weight_norm_matches_torch(api, dim, compiled, rng):
    weight, bias = rng.standard_normal((4, 3)), rng.standard_normal(4)
    x = rng.standard_normal((5, 3))
    c_mod = _normed_linear(ca, api, dim, weight, bias)
    t_mod = _normed_linear(torch, api, dim, weight, bias)
    assert type(c_mod).__name__ == type(t_mod).__name__
    assert list(c_mod.state_dict()) == list(t_mod.state_dict())
    for key, value in t_mod.state_dict().items():
        assert_close(c_mod.state_dict()[key], value)
    assert [n for n, _ in c_mod.named_parameters()] == [n for n, _ in t_mod.named_parameters()]
    out_c, out_t = c_mod(ca.tensor(x)), t_mod(torch.tensor(x))
    assert_close(out_c, out_t)
    with compiled_ctx(compiled):
        backward_checked((out_c * out_c).sum(), compiled)
    (out_t * out_t).sum().backward()
    for (name, p_c), (_, p_t) in zip(c_mod.named_parameters(), t_mod.named_parameters()):
        assert_close(p_c.grad, p_t.grad, msg=name)


def test_weight_norm_tracks_optimizer_updates(rng):
    weight, bias = rng.standard_normal((4, 3)), rng.standard_normal(4)
    x = rng.standard_normal((5, 3))
    outs = []
    for L in (ca, torch):
        layer = _normed_linear(L, "new", 0, weight, bias)
        opt = L.optim.SGD(layer.parameters(), lr=0.1)
        for _ in range(2):
            opt.zero_grad()
            layer(L.tensor(x)).pow(2).sum().backward()
            opt.step()
        outs.append(layer.weight.detach())
    assert_close(outs[0], outs[1])


def test_old_weight_norm_warns_and_removes(rng):
    for L in (ca, torch):
        layer = L.nn.Linear(3, 2)
        before = layer.weight.detach().clone()
        with pytest.warns(FutureWarning, match="deprecated in favor of"):
            L.nn.utils.weight_norm(layer)
        L.nn.utils.remove_weight_norm(layer)
        assert type(layer) is L.nn.Linear
        assert list(layer.state_dict()) == ["bias", "weight"]  # weight re-registered last
        assert_close(layer.weight, before)


def test_parametrize_register_and_remove(rng):
    states = []
    for L in (ca, torch):
        layer = L.nn.Linear(3, 3).double()

        class Symmetric(L.nn.Module):
            def forward(self, x):
                return x.triu() + x.triu(1).transpose(0, 1)

        L.nn.utils.parametrize.register_parametrization(layer, "weight", Symmetric())
        assert L.nn.utils.parametrize.is_parametrized(layer)
        assert L.nn.utils.parametrize.is_parametrized(layer, "weight")
        assert not L.nn.utils.parametrize.is_parametrized(layer, "bias")
        assert L.nn.utils.parametrize.type_before_parametrizations(layer) is L.nn.Linear
        w = layer.weight.detach().numpy()
        np.testing.assert_allclose(w, w.T)
        names = list(layer.state_dict())
        L.nn.utils.parametrize.remove_parametrizations(layer, "weight")
        states.append((names, type(layer).__name__, list(layer.state_dict())))
        np.testing.assert_allclose(layer.weight.detach().numpy(), w)
    assert states[0] == states[1]


def test_parametrize_cached_reuses_the_value():
    layer = ca.nn.Linear(2, 2)
    ca.nn.utils.parametrizations.weight_norm(layer)
    with ca.nn.utils.parametrize.cached():
        assert layer.weight is layer.weight
    assert layer.weight is not layer.weight


def test_parametrized_assignment_and_deepcopy_match_torch(rng):
    import copy
    target = rng.standard_normal((2, 3))
    weights = []
    for L in (ca, torch):
        layer = L.nn.Linear(3, 2).double()
        L.nn.utils.parametrizations.weight_norm(layer)
        layer.weight = L.tensor(target)  # goes through right_inverse: g and v
        twin = copy.deepcopy(layer)
        assert type(twin).__name__ == "ParametrizedLinear"
        assert twin.parametrizations.weight.original1 is not \
            layer.parametrizations.weight.original1
        weights.append((layer.weight.detach(), twin.weight.detach(),
                        layer.parametrizations.weight.original0.detach()))
    for c, t in zip(*weights):
        assert_close(c, t)
    np.testing.assert_allclose(weights[0][0].numpy(), target, rtol=1e-12)


# --- spectral norm ---------------------------------------------------------------------------

def _spectral_pair(kind):
    """(cagrad module, torch module), same weights and the same u, v buffers."""
    mods = []
    for L in (ca, torch):
        L.manual_seed(0)
        mods.append(L.nn.Linear(4, 3).double() if kind == "linear"
                    else L.nn.ConvTranspose2d(2, 3, 3).double())
    c_mod, t_mod = mods
    _copy_parameters(c_mod, t_mod)
    ca.nn.utils.spectral_norm(c_mod, n_power_iterations=2)
    torch.nn.utils.spectral_norm(t_mod, n_power_iterations=2)
    with ca.no_grad():
        c_mod.weight_u.copy_(ca.tensor(t_mod.weight_u.numpy()))
        c_mod.weight_v.copy_(ca.tensor(t_mod.weight_v.numpy()))
    return c_mod, t_mod


@COMPILED
@pytest.mark.parametrize("kind", ["linear", "conv_transpose"])
def test_spectral_norm_matches_torch(kind, compiled, rng):
    c_mod, t_mod = _spectral_pair(kind)
    assert type(c_mod).__name__ == type(t_mod).__name__
    assert list(c_mod.state_dict()) == list(t_mod.state_dict())
    x = rng.standard_normal((2, 4) if kind == "linear" else (1, 2, 4, 4))
    for _ in range(2):  # training: each call runs the power iteration, updating u and v
        out_c, out_t = c_mod(ca.tensor(x)), t_mod(torch.tensor(x))
        assert_close(out_c, out_t)
        with compiled_ctx(compiled):
            backward_checked((out_c * out_c).sum(), compiled)
        (out_t * out_t).sum().backward()
        assert_close(c_mod.weight_orig.grad, t_mod.weight_orig.grad)
        assert_close(c_mod.weight_u, t_mod.weight_u)
        assert_close(c_mod.weight_v, t_mod.weight_v)
    c_mod.eval()
    t_mod.eval()
    assert_close(c_mod(ca.tensor(x)), t_mod(torch.tensor(x)))
    ca.nn.utils.remove_spectral_norm(c_mod)
    torch.nn.utils.remove_spectral_norm(t_mod)
    assert type(c_mod).__name__ == type(t_mod).__name__
    assert list(c_mod.state_dict()) == list(t_mod.state_dict())
    assert_close(c_mod.weight, t_mod.weight)
