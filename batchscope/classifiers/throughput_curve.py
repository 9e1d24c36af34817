"""The throughput curve fitted through every measured batch size, for the pick.

One size's timing on a shared VM moves 10-30% from run to run, so a rule that reads each size
alone ("the smallest whose interval reaches 90% of the best") lands on a different size
each run wherever the curve is nearly flat: issue 31's decode sample picked 256, 128, 64,
256, 128, 128, 128, 64, 128 and 64 in ten identical runs (in 88 of 90 ordered pairs inside
the other run's equivalent set, the commonest pick in only 5). The step time fitted through
all of them (all within the user's limits),

    step_s(b) = shared_s + per_row_s * b

(what the batch shares: weights read once, fixed per-op costs; what each row adds: its
FLOPs, activations and state; the same split as B*'s, measured here instead of predicted)
pools every size's timing, and moved far less: its knee ``shared_s / per_row_s`` came out at
18-25 rows in those ten runs. The rule (classifiers/recommend.py) passes over a size whose
own interval reached the bar only where the curve puts the size below the rule's share of
the curve at the largest equivalent size and the size's interval does not lie above it:
its timing cannot tell the curve wrong, and the curve carries every other size's evidence.
Where a size's interval lies wholly above the curve (as for a knee sharper than the
curve's), the timing wins.

The fit is least squares on log step time (each size's error relative, as its noise is),
over a grid of knees (:data:`GRID_PER_OCTAVE` a factor of two) with the scale in closed form,
as ``critical_batch.fit_knee`` does; no optimizer, the same report gives the same curve.

Example:
    >>> curve = fit_curve({b: 0.080 + 0.0022 * b for b in (1, 4, 16, 64, 256, 1024)})
    >>> round(curve.shared_s, 3), round(curve.per_row_s, 4)
    (0.08, 0.0022)
"""

from __future__ import annotations

import math

from batchscope.classifiers.uncertainty import Figure, equivalent_batch_sizes
from batchscope.records import ThroughputCurve

# Fewer sizes than this leave two parameters without a test of their own.
MIN_SIZES = 4
# The knee's grid: this many points a factor of two, from a 16th of the smallest size to 16
# times the largest (a knee beyond either end is a line through the origin or a flat step).
GRID_PER_OCTAVE = 32
GRID_MARGIN_OCTAVES = 4


def fit_curve(step_s: dict[int, float]) -> ThroughputCurve | None:
    """The least-squares fit of ``log step_s(b)`` to ``log(shared_s + per_row_s * b)``;
    None with fewer than :data:`MIN_SIZES` sizes or a step that is not positive."""
    sizes = sorted(step_s)
    if len(sizes) < MIN_SIZES or any(not step_s[b] > 0 for b in sizes):
        return None
    logs = [math.log(step_s[b]) for b in sizes]
    lo = math.log2(sizes[0]) - GRID_MARGIN_OCTAVES
    hi = math.log2(sizes[-1]) + GRID_MARGIN_OCTAVES
    steps = int((hi - lo) * GRID_PER_OCTAVE)
    best: tuple[float, float, float] | None = None  # (error, knee, log per_row_s)
    for i in range(steps + 1):
        knee = 2 ** (lo + (hi - lo) * i / steps)
        shape = [math.log(knee + b) for b in sizes]
        log_per_row = sum(y - s for y, s in zip(logs, shape)) / len(sizes)
        err = sum((y - log_per_row - s) ** 2 for y, s in zip(logs, shape))
        if best is None or err < best[0] - 1e-12:
            best = (err, knee, log_per_row)
    assert best is not None
    _, knee, log_per_row = best
    per_row_s = math.exp(log_per_row)
    return ThroughputCurve(shared_s=knee * per_row_s, per_row_s=per_row_s, batch_sizes=sizes)


def curve_throughput(curve: ThroughputCurve, batch_size: int) -> float:
    """The curve's throughput at ``batch_size``, in units/s (``curve.units_per_row`` a row
    a step)."""
    return curve.units_per_row * batch_size / (curve.shared_s + curve.per_row_s * batch_size)


def passed_over(curve: ThroughputCurve, points: dict[int, Figure], share: float) -> list[int]:
    """The sizes the rule passes over: those whose interval reaches ``share`` of the best
    median (uncertainty.pick_within_noise's bar) while the curve puts them below ``share`` of
    its highest over the sizes noise cannot tell from the best (the equivalent set: no
    extrapolation past where a falling curve left it) and their interval does not lie above
    the curve (its bottom at or under it: the timing cannot tell the curve wrong there). The
    best measured size is never passed over.

    Example:
        >>> from batchscope.records import Interval
        >>> curve = ThroughputCurve(0.080, 0.0022, [32, 64, 128, 256, 512])
        >>> points = {32: (260.0, Interval(230.0, 290.0)), 64: (290.0, Interval(250.0, 380.0)),
        ...           128: (350.0, Interval(300.0, 400.0)), 256: (380.0, Interval(330.0, 420.0)),
        ...           512: (410.0, Interval(350.0, 450.0))}
        >>> passed_over(curve, points, 0.9)  # the curve: 290, 354, 398 and 424 from 64
        [64, 128]
    """
    best = max(points, key=lambda b: points[b][0])
    reference = reference_size(curve, points, share)
    if reference is None:
        return []
    curve_bar = share * curve_throughput(curve, reference)
    bar = share * points[best][0]
    return sorted(b for b, (_, interval) in points.items()
                  if b != best and b in curve.batch_sizes and interval.high >= bar
                  and interval.low <= curve_throughput(curve, b) < curve_bar)


def reference_size(curve: ThroughputCurve, points: dict[int, Figure], share: float
                   ) -> int | None:
    """The size :func:`passed_over` reads the curve's bar at: the largest fitted size noise
    cannot tell from the best (the curve rises with b, so its highest there); None where no
    such size was fitted."""
    within = [b for b in equivalent_batch_sizes(points, share) if b in curve.batch_sizes]
    return max(within, default=None)


def projects_past(step_s: dict[int, float], remaining: list[int], last_high_per_s: float,
                  bar_per_s: float) -> bool:
    """Whether the curve fitted through ``step_s`` (every measured size) projects a size of
    ``remaining`` past ``bar_per_s``, from ``last_high_per_s`` at the largest measured size
    (the top of its interval) times the curve's gain there: the sweep's predicted stop
    (step_model.predicted_stop) does not stop on a per-op model that one slow timing levelled
    off where this curve still rises. Issue 31's MLP: the model, fitted on batches 128-512,
    put batch 1024 at 0.89x batch 512; nine other runs measured it at 1.1-2.4x. False with
    fewer than :data:`MIN_SIZES` sizes.
    """
    curve = fit_curve(step_s)
    if curve is None or not remaining:
        return False
    last = max(step_s)
    gain = max(curve_throughput(curve, b) / curve_throughput(curve, last) for b in remaining)
    return last_high_per_s * gain >= bar_per_s
