"""The training step: forward, loss, backward and optimizer step, as one callable.

A model file may define ``make_optimizer(model)`` and ``loss(outputs, inputs)``. Without
them batchscope uses AdamW (the most common optimizer; its two moment buffers make the
optimizer state twice the parameters, which the peak memory must show) and a stand-in loss,
the mean square of the outputs, whose backward reaches every output.

Gradients are zeroed in place (``set_to_none=False``) so they keep one storage across
steps: the counting pass then knows them, and counts them with the weights (like the
optimizer state, they are read once per step whatever the batch).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable
from contextlib import AbstractContextManager
from typing import Any

import torch

from batchscope.contract import ModelSpec
from batchscope.records.report import TrainingStep
from batchscope.tensors import iter_tensors

# AdamW's default learning rate is irrelevant to speed; a small one keeps random-weight
# models numerically quiet over many steps.
DEFAULT_LR = 1e-4


def default_optimizer(model: torch.nn.Module) -> torch.optim.Optimizer:
    """AdamW over the trainable parameters (foreach off: one op sequence on every device)."""
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=DEFAULT_LR, foreach=False)


def default_loss(outputs: Any, inputs: Any) -> torch.Tensor:
    """Mean square of every floating-point output tensor, summed: touches all outputs."""
    tensors = [t for t in iter_tensors(outputs) if t.is_floating_point()]
    if not tensors:
        raise TypeError("the model returned no floating-point tensor to take a loss of; "
                        "define loss(outputs, inputs) in the model file")
    return sum(t.float().square().mean() for t in tensors)  # type: ignore[return-value]


def optimizer_tensors(optimizer: torch.optim.Optimizer) -> list[torch.Tensor]:
    """Every tensor of the optimizer's state (moments, step counters)."""
    return [t for state in optimizer.state.values() for t in iter_tensors(dict(state))]


def step_description(spec: ModelSpec) -> TrainingStep:
    """What the training step runs, for the report: the model file's optimizer and loss,
    or batchscope's stand-ins."""
    return TrainingStep(optimizer_from_file=spec.make_optimizer is not None,
                        loss_from_file=spec.loss is not None, default_lr=DEFAULT_LR)


def is_compiled(model: torch.nn.Module) -> bool:
    """True for a ``torch.compile``d module (without importing torch._dynamo to check)."""
    return type(model).__name__ == "OptimizedModule" and hasattr(model, "_orig_mod")


def training_step(spec: ModelSpec, model: torch.nn.Module, inputs: Any,
                  optimizer: torch.optim.Optimizer,
                  autocast: Callable[[], AbstractContextManager[Any]] | None = None,
                  ) -> Callable[[], Any]:
    """One training step of ``model`` on ``inputs`` as a zero-argument callable; with
    ``autocast`` (--amp) the forward and the loss run under it and the backward outside, as
    torch's mixed-precision recipe has it."""
    forward = spec.step_fn(model, inputs)
    loss_fn = spec.loss or default_loss
    context = autocast or contextlib.nullcontext

    def step() -> Any:
        with context():
            loss = loss_fn(forward(), inputs)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=False)
        return loss

    return step


def persistent_tensors(model: torch.nn.Module,
                       optimizer: torch.optim.Optimizer | None) -> Iterable[torch.Tensor]:
    """What a step reads once whatever the batch: parameters, buffers, gradients and the
    optimizer state."""
    yield from model.parameters()
    yield from model.buffers()
    yield from (p.grad for p in model.parameters() if p.grad is not None)
    if optimizer is not None:
        yield from optimizer_tensors(optimizer)
