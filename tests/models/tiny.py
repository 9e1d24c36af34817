"""A tiny MLP that every sweep test can afford."""
import torch

UNIT = "sample"


def build_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def make_inputs(batch_size):
    return torch.randn(batch_size, 16)
