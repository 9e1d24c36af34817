"""What a timing pass yields, and the one place it lands in a result (``BatchResult``).

The sweep's worker, a distributed sweep's ranks and ``watch`` all time their steps through
the engine (:mod:`batchscope.engine.timer`) on a device backend
(:mod:`batchscope.profiler.device`), which hands back a :class:`TimedSteps`;
:func:`record_timing` alone turns it into a result's timed part (latency, throughput, peak
memory, NVML window, energy per unit, the throttling flag, page faults), so the three ways in
measure and report alike.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from batchscope.hardware.nvml_sampler import NullSampler, NvmlSampler
from batchscope.hardware.nvml_window import NvmlWindow, energy_per_unit_j
from batchscope.profiler.memory import MemoryReading
from batchscope.profiler.timing import TimingConfig
from batchscope.records import BatchResult, Flag, LatencyStats
from batchscope.records.flag_payloads import GpuThrottled

if TYPE_CHECKING:
    import torch

# Power readings average over ~1 s on recent GPUs and the energy counter ticks slowly: while
# NVML samples, the timed steps of a batch size last at least this long (TimingConfig's
# window_min_s: past the step cap and the time ceiling, on top of the stop rule).
NVML_WINDOW_MIN_S = 1.0


@dataclass(frozen=True)
class TimedSteps:
    """What one timing pass measured: the step statistics, the peak memory over its warm-up
    and timed steps, and what its monitors saw over the timed steps (the NVML window, the
    CPU's minor page faults; None where none watched)."""

    latency: LatencyStats
    memory: MemoryReading
    nvml: NvmlWindow | None = None
    page_faults: int | None = None


def nvml_samples(device: torch.device, sampler: NvmlSampler | NullSampler | None) -> bool:
    """Whether NVML samples the timed steps: on CUDA, unless ``sampler`` is a null one
    (no NVML here); None stands for the sampler the device's backend would make."""
    return device.type == "cuda" and not isinstance(sampler, NullSampler)


def timing_for(device: torch.device, timing: TimingConfig,
               sampler: NvmlSampler | NullSampler | None = None) -> TimingConfig:
    """The timing a worker on ``device`` uses: while NVML samples, the timed steps span at
    least :data:`NVML_WINDOW_MIN_S` (``window_min_s``); the stop rule is the caller's own,
    adaptive or a fixed ``--min-time``, and still decides when that window is shorter.

    Returns a new config (``timing`` itself where NVML does not sample); ``timing`` is left
    as it was.

    Example:
        >>> import torch
        >>> on_gpu = timing_for(torch.device("cuda"), TimingConfig.fixed(3.0))
        >>> on_gpu.window_min_s, on_gpu.measure_min_s, on_gpu.measure_max_s
        (1.0, 3.0, 3.0)
    """
    if not nvml_samples(device, sampler):
        return timing
    return dataclasses.replace(timing, window_min_s=max(timing.window_min_s, NVML_WINDOW_MIN_S))


def record_timing(result: BatchResult, timed: TimedSteps, units_per_row: int = 1) -> BatchResult:
    """A new record: ``result`` with what the timing pass measured: latency and throughput
    (units a second: ``units_per_row`` per row, UNITS_PER_ROW), peak memory, the NVML window
    of the timed steps with energy per unit (and a flag when the GPU throttled), and minor
    page faults per step (CPU). The only writer of these fields."""
    stats, memory, window = timed.latency, timed.memory, timed.nvml
    nvml, energy_j = result.nvml, result.energy_per_unit_j
    flags = list(result.flags)
    if window is not None:
        nvml = window
        energy_j = energy_per_unit_j(window, result.batch_size * units_per_row, stats.n)
        reasons = window.throttled_by()
        if reasons:
            flags.append(Flag.of(GpuThrottled(reasons=list(reasons)), result.batch_size))
    page_faults_per_step = (result.page_faults_per_step if timed.page_faults is None
                            else timed.page_faults / stats.n)
    return dataclasses.replace(
        result,
        latency_s=stats,
        throughput_per_s=result.batch_size * units_per_row / stats.median,
        peak_memory_bytes=memory.peak_bytes,
        baseline_memory_bytes=memory.baseline_bytes,
        peak_memory_method=memory.method,
        nvml=nvml,
        energy_per_unit_j=energy_j,
        flags=flags,
        page_faults_per_step=page_faults_per_step,
    )
