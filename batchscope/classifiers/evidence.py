"""The report's evidence grade, from the run's own measurements (records/evidence.py).

Each reason is graded alone against its limits and the report takes the worst:

* **drift**: how far the machine's speed moved while it measured. A sweep reads the larger
  of the rounds' round-to-round spread (``run.rounds.machine_drift``) and the plan's
  timings against the rounds' (``run.drift``); ``watch`` its first timed steps against the
  same steps timed again at its end. Past :data:`DRIFT_UNRELIABLE` a sequential figure
  could be off by half: unreliable.
* **other processes' CPU**: the share of the machine other processes took
  (``run.other_cpu_share``). A step that runs on every core waits for the preempted ones.
* **uncounted share**: the pick's step time in ops with no FLOP or byte count; the exact
  evidence (work, intensities, B*) leaves that share out.
* **rounds / steps**: how many paired rounds (a sweep) or timed steps (``watch``) the pick
  rests on; a sweep run without rounds (``--no-rounds``) decided on sequential timings.
  Whether the rounds separated the sizes near the bar is said but not graded: a tie on a
  quiet machine is what the equivalent set states, not evidence gone bad.
* **budget**: --budget left sizes unmeasured.
* **wide**: the pick's throughput interval spans more than
  :data:`~batchscope.records.interval.MEANINGFUL_SPAN`: nothing to decide on.

Example:
    >>> grade_of(EvidenceKind.DRIFT, 0.62).value
    'unreliable'
"""

from __future__ import annotations

from batchscope.classifiers.coverage import HOLE_SHARE, uncounted_share
from batchscope.records import (
    BatchResult,
    Recommendation,
    RuleKind,
    RunInfo,
    Source,
    Stop,
    StopKind,
)
from batchscope.records.evidence import Evidence, EvidenceKind, EvidenceReason, Grade
from batchscope.records.flag_payloads import BudgetStop
from batchscope.records.interval import MEANINGFUL_SPAN
from batchscope.records.rounds import RoundsStop
from batchscope.rounds import MIN_ROUNDS_PER_WORKER, WORKERS

# Drift past this share makes a run noisy; past the second, unreliable: a size timed in a
# slow stretch could read half its speed (issue 47: batch 1 at 26 ms, then 168 ms). On a
# quiet 2-core VM the plan's timings sat 1-33% from a second timing (docs/benchmarks.md
# section 10), so the noisy limit sits inside that range and the unreliable one beyond it.
DRIFT_NOISY = 0.20
DRIFT_UNRELIABLE = 0.50
# Other processes' share of the machine's CPU: from a quarter on, the ceilings are not
# cached either (hardware/busy.BUSY_SHARE); from a half on, the run measured a machine it
# had at most half of.
OTHER_CPU_NOISY = 0.25
OTHER_CPU_UNRELIABLE = 0.50
# Uncounted ops taking this share of the pick's step: the exact work leaves it out (the
# hole every count-based figure names, classifiers/coverage.py).
UNCOUNTED_NOISY = HOLE_SHARE
# The pick rests on fewer paired rounds than the rounds' least: its interval is their range.
ROUNDS_WANTED = MIN_ROUNDS_PER_WORKER * WORKERS
# watch: fewer timed steps than this (its default timed samples).
STEPS_WANTED = 8

_LIMITS: dict[EvidenceKind, tuple[float, float | None]] = {
    EvidenceKind.DRIFT: (DRIFT_NOISY, DRIFT_UNRELIABLE),
    EvidenceKind.OTHER_CPU: (OTHER_CPU_NOISY, OTHER_CPU_UNRELIABLE),
    EvidenceKind.UNCOUNTED: (UNCOUNTED_NOISY, None),
    EvidenceKind.WIDE: (MEANINGFUL_SPAN, MEANINGFUL_SPAN),
}


def grade_of(kind: EvidenceKind, value: float) -> Grade:
    """The grade ``value`` alone implies for a kind graded by its size."""
    noisy, unreliable = _LIMITS[kind]
    if unreliable is not None and value > unreliable:
        return Grade.UNRELIABLE
    if value > noisy or (kind == EvidenceKind.UNCOUNTED and value >= noisy):
        return Grade.NOISY
    return Grade.GOOD


def _sized(kind: EvidenceKind, value: float) -> EvidenceReason:
    grade = grade_of(kind, value)
    noisy, unreliable = _LIMITS[kind]
    limit = unreliable if grade == Grade.UNRELIABLE and unreliable is not None else noisy
    return EvidenceReason(kind, grade, value, limit)


def drift_of(run: RunInfo) -> float | None:
    """The run's drift: the larger of the rounds' round-to-round spread and the plan's (or
    watch's first) timings against the second; None where neither was measured."""
    found = [d for d in (run.drift.drift if run.drift is not None else None,
                         run.rounds.machine_drift if run.rounds is not None else None)
             if d is not None]
    return max(found) if found else None


def evidence(run: RunInfo, batches: list[BatchResult], recommendation: Recommendation | None,
             stop: Stop | None) -> Evidence | None:
    """The grade of a sweep's or a watch's evidence, every reason it rests on worst first;
    None for a report that measured nothing here (a trace, Nsight Compute exports, a
    prediction)."""
    if run.source not in (Source.SWEEP, Source.WATCH):
        return None
    reasons: list[EvidenceReason] = []
    drift = drift_of(run)
    if drift is not None:
        reasons.append(_sized(EvidenceKind.DRIFT, drift))
    if run.other_cpu_share is not None:
        reasons.append(_sized(EvidenceKind.OTHER_CPU, run.other_cpu_share))
    pick = next((b for b in batches if recommendation is not None
                 and b.batch_size == recommendation.batch_size), None)
    hole = uncounted_share(pick)
    if hole is not None:
        reasons.append(_sized(EvidenceKind.UNCOUNTED, hole))
    if pick is not None and pick.throughput_interval_per_s is not None \
            and not pick.throughput_interval_per_s.meaningful():
        reasons.append(_sized(EvidenceKind.WIDE, pick.throughput_interval_per_s.span))
    reasons += _decision(run, pick, recommendation)
    if stop is not None and stop.kind == StopKind.BUDGET:
        count = len(BudgetStop.of(stop).unmeasured)
        reasons.append(EvidenceReason(EvidenceKind.BUDGET, Grade.NOISY, float(count)))
    grade = max((r.grade for r in reasons), key=lambda g: g.rank, default=Grade.GOOD)
    return Evidence(grade, sorted(reasons, key=lambda r: -r.grade.rank))


def _decision(run: RunInfo, pick: BatchResult | None,
              recommendation: Recommendation | None) -> list[EvidenceReason]:
    """What the pick rests on: the rounds (a sweep), or the timed steps (watch)."""
    if recommendation is None or pick is None:
        return []
    if run.source == Source.WATCH:
        steps = pick.latency_s.n if pick.latency_s is not None else 0
        return [EvidenceReason(EvidenceKind.STEPS,
                               Grade.NOISY if steps < STEPS_WANTED else Grade.GOOD,
                               float(steps), float(STEPS_WANTED))]
    rounds = recommendation.rule.paired_rounds
    if rounds is None:  # a sweep decided on sequential timings (--no-rounds, or too few)
        if recommendation.rule.kind == RuleKind.ONLY_ONE:
            return []
        return [EvidenceReason(EvidenceKind.NO_ROUNDS, Grade.NOISY)]
    out = [EvidenceReason(EvidenceKind.ROUNDS,
                          Grade.NOISY if rounds < ROUNDS_WANTED else Grade.GOOD,
                          float(rounds), float(ROUNDS_WANTED))]
    separated = recommendation.rule.paired_separated
    stopped = run.rounds.stopped_by if run.rounds is not None else None
    if not separated and stopped != RoundsStop.SEPARATED:
        # Said, not graded: sizes within noise of the bar on a quiet machine are a tie the
        # equivalent set states, not evidence gone bad (a flat curve is never separated).
        out.append(EvidenceReason(EvidenceKind.NOT_SEPARATED, Grade.GOOD))
    return out
