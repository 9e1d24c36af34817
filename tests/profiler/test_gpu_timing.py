"""The timing pass on a GPU with NVML sampling (issue 15, bug 2), without a GPU.

The NVML power window is a requirement of its own: the timed steps span at least
``NVML_WINDOW_MIN_S`` even past the 5,000-step cap, while the adaptive rule and a user's
``--min-time`` still decide everything else. A fake device stands in for the GPU: a step
queues ``kernel_s`` of work, the clock only moves on when the host launches or synchronises
(read through the engine's HostClock, as a CUDA backend's ``host_clock`` reads it).
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from batchscope.engine.clock import HostClock
from batchscope.hardware.nvml_sampler import NullSampler
from batchscope.hardware.nvml_window import NvmlWindow
from batchscope.profiler import timing
from batchscope.profiler.measurement import (
    NVML_WINDOW_MIN_S,
    TimedSteps,
    nvml_samples,
    record_timing,
    timing_for,
)
from batchscope.profiler.memory import MemoryReading
from batchscope.profiler.timing import MEASURE_MAX_STEPS, TimingConfig, time_steps
from batchscope.records import BatchResult, PeakMemoryMethod, Status, StoppedBy
from batchscope.records.codec import to_builtins

CUDA = torch.device("cuda")  # only its type is read: nothing here touches CUDA
CPU = torch.device("cpu")
FAST_KERNEL_S = 50e-6  # an MLP at batch 1 on a GPU


class FakeGpu:
    """A device queue and the host clock: ``launch`` costs the host ``launch_s`` and queues
    a kernel; ``sync`` waits for the queue."""

    def __init__(self, kernel_s: list[float], launch_s: float = 5e-6) -> None:
        self.now = 0.0
        self.device_free_at = 0.0
        self.kernel_s = kernel_s
        self.launch_s = launch_s
        self.launches = 0
        self.syncs = 0

    def perf_counter(self) -> float:
        return self.now

    def launch(self) -> None:
        self.now += self.launch_s
        start = max(self.now, self.device_free_at)
        self.device_free_at = start + self.kernel_s[self.launches % len(self.kernel_s)]
        self.launches += 1

    def sync(self) -> None:
        self.syncs += 1
        self.now = max(self.now, self.device_free_at)


def _time_on_gpu(config: TimingConfig,
                 kernel_s: list[float]) -> tuple[timing.LatencyStats, list[float]]:
    gpu = FakeGpu(kernel_s)
    stats, samples, _ = time_steps(gpu.launch, HostClock(gpu.sync, gpu.perf_counter), config)
    return stats, samples


def _measured_s(stats: timing.LatencyStats, samples: list[float]) -> float:
    return sum(samples) * stats.block_steps


def test_the_nvml_window_runs_past_the_step_cap() -> None:
    # 50 µs steps: the 5,000-step cap comes after 0.25 s, a quarter of the power window
    config = timing_for(CUDA, TimingConfig())
    stats, samples = _time_on_gpu(config, [FAST_KERNEL_S])
    assert _measured_s(stats, samples) >= NVML_WINDOW_MIN_S
    assert stats.measured_s is not None and stats.measured_s >= NVML_WINDOW_MIN_S
    assert stats.n > MEASURE_MAX_STEPS
    assert stats.median == pytest.approx(FAST_KERNEL_S, rel=0.01)  # the device's time
    # the median was pinned long before: the window, not the stop rule, ran it this long
    assert stats.stopped_by == StoppedBy.NVML_WINDOW


def test_the_window_also_outlasts_a_short_ceiling() -> None:
    # a noisy step never pins its median; its ceiling (0.3 s) is under the window
    config = timing_for(CUDA, TimingConfig(measure_max_s=0.3))
    stats, samples = _time_on_gpu(config, [1e-3, 4e-3])
    assert NVML_WINDOW_MIN_S <= _measured_s(stats, samples) < NVML_WINDOW_MIN_S + 0.01
    assert stats.stopped_by == StoppedBy.NVML_WINDOW


def test_min_time_still_governs_with_nvml_on() -> None:
    # --min-time 3: three seconds of 50 µs steps (60,000 of them), not the window's one
    config = timing_for(CUDA, TimingConfig.fixed(3.0))
    assert (config.measure_min_s, config.measure_max_s) == (3.0, 3.0)
    stats, samples = _time_on_gpu(config, [FAST_KERNEL_S])
    assert 3.0 <= _measured_s(stats, samples) < 3.0 + 0.01
    assert stats.stopped_by == StoppedBy.MIN_TIME


def test_adaptive_timing_stays_adaptive_with_nvml_on() -> None:
    given = TimingConfig(measure_max_s=4.0)
    config = timing_for(CUDA, given)
    # the rule is the caller's: only the window is added
    assert dataclasses.replace(config, window_min_s=0.0) == given
    assert config.window_min_s == NVML_WINDOW_MIN_S and not config.is_fixed
    # steady 2 ms steps: the median is pinned at once; the window keeps them going to 1 s
    stats, samples = _time_on_gpu(config, [2e-3])
    assert NVML_WINDOW_MIN_S <= _measured_s(stats, samples) < NVML_WINDOW_MIN_S + 0.01
    assert stats.stopped_by == StoppedBy.NVML_WINDOW
    # a 4x spread never pins it: the adaptive ceiling, past the window, decides
    stats, samples = _time_on_gpu(config, [1e-3, 4e-3])
    assert 4.0 <= _measured_s(stats, samples) < 4.0 + 0.01
    assert stats.stopped_by == StoppedBy.MAX_TIME


def test_the_stop_rule_alone_decides_without_nvml() -> None:
    given = TimingConfig()
    assert timing_for(CPU, given) is given
    # CUDA without NVML (a null sampler saying why): no power window to wait for
    no_nvml = NullSampler("pynvml is not installed")
    assert not nvml_samples(CUDA, no_nvml) and nvml_samples(CUDA, None)
    assert timing_for(CUDA, given, no_nvml) is given
    stats, samples = _time_on_gpu(given, [2e-3])
    assert _measured_s(stats, samples) < 0.1
    assert stats.stopped_by == StoppedBy.MEDIAN_CI


def test_what_governed_the_window_lands_in_the_result() -> None:
    stats = timing.latency_stats([1e-3] * 5, block_steps=20, measured_s=1.02,
                                 stopped_by=StoppedBy.NVML_WINDOW)
    result = record_timing(BatchResult(4, Status.OK), TimedSteps(
        stats, MemoryReading(1, 0, PeakMemoryMethod.CUDA_MAX_ALLOCATED),
        NvmlWindow(duration_s=1.02)))
    latency = to_builtins(result)["latency_s"]
    assert latency["stopped_by"] == "nvml_window" and latency["measured_s"] == 1.02
