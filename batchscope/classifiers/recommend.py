"""The recommended batch size (DESIGN.md): the smallest b whose throughput, within noise,
reaches 90% of the best's, and every size noise cannot tell from that pick.

"Within noise" is read from the sweep's decision rounds where they ran: each size's
throughput over the fastest's, paired within interleaved rounds (records/rounds.py), so
that a drift of the machine cancels. Elsewhere (watch, a trace, --no-rounds) it is read
from each size's own interval (classifiers/uncertainty.py), and the step time fitted through
every measured size may pass a size over (classifiers/throughput_curve.py)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from batchscope.classifiers.step_model import band_margin
from batchscope.classifiers.throughput_curve import fit_curve, passed_over, reference_size
from batchscope.classifiers.uncertainty import (
    DRIFT_FLOOR,
    Figure,
    equivalent_batch_sizes,
    figures,
    pick_within_noise,
    ratio,
)
from batchscope.plan import Limits, over_limits
from batchscope.records import (
    BatchResult,
    Interval,
    PredictedPick,
    Status,
    StepPrediction,
    ThroughputCurve,
)
from batchscope.records.report import OverLimit, Rule, RuleKind
from batchscope.records.rounds import NEAR_BEST_SHARE as NEAR_BEST_SHARE
from batchscope.records.rounds import DecisionRounds, PairedDecision, paired_decision


@dataclass
class Choice:
    """The recommended batch and why."""

    batch_size: int
    rule: Rule
    best_batch_size: int
    best_throughput_per_s: float
    speedup_from_batching: float | None
    speedup_baseline_batch: int | None
    # The sizes noise cannot tell from the pick (uncertainty.equivalent_batch_sizes), and
    # the 95% intervals of the speedup and of the pick's throughput over the best's.
    equivalent_batch_sizes: list[int] = field(default_factory=list)
    speedup_interval: Interval | None = None
    pick_share_of_best: float | None = None
    pick_share_of_best_interval: Interval | None = None

    @property
    def excluded(self) -> set[int]:
        """The batch sizes over a user limit, never picked."""
        return {e.batch_size for e in self.rule.excluded}


OBJECTIVES = ("throughput", "energy")


def _by_energy(allowed: list[BatchResult]) -> tuple[BatchResult, BatchResult] | None:
    """(the smallest batch within reach of the lowest energy per unit, the lowest), or None
    without energy readings."""
    metered = [r for r in allowed if r.energy_per_unit_j]
    if not metered:
        return None
    best = min(metered, key=lambda r: r.energy_per_unit_j or 0.0)
    best_j = best.energy_per_unit_j or 0.0
    chosen = min((r for r in metered if (r.energy_per_unit_j or 0.0) * NEAR_BEST_SHARE <= best_j),
                 key=lambda r: r.batch_size)
    return chosen, best


def recommend(results: list[BatchResult], limits: Limits,
              objective: str = "throughput", allowance: float = DRIFT_FLOOR,
              rounds: DecisionRounds | None = None) -> Choice | None:
    """Pick the batch size to run; None when no batch size was measured.

    Where the sweep's decision ``rounds`` timed the sizes near the pick (run.rounds), the
    throughput rule reads their paired shares (records/rounds.paired_decision): the
    smallest allowed size whose share of the fastest, paired within rounds, reaches
    :data:`NEAR_BEST_SHARE` at the top of its 95% interval; its equivalent set, the speedup
    (the smallest size's share, where the rounds timed it) and the pick's share of the best
    come from the same pairs, so a drift of the machine during the sweep moves none of them.

    Without rounds (watch, a trace, --no-rounds) the rule reads intervals (each result's
    own, else its latency's widened by ``allowance``): the pick is the smallest batch size
    whose interval reaches :data:`NEAR_BEST_SHARE` of the best median, passing over a size
    where the step time fitted through all of them (throughput_curve.fit_curve, four sizes
    or more) puts it below the share of the curve at the largest equivalent size and its
    interval does not lie above the curve. Every size whose interval reaches the share of
    the bottom of the best's is equivalent to the pick within noise. ``objective``
    "energy" picks by NVML energy per unit (J/token) where it was measured, and falls back
    to throughput, saying so, where it was not (a CPU, no NVML).
    """
    measured = [r for r in results if r.status == Status.OK and r.throughput_per_s]
    excluded: list[OverLimit] = [e for r in measured if (e := over_limits(r, limits))]
    allowed = [r for r in measured if r.batch_size not in {e.batch_size for e in excluded}]
    points = figures(allowed, allowance)
    if not points:
        return None
    # The rounds' own pool: their final candidates within the limits (a size only a
    # plateau or a predicted-stop check timed was settled there, not here).
    decision = (paired_decision(rounds.blocks, [b for b in rounds.candidates if b in points])
                if rounds is not None else None)
    if decision is not None and decision.best not in points:
        decision = None
    curve = _curve(allowed, points, passing_over=decision is None)
    if decision is not None:
        chosen, equivalent = decision.batch_size, decision.equivalent
        best_size = decision.best
        pick = decision.shares[chosen]
        rule = Rule(RuleKind.NEAR_BEST, NEAR_BEST_SHARE, best_size, points[best_size][0],
                    excluded, curve=curve, paired_rounds=pick.rounds,
                    paired_separated=decision.separated,
                    paired_stalled_rounds=pick.stalled_rounds)
        share: tuple[float, Interval] | None = (pick.share, pick.interval)
        speedup = _paired_speedup(decision, min(r.batch_size for r in measured)) or _speedup(
            figures(measured, allowance))
    else:
        best_size = max(points, key=lambda b: points[b][0])
        chosen = pick_within_noise(points, NEAR_BEST_SHARE, curve.passed_over if curve else ())
        equivalent = equivalent_batch_sizes(points, NEAR_BEST_SHARE)
        rule = Rule(RuleKind.NEAR_BEST, NEAR_BEST_SHARE, best_size, points[best_size][0],
                    excluded, curve=curve)
        share = ratio(points[chosen], points[best_size]) if chosen in points else None
        speedup = _speedup(figures(measured, allowance))
    best_t = points[best_size][0]
    if objective == "energy":
        by_energy = _by_energy(allowed)
        if by_energy is None:
            rule = dataclasses.replace(rule, kind=RuleKind.ENERGY_UNAVAILABLE)
        else:
            energy_pick, lowest = by_energy
            chosen, equivalent = energy_pick.batch_size, [energy_pick.batch_size]
            rule = Rule(RuleKind.ENERGY, NEAR_BEST_SHARE, lowest.batch_size,
                        lowest.energy_per_unit_j or 0.0, excluded)
            share = ratio(points[chosen], points[best_size]) if chosen in points else None
    if len(measured) == 1:  # nothing to compare with: no speedup, no choice made
        rule = Rule(RuleKind.ONLY_ONE, NEAR_BEST_SHARE, best_size, best_t, excluded)
    return Choice(
        batch_size=chosen,
        rule=rule,
        best_batch_size=best_size,
        best_throughput_per_s=best_t,
        speedup_from_batching=speedup[0] if speedup else None,
        speedup_baseline_batch=min(r.batch_size for r in measured),
        equivalent_batch_sizes=equivalent,
        speedup_interval=speedup[1] if speedup else None,
        pick_share_of_best=share[0] if share else None,
        pick_share_of_best_interval=share[1] if share else None,
    )


def _paired_speedup(decision: PairedDecision, smallest: int) -> tuple[float, Interval] | None:
    """The fastest's throughput over the smallest size's, paired within the rounds (the
    reciprocal of the smallest's share); None where the rounds did not time it."""
    s = decision.shares.get(smallest)
    if s is None or s.share <= 0:
        return None
    low, high = s.interval.low, s.interval.high
    return 1 / s.share, Interval(1 / high if high > 0 else 0.0,
                                 1 / low if low > 0 else float("inf"))


def _curve(allowed: list[BatchResult], points: dict[int, Figure],
           passing_over: bool = True) -> ThroughputCurve | None:
    """The throughput curve fitted through every allowed size at its figure's throughput
    with the sizes the rule passes
    over (throughput_curve.passed_over); None with fewer than four sizes or without a step
    time to put units per row on it.

    The step fitted at each size is ``units_per_row * b / throughput``, with one
    units-per-row for all (the best's step: throughput x median step / rows), so the curve
    and the intervals it is read against share their units even where a size's throughput
    was raised without its step (the allocator's estimated savings)."""
    best = max(points, key=lambda b: points[b][0])
    timed = sorted((r for r in allowed if r.latency_s is not None and r.throughput_per_s),
                   key=lambda r: r.batch_size != best)
    if not timed:
        return None
    ref = timed[0]
    assert ref.latency_s is not None and ref.throughput_per_s
    units_per_row = ref.throughput_per_s * ref.latency_s.median / ref.batch_size
    curve = fit_curve({b: units_per_row * b / t for b, (t, _) in points.items()})
    if curve is None:
        return None
    curve = dataclasses.replace(curve, units_per_row=units_per_row)
    if not passing_over:  # the rule read paired rounds: the curve only describes
        return curve
    skipped = passed_over(curve, points, NEAR_BEST_SHARE)
    reference = reference_size(curve, points, NEAR_BEST_SHARE) if skipped else None
    return dataclasses.replace(curve, passed_over=skipped, reference_batch_size=reference)


def _speedup(points: dict[int, Figure]) -> tuple[float, Interval] | None:
    """The best throughput over the smallest batch size's, with its interval; None with
    one size."""
    if len(points) < 2:
        return None
    best = max(points, key=lambda b: points[b][0])
    return ratio(points[best], points[min(points)])


def predicted_pick(results: list[BatchResult], prediction: StepPrediction | None,
                   limits: Limits, choice: Choice | None) -> PredictedPick | None:
    """What the rule would pick were the unmeasured batch sizes as the step-time model
    predicts them, where that is not ``choice``; None where it is, or where nothing says.

    The rule is :func:`recommend`'s, the measured sizes with their intervals. An unmeasured
    size (``prediction.points`` with no measurement: past a sweep stopped by the plateau
    rule or interrupted, or a gap in an explicit list) counts at the low end of its band,
    as a point: its predicted step longer by the forecasts' largest miss (at least
    :data:`~batchscope.classifiers.step_model.MIN_MARGIN`), and, under a latency limit,
    within it there. Sizes from the smallest that failed (out of memory, a timeout, ...)
    up are left out: a timed-out size is still a predicted point in the report, but what
    ran says more than the model. A model that forecast no measured size (three measured
    or fewer) has no band and says nothing. The sweep's predicted stop
    (step_model.predicted_stop) judges the remaining sizes the same way from the last
    measured one, so after it a pick here is rare.
    """
    if choice is None or prediction is None or prediction.max_abs_error is None:
        return None
    margin = band_margin(prediction.max_abs_error)
    # A size that ran and failed (out of memory, timed out, ...) says more than the model:
    # nothing from it up is a pick.
    failed = min((r.batch_size for r in results
                  if r.status not in (Status.OK, Status.INTERRUPTED)), default=None)
    points = figures([r for r in results if r.batch_size not in choice.excluded])
    allowed = {b: t for b, (t, _) in points.items()}
    predicted = {p.batch_size: p for p in prediction.points if p.measured_latency_s is None
                 and p.batch_size not in allowed and (failed is None or p.batch_size < failed)
                 and (
                     limits.latency_limit_s is None
                     or p.predicted_latency_s * (1 + margin) <= limits.latency_limit_s)}
    if not allowed or not predicted:
        return None
    low = {b: p.predicted_throughput_per_s / (1 + margin) for b, p in predicted.items()}
    curve = choice.rule.curve
    chosen = pick_within_noise({**points, **{b: (t, Interval(t, t)) for b, t in low.items()}},
                               NEAR_BEST_SHARE, curve.passed_over if curve else ())
    if chosen == choice.batch_size:
        return None
    best = max(predicted, key=low.__getitem__)
    return PredictedPick(
        batch_size=chosen,
        throughput_per_s=(allowed[chosen] if chosen in allowed
                          else predicted[chosen].predicted_throughput_per_s),
        measured=chosen in allowed,
        best_batch_size=best,
        best_throughput_per_s=predicted[best].predicted_throughput_per_s,
        margin=margin,
        instead_of=choice.batch_size,
        instead_of_throughput_per_s=allowed.get(choice.batch_size, 0.0),
    )


def predicted_pick_of(throughputs: dict[int, float]) -> tuple[int, int] | None:
    """The rule over predicted throughputs, points without intervals (``--target-gpu``: a
    prediction has no noise to be within): (the pick, the best); None without any.

    Example:
        >>> predicted_pick_of({1: 10.0, 8: 70.0, 16: 95.0, 32: 100.0})
        (16, 32)
    """
    if not throughputs:
        return None
    points = {b: (t, Interval(t, t)) for b, t in throughputs.items()}
    best = max(points, key=lambda b: (points[b][0], -b))
    return pick_within_noise(points, NEAR_BEST_SHARE), best
