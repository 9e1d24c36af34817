"""Which batch sizes the decision rounds time, how long they may go on, and when they have
said enough: the planning half of the rounds (records/rounds.py holds their records and
paired statistics; profiler/supervisor.py runs them).

The rounds serve three decisions, each read from within-round ratios so that a drift of the
machine cancels:

* **the pick** (:func:`decision_candidates`): the sizes whose sequential intervals reach
  the rule's bar, the one just below them, and the sweep's first size (the speedup's
  baseline);
  grown by a neighbour where the pick or the fastest lands on the set's edge
  (:func:`widened_candidates`);
* **the plateau stop** (:func:`plateau_verdict`): the recent sizes against the best before
  them; a plateau only where even the top of their paired gain stays under the bar;
* **the predicted stop**: the same sizes re-read (the supervisor asks the step-time
  model again on the paired figures, :func:`paired_view`).

Example:
    >>> from batchscope.records import LatencyStats
    >>> def ok(b, t):
    ...     s = b / t
    ...     return BatchResult(b, Status.OK, latency_s=LatencyStats(s, s, s, 9, median_low=s,
    ...                        median_high=s), throughput_per_s=t)
    >>> decision_candidates([ok(1, 10.0), ok(2, 19.0), ok(4, 30.0), ok(8, 33.0), ok(16, 34.0)])
    [1, 2, 4, 8, 16]
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum

from batchscope.records import BatchResult, Interval, Status
from batchscope.records.noise import throughput_interval
from batchscope.records.rounds import (
    NEAR_BEST_SHARE,
    SETTLED_ROUNDS,
    PairedDecision,
    PairedShare,
    RoundBlock,
    decision_of,
    fastest,
    paired_shares,
)

# Seconds of timed steps in one block (at least one step, after its warm-up step): short,
# so that a round's blocks sit seconds apart and the machine's drift over minutes moves
# them alike. A fast step is timed in sub-blocks of about a millisecond inside it, as every
# timing pass is (engine/timer.py), so the block's median is of many samples.
BLOCK_S = 0.05
# Rounds in each worker before the paired shares are judged: five give each worker a
# median of its own, and two workers make ten paired samples, whose median's 95% interval
# lies inside their range (from the 2nd to the 9th: stats.median_interval), so one stalled
# block cannot stretch it. (With three a worker, one block stalled by a neighbour's burst
# stretched a share's interval to 0.008-3.5.)
MIN_ROUNDS_PER_WORKER = 5
# Worker processes the rounds run in: the sweep's own, then a fresh one. A process's own
# speed can differ from the next one's for its whole life (issue 31); two show it, and
# every share's interval holds both workers' medians.
WORKERS = 2
# One more worker where the two disagree about a size's side of the bar and its least
# rounds fit the rounds' time: on a 2-core VM the MLP sample's batch 512 ran at 0.61 of
# batch 1024 in one process and 0.93 in the next, and with two the pooled median is
# whichever process happened to run more rounds; a third is the majority.
ARBITER_WORKERS = 1
# The most rounds the final decision runs, however unsettled.
MAX_ROUNDS = 16
# The rounds may take this share of the wall time the plan spent measuring, at least
# ROUNDS_MIN_S and at most ROUNDS_MAX_S (a --budget may leave less): they replace the drift
# control's fresh worker and second timings, which took about a third of a sweep.
ROUNDS_SHARE = 0.35
ROUNDS_MIN_S = 4.0
ROUNDS_MAX_S = 120.0
# At most this many sizes in a round, the sweep's first size included.
MAX_CANDIDATES = 6
# A size whose step is longer than this joins a round only where the decision needs it
# (the fastest, the likely pick; its lower neighbour joins later, by the widening, where the
# pick lands on the set's edge): one block of it costs more than the rounds' whole share of
# a small sweep.
COSTLY_STEP_S = 1.0
# A check of a proposed stop (the plateau's, the predicted one) runs at least this many
# rounds in the sweep's worker, and at most CHECK_MAX_ROUNDS before the plan goes on
# without stopping (the evidence could not tell a gain under the bar from one over it).
# Three suffice for a clear case: with fewer than nine the interval is the samples' whole
# range, so every one of them must lie on the same side of the bar.
CHECK_MIN_ROUNDS = 3
CHECK_MAX_ROUNDS = 6


def measured(results: Sequence[BatchResult]) -> list[BatchResult]:
    """The measured results (status OK, timed), in the order they were measured."""
    return [r for r in results if r.status == Status.OK and r.latency_s is not None
            and r.throughput_per_s]


def decision_candidates(results: Sequence[BatchResult], excluded: Collection[int] = (),
                        share: float = NEAR_BEST_SHARE,
                        max_sizes: int = MAX_CANDIDATES) -> list[int]:
    """The sizes the final rounds time: every size whose sequential throughput interval
    reaches ``share`` of the best median (the rule's bar: the pick is among them), every
    size between them, the measured size just below the smallest of them (a size just under
    the bar in one run's timings may reach it in another's; it costs less than any of
    them), and the first size measured (the speedup's baseline and the drift's reference).
    The size above joins where the rounds put the fastest on the set's edge
    (:func:`widened_candidates`), not before: a round costs every size's step. Sizes over a
    user limit (``excluded``) are left out; past ``max_sizes`` the largest go first, and a
    costly step (:data:`COSTLY_STEP_S`) only where the pick needs it (the fastest, the
    smallest reaching the bar). [] with fewer than two sizes."""
    ok = [r for r in measured(results) if r.batch_size not in excluded]
    if len(ok) < 2:
        return []
    best = max(ok, key=lambda r: r.throughput_per_s or 0.0)
    bar = share * (best.throughput_per_s or 0.0)
    sizes = sorted(r.batch_size for r in ok)
    reach = [r.batch_size for r in ok
             if (iv := throughput_interval(r)) is not None and iv.high >= bar]
    low = max(sizes.index(min(reach)) - 1, 0)
    # Every size from just below the smallest reaching the bar to the largest reaching it:
    # a size between them whose sequential timing fell short (a slow stretch of the
    # machine) is exactly what the rounds are for.
    chosen = set(sizes[low:sizes.index(max(reach)) + 1]) | {sizes[0], best.batch_size}
    essential = {sizes[0], best.batch_size, min(reach)}
    step = {r.batch_size: r.latency_s.median for r in ok if r.latency_s is not None}
    for b in sorted(chosen, reverse=True):  # the largest (costliest) go first
        if len(chosen) <= max_sizes:
            break
        if b not in essential:
            chosen.discard(b)
    for b in sorted(chosen, reverse=True):
        if b not in essential and step.get(b, 0.0) > COSTLY_STEP_S:
            chosen.discard(b)
    return sorted(chosen)


def widened_candidates(candidates: Sequence[int], results: Sequence[BatchResult],
                       decision: PairedDecision, excluded: Collection[int] = (),
                       timed: Mapping[int, PairedShare] | None = None) -> list[int]:
    """``candidates`` with one more measured size where the decision sits on the set's
    edge: the size just below the pick when the pick is the smallest candidate above the
    first size (the rounds never saw whether a smaller size reaches the bar too), and the
    size just above the fastest when it is the largest (one faster may lie beyond). A
    neighbour the rounds have already settled (``timed``: every size the rounds timed, its
    share of the fastest; a plateau check timed it, its interval under the bar, or under
    the fastest's) is not added again. The same list when neither applies."""
    sizes = sorted(r.batch_size for r in measured(results) if r.batch_size not in excluded)
    out = set(candidates)

    def settled(b: int, bar: float) -> bool:
        s = (timed if timed is not None else decision.shares).get(b)
        return s is not None and s.rounds >= CHECK_MIN_ROUNDS and s.interval.high < bar

    above_first = [c for c in candidates if c != sizes[0]] if sizes else []
    if above_first and decision.batch_size == min(above_first):
        below = [b for b in sizes if b < decision.batch_size and b not in out]
        if below and not settled(max(below), NEAR_BEST_SHARE):
            out.add(max(below))
    if decision.best == max(candidates):
        above = [b for b in sizes if b > decision.best and b not in out]
        if above and not settled(min(above), 1.0):
            out.add(min(above))
    return sorted(out)


def workers_disagree(decision: PairedDecision, sizes: Sequence[int],
                     share: float = NEAR_BEST_SHARE) -> bool:
    """Whether the workers put a size up to the pick on opposite sides of the bar: each
    worker's own median share of it, one under ``share`` and one at or over it.

    Example:
        >>> from batchscope.records import Interval
        >>> from batchscope.records.rounds import PairedShare
        >>> shares = {512: PairedShare(512, 0.8, Interval(0.6, 0.95), 10, [0.61, 0.93]),
        ...           1024: PairedShare(1024, 1.0, Interval(1.0, 1.0), 10, [1.0, 1.0])}
        >>> workers_disagree(PairedDecision(1024, 1024, shares, [1024], False), [512, 1024])
        True
    """
    for b in sizes:
        s = decision.shares.get(b)
        if s is None or len(s.worker_shares) < 2 or b > decision.batch_size:
            continue
        if min(s.worker_shares) < share <= max(s.worker_shares):
            return True
    return False


def open_sizes(decision: PairedDecision, candidates: Sequence[int],
               share: float = NEAR_BEST_SHARE) -> list[int]:
    """The candidates a further round must time: the fastest (every share's reference), and
    each size whose place against the bar its interval has not settled (or fewer than
    :data:`~batchscope.records.rounds.SETTLED_ROUNDS` rounds timed): a size up to the
    pick whose interval holds the bar, the pick where its interval's bottom is under the
    bar, and a size that could still be the fastest (its interval's top past 1). The rest
    are settled: timing them again would cost a round without moving the decision.

    Example:
        >>> from batchscope.records import Interval
        >>> from batchscope.records.rounds import PairedShare
        >>> shares = {1: PairedShare(1, 0.1, Interval(0.09, 0.11), 10),
        ...           8: PairedShare(8, 0.91, Interval(0.87, 0.95), 10),
        ...           16: PairedShare(16, 1.0, Interval(1.0, 1.0), 10),
        ...           32: PairedShare(32, 0.8, Interval(0.75, 0.85), 10)}
        >>> open_sizes(PairedDecision(8, 16, shares, [8, 16], False), [1, 8, 16, 32])
        [8, 16]
    """
    def unsettled(b: int) -> bool:
        s = decision.shares.get(b)
        if s is None or s.rounds < SETTLED_ROUNDS:
            return True  # never paired with the fastest, or too few times
        straddles = s.interval.low < share <= s.interval.high
        pick_low = b == decision.batch_size and s.interval.low < share
        return (b <= decision.batch_size and straddles) or pick_low or s.interval.high > 1.0

    return sorted({decision.best, *(b for b in candidates if unsettled(b))})


def projected(share: PairedShare, more_rounds: int) -> PairedShare:
    """``share`` as ``more_rounds`` further rounds would leave it if its ratios kept their
    median and spread: its interval narrowed toward the median by sqrt(n / (n + more)) (a
    median's interval narrows as one over the root of its samples). Generous: the part of
    the interval that holds each worker's own median would not narrow, so the projection
    errs toward rounds that could still decide, never toward stopping them.

    Example:
        >>> from batchscope.records import Interval
        >>> s = projected(PairedShare(2, 0.95, Interval(0.75, 1.15), 9), 27)
        >>> round(s.interval.low, 3), round(s.interval.high, 3), s.rounds
        (0.85, 1.05, 36)
    """
    if more_rounds <= 0 or share.rounds <= 0:
        return share
    narrow = math.sqrt(share.rounds / (share.rounds + more_rounds))
    low, high = share.interval.low, share.interval.high
    return dataclasses.replace(
        share, rounds=share.rounds + more_rounds,
        interval=Interval(share.share - (share.share - low) * narrow,
                          share.share + (high - share.share) * narrow))


def cannot_separate(decision: PairedDecision, open_: Collection[int], more_rounds: int,
                    share: float = NEAR_BEST_SHARE) -> bool:
    """Whether ``more_rounds`` rounds of the ``open_`` sizes (:func:`open_sizes`: the
    others are settled) would leave the rule where it stands, projected
    (:func:`projected`): the same pick, still not separated. Then the sizes near the bar
    are equivalent within what the rounds can resolve, and timing them on would only cost
    the user's time: a flat top (the CNN sample's batches 1-16 within 10% of each other)
    kept the rounds going until their time ran out, in every run.

    Example:
        >>> from batchscope.records import Interval
        >>> flat = {1: PairedShare(1, 0.93, Interval(0.8, 1.05), 10),
        ...         2: PairedShare(2, 1.0, Interval(1.0, 1.0), 10)}
        >>> cannot_separate(PairedDecision(1, 2, flat, [1, 2], False), [1, 2], 6)
        True
        >>> near = {1: PairedShare(1, 0.8, Interval(0.72, 0.91), 10), 2: flat[2]}
        >>> cannot_separate(PairedDecision(1, 2, near, [1, 2], False), [1, 2], 6)
        False

        (Six more rounds would bring batch 1's top under the bar: the pick would move.)
    """
    if decision.separated:
        return False
    after = decision_of({b: projected(s, more_rounds) if b in open_ else s
                         for b, s in decision.shares.items()}, decision.best, share)
    return after.batch_size == decision.batch_size and not after.separated


# A block's warm-up: one untimed step where the step is shorter than this; none for longer
# steps once the worker has run the size with its inputs kept (the worker adds one where it
# built them again). On a quiet 2-core VM the first step after another shape ran 15% slow
# for the decode sample's 30 ms batch 1, and within 1-3% of the block's median for steps of
# 50 ms and more (the CNN sample's batches 1-32, the decode sample's 32-256): a warm-up
# there would double the block for a cost every block of the round pays alike.
WARMUP_UNDER_S = 0.05
# A block's median rests on at least this many samples where its step is short enough
# (BLOCK_SAMPLES_WITHIN_S of them): on a 2-core machine with a neighbour, a parallel step
# waits whole scheduler slices for a preempted thread (the MLP's 0.2 ms step at batch 1024
# took 80 ms now and then), and a block of one such sample would be that stall alone.
BLOCK_SAMPLES = 5
BLOCK_SAMPLES_WITHIN_S = 0.25
# What starting a fresh worker costs, reckoned before one has (spawn, import torch, build
# the model: 1.4-2.2 s for the samples on a 2-core VM).
WORKER_START_S = 2.0


def block_samples(step_s: float) -> int:
    """The fewest samples a block of a ``step_s`` step takes: :data:`BLOCK_SAMPLES`, fewer
    where they would outlast :data:`BLOCK_SAMPLES_WITHIN_S` (at least one).

    Example:
        >>> block_samples(0.0002), block_samples(0.1), block_samples(1.3)
        (5, 2, 1)
    """
    if step_s <= 0:
        return BLOCK_SAMPLES
    return max(1, min(BLOCK_SAMPLES, int(BLOCK_SAMPLES_WITHIN_S / step_s)))


def round_cost_s(steps_s: Sequence[float], block_s: float = BLOCK_S) -> float:
    """One round's seconds, reckoned from each size's step: its block and, for a short
    step, its warm-up step."""
    return sum(max(block_s, s * block_samples(s)) + (s if s < WARMUP_UNDER_S else 0.0)
               for s in steps_s)


def rounds_affordable(left_s: float, reckoned_s: float, last_round_s: float,
                      last_reckoned_s: float, most: int) -> int:
    """How many more rounds fit the ``left_s`` seconds of the rounds' time, at most
    ``most``: a round reckoned at ``reckoned_s`` (:func:`round_cost_s`) costs that times how
    much slower than reckoned the last round ran (``last_round_s`` against its
    ``last_reckoned_s``; never faster than reckoned).

    Example:
        >>> rounds_affordable(30.0, 1.0, 0.9, 1.0, 16)  # rounds run as reckoned
        16
        >>> rounds_affordable(30.0, 1.0, 3.0, 1.0, 16)  # 3x slower: inputs built per block
        10
        >>> rounds_affordable(-1.0, 1.0, 1.0, 1.0, 16)  # the time is spent
        0
    """
    slower = max(last_round_s / last_reckoned_s, 1.0) if last_reckoned_s > 0 else 1.0
    cost_s = reckoned_s * slower
    if cost_s <= 0:
        return max(most, 0)
    return max(min(most, int(max(left_s, 0.0) / cost_s)), 0)


def least_rounds_s(results: Sequence[BatchResult], candidates: Sequence[int],
                   workers: int = WORKERS) -> float:
    """What the least rounds of ``candidates`` cost: :data:`MIN_ROUNDS_PER_WORKER` rounds
    in each of ``workers``, and the fresh ones' starts."""
    steps = {r.batch_size: r.latency_s.median for r in measured(results)
             if r.latency_s is not None}
    return (workers * MIN_ROUNDS_PER_WORKER * round_cost_s([steps[b] for b in candidates
                                                            if b in steps])
            + (workers - 1) * WORKER_START_S)


def rounds_budget_s(results: Sequence[BatchResult], candidates: Sequence[int] = (),
                    left_s: float | None = None) -> float:
    """Seconds the final rounds may take: :data:`ROUNDS_SHARE` of the plan's measuring
    time, at least what the least rounds of ``candidates`` cost
    (:data:`MIN_ROUNDS_PER_WORKER` in each of :data:`WORKERS`, and a worker's start) and
    :data:`ROUNDS_MIN_S`, at most :data:`ROUNDS_MAX_S`, and never more than ``left_s``
    (what --budget leaves; None: no budget)."""
    spent = sum(r.wall_s or 0.0 for r in results)
    budget = min(max(ROUNDS_SHARE * spent, least_rounds_s(results, candidates), ROUNDS_MIN_S),
                 ROUNDS_MAX_S)
    return budget if left_s is None else max(min(budget, left_s), 0.0)


class Verdict(str, Enum):
    """What paired rounds say of a proposed stop."""

    CONFIRMED = "confirmed"  # the gain stays under the bar even at the top of its interval
    REFUTED = "refuted"  # the gain passes the bar even at the bottom of its interval
    UNDECIDED = "undecided"  # its interval holds the bar


@dataclass(frozen=True)
class PlateauEvidence:
    """The paired gain of the recent sizes over the best before them.

    Attributes:
        verdict: what it says of the plateau stop.
        best_before: the fastest of the earlier sizes by its paired median.
        recent: the recent sizes judged.
        gain: the largest paired median of a recent size over ``best_before``.
        interval: that size's 95% interval (of its share of ``best_before``).
        rounds: the rounds the figures rest on.
    """

    verdict: Verdict
    best_before: int
    recent: list[int]
    gain: float
    interval: Interval
    rounds: int


def plateau_verdict(blocks: Sequence[RoundBlock], before: Sequence[int],
                    recent: Sequence[int], gain: float) -> PlateauEvidence | None:
    """Whether the recent sizes' throughput, paired within rounds against the fastest of
    the ``before`` sizes, gains less than ``gain`` (the plateau rule's 10%): confirmed where
    every recent size's interval tops out under ``1 + gain``, refuted where one's interval
    lies wholly over it, undecided otherwise. None where the rounds timed no earlier size
    or no recent one.

    Example:
        >>> blocks = [RoundBlock(r, 0, i, b, b / t, 5) for r in range(4)
        ...           for i, (b, t) in enumerate([(4, 100.0), (8, 101.0), (16, 99.0)])]
        >>> plateau_verdict(blocks, [4], [8, 16], 0.10).verdict.value
        'confirmed'
    """
    best = fastest(blocks, before)
    timed = {b.batch_size for b in blocks}
    judged = [b for b in recent if b in timed]
    if best is None or not judged:
        return None
    shares = paired_shares([b for b in blocks if b.batch_size in {best, *judged}], best)
    top = max((shares[b] for b in judged if b in shares), key=lambda s: s.share, default=None)
    if top is None:
        return None
    bar = 1.0 + gain
    if all(shares[b].interval.high < bar for b in judged if b in shares):
        verdict = Verdict.CONFIRMED
    elif any(shares[b].interval.low >= bar for b in judged if b in shares):
        verdict = Verdict.REFUTED
    else:
        verdict = Verdict.UNDECIDED
    return PlateauEvidence(verdict, best, list(judged), top.share, top.interval, top.rounds)


def paired_view(results: Sequence[BatchResult], blocks: Sequence[RoundBlock],
                units_per_row: float = 1.0) -> list[BatchResult]:
    """``results`` with the rounds' paired figures in place of their sequential ones, for a
    rule that reads throughputs and their intervals (the predicted stop): every size the
    rounds timed gets the fastest one's throughput in the rounds (``units_per_row`` units a
    row) times its paired share, and that share's interval; the others keep their own.
    The fastest's interval is then a point: every comparison with it is paired."""
    best = fastest(blocks)
    if best is None:
        return list(results)
    latencies = [b.latency_s for b in blocks if b.batch_size == best and b.latency_s > 0]
    level = units_per_row * best / statistics.median(latencies) if latencies else 0.0
    shares = paired_shares(blocks, best)
    out = []
    for r in results:
        s = shares.get(r.batch_size)
        if s is None or r.status != Status.OK or level <= 0:
            out.append(r)
            continue
        out.append(dataclasses.replace(
            r, throughput_per_s=level * s.share,
            throughput_interval_per_s=s.interval.scaled(level)))
    return out
