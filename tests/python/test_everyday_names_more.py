"""Everyday names of PyTorch programs (wave 3, continued; test_everyday_names.py has the
first part): window functions, combinations, trapezoid / cumulative_trapezoid, put_,
torch.mps, cuda.get_device_name, nn.utils.stateless, nn.utils.prune and tensor storages,
against torch 2.13 in float32 and float64, eagerly and under compiled autograd, and in
float64 against finite differences.
"""

import warnings

import numpy as np
import pytest
import torch
import torch.nn.utils.prune  # noqa: F401 (torch does not import it by itself)

from composite_helpers import DTYPES, check_against_torch, check_numeric_gradient
from helpers import (assert_close, backward_checked, ca, compiled_ctx, needs_cagrad,
                     outcome, same_outcome, to_np)

pytestmark = needs_cagrad

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", DTYPES)


# =============================================================== windows
WINDOWS = [("hann_window", {}), ("hamming_window", {}), ("hamming_window",
                                                          dict(alpha=0.5, beta=0.3)),
           ("blackman_window", {}), ("bartlett_window", {}), ("kaiser_window", {}),
           ("kaiser_window", dict(beta=3.5))]


@pytest.mark.parametrize("name, kw", WINDOWS)
@pytest.mark.parametrize("length", [0, 1, 2, 5, 8, 33])
@pytest.mark.parametrize("periodic", [True, False])
@DTYPE
def test_windows_match_torch(name, kw, length, periodic, dtype):
    c = getattr(ca, name)(length, periodic, dtype=getattr(ca, dtype), **kw)
    t = getattr(torch, name)(length, periodic, dtype=getattr(torch, dtype), **kw)
    tol = dict(rtol=2e-6, atol=2e-6) if dtype == "float32" else dict(rtol=1e-12, atol=1e-13)
    assert_close(c, t, **tol)


def test_window_defaults_and_errors():
    assert_close(ca.hann_window(6), torch.hann_window(6))  # periodic, default dtype
    w = ca.hann_window(4, requires_grad=True)
    assert w.requires_grad and w.is_leaf
    same_outcome(lambda L: L.hann_window(-1))
    same_outcome(lambda L: L.blackman_window(3.0))
    kind, message = outcome(lambda: ca.kaiser_window(3, dtype=ca.int64))
    assert kind == "RuntimeError" and message.startswith(
        "kaiser_window expects floating point dtypes, got: ")


# =============================================================== combinations
@pytest.mark.parametrize("r, with_replacement", [(2, False), (3, False), (1, False),
                                                 (2, True), (3, True), (5, False), (0, False)])
@COMPILED
@DTYPE
def test_combinations(r, with_replacement, dtype, compiled, rng):
    x = rng.standard_normal(4)
    if r == 0 or r > 4:  # empty results: shapes only
        c = ca.combinations(ca.tensor(x), r, with_replacement)
        t = torch.combinations(torch.tensor(x), r, with_replacement)
        assert tuple(c.shape) == tuple(t.shape)
        return
    check_against_torch(lambda L, a: L.combinations(a, r=r, with_replacement=with_replacement),
                        [x], dtype, compiled)


def test_combinations_gradient_and_errors(rng):
    check_numeric_gradient(lambda L, a: L.combinations(a, 3) ** 2, [rng.standard_normal(5)])
    c = ca.combinations(ca.tensor([1, 2, 3]))
    assert c.dtype == ca.int64 and to_np(c).tolist() == [[1, 2], [1, 3], [2, 3]]
    same_outcome(lambda L: L.combinations(L.ones(2, 2)))
    same_outcome(lambda L: L.combinations(L.arange(3.0), r=-1))


# =============================================================== trapezoid
def _trapezoid_cases(rng):
    y2, y3 = rng.standard_normal((4, 5)), rng.standard_normal((2, 3, 4))
    x1, x2 = np.cumsum(rng.uniform(0.1, 1, 5)), np.cumsum(rng.uniform(0.1, 1, (4, 5)), 1)
    return {
        "unit": (lambda L, y: L.trapezoid(y), [y2]),
        "dx": (lambda L, y: L.trapezoid(y, dx=0.3, dim=0), [y2]),
        "x_1d": (lambda L, y, x: L.trapezoid(y, x), [y2, x1]),
        "x_1d_dim": (lambda L, y, x: L.trapezoid(y, x[:3], dim=1), [y3, x1]),
        "x_nd": (lambda L, y, x: L.trapezoid(y, x, dim=-1), [y2, x2]),
        "trapz": (lambda L, y, x: L.trapz(y, x), [y2, x1]),
        "cumulative_unit": (lambda L, y: L.cumulative_trapezoid(y), [y2]),
        "cumulative_dx": (lambda L, y: L.cumulative_trapezoid(y, dx=2.0, dim=0), [y3]),
        "cumulative_x": (lambda L, y, x: L.cumulative_trapezoid(y, x), [y2, x1]),
        "cumulative_x_nd": (lambda L, y, x: L.cumulative_trapezoid(y, x), [y2, x2]),
    }


TRAPEZOID = _trapezoid_cases(np.random.default_rng(5))


@pytest.mark.parametrize("name", sorted(TRAPEZOID))
@COMPILED
@DTYPE
def test_trapezoid_values_and_gradients(name, dtype, compiled):
    fn, arrays = TRAPEZOID[name]
    check_against_torch(fn, arrays, dtype, compiled, msg=name)


@pytest.mark.parametrize("name", sorted(TRAPEZOID))
def test_trapezoid_gradients_match_finite_differences(name):
    fn, arrays = TRAPEZOID[name]
    check_numeric_gradient(fn, arrays)


def test_trapezoid_edges_and_errors():
    for make in (lambda L: L.trapezoid(L.ones(0)), lambda L: L.trapezoid(L.ones(3, 0)),
                 lambda L: L.cumulative_trapezoid(L.ones(3, 0)),
                 lambda L: L.trapezoid(L.ones(1, 3), dim=0),
                 lambda L: L.cumulative_trapezoid(L.ones(1, 3), dim=0)):
        assert_close(make(ca), make(torch))
    same_outcome(lambda L: L.trapezoid(L.ones(3), L.ones(2)))
    same_outcome(lambda L: L.cumulative_trapezoid(L.ones(3), L.ones(2)))


# =============================================================== put_ / put
@pytest.mark.parametrize("accumulate", [False, True])
@COMPILED
@DTYPE
def test_put(accumulate, dtype, compiled, rng):
    index = np.array([[0, -1], [5, 2]]) if not accumulate else np.array([1, 1, -12, 7])

    def fn(L, a, s):
        b = a * 1.0  # a non-leaf, written in place
        b.put_(L.tensor(index), s, accumulate=accumulate)
        return b * a

    def fn_out_of_place(L, a, s):
        # (a repeated index without accumulate is undefined in torch: distinct ones here)
        distinct = L.tensor(np.arange(s.numel()) * 2 - 3)
        return L.put(a, L.tensor(index), s, accumulate) + a.put(distinct, s)

    source = rng.standard_normal(index.shape if not accumulate else (4,))
    base = rng.standard_normal((3, 4))
    check_against_torch(fn, [base, source], dtype, compiled)
    check_against_torch(fn_out_of_place, [base, source], dtype, compiled)
    if dtype == "float64":
        check_numeric_gradient(fn, [base, source])


def test_put_errors_and_leaves():
    for make in (lambda L: L.zeros(2, 3).put_(L.tensor([7]), L.tensor([1.0])),
                 lambda L: L.zeros(2, 3).put_(L.tensor([1, 2]), L.tensor([1.0])),
                 lambda L: L.zeros(2, 3).put_(L.tensor([1.0]), L.tensor([1.0])),
                 lambda L: L.zeros(2, 3).put_(L.tensor([1]), L.tensor([1.0],
                                                                     dtype=L.float64))):
        same_outcome(make)
    # cagrad's in-place error adds a hint after torch's message
    kind, message = outcome(lambda: ca.zeros(2, requires_grad=True).put_(ca.tensor([1]),
                                                                         ca.tensor([1.0])))
    expected = outcome(lambda: torch.zeros(2, requires_grad=True).put_(torch.tensor([1]),
                                                                       torch.tensor([1.0])))
    assert kind == expected[0] and message.startswith(expected[1])
    x = ca.zeros(2, 3)
    assert x.put_(ca.tensor([4, 4]), ca.tensor([1.0, 2.0]), accumulate=True) is x
    assert to_np(x).tolist() == [[0, 0, 0], [0, 3, 0]]


# =============================================================== devices and stateless
def test_device_names():
    assert ca.mps.is_available() is False and ca.mps.device_count() == 0
    ca.mps.manual_seed(3)
    for name in ("synchronize", "empty_cache"):
        assert outcome(getattr(ca.mps, name)) == outcome(getattr(torch.mps, name))
    kind, _ = outcome(ca.cuda.get_device_name)
    assert kind == outcome(torch.cuda.get_device_name)[0] == "AssertionError"
    assert outcome(lambda: ca.cuda.get_device_name(0))[0] == "AssertionError"
    assert outcome(ca.cuda.get_device_capability)[0] == "AssertionError"


@COMPILED
def test_stateless_functional_call_warns_and_delegates(compiled):
    model = ca.nn.Linear(3, 2)
    weight = ca.randn(2, 3, requires_grad=True)
    x = ca.randn(4, 3)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = ca.nn.utils.stateless.functional_call(model, {"weight": weight}, (x,))
        torch.nn.utils.stateless.functional_call(torch.nn.Linear(3, 2), {}, (torch.ones(3),))
    (ours, theirs) = [(w.category, str(w.message)) for w in caught]
    assert ours == theirs and ours[0] is FutureWarning
    assert_close(out, ca.func.functional_call(model, {"weight": weight}, (x,)))
    assert_close(out, x @ weight.t() + model.bias)
    with compiled_ctx(compiled):
        backward_checked(out.sum(), compiled)
    assert_close(weight.grad, x.sum(0).expand(2, 3))


# =============================================================== nn.utils.prune
def _pair(rng, make, dtype="float32"):
    """The same module in cagrad and torch (torch's takes cagrad's values)."""
    c, t = make(ca), make(torch)
    if dtype == "float64":
        c, t = c.double(), t.double()
    with torch.no_grad():
        for name, value in c.named_parameters():
            fresh = rng.standard_normal(tuple(value.shape))
            with ca.no_grad():
                value.copy_(ca.tensor(fresh))
            dict(t.named_parameters())[name].copy_(torch.tensor(fresh))
    return c, t


def _P(L):
    return L.nn.utils.prune


def _state_equal(c, t):
    cs, ts = c.state_dict(), t.state_dict()
    assert list(cs) == list(ts)
    for key in ts:
        assert_close(cs[key], ts[key], msg=key)


PRUNINGS = {
    "l1_fraction": lambda L, m: _P(L).l1_unstructured(m, "weight", amount=0.3),
    "l1_count": lambda L, m: _P(L).l1_unstructured(m, "weight", amount=5),
    "l1_bias": lambda L, m: _P(L).l1_unstructured(m, "bias", amount=0.5),
    "l1_importance": lambda L, m: _P(L).l1_unstructured(
        m, "weight", amount=4, importance_scores=L.arange(24.0).reshape(4, 6).flip(1)),
    "ln_rows": lambda L, m: _P(L).ln_structured(m, "weight", amount=0.5, n=2, dim=0),
    "ln_cols_l1": lambda L, m: _P(L).ln_structured(m, "weight", amount=2, n=1, dim=1),
    "ln_inf": lambda L, m: _P(L).ln_structured(m, "weight", amount=1, n=float("inf"), dim=-1),
    "identity": lambda L, m: _P(L).identity(m, "weight"),
    "custom_mask": lambda L, m: _P(L).custom_from_mask(
        m, "weight", mask=(L.arange(24.0).reshape(4, 6) % 3 != 0).to(L.float32)),
    "iterative_l1": lambda L, m: _P(L).l1_unstructured(
        _P(L).l1_unstructured(m, "weight", amount=0.25), "weight", amount=0.25),
    "l1_then_rows": lambda L, m: _P(L).ln_structured(
        _P(L).l1_unstructured(m, "weight", amount=6), "weight", amount=1, n=2, dim=0),
    "rows_then_l1": lambda L, m: _P(L).l1_unstructured(
        _P(L).ln_structured(m, "weight", amount=1, n=2, dim=0), "weight", amount=3),
}


@pytest.mark.parametrize("name", sorted(PRUNINGS))
@COMPILED
@DTYPE
def test_pruning_matches_torch(name, dtype, compiled, rng):
    c, t = _pair(rng, lambda L: L.nn.Linear(6, 4), dtype)
    PRUNINGS[name](ca, c)
    PRUNINGS[name](torch, t)
    assert _P(ca).is_pruned(c) and _P(torch).is_pruned(t)
    _state_equal(c, t)  # weight_orig and weight_mask, in torch's order
    x = rng.standard_normal((3, 6)).astype(dtype)
    out_c, out_t = c(ca.tensor(x)), t(torch.tensor(x))
    assert_close(out_c, out_t, rtol=1e-5, atol=1e-6)
    with compiled_ctx(compiled):
        backward_checked((out_c * out_c).sum(), compiled)
    (out_t * out_t).sum().backward()
    pruned = "bias" if name == "l1_bias" else "weight"
    assert_close(getattr(c, pruned + "_orig").grad, getattr(t, pruned + "_orig").grad,
                 rtol=1e-5, atol=1e-5)
    _P(ca).remove(c, pruned)
    _P(torch).remove(t, pruned)
    assert not _P(ca).is_pruned(c)
    _state_equal(c, t)
    assert type(getattr(c, pruned)) is ca.nn.Parameter


def test_global_unstructured_matches_torch(rng):
    make = lambda L: L.nn.Sequential(L.nn.Linear(5, 4), L.nn.ReLU(),  # noqa: E731
                                     L.nn.Linear(4, 3))
    c, t = _pair(rng, make)
    for L, m in ((ca, c), (torch, t)):
        _P(L).l1_unstructured(m[2], "weight", amount=2)  # an earlier mask is respected
        params = [(m[0], "weight"), (m[2], "weight"), (m[0], "bias")]
        _P(L).global_unstructured(params, pruning_method=_P(L).L1Unstructured, amount=0.4)
    _state_equal(c, t)
    assert int((c[0].weight_mask == 0).sum()) + int((c[2].weight_mask == 0).sum()) > 2
    _same_outcome_by_name(lambda L: _P(L).global_unstructured(
        [(L.nn.Linear(2, 2), "weight")], pruning_method=_P(L).LnStructured, amount=1, n=2,
        dim=0))


def test_random_pruning_counts_and_layout(rng):
    for name, args in (("random_unstructured", dict(amount=0.25)),
                       ("random_structured", dict(amount=2, dim=1))):
        c, t = _pair(rng, lambda L: L.nn.Conv2d(3, 4, 3))
        getattr(_P(ca), name)(c, "weight", **args)
        getattr(_P(torch), name)(t, "weight", **args)
        assert list(c.state_dict()) == list(t.state_dict())
        assert int((c.weight_mask == 0).sum()) == int((t.weight_mask == 0).sum())
        assert_close(c.weight, c.weight_orig * c.weight_mask)
    zero = to_np(c.weight_mask).sum(axis=(0, 2, 3)) == 0  # whole input channels pruned
    assert zero.sum() == 2 and np.all(to_np(c.weight_mask)[:, ~zero] == 1)


def test_custom_pruning_method_subclass(rng):
    def method(L):
        class EveryOther(_P(L).BasePruningMethod):
            PRUNING_TYPE = "unstructured"

            def compute_mask(self, t, default_mask):
                mask = default_mask.clone()
                mask.view(-1)[::2] = 0
                return mask
        return EveryOther

    c, t = _pair(rng, lambda L: L.nn.Linear(3, 4))
    method(ca).apply(c, "bias")
    method(torch).apply(t, "bias")
    _state_equal(c, t)
    # applied again: a PruningContainer prunes every other one of the entries still kept
    method(ca).apply(c, "bias")
    method(torch).apply(t, "bias")
    _state_equal(c, t)
    hooks = [h for h in c._forward_pre_hooks.values()
             if isinstance(h, _P(ca).BasePruningMethod)]
    assert len(hooks) == 1 and isinstance(hooks[0], _P(ca).PruningContainer)
    assert len(hooks[0]) == 2


def test_pruned_forward_recomputes_from_orig():
    m = ca.nn.Linear(2, 2)
    _P(ca).l1_unstructured(m, "weight", amount=2)
    with ca.no_grad():
        m.weight_orig.add_(1.0)
    m(ca.ones(1, 2))  # the pre-hook recomputes weight = mask * weight_orig
    assert_close(m.weight, m.weight_orig * m.weight_mask)
    opt = ca.optim.SGD(m.parameters(), lr=0.1)  # weight_orig is the old Parameter object
    assert any(p is m.weight_orig for p in opt.param_groups[0]["params"])


def _same_outcome_by_name(make):
    """Like same_outcome, with cagrad's names (cagrad.Size, cagrad.nn...) read as torch's."""
    kind, message = outcome(lambda: make(ca))
    assert (kind, message.replace("cagrad.", "torch.")) == outcome(lambda: make(torch))


def test_pruning_errors_match_torch():
    for make in (lambda L: _P(L).l1_unstructured(L.nn.Linear(2, 2), "weight", amount=1.5),
                 lambda L: _P(L).l1_unstructured(L.nn.Linear(2, 2), "weight", amount=-1),
                 lambda L: _P(L).l1_unstructured(L.nn.Linear(2, 2), "weight", amount="a"),
                 lambda L: _P(L).l1_unstructured(L.nn.Linear(2, 2), "weight", amount=5),
                 lambda L: _P(L).ln_structured(L.nn.Linear(2, 2), "bias", amount=1, n=2,
                                               dim=0),
                 lambda L: _P(L).remove(L.nn.Linear(2, 2), "weight"),
                 lambda L: _P(L).global_unstructured(3, _P(L).L1Unstructured, amount=1)):
        _same_outcome_by_name(make)
    # a failed pruning puts the parameter back (last, as torch re-registers it)
    for L in (ca, torch):
        m = L.nn.Linear(2, 2)
        with pytest.raises(ValueError):
            _P(L).l1_unstructured(m, "weight", amount=5)
        assert list(m.state_dict()) == ["bias", "weight"] and not _P(L).is_pruned(m)
        assert not hasattr(m, "weight_mask") and not hasattr(m, "weight_orig")


def test_pruned_checkpoint_loads_into_torch(tmp_path, rng):
    c, t = _pair(rng, lambda L: L.nn.Linear(4, 3))
    _P(ca).l1_unstructured(c, "weight", amount=0.5)
    _P(torch).identity(t, "weight")
    ca.save(c.state_dict(), str(tmp_path / "pruned.pt"))
    t.load_state_dict(torch.load(str(tmp_path / "pruned.pt")))
    t(torch.ones(1, 4))
    assert_close(c(ca.ones(1, 4)), t(torch.ones(1, 4)))


# =============================================================== storages
@pytest.mark.parametrize("make", [
    lambda L: L.arange(6.0).reshape(2, 3),
    lambda L: L.arange(6.0, dtype=L.float64).reshape(2, 3)[1],
    lambda L: L.tensor([3, -1, 7]),
    lambda L: L.tensor(2.5),
    lambda L: L.arange(10.0)[2:7],
], ids=["float32", "float64_view", "int64", "scalar", "slice"])
def test_storages_match_torch(make):
    c, t = make(ca), make(torch)
    cu, tu = c.untyped_storage(), t.untyped_storage()
    assert (cu.nbytes(), cu.size(), len(cu), cu.element_size()) == \
        (tu.nbytes(), tu.size(), len(tu), tu.element_size())
    assert cu.tolist() == tu.tolist() and cu[0] == tu[0] and cu[-1] == tu[-1]
    assert repr(cu) == repr(tu)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cs, ts = c.storage(), t.storage()
    assert caught[0].category is UserWarning and "TypedStorage is deprecated" in \
        str(caught[0].message)
    assert (cs.nbytes(), cs.size(), len(cs), cs.element_size()) == \
        (ts.nbytes(), ts.size(), len(ts), ts.element_size())
    assert cs.tolist() == ts.tolist() and cs[1 if len(cs) > 1 else 0] == \
        ts[1 if len(ts) > 1 else 0]
    assert repr(cs) == repr(ts)
    assert c.storage_offset() == t.storage_offset()
    root = c if c._base is None else c._base
    assert cu.data_ptr() == cs.data_ptr() == root.data_ptr()
    assert c.data_ptr() == cu.data_ptr() + c.storage_offset() * c.element_size()


def test_storage_is_a_live_read_only_view():
    x = ca.zeros(3)
    s = x.storage() if False else x.untyped_storage()
    with ca.no_grad():
        x.add_(1.0)
    assert s.tolist()[:4] == list(np.float32(1.0).tobytes())
    with pytest.raises(NotImplementedError, match="read-only"):
        s[0] = 1
