"""The step raises at batch size 1 (like a BatchNorm in training at one row) and make_inputs
raises from batch size 2 up: a failing make_inputs after the run's first step is that batch
size's model_error, not a contract error."""
import torch


class NeedsTwoRows(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] < 2:
            raise ValueError("Expected more than 1 value per channel")
        return self.lin(x)


def build_model():
    return NeedsTwoRows()


def make_inputs(batch_size):
    if batch_size >= 2:
        raise ValueError(f"no inputs for batch {batch_size}")
    return torch.randn(batch_size, 8)
