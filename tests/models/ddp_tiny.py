"""A tiny training model for the distributed sweep's tests, with faults on cue.

``BATCHSCOPE_TEST_FAULT=kind:rank:batch`` makes that rank, at that per-rank batch size,
``kill`` itself (SIGKILL), ``hang`` (sleeps far past any timeout), or ``raise``.
"""

from __future__ import annotations

import os
import signal
import time

import torch
from torch import nn

MODE = "train"
UNIT = "sample"


class Tiny(nn.Module):
    """Two linear layers, and a head the forward never uses (as a model with a pooler its
    loss does not reach): DDP must be told to look for unused parameters."""

    def __init__(self) -> None:
        super().__init__()
        self.body = nn.Sequential(nn.Linear(64, 256), nn.ReLU(), nn.Linear(256, 64))
        self.unused_head = nn.Linear(64, 8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.body(x)


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return Tiny()


def _fault(batch_size: int) -> None:
    spec = os.environ.get("BATCHSCOPE_TEST_FAULT")
    if not spec:
        return
    kind, rank, at = spec.split(":")
    if int(os.environ.get("RANK", "0")) != int(rank) or batch_size != int(at):
        return
    if kind == "kill":
        os.kill(os.getpid(), signal.SIGKILL)
    if kind == "hang":
        time.sleep(3600)
    if kind == "raise":
        raise ValueError(f"rank {rank} cannot take batch {batch_size}")


def make_inputs(batch_size: int) -> torch.Tensor:
    _fault(batch_size)
    return torch.randn(batch_size, 64, generator=torch.Generator().manual_seed(1))
