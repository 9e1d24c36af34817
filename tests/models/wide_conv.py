"""A small CNN whose first activations are wide (32 channels at 224 px): 6.1 MiB an image,
so from batch 8 each lives in a block above glibc's 32 MiB mmap ceiling and is mapped
afresh, and faulted in, every step, as the stem of a real image classifier is."""
import torch
from torch import nn

UNIT = "image"


def build_model():
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(4),
                         nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


def make_inputs(batch_size):
    return torch.randn(batch_size, 3, 224, 224)
