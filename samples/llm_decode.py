"""GPT-2-small-shaped LLM decode step over a preallocated KV cache.

What it models: one autoregressive decode step of a 124M-parameter decoder (12 pre-LayerNorm
blocks, d_model 768, 12 heads, GELU MLP 4x, vocabulary 50257, learned position embedding,
LM head tied to the token embedding). Every batch row generates ONE token: the step writes
that token's key and value into slot ``position`` of the row's cache, which already holds the
tokens before it (random values stand in for them), attends over the slots up to it with
``scaled_dot_product_attention`` (a mask hides the rest) and returns logits
``[batch, vocab]``. In the sweep every row sits at position ``context``; a serving loop
(``benchmarks/serving_loop.py``) runs the same step with rows at different positions. The
cache buffers are plain tensors built by ``make_inputs``, and the write is in place, so every
step does the same work and can be repeated as often as the timer likes.

Why it is interesting for batching: at batch 1 each linear layer reads its whole weight
matrix (~0.5 GB of fp32 weights per step, logits included) to do 2 FLOPs per weight, an
arithmetic intensity of about 0.5 FLOP/byte: far below any machine's ridge point, so the
step is memory-bound. The weights are read once per step whatever the batch, so a larger
batch gets more tokens out of the same weight traffic, and throughput climbs roughly
linearly until the linears reach the ridge. The KV cache is different: it is per row
("state"), so attention bytes grow with the batch, its intensity stays low at every batch,
and a longer context (``BATCHSCOPE_CONTEXT``) shrinks the gain from batching and the batch
size at which it stops paying.

``CONTEXTS`` makes this a decode model for the serving what-if: the sweep runs at the first
context, and with more than one (``BATCHSCOPE_CONTEXTS=128,512,1024`` or ``diagnose
--contexts``) a small grid of step times at each, so ``diagnose serve`` knows how the step
grows with the context. Set the sweep's context with ``BATCHSCOPE_CONTEXT`` (default 128).
"""

from __future__ import annotations

import os

import torch
import torch.nn.functional as F
from torch import nn

CONTEXT: int = int(os.environ.get("BATCHSCOPE_CONTEXT", 128))
"""Tokens already in the KV cache; the step attends over CONTEXT + 1 positions."""
CONTEXTS: list[int] = [CONTEXT] + [
    int(c) for c in os.environ.get("BATCHSCOPE_CONTEXTS", "").split(",") if c.strip()
    and int(c) != CONTEXT]
"""The sweep's context first; the others are timed in a small grid for ``diagnose serve``."""

UNIT = "token"
MODE = "inference"
# BATCH_SIZES is not set: the tool sweeps powers of two.

VOCAB = 50257
N_LAYER = 12
N_HEAD = 12
D_MODEL = 768
HEAD_DIM = D_MODEL // N_HEAD
N_POSITIONS = max(1024, max(CONTEXTS) + 1)
SEED = 0


class Attention(nn.Module):
    """Multi-head self-attention for one new token per row, reading and writing a KV cache."""

    def __init__(self) -> None:
        super().__init__()
        self.c_attn = nn.Linear(D_MODEL, 3 * D_MODEL)
        self.c_proj = nn.Linear(D_MODEL, D_MODEL)

    def forward(
        self, x: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor,
        k_cache: torch.Tensor, v_cache: torch.Tensor,
    ) -> torch.Tensor:
        b, t, _ = x.shape  # t == 1
        q, k, v = self.c_attn(x).split(D_MODEL, dim=2)
        q = q.view(b, t, N_HEAD, HEAD_DIM).transpose(1, 2)  # [b, heads, 1, head_dim]
        k = k.view(b, t, N_HEAD, HEAD_DIM).transpose(1, 2)
        v = v.view(b, t, N_HEAD, HEAD_DIM).transpose(1, 2)
        # In place into the preallocated buffers [b, heads, slots, head_dim]: row r's new key
        # and value go to its own slot, slots[r, :, 0, :] (the same ops at every batch size).
        k_cache.scatter_(2, slots, k)
        v_cache.scatter_(2, slots, v)
        # Each row sees its own position and every one before it; later slots are masked.
        y = F.scaled_dot_product_attention(q, k_cache, v_cache, attn_mask=mask)
        y = y.transpose(1, 2).reshape(b, t, D_MODEL)
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.c_fc = nn.Linear(D_MODEL, 4 * D_MODEL)
        self.c_proj = nn.Linear(4 * D_MODEL, D_MODEL)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(F.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    """Pre-LayerNorm transformer block."""

    def __init__(self) -> None:
        super().__init__()
        self.ln_1 = nn.LayerNorm(D_MODEL)
        self.attn = Attention()
        self.ln_2 = nn.LayerNorm(D_MODEL)
        self.mlp = MLP()

    def forward(
        self, x: torch.Tensor, slots: torch.Tensor, mask: torch.Tensor,
        k_cache: torch.Tensor, v_cache: torch.Tensor,
    ) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x), slots, mask, k_cache, v_cache)
        return x + self.mlp(self.ln_2(x))


def _embedding(rows: int, std: float) -> nn.Embedding:
    # from_pretrained takes the table as given: no default N(0, 1) init to overwrite.
    return nn.Embedding.from_pretrained(torch.empty(rows, D_MODEL).normal_(0.0, std), freeze=False)


class GPTDecoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.wte = _embedding(VOCAB, 0.02)
        self.wpe = _embedding(N_POSITIONS, 0.01)
        self.h = nn.ModuleList(Block() for _ in range(N_LAYER))
        self.ln_f = nn.LayerNorm(D_MODEL)

    def forward(
        self,
        input_ids: torch.Tensor,
        position_ids: torch.Tensor,
        k_cache: list[torch.Tensor],
        v_cache: list[torch.Tensor],
    ) -> torch.Tensor:
        """One decode step: ids and positions ``[b, 1]`` in, logits ``[b, vocab]`` out. The
        caches ``[b, heads, slots, head_dim]`` need a slot at every row's position."""
        b = input_ids.shape[0]
        # Each row's write slot as a scatter index [b, heads, 1, head_dim] (an expanded view);
        # long, on the model's device: no host sync.
        slots = position_ids.view(b, 1, 1, 1).expand(b, N_HEAD, 1, HEAD_DIM)
        seen = torch.arange(k_cache[0].shape[2], device=input_ids.device)
        mask = (seen[None, :] <= position_ids)[:, None, None, :]  # [b, 1, 1, cache slots]
        x = self.wte(input_ids) + self.wpe(position_ids)  # [b, 1, d_model]
        for block, k, v in zip(self.h, k_cache, v_cache):
            x = block(x, slots, mask, k, v)
        x = self.ln_f(x[:, -1])  # [b, d_model]
        return F.linear(x, self.wte.weight)  # tied LM head: reads the embedding weight


def build_model() -> nn.Module:
    # Seeded random weights. nn.Linear's default init, U(+-1/sqrt(fan_in)), already has
    # GPT-2's scale (std ~0.02 for fan_in 768), so only the embeddings get GPT-2's normal init.
    torch.manual_seed(SEED)
    return GPTDecoder().eval()


def make_inputs(batch_size: int, context: int = CONTEXT
                ) -> dict[str, torch.Tensor | list[torch.Tensor]]:
    """New token ids and positions ``[b, 1]`` and per-layer K/V caches holding ``context``
    tokens, with a slot for the new one."""
    gen = torch.Generator().manual_seed(SEED + 1)
    row = (1, N_HEAD, context + 1, HEAD_DIM)
    # One random row per layer, copied to every row: the step's cost does not depend on the
    # values, and copying is ~3x faster than drawing 10 GB of normals at batch 1024. Each
    # row still owns its memory (a real copy, not an expanded view), as a real cache does.
    k_cache = [torch.randn(row, generator=gen).repeat(batch_size, 1, 1, 1) for _ in range(N_LAYER)]
    v_cache = [torch.randn(row, generator=gen).repeat(batch_size, 1, 1, 1) for _ in range(N_LAYER)]
    return {
        "input_ids": torch.randint(0, VOCAB, (batch_size, 1), generator=gen),
        "position_ids": torch.full((batch_size, 1), context, dtype=torch.long),
        "k_cache": k_cache,
        "v_cache": v_cache,
    }
