"""Timing pass: warm-up, then repeated steps for a minimum time, no profiler attached."""

from __future__ import annotations

import gc
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from batchscope.records import LatencyStats

# Warm-up until both hold: caches, allocator pools and oneDNN/cuDNN kernel choices are keyed
# on shape, so each batch size warms up anew.
WARMUP_MIN_STEPS = 2
WARMUP_MIN_S = 0.2
# Measure until both hold: a second of steps puts the median's noise well under the ±5%
# that the timing-fidelity benchmark checks against torch.utils.benchmark.
MEASURE_MIN_STEPS = 5
MEASURE_MIN_S = 1.0
# Fast steps (an MLP at batch 1 takes ~50 µs) would otherwise collect ~20k samples.
MEASURE_MAX_STEPS = 5000


@dataclass
class TimingConfig:
    """How long to warm up and measure at each batch size."""

    warmup_min_steps: int = WARMUP_MIN_STEPS
    warmup_min_s: float = WARMUP_MIN_S
    measure_min_steps: int = MEASURE_MIN_STEPS
    measure_min_s: float = MEASURE_MIN_S
    measure_max_steps: int = MEASURE_MAX_STEPS


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_stats(samples_s: list[float]) -> LatencyStats:
    """Median, quartiles, count, min and max of step latencies."""
    values = sorted(samples_s)
    return LatencyStats(
        median=statistics.median(values),
        p25=quantile(values, 0.25),
        p75=quantile(values, 0.75),
        n=len(values),
        min=values[0],
        max=values[-1],
    )


class Monitor(Protocol):
    """Something that observes the measured steps (the NVML sampler)."""

    def start(self) -> None: ...
    def stop(self) -> Any: ...


def time_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    config: TimingConfig | None = None,
    monitor: Monitor | None = None,
) -> tuple[LatencyStats, list[float], Any]:
    """Warm up, then time ``step`` repeatedly; return the statistics, raw samples and what
    ``monitor`` observed over the measured steps (None without one).

    Each sample is one step, the device synchronised before the clock stops. Garbage
    collection is paused while measuring, as :mod:`timeit` (and so
    ``torch.utils.benchmark.Timer``) does, so a collection does not land in one step.

    Example:
        >>> stats, _, _ = time_steps(lambda: sum(range(100)), lambda: None)
        >>> stats.n >= MEASURE_MIN_STEPS
        True
    """
    config = config or TimingConfig()
    clock = time.perf_counter
    start = clock()
    steps = 0
    while steps < config.warmup_min_steps or clock() - start < config.warmup_min_s:
        step()
        sync()
        steps += 1
    samples: list[float] = []
    gc.collect()
    gc_was_enabled = gc.isenabled()
    gc.disable()
    observed = None
    if monitor is not None:
        monitor.start()
    try:
        begin = clock()
        while len(samples) < config.measure_max_steps and (
            len(samples) < config.measure_min_steps or clock() - begin < config.measure_min_s
        ):
            t0 = clock()
            step()
            sync()
            samples.append(clock() - t0)
    finally:
        if monitor is not None:
            observed = monitor.stop()
        if gc_was_enabled:
            gc.enable()
    return latency_stats(samples), samples, observed
