"""Peak memory of one step from a run on meta tensors: the bytes of every tensor an op made,
held until the last tensor on its storage is gone, at their most.

The step's own tensors only: the weights and inputs are added by the caller, and so are
what a GPU holds besides (the CUDA context, cuBLAS/cuDNN workspaces). The caching
allocator's rounding and fragmentation are not modelled: the prediction is a floor.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten


def _storage_key(t: torch.Tensor) -> int:
    storage = t.untyped_storage()
    return int(storage._cdata if t.is_meta else storage.data_ptr())


class _LiveBytes(TorchDispatchMode):
    def __init__(self, resident: set[int]) -> None:
        super().__init__()  # type: ignore[no-untyped-call]
        self.resident = resident
        self.holders: dict[int, int] = {}  # storage -> tensors alive on it
        self.sizes: dict[int, int] = {}
        self.current = 0
        self.peak = 0

    def _release(self, key: int) -> None:
        self.holders[key] -= 1
        if self.holders[key] == 0:
            del self.holders[key]
            self.current -= self.sizes.pop(key)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None
                           ) -> Any:
        out = func(*args, **(kwargs or {}))
        flat, _ = tree_flatten(out)
        for t in flat:
            if not isinstance(t, torch.Tensor):
                continue
            key = _storage_key(t)
            if key in self.resident:
                continue
            if key not in self.holders:
                self.holders[key] = 0
                self.sizes[key] = int(t.untyped_storage().nbytes())
                self.current += self.sizes[key]
                self.peak = max(self.peak, self.current)
            self.holders[key] += 1
            weakref.finalize(t, self._release, key)
        return out


def step_peak_bytes(step: Callable[[], Any], resident: Iterable[torch.Tensor]) -> int:
    """The most bytes the tensors ``step()`` makes hold at once, ``resident`` (weights,
    inputs) not counted: they are there before and after."""
    keys = {_storage_key(t) for t in resident}
    mode = _LiveBytes(keys)
    with mode:
        result = step()
    del result
    return mode.peak
