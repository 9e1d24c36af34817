"""A tiny decoder with a KV cache and CONTEXTS: the serving what-if's real sweep in tests.

Two layers of width 32 over a vocabulary of 97: fast at any batch, but the step still has
the decode structure (weights shared by the batch, a per-row KV cache read by attention).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

UNIT = "token"
MODE = "inference"
BATCH_SIZES = [1, 2, 4]
CONTEXTS = [16, 64]
VOCAB, D, HEADS, LAYERS = 97, 32, 2, 2


class Decoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, D)
        self.qkv = nn.ModuleList(nn.Linear(D, 3 * D) for _ in range(LAYERS))
        self.out = nn.ModuleList(nn.Linear(D, D) for _ in range(LAYERS))

    def forward(self, ids, positions, k_cache, v_cache):
        b = ids.shape[0]
        rows = torch.arange(b, device=ids.device)
        pos = positions[:, 0]
        slots = torch.arange(k_cache[0].shape[2], device=ids.device)
        mask = (slots[None, :] <= positions)[:, None, None, :]
        x = self.embed(ids)  # [b, 1, D]
        for qkv, out, k_c, v_c in zip(self.qkv, self.out, k_cache, v_cache):
            q, k, v = (t.view(b, 1, HEADS, D // HEADS).transpose(1, 2)
                       for t in qkv(x).split(D, dim=2))
            k_c[rows, :, pos] = k[:, :, 0]
            v_c[rows, :, pos] = v[:, :, 0]
            y = F.scaled_dot_product_attention(q, k_c, v_c, attn_mask=mask)
            x = x + out(y.transpose(1, 2).reshape(b, 1, D))
        return x[:, 0] @ self.embed.weight.T


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Decoder().eval()


def make_inputs(batch_size: int, context: int):
    shape = (batch_size, HEADS, context + 1, D // HEADS)
    return {"ids": torch.zeros(batch_size, 1, dtype=torch.long),
            "positions": torch.full((batch_size, 1), context, dtype=torch.long),
            "k_cache": [torch.randn(shape) for _ in range(LAYERS)],
            "v_cache": [torch.randn(shape) for _ in range(LAYERS)]}
