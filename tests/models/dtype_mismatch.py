"""Builds a float64 weight inside forward: the model and its inputs disagree on dtype."""
import torch


class Mixed(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        return torch.mm(self.lin(x), torch.ones(8, 8, dtype=torch.float64))


def build_model():
    return Mixed()


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
