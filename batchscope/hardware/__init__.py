"""The machine's own ceilings: peak FLOP/s per dtype, memory bandwidth, fixed per-op cost."""

from __future__ import annotations

from batchscope.hardware.cache import cache_path, load_or_measure, machine_key
from batchscope.hardware.microbench import measure
from batchscope.hardware.types import Ceilings

__all__ = ["Ceilings", "cache_path", "load_or_measure", "machine_key", "measure"]
