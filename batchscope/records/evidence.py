"""report.json ``evidence``: how far the run's own measurements carry its decisions.

Every report that measured something grades its evidence from what it measured itself
(classifiers/evidence.py): how far the machine's speed drifted, how much of the CPU other
processes took, how much of the step no counted op explains, and how many steps or rounds
the pick rests on. The grade leads every rendering (the pick card, the terminal's first
lines, summary.md's first line), so a report speaks with the confidence its evidence
allows: *good*, *noisy* (the pick holds within the noise the report states), or
*unreliable* (rerun: the reasons say why and how).

Example:
    >>> Evidence(Grade.NOISY, [EvidenceReason(EvidenceKind.DRIFT, Grade.NOISY, 0.27, 0.2)]).grade
    <Grade.NOISY: 'noisy'>
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class Grade(str, Enum):
    """How far a report's evidence carries its decisions, best first."""

    GOOD = "good"
    NOISY = "noisy"
    UNRELIABLE = "unreliable"

    @property
    def rank(self) -> int:
        return list(Grade).index(self)


class EvidenceKind(str, Enum):
    """What one reason measured (``value`` and ``limit`` in its unit)."""

    DRIFT = "drift"  # the machine's speed moved this share (the rounds', or watch's repeat)
    OTHER_CPU = "other_cpu"  # other processes took this share of the machine's CPU
    UNCOUNTED = "uncounted"  # this share of the pick's step ran in ops nobody counted
    ROUNDS = "rounds"  # the pick rests on this many paired rounds (limit: the fewest wanted)
    STEPS = "steps"  # the pick rests on this many timed steps (no rounds: watch)
    NOT_SEPARATED = "not_separated"  # the rounds could not separate the sizes near the bar
    NO_ROUNDS = "no_rounds"  # a sweep decided on sequential timings (--no-rounds)
    BUDGET = "budget"  # --budget cut the sweep short (value: sizes left unmeasured)
    WIDE = "wide"  # the pick's throughput interval spans this factor (high / low)


@dataclass(frozen=True)
class EvidenceReason:
    """One thing the run measured of its own reliability, and the grade it alone implies.

    Attributes:
        kind: what was measured.
        grade: what this reason alone implies (GOOD where it is within its limit).
        value: the measured figure (a share, a count, a factor); None for a kind that is
            only a fact (NO_ROUNDS, NOT_SEPARATED).
        limit: the figure's limit for the grade it implies (the noisy one where GOOD).
    """

    kind: EvidenceKind
    grade: Grade
    value: float | None = None
    limit: float | None = None


@dataclass(frozen=True)
class Evidence:
    """The report's grade (its worst reason's) and every reason it rests on, worst first."""

    grade: Grade
    reasons: list[EvidenceReason] = field(default_factory=list)

    def worst(self) -> list[EvidenceReason]:
        """The reasons that set the grade (none where it is good)."""
        if self.grade == Grade.GOOD:
            return []
        return [r for r in self.reasons if r.grade == self.grade]
