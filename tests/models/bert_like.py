"""A BERT-shaped encoder written as Hugging Face writes it (matmul on 4-D heads, softmax,
dropout, permute/contiguous/view), trained with batchscope's default step. At batch 1 its
reshapes are views of the same shapes as later ops, which derailed the join (issue 13)."""
import torch
from torch import nn

UNIT = "sample"
MODE = "train"
HIDDEN, HEADS, SEQ, LAYERS, VOCAB = 128, 4, 64, 2, 1000


class SelfAttention(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(HIDDEN, HIDDEN) for _ in range(3))
        self.dropout = nn.Dropout(0.1)
        self.out = nn.Linear(HIDDEN, HIDDEN)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        return x.view(b, s, HEADS, HIDDEN // HEADS).permute(0, 2, 1, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        q, k, v = self.heads(self.query(x)), self.heads(self.key(x)), self.heads(self.value(x))
        scores = torch.matmul(q, k.transpose(-1, -2)) / (HIDDEN // HEADS) ** 0.5
        probs = self.dropout(torch.softmax(scores, dim=-1))
        context = torch.matmul(probs, v).permute(0, 2, 1, 3).contiguous()
        return self.out(context.view(x.shape))


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.attention = SelfAttention()
        self.norm1, self.norm2 = nn.LayerNorm(HIDDEN), nn.LayerNorm(HIDDEN)
        self.ff = nn.Sequential(nn.Linear(HIDDEN, 4 * HIDDEN), nn.GELU(),
                                nn.Linear(4 * HIDDEN, HIDDEN))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm1(x + self.attention(x))
        return self.norm2(x + self.ff(x))


class Encoder(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(VOCAB, HIDDEN)
        self.layers = nn.ModuleList(Layer() for _ in range(LAYERS))
        self.head = nn.Linear(HIDDEN, 2)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = self.embed(ids)
        for layer in self.layers:
            x = layer(x)
        return self.head(x[:, 0])


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Encoder()


def make_inputs(batch_size: int) -> torch.Tensor:
    return torch.randint(0, VOCAB, (batch_size, SEQ), generator=torch.Generator().manual_seed(0))
