"""Starts a profiler of its own in the worker, as a user's instrumented model might."""
import torch

_PROFILER = None


def build_model():
    global _PROFILER
    _PROFILER = torch.autograd.profiler.profile()
    _PROFILER.__enter__()
    return torch.nn.Linear(8, 8)


def make_inputs(batch_size):
    return torch.randn(batch_size, 8)
