"""A stock ``nn.TransformerEncoder`` sequence classifier, as the PyTorch docs write one (4
layers, d_model 256, 4 heads, feed-forward 1024, sequences of 128 tokens, batch first): the
model of issue 47's failed CI gate (identical code picked 32 and 4). In inference PyTorch runs
its fused fast path (``aten._transformer_encoder_layer_fwd``, one op a layer)."""

from __future__ import annotations

import torch
from torch import nn

UNIT = "sequence"
MODE = "inference"
SEQ, WIDTH, LAYERS, VOCAB, CLASSES = 128, 256, 4, 1000, 2


class Classifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        layer = nn.TransformerEncoderLayer(WIDTH, 4, dim_feedforward=4 * WIDTH, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False)
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.embed(tokens)).mean(dim=1))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Classifier()


def make_inputs(batch_size: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, SEQ))
