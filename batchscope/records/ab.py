"""``diagnose compare --ab``: two model files timed in one run, and the verdict on them.

The profiler (profiler/ab_run.py) fills :class:`ABMeasurement`: each side's work, counted
once at the batch size, and the pairs of short timing blocks, base and head in a random
order within each pair. The reports (reports/ab_compare.py) judge it into
:class:`ABComparison`, which is what ``ab.json`` holds (schema :data:`AB_SCHEMA`).

Example:
    >>> ABPair(0, True, 0.010, 0.0115).ratio
    1.15
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from batchscope.records.interval import Interval
from batchscope.records.measurement import Status
from batchscope.records.report import ModelInfo
from batchscope.records.work import WorkCount, WorkDelta

AB_SCHEMA = "batchscope.ab/1"
# The fewest pairs whose median ratio has a 95% interval narrower than their whole range:
# stats.median_interval's exact binomial ranks give the first inner rank at nine values.
INNER_INTERVAL_PAIRS = 9


def first_line(text: str) -> str:
    """The first line of an error text (a traceback's message), or that none was given."""
    return text.splitlines()[0] if text else "no reason given"


class ABStopKind(str, Enum):
    """Why the pairs stopped before ``pairs_asked``."""

    INTERRUPTED = "interrupted"  # the user pressed Ctrl-C
    BASE_FAILED = "base_failed"  # the base failed a timing block
    HEAD_FAILED = "head_failed"  # the head failed a timing block


@dataclass(frozen=True)
class ABStop:
    """Why the pairs stopped early: the kind, the 1-based pair it happened in, and for a
    failed block its status and ``error`` (the worker's text, quoted as given)."""

    kind: ABStopKind
    pair: int
    status: Status | None = None
    error: str = ""


@dataclass(frozen=True)
class ABPair:
    """One pair of timing blocks: base and head back to back, ``head_first`` the order the
    seeded draw gave; each latency is its block's median step."""

    index: int
    head_first: bool
    base_latency_s: float
    head_latency_s: float
    # Which pair of worker processes timed it: each round starts both sides afresh, since a
    # process's own speed can differ from the next one's (profiler/ab_run.py).
    round: int = 0

    @property
    def ratio(self) -> float:
        """Head over base step time: above 1 the head is slower. Drift that moves both
        blocks of the pair cancels in it."""
        return round(self.head_latency_s / self.base_latency_s, 12)


@dataclass
class ABSide:
    """One model file as its worker loaded it, and its counting pass at the batch size
    (``status`` not OK: it could not run it, ``error`` says why)."""

    path: str
    model: ModelInfo
    status: Status = Status.OK
    error: str = ""
    work: WorkCount | None = None
    first_latency_s: float | None = None  # the counting pass's own timing block


@dataclass
class ABMeasurement:
    """What the A/B run measured: both sides, the batch size, and the pairs in order."""

    batch_size: int
    base: ABSide
    head: ABSide
    block_s: float  # the timing of each block (fixed, then at least 5 samples)
    seed: int
    pairs: list[ABPair] = field(default_factory=list)
    pairs_asked: int = 0
    stop: ABStop | None = None  # why the pairs stopped before pairs_asked (None: they did not)
    wall_s: float = 0.0
    rounds: int = 1  # pairs of worker processes asked for (ABPair.round)


@dataclass
class ABComparison:
    """The A/B verdict: ``ab.json``.

    ``ratio`` is the median of the pairs' head/base step-time ratios, ``ratio_interval`` its
    distribution-free 95% interval (stats.paired_ratio_interval); ``throughput_change`` is
    ``1 / ratio - 1`` (what ``threshold`` bounds, as in ``diagnose compare``). The time is a
    regression when the whole interval lies above 1 and the median drop passes the threshold;
    the work is one when the head counts more than the threshold allows (records/work.py)."""

    schema: str
    measurement: ABMeasurement
    threshold: float
    ratio: float | None
    ratio_interval: Interval | None
    throughput_change: float | None
    work: WorkDelta | None
    time_regression: bool
    work_regression: bool
    regression: bool
    inconclusive: bool
    verdict: str
    warnings: list[str] = field(default_factory=list)
