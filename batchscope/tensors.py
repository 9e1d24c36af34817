"""Walking the tensors inside what ``make_inputs`` returns: nested tuples, lists and dicts."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch


def iter_tensors(obj: Any) -> list[torch.Tensor]:
    """All tensors inside nested tuples, lists and dicts, in order."""
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, Mapping):
        return [t for v in obj.values() for t in iter_tensors(v)]
    if isinstance(obj, (tuple, list)):
        return [t for v in obj for t in iter_tensors(v)]
    return []


def map_tensors(obj: Any, fn: Callable[[torch.Tensor], torch.Tensor]) -> Any:
    """Apply ``fn`` to every tensor inside nested tuples, lists and dicts."""
    if isinstance(obj, torch.Tensor):
        return fn(obj)
    if isinstance(obj, Mapping):
        return {k: map_tensors(v, fn) for k, v in obj.items()}
    if isinstance(obj, tuple):
        return tuple(map_tensors(v, fn) for v in obj)
    if isinstance(obj, list):
        return [map_tensors(v, fn) for v in obj]
    return obj
