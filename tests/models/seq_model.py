"""A tiny transformer encoder swept over batch size × sequence length (SEQ_LENS)."""

import torch
from torch import nn

UNIT = "token"
MODE = "train"
SEQ_LENS = [16, 32, 64]
UNITS_PER_ROW = "seq_len"
BATCH_SIZES = [1, 2, 4]
VOCAB, WIDTH = 64, 32


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, WIDTH)
        self.layer = nn.TransformerEncoderLayer(WIDTH, nhead=2, dim_feedforward=64,
                                                batch_first=True, dropout=0.0)
        self.head = nn.Linear(WIDTH, VOCAB)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.head(self.layer(self.embed(ids)))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Encoder()


def make_inputs(batch_size: int, seq_len: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, seq_len),
                         generator=torch.Generator().manual_seed(0))
