"""Timing pass: warm-up, then repeated steps until the median is known, no profiler attached.

A fast step is timed in blocks of several steps (one clock read and one device sync per
block), as ``torch.utils.benchmark.Timer`` does: a step of a few tens of microseconds is
right-skewed (most steps fast, every few an allocator or scheduler hiccup), and the median of
single steps then sits 10-20% under what a loop of them sustains (the MLP sample at batch 1:
median 26.8 µs, mean 29.8 µs; docs/benchmarks.md). The median of block means is what the
loop sustains and still shrugs off a block hit by a one-off interruption.

The loop itself is the engine's (:func:`batchscope.engine.timer.sample`); this module holds
the pass's options (:class:`TimingConfig`, the user's ``--min-time``), the stop policy they
make (:meth:`TimingConfig.policy`) and the statistics of its samples (:func:`latency_stats`).
No torch here: the sweep's parent process reads :class:`TimingConfig`.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from batchscope.engine.clock import Clock
from batchscope.engine.policies import Adaptive, FixedTime, StopPolicy
from batchscope.engine.timer import Monitor, Warmup, block_for, sample, warm_up
from batchscope.records import LatencyStats, StoppedBy
from batchscope.stats import median_interval

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
# hand-written profiled sweep (docs/benchmarks.md). Once the time ceiling below has passed
# (adaptive timing only), policies.LONG_MIN_STEPS samples do.
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

    def policy(self) -> StopPolicy:
        """The stop policy these options make: :class:`~batchscope.engine.policies.FixedTime`
        for a fixed time (its end is ``measure_max_s``, and a ``measure_min_s`` past it adds
        nothing), else :class:`~batchscope.engine.policies.Adaptive`; ``window_min_s`` with
        either.

        Example:
            >>> TimingConfig.fixed(3.0).policy()
            FixedTime(seconds=3.0, min_samples=5, window_min_s=0.0)
        """
        if self.is_fixed:
            return FixedTime(self.measure_max_s, self.measure_min_steps, self.window_min_s)
        return Adaptive(self.measure_min_steps, self.measure_min_s, self.measure_max_s,
                        self.median_ci_rel, self.measure_max_steps, self.window_min_s)

    def warmup(self) -> Warmup:
        """The warm-up these options ask for."""
        return Warmup(self.warmup_min_steps, self.warmup_min_s)


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
    timed steps spanned) and ``stopped_by`` are passed through; the median's 95% interval is
    :func:`batchscope.stats.median_interval`'s."""
    values = sorted(samples_s)
    low, high = median_interval(values)
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
        median_low=low,
        median_high=high,
    )




def time_steps(
    step: Callable[[], Any],
    clock: Clock,
    config: TimingConfig | None = None,
    monitor: Monitor | None = None,
    *,
    policy: StopPolicy | None = None,
) -> tuple[LatencyStats, list[float], Any]:
    """Warm up, then time ``step`` repeatedly; return the statistics, the raw samples (mean
    step latency of each timed block) and what ``monitor`` observed over the measured steps
    (None without one).

    ``clock`` times the steps (the device's host clock, :attr:`DeviceBackend.host_clock
    <batchscope.profiler.device.DeviceBackend.host_clock>`: the device is synchronised before
    it stops). Steps shorter than ``block_min_s`` (judged on the warm-up's later half) are
    timed in blocks of :func:`~batchscope.engine.timer.block_steps_for` steps; the others
    one at a time. ``config``'s policy (:meth:`TimingConfig.policy`, or ``policy`` given
    beside it: the ranks' fixed count) decides when measuring stops: once at least
    ``measure_min_steps`` samples and ``measure_min_s`` seconds are in and the median's 95%
    confidence interval is within ``median_ci_rel`` of it, or after ``measure_max_s``
    seconds, or at ``measure_max_steps`` steps (but never fewer than ``measure_min_steps``
    samples, or :data:`~batchscope.engine.policies.LONG_MIN_STEPS` once ``measure_max_s``
    has passed; a fixed time has neither the step cap nor that exception). Whatever stops
    it, the timed steps span at least ``window_min_s`` (the NVML window), past the time
    ceiling and the step cap if need be. The statistics record how long the steps ran
    (``measured_s``) and what stopped them (``stopped_by``: :attr:`StoppedBy.NVML_WINDOW`
    when the rule was met before the window was).

    Garbage collection is paused while measuring, as :mod:`timeit` (and so
    ``torch.utils.benchmark.Timer``) does, so a collection does not land in one sample.

    Example:
        >>> from batchscope.engine.clock import HostClock
        >>> stats, _, _ = time_steps(lambda: sum(range(100)), HostClock())
        >>> stats.n >= MEASURE_MIN_STEPS * stats.block_steps
        True
    """
    config = config or TimingConfig()
    warmup_s = warm_up(step, clock, config.warmup())
    block = block_for(warmup_s, config.block_min_s)
    rule = config.policy() if policy is None else policy
    sampled, observed = sample(step, clock, rule, block, monitor=monitor, pause_gc=True)
    stats = latency_stats(sampled.samples_s, block, measured_s=sampled.measured_s,
                          stopped_by=sampled.stopped_by)
    # a compiled model's compile at this shape is in it
    stats.first_step_s = warmup_s[0] if warmup_s else None
    return stats, sampled.samples_s, observed
