"""A measured figure's 95% interval: the noise model every decision reads.

A timing pass gives its median step with a distribution-free 95% interval from its own
samples (``LatencyStats.median_low``/``median_high``). A shared machine also drifts between
timing passes, which one pass cannot see: the interval is widened by an *allowance* for it,
the drift the sweep's own control measured (``run.drift``), never below :data:`DRIFT_FLOOR`
(classifiers/uncertainty.py). Here because the plan's stop rules, below the classifiers,
read these intervals too.
"""

from __future__ import annotations

from batchscope.records.interval import DriftControl, Interval
from batchscope.records.measurement import BatchResult, LatencyStats

# The least drift every interval allows for, whatever the control measured: the control is
# one pair of timings, and a 2-core VM's speed moves ±5% from one second to the next
# (docs/benchmarks.md table 1). Also the whole allowance where no control ran (watch, a
# trace, and the decisions made during the sweep, before its control).
DRIFT_FLOOR = 0.05


def latency_interval(stats: LatencyStats, allowance: float = DRIFT_FLOOR) -> Interval:
    """The median step's 95% interval: the pass's own (the median alone for a report
    written before intervals) widened by ``allowance`` both ways.

    Example:
        >>> band = latency_interval(LatencyStats(0.010, 0.009, 0.011, 50, median_low=0.0098,
        ...                                      median_high=0.0103), 0.05)
        >>> round(band.low, 6), round(band.high, 6)
        (0.009333, 0.010815)
    """
    low = stats.median_low if stats.median_low is not None else stats.median
    high = stats.median_high if stats.median_high is not None else stats.median
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


def drift_control(batch_size: int, first: LatencyStats, control: LatencyStats,
                  seconds_apart: float) -> DriftControl:
    """The control's record: the reference batch size's median step at its first timing and
    at its second.

    Example:
        >>> a = LatencyStats(0.010, 0.009, 0.011, 50)
        >>> drift_control(1, a, LatencyStats(0.011, 0.010, 0.012, 50), 12.0).drift
        0.09999999999999987
    """
    drift = abs(control.median / first.median - 1) if first.median > 0 else 0.0
    return DriftControl(batch_size, first.median, control.median, seconds_apart, drift)
