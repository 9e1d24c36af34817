"""A torch.compile'd MLP (issue 13, finding 12): two linears inductor calls as extern
addmm kernels, and a GELU it fuses into a kernel of its own."""
import torch
from torch import nn

UNIT = "sample"

def build_model():
    torch.manual_seed(0)
    return torch.compile(nn.Sequential(nn.Linear(512, 2048), nn.GELU(), nn.Linear(2048, 512)))

def make_inputs(b):
    return torch.randn(b, 512)
