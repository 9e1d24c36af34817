"""The machine's own ceilings: peak FLOP/s per dtype, memory bandwidth, fixed per-op cost.

``Ceilings`` is plain data; the measuring half (``measure``, ``load_or_measure``, ...) needs
torch and is imported on first use, so the parent process of a sweep, which only reads
ceilings, never imports torch.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from batchscope.hardware.types import Ceilings

if TYPE_CHECKING:
    from batchscope.hardware.cache import cache_path, load_or_measure, machine_key
    from batchscope.hardware.microbench import measure

_LAZY = {"cache_path": "cache", "load_or_measure": "cache", "machine_key": "cache",
         "measure": "microbench"}

__all__ = ["Ceilings", "cache_path", "load_or_measure", "machine_key", "measure"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f"{__name__}.{module}"), name)
