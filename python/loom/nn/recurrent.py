"""torch.nn's recurrent layers: RNN, LSTM, GRU and their cells, with
PyTorch's parameter names, shapes, initialization and checks.

The time loop runs in Python and is traced. Every step's input
projection is one matmul over the whole sequence, before the loop; a step
is then one matmul (the hidden state by weight_hh) and elementwise gate
ops. A packed batch runs padded, each step keeping the state of the
sequences that have ended (a select by a mask), so that the final states
are each sequence's own last."""
import math
import numbers
import warnings

import numpy as np

from .. import functional as _F
from . import functional as F
from . import init
from .module import Module, Parameter
from .utils.rnn import PackedSequence, _pack, _stack, _unpack


def _steps(x):
    """x's slices along dim 0 by split ops (16 parts at most each): the
    backward of a slice per step would add T gradients of x's full size."""
    n = x.shape[0]
    if n <= 16:
        return [_F.squeeze(part, 0) for part in _F.split(x, 1, 0)]
    return [s for part in _F.split(x, -(-n // 16), 0) for s in _steps(part)]


def _lstm_step(gi, state, w_hh, b_hh, w_hr=None):
    """gi: the input's gates (x W_ih^T + b_ih); state (h, c)."""
    h, c = state
    i, f, g, o = (gi + F.linear(h, w_hh, b_hh)).chunk(4, 1)
    c = f.sigmoid() * c + i.sigmoid() * g.tanh()
    h = o.sigmoid() * c.tanh()
    return (h if w_hr is None else F.linear(h, w_hr)), c


def _gru_step(gi, h, w_hh, b_hh):
    xr, xz, xn = gi.chunk(3, 1)
    hr, hz, hn = F.linear(h, w_hh, b_hh).chunk(3, 1)
    r = (xr + hr).sigmoid()
    z = (xz + hz).sigmoid()
    n = (xn + r * hn).tanh()
    return (1 - z) * n + z * h


def _rnn_step(gi, h, w_hh, b_hh, nonlinearity):
    a = gi + F.linear(h, w_hh, b_hh)
    return a.tanh() if nonlinearity == "tanh" else a.relu()


def _new_params(module, hidden_size, dtype, names_shapes):
    """Parameters drawn as torch's: uniform(-1/sqrt(hidden), 1/sqrt(hidden))."""
    from .. import empty
    bound = 1 / math.sqrt(hidden_size) if hidden_size > 0 else 0
    for name, shape in names_shapes:
        p = Parameter(empty(*shape, dtype=dtype))
        init.uniform_(p, -bound, bound)
        setattr(module, name, p)


# ---- cells ----

class RNNCellBase(Module):
    def __init__(self, input_size, hidden_size, bias, num_chunks, device=None, dtype=None):
        super().__init__()
        if device is not None:
            from .._tensor import _check_device
            _check_device(device)
        self.input_size, self.hidden_size, self.bias = input_size, hidden_size, bias
        g = num_chunks * hidden_size
        shapes = [("weight_ih", (g, input_size)), ("weight_hh", (g, hidden_size))]
        if bias:
            shapes += [("bias_ih", (g,)), ("bias_hh", (g,))]
        _new_params(self, hidden_size, dtype, shapes)
        if not bias:
            self.bias_ih = self.bias_hh = None

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if getattr(self, "nonlinearity", "tanh") != "tanh":
            s += f", nonlinearity={self.nonlinearity}"
        return s

    def _prepare(self, input, hx, count):
        """(input, states, batched): the input and `count` states, each 2-D,
        zeros where hx is None; checks their sizes as torch's kernels do."""
        name = type(self).__name__
        if input.ndim not in (1, 2):
            raise ValueError(f"{name}: Expected input to be 1-D or 2-D but received "
                             f"{input.ndim}-D tensor")
        batched = input.ndim == 2
        x = input if batched else input.unsqueeze(0)
        if x.shape[1] != self.input_size:
            raise RuntimeError(f"input has inconsistent input_size: got {x.shape[1]} "
                               f"expected {self.input_size}")
        if hx is None:
            from .. import zeros
            states = (zeros(x.shape[0], self.hidden_size, dtype=x.dtype),) * count
        else:
            states = tuple(hx) if count > 1 else (hx,)
            states = states if batched else tuple(s.unsqueeze(0) for s in states)
        for k, s in enumerate(states):
            if s.ndim != 2 or s.shape[0] != x.shape[0]:
                raise RuntimeError(f"Input batch size {x.shape[0]} doesn't match hidden{k} "
                                   f"batch size {s.shape[0] if s.ndim else 0} (hidden{k} "
                                   f"of shape {list(s.shape)})")
            if s.shape[1] != self.hidden_size:
                raise RuntimeError(f"hidden{k} has inconsistent hidden_size: got "
                                   f"{s.shape[1]}, expected {self.hidden_size}")
        return x, states, batched


class RNNCell(RNNCellBase):
    """torch.nn.RNNCell: h' = tanh (or relu) of x W_ih^T + b_ih + h W_hh^T + b_hh."""

    def __init__(self, input_size, hidden_size, bias=True, nonlinearity="tanh",
                 device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 1, device, dtype)
        self.nonlinearity = nonlinearity

    def forward(self, input, hx=None):
        if self.nonlinearity not in ("tanh", "relu"):
            raise RuntimeError(f"Unknown nonlinearity: {self.nonlinearity}")
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _rnn_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh, self.nonlinearity)
        return h if batched else h.squeeze(0)


class LSTMCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 4, device, dtype)

    def forward(self, input, hx=None):
        x, state, batched = self._prepare(input, hx, 2)
        h, c = _lstm_step(F.linear(x, self.weight_ih, self.bias_ih), state, self.weight_hh,
                          self.bias_hh)
        return (h, c) if batched else (h.squeeze(0), c.squeeze(0))


class GRUCell(RNNCellBase):
    def __init__(self, input_size, hidden_size, bias=True, device=None, dtype=None):
        super().__init__(input_size, hidden_size, bias, 3, device, dtype)

    def forward(self, input, hx=None):
        x, (h,), batched = self._prepare(input, hx, 1)
        h = _gru_step(F.linear(x, self.weight_ih, self.bias_ih), h, self.weight_hh,
                      self.bias_hh)
        return h if batched else h.squeeze(0)


# ---- layers ----

def _check_options(dropout, num_layers, proj_size, hidden_size):
    if not isinstance(dropout, numbers.Number) or isinstance(dropout, bool) or \
            not 0 <= dropout <= 1:
        raise ValueError("dropout should be a number in range [0, 1] representing the "
                         "probability of an element being zeroed")
    if dropout > 0 and num_layers == 1:
        warnings.warn("dropout option adds dropout after all but last recurrent layer, so "
                      "non-zero dropout expects num_layers greater than 1, but got "
                      f"dropout={dropout} and num_layers={num_layers}")
    if proj_size < 0:
        raise ValueError("proj_size should be a positive integer or zero to disable "
                         "projections")
    if proj_size >= hidden_size:
        raise ValueError("proj_size has to be smaller than hidden_size")


class RNNBase(Module):
    """The multi-layer loop shared by RNN, LSTM and GRU. Per layer and
    direction (suffix "" or "_reverse"): weight_ih_l{k}, weight_hh_l{k},
    bias_ih_l{k}, bias_hh_l{k} and, with proj_size, weight_hr_l{k}."""

    _GATES = {"LSTM": 4, "GRU": 3, "RNN_TANH": 1, "RNN_RELU": 1}

    def __init__(self, mode, input_size, hidden_size, num_layers=1, bias=True,
                 batch_first=False, dropout=0.0, bidirectional=False, proj_size=0,
                 device=None, dtype=None):
        super().__init__()
        if mode not in self._GATES:
            raise ValueError("Unrecognized RNN mode: " + mode)
        if device is not None:
            from .._tensor import _check_device
            _check_device(device)
        _check_options(dropout, num_layers, proj_size, hidden_size)
        self.mode, self.input_size, self.hidden_size = mode, input_size, hidden_size
        self.num_layers, self.bias, self.batch_first = num_layers, bias, batch_first
        self.dropout, self.bidirectional = float(dropout), bidirectional
        self.proj_size = proj_size
        self._all_weights = []
        for k in range(num_layers):
            for d in range(self._directions):
                self._all_weights.append(self._make_layer(k, d, dtype))

    @property
    def _directions(self):
        return 2 if self.bidirectional else 1

    @property
    def _out_size(self):
        return self.proj_size if self.proj_size > 0 else self.hidden_size

    def _make_layer(self, k, d, dtype):
        gates, h, out = self._GATES[self.mode] * self.hidden_size, self.hidden_size, \
            self._out_size
        n_in = self.input_size if k == 0 else out * self._directions
        sfx = f"l{k}" + ("_reverse" if d else "")
        shapes = [(f"weight_ih_{sfx}", (gates, n_in)), (f"weight_hh_{sfx}", (gates, out))]
        if self.bias:
            shapes += [(f"bias_ih_{sfx}", (gates,)), (f"bias_hh_{sfx}", (gates,))]
        if self.proj_size > 0:
            shapes.append((f"weight_hr_{sfx}", (self.proj_size, h)))
        _new_params(self, h, dtype, shapes)
        return [name for name, _ in shapes]

    def reset_parameters(self):
        bound = 1 / math.sqrt(self.hidden_size) if self.hidden_size > 0 else 0
        for p in self.parameters():
            init.uniform_(p, -bound, bound)

    def flatten_parameters(self):
        """Nothing to do: the weights are used where they are (cuDNN's layout
        does not apply)."""

    @property
    def all_weights(self):
        return [[getattr(self, n) for n in names] for names in self._all_weights]

    def _weights(self, k, d):
        """(w_ih, w_hh, b_ih, b_hh, w_hr), None for those absent."""
        sfx = f"l{k}" + ("_reverse" if d else "")
        return tuple(self._parameters.get(f"{kind}_{sfx}") for kind in
                     ("weight_ih", "weight_hh", "bias_ih", "bias_hh", "weight_hr"))

    def extra_repr(self):
        s = f"{self.input_size}, {self.hidden_size}"
        if self.proj_size != 0:
            s += f", proj_size={self.proj_size}"
        if self.num_layers != 1:
            s += f", num_layers={self.num_layers}"
        if self.bias is not True:
            s += f", bias={self.bias}"
        if self.batch_first is not False:
            s += f", batch_first={self.batch_first}"
        if self.dropout != 0:
            s += f", dropout={self.dropout}"
        if self.bidirectional is not False:
            s += f", bidirectional={self.bidirectional}"
        return s

    # ---- what a mode defines ----
    def _state_sizes(self):
        """The size of each state's last dim (LSTM: h and c)."""
        return (self.hidden_size,)

    def _split_hx(self, hx):
        return (hx,)

    def _join_states(self, states):
        return states[0]

    def _cell(self, gi, state, w):
        raise NotImplementedError

    # ---- forward ----
    def forward(self, input, hx=None):
        if isinstance(input, PackedSequence):
            return self._forward_packed(input, hx)
        name = self.mode.split("_")[0]
        if input.ndim not in (2, 3):
            raise ValueError(f"{name}: Expected input to be 2-D or 3-D but received "
                             f"{input.ndim}-D tensor")
        batched = input.ndim == 3
        states = None if hx is None else self._split_hx(hx)
        if states is not None and any(s.ndim != input.ndim for s in states):
            kind = "batched 3-D" if batched else "unbatched 2-D"
            dims = ", ".join(f"{s.ndim}-D" for s in states)
            raise RuntimeError(f"For {kind} input, hx should also be {input.ndim}-D but got "
                               f"({dims}) tensor")
        if not batched:
            x, states = input.unsqueeze(1), states and tuple(s.unsqueeze(1) for s in states)
        else:
            x = input.transpose(0, 1) if self.batch_first else input
        if x.shape[0] == 0:
            raise RuntimeError("Expected sequence length to be larger than 0 in RNN")
        out, states = self._run(x, states, None)
        if not batched:
            return out.squeeze(1), self._join_states(tuple(s.squeeze(1) for s in states))
        return (out.transpose(0, 1) if self.batch_first else out), self._join_states(states)

    def _forward_packed(self, input, hx):
        data, batch_sizes, sorted_indices, unsorted_indices = input
        if data.ndim != 2:
            raise RuntimeError(f"input must have 2 dimensions, got {data.ndim}")
        self._check_input_size(data)
        sizes = np.asarray(batch_sizes, dtype=np.int64)
        states = None if hx is None else self._split_hx(hx)
        if states is not None:
            self._check_states(states, int(sizes[0]))
            if sorted_indices is not None:  # the caller's order to the packed order
                states = tuple(s.index_select(1, sorted_indices) for s in states)
        x = _unpack(data, sizes, len(sizes), 0.0)
        out, states = self._run(x, states, self._masks(sizes))
        if unsorted_indices is not None:
            states = tuple(s.index_select(1, unsorted_indices) for s in states)
        packed = PackedSequence(_pack(out, sizes), batch_sizes, sorted_indices,
                                unsorted_indices)
        return packed, self._join_states(states)

    @staticmethod
    def _masks(sizes):
        """Per step: None when every sequence runs, else (B, 1) true for the
        sequences that do (the batch is sorted by decreasing length)."""
        from .. import tensor
        batch, made = int(sizes[0]), {}
        for b in set(sizes.tolist()) - {batch}:
            made[b] = tensor((np.arange(batch) < b)[:, None])
        return [made.get(int(b)) for b in sizes]

    def _check_input_size(self, x):
        if x.shape[-1] != self.input_size:
            raise RuntimeError(f"input.size(-1) must be equal to input_size. Expected "
                               f"{self.input_size}, got {x.shape[-1]}")

    def _check_states(self, states, batch):
        n = self.num_layers * self._directions
        for k, (s, size) in enumerate(zip(states, self._state_sizes())):
            expected = (n, batch, size)
            if tuple(s.shape) != expected:
                what = f"hidden[{k}]" if len(states) > 1 else "hidden"
                raise RuntimeError(f"Expected {what} size {expected}, got {list(s.shape)}")

    def _run(self, x, states, masks):
        """x: (T, B, input_size), time-major; states: tuple of (L * D, B, *)
        or None. Returns the last layer's output and the final states."""
        from .. import cat, stack, zeros
        self._check_input_size(x)
        n = self.num_layers * self._directions
        if states is None:
            states = tuple(zeros(n, x.shape[1], s, dtype=x.dtype) for s in self._state_sizes())
        self._check_states(states, x.shape[1])
        finals = [[] for _ in states]
        for k in range(self.num_layers):
            outs = []
            for d in range(self._directions):
                first = tuple(s[k * self._directions + d] for s in states)
                out, last = self._direction(x, first, self._weights(k, d), masks, d == 1)
                outs.append(out)
                for f, s in zip(finals, last):
                    f.append(s)
            x = outs[0] if len(outs) == 1 else cat(outs, 2)
            if k < self.num_layers - 1:  # dropout between layers, not after the last
                x = F.dropout(x, self.dropout, self.training)
        return x, tuple(stack(f, 0) for f in finals)

    def _direction(self, x, state, w, masks, reverse):
        """One layer in one direction over the sequence: its outputs (T, B, H)
        and final state."""
        gates = _steps(F.linear(x, w[0], w[2]))  # every step's input gates by one matmul
        steps = len(gates)
        outs = [None] * steps
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            new = self._cell(gates[t], state, w)
            m = masks[t] if masks is not None else None
            # an ended sequence keeps its state (the reverse direction: h0 until it starts)
            state = new if m is None else tuple(_F.where(m, a, b) for a, b in zip(new, state))
            outs[t] = state[0]
        return _stack(outs, 0), state


class RNN(RNNBase):
    """torch.nn.RNN: h_t = tanh (or relu, nonlinearity="relu") of
    x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh."""

    def __init__(self, *args, nonlinearity="tanh", **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"Unknown nonlinearity '{nonlinearity}'")
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", *args, **kwargs)
        self.nonlinearity = nonlinearity

    def _cell(self, gi, state, w):
        return (_rnn_step(gi, state[0], w[1], w[3], self.nonlinearity),)


class GRU(RNNBase):
    """torch.nn.GRU: gates r, z, n (in that order in the weights)."""

    def __init__(self, *args, **kwargs):
        if "proj_size" in kwargs:
            raise ValueError("proj_size argument is only supported for LSTM, not RNN or GRU")
        super().__init__("GRU", *args, **kwargs)

    def _cell(self, gi, state, w):
        return (_gru_step(gi, state[0], w[1], w[3]),)


class LSTM(RNNBase):
    """torch.nn.LSTM: gates i, f, g, o; states (h, c); with proj_size, h is
    projected by weight_hr to proj_size."""

    def __init__(self, *args, **kwargs):
        super().__init__("LSTM", *args, **kwargs)

    def _state_sizes(self):
        return (self._out_size, self.hidden_size)

    def _split_hx(self, hx):
        if not isinstance(hx, (tuple, list)) or len(hx) != 2:
            raise RuntimeError("LSTM: hx should be a tuple (h_0, c_0)")
        return tuple(hx)

    def _join_states(self, states):
        return states

    def _cell(self, gi, state, w):
        return _lstm_step(gi, state, w[1], w[3], w[4])
