"""Every figure with its interval, and which batch sizes noise cannot tell apart.

A timing pass gives the median step with a 95% interval from its own samples
(``LatencyStats.median_low``/``median_high``, stats.median_interval). That is the noise
*inside* one pass; a shared VM also drifts 10-30% over minutes, which no single pass sees.
The sweep's decision rounds (``run.drift``: each size they timed, its plan timing against
its rounds' timing) measure that drift, and every interval of the run is widened by it,
never by less than :data:`DRIFT_FLOOR`: a latency interval is
``[median_low / (1 + a), median_high * (1 + a)]`` for the allowance ``a``, and a throughput's
its reciprocal.

Where no decision rounds ran (``watch``, ``--no-rounds``), the decisions between batch sizes
read these intervals (module :mod:`recommend`, the plan's plateau stop, the predicted stop;
a sweep's decisions read its rounds' paired shares, records/rounds.py): a batch size is
*equivalent* to the pick's rule when its
interval reaches the rule's bar from the bottom of the best's interval; the pick is the
smallest whose interval reaches the bar from the best's median. The pick's bar is the
stricter of the two, so a pick sits inside another run's set unless the run moved more than
its own noise.

Example:
    >>> from batchscope.records import Interval
    >>> equivalent_batch_sizes({1: (50.0, Interval(45.0, 56.0)), 2: (54.0, Interval(49.0, 60.0)),
    ...                         4: (58.0, Interval(52.0, 64.0))}, share=0.9)
    [1, 2, 4]
"""

from __future__ import annotations

import dataclasses
import math
import random
from collections.abc import Collection

from batchscope.classifiers.critical_batch import fit_knee
from batchscope.records import BatchResult, ControlTiming, DriftControl, Interval, Status
from batchscope.records.noise import DRIFT_FLOOR as DRIFT_FLOOR
from batchscope.records.noise import drift_control as drift_control
from batchscope.records.noise import latency_interval as latency_interval
from batchscope.records.noise import throughput_interval as throughput_interval
from batchscope.stats import bootstrap_interval, lognormal_draw, ratio_interval

# A throughput with its interval: (the median's figure, where it lies at 95%).
Figure = tuple[float, Interval]


def drift_allowance(drift: DriftControl | None) -> float:
    """The relative drift every interval of a run is widened by: the measured one, at least
    :data:`DRIFT_FLOOR`."""
    return max(drift.drift, DRIFT_FLOOR) if drift is not None else DRIFT_FLOOR


def with_intervals(result: BatchResult, allowance: float,
                   control: ControlTiming | None = None) -> BatchResult:
    """A copy of ``result`` with its latency and throughput intervals (a measured one);
    ``control``: its second timing (the rounds', or watch's repeat), whose interval it
    spans."""
    if result.latency_s is None or not result.throughput_per_s:
        return result
    latency = latency_interval(result.latency_s, allowance, control)
    units_per_step = result.throughput_per_s * result.latency_s.median
    return dataclasses.replace(result, latency_interval_s=latency,
                               throughput_interval_per_s=latency.reciprocal(units_per_step))


def figures(results: list[BatchResult], allowance: float = DRIFT_FLOOR) -> dict[int, Figure]:
    """Each measured batch size's throughput and its interval (its own, or its latency's
    widened by ``allowance``)."""
    out: dict[int, Figure] = {}
    for r in results:
        interval = throughput_interval(r, allowance) if r.status == Status.OK else None
        if interval is not None and r.throughput_per_s:
            out[r.batch_size] = (r.throughput_per_s, interval)
    return out


def pick_within_noise(points: dict[int, Figure], share: float,
                      passed_over: Collection[int] = ()) -> int:
    """The rule: the smallest batch size whose throughput interval reaches ``share`` of the
    best median (so the best itself qualifies: its interval holds its median), but for the
    sizes ``passed_over`` (throughput_curve.passed_over: the fitted curve puts them below the
    bar, and their interval does not lie above it).

    Example:
        >>> pick_within_noise({8: (100.0, Interval(95.0, 105.0)),
        ...                    16: (170.0, Interval(160.0, 180.0)),
        ...                    32: (195.0, Interval(185.0, 205.0))}, 0.9)
        16
    """
    best = max(t for t, _ in points.values())
    return min(b for b, (t, interval) in points.items()
               if interval.high >= share * best and (t == best or b not in passed_over))


def equivalent_batch_sizes(points: dict[int, Figure], share: float) -> list[int]:
    """Every batch size the rule cannot tell from a pick within noise: its throughput
    interval reaches ``share`` of the bottom of the best's interval. It holds
    :func:`pick_within_noise`'s pick, whose bar (the best's median) is higher."""
    best = max(points, key=lambda b: points[b][0])
    bar = share * points[best][1].low
    return sorted(b for b, (_, interval) in points.items() if interval.high >= bar)


def ratio(num: Figure, den: Figure) -> tuple[float, Interval]:
    """``num / den`` with the interval of the quotient (at the intervals' ends); a figure
    over itself is exactly 1.

    Example:
        >>> same = (50.0, Interval(45.0, 55.0))
        >>> ratio(same, same)
        (1.0, Interval(low=1.0, high=1.0))
    """
    if num is den:
        return 1.0, Interval(1.0, 1.0)
    (n, n_iv), (d, d_iv) = num, den
    low, high = ratio_interval((n_iv.low, n_iv.high), (d_iv.low, d_iv.high))
    return n / d if d else math.inf, Interval(low, high)


def knee_interval(results: list[BatchResult], allowance: float = DRIFT_FLOOR) -> Interval | None:
    """The 95% interval of the measured knee (critical_batch.fit_knee): the fit repeated on
    latencies drawn inside their intervals (seeded: the same report gives the same interval).
    None where fewer than three sizes were measured."""
    ok = [r for r in results if r.status == Status.OK and r.latency_s is not None]
    if len(ok) < 3:
        return None
    sizes = [float(r.batch_size) for r in ok]
    bands = []
    for r in ok:
        stats = r.latency_s
        assert stats is not None
        iv = r.latency_interval_s or latency_interval(stats, allowance)
        bands.append((stats.median, iv.low, iv.high))

    def one(rng: random.Random) -> float | None:
        knee, _ = fit_knee(sizes, [lognormal_draw(rng, m, lo, hi) for m, lo, hi in bands])
        return knee

    bounds = bootstrap_interval(one)
    if bounds is None:
        return None
    # A percentile interval of a grid fit need not hold the fit of the medians themselves.
    knee, _ = fit_knee(sizes, [m for m, _, _ in bands])
    low, high = bounds
    return Interval(min(low, knee), max(high, knee)) if knee is not None else Interval(*bounds)
