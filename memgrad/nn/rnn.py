"""Recurrent layers, as in ``torch.nn``: ``RNN`` (tanh or ReLU), ``LSTM`` and ``GRU``, with
PyTorch's arguments (``num_layers``, ``bias``, ``batch_first``, ``dropout`` between layers,
``bidirectional``), shapes, gate order, initialisation and parameter names
(``weight_ih_l0``, ``weight_hh_l0_reverse``, ...), so a state dict from PyTorch loads.

Each layer multiplies the whole input sequence by its input weights in one matrix product,
then steps through time with memgrad ops, so backward (and checkpointing) is autograd's.

Example:
    >>> import memgrad as mg
    >>> lstm = mg.nn.LSTM(4, 8, num_layers=2, batch_first=True)
    >>> out, (h, c) = lstm(mg.randn(3, 5, 4))
    >>> out.shape, h.shape, c.shape
    ((3, 5, 8), (2, 3, 8), (2, 3, 8))
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from memgrad.autograd.grad_mode import no_grad
from memgrad.errors import ShapeError
from memgrad.factories import empty, zeros
from memgrad.nn import functional as F
from memgrad.nn import init
from memgrad.nn.module import Module, Parameter
from memgrad.ops import cat, sigmoid, stack, tanh
from memgrad.tensor import Tensor

__all__ = ["RNN", "LSTM", "GRU"]

_GATES = {"RNN_TANH": 1, "RNN_RELU": 1, "LSTM": 4, "GRU": 3}


class _RNNBase(Module):
    def __init__(self, mode: str, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0) -> None:
        super().__init__()
        api = type(self).__name__
        for name, v in (("input_size", input_size), ("hidden_size", hidden_size),
                        ("num_layers", num_layers)):
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v <= 0:
                raise ValueError(f"{api}: {name} must be a positive int, got {v!r}")
        if not 0.0 <= dropout <= 1.0:
            raise ValueError(f"{api}: dropout should be a number in range [0, 1] "
                             f"representing the probability of an element being zeroed, got "
                             f"{dropout}")
        if proj_size:
            raise NotImplementedError(f"{api}: proj_size is not supported; add a Linear "
                                      "layer on the output instead")
        self.mode, self.input_size, self.hidden_size = mode, int(input_size), int(hidden_size)
        self.num_layers, self.bias, self.batch_first = int(num_layers), bool(bias), batch_first
        self.dropout, self.bidirectional = float(dropout), bool(bidirectional)
        gates = _GATES[mode] * self.hidden_size
        directions = 2 if bidirectional else 1
        for layer in range(self.num_layers):
            size = self.input_size if layer == 0 else self.hidden_size * directions
            for suffix in ("", "_reverse")[:directions]:
                self.register_parameter(f"weight_ih_l{layer}{suffix}",
                                        Parameter(empty(gates, size)))
                self.register_parameter(f"weight_hh_l{layer}{suffix}",
                                        Parameter(empty(gates, self.hidden_size)))
                if bias:
                    self.register_parameter(f"bias_ih_l{layer}{suffix}", Parameter(empty(gates)))
                    self.register_parameter(f"bias_hh_l{layer}{suffix}", Parameter(empty(gates)))
        self.reset_parameters()

    def reset_parameters(self) -> None:
        """Draw every weight and bias from ``U(-1/sqrt(hidden_size), 1/sqrt(hidden_size))``,
        as PyTorch does."""
        bound = 1.0 / math.sqrt(self.hidden_size)
        with no_grad():
            for p in self.parameters():
                init.uniform_(p, -bound, bound)

    def _weights(self, layer: int, reverse: bool) -> tuple[Any, Any, Any, Any]:
        suffix = f"l{layer}{'_reverse' if reverse else ''}"
        return (getattr(self, f"weight_ih_{suffix}"), getattr(self, f"weight_hh_{suffix}"),
                getattr(self, f"bias_ih_{suffix}", None), getattr(self, f"bias_hh_{suffix}", None))

    def _inputs(self, input: Tensor, hx: Any) -> tuple[Tensor, bool, Any]:
        """``input`` as (L, N, H_in) and whether it was unbatched; ``hx`` checked."""
        api = type(self).__name__
        if not isinstance(input, Tensor):
            raise TypeError(f"{api}: input must be a Tensor, got {type(input).__name__}")
        if input.ndim not in (2, 3) or input.shape[-1] != self.input_size:
            raise ShapeError(f"{api}: input must have shape (L, N, {self.input_size}), "
                             f"(N, L, {self.input_size}) with batch_first=True, or "
                             f"(L, {self.input_size}) unbatched; got {input.shape}")
        unbatched = input.ndim == 2
        if unbatched:
            input = input.unsqueeze(1)
        elif self.batch_first:
            input = input.transpose(0, 1)
        return input, unbatched, hx

    def _initial(self, hx: Any, n: int, dtype: Any, unbatched: bool, name: str) -> Tensor:
        layers = self.num_layers * (2 if self.bidirectional else 1)
        want = (layers, n, self.hidden_size)
        if hx is None:
            return zeros(*want, dtype=dtype)
        if not isinstance(hx, Tensor):
            raise TypeError(f"{type(self).__name__}: {name} must be a Tensor, got "
                            f"{type(hx).__name__}")
        if unbatched:
            hx = hx.unsqueeze(1)
        if hx.shape != want:
            raise ShapeError(f"{type(self).__name__}: Expected hidden size {want}, got "
                             f"{hx.shape if not unbatched else hx.squeeze(1).shape}")
        return hx

    def _run(self, x: Tensor, states: list[tuple[Tensor, ...]]) -> tuple[Tensor, list]:
        """All layers over ``x`` (L, N, H_in) from ``states[layer * dirs + d]``; returns the
        last layer's output (L, N, dirs * H) and the final states in the same order."""
        dirs = 2 if self.bidirectional else 1
        finals = []
        for layer in range(self.num_layers):
            outs = []
            for d in range(dirs):
                out, final = self._direction(x, states[layer * dirs + d],
                                             self._weights(layer, d == 1), d == 1)
                outs.append(out)
                finals.append(final)
            x = outs[0] if dirs == 1 else cat(outs, -1)
            if self.dropout and self.training and layer < self.num_layers - 1:
                x = F.dropout(x, self.dropout)
        return x, finals

    def _direction(self, x: Tensor, state: tuple[Tensor, ...], weights: tuple, reverse: bool):
        w_ih, w_hh, b_ih, b_hh = weights
        length, n, _ = x.shape
        projected = F.linear(x.reshape(length * n, x.shape[2]), w_ih, b_ih)
        projected = projected.reshape(length, n, w_ih.shape[0])
        steps = range(length - 1, -1, -1) if reverse else range(length)
        outputs: list[Tensor] = [None] * length  # type: ignore[list-item]
        for t in steps:
            state = self._cell(projected[t], state, w_hh, b_hh)
            outputs[t] = state[0]
        return stack(outputs, 0), state

    def _cell(self, gi: Tensor, state: tuple[Tensor, ...], w_hh: Tensor,
              b_hh: Tensor | None) -> tuple[Tensor, ...]:
        raise NotImplementedError

    def extra_repr(self) -> str:
        text = f"{self.input_size}, {self.hidden_size}"
        if self.num_layers != 1:
            text += f", num_layers={self.num_layers}"
        if not self.bias:
            text += ", bias=False"
        if self.batch_first:
            text += ", batch_first=True"
        if self.dropout:
            text += f", dropout={self.dropout}"
        if self.bidirectional:
            text += ", bidirectional=True"
        return text


def _output(self: _RNNBase, out: Tensor, unbatched: bool) -> Tensor:
    if unbatched:
        return out.squeeze(1)
    return out.transpose(0, 1) if self.batch_first else out


def _final(finals: list[Tensor], unbatched: bool) -> Tensor:
    h = stack(finals, 0)
    return h.squeeze(1) if unbatched else h


class RNN(_RNNBase):
    """An Elman RNN: ``h_t = tanh(x_t W_ih^T + b_ih + h_{t-1} W_hh^T + b_hh)`` (or ReLU with
    ``nonlinearity="relu"``), as ``torch.nn.RNN``; returns ``(output, h_n)``.

    Example:
        >>> import memgrad as mg
        >>> out, h = mg.nn.RNN(3, 5)(mg.randn(7, 2, 3))
        >>> out.shape, h.shape
        ((7, 2, 5), (1, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 nonlinearity: str = "tanh", bias: bool = True, batch_first: bool = False,
                 dropout: float = 0.0, bidirectional: bool = False) -> None:
        if nonlinearity not in ("tanh", "relu"):
            raise ValueError(f"RNN: unknown nonlinearity {nonlinearity!r}; select from "
                             "'tanh' or 'relu'")
        self.nonlinearity = nonlinearity
        super().__init__("RNN_TANH" if nonlinearity == "tanh" else "RNN_RELU", input_size,
                         hidden_size, num_layers, bias, batch_first, dropout, bidirectional)

    def _cell(self, gi, state, w_hh, b_hh):
        pre = gi + F.linear(state[0], w_hh, b_hh)
        return (tanh(pre) if self.nonlinearity == "tanh" else F.relu(pre),)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(output, h_n)``: output ``(L, N, D * hidden_size)``, ``h_n`` ``(D *
        num_layers, N, hidden_size)``."""
        x, unbatched, hx = self._inputs(input, hx)
        h0 = self._initial(hx, x.shape[1], x.dtype, unbatched, "hx")
        out, finals = self._run(x, [(h0[i],) for i in range(h0.shape[0])])
        return _output(self, out, unbatched), _final([f[0] for f in finals], unbatched)


class LSTM(_RNNBase):
    """A long short-term memory layer, as ``torch.nn.LSTM`` (gates in PyTorch's order:
    input, forget, cell, output); returns ``(output, (h_n, c_n))``.

    Example:
        >>> import memgrad as mg
        >>> out, (h, c) = mg.nn.LSTM(3, 5, bidirectional=True)(mg.randn(7, 2, 3))
        >>> out.shape, h.shape
        ((7, 2, 10), (2, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False, proj_size: int = 0) -> None:
        super().__init__("LSTM", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional, proj_size)

    def _cell(self, gi, state, w_hh, b_hh):
        h, c = state
        i, f, g, o = (gi + F.linear(h, w_hh, b_hh)).chunk(4, -1)
        c = sigmoid(f) * c + sigmoid(i) * tanh(g)
        return sigmoid(o) * tanh(c), c

    def forward(self, input: Tensor,
                hx: tuple[Tensor, Tensor] | None = None) -> tuple[Tensor, tuple[Tensor, Tensor]]:
        """``(output, (h_n, c_n))``; ``hx`` is ``(h_0, c_0)`` or None for zeros."""
        x, unbatched, hx = self._inputs(input, hx)
        if hx is not None and not (isinstance(hx, (tuple, list)) and len(hx) == 2):
            raise TypeError("LSTM: hx must be a tuple (h_0, c_0) or None")
        h0 = self._initial(None if hx is None else hx[0], x.shape[1], x.dtype, unbatched, "h_0")
        c0 = self._initial(None if hx is None else hx[1], x.shape[1], x.dtype, unbatched, "c_0")
        out, finals = self._run(x, [(h0[i], c0[i]) for i in range(h0.shape[0])])
        return _output(self, out, unbatched), (_final([f[0] for f in finals], unbatched),
                                               _final([f[1] for f in finals], unbatched))


class GRU(_RNNBase):
    """A gated recurrent unit layer, as ``torch.nn.GRU`` (gates reset, update, new:
    ``n = tanh(W_in x + b_in + r * (W_hn h + b_hn))``, ``h' = (1 - z) * n + z * h``);
    returns ``(output, h_n)``.

    Example:
        >>> import memgrad as mg
        >>> out, h = mg.nn.GRU(3, 5, num_layers=2)(mg.randn(7, 2, 3))
        >>> out.shape, h.shape
        ((7, 2, 5), (2, 2, 5))
    """

    def __init__(self, input_size: int, hidden_size: int, num_layers: int = 1,
                 bias: bool = True, batch_first: bool = False, dropout: float = 0.0,
                 bidirectional: bool = False) -> None:
        super().__init__("GRU", input_size, hidden_size, num_layers, bias, batch_first,
                         dropout, bidirectional)

    def _cell(self, gi, state, w_hh, b_hh):
        (h,) = state
        i_r, i_z, i_n = gi.chunk(3, -1)
        h_r, h_z, h_n = F.linear(h, w_hh, b_hh).chunk(3, -1)
        r = sigmoid(i_r + h_r)
        z = sigmoid(i_z + h_z)
        n = tanh(i_n + r * h_n)
        return ((1 - z) * n + z * h,)

    def forward(self, input: Tensor, hx: Tensor | None = None) -> tuple[Tensor, Tensor]:
        """``(output, h_n)``, as ``RNN``."""
        x, unbatched, hx = self._inputs(input, hx)
        h0 = self._initial(hx, x.shape[1], x.dtype, unbatched, "hx")
        out, finals = self._run(x, [(h0[i],) for i in range(h0.shape[0])])
        return _output(self, out, unbatched), _final([f[0] for f in finals], unbatched)
