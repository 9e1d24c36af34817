"""RNNs on meta tensors, run on the path a CPU runs them: what ``--target-gpu`` counts.

torch's RNNs take another C++ path on each device. On the CPU, ``nn.GRU`` and ``nn.RNN``
project every step's input in one GEMM before the steps (``FullLayer``'s pre-computed input
in aten/src/ATen/native/RNN.cpp) and ``nn.LSTM`` runs oneDNN's kernel one layer and
direction at a time (``mkldnn_rnn_layer``, its backward ``mkldnn_rnn_layer_backward``); on
the meta device every step projects its own input, so a step reads the input weights again
(1.7x the bytes of a GRU) and an LSTM's backward is autograd's, step by step.

:class:`CpuRnnPath` runs ``torch._VF.gru`` / ``rnn_tanh`` / ``rnn_relu`` / ``lstm`` on meta
tensors as the CPU runs them, op for op, above autograd (a training step's backward follows
the same ops), so that the sweep on a CPU and ``--target-gpu`` count an RNN alike. Any other
call, and any call on real tensors, runs as it is.

Example:
    >>> rnn = torch.nn.GRU(8, 16).to("meta")
    >>> with CpuRnnPath():
    ...     out, h = rnn(torch.empty(5, 2, 8, device="meta"))
    >>> out.shape, h.shape
    (torch.Size([5, 2, 16]), torch.Size([1, 2, 16]))
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

aten = torch.ops.aten
_VF = torch._C._VariableFunctions
LSTM_MODE = 2  # mkldnn_rnn_layer's mode for an LSTM (RNN_RELU 0, RNN_TANH 1, LSTM 2, GRU 3)

Cell = Callable[[torch.Tensor, torch.Tensor, Sequence[torch.Tensor | None]], torch.Tensor]


def _gru_cell(igates: torch.Tensor, hidden: torch.Tensor,
              weights: Sequence[torch.Tensor | None]) -> torch.Tensor:
    """``GRUCell`` with its input gates computed before the steps (RNN.cpp)."""
    i_r, i_z, i_n = igates.unsafe_chunk(3, 1)
    h_r, h_z, h_n = F.linear(hidden, weights[1], weights[3]).unsafe_chunk(3, 1)  # type: ignore[arg-type]
    reset = h_r.add_(i_r).sigmoid_()
    update = h_z.add_(i_z).sigmoid_()
    new = i_n.add(h_n.mul_(reset)).tanh_()
    return (hidden - new).mul_(update).add_(new)


def _simple_cell(nonlinearity: Callable[[torch.Tensor], torch.Tensor]) -> Cell:
    """``SimpleCell`` (tanh or relu) with its input projection computed before the steps."""

    def cell(igates: torch.Tensor, hidden: torch.Tensor,
             weights: Sequence[torch.Tensor | None]) -> torch.Tensor:
        return nonlinearity(F.linear(hidden, weights[1], weights[3]).add_(igates))  # type: ignore[arg-type]

    return cell


def _layer_weights(params: Sequence[torch.Tensor], has_biases: bool, index: int
                   ) -> list[torch.Tensor | None]:
    """w_ih, w_hh, b_ih, b_hh of one layer and direction (biases None without them)."""
    per = 4 if has_biases else 2
    weights: list[torch.Tensor | None] = list(params[index * per:(index + 1) * per])
    return weights if has_biases else [*weights, None, None]


def _full_layer(x: torch.Tensor, hidden: torch.Tensor, weights: list[torch.Tensor | None],
                cell: Cell, reverse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One layer and direction over [T, B, features]: every step's input gates in one
    projection, then a cell a step; the outputs stacked."""
    igates = F.linear(x, weights[0], weights[2]).unbind(0)  # type: ignore[arg-type]
    outputs = []
    for step in (reversed(igates) if reverse else igates):
        hidden = cell(step, hidden, weights)
        outputs.append(hidden)
    if reverse:
        outputs.reverse()
    return torch.stack(outputs, 0), hidden


def _cpu_rnn(cell: Cell, input: torch.Tensor, hx: torch.Tensor, params: Sequence[torch.Tensor],
             has_biases: bool, num_layers: int, dropout: float, train: bool,
             bidirectional: bool, batch_first: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``gru``, ``rnn_tanh``, ``rnn_relu`` as the CPU runs them (``_rnn_impl``)."""
    x = input.transpose(0, 1) if batch_first else input
    hiddens = hx.unbind(0)
    directions = 2 if bidirectional else 1
    finals = []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            index = layer * directions + d
            out, final = _full_layer(x, hiddens[index],
                                     _layer_weights(params, has_biases, index), cell, d == 1)
            outputs.append(out)
            finals.append(final)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        if dropout and train and layer < num_layers - 1:
            x = F.dropout(x, dropout, True)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(finals, 0)


def _cpu_lstm(input: torch.Tensor, hx: Sequence[torch.Tensor], params: Sequence[torch.Tensor],
              has_biases: bool, num_layers: int, dropout: float, train: bool,
              bidirectional: bool, batch_first: bool
              ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``lstm`` as the CPU runs it: oneDNN's kernel a layer and direction at a time."""
    x = (input.transpose(0, 1) if batch_first else input).contiguous()
    h0, c0 = hx
    directions = 2 if bidirectional else 1
    hs, cs = [], []
    for layer in range(num_layers):
        outputs = []
        for d in range(directions):
            index = layer * directions + d
            per = 4 if has_biases else 2
            w_ih, w_hh = params[index * per], params[index * per + 1]
            # without biases the CPU hands oneDNN zeros
            b_ih, b_hh = (params[index * per + 2], params[index * per + 3]) if has_biases \
                else (w_ih.new_zeros(w_ih.shape[0]), w_hh.new_zeros(w_hh.shape[0]))
            out, hy, cy, _ = aten.mkldnn_rnn_layer(
                x, w_ih, w_hh, b_ih, b_hh, h0[index], c0[index], d == 1, [], LSTM_MODE,
                w_hh.shape[1], num_layers, has_biases, bidirectional, False, train)
            outputs.append(out)
            hs.append(hy)
            cs.append(cy)
        x = outputs[0] if directions == 1 else torch.cat(outputs, -1)
        if dropout and train and layer < num_layers - 1:
            x = F.dropout(x, dropout, True)
    return (x.transpose(0, 1) if batch_first else x), torch.stack(hs, 0), torch.stack(cs, 0)


_CELLS: dict[Any, Cell] = {_VF.gru: _gru_cell, _VF.rnn_tanh: _simple_cell(torch.tanh),
                           _VF.rnn_relu: _simple_cell(torch.relu)}


def _dense_meta(input: Any, params: Any) -> bool:
    """A padded (not packed) sequence on the meta device, every weight a meta tensor."""
    return (isinstance(input, torch.Tensor) and input.is_meta and isinstance(params, list)
            and all(isinstance(p, torch.Tensor) and p.is_meta for p in params))


class CpuRnnPath(TorchFunctionMode):
    """Runs ``torch._VF``'s RNNs on meta tensors on the CPU's path (see the module)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple[Any, ...] = (),
                           kwargs: dict[str, Any] | None = None) -> Any:
        kwargs = kwargs or {}
        # (input, hx, params, has_biases, num_layers, dropout, train, bidirectional,
        #  batch_first): the padded overload; a packed sequence's has batch_sizes second
        if len(args) == 9 and not kwargs and _dense_meta(args[0], args[2]):
            if func in _CELLS:
                return _cpu_rnn(_CELLS[func], *args)
            if func is _VF.lstm:
                return _cpu_lstm(*args)
        return func(*args, **kwargs)
