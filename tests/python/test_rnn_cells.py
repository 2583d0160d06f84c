"""nn.RNNCell (tanh, relu), nn.LSTMCell and nn.GRUCell against torch 2.13: torch's weights
loaded into cagrad's cell, then several steps (the hidden state fed back) compared in
float32 and float64, eagerly and under compiled autograd: outputs, and the gradients of
the inputs, the initial states and every parameter. Also parameter names, shapes and
init, reprs, optional and unbatched states, gradcheck, the cells against the
full-sequence modules they share their step with, and errors."""

import numpy as np
import pytest
import torch

from helpers import (TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, error_of,
                     to_np)

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])

# (class, kwargs)
CELLS = [
    ("RNNCell", {}),
    ("RNNCell", dict(nonlinearity="relu")),
    ("RNNCell", dict(bias=False)),
    ("LSTMCell", {}),
    ("LSTMCell", dict(bias=False)),
    ("GRUCell", {}),
    ("GRUCell", dict(bias=False)),
]
CELL_IDS = [f"{c}-{'-'.join(f'{k}={v}' for k, v in kw.items()) or 'default'}"
            for c, kw in CELLS]
INPUT, HIDDEN = 3, 5


def twin(cls, kwargs, dtype, seed=0):
    """(cagrad cell, torch cell) with torch's initial weights in both."""
    torch.manual_seed(seed)
    ref = getattr(torch.nn, cls)(INPUT, HIDDEN, **kwargs, dtype=getattr(torch, dtype))
    mod = getattr(ca.nn, cls)(INPUT, HIDDEN, **kwargs, dtype=getattr(ca, dtype))
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    return mod, ref


def unroll(lib, cell, xs, states, compiled=False):
    """Runs the cell over xs[0], xs[1], ... feeding its state back; returns every step's
    outputs and the gradients of xs, the initial states and the parameters under a seeded
    loss sum(output * g)."""
    dtype = xs[0].dtype
    xs = [lib.tensor(x, requires_grad=True) for x in xs]
    states = None if states is None else [lib.tensor(s, requires_grad=True) for s in states]
    lstm = "LSTM" in type(cell).__name__
    hx = None if states is None else (tuple(states) if lstm else states[0])
    outs = []
    for x in xs:
        hx = cell(x, hx)
        outs += list(hx) if lstm else [hx]
    rng = np.random.default_rng(7)
    loss = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)).astype(dtype))).sum()
               for o in outs)
    if lib is torch:
        loss.backward()
    else:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    grads = [x.grad for x in xs] + [s.grad for s in states or []]
    return outs, grads + [p.grad for p in cell.parameters()]


def arrays(cls, dtype, batch, with_state, steps=3, seed=1):
    rng = np.random.default_rng(seed)
    lead = (batch,) if batch else ()
    xs = [rng.standard_normal(lead + (INPUT,)).astype(dtype) for _ in range(steps)]
    if not with_state:
        return xs, None
    count = 2 if cls == "LSTMCell" else 1
    return xs, [rng.standard_normal(lead + (HIDDEN,)).astype(dtype) for _ in range(count)]


def compare(cls, kwargs, dtype, compiled, batch, with_state):
    mod, ref = twin(cls, kwargs, dtype)
    xs, states = arrays(cls, dtype, batch, with_state)
    got, got_grads = unroll(ca, mod, xs, states, compiled)
    want, want_grads = unroll(torch, ref, xs, states)
    assert len(got) == len(want) and len(got_grads) == len(want_grads)
    for i, (c, t) in enumerate(zip(got + got_grads, want + want_grads)):
        assert_close(c, t, msg=f"{cls} {kwargs} item {i}", **TOL_SUM[dtype])


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls,kwargs", CELLS, ids=CELL_IDS)
def test_cell_matches_torch_with_state(cls, kwargs, dtype, compiled):
    compare(cls, kwargs, dtype, compiled, batch=4, with_state=True)


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls,kwargs", CELLS, ids=CELL_IDS)
def test_cell_matches_torch_zero_state(cls, kwargs, dtype, compiled):
    compare(cls, kwargs, dtype, compiled, batch=2, with_state=False)


@pytest.mark.parametrize("with_state", [False, True], ids=["no_hx", "hx"])
@pytest.mark.parametrize("cls,kwargs", CELLS[::2], ids=CELL_IDS[::2])
def test_cell_unbatched(cls, kwargs, with_state):
    compare(cls, kwargs, "float64", False, batch=0, with_state=with_state)
    mod, _ = twin(cls, kwargs, "float64")
    out = mod(ca.ones(INPUT, dtype=ca.float64))
    for o in out if cls == "LSTMCell" else [out]:
        assert tuple(o.shape) == (HIDDEN,)


def test_compiled_equals_eager():
    """The compiled backward of an unrolled LSTMCell gives the eager gradients."""
    mod, _ = twin("LSTMCell", {}, "float64")
    xs, states = arrays("LSTMCell", "float64", 3, True)
    _, eager = unroll(ca, mod, xs, states, compiled=False)
    mod.zero_grad()
    _, compiled = unroll(ca, mod, xs, states, compiled=True)
    for e, c in zip(eager, compiled):
        assert_close(c, e, rtol=1e-12, atol=1e-14)


@pytest.mark.parametrize("cls,kwargs", CELLS, ids=CELL_IDS)
def test_gradcheck(cls, kwargs):
    mod, _ = twin(cls, kwargs, "float64")
    rng = np.random.default_rng(3)
    x = ca.tensor(rng.standard_normal((2, INPUT)), requires_grad=True)
    h = ca.tensor(rng.standard_normal((2, HIDDEN)), requires_grad=True)
    if cls == "LSTMCell":
        c = ca.tensor(rng.standard_normal((2, HIDDEN)), requires_grad=True)
        assert ca.autograd.gradcheck(lambda x, h, c: mod(x, (h, c)), (x, h, c))
    else:
        assert ca.autograd.gradcheck(lambda x, h: mod(x, h), (x, h))
    weights = tuple(mod.parameters())
    assert ca.autograd.gradcheck(lambda *w: _with_weights(mod, w, x, h), weights)


def _with_weights(mod, weights, x, h):
    """mod(x, h) with its parameters replaced by `weights` (for gradcheck)."""
    names = [n for n, _ in mod.named_parameters()]
    saved = {n: getattr(mod, n) for n in names}
    try:
        for n, w in zip(names, weights):
            mod._parameters[n] = w
        out = mod(x, (h, h) if isinstance(mod, ca.nn.LSTMCell) else h)
    finally:
        mod._parameters.update(saved)
    return out


# --- parameters, init, repr ------------------------------------------------------------

@pytest.mark.parametrize("cls,kwargs", CELLS, ids=CELL_IDS)
def test_parameters_like_torch(cls, kwargs):
    mod = getattr(ca.nn, cls)(INPUT, HIDDEN, **kwargs)
    ref = getattr(torch.nn, cls)(INPUT, HIDDEN, **kwargs)
    assert [(n, tuple(p.shape)) for n, p in mod.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in ref.named_parameters()]
    assert list(mod.state_dict()) == list(ref.state_dict())
    assert repr(mod) == repr(ref)
    if not kwargs.get("bias", True):
        assert mod.bias_ih is None and mod.bias_hh is None
    assert mod.weight_ih.dtype == ca.float32


@pytest.mark.parametrize("cls", ["RNNCell", "LSTMCell", "GRUCell"])
def test_init_is_uniform_in_torch_bound(cls):
    hidden = 64
    mod = getattr(ca.nn, cls)(8, hidden, dtype=ca.float64)
    bound = 1 / np.sqrt(hidden)
    for name, p in mod.named_parameters():
        values = to_np(p)
        assert np.all(np.abs(values) <= bound), name
        # uniform on [-b, b]: spread over the whole interval, mean ~0, variance b^2/3
        assert values.max() > 0.9 * bound and values.min() < -0.9 * bound, name
        assert abs(values.var() - bound ** 2 / 3) < 0.3 * bound ** 2 / 3, name
    other = getattr(ca.nn, cls)(8, hidden, dtype=ca.float64)
    assert not np.array_equal(to_np(mod.weight_hh), to_np(other.weight_hh))


def test_repr_and_attributes():
    cell = ca.nn.RNNCell(3, 4, bias=False, nonlinearity="relu")
    assert repr(cell) == repr(torch.nn.RNNCell(3, 4, bias=False, nonlinearity="relu"))
    assert (cell.input_size, cell.hidden_size, cell.bias, cell.nonlinearity) == \
        (3, 4, False, "relu")
    assert isinstance(cell, ca.nn.RNNCellBase)
    assert repr(ca.nn.GRUCell(2, 7)) == "GRUCell(2, 7)"


def test_torch_state_dict_roundtrip():
    """cagrad's state_dict loads into torch's cell and gives torch's outputs."""
    mod = ca.nn.GRUCell(INPUT, HIDDEN, dtype=ca.float64)
    ref = torch.nn.GRUCell(INPUT, HIDDEN, dtype=torch.float64)
    ref.load_state_dict({k: torch.tensor(to_np(v)) for k, v in mod.state_dict().items()})
    x = np.random.default_rng(0).standard_normal((2, INPUT))
    assert_close(mod(ca.tensor(x)), ref(torch.tensor(x)), **TOL_SUM["float64"])


# --- cells and full-sequence modules share one step --------------------------------------

@pytest.mark.parametrize("cls,kwargs", [("RNN", dict(nonlinearity="relu")), ("RNN", {}),
                                        ("LSTM", {}), ("GRU", {})])
def test_cell_loop_equals_sequence_module(cls, kwargs):
    """Unrolling XCell with layer 0's weights gives nn.X's output, bit for bit up to the
    order of the input products."""
    seq = getattr(ca.nn, cls)(INPUT, HIDDEN, dtype=ca.float64, **kwargs)
    cell = getattr(ca.nn, cls + "Cell")(INPUT, HIDDEN, dtype=ca.float64, **kwargs)
    for stem in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"):
        getattr(cell, stem).data = getattr(seq, stem + "_l0").detach().clone()
    x = ca.tensor(np.random.default_rng(2).standard_normal((4, 2, INPUT)))
    out, _ = seq(x)
    hx = None
    for t in range(4):
        hx = cell(x[t], hx)
        assert_close(hx[0] if cls == "LSTM" else hx, out[t], rtol=1e-13, atol=1e-14)


# --- errors -----------------------------------------------------------------------------

def _make(L, cls, **kw):
    return getattr(L.nn, cls)(3, 4, **kw)


ERRORS = {
    "rnn_input_3d": lambda L: _make(L, "RNNCell")(L.ones(2, 3, 3)),
    "gru_input_0d": lambda L: _make(L, "GRUCell")(L.ones(())),
    "lstm_input_3d": lambda L: _make(L, "LSTMCell")(L.ones(1, 2, 3)),
    "rnn_hidden_3d": lambda L: _make(L, "RNNCell")(L.ones(2, 3), L.ones(1, 2, 4)),
    "gru_hidden_3d": lambda L: _make(L, "GRUCell")(L.ones(2, 3), L.ones(1, 2, 4)),
    "lstm_hx1_3d": lambda L: _make(L, "LSTMCell")(L.ones(2, 3), (L.ones(2, 4),
                                                                 L.ones(1, 2, 4))),
    "input_size": lambda L: _make(L, "RNNCell")(L.ones(2, 5)),
    "batch": lambda L: _make(L, "GRUCell")(L.ones(2, 3), L.ones(3, 4)),
    "hidden_size": lambda L: _make(L, "RNNCell")(L.ones(2, 3), L.ones(2, 5)),
    "lstm_c_batch": lambda L: _make(L, "LSTMCell")(L.ones(2, 3), (L.ones(2, 4),
                                                                  L.ones(3, 4))),
    "lstm_h_size": lambda L: _make(L, "LSTMCell")(L.ones(2, 3), (L.ones(2, 5),
                                                                 L.ones(2, 4))),
    "lstm_one_state": lambda L: _make(L, "LSTMCell")(L.ones(2, 3), (L.ones(2, 4),)),
    "unbatched_input_batched_hx": lambda L: _make(L, "RNNCell")(L.ones(3), L.ones(2, 4)),
    "input_dtype": lambda L: _make(L, "RNNCell")(L.ones(2, 3, dtype=L.float64)),
    "hidden_dtype": lambda L: _make(L, "GRUCell")(L.ones(2, 3), L.ones(2, 4,
                                                                    dtype=L.float64)),
    "bad_nonlinearity": lambda L: _make(L, "RNNCell", nonlinearity="gelu")(L.ones(2, 3)),
}


@pytest.mark.parametrize("name", list(ERRORS))
def test_errors_like_torch(name):
    got, want = error_of(ca, ERRORS[name]), error_of(torch, ERRORS[name])
    assert want[0] is not None
    assert (got[0].__name__, got[1]) == (want[0].__name__, want[1])


def test_empty_batch_and_zero_hidden():
    assert tuple(ca.nn.RNNCell(3, 4)(ca.ones(0, 3)).shape) == (0, 4)
    assert tuple(ca.nn.GRUCell(3, 0)(ca.ones(2, 3)).shape) == (2, 0)
