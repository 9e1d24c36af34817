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
from batchscope.records import BatchResult, LatencyStats

# Power readings average over ~1 s on recent GPUs and the energy counter ticks slowly: the
# timed steps of a batch size on a GPU last at least this long.
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


def timing_for(device: torch.device, timing: TimingConfig) -> TimingConfig:
    """The timing a worker on ``device`` uses: on CUDA, at least the NVML window.

    Returns a new config (``timing`` itself on other devices); ``timing`` is left as it was.
    """
    if device.type != "cuda":
        return timing
    return dataclasses.replace(
        timing, measure_min_s=max(timing.measure_min_s, NVML_WINDOW_MIN_S),
        measure_max_s=max(timing.measure_max_s, NVML_WINDOW_MIN_S))


def step_monitors(device: torch.device, sampler: NvmlSampler | NullSampler) -> Monitors:
    """What observes the timed steps: the NVML sampler, and on the CPU the minor page
    faults (host page faults only matter to a step that runs on the host). Its ``stop()``
    gives (NVML window, page faults)."""
    return Monitors(sampler, PageFaults() if device.type == "cpu" else None)


def record_timing(result: BatchResult, stats: LatencyStats, memory: MemoryReading,
                  window: NvmlWindow, page_faults: int | None) -> None:
    """Store what the timing pass measured in ``result``: latency and throughput, peak
    memory, the NVML window of the timed steps with energy per unit (and a flag when the
    GPU throttled), and minor page faults per step (CPU)."""
    result.latency_s = stats
    result.throughput_per_s = result.batch_size / stats.median
    result.peak_memory_bytes = memory.peak_bytes
    result.baseline_memory_bytes = memory.baseline_bytes
    result.peak_memory_method = memory.method
    result.nvml = window.to_dict()
    result.energy_per_unit_j = energy_per_unit_j(window, result.batch_size, stats.n)
    warning = window.throttle_warning()
    if warning:
        result.flags.append(warning)
    if page_faults is not None:
        result.page_faults_per_step = page_faults / stats.n
