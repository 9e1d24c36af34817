"""Raises inside the step at batch size 4 and above: those batches end as model_error."""
import torch

BATCH_SIZES = [1, 2, 4]


class Picky(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] >= 4:
            raise ValueError(f"batch {x.shape[0]} is too big for this model")
        return self.lin(x)


def build_model():
    return Picky()


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
