"""Variants of a model file for benchmarks/stability.py: the same model doing 25% more work
(more layers, wider layers or larger images: FLOPs and bytes grow, which ``compare`` must
catch whatever the clock says), or the same work 15% slower (a spin after each forward
lasting 15% of it: equal FLOPs and bytes, a pure time change only the A/B mode can see).
"""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

ROOT = Path(__file__).resolve().parents[2]


def load(path: str, name: str) -> ModuleType:
    """The model file at ``path`` (relative to the repository) as a module of its own."""
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class Slower(torch.nn.Module):
    """``inner`` with a busy wait after each forward lasting ``extra`` of that forward."""

    def __init__(self, inner: torch.nn.Module, extra: float = 0.15) -> None:
        super().__init__()
        self.inner = inner
        self.extra = extra

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        out = self.inner(*args, **kwargs)
        until = time.perf_counter() + (time.perf_counter() - started) * self.extra
        while time.perf_counter() < until:
            pass
        return out


def export(module: ModuleType, namespace: dict[str, Any], slower: bool = False) -> None:
    """Copy the model file's contract names into ``namespace`` (the variant file's globals),
    wrapping build_model in :class:`Slower` when ``slower``."""
    for name in ("UNIT", "MODE", "CONTEXTS", "UNITS_PER_ROW", "make_inputs"):
        if hasattr(module, name):
            namespace[name] = getattr(module, name)
    build = module.build_model
    namespace["build_model"] = (lambda: Slower(build())) if slower else build
