"""Peak memory of a batch size: the best honest measure each device offers.

On CUDA: ``torch.cuda.max_memory_allocated`` after a reset: every live tensor at the peak,
the model's weights and state as well as the batch's activations, but not what the caching
allocator reserves beyond them nor the CUDA context (~300-500 MB), which no tensor holds.
On the CPU there is no allocator counter, so we read the worker's peak resident set size
(``VmHWM``), reset before each batch size through ``/proc/self/clear_refs`` where Linux
allows it. That peak includes the interpreter, torch's libraries and the model: it is what
the machine must hold, not what the tensors alone need. The report names the method
(:class:`~batchscope.records.PeakMemoryMethod`; reports/view.py words each one).
"""

from __future__ import annotations

import resource
import sys
from dataclasses import dataclass
from pathlib import Path

import torch

from batchscope.records import PeakMemoryMethod

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


@dataclass
class MemoryReading:
    """Peak memory over a window and how it was measured."""

    peak_bytes: int | None
    baseline_bytes: int | None
    method: PeakMemoryMethod


def _status_kib(field: str) -> int | None:
    try:
        for line in _STATUS.read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _reset_rss_peak() -> bool:
    """Reset VmHWM to the current RSS (Linux >= 4.0); False where not allowed."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def available_bytes(device: torch.device) -> int | None:
    """Memory a new allocation could still get: CUDA free memory, or Linux MemAvailable."""
    if device.type == "cuda":
        free, _total = torch.cuda.mem_get_info(device)
        return int(free)
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


class PeakMemory:
    """Measure the peak memory of the code run between :meth:`start` and :meth:`stop`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device
        self._reset_ok = False
        self._baseline: int | None = None

    def start(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.reset_peak_memory_stats(self.device)
            self._baseline = torch.cuda.memory_allocated(self.device)
            return
        self._baseline = _status_kib("VmRSS")
        self._reset_ok = _reset_rss_peak()

    def stop(self) -> MemoryReading:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            return MemoryReading(
                peak_bytes=torch.cuda.max_memory_allocated(self.device),
                baseline_bytes=self._baseline,
                method=PeakMemoryMethod.CUDA_MAX_ALLOCATED,
            )
        peak = _status_kib("VmHWM")
        if peak is not None and self._reset_ok:
            return MemoryReading(peak, self._baseline, PeakMemoryMethod.WORKER_PEAK_RSS)
        if peak is not None:
            return MemoryReading(peak, self._baseline, PeakMemoryMethod.LIFETIME_PEAK_RSS)
        maxrss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        scale = 1 if sys.platform == "darwin" else 1024  # bytes on macOS, KiB on Linux
        return MemoryReading(maxrss * scale, self._baseline, PeakMemoryMethod.LIFETIME_MAXRSS)


def minor_page_faults() -> int | None:
    """Minor page faults of this process so far (None where getrusage does not count them)."""
    try:
        return int(resource.getrusage(resource.RUSAGE_SELF).ru_minflt)
    except (OSError, ValueError, AttributeError):
        return None


class PageFaults:
    """Minor page faults between :meth:`start` and :meth:`stop`: memory the process maps
    afresh and touches. On the CPU a step that faults in tens of MiB every step pays ~1 µs a
    page for it (docs/method.md)."""

    def __init__(self) -> None:
        self._start: int | None = None

    def start(self) -> None:
        self._start = minor_page_faults()

    def stop(self) -> int | None:
        end = minor_page_faults()
        if self._start is None or end is None:
            return None
        return end - self._start
