"""nn.RNN, nn.LSTM, nn.GRU, nn.TransformerEncoderLayer and nn.TransformerEncoder against
torch 2.13: torch's state_dict loaded into cagrad's module, then outputs, final states and
the gradients of the input, the initial states and every parameter compared in float32
and float64, eagerly and under compiled autograd; parameter names, shapes, init bounds,
reprs, dropout between layers, masks, warnings and errors."""

import warnings

import numpy as np
import pytest
import torch

from helpers import TOL_SUM, assert_close, backward_checked, ca, compiled_ctx, to_np

COMPILED = pytest.mark.parametrize("compiled", [False, True], ids=["eager", "compiled"])
DTYPE = pytest.mark.parametrize("dtype", ["float32", "float64"])


def twin(cls, args, kwargs, dtype, seed=0):
    """(cagrad module, torch module) of nn.<cls> with torch's initial weights in both."""
    torch.manual_seed(seed)
    ref = getattr(torch.nn, cls)(*args, **kwargs, dtype=getattr(torch, dtype))
    mod = getattr(ca.nn, cls)(*args, **_cagrad_kwargs(kwargs), dtype=getattr(ca, dtype))
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    return mod, ref


def _cagrad_kwargs(kwargs):
    """kwargs with torch activation modules swapped for cagrad's."""
    out = dict(kwargs)
    if isinstance(out.get("activation"), torch.nn.Module):
        out["activation"] = getattr(ca.nn, type(out["activation"]).__name__)()
    return out


def flat(outputs):
    """A module's outputs as a flat list of tensors (LSTM nests (h, c))."""
    if isinstance(outputs, (tuple, list)):
        return [t for item in outputs for t in flat(item)]
    return [outputs]


def run_module(lib, module, arrays, compiled=False):
    """module(*arrays) and the gradients of its inputs and parameters under the seeded
    loss sum(output_i * g_i)."""
    tensors = [lib.tensor(a, requires_grad=True) for a in arrays]
    outs = flat(module(tensors[0], *_states(lib, tensors[1:])))
    rng = np.random.default_rng(42)
    loss = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)).astype(arrays[0].dtype)))
               .sum() for o in outs)
    if lib is torch:
        loss.backward()
    else:
        with compiled_ctx(compiled):
            backward_checked(loss, compiled)
    grads = [t.grad for t in tensors] + [p.grad for p in module.parameters()]
    return outs, grads


def _states(lib, states):
    if not states:
        return []
    return [states[0]] if len(states) == 1 else [tuple(states)]


def compare(cls, args, kwargs, arrays, dtype, compiled):
    mod, ref = twin(cls, args, kwargs, dtype)
    arrays = [a.astype(dtype) for a in arrays]
    got, got_grads = run_module(ca, mod, arrays, compiled)
    want, want_grads = run_module(torch, ref, arrays)
    for i, (c, t) in enumerate(zip(got + got_grads, want + want_grads)):
        assert_close(c, t, msg=f"{cls} {kwargs} item {i}", **TOL_SUM[dtype])


# --- recurrent layers ---------------------------------------------------------------------

# (class, (input_size, hidden_size), kwargs, input shape, with initial states)
RNN_CASES = [
    ("LSTM", (3, 4), {}, (5, 2, 3), False),
    ("LSTM", (3, 4), dict(num_layers=2, bidirectional=True), (4, 2, 3), True),
    ("LSTM", (3, 5), dict(batch_first=True, proj_size=2, num_layers=2), (2, 4, 3), True),
    ("LSTM", (3, 4), dict(bias=False, bidirectional=True, proj_size=3), (4, 3), True),
    ("LSTM", (3, 4), {}, (6, 3), False),  # unbatched
    ("GRU", (3, 4), {}, (5, 2, 3), True),
    ("GRU", (3, 4), dict(num_layers=3, batch_first=True), (2, 5, 3), False),
    ("GRU", (3, 4), dict(bidirectional=True, bias=False), (4, 3), True),
    ("RNN", (3, 4), {}, (5, 2, 3), True),
    ("RNN", (3, 4), dict(nonlinearity="relu", num_layers=2, bidirectional=True,
                         batch_first=True), (2, 4, 3), False),
]


def state_arrays(rng, cls, args, kwargs, shape):
    layers = kwargs.get("num_layers", 1) * (2 if kwargs.get("bidirectional") else 1)
    batch = () if len(shape) == 2 else (shape[0] if kwargs.get("batch_first") else shape[1],)
    h_size = kwargs.get("proj_size") or args[1]
    states = [rng.standard_normal((layers, *batch, h_size))]
    if cls == "LSTM":
        states.append(rng.standard_normal((layers, *batch, args[1])))
    return states


@COMPILED
@DTYPE
@pytest.mark.parametrize("cls, args, kwargs, shape, with_states", RNN_CASES)
def test_recurrent_layers_match_torch(cls, args, kwargs, shape, with_states, dtype, compiled):
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(shape)]
    if with_states:
        arrays += state_arrays(rng, cls, args, kwargs, shape)
    compare(cls, args, kwargs, arrays, dtype, compiled)


@pytest.mark.parametrize("cls, kwargs", [
    ("LSTM", dict(num_layers=2, bidirectional=True, proj_size=2)), ("GRU", dict(bias=False)),
    ("RNN", dict(nonlinearity="relu", num_layers=2, batch_first=True, dropout=0.25)),
    ("LSTM", dict(bias=False, batch_first=True)),
])
def test_recurrent_parameters_repr_and_init(cls, kwargs):
    ref = getattr(torch.nn, cls)(3, 4, **kwargs)
    mod = getattr(ca.nn, cls)(3, 4, **kwargs)
    assert repr(mod) == repr(ref)
    assert [(n, tuple(p.shape)) for n, p in mod.named_parameters()] == \
        [(n, tuple(p.shape)) for n, p in ref.named_parameters()]
    assert [[tuple(p.shape) for p in ps] for ps in mod.all_weights] == \
        [[tuple(p.shape) for p in ps] for ps in ref.all_weights]
    values = np.concatenate([to_np(p).ravel() for p in mod.parameters()])
    assert np.abs(values).max() <= 0.5 and np.abs(values).max() > 0.4  # U(-1/sqrt(4), ...)


def test_dropout_between_layers():
    mod, ref = twin("LSTM", (3, 4), dict(num_layers=2, dropout=1.0), "float64")
    x = np.random.default_rng(1).standard_normal((4, 2, 3))
    # p=1 zeroes the first layer's output in training, deterministically in both
    assert_close(mod(ca.tensor(x))[0], ref(torch.tensor(x))[0], **TOL_SUM["float64"])
    mod.eval()
    ref.eval()
    assert_close(mod(ca.tensor(x))[0], ref(torch.tensor(x))[0], **TOL_SUM["float64"])
    half, _ = twin("GRU", (3, 4), dict(num_layers=2, dropout=0.5), "float64")
    trained = to_np(half(ca.tensor(x))[0])
    half.eval()
    assert not np.allclose(trained, to_np(half(ca.tensor(x))[0]))


def same_error(make):
    """The same exception type and message (up to the library's name in dtypes)."""
    with pytest.raises(Exception) as want:
        make(torch)
    with pytest.raises(type(want.value)) as got:
        make(ca)
    assert str(got.value).replace("cagrad.", "torch.") == str(want.value)


@pytest.mark.parametrize("make", [
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 2, 2, 3)),
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 2, 5)),
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 2, 3), (L.zeros(1, 2, 4), L.zeros(2, 2, 4))),
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 2, 3), (L.zeros(2, 2, 4), L.zeros(2, 3, 4))),
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 3), (L.zeros(2, 2, 4), L.zeros(2, 2, 4))),
    lambda L: L.nn.LSTM(3, 4, 2)(L.zeros(2, 2, 3), (L.zeros(2, 4), L.zeros(2, 4))),
    lambda L: L.nn.GRU(3, 4)(L.zeros(2, 2, 3), L.zeros(2, 2, 4)),
    lambda L: L.nn.GRU(3, 4)(L.zeros(2, 3), L.zeros(1, 2, 4)),
    lambda L: L.nn.RNN(3, 4)(L.zeros(2, 2, 3), L.zeros(1, 4)),
    lambda L: L.nn.GRU(3, 4)(L.zeros(2, 3, dtype=L.float64)),
    lambda L: L.nn.LSTM(3, 4, dropout=2),
    lambda L: L.nn.LSTM(3, 4, 0),
    lambda L: L.nn.LSTM(3, 0),
    lambda L: L.nn.GRU(3, 4, proj_size=2),
    lambda L: L.nn.LSTM(3, 4, proj_size=4),
    lambda L: L.nn.LSTM(3, 4, proj_size=-1),
    lambda L: L.nn.RNN(3, 4, nonlinearity="gelu"),
    lambda L: L.nn.LSTM(3.0, 4),
    lambda L: L.nn.GRU(3, 4, bias=1),
])
def test_recurrent_errors(make):
    same_error(make)


def test_single_layer_dropout_warns():
    for lib in (torch, ca):
        with pytest.warns(UserWarning, match="non-zero dropout expects num_layers greater"):
            lib.nn.GRU(3, 4, dropout=0.5)


# --- transformer encoder ------------------------------------------------------------------

LAYER_CASES = [
    {}, dict(norm_first=True, activation="gelu", batch_first=True),
    dict(activation=torch.nn.GELU(), bias=False), dict(layer_norm_eps=1e-3, nhead=4),
]


def encoder_layer_args(kwargs):
    kwargs = dict(kwargs)
    return (8, kwargs.pop("nhead", 2), 16), dict(dropout=0.0, **kwargs)


@COMPILED
@DTYPE
@pytest.mark.parametrize("kwargs", LAYER_CASES)
def test_encoder_layer_matches_torch(kwargs, dtype, compiled):
    args, kwargs = encoder_layer_args(kwargs)
    x = np.random.default_rng(2).standard_normal((5, 3, 8))
    compare("TransformerEncoderLayer", args, kwargs, [x], dtype, compiled)


@DTYPE
@pytest.mark.parametrize("kwargs", LAYER_CASES[:2])
def test_encoder_layer_masks(kwargs, dtype):
    args, kwargs = encoder_layer_args(kwargs)
    mod, ref = twin("TransformerEncoderLayer", args, kwargs, dtype)
    rng = np.random.default_rng(3)
    # 5 positions, batch of 3
    x = rng.standard_normal((3, 5, 8) if kwargs.get("batch_first") else (5, 3, 8))
    x = x.astype(dtype)
    causal = np.triu(np.full((5, 5), -np.inf), 1).astype(dtype)
    padding = np.zeros((3, 5), dtype=bool)
    padding[0, 3:] = True
    padding[2, 4] = True
    got = mod(ca.tensor(x), src_mask=ca.tensor(causal),
              src_key_padding_mask=ca.tensor(padding))
    want = ref(torch.tensor(x), src_mask=torch.tensor(causal),
               src_key_padding_mask=torch.tensor(padding))
    assert_close(got, want, **TOL_SUM[dtype])


@COMPILED
@pytest.mark.parametrize("layer_kwargs, with_norm", [({}, True), (dict(norm_first=True), False),
                                                     (dict(batch_first=True, nhead=4), True)])
def test_encoder_matches_torch(layer_kwargs, with_norm, compiled):
    dtype = "float64"
    args, kwargs = encoder_layer_args(layer_kwargs)
    torch.manual_seed(0)
    with warnings.catch_warnings(record=True) as torch_warnings:
        warnings.simplefilter("always")
        ref = torch.nn.TransformerEncoder(
            torch.nn.TransformerEncoderLayer(*args, **kwargs, dtype=torch.float64), 2,
            norm=torch.nn.LayerNorm(8, dtype=torch.float64) if with_norm else None)
    with warnings.catch_warnings(record=True) as our_warnings:
        warnings.simplefilter("always")
        mod = ca.nn.TransformerEncoder(
            ca.nn.TransformerEncoderLayer(*args, **kwargs, dtype=ca.float64), 2,
            norm=ca.nn.LayerNorm(8, dtype=ca.float64) if with_norm else None)
    assert [str(w.message) for w in our_warnings] == [str(w.message) for w in torch_warnings]
    assert repr(mod) == repr(ref)
    assert list(mod.state_dict()) == list(ref.state_dict())
    mod.load_state_dict({k: ca.tensor(to_np(v)) for k, v in ref.state_dict().items()})
    x = np.random.default_rng(4).standard_normal((3, 4, 8))
    got, got_grads = run_module(ca, mod, [x], compiled)
    want, want_grads = run_module(torch, ref, [x])
    for c, t in zip(got + got_grads, want + want_grads):
        assert_close(c, t, **TOL_SUM[dtype])
    mod.eval()
    ref.eval()  # torch's fused inference path: the same function
    assert_close(mod(ca.tensor(x)), ref(torch.tensor(x)), **TOL_SUM[dtype])


def test_encoder_layer_repr_and_bad_activation():
    for kwargs in ({}, dict(activation=torch.nn.GELU())):
        ref = torch.nn.TransformerEncoderLayer(8, 2, 16, **kwargs)
        assert repr(ca.nn.TransformerEncoderLayer(8, 2, 16, **_cagrad_kwargs(kwargs))) == \
            repr(ref)
    same_error(lambda L: L.nn.TransformerEncoderLayer(8, 2, activation="tanh"))
