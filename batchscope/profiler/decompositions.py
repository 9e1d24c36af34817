"""How an op with no formula is counted: by the ops it decomposes into, run on meta tensors.

The counting pass (:mod:`batchscope.profiler.counting`) counts an op that has no formula
(:mod:`batchscope.profiler.formulas`) by running a decomposition of it on meta twins of its
arguments (no data, no arithmetic: nothing runs twice) under a counting mode of its own,
and summing what the parts count. The decomposition is torch's own where torch has one
(``torch._decomp.decomposition_table``: ``upsample_bilinear2d``, ``grid_sampler_2d``,
``select_backward``, ...), else one written here from what the module's slow path runs:

- ``_transformer_encoder_layer_fwd``: ``nn.TransformerEncoderLayer``'s inference fast
  path, one op per layer, as its ``forward`` runs it without the fast path (layer norms,
  :func:`torch.nn.functional.multi_head_attention_forward`, the feed-forward linears);
- ``_native_multi_head_attention``: ``nn.MultiheadAttention``'s fast path, as its
  ``forward`` runs it without;
- ``mkldnn_rnn_layer``: the CPU kernel of one layer and direction of ``nn.LSTM``, as
  ``aten.lstm`` runs it elsewhere (one cell per time step).

Each is a function of the op's own arguments, so :func:`expansion_for` is keyed by op
objects as the formulas are: a misspelt op fails at import.

What an expansion counts of bytes depends on the op. A fused fast path runs several
kernels that each read and write their own tensors (the layer's attention scores, its
feed-forward activations), so its bytes are those of its parts: the same bytes the slow
path counts, on a meta device (``--target-gpu``) or with grad enabled (a training step).
An op of one kernel (an upsampling, a grid sample) moves its own inputs and outputs only
(the byte rule of every op), and only its FLOPs come from its parts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch._decomp import decomposition_table

aten = torch.ops.aten

# mask_type of the fast paths (aten/src/ATen/native/transformers/attention.cpp): 0 an
# attention mask [L, S], 1 a key padding mask [B, S], 2 a merged mask [B, heads, L, S].
KEY_PADDING_MASK = 1
MERGED_MASK = 2
# mkldnn_rnn_layer's ``mode`` (aten/src/ATen/native/mkldnn/RNN.cpp: RNN_RELU, RNN_TANH, LSTM,
# GRU), mapped to the aten op that runs the same cell step by step.
RNN_MODES: dict[int, Any] = {0: aten.rnn_relu.input, 1: aten.rnn_tanh.input,
                             2: aten.lstm.input, 3: aten.gru.input}


@dataclass(frozen=True)
class Expansion:
    """How an op is counted by its parts.

    Attributes:
        run: the decomposition, called with the op's own arguments (meta twins of them).
        bytes_of_parts: True for a fused path of several kernels (its bytes are its parts'),
            False for one kernel (its bytes are its own inputs and outputs).
        source: where the decomposition comes from ("torch._decomp", "batchscope").
    """

    run: Callable[..., Any]
    bytes_of_parts: bool
    source: str


def _masks(mask: torch.Tensor | None, mask_type: int | None, heads: int
           ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(attn_mask, key_padding_mask) for multi_head_attention_forward from a fast path's
    single mask."""
    if mask is None:
        return None, None
    if mask_type == KEY_PADDING_MASK:
        return None, mask
    if mask_type == MERGED_MASK and mask.dim() == 4:  # [B, heads, L, S] -> [B * heads, L, S]
        return mask.reshape(-1, *mask.shape[-2:]), None
    return mask, None


def native_multi_head_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, embed_dim: int,
    num_head: int, qkv_weight: torch.Tensor, qkv_bias: torch.Tensor,
    proj_weight: torch.Tensor, proj_bias: torch.Tensor, mask: torch.Tensor | None = None,
    need_weights: bool = True, average_attn_weights: bool = True,
    mask_type: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``aten._native_multi_head_attention`` as ``nn.MultiheadAttention.forward`` runs it
    without the fast path: batch-first [B, L, E] in, sequence-first through
    :func:`F.multi_head_attention_forward`, batch-first out."""
    q = query.transpose(1, 0)
    k = q if key is query else key.transpose(1, 0)
    v = k if value is key else value.transpose(1, 0)
    attn_mask, key_padding_mask = _masks(mask, mask_type, num_head)
    out, weights = F.multi_head_attention_forward(
        q, k, v, embed_dim, num_head, qkv_weight, qkv_bias, None, None, False, 0.0,
        proj_weight, proj_bias, training=False, key_padding_mask=key_padding_mask,
        need_weights=need_weights, attn_mask=attn_mask,
        average_attn_weights=average_attn_weights)
    return out.transpose(1, 0), weights


def transformer_encoder_layer(
    src: torch.Tensor, embed_dim: int, num_heads: int, qkv_weight: torch.Tensor,
    qkv_bias: torch.Tensor, proj_weight: torch.Tensor, proj_bias: torch.Tensor,
    use_gelu: bool, norm_first: bool, eps: float, norm_weight_1: torch.Tensor,
    norm_bias_1: torch.Tensor, norm_weight_2: torch.Tensor, norm_bias_2: torch.Tensor,
    ffn_weight_1: torch.Tensor, ffn_bias_1: torch.Tensor, ffn_weight_2: torch.Tensor,
    ffn_bias_2: torch.Tensor, mask: torch.Tensor | None = None, mask_type: int | None = None,
) -> torch.Tensor:
    """``aten._transformer_encoder_layer_fwd`` as ``nn.TransformerEncoderLayer.forward``
    runs it without the fast path (in eval: no dropout)."""
    shape = (embed_dim,)

    def attention(x: torch.Tensor) -> torch.Tensor:
        return native_multi_head_attention(
            x, x, x, embed_dim, num_heads, qkv_weight, qkv_bias, proj_weight, proj_bias,
            mask, need_weights=False, mask_type=mask_type)[0]

    def feed_forward(x: torch.Tensor) -> torch.Tensor:
        hidden = F.linear(x, ffn_weight_1, ffn_bias_1)
        hidden = F.gelu(hidden) if use_gelu else F.relu(hidden)
        return F.linear(hidden, ffn_weight_2, ffn_bias_2)

    def norm1(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, shape, norm_weight_1, norm_bias_1, eps)

    def norm2(x: torch.Tensor) -> torch.Tensor:
        return F.layer_norm(x, shape, norm_weight_2, norm_bias_2, eps)

    if norm_first:
        x = src + attention(norm1(src))
        return x + feed_forward(norm2(x))
    x = norm1(src + attention(src))
    return norm2(x + feed_forward(x))


def mkldnn_rnn_layer(
    input: torch.Tensor, weight0: torch.Tensor, weight1: torch.Tensor,
    weight2: torch.Tensor, weight3: torch.Tensor, hx_: torch.Tensor, cx_: torch.Tensor,
    reverse: bool, batch_sizes: list[int], mode: int, hidden_size: int, num_layers: int,
    has_biases: bool, bidirectional: bool, batch_first: bool, train: bool,
) -> Any:
    """One layer and direction of the CPU RNN kernel as ``aten.lstm`` (``gru``, ``rnn_*``)
    runs it off oneDNN: a cell per time step. The reversed direction's cells do the same
    work in the other order."""
    params = [weight0, weight1, *((weight2, weight3) if has_biases else ())]
    op = RNN_MODES[mode]
    hx = hx_.unsqueeze(0)
    # oneDNN's caller hands the layer [T, B, features] whatever ``batch_first`` says
    rows_first = input.dim() == 3 and input.shape[1] != hx_.shape[0]
    if op is aten.lstm.input:
        return op(input, [hx, cx_.unsqueeze(0)], params, has_biases, 1, 0.0, train, False,
                  rows_first)
    return op(input, hx, params, has_biases, 1, 0.0, train, False, rows_first)


BATCHSCOPE_EXPANSIONS: dict[Any, Expansion] = {
    aten._transformer_encoder_layer_fwd.default: Expansion(
        transformer_encoder_layer, bytes_of_parts=True, source="batchscope"),
    aten._native_multi_head_attention.default: Expansion(
        native_multi_head_attention, bytes_of_parts=True, source="batchscope"),
    aten.mkldnn_rnn_layer.default: Expansion(
        mkldnn_rnn_layer, bytes_of_parts=True, source="batchscope"),
}
"""The fused paths torch has no decomposition of, written here."""


def expansion_for(func: torch._ops.OpOverload) -> Expansion | None:
    """How ``func`` is counted by its parts: batchscope's decomposition of a fused path,
    else torch's own (one kernel: its FLOPs only), else None."""
    ours = BATCHSCOPE_EXPANSIONS.get(func)
    if ours is not None:
        return ours
    theirs = decomposition_table.get(func)
    if theirs is not None:
        return Expansion(theirs, bytes_of_parts=False, source="torch._decomp")
    return None
