"""A measured figure's 95% interval: the noise model every decision reads.

A timing pass gives its median step with a distribution-free 95% interval from its own
samples (``LatencyStats.median_low``/``median_high``). A shared machine also drifts between
timing passes, which one pass cannot see: the interval is widened by an *allowance* for it,
the drift the run measured of itself (``run.drift``), never below :data:`DRIFT_FLOOR`
(classifiers/uncertainty.py). Here because the plan's stop rules, below the classifiers,
read these intervals too.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence

from batchscope.records.interval import ControlTiming, DriftControl, Interval
from batchscope.records.measurement import BatchResult, LatencyStats

# The least drift every interval allows for, whatever was measured: a 2-core VM's speed
# moves ±5% from one second to the next (docs/benchmarks.md table 1). Also the whole
# allowance where nothing was timed twice (a trace, --no-rounds, and the sequential
# figures read during the sweep, before its rounds).
DRIFT_FLOOR = 0.05

# The smallest exposed all-reduce time the DDP hook's stamps resolve: two host-clock reads
# on two threads (the hook's, and the all-reduce's completion callback). A sample below it
# counts as 0, and an interval never ends below it: "< 1 µs", never a bare 0.
STAMP_RESOLUTION_S = 1e-6


def latency_interval(stats: LatencyStats, allowance: float = DRIFT_FLOOR,
                     control: ControlTiming | None = None) -> Interval:
    """The median step's 95% interval: the pass's own (the median alone for a report
    written before intervals) widened by ``allowance`` both ways. A size the control timed
    again spans both passes' intervals, widened by :data:`DRIFT_FLOOR` only: its own two
    timings show how far it moves.

    Example:
        >>> band = latency_interval(LatencyStats(0.010, 0.009, 0.011, 50, median_low=0.0098,
        ...                                      median_high=0.0103), 0.05)
        >>> round(band.low, 6), round(band.high, 6)
        (0.009333, 0.010815)
    """
    low = stats.median_low if stats.median_low is not None else stats.median
    high = stats.median_high if stats.median_high is not None else stats.median
    if control is not None:
        return Interval(min(low, stats.median, control.control_low_s),
                        max(high, stats.median, control.control_high_s)).widened(DRIFT_FLOOR)
    return Interval(min(low, stats.median), max(high, stats.median)).widened(allowance)


def throughput_interval(result: BatchResult, allowance: float = DRIFT_FLOOR) -> Interval | None:
    """The throughput's 95% interval: the assembled one where the result has it, else from
    its latency with ``allowance`` (a result during the sweep); None when not measured."""
    if result.throughput_interval_per_s is not None:
        return result.throughput_interval_per_s
    if result.latency_s is None or not result.throughput_per_s or result.latency_s.median <= 0:
        return None
    units_per_step = result.throughput_per_s * result.latency_s.median
    return latency_interval(result.latency_s, allowance).reciprocal(units_per_step)


def drift_control(timings: list[ControlTiming], seconds_apart: float) -> DriftControl | None:
    """The control's record from its timings, the reference's first; None without any. On
    ranks, its ``communication_drift`` is the median of the timings' communication changes.

    Example:
        >>> t = ControlTiming(1, 0.010, 0.011, 0.0105, 0.0115)
        >>> round(drift_control([t], 12.0).drift, 6)
        0.1
    """
    if not timings:
        return None
    ref = timings[0]
    # A size whose two timings differ by their page faults measured two allocators, not a
    # drift: it spans both timings itself, and widens nothing else.
    machine = [t.change for t in timings if not t.allocator_change()]
    drift = statistics.median(machine) if machine else 0.0
    changes = [c for c in (t.communication_change for t in timings) if c is not None]
    return DriftControl(ref.batch_size, ref.first_latency_s, ref.control_latency_s,
                        seconds_apart, drift, list(timings),
                        communication_drift=statistics.median(changes) if changes else None)


def control_timing(batch_size: int, first: LatencyStats, control: LatencyStats,
                   first_communication_share: float | None = None,
                   control_communication_share: float | None = None,
                   first_page_faults_per_step: float | None = None,
                   control_page_faults_per_step: float | None = None) -> ControlTiming:
    """One size's control timing from its two timing passes (on ranks, with each pass's
    communication share; on a CPU, with each pass's page faults per step)."""
    return ControlTiming(batch_size, first.median, control.median,
                         control.median_low if control.median_low is not None else control.median,
                         control.median_high if control.median_high is not None
                         else control.median,
                         first_communication_share, control_communication_share,
                         first_page_faults_per_step, control_page_faults_per_step)


def communication_shares(exposed_s: Sequence[float], step_s: Sequence[float],
                         resolution_s: float = STAMP_RESOLUTION_S) -> list[float]:
    """Each timed step's exposed all-reduce over the step (paired samples), an exposed time
    below ``resolution_s`` counted as 0 and each share at most 1.

    Example:
        >>> communication_shares([3e-7, 0.002, 0.05], [0.01, 0.01, 0.04])
        [0.0, 0.2, 1.0]
    """
    n = min(len(exposed_s), len(step_s))
    exposed = [x if x >= resolution_s else 0.0 for x in exposed_s[:n]]
    return [min(e / s, 1.0) if s > 0 else 0.0 for e, s in zip(exposed, step_s[:n])]


def communication_share(result: BatchResult) -> float | None:
    """The median of ``result``'s per-step communication shares (None without samples):
    what the sweep's control compares between two launches of the ranks."""
    shares = communication_shares(result.communication_exposed_samples_s,
                                  result.communication_step_samples_s)
    return statistics.median(shares) if shares else None
