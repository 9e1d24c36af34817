"""What a batch-size finder's trials change in the user's process, taken and put back.

A finder (batchscope/finding.py) runs the user's own training loop at several batch sizes
before the run proper. The run proper must start where it would have started without them:
the same weights, the same optimizer state, the same random numbers. :class:`RngState` and
:class:`TrainingState` copy them to host memory and put them back; :func:`free_memory`
drops what a failed trial left.
"""

from __future__ import annotations

import gc
import random
import sys
from typing import Any

import torch


def free_memory(device: torch.device) -> None:
    """Drop what a failed trial left: garbage (its autograd graph, held by a traceback
    until collected) and, on CUDA, the caching allocator's free blocks."""
    gc.collect()
    if device.type == "cuda" and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


class RngState:
    """The random number generators a trial draws from (torch's CPU and CUDA ones, Python's
    ``random``, NumPy's where loaded), taken now and put back by :meth:`restore`: a fit
    after the finder draws the numbers it would have drawn without it."""

    def __init__(self) -> None:
        self.torch = torch.get_rng_state()
        self.cuda = (torch.cuda.get_rng_state_all()
                     if torch.cuda.is_available() and torch.cuda.is_initialized() else None)
        self.python = random.getstate()
        numpy = _numpy()
        self.numpy = numpy.random.get_state() if numpy is not None else None

    def restore(self) -> None:
        torch.set_rng_state(self.torch)
        if self.cuda is not None:
            torch.cuda.set_rng_state_all(self.cuda)
        random.setstate(self.python)
        numpy = _numpy()
        if numpy is not None and self.numpy is not None:
            numpy.random.set_state(self.numpy)


class TrainingState:
    """What trials change in a model and its optimizers, copied to host memory now:
    parameters and buffers (``state_dict``), each optimizer's state, which parameters had a
    gradient, and the random number generators. :meth:`restore` puts them back in place
    (``load_state_dict`` copies into the same tensors, so an optimizer's references stay
    valid), and drops the gradients the trials made.

    Lightning's finder restores through a checkpoint instead (as its BatchSizeFinder does):
    loops, schedulers and the precision plugin's scaler with the weights.
    """

    def __init__(self, model: torch.nn.Module, optimizers: list[Any] | None = None) -> None:
        self.model = model
        self.weights = {k: v.detach().to("cpu", copy=True)
                        for k, v in model.state_dict().items()}
        self.optimizers = list(optimizers or [])
        self.optimizer_states = [_to_host(o.state_dict()) for o in self.optimizers]
        self.grads = {id(p): (p.grad.detach().to("cpu", copy=True) if p.grad is not None
                              else None) for p in model.parameters()}
        self.rng = RngState()

    def restore(self) -> None:
        self.model.load_state_dict(self.weights)
        for optimizer, state in zip(self.optimizers, self.optimizer_states):
            optimizer.load_state_dict(state)
        for p in self.model.parameters():
            saved = self.grads.get(id(p))
            p.grad = None if saved is None else saved.to(p.device)
        self.rng.restore()


def _to_host(value: Any) -> Any:
    """A state dict with every tensor copied to host memory (lists and dicts kept)."""
    if isinstance(value, torch.Tensor):
        return value.detach().to("cpu", copy=True)
    if isinstance(value, dict):
        return {k: _to_host(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_to_host(v) for v in value)
    return value


def _numpy() -> Any:
    """NumPy where the process loaded it (its generator is then one a loop may draw from)."""
    return sys.modules.get("numpy")
