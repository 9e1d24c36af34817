"""Sleeps for a long time in the step at batch size 2: the batch must end as timeout."""
import time

import torch

BATCH_SIZES = [1, 2]


class Sleepy(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(8, 8)

    def forward(self, x):
        if x.shape[0] >= 2:
            time.sleep(3600)
        return self.lin(x)


def build_model():
    return Sleepy()


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
