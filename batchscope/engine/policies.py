"""When a run of timed samples stops, and what stopped it.

A policy is a small frozen record of its rule's parameters. :meth:`judge` gives the state
one run needs (only the adaptive rule keeps any: when it next sorts the samples), and the
judge reads the run's :class:`Progress` after every sample. Every policy also names a
window: the timed samples span at least ``window_min_s`` whatever stopped them (the NVML
power window on a GPU); the timer (:mod:`batchscope.engine.timer`) enforces it, and says
:attr:`StoppedBy.NVML_WINDOW` when the rule was met before the window was.

Example:
    >>> progress = Progress(block_steps=1, began_at=0.0)
    >>> judge = FixedCount(2).judge()
    >>> for end in (0.1, 0.2):
    ...     progress.add(0.1, end)
    ...     print(judge.verdict(progress).value or "go on")
    go on
    samples
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Protocol

from batchscope.stats import median_ci_rel as median_ci_rel


class StoppedBy(str, Enum):
    """What ended a timing pass (profiler/timing.py): the median's 95% confidence interval
    narrow enough, the time ceiling, a fixed time (--min-time), the most steps allowed, a
    fixed number of samples (watch), the two fastest samples in agreement (``serve
    --engine``'s calibration runs); or the window a monitor needs (NVML), when one of the
    others came first. Re-exported by :mod:`batchscope.records` (``LatencyStats.stopped_by``)."""

    NONE = ""
    MEDIAN_CI = "median_ci"
    MAX_TIME = "max_time"
    MIN_TIME = "min_time"
    MAX_STEPS = "max_steps"
    SAMPLES = "samples"
    SETTLED = "settled"
    NVML_WINDOW = "nvml_window"


# Once the adaptive time ceiling has passed, this many samples do (not the usual minimum):
# three steps of 0.4 s or more already span it, and each further one of the decode sample's
# 2.5-5 s steps at batch 512-1024 costs more than all its steps up to batch 32.
LONG_MIN_STEPS = 3
# Re-check the median's interval after the sample count grows by this factor (sorting is
# O(n log n)).
CHECK_GROWTH = 1.25


class Progress:
    """Where one run of timed samples stands: what a policy's judge reads after each sample.

    Attributes:
        samples_s: each sample's seconds per call (a block's mean step), in order.
        block_steps: calls per sample.
        began_at: the clock's reading when the run began (host seconds).
        ended_at: the clock's reading when the last sample ended.
        elapsed_s: ``ended_at - began_at``: wall time the samples spanned.
        sampled_s: the samples' own seconds, summed (whole blocks): the time spent inside
            timed calls, without what ran between them.
    """

    __slots__ = ("began_at", "block_steps", "elapsed_s", "ended_at", "sampled_s", "samples_s")

    def __init__(self, block_steps: int, began_at: float) -> None:
        self.samples_s: list[float] = []
        self.block_steps = block_steps
        self.began_at = began_at
        self.ended_at = began_at
        self.elapsed_s = 0.0
        self.sampled_s = 0.0

    def add(self, seconds: float, ended_at: float) -> None:
        """One sample: ``seconds`` for a whole block, ending at ``ended_at``."""
        self.samples_s.append(seconds / self.block_steps)
        self.sampled_s += seconds
        self.ended_at = ended_at
        self.elapsed_s = ended_at - self.began_at

    @property
    def steps(self) -> int:
        """Calls timed so far: samples times steps per sample."""
        return len(self.samples_s) * self.block_steps


class Judge(Protocol):
    """One run's stop rule: :attr:`StoppedBy.NONE` to go on, else what stops the run."""

    def verdict(self, progress: Progress) -> StoppedBy: ...


class StopPolicy(Protocol):
    """When a run of timed samples stops: a rule (:meth:`judge`, fresh per run) and a window
    the samples span at least whatever the rule says (0: none)."""

    @property
    def window_min_s(self) -> float: ...

    def judge(self) -> Judge: ...


@dataclass(frozen=True)
class Adaptive:
    """The timing pass's default rule (``TimingConfig``): at least ``min_samples`` samples
    and ``min_s`` seconds, then stop once the median's 95% confidence interval is within
    ``ci_rel`` of it (:attr:`StoppedBy.MEDIAN_CI`), or at ``max_s`` (:attr:`StoppedBy.MAX_TIME`),
    or at ``max_steps`` calls (:attr:`StoppedBy.MAX_STEPS`); never on fewer than
    ``min_samples`` samples, or :data:`LONG_MIN_STEPS` once ``max_s`` has passed. The
    interval is sorted out at ``min_samples`` samples, then each time the count has grown by
    :data:`CHECK_GROWTH` since the last look."""

    min_samples: int
    min_s: float
    max_s: float
    ci_rel: float
    max_steps: int
    window_min_s: float = 0.0

    def judge(self) -> Judge:
        return _AdaptiveJudge(self)


class _AdaptiveJudge:
    """:class:`Adaptive`'s rule over one run: it remembers when to sort the samples next."""

    def __init__(self, policy: Adaptive) -> None:
        self.policy = policy
        self.next_check = policy.min_samples

    def verdict(self, progress: Progress) -> StoppedBy:
        rule, n, elapsed_s = self.policy, len(progress.samples_s), progress.elapsed_s
        fewest = min(rule.min_samples, LONG_MIN_STEPS) if elapsed_s >= rule.max_s \
            else rule.min_samples
        if n < fewest:
            return StoppedBy.NONE
        if elapsed_s >= rule.max_s:
            return StoppedBy.MAX_TIME
        if progress.steps >= rule.max_steps:
            return StoppedBy.MAX_STEPS
        if elapsed_s >= rule.min_s and n >= self.next_check:
            if median_ci_rel(sorted(progress.samples_s)) <= rule.ci_rel:
                return StoppedBy.MEDIAN_CI
            self.next_check = math.ceil(n * CHECK_GROWTH)
        return StoppedBy.NONE


@dataclass(frozen=True)
class FixedTime:
    """Measure for ``seconds`` (``--min-time``) and at least ``min_samples`` samples:
    :attr:`StoppedBy.MIN_TIME`. No step cap and no early stop: the user asked for the time."""

    seconds: float
    min_samples: int
    window_min_s: float = 0.0

    def judge(self) -> Judge:
        return self

    def verdict(self, progress: Progress) -> StoppedBy:
        if len(progress.samples_s) >= self.min_samples and progress.elapsed_s >= self.seconds:
            return StoppedBy.MIN_TIME
        return StoppedBy.NONE


@dataclass(frozen=True)
class FixedCount:
    """Exactly ``samples`` samples, whatever the clock says (a distributed sweep's ranks:
    every rank runs the same steps; ``watch``'s timed samples), then the window if any.

    ``reason`` is what it records: :attr:`StoppedBy.SAMPLES`; the ranks record
    :attr:`StoppedBy.MIN_TIME`, as they did when their count was a fixed time of 0 s."""

    samples: int
    window_min_s: float = 0.0
    reason: StoppedBy = StoppedBy.SAMPLES

    def judge(self) -> Judge:
        return self

    def verdict(self, progress: Progress) -> StoppedBy:
        return self.reason if len(progress.samples_s) >= self.samples else StoppedBy.NONE


class Spent(str, Enum):
    """What :class:`RepeatBudget`'s ``min_time_s`` counts."""

    WALL = "wall"  # wall time since the run began (the ceilings' benchmarks)
    SAMPLED = "sampled"  # the timed calls' own time, summed (the kernel probes)


@dataclass(frozen=True)
class _Repeats:
    """A rule over a count of repeats: nothing stops it before ``min_repeats`` samples; then
    its own rule (:meth:`_past_least`) decides, ``max_repeats`` at the most.

    Raises:
        ValueError: ``max_repeats`` below ``min_repeats``, or no repeat at all.
    """

    min_repeats: int
    max_repeats: int

    def __post_init__(self) -> None:
        if self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(f"repeats from {self.min_repeats} to {self.max_repeats}: "
                             "at least one, and the most no fewer than the least")

    def judge(self) -> Judge:
        return self

    def verdict(self, progress: Progress) -> StoppedBy:
        if len(progress.samples_s) < self.min_repeats:
            return StoppedBy.NONE
        return self._past_least(progress, len(progress.samples_s))

    def _past_least(self, progress: Progress, n: int) -> StoppedBy:
        raise NotImplementedError


@dataclass(frozen=True)
class RepeatBudget(_Repeats):
    """The ceilings' and the kernel probes' rule: at least ``min_repeats`` samples, then
    stop at ``max_repeats`` (:attr:`StoppedBy.MAX_STEPS`), once ``min_time_s`` is spent
    (:attr:`StoppedBy.MIN_TIME`; wall time or the samples' own, by ``spent``) or once the
    clock passes ``deadline`` (:attr:`StoppedBy.MAX_TIME`, host seconds).

    Raises:
        ValueError: ``max_repeats`` below ``min_repeats``, or no repeat at all.
    """

    min_time_s: float
    deadline: float = math.inf
    spent: Spent = Spent.WALL
    window_min_s: float = 0.0

    def _past_least(self, progress: Progress, n: int) -> StoppedBy:
        if n >= self.max_repeats:
            return StoppedBy.MAX_STEPS
        spent_s = progress.elapsed_s if self.spent == Spent.WALL else progress.sampled_s
        if spent_s >= self.min_time_s:
            return StoppedBy.MIN_TIME
        if progress.ended_at >= self.deadline:
            return StoppedBy.MAX_TIME
        return StoppedBy.NONE


def two_fastest_spread(samples_s: Sequence[float]) -> float | None:
    """The second-fastest of ``samples_s`` over the fastest, minus 1: how far the fastest
    would move with the next best sample (None with fewer than two, or a zero fastest).

    Example:
        >>> round(two_fastest_spread([1.3, 1.0, 1.5]), 6), two_fastest_spread([1.0])
        (0.3, None)
    """
    ordered = sorted(samples_s)
    if len(ordered) < 2 or ordered[0] <= 0:
        return None
    return ordered[1] / ordered[0] - 1


@dataclass(frozen=True)
class Settled(_Repeats):
    """For a figure kept as the fastest of a few long samples (noise only adds time): at
    least ``min_repeats`` samples, then stop once the two fastest are within ``spread_rel``
    of each other (:attr:`StoppedBy.SETTLED`), or at ``max_repeats``
    (:attr:`StoppedBy.MAX_STEPS`), settled or not.

    Raises:
        ValueError: ``max_repeats`` below ``min_repeats``, or no repeat at all.
    """

    spread_rel: float
    window_min_s: float = 0.0

    def agree(self, samples_s: Sequence[float]) -> bool:
        """Whether the two fastest of ``samples_s`` are within ``spread_rel`` (one alone:
        no)."""
        spread = two_fastest_spread(samples_s)
        return spread is not None and spread <= self.spread_rel

    def _past_least(self, progress: Progress, n: int) -> StoppedBy:
        if self.agree(progress.samples_s):
            return StoppedBy.SETTLED
        return StoppedBy.MAX_STEPS if n >= self.max_repeats else StoppedBy.NONE
