"""RNN, LSTM and GRU as composites: a Python loop over time steps of linear maps and
pointwise gates, so autograd (eager and compiled) differentiates them like any graph.

Parameters, their names (weight_ih_l0, weight_hh_l0_reverse, ...), shapes, order and
initialization are PyTorch's, so a torch state_dict loads unchanged. The input-to-hidden
product is done for every time step at once (one matmul per layer and direction); only
the hidden-to-hidden product runs per step. A PackedSequence input runs step t on the
batch_sizes[t] sequences still going (so each sequence's final state is taken at its own
last step) and gives a PackedSequence output with the same batch_sizes and indices.

RNNCell, LSTMCell and GRUCell run one step of the same gate maths (_rnn_step, _gru_step,
_lstm_step), so the full-sequence modules and the cells cannot drift apart.
"""

import functools
import math
import numbers
import warnings

from .. import _functions
from .._creation import empty, zeros
from .._dtype import check_device
from . import functional as F
from . import init
from .module import Module
from .parameter import Parameter
from .utils.rnn import PackedSequence

__all__ = ["RNN", "LSTM", "GRU", "RNNCellBase", "RNNCell", "LSTMCell", "GRUCell"]

_GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}


# --- one time step: shared by the full-sequence modules and the cells ------------------
# input_term is x W_ih^T + b_ih (precomputed for all steps by RNN/LSTM/GRU); state is h
# (and c for LSTM) of shape [N, H].

def _gates(t, n):
    """t's last dim cut into n equal gates (narrow, not chunk: cagrad's chunk gives one
    piece for an empty dim, and a cell may have hidden_size 0)."""
    size = t.shape[-1] // n
    return [t.narrow(-1, i * size, size) for i in range(n)]


def _rnn_step(input_term, h, weight_hh, bias_hh, nonlinearity):
    """Elman step: act(x W_ih^T + b_ih + h W_hh^T + b_hh)."""
    pre = input_term + F.linear(h, weight_hh, bias_hh)
    return pre.tanh() if nonlinearity == "tanh" else pre.relu()


def _gru_step(input_term, h, weight_hh, bias_hh):
    """GRU step with PyTorch's gate order r, z, n; the reset gate scales only the hidden
    part of the candidate (h W_hn^T + b_hn), as PyTorch does."""
    in_r, in_z, in_n = _gates(input_term, 3)
    hid_r, hid_z, hid_n = _gates(F.linear(h, weight_hh, bias_hh), 3)
    reset = (in_r + hid_r).sigmoid()
    update = (in_z + hid_z).sigmoid()
    candidate = (in_n + reset * hid_n).tanh()
    return (1 - update) * candidate + update * h


def _lstm_step(input_term, h, c, weight_hh, bias_hh, projection=None):
    """LSTM step with PyTorch's gate order i, f, g, o; returns (h', c')."""
    gates = input_term + F.linear(h, weight_hh, bias_hh)
    in_gate, forget_gate, cell_gate, out_gate = _gates(gates, 4)
    c = forget_gate.sigmoid() * c + in_gate.sigmoid() * cell_gate.tanh()
    h = out_gate.sigmoid() * c.tanh()
    if projection is not None:
        h = F.linear(h, projection)
    return h, c


def _check_sizes(input_size, hidden_size, num_layers, bias, batch_first, dropout, proj_size):
    if (not isinstance(dropout, numbers.Number) or isinstance(dropout, bool)
            or not 0 <= dropout <= 1):
        raise ValueError("dropout should be a number in range [0, 1] representing the "
                         "probability of an element being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn(f"dropout option adds dropout after all but last recurrent layer, so "
                      f"non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}", stacklevel=4)
    for name, value, kind in (("bias", bias, bool), ("batch_first", batch_first, bool),
                              ("input_size", input_size, int),
                              ("hidden_size", hidden_size, int)):
        if not isinstance(value, kind):
            raise TypeError(f"{name} should be of type {kind.__name__}, got: "
                            f"{type(value).__name__}")
    if input_size <= 0:
        raise ValueError("input_size must be greater than zero")
    if hidden_size <= 0:
        raise ValueError("hidden_size must be greater than zero")
    if num_layers <= 0:
        raise ValueError("num_layers must be greater than zero")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable "
                         "projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")


class RNNBase(Module):
    """Parameters, checks and the layer/direction loop shared by RNN, LSTM and GRU; a
    subclass supplies _cell (one time step) and the hidden-state plumbing."""

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        check_device(device)
        _check_sizes(input_size, hidden_size, num_layers, bias, batch_first, dropout,
                     proj_size)
        self.mode = mode
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.num_layers = num_layers
        self.bias = bias
        self.batch_first = batch_first
        self.dropout = float(dropout)
        self.bidirectional = bidirectional
        self.proj_size = proj_size
        self._all_weights = [self._make_layer(layer, direction, dtype)
                             for layer in range(num_layers)
                             for direction in range(self._directions)]
        self.reset_parameters()

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def _state_size(self):
        """The size of the hidden state h (proj_size when LSTM projects it)."""
        return self.proj_size if self.proj_size > 0 else self.hidden_size

    def _make_layer(self, layer, direction, dtype):
        """Registers one layer-direction's parameters; returns their names in torch's
        order."""
        gate_size = _GATES[self.mode] * self.hidden_size
        layer_input = self.input_size if layer == 0 else self._state_size * self._directions
        shapes = [("weight_ih", (gate_size, layer_input)),
                  ("weight_hh", (gate_size, self._state_size))]
        if self.bias:
            shapes += [("bias_ih", (gate_size,)), ("bias_hh", (gate_size,))]
        if self.proj_size > 0:
            shapes += [("weight_hr", (self.proj_size, self.hidden_size))]
        suffix = "_reverse" if direction == 1 else ""
        names = []
        for stem, shape in shapes:
            name = f"{stem}_l{layer}{suffix}"
            setattr(self, name, Parameter(empty(*shape, dtype=dtype)))
            names.append(name)
        return names

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size)
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def flatten_parameters(self):
        """A no-op, as in PyTorch on the CPU (there is no cuDNN weight buffer)."""

    @property
    def _flat_weights_names(self):
        return [name for names in self._all_weights for name in names]

    @property
    def _flat_weights(self):
        return [getattr(self, name) for name in self._flat_weights_names]

    @property
    def all_weights(self):
        return [[getattr(self, name) for name in names] for names in self._all_weights]

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            text += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        if self.batch_first is not False:
            text += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            text += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            text += f", bidirectional={self.bidirectional}"
        return text

    # --- forward helpers ---------------------------------------------------------------

    def _check_input(self, input):
        F._tensor(type(self).__name__, "input", input)
        if input.ndim not in (2, 3):
            raise ValueError(f"{type(self).__name__}: Expected input to be 2D or 3D, got "
                             f"{input.ndim}D instead")
        weight_dtype = self.weight_ih_l0.dtype
        if input.dtype != weight_dtype:
            raise ValueError(f"RNN input dtype ({input.dtype}) does not match weight dtype "
                             f"({weight_dtype}). Convert input: input.to({weight_dtype}), or "
                             f"convert model: model.to({input.dtype})")
        if input.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {input.shape[-1]}")

    def _expected_size(self, batch, size):
        return (self.num_layers * self._directions, batch, size)

    @staticmethod
    def _check_state(state, expected, what):
        if tuple(state.shape) != expected:
            raise RuntimeError(f"Expected {what} size {expected}, got {list(state.shape)}")

    def _layers(self, x, states, batch_sizes=None):
        """Runs every layer and direction over x [T, N, C] (or a PackedSequence's data
        [sum of lengths, C] with its batch_sizes, a list of ints); states: per
        layer-direction tuples (h0, [c0]). Returns the last layer's output [T, N, D*H]
        (packed: [sum, D*H]) and the final states in the same order."""
        finals = []
        for layer in range(self.num_layers):
            outputs = []
            for direction in range(self._directions):
                index = layer * self._directions + direction
                params = [getattr(self, n) for n in self._all_weights[index]]
                run = self._run_direction if batch_sizes is None else functools.partial(
                    self._run_packed, batch_sizes=batch_sizes)
                out, final = run(x, states[index], params, direction == 1)
                outputs.append(out)
                finals.append(final)
            x = outputs[0] if len(outputs) == 1 else _functions.cat(outputs, -1)
            if self.dropout > 0 and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout, True)
        return x, finals

    def _run_direction(self, x, state, params, reverse):
        weight_ih, weight_hh = params[0], params[1]
        bias_ih, bias_hh = (params[2], params[3]) if self.bias else (None, None)
        projection = params[-1] if self.proj_size > 0 else None
        inputs = F.linear(x, weight_ih, bias_ih)  # every step's input term at once
        steps = range(x.shape[0] - 1, -1, -1) if reverse else range(x.shape[0])
        outputs = [None] * x.shape[0]
        for t in steps:
            state = self._cell(inputs[t], state, weight_hh, bias_hh, projection)
            outputs[t] = state[0]
        return _functions.stack(outputs, 0), state

    def _run_packed(self, data, state, params, reverse, batch_sizes):
        """_run_direction over packed data: step t updates the first batch_sizes[t] rows
        of the state (the sequences still running; the others keep their final state).
        Backwards, a sequence joins (from its initial state) at its own last step."""
        weight_hh = params[1]
        bias_hh = params[3] if self.bias else None
        projection = params[-1] if self.proj_size > 0 else None
        inputs = F.linear(data, params[0], params[2] if self.bias else None)
        offsets = [sum(batch_sizes[:t]) for t in range(len(batch_sizes))]
        outputs = [None] * len(batch_sizes)
        initial = state
        if reverse:
            state = tuple(s.narrow(0, 0, 0) for s in initial)
        for t in (reversed(range(len(batch_sizes))) if reverse else range(len(batch_sizes))):
            size = batch_sizes[t]
            if reverse and size > state[0].shape[0]:  # sequences whose last step is t
                state = tuple(_functions.cat([s, s0.narrow(0, s.shape[0], size - s.shape[0])], 0)
                              for s, s0 in zip(state, initial))
            running = tuple(s.narrow(0, 0, size) for s in state)
            new = self._cell(inputs.narrow(0, offsets[t], size), running, weight_hh, bias_hh,
                             projection)
            outputs[t] = new[0]
            if size < state[0].shape[0]:  # finished sequences keep their state
                new = tuple(_functions.cat([n, s.narrow(0, size, s.shape[0] - size)], 0)
                            for n, s in zip(new, state))
            state = new
        return _functions.cat(outputs, 0), state

    def _forward_packed(self, packed, hx, sizes):
        """forward() of a PackedSequence: hx (and the returned states) are in the batch's
        original order; sizes: the state sizes ([H] or LSTM's [proj or H, H])."""
        data, batch_sizes, sorted_indices, unsorted_indices = packed
        self._check_input(data)
        batch_sizes = [int(b) for b in batch_sizes.tolist()]
        expected = [self._expected_size(batch_sizes[0], size) for size in sizes]
        if hx is None:
            states = [zeros(*shape, dtype=data.dtype) for shape in expected]
        else:
            states = [hx] if len(sizes) == 1 else list(hx)
            names = ["hidden"] if len(sizes) == 1 else ["hidden[0]", "hidden[1]"]
            for state, shape, name in zip(states, expected, names):
                self._check_state(state, shape, name)
            if sorted_indices is not None:
                states = [s.index_select(1, sorted_indices) for s in states]
        out, finals = self._layers(data, list(zip(*[s.unbind(0) for s in states])),
                                   batch_sizes)
        results = [_functions.stack([final[i] for final in finals], 0)
                   for i in range(len(sizes))]
        if unsorted_indices is not None:
            results = [r.index_select(1, unsorted_indices) for r in results]
        output = PackedSequence(out, packed.batch_sizes, sorted_indices, unsorted_indices)
        return output, results[0] if len(sizes) == 1 else tuple(results)


def _is_packed(value):
    return type(value).__name__ == "PackedSequence"


def _time_major(module, input):
    """(input as [T, N, C], whether it was batched)."""
    batched = input.ndim == 3
    if not batched:
        input = input.unsqueeze(1)
    elif module.batch_first:
        input = input.transpose(0, 1)
    return input, batched


def _restore_layout(module, output, batched):
    if not batched:
        return output.squeeze(1)
    return output.transpose(0, 1) if module.batch_first else output


def _no_projection(kwargs):
    if "proj_size" in kwargs:
        raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
    if kwargs:
        raise TypeError(f"__init__() got an unexpected keyword argument '{next(iter(kwargs))}'")


class _SingleStateRNN(RNNBase):
    """RNN and GRU: the state is one tensor h [D*layers, N, H]."""

    def forward(self, input, hx=None):
        if _is_packed(input):
            return self._forward_packed(input, hx, [self.hidden_size])
        self._check_input(input)
        x, batched = _time_major(self, input)
        expected = self._expected_size(x.shape[1], self.hidden_size)
        if hx is None:
            hx = zeros(*expected, dtype=x.dtype)
        else:
            hx = self._batched_state(hx, batched)
            self._check_state(hx, expected, "hidden")
        out, finals = self._layers(x, [(h,) for h in hx.unbind(0)])
        h_n = _functions.stack([final[0] for final in finals], 0)
        return _restore_layout(self, out, batched), h_n if batched else h_n.squeeze(1)

    @staticmethod
    def _batched_state(hx, batched):
        want = 3 if batched else 2
        if hx.ndim != want:
            kind = "batched 3-D" if batched else "unbatched 2-D"
            raise RuntimeError(f"For {kind} input, hx should also be {want}-D but got "
                               f"{hx.ndim}-D tensor")
        return hx if batched else hx.unsqueeze(1)


class RNN(_SingleStateRNN):
    """Elman RNN: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh), act tanh or relu."""

    def __init__(self, input_size, hidden_size, num_layers=1, nonlinearity="tanh", bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, device=None,
                 dtype=None, **kwargs):
        modes = {"tanh": "RNN_TANH", "relu": "RNN_RELU"}
        if nonlinearity not in modes:
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'. Select from 'tanh' or "
                             f"'relu'.")
        _no_projection(kwargs)
        super().__init__(modes[nonlinearity], input_size, hidden_size, num_layers, bias,
                         batch_first, dropout, bidirectional, 0, device, dtype)
        self.nonlinearity = nonlinearity

    def _cell(self, input_term, state, weight_hh, bias_hh, projection):
        return (_rnn_step(input_term, state[0], weight_hh, bias_hh, self.nonlinearity),)


class GRU(_SingleStateRNN):
    """Gated recurrent unit: reset r, update z, candidate n (PyTorch's gate order r, z, n);
    h' = (1 - z) * n + z * h."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, device=None, dtype=None, **kwargs):
        _no_projection(kwargs)
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, 0, device, dtype)

    def _cell(self, input_term, state, weight_hh, bias_hh, projection):
        return (_gru_step(input_term, state[0], weight_hh, bias_hh),)


class LSTM(RNNBase):
    """Long short-term memory (PyTorch's gate order i, f, g, o): c' = f*c + i*g,
    h' = o * tanh(c'), then h' = h' W_hr^T when proj_size > 0."""

    def __init__(self, input_size, hidden_size, num_layers=1, bias=True, batch_first=False,
                 dropout=0.0, bidirectional=False, proj_size=0, device=None, dtype=None):
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size, device, dtype)

    def _cell(self, input_term, state, weight_hh, bias_hh, projection):
        return _lstm_step(input_term, state[0], state[1], weight_hh, bias_hh, projection)

    def forward(self, input, hx=None):
        if _is_packed(input):
            return self._forward_packed(input, hx, [self._state_size, self.hidden_size])
        self._check_input(input)
        x, batched = _time_major(self, input)
        batch = x.shape[1]
        h_size = self._expected_size(batch, self._state_size)
        c_size = self._expected_size(batch, self.hidden_size)
        if hx is None:
            h0, c0 = zeros(*h_size, dtype=x.dtype), zeros(*c_size, dtype=x.dtype)
        else:
            h0, c0 = self._batched_states(hx, batched)
            self._check_state(h0, h_size, "hidden[0]")
            self._check_state(c0, c_size, "hidden[1]")
        out, finals = self._layers(x, list(zip(h0.unbind(0), c0.unbind(0))))
        h_n = _functions.stack([final[0] for final in finals], 0)
        c_n = _functions.stack([final[1] for final in finals], 0)
        if not batched:
            h_n, c_n = h_n.squeeze(1), c_n.squeeze(1)
        return _restore_layout(self, out, batched), (h_n, c_n)

    @staticmethod
    def _batched_states(hx, batched):
        h0, c0 = hx
        want = 3 if batched else 2
        if h0.ndim != want or c0.ndim != want:
            kind = "batched 3-D" if batched else "unbatched 2-D"
            raise RuntimeError(f"For {kind} input, hx and cx should also be {want}-D but got "
                               f"({h0.ndim}-D, {c0.ndim}-D) tensors")
        return (h0, c0) if batched else (h0.unsqueeze(1), c0.unsqueeze(1))


# --- single-step cells ------------------------------------------------------------------

_TORCH_DTYPE_NAMES = {"float64": "Double", "float32": "Float", "float16": "Half",
                      "bfloat16": "BFloat16"}


def _dtype_word(dtype):
    name = str(dtype).rsplit(".", 1)[-1]
    return _TORCH_DTYPE_NAMES.get(name, name)


class RNNCellBase(Module):
    """weight_ih [chunks*H, input_size], weight_hh [chunks*H, H] and, with bias,
    bias_ih/bias_hh [chunks*H] (None without), all U(-1/sqrt(H), 1/sqrt(H)) as PyTorch."""

    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        check_device(device)
        self.input_size = input_size
        self.hidden_size = hidden_size
        self.bias = bias
        gate_size = num_chunks * hidden_size
        self.weight_ih = Parameter(empty(gate_size, input_size, dtype=dtype))
        self.weight_hh = Parameter(empty(gate_size, hidden_size, dtype=dtype))
        if bias:
            self.bias_ih = Parameter(empty(gate_size, dtype=dtype))
            self.bias_hh = Parameter(empty(gate_size, dtype=dtype))
        else:
            self.register_parameter("bias_ih", None)
            self.register_parameter("bias_hh", None)
        self.reset_parameters()

    def reset_parameters(self):
        bound = 1.0 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for weight in self.parameters():
            init.uniform_(weight, -bound, bound)

    def extra_repr(self):
        text = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            text += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            text += f", nonlinearity={self.nonlinearity}"
        return text

    # --- forward helpers ---------------------------------------------------------------

    def _batched(self, input, states, names):
        """(input [N, C], states [N, H] (None -> zeros), whether input was batched), with
        PyTorch's 1D/2D checks; names label the states in its messages."""
        cls = type(self).__name__
        F._tensor(cls, "input", input)
        if input.ndim not in (1, 2):
            raise ValueError(f"{cls}: Expected input to be 1D or 2D, got {input.ndim}D instead")
        if states is not None:
            for name, state in zip(names, states):
                if state.ndim not in (1, 2):
                    raise ValueError(f"{cls}: Expected {name} to be 1D or 2D, got "
                                     f"{state.ndim}D instead")
        batched = input.ndim == 2
        if not batched:
            input = input.unsqueeze(0)
        if states is None:
            zero = zeros(input.shape[0], self.hidden_size, dtype=input.dtype)
            states = [zero] * len(names)
        elif not batched:  # PyTorch reads only the first len(names) unbatched states
            states = [state.unsqueeze(0) for state in states[:len(names)]]
        if len(states) != len(names):
            raise RuntimeError("lstm_cell expects two hidden states")  # only LSTMCell
        self._check_forward(input, states)
        return input, list(states), batched

    def _check_forward(self, input, states):
        """The size and dtype checks PyTorch's cell kernels make, with their messages."""
        if input.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {input.shape[1]} "
                               f"expected {self.input_size}")
        for i, state in enumerate(states):
            if state.shape[0] != input.shape[0]:
                raise RuntimeError(f"Input batch size {input.shape[0]} doesn't match "
                                   f"hidden{i} batch size {state.shape[0]}")
            if state.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{i} has inconsistent hidden_size: got "
                                   f"{state.shape[1]}, expected {self.hidden_size}")
        for operand in (input, *states):
            if operand.dtype != self.weight_ih.dtype:
                raise RuntimeError(f"mat1 and mat2 must have the same dtype, but got "
                                   f"{_dtype_word(operand.dtype)} and "
                                   f"{_dtype_word(self.weight_ih.dtype)}")

    def _input_term(self, input):
        return F.linear(input, self.weight_ih, self.bias_ih)


class RNNCell(RNNCellBase):
    """One Elman step: h' = act(x W_ih^T + b_ih + h W_hh^T + b_hh); nonlinearity 'tanh' or
    'relu' (another value fails at forward, as in PyTorch)."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh", device=None,
                 dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        states = None if hx is None else [hx]
        input, (hx,), batched = self._batched(input, states, ["hidden"])
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        h = _rnn_step(self._input_term(input), hx, self.weight_hh, self.bias_hh,
                      self.nonlinearity)
        return h if batched else h.squeeze(0)


class GRUCell(RNNCellBase):
    """One GRU step (gate order r, z, n): h' = (1 - z) * n + z * h."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        states = None if hx is None else [hx]
        input, (hx,), batched = self._batched(input, states, ["hidden"])
        h = _gru_step(self._input_term(input), hx, self.weight_hh, self.bias_hh)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    """One LSTM step (gate order i, f, g, o); hx is (h, c) or None for zeros; returns
    (h', c')."""

    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        if hx is not None:
            hx = list(hx)
        input, states, batched = self._batched(input, hx, ["hx[0]", "hx[1]"])
        h, c = _lstm_step(self._input_term(input), states[0], states[1], self.weight_hh,
                          self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))
