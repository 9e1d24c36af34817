"""Timing pass: warm-up, then repeated steps until the median is known, no profiler attached.

A fast step is timed in blocks of several steps (one clock read and one device sync per
block), as ``torch.utils.benchmark.Timer`` does: a step of a few tens of microseconds is
right-skewed (most steps fast, every few an allocator or scheduler hiccup), and the median of
single steps then sits 10-20% under what a loop of them sustains (the MLP sample at batch 1:
median 26.8 µs, mean 29.8 µs; docs/benchmarks.md). The median of block means is what the
loop sustains and still shrugs off a block hit by a one-off interruption.
"""

from __future__ import annotations

import gc
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from batchscope.records import LatencyStats

# Warm-up until both hold: caches, allocator pools and oneDNN/cuDNN kernel choices are keyed
# on shape, so each batch size warms up anew. The first step at a new shape carries that
# cost (up to 2x on the samples); the second already runs at its usual speed, and the median
# of the timed steps would shrug off one more slow step anyway (docs/benchmarks.md).
WARMUP_MIN_STEPS = 1
WARMUP_MIN_S = 0.02
# Steps shorter than this are timed in blocks lasting about this long (Timer's floor for
# blocks when it measures for 1 s); a step this long or longer is timed alone.
BLOCK_MIN_S = 0.001
# Measure at least this many samples (single steps or blocks) for this long. Not longer: a
# 2-core VM drifts by ±10% over seconds, which no window short of many seconds averages out
# (0.2 s, Timer's default, left the MLP's round-to-round spread against Timer as wide as
# 0.05 s did), and 0.2 s at each of 11 batch sizes made the MLP's whole run slower than a
# hand-written profiled sweep (docs/benchmarks.md).
MEASURE_MIN_STEPS = 5
MEASURE_MIN_S = 0.05
# ...then stop once the median is pinned down: its 95% confidence interval (from order
# statistics, no assumption on the distribution) within ±3% of it. Well inside the ±5% that
# the timing-fidelity benchmark checks against torch.utils.benchmark.Timer.
MEDIAN_CI_REL = 0.03
# ...or after this long, whatever the spread (the old fixed measuring time).
MEASURE_MAX_S = 1.0
# Fast steps (an MLP at batch 1 takes ~50 µs) would otherwise collect ~20k samples.
MEASURE_MAX_STEPS = 5000
# z of a two-sided 95% interval; the median's interval spans ranks n/2 ± z·sqrt(n)/2.
_Z95 = 1.96
# Re-check the stop rule after the sample count grows by this factor (sorting is O(n log n)).
_CHECK_GROWTH = 1.25


@dataclass
class TimingConfig:
    """How long to warm up and measure at each batch size.

    The default is adaptive: between ``measure_min_s`` and ``measure_max_s`` of timed steps,
    stopping once the median's 95% confidence interval is within ``median_ci_rel`` of it.
    :meth:`fixed` measures for a fixed time instead (``--min-time``).
    """

    warmup_min_steps: int = WARMUP_MIN_STEPS
    warmup_min_s: float = WARMUP_MIN_S
    measure_min_steps: int = MEASURE_MIN_STEPS
    measure_min_s: float = MEASURE_MIN_S
    measure_max_s: float = MEASURE_MAX_S
    median_ci_rel: float = MEDIAN_CI_REL
    measure_max_steps: int = MEASURE_MAX_STEPS
    block_min_s: float = BLOCK_MIN_S

    @classmethod
    def fixed(cls, seconds: float) -> TimingConfig:
        """Measure for ``seconds`` (and at least MEASURE_MIN_STEPS steps), not adaptively."""
        return cls(measure_min_s=seconds, measure_max_s=seconds)


def median_ci_rel(sorted_values: list[float]) -> float:
    """Half-width of the distribution-free 95% confidence interval of the median, relative
    to the median: the order statistics at ranks n/2 ± 1.96·sqrt(n)/2 (inf below 2 values).

    Example:
        >>> round(median_ci_rel([1.0, 1.0, 1.1, 1.2, 1.2]), 3)  # ranks 0..4: (1.2 - 1.0) / 2 / 1.1
        0.091
    """
    n = len(sorted_values)
    if n < 2:
        return math.inf
    half = _Z95 * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    median = statistics.median(sorted_values)
    if median <= 0:
        return math.inf
    return (sorted_values[hi] - sorted_values[lo]) / 2 / median


def quantile(sorted_values: list[float], q: float) -> float:
    """Linear-interpolated quantile of already sorted values (numpy's default method)."""
    if not sorted_values:
        raise ValueError("no values")
    pos = (len(sorted_values) - 1) * q
    lo = int(pos)
    hi = min(lo + 1, len(sorted_values) - 1)
    return sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * (pos - lo)


def latency_stats(samples_s: list[float], block_steps: int = 1) -> LatencyStats:
    """Median, quartiles, min and max of per-step latencies, each sample the mean step of a
    block of ``block_steps`` steps; ``n`` counts the steps."""
    values = sorted(samples_s)
    return LatencyStats(
        median=statistics.median(values),
        p25=quantile(values, 0.25),
        p75=quantile(values, 0.75),
        n=len(values) * block_steps,
        min=values[0],
        max=values[-1],
        block_steps=block_steps,
    )


def block_steps_for(step_s: float, block_min_s: float) -> int:
    """Steps per timed block: enough that a block lasts ``block_min_s``, 1 for slower steps.

    Example:
        >>> block_steps_for(30e-6, 0.001), block_steps_for(0.002, 0.001)
        (34, 1)
    """
    if step_s <= 0:
        return 1
    return max(1, math.ceil(round(block_min_s / step_s, 6)))  # 0.001 / 1e-5 is 100.00000000000001


class Monitor(Protocol):
    """Something that observes the measured steps (the NVML sampler)."""

    def start(self) -> None: ...
    def stop(self) -> Any: ...


class Monitors:
    """Several monitors as one: started in order, stopped in reverse; ``stop`` returns what
    each observed, in the order given (None for a missing one)."""

    def __init__(self, *monitors: Monitor | None) -> None:
        self.monitors = monitors

    def start(self) -> None:
        for m in self.monitors:
            if m is not None:
                m.start()

    def stop(self) -> tuple[Any, ...]:
        seen = [m.stop() if m is not None else None for m in reversed(self.monitors)]
        return tuple(reversed(seen))


def time_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    config: TimingConfig | None = None,
    monitor: Monitor | None = None,
) -> tuple[LatencyStats, list[float], Any]:
    """Warm up, then time ``step`` repeatedly; return the statistics, the raw samples (mean
    step latency of each timed block) and what ``monitor`` observed over the measured steps
    (None without one).

    Steps shorter than ``block_min_s`` (judged on the warm-up's median step) are timed in
    blocks of :func:`block_steps_for` steps; the others one at a time. Measuring stops once
    at least ``measure_min_steps`` samples and ``measure_min_s`` seconds are in and the
    median's 95% confidence interval is within ``median_ci_rel`` of it, or after
    ``measure_max_s`` seconds, or at ``measure_max_steps`` steps (but never fewer than
    ``measure_min_steps`` samples).

    The device is synchronised before the clock stops. Garbage collection is paused while
    measuring, as :mod:`timeit` (and so ``torch.utils.benchmark.Timer``) does, so a
    collection does not land in one sample.

    Example:
        >>> stats, _, _ = time_steps(lambda: sum(range(100)), lambda: None)
        >>> stats.n >= MEASURE_MIN_STEPS * stats.block_steps
        True
    """
    config = config or TimingConfig()
    clock = time.perf_counter
    start = clock()
    warmup_s: list[float] = []
    while len(warmup_s) < config.warmup_min_steps or clock() - start < config.warmup_min_s:
        t0 = clock()
        step()
        sync()
        warmup_s.append(clock() - t0)
    # The later half of the warm-up: the first steps at a new shape are the slow ones.
    block = block_steps_for(statistics.median(warmup_s[len(warmup_s) // 2:]),
                            config.block_min_s)
    samples: list[float] = []
    # No gc.collect() first (timeit does none either): with torch loaded a full collection
    # takes ~75 ms, longer than measuring a small model's batch size.
    gc_was_enabled = gc.isenabled()
    gc.disable()
    observed = None
    if monitor is not None:
        monitor.start()
    try:
        begin = clock()
        next_check = config.measure_min_steps
        while True:
            t0 = clock()
            for _ in range(block):
                step()
            sync()
            t1 = clock()
            samples.append((t1 - t0) / block)
            if len(samples) < config.measure_min_steps:
                continue
            elapsed = t1 - begin
            if elapsed >= config.measure_max_s or len(samples) * block >= config.measure_max_steps:
                break
            if elapsed >= config.measure_min_s and len(samples) >= next_check:
                if median_ci_rel(sorted(samples)) <= config.median_ci_rel:
                    break
                next_check = math.ceil(len(samples) * _CHECK_GROWTH)
    finally:
        if monitor is not None:
            observed = monitor.stop()
        if gc_was_enabled:
            gc.enable()
    return latency_stats(samples, block), samples, observed
