"""The APIs the wave-5 (B) programs (test_programs_wave5b.py) needed that cagrad lacked or got
wrong, each against real torch: Tensor.fill_diagonal_ (simclr_style masks a similarity
matrix's diagonal with it), its values, wrap, N-d cubes, dtypes, gradient and errors, beside its
flipping relatives torch.fliplr / flipud; and
nn.utils.parametrize.remove_parametrizations of a weight norm (tcn_style folds its weight
norms back), whose weight stayed a Parameter that did not require grad."""

import numpy as np
import pytest
import torch
from helpers import assert_close, backward_checked, ca, compiled_ctx, error_of


@pytest.mark.parametrize("shape, wrap", [((3, 3), False), ((7, 3), False), ((7, 3), True),
                                         ((3, 5), True), ((2, 2, 2), False),
                                         ((3, 3, 3, 3), True), ((1, 4), False)])
def test_fill_diagonal_values_match_torch(shape, wrap):
    data = np.arange(np.prod(shape), dtype=np.float64).reshape(shape)
    got = ca.tensor(data).fill_diagonal_(-1.5, wrap=wrap)
    want = torch.tensor(data).fill_diagonal_(-1.5, wrap=wrap)
    assert_close(got, want)


@pytest.mark.parametrize("dtype, value", [("int64", 2.7), ("bool", True), ("float32", 3)])
def test_fill_diagonal_keeps_the_dtype(dtype, value):
    got = ca.zeros(3, 4, dtype=getattr(ca, dtype)).fill_diagonal_(value)
    want = torch.zeros(3, 4, dtype=getattr(torch, dtype)).fill_diagonal_(value)
    assert_close(got, want)


def test_fill_diagonal_returns_self_and_takes_a_tensor_value():
    t = ca.zeros(2, 3)
    assert t.fill_diagonal_(ca.tensor(3.0)) is t
    assert_close(t, torch.zeros(2, 3).fill_diagonal_(torch.tensor(3.0)))


@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fill_diagonal_gradient_matches_torch(dtype, compiled):
    """The overwritten diagonal gets no gradient; the rest flows through."""
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    out = {}
    for L in (ca, torch):
        xt = L.tensor(x, dtype=getattr(L, dtype), requires_grad=True)
        y = (xt * 2).fill_diagonal_(0.5, wrap=True)
        loss = (y.sin() * L.tensor(w, dtype=getattr(L, dtype))).sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        out[L] = (y, xt.grad)
    for a, b in zip(out[ca], out[torch]):
        assert_close(a, b)


def test_fill_diagonal_masks_a_similarity_matrix_like_simclr():
    """The program's use: fill the diagonal, then argmax of every row (under no_grad)."""
    z = np.random.default_rng(1).standard_normal((6, 4))
    res = []
    for L in (ca, torch):
        with L.no_grad():
            h = L.nn.functional.normalize(L.tensor(z), dim=1)
            sim = h @ h.t()
            sim.fill_diagonal_(-2.0)
            res.append(sim.argmax(dim=1).tolist())
    assert res[0] == res[1]


@pytest.mark.parametrize("make", [
    lambda L: L.zeros(3).fill_diagonal_(1),
    lambda L: L.zeros(2, 3, 4).fill_diagonal_(1),
    lambda L: L.zeros(3, 3, requires_grad=True).fill_diagonal_(1),
], ids=["1d", "unequal-nd", "leaf"])
def test_fill_diagonal_errors_match_torch(make):
    got, want = error_of(ca, make), error_of(torch, make)
    assert want[0] is not None
    assert got == want


def test_fill_diagonal_on_a_leaf_under_no_grad_is_allowed():
    for L in (ca, torch):
        x = L.ones(2, 2, requires_grad=True)
        with L.no_grad():
            x.fill_diagonal_(0)
        assert x.tolist() == [[0.0, 1.0], [1.0, 0.0]] and x.requires_grad


# ------------------------------------------------------------------------- fliplr / flipud
@pytest.mark.parametrize("compiled", [False, True])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("fn", ["fliplr", "flipud"])
def test_fliplr_flipud_values_and_gradients_match_torch(fn, dtype, compiled):
    rng = np.random.default_rng(3)
    x, w = rng.standard_normal((3, 4, 2)), rng.standard_normal((3, 4, 2))
    out = {}
    for L in (ca, torch):
        xt = L.tensor(x, dtype=getattr(L, dtype), requires_grad=True)
        y = getattr(L, fn)(xt)
        loss = (y.exp() * L.tensor(w, dtype=getattr(L, dtype))).sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        out[L] = (y, getattr(xt.detach(), fn)(), xt.grad)
    for a, b in zip(out[ca], out[torch]):
        assert_close(a, b)


@pytest.mark.parametrize("make", [lambda L: L.fliplr(L.ones(3)),
                                  lambda L: L.flipud(L.tensor(1.0)),
                                  lambda L: L.ones(3).fliplr()], ids=["lr-1d", "ud-0d", "method"])
def test_fliplr_flipud_errors_match_torch(make):
    got, want = error_of(ca, make), error_of(torch, make)
    assert want[0] is not None and got == want


# ------------------------------------------------------- remove_parametrizations (weight norm)
def _folded_conv(L, grad_mode, frozen=False):
    conv = L.nn.Conv1d(2, 3, 3).double()
    with L.no_grad():
        conv.weight.copy_(L.arange(18, dtype=L.float64).view(3, 2, 3).sin())
        conv.bias.copy_(L.tensor([0.1, -0.2, 0.3], dtype=L.float64))
    L.nn.utils.parametrizations.weight_norm(conv)
    if frozen:
        conv.parametrizations.weight.original0.requires_grad_(False)
        conv.parametrizations.weight.original1.requires_grad_(False)
    with L.set_grad_enabled(grad_mode):
        L.nn.utils.parametrize.remove_parametrizations(conv, "weight")
    return conv


@pytest.mark.parametrize("grad_mode, frozen", [(True, False), (False, False), (True, True)],
                         ids=["grad", "no_grad", "frozen"])
def test_remove_weight_norm_parametrization_registers_as_torch(grad_mode, frozen):
    """In grad mode the folded weight is a trainable Parameter; when it does not require
    grad (under no_grad, or from frozen originals) torch registers it as a buffer."""
    got, want = _folded_conv(ca, grad_mode, frozen), _folded_conv(torch, grad_mode, frozen)
    assert list(got._parameters) == list(want._parameters)
    assert list(got._buffers) == list(want._buffers)
    assert type(got.weight).__name__ == type(want.weight).__name__
    assert got.weight.requires_grad == want.weight.requires_grad
    assert got.weight.is_leaf and want.weight.is_leaf
    assert_close(got.weight, want.weight)
    assert list(got.state_dict()) == list(want.state_dict())


@pytest.mark.parametrize("compiled", [False, True])
def test_folded_weight_trains_like_torch(compiled):
    x = np.random.default_rng(2).standard_normal((2, 2, 6))
    grads = {}
    for L in (ca, torch):
        conv = _folded_conv(L, True)
        loss = conv(L.tensor(x)).tanh().sum()
        if L is ca:
            with compiled_ctx(compiled):
                backward_checked(loss, compiled)
        else:
            loss.backward()
        grads[L] = (conv.weight.grad, conv.bias.grad)
    for a, b in zip(grads[ca], grads[torch]):
        assert_close(a, b)
