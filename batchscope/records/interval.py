"""A figure's 95% interval, and a run's second timings (the drift): the records every decision
made under noise reads (classifiers/uncertainty.py fills them; the reports show them).

Example:
    >>> band = Interval(90.0, 110.0)
    >>> band.contains(100.0), band.overlaps(Interval(111.0, 120.0))
    (True, False)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# Two timings of one size ran under different allocator states where their page faults a
# step differ by this share of the larger and by this many (ControlTiming.allocator_change).
ALLOCATOR_FAULTS_APART = 0.25
ALLOCATOR_FAULTS_MIN = 1000.0


# An interval whose high end is more than this many times its low end (or whose low end is
# 0, or high end infinite) says nothing a number could: the renderers show it as "not
# measurable here", never as a number (issue 47: "Batch 2 gives 50% (0-19926639%)"), and
# the evidence of a pick resting on one is unreliable. A tenfold span still tells a 100x
# lift from none (the MLP's speedup, 63-194x, is a reading); past it, no reading is left.
MEANINGFUL_SPAN = 10.0


@dataclass(frozen=True)
class Interval:
    """Where a figure lies at 95%, in the figure's own unit: from the timed samples'
    order statistics, widened by the drift the run showed (classifiers/uncertainty.py)."""

    low: float
    high: float

    def contains(self, value: float) -> bool:
        return self.low <= value <= self.high

    def overlaps(self, other: Interval) -> bool:
        return self.low <= other.high and other.low <= self.high

    def widened(self, allowance: float) -> Interval:
        """Both ends moved out by a relative ``allowance`` for drift: ``[low / (1 + a),
        high * (1 + a)]``, never below 0 (the one widening rule of every interval)."""
        return Interval(max(self.low, 0.0) / (1 + allowance), self.high * (1 + allowance))

    def scaled(self, factor: float) -> Interval:
        """Both ends times a positive ``factor``."""
        return Interval(self.low * factor, self.high * factor)

    def reciprocal(self, numerator: float = 1.0) -> Interval:
        """``numerator / x`` over the interval (a latency's interval to a throughput's)."""
        if self.low <= 0:
            return Interval(numerator / self.high if self.high > 0 else 0.0, float("inf"))
        return Interval(numerator / self.high, numerator / self.low)

    @property
    def span(self) -> float:
        """high / low (inf where low is not positive or high is infinite)."""
        if self.low <= 0 or not math.isfinite(self.high):
            return math.inf
        return self.high / self.low

    def meaningful(self) -> bool:
        """Whether the interval is narrow enough to mean anything (:data:`MEANINGFUL_SPAN`)."""
        return self.span <= MEANINGFUL_SPAN

    def half_width_rel(self, value: float) -> float:
        """The larger distance from ``value`` to an end, relative to ``value``."""
        if value <= 0:
            return float("inf")
        return max(value - self.low, self.high - value) / value


@dataclass(frozen=True)
class ControlTiming:
    """One batch size timed a second time (by the sweep's decision rounds, or ``watch``'s
    repeat of its timed steps; the ``--amp`` check without autocast): its median step at the
    first timing and at the second, and the second's own 95% interval of the median; on
    data-parallel ranks, the communication share of each timing too (the median of the
    timed steps' exposed all-reduce / step ratios, records/noise.communication_shares)."""

    batch_size: int
    first_latency_s: float
    control_latency_s: float
    control_low_s: float
    control_high_s: float
    first_communication_share: float | None = None
    control_communication_share: float | None = None
    # Minor page faults per timed step at each timing (CPU sweeps): where their difference
    # accounts for the change, the two processes' allocators differed, not the machine.
    first_page_faults_per_step: float | None = None
    control_page_faults_per_step: float | None = None

    def allocator_change(self) -> bool:
        """Whether the two timings ran under different allocator states: their page faults
        a step differ by at least :data:`ALLOCATOR_FAULTS_APART` of the larger and by at
        least :data:`ALLOCATOR_FAULTS_MIN` a step, and the step moved the way the faults
        did. The fresh worker's allocator then mapped memory afresh where the sweep's did
        not (or the reverse), which no drift of the machine explains (issue 31: MobileNet's
        batch 2 ran 9.6 ms in the sweep's worker with 85 faults a step, 40 ms in a fresh
        one with 15,000). The faults' own cost is not the test: it ran 0.7-1.6 µs a fault
        from one run to the next, and a process that faults also misses its caches.

        Example:
            >>> ControlTiming(2, 0.0096, 0.0403, 0.040, 0.041, first_page_faults_per_step=85.0,
            ...               control_page_faults_per_step=14_992.0).allocator_change()
            True
        """
        a, b = self.first_page_faults_per_step, self.control_page_faults_per_step
        if a is None or b is None:
            return False
        apart = abs(b - a)
        delta_s = self.control_latency_s - self.first_latency_s
        return (apart >= ALLOCATOR_FAULTS_MIN and apart >= ALLOCATOR_FAULTS_APART * max(a, b)
                and (b - a) * delta_s > 0)

    @property
    def change(self) -> float:
        """|control / first - 1|: how far this size moved between its two timings."""
        return abs(self.control_latency_s / self.first_latency_s - 1) \
            if self.first_latency_s > 0 else 0.0

    @property
    def communication_change(self) -> float | None:
        """The relative allowance that takes either communication share to the other under
        :meth:`Interval.widened` (larger / smaller - 1); None without both, or with a share
        of 0 (an all-reduce fully hidden has no ratio).

        Example:
            >>> ControlTiming(2, 0.01, 0.01, 0.01, 0.01, 0.30, 0.45).communication_change
            0.5
        """
        a, b = self.first_communication_share, self.control_communication_share
        if a is None or b is None or a <= 0 or b <= 0:
            return None
        return max(a, b) / min(a, b) - 1


@dataclass(frozen=True)
class DriftControl:
    """report.json ``run.drift``: a run's second timings (the sweep's decision rounds, or
    ``watch``'s repeat), once every size was measured.
    Its reference batch size (the first measured) is timed again, and so are the fastest
    sizes, the ones the pick is made among (``timings``, the reference first). ``drift``
    is the median of their changes: how far the machine's speed moved over the
    ``seconds_apart`` between the reference's two timings, which no single timing pass can
    see; the first four fields are the reference's."""

    batch_size: int
    first_latency_s: float
    control_latency_s: float
    seconds_apart: float
    drift: float  # the median of |control / first - 1| over ``timings`` (allocator's left out)
    timings: list[ControlTiming] = field(default_factory=list)
    # On data-parallel ranks: the median of the timings' communication_change, how far the
    # communication share moved from one launch of the ranks to the next (None elsewhere).
    communication_drift: float | None = None

    def timing(self, batch_size: int) -> ControlTiming | None:
        """The control timing of ``batch_size`` (None: not timed again)."""
        return next((t for t in self.timings if t.batch_size == batch_size), None)
