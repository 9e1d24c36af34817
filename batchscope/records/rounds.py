"""The decision rounds, and the paired figures every decision between batch sizes reads.

A sweep times its batch sizes one after another, so a change of the machine's speed lands on
whichever size was being timed: a sequential median cannot tell a slower machine from a
slower batch size (issue 47: a decode model's batch 1 timed 26 ms, then 168 ms 14 s later).
So the decisions between sizes are made from *rounds*: every candidate size timed once per
round in a short block, the order shuffled each round, in the sweep's worker and again in
a fresh one (randomized interleaved trials, Abedi and Brecht, ICPE 2017; duet benchmarking,
Bulej et al., ICPE 2020). Within one round the blocks run seconds apart, so a drift of the
machine moves them alike and cancels in their ratio: size ``b``'s throughput over the
reference's *in the same round* is one paired sample, and the median of those samples, with
its distribution-free interval, is the figure the pick, the plateau stop and the predicted
stop read (:func:`paired_shares`).

A worker's own speed can differ from the next one's for its whole life (issue 31: the MLP's
batch 1024 ran 0.7 M samples/s in some workers and 1.5 M in others), which no interleaving
inside one process cancels: a share's interval therefore always holds each worker's own
median too.

Example:
    >>> blocks = [RoundBlock(r, 0, i, b, lat, 5) for r in range(3)
    ...           for i, (b, lat) in enumerate([(1, 0.010), (4, 0.020)])]
    >>> share = paired_shares(blocks, reference=4)[1]
    >>> share.share, share.rounds  # 1/0.010 over 4/0.020 rows a second
    (0.5, 3)
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from enum import Enum

from batchscope.records.interval import Interval
from batchscope.records.noise import DRIFT_FLOOR
from batchscope.stats import median_interval


@dataclass(frozen=True)
class RoundBlock:
    """One block of one round: a candidate batch size timed briefly (timing only).

    Attributes:
        round: the round it belongs to (0-based, over the whole sweep; a round's blocks
            share a worker).
        worker: which worker process timed it: 0 the sweep's own, 1 and on fresh ones.
        position: its place in the round's shuffled order.
        batch_size: the size timed.
        latency_s: the block's median step.
        steps: steps timed in the block (after its warm-up).
        started_s: when the block began, seconds after the sweep's first round began.
        page_faults_per_step: minor page faults a timed step (CPU); None elsewhere.
        communication_share: on data-parallel ranks, the median exposed all-reduce over
            the step of the block's steps; None elsewhere.
    """

    round: int
    worker: int
    position: int
    batch_size: int
    latency_s: float
    steps: int
    started_s: float = 0.0
    page_faults_per_step: float | None = None
    communication_share: float | None = None

    @property
    def rows_per_s(self) -> float:
        """Rows a second the block ran at (every size yields the same units per row, so
        ratios of these are ratios of throughputs)."""
        return self.batch_size / self.latency_s if self.latency_s > 0 else 0.0


class RoundsStop(str, Enum):
    """Why the rounds ended."""

    SEPARATED = "separated"  # every decision they serve stands clear of the noise
    BUDGET = "budget"  # their time (or --budget) ran out before that
    MAX_ROUNDS = "max_rounds"  # the most rounds allowed ran without separating
    # The rounds their time (and MAX_ROUNDS) still allowed would not have separated the
    # sizes near the bar nor moved the pick, projected from the spread so far (a flat top:
    # the sizes are equivalent within what this run can resolve).
    UNSEPARABLE = "unseparable"
    FAILED = "failed"  # a block failed (the worker died, ran out of memory, ...)
    INTERRUPTED = "interrupted"  # the user stopped the sweep
    TOO_FEW = "too_few"  # fewer than two sizes to time


@dataclass(frozen=True)
class PairedShare:
    """One size's throughput over the reference's, paired within rounds.

    Attributes:
        batch_size: the size.
        share: the median of its within-round ratios to the reference (1 for the
            reference itself).
        interval: their 95% interval: the median's order-statistic interval, holding every
            worker's own median (a process's speed may differ for its whole life). Where
            three workers or more timed it (an arbiter ran: rounds_run), the worker whose
            median lies farthest from the middle one is outvoted: its rounds are left out
            of the share and of its interval (``worker_shares`` still lists it).
        rounds: the rounds that timed both it and the reference and paired them (an
            outvoted worker's not counted).
        worker_shares: each worker's median ratio, worker 0 first.
        stalled_rounds: rounds that timed both but paired nothing: one of the two blocks
            stalled (:func:`stalled_blocks`).
    """

    batch_size: int
    share: float
    interval: Interval
    rounds: int
    worker_shares: list[float] = field(default_factory=list)
    stalled_rounds: int = 0

    @property
    def half_width(self) -> float:
        """The interval's larger half, relative to the share."""
        return self.interval.half_width_rel(self.share)


@dataclass(frozen=True)
class DecisionRounds:
    """report.json ``run.rounds``: every block the sweep's rounds timed, and what they said.

    Attributes:
        candidates: the sizes the final rounds timed, ascending.
        reference: the size the shares are relative to: the fastest by its paired median.
        blocks: every block timed, in order (plateau and predicted-stop checks included).
        shares: each timed size's :class:`PairedShare` relative to ``reference``.
        stopped_by: why the rounds ended.
        block_s: the seconds of timed steps a block asked for (at least one step).
        seed: the seed of the shuffles (the same seed gives the same orders).
        workers: worker processes that timed rounds.
        wall_s: wall time of the rounds, workers' starts included.
        machine_drift: how far the machine's speed moved from round to round (the fastest
            round's speed over the slowest's, minus 1; each size over its own median in
            its worker): what a sequential sweep would have read as differences between
            sizes. None with fewer than two rounds.
        decided: whether the decisions the rounds served stand clear of their noise.
    """

    candidates: list[int]
    reference: int
    blocks: list[RoundBlock]
    shares: list[PairedShare]
    stopped_by: RoundsStop
    block_s: float
    seed: int
    workers: int
    wall_s: float
    machine_drift: float | None = None
    decided: bool = False

    def share(self, batch_size: int) -> PairedShare | None:
        """The paired share of ``batch_size`` (None: not timed in the rounds)."""
        return next((s for s in self.shares if s.batch_size == batch_size), None)

    @property
    def rounds(self) -> int:
        """How many rounds ran."""
        return len({b.round for b in self.blocks})


def rounds_of(blocks: Iterable[RoundBlock]) -> dict[int, dict[int, RoundBlock]]:
    """Blocks by round, then by batch size (a size timed twice in one round: its last)."""
    out: dict[int, dict[int, RoundBlock]] = {}
    for block in blocks:
        out.setdefault(block.round, {})[block.batch_size] = block
    return out


# A block whose step ran this many times its size's median (over every block of that size,
# in every worker) is a stall, not a speed of the size: under a load generator burning one of
# two cores, the MLP's batch 1024 (two threads a matmul, one of them waiting for the busy
# core) ran 76 ms a step for three rounds of a fresh worker against 0.19 ms in the other
# seven, while batch 1 (one thread) ran 22 us throughout; those three rounds made batch 1
# "as fast" as 1024 in that worker, and the worker's median lifted batch 1's interval over
# the bar. A process's own speed differs by up to ~2x (issue 31), well inside this factor.
STALL_FACTOR = 4.0
# A round whose blocks ran, together (their geometric mean), this many times slower than
# the same worker's typical round is disturbed, and pairs nothing: contention slows a
# two-thread step more than a one-thread one, so its ratios are not the sizes' own. A
# stock TransformerEncoder classifier's fresh worker ran two rounds at 0.39-0.57 of its own
# medians while another process ran beside it: batch 1 came out at 0.90 of batch 8 there,
# against 0.66-0.75 in the other rounds, and the worker's median put batch 1 on the bar
# (timed independently, 1 ran at 0.68 of 8). Quiet rounds spread by 20% at most here.
DISTURBED_FACTOR = 1.6
# A worker's typical round needs this many of its rounds.
DISTURBED_MIN_ROUNDS = 3


def disturbed_rounds(blocks: Iterable[RoundBlock]) -> set[int]:
    """The rounds a worker ran over :data:`DISTURBED_FACTOR` times slower than its typical
    round: each block's step over its size's median step in that worker, their geometric
    mean per round, against the median of the worker's rounds.

    Example:
        >>> calm = [RoundBlock(r, 0, i, b, 0.01 * b, 5) for r in range(5)
        ...         for i, b in enumerate([1, 8])]
        >>> slow = [RoundBlock(5, 0, 0, 1, 0.02, 5), RoundBlock(5, 0, 1, 8, 0.2, 5)]
        >>> disturbed_rounds(calm + slow)
        {5}
    """
    blocks = [b for b in blocks if b.latency_s > 0]
    per_size: dict[tuple[int, int], list[float]] = {}
    for block in blocks:
        per_size.setdefault((block.worker, block.batch_size), []).append(block.latency_s)
    medians = {key: statistics.median(v) for key, v in per_size.items()}
    logs: dict[tuple[int, int], list[float]] = {}
    for b in blocks:
        logs.setdefault((b.worker, b.round), []).append(
            math.log(b.latency_s / medians[(b.worker, b.batch_size)]))
    slowdown = {key: statistics.fmean(v) for key, v in logs.items()}
    out = set()
    for worker in {w for w, _ in slowdown}:
        mine = {r: s for (w, r), s in slowdown.items() if w == worker}
        if len(mine) < DISTURBED_MIN_ROUNDS:
            continue
        typical = statistics.median(mine.values())
        out |= {r for r, s in mine.items() if s > typical + math.log(DISTURBED_FACTOR)}
    return out


def stalled_blocks(blocks: Iterable[RoundBlock]) -> set[tuple[int, int]]:
    """(round, batch size) of every block that pairs nothing: its step over
    :data:`STALL_FACTOR` times its size's median step, or its round disturbed
    (:func:`disturbed_rounds`).

    Example:
        >>> blocks = [RoundBlock(r, 0, 0, 8, 0.010, 5) for r in range(4)]
        >>> stalled_blocks(blocks + [RoundBlock(4, 0, 0, 8, 0.5, 5)])
        {(4, 8)}
    """
    blocks = list(blocks)
    per_size: dict[int, list[float]] = {}
    for block in blocks:
        if block.latency_s > 0:
            per_size.setdefault(block.batch_size, []).append(block.latency_s)
    medians = {size: statistics.median(v) for size, v in per_size.items()}
    disturbed = disturbed_rounds(blocks)
    return {(b.round, b.batch_size) for b in blocks
            if b.latency_s > STALL_FACTOR * medians.get(b.batch_size, math.inf)
            or b.round in disturbed}


def paired_ratios(blocks: Iterable[RoundBlock], batch_size: int, reference: int,
                  stalled: set[tuple[int, int]] | None = None) -> list[tuple[int, float]]:
    """(worker, ``batch_size``'s rows a second over ``reference``'s) for every round that
    timed both, in round order, but a round where either block stalled (``stalled``:
    :func:`stalled_blocks` of ``blocks`` where not given)."""
    blocks = list(blocks)
    if stalled is None:
        stalled = stalled_blocks(blocks)
    out = []
    for r, by_size in sorted(rounds_of(blocks).items()):
        a, ref = by_size.get(batch_size), by_size.get(reference)
        if (a is not None and ref is not None and ref.rows_per_s > 0
                and (r, batch_size) not in stalled and (r, reference) not in stalled):
            out.append((a.worker, a.rows_per_s / ref.rows_per_s))
    return out


def _rounds_timing_both(blocks: Iterable[RoundBlock], batch_size: int, reference: int) -> int:
    return sum(1 for by_size in rounds_of(blocks).values()
               if batch_size in by_size and reference in by_size)


def paired_share(blocks: Sequence[RoundBlock], batch_size: int, reference: int,
                 stalled: set[tuple[int, int]] | None = None) -> PairedShare | None:
    """``batch_size``'s :class:`PairedShare` relative to ``reference`` (None: no round timed
    both)."""
    if batch_size == reference:
        rounds = sum(1 for by_size in rounds_of(blocks).values() if reference in by_size)
        return PairedShare(batch_size, 1.0, Interval(1.0, 1.0), rounds,
                           [1.0] * len({b.worker for b in blocks}))
    ratios = paired_ratios(blocks, batch_size, reference, stalled)
    if not ratios:
        return None
    workers = sorted({w for w, _ in ratios})
    medians = [statistics.median(r for w, r in ratios if w == worker) for worker in workers]
    paired = len(ratios)
    kept = dict(zip(workers, medians, strict=True))
    if len(workers) >= 3:  # an arbiter ran: the worker farthest from the middle is outvoted
        middle = statistics.median(medians)
        minority = max(kept, key=lambda w: abs(math.log(max(kept[w], 1e-12) / middle))
                       if middle > 0 else 0.0)
        kept.pop(minority)
        ratios = [(w, r) for w, r in ratios if w in kept]
    values = [r for _, r in ratios]
    low, high = median_interval(values)
    median = statistics.median(values)
    held = list(kept.values())
    return PairedShare(batch_size, median,
                       Interval(min(low, median, *held), max(high, median, *held)),
                       len(values), medians,
                       _rounds_timing_both(blocks, batch_size, reference) - paired)


def paired_shares(blocks: Sequence[RoundBlock], reference: int) -> dict[int, PairedShare]:
    """Every timed size's :class:`PairedShare` relative to ``reference``."""
    out = {}
    stalled = stalled_blocks(blocks)  # once for every size
    for size in sorted({b.batch_size for b in blocks}):
        share = paired_share(blocks, size, reference, stalled)
        if share is not None:
            out[size] = share
    return out


def fastest(blocks: Sequence[RoundBlock], sizes: Iterable[int] | None = None) -> int | None:
    """The size with the highest paired median among ``sizes`` (all timed sizes by
    default): each size's shares taken against the most-timed size, the smaller size on a
    tie. None when nothing was timed."""
    counts: dict[int, int] = {}
    for block in blocks:
        counts[block.batch_size] = counts.get(block.batch_size, 0) + 1
    pool = [b for b in (sizes if sizes is not None else counts) if b in counts]
    if not pool:
        return None
    anchor = max(pool, key=lambda b: (counts[b], -b))
    shares = paired_shares([b for b in blocks if b.batch_size in set(pool)], anchor)
    return max((b for b in pool if b in shares), key=lambda b: (shares[b].share, -b),
               default=anchor)


def machine_drift(blocks: Sequence[RoundBlock]) -> float | None:
    """How far the machine's speed moved across the rounds: each block's latency over its
    size's median in its worker, averaged (geometric mean) per round; the upper quartile of
    those round speeds over the lower, minus 1 (a sustained change, not one stalled round,
    which the paired medians shrug off). None with fewer than two rounds.

    Example:
        >>> calm = [RoundBlock(r, 0, 0, 1, 0.010, 5) for r in range(3)]
        >>> machine_drift(calm)
        0.0
    """
    per_size: dict[tuple[int, int], list[float]] = {}
    for block in blocks:
        if block.latency_s > 0:
            per_size.setdefault((block.worker, block.batch_size), []).append(block.latency_s)
    medians = {key: statistics.median(v) for key, v in per_size.items()}
    speeds = []
    for by_size in rounds_of(blocks).values():
        logs = [math.log(b.latency_s / medians[(b.worker, b.batch_size)])
                for b in by_size.values() if b.latency_s > 0]
        if logs:
            speeds.append(math.exp(statistics.fmean(logs)))
    if len(speeds) < 2:
        return None
    low, _, high = statistics.quantiles(speeds, n=4, method="inclusive")
    return high / low - 1.0 if low > 0 else None


# The fewest rounds that may settle a size's place against the bar: fewer say too little
# (one round's ratio is a point, not an interval), so the rounds go on with it.
SETTLED_ROUNDS = 5
# The fewest paired samples whose median has a 95% interval inside their range
# (stats.median_interval's exact binomial ranks: the 2nd to the 8th of nine); with fewer,
# an interval is their whole range.
INNER_RANK_ROUNDS = 9
# The recommendation's rule: the smallest batch size whose throughput reaches this share of
# the best's (DESIGN.md). Within it a smaller batch wins: lower latency and memory for a
# throughput given up inside the noise of a busy machine. (classifiers/recommend re-exports
# it; it lives here because the rounds' own stop, below the classifiers, reads the rule.)
NEAR_BEST_SHARE = 0.90


@dataclass(frozen=True)
class PairedDecision:
    """The rule's pick read from the rounds' paired shares.

    Attributes:
        batch_size: the pick: the smallest allowed size whose share of the fastest reaches
            the rule's bar at the top of its interval (at its median where fewer than
            :data:`INNER_RANK_ROUNDS` rounds timed it).
        best: the fastest allowed size by its paired median (its share is 1).
        shares: every allowed size's share of ``best``.
        equivalent: the sizes another run could pick: each one's interval, stretched by its
            own upper half once more (where a run whose median landed at this run's top
            would put it; never by less than the 5% drift floor: another run's workers are
            its own), reaches the bar (its whole range where fewer than
            :data:`INNER_RANK_ROUNDS` rounds timed it: generous, as an equivalent set should
            be). It holds the pick and the best.
        separated: the pick stands clear of the noise: its interval's low end reaches the
            bar even if the fastest were as fast as any size's interval allows, and every
            smaller size's interval stays under the bar, each over
            :data:`SETTLED_ROUNDS` rounds at least.
    """

    batch_size: int
    best: int
    shares: dict[int, PairedShare]
    equivalent: list[int]
    separated: bool


def paired_decision(blocks: Sequence[RoundBlock], allowed: Iterable[int],
                    share: float = NEAR_BEST_SHARE) -> PairedDecision | None:
    """The rule over the rounds' paired shares among the ``allowed`` sizes (those timed in
    the rounds and within the user's limits); None when none of them was timed.

    Example:
        >>> blocks = [RoundBlock(r, 0, i, b, b / t, 5) for r in range(5)
        ...           for i, (b, t) in enumerate([(1, 10.0), (8, 70.0), (16, 100.0)])]
        >>> d = paired_decision(blocks, [1, 8, 16])
        >>> d.batch_size, d.best, d.separated  # 8 gives 70% of 16's rows a second
        (16, 16, True)
    """
    timed = {b.batch_size for b in blocks}
    pool = sorted(timed & set(allowed))
    best = fastest(blocks, pool)
    if best is None:
        return None
    shares = paired_shares([x for x in blocks if x.batch_size in pool], best)
    return decision_of(shares, best, share)


def decision_of(shares: dict[int, PairedShare], best: int,
                share: float = NEAR_BEST_SHARE) -> PairedDecision:
    """The rule over paired ``shares`` of ``best`` (every allowed size timed; ``best``
    among them): what :func:`paired_decision` reads from the blocks, and what the rounds'
    projection reads from shares as more rounds would leave them (rounds.py)."""
    reaching = [b for b in sorted(shares) if _reach(shares[b]) >= share]
    pick = min(reaching, default=best)
    top = max([1.0, *(s.interval.high for s in shares.values())])
    separated = (shares[pick].rounds >= SETTLED_ROUNDS
                 and shares[pick].interval.low >= share * top and all(
                     s.interval.high < share and s.rounds >= SETTLED_ROUNDS
                     for b, s in shares.items() if b < pick))
    equivalent = sorted({pick, best} | {
        b for b, s in shares.items() if _another_run_could_reach(s) >= share})
    return PairedDecision(pick, best, shares, equivalent, separated)


def _another_run_could_reach(share: PairedShare) -> float:
    """How high another run could put ``share``: the top of its interval, stretched by its
    own upper half once more, never by less than the drift floor (another run has workers
    of its own, whose speed this run's two did not sample)."""
    if share.share <= 0:
        return 0.0
    top = max(share.interval.high, share.share)
    return top * (1 + max(top / share.share - 1, DRIFT_FLOOR))


def _reach(share: PairedShare) -> float:
    """How high ``share`` could lie, for the pick: the top of its interval where enough
    rounds give the median an interval inside their range (:data:`INNER_RANK_ROUNDS`), its
    median where fewer do (their interval is their whole range, which one stalled block
    stretches as far as it likes: no pick may rest on that)."""
    return share.interval.high if share.rounds >= INNER_RANK_ROUNDS else share.share
