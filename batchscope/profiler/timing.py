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

from batchscope.records import LatencyStats, StoppedBy

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
# ...except that once the time ceiling below has passed (adaptive timing only), this many do:
# three steps of 0.4 s or more already span it, and each further one of the decode sample's
# 2.5-5 s steps at batch 512-1024 costs more than all its steps up to batch 32.
LONG_MIN_STEPS = 3
# ...then stop once the median is pinned down: its 95% confidence interval (from order
# statistics, no assumption on the distribution) within ±3% of it. Well inside the ±5% that
# the timing-fidelity benchmark checks against torch.utils.benchmark.Timer.
MEDIAN_CI_REL = 0.03
# ...or after this long, whatever the spread (the old fixed measuring time).
MEASURE_MAX_S = 1.0
# Fast steps (an MLP at batch 1 takes ~50 µs) would otherwise collect ~20k samples.
MEASURE_MAX_STEPS = 5000
# What ended the timed steps (LatencyStats.stopped_by, a records.StoppedBy): the median
# known to ±median_ci_rel; the time ceiling (adaptive) or the fixed time (--min-time); the
# step cap; watch's count of samples; or the window a monitor needs (NVML:
# measurement.NVML_WINDOW_MIN_S), when one of the others came first.
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

    ``window_min_s`` is a separate requirement, not part of that rule: the timed steps span
    at least this long whatever stopped them, past ``measure_max_s`` and
    ``measure_max_steps`` if need be (the NVML power window on a GPU; 0 elsewhere).
    """

    warmup_min_steps: int = WARMUP_MIN_STEPS
    warmup_min_s: float = WARMUP_MIN_S
    measure_min_steps: int = MEASURE_MIN_STEPS
    measure_min_s: float = MEASURE_MIN_S
    measure_max_s: float = MEASURE_MAX_S
    median_ci_rel: float = MEDIAN_CI_REL
    measure_max_steps: int = MEASURE_MAX_STEPS
    block_min_s: float = BLOCK_MIN_S
    window_min_s: float = 0.0

    @classmethod
    def fixed(cls, seconds: float) -> TimingConfig:
        """Measure for ``seconds`` (and at least MEASURE_MIN_STEPS samples), not adaptively:
        the step cap, a guard of the adaptive rule, does not cut a time the user asked for."""
        return cls(measure_min_s=seconds, measure_max_s=seconds)

    @property
    def is_fixed(self) -> bool:
        """True for a fixed measuring time (:meth:`fixed`, ``--min-time``)."""
        return self.measure_min_s >= self.measure_max_s


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


def latency_stats(samples_s: list[float], block_steps: int = 1, measured_s: float | None = None,
                  stopped_by: StoppedBy = StoppedBy.NONE) -> LatencyStats:
    """Median, quartiles, min and max of per-step latencies, each sample the mean step of a
    block of ``block_steps`` steps; ``n`` counts the steps. ``measured_s`` (the time the
    timed steps spanned) and ``stopped_by`` are passed through."""
    values = sorted(samples_s)
    return LatencyStats(
        median=statistics.median(values),
        p25=quantile(values, 0.25),
        p75=quantile(values, 0.75),
        n=len(values) * block_steps,
        min=values[0],
        max=values[-1],
        block_steps=block_steps,
        measured_s=measured_s,
        stopped_by=stopped_by,
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
    ``measure_min_steps`` samples, or :data:`LONG_MIN_STEPS` once ``measure_max_s`` has
    passed; a fixed time has neither the step cap nor that exception). Whatever stops it, the
    timed steps span at least ``window_min_s`` (the NVML window), past the time ceiling and
    the step cap if need be. The statistics record how long the steps ran (``measured_s``)
    and what stopped them (``stopped_by``: :attr:`StoppedBy.NVML_WINDOW` when the rule was met
    before the window was).

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
    rule = StoppedBy.NONE  # the stop rule met, NONE while it is not
    stopped_by, elapsed_s = StoppedBy.NONE, 0.0
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
            elapsed_s = t1 - begin
            if len(samples) < _min_samples(config, elapsed_s):
                continue
            met_now = rule == StoppedBy.NONE
            if met_now:
                rule = _stop_rule(config, samples, block, elapsed_s, next_check)
                if (rule == StoppedBy.NONE and elapsed_s >= config.measure_min_s
                        and len(samples) >= next_check):
                    next_check = math.ceil(len(samples) * _CHECK_GROWTH)
            if rule != StoppedBy.NONE and elapsed_s >= config.window_min_s:
                stopped_by = rule if met_now else StoppedBy.NVML_WINDOW
                break
    finally:
        if monitor is not None:
            observed = monitor.stop()
        if gc_was_enabled:
            gc.enable()
    stats = latency_stats(samples, block, measured_s=elapsed_s, stopped_by=stopped_by)
    stats.first_step_s = warmup_s[0]  # a compiled model's compile at this shape is in it
    return stats, samples, observed


def _min_samples(config: TimingConfig, elapsed_s: float) -> int:
    """The fewest samples the stop rule may be judged on, ``elapsed_s`` seconds in."""
    if not config.is_fixed and elapsed_s >= config.measure_max_s:
        return min(config.measure_min_steps, LONG_MIN_STEPS)
    return config.measure_min_steps


def _stop_rule(config: TimingConfig, samples: list[float], block: int, elapsed_s: float,
               next_check: int) -> StoppedBy:
    """The stop rule of ``config`` that ``samples`` (at least :func:`_min_samples` of them,
    ``elapsed_s`` seconds in) meet; :attr:`StoppedBy.NONE` for none yet. The
    median's interval is only sorted out once ``next_check`` samples are in."""
    if elapsed_s >= config.measure_max_s:
        return StoppedBy.MIN_TIME if config.is_fixed else StoppedBy.MAX_TIME
    if not config.is_fixed and len(samples) * block >= config.measure_max_steps:
        return StoppedBy.MAX_STEPS
    if elapsed_s >= config.measure_min_s and len(samples) >= next_check \
            and median_ci_rel(sorted(samples)) <= config.median_ci_rel:
        return StoppedBy.MEDIAN_CI
    return StoppedBy.NONE
