"""What the sweep's worker and ``watch`` both do around the timed steps of one batch size.

The device's synchronisation, its NVML sampler, and how a timing result lands in a
:class:`~batchscope.records.BatchResult` (latency, throughput, peak memory, NVML window,
energy per unit, page faults) live here once, so the two ways in measure alike.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import torch

from batchscope.hardware.nvml_sampler import NullSampler, NvmlSampler, make_sampler
from batchscope.hardware.nvml_window import NvmlWindow, energy_per_unit_j
from batchscope.profiler.memory import MemoryReading, PageFaults
from batchscope.profiler.timing import Monitors, TimingConfig
from batchscope.records import BatchResult, Flag, FlagKind, LatencyStats

# Power readings average over ~1 s on recent GPUs and the energy counter ticks slowly: while
# NVML samples, the timed steps of a batch size last at least this long (TimingConfig's
# window_min_s: past the step cap and the time ceiling, on top of the stop rule).
NVML_WINDOW_MIN_S = 1.0


def device_sync(device: torch.device) -> Callable[[], None]:
    """A function that waits for the device's queued work (nothing to wait for on the CPU)."""
    if device.type == "cuda":
        return lambda: torch.cuda.synchronize(device)
    return lambda: None


def cuda_identity(device: torch.device) -> tuple[int, str | None]:
    """CUDA index and the UUID torch reports, for the NVML handle (0, None on the CPU)."""
    if device.type != "cuda":
        return 0, None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return index, str(torch.cuda.get_device_properties(index).uuid)


def device_sampler(device: torch.device) -> NvmlSampler | NullSampler:
    """The NVML sampler of ``device`` (a null one, saying why, off CUDA). Never raises."""
    return make_sampler(device.type, *cuda_identity(device))


def nvml_samples(device: torch.device, sampler: NvmlSampler | NullSampler | None) -> bool:
    """Whether NVML samples the timed steps: on CUDA, unless ``sampler`` is a null one
    (no NVML here); None stands for the sampler :func:`device_sampler` would make."""
    return device.type == "cuda" and not isinstance(sampler, NullSampler)


def timing_for(device: torch.device, timing: TimingConfig,
               sampler: NvmlSampler | NullSampler | None = None) -> TimingConfig:
    """The timing a worker on ``device`` uses: while NVML samples, the timed steps span at
    least :data:`NVML_WINDOW_MIN_S` (``window_min_s``); the stop rule is the caller's own,
    adaptive or a fixed ``--min-time``, and still decides when that window is shorter.

    Returns a new config (``timing`` itself where NVML does not sample); ``timing`` is left
    as it was.

    Example:
        >>> on_gpu = timing_for(torch.device("cuda"), TimingConfig.fixed(3.0))
        >>> on_gpu.window_min_s, on_gpu.measure_min_s, on_gpu.measure_max_s
        (1.0, 3.0, 3.0)
    """
    if not nvml_samples(device, sampler):
        return timing
    return dataclasses.replace(timing, window_min_s=max(timing.window_min_s, NVML_WINDOW_MIN_S))


def step_monitors(device: torch.device, sampler: NvmlSampler | NullSampler) -> Monitors:
    """What observes the timed steps: the NVML sampler, and on the CPU the minor page
    faults (host page faults only matter to a step that runs on the host). Its ``stop()``
    gives (NVML window, page faults)."""
    return Monitors(sampler, PageFaults() if device.type == "cpu" else None)


def record_timing(result: BatchResult, stats: LatencyStats, memory: MemoryReading,
                  window: NvmlWindow, page_faults: int | None, units_per_row: int = 1) -> None:
    """Store what the timing pass measured in ``result``: latency and throughput (units a
    second: ``units_per_row`` per row, UNITS_PER_ROW), peak memory, the NVML window of the
    timed steps with energy per unit (and a flag when the GPU throttled), and minor page
    faults per step (CPU)."""
    result.latency_s = stats
    result.throughput_per_s = result.batch_size * units_per_row / stats.median
    result.peak_memory_bytes = memory.peak_bytes
    result.baseline_memory_bytes = memory.baseline_bytes
    result.peak_memory_method = memory.method
    result.nvml = window
    result.energy_per_unit_j = energy_per_unit_j(window, result.batch_size * units_per_row,
                                                 stats.n)
    reasons = window.throttled_by()
    if reasons:
        result.flags.append(Flag(FlagKind.GPU_THROTTLED, result.batch_size,
                                 values={"reasons": list(reasons)}))
    if page_faults is not None:
        result.page_faults_per_step = page_faults / stats.n
