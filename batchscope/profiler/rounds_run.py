"""The sweep's decision rounds, run: candidate batch sizes timed in short blocks, each once
per round in a shuffled order, in the sweep's worker and again in a fresh one.

The sweep (:mod:`batchscope.profiler.supervisor`) calls :class:`RoundsRun` at three points:
when its plan proposes a plateau stop (:meth:`RoundsRun.check`: the recent sizes against the
best before them), when the step-time model proposes the predicted stop (the same, re-read
by the model), and once the plan has ended (:meth:`RoundsRun.decide`: the pick). Which sizes,
for how long and when they have said enough is :mod:`batchscope.rounds`' (pure); the
statistics are :mod:`batchscope.records.rounds`'. Every block goes through the worker's
one timer (``MeasureBatch`` with ``block_s``: :meth:`Worker.time_block
<batchscope.profiler.worker.Worker.time_block>`); every block of every call is kept and
read by every later decision (a round's ratios are paired whatever it was run for).

Example:
    >>> rounds = RoundsRun(sweep, seed=7)  # doctest: +SKIP
    >>> record = rounds.decide(results, excluded=set(), deadline=None)  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import random
import statistics
import time
from collections.abc import Callable, Sequence
from typing import Protocol

from batchscope.errors import ModelFileError
from batchscope.profiler.protocol import MeasureBatch
from batchscope.records import BatchResult, ControlTiming, DriftControl, Status
from batchscope.records.noise import communication_share, drift_control
from batchscope.records.rounds import (
    SETTLED_ROUNDS,
    DecisionRounds,
    RoundBlock,
    RoundsStop,
    fastest,
    machine_drift,
    paired_decision,
    paired_shares,
    rounds_of,
)
from batchscope.rounds import (
    ARBITER_WORKERS,
    BLOCK_S,
    MAX_ROUNDS,
    MIN_ROUNDS_PER_WORKER,
    WARMUP_UNDER_S,
    WORKERS,
    block_samples,
    cannot_separate,
    decision_candidates,
    least_rounds_s,
    measured,
    open_sizes,
    round_cost_s,
    rounds_affordable,
    rounds_budget_s,
    widened_candidates,
    workers_disagree,
)
from batchscope.stats import median_interval


class RoundsHost(Protocol):
    """What the rounds need of the sweep: its worker, and a way to start a fresh one."""

    worker_serial: int  # which worker process answers now (a fresh one gets the next)

    def request_block(self, request: MeasureBatch) -> BatchResult:
        """Send ``request`` to the running worker (started if need be) and return its
        result; a death or a timeout is the result's status (the worker is then gone)."""
        ...

    def fresh_worker(self) -> bool:
        """Stop the worker and start a fresh one (False: none can be started here)."""
        ...


class RoundsRun:
    """Every block the sweep's rounds timed, and the rounds still to run.

    Args:
        host: the sweep.
        seed: the shuffles' seed (recorded in the report).
        block_s: seconds of timed steps a block asks for.
        workers: worker processes the final rounds run in (1 where no fresh one can start).
        on_block: told of each block as it is timed (progress).
    """

    def __init__(self, host: RoundsHost, seed: int, block_s: float = BLOCK_S,
                 workers: int = WORKERS,
                 on_block: Callable[[RoundBlock], None] | None = None) -> None:
        self.host = host
        self.seed = seed
        self.block_s = block_s
        self.workers = workers
        self.on_block = on_block
        self.rng = random.Random(seed)
        self.blocks: list[RoundBlock] = []
        self.started_at: float | None = None
        self.next_round = 0
        self.spent_s = 0.0  # wall time of every round and worker start so far
        # The latest round's wall time (warm-ups, inputs built again included) and what its
        # sizes' steps reckoned: how much slower than reckoned a round runs.
        self.last_round_s = 0.0
        self.last_reckoned_s = 0.0
        self.failed: set[int] = set()  # sizes whose block failed: never timed again

    # -- one round -----------------------------------------------------------------------
    def round(self, sizes: Sequence[int], steps_s: dict[int, float]) -> bool:
        """Time every size once, in a shuffled order; False where a block failed (the size
        is then left out of later rounds, and the worker is gone)."""
        began = time.monotonic()
        if self.started_at is None:
            self.started_at = began
        order = [b for b in sizes if b not in self.failed]
        self.rng.shuffle(order)
        self.last_reckoned_s = round_cost_s([steps_s[b] for b in order if b in steps_s],
                                            self.block_s)
        index, self.next_round = self.next_round, self.next_round + 1
        ok = True
        try:
            for position, b in enumerate(order):
                step_s = steps_s.get(b, 0.0)
                warmup = 1 if step_s < WARMUP_UNDER_S else 0
                at = time.monotonic() - self.started_at
                result = self.host.request_block(MeasureBatch(
                    b, first_step=False, op_breakdown=False, block_s=self.block_s,
                    warmup_steps=warmup, block_samples=block_samples(step_s)))
                worker = self.host.worker_serial  # the one that answered (maybe just started)
                if result.status != Status.OK or result.latency_s is None:
                    self.failed.add(b)
                    ok = False
                    break
                block = RoundBlock(index, worker, position, b, result.latency_s.median,
                                   result.latency_s.n, at, result.page_faults_per_step,
                                   communication_share(result))
                self.blocks.append(block)
                if self.on_block is not None:
                    self.on_block(block)
        finally:
            self.last_round_s = time.monotonic() - began
            self.spent_s += self.last_round_s
        return ok

    def rounds_in(self, worker: int, sizes: Sequence[int]) -> int:
        """Rounds of ``worker`` that timed every one of ``sizes``."""
        by_round: dict[int, set[int]] = {}
        for b in self.blocks:
            if b.worker == worker:
                by_round.setdefault(b.round, set()).add(b.batch_size)
        wanted = set(sizes) - self.failed
        return sum(1 for timed in by_round.values() if wanted <= timed)

    def least_round(self, sizes: Sequence[int], steps_s: dict[int, float]) -> list[int]:
        """The sizes the running worker's next least round times: each of ``sizes`` that
        this worker has paired with the reference in fewer than
        :data:`~batchscope.rounds.MIN_ROUNDS_PER_WORKER` rounds, and the reference (the
        fastest the blocks so far show among ``sizes``; before any, the plan's fastest);
        [] once none falls short. A pair counts whatever round timed it, a plateau check's
        included: its ratio is the same paired evidence, and timing the check's sizes again
        (the sweep's largest, the decode sample's 512 and 1024) would cost their steps for
        pairs the worker already holds. A stalled block counts as timed, as it did when the
        least rounds were whole rounds: the decision leaves it out and times the size on
        where that leaves it unsettled (:func:`~batchscope.rounds.open_sizes`)."""
        worker = self.host.worker_serial
        sizes = [b for b in sizes if b not in self.failed]
        reference = fastest(self.blocks, sizes)
        if reference is None:
            timed = [b for b in sizes if steps_s.get(b, 0.0) > 0]
            if not timed:
                return list(sizes)
            reference = max(timed, key=lambda b: (b / steps_s[b], -b))
        by_round = rounds_of(b for b in self.blocks if b.worker == worker).values()
        short = []
        for size in sizes:
            if size == reference:
                continue
            paired = sum(1 for timed_here in by_round
                         if size in timed_here and reference in timed_here)
            if paired < MIN_ROUNDS_PER_WORKER:
                short.append(size)
        return sorted({*short, reference}) if short else []

    def rounds_timing(self, batch_size: int) -> int:
        """Rounds, over every worker, that timed ``batch_size``."""
        return len({(b.worker, b.round) for b in self.blocks if b.batch_size == batch_size})

    # -- a check during the plan -----------------------------------------------------------
    def check(self, sizes: Sequence[int], steps_s: dict[int, float],
              settled: Callable[[list[RoundBlock]], bool], min_rounds: int, max_rounds: int,
              deadline: float | None) -> bool:
        """Rounds of ``sizes`` in the sweep's worker until ``settled`` says the blocks so
        far decide (after ``min_rounds``) or ``max_rounds`` ran, or ``deadline`` passed;
        False where a block failed."""
        worker = self.host.worker_serial
        done = self.rounds_in(worker, sizes)
        while done < max_rounds:
            if done >= min_rounds and settled(self.blocks):
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return True
            if not self.round(sizes, steps_s):
                return False
            done = self.rounds_in(self.host.worker_serial, sizes)
        return True

    # -- the decision ----------------------------------------------------------------------
    def decide(self, results: list[BatchResult], excluded: set[int],
               deadline: float | None) -> DecisionRounds | None:
        """The final rounds, once the plan has ended: the candidates
        (:func:`~batchscope.rounds.decision_candidates`) in the sweep's worker, then in a
        fresh one, until the pick stands clear of the noise, :data:`MAX_ROUNDS` ran or the
        rounds' time (:func:`~batchscope.rounds.rounds_budget_s`, within ``deadline``) is
        spent; None where fewer than two sizes were measured."""
        candidates = decision_candidates(results, excluded)
        if len(candidates) < 2:
            return None
        steps_s = {r.batch_size: r.latency_s.median for r in measured(results)
                   if r.latency_s is not None}
        started = time.monotonic()
        left = deadline - started if deadline is not None else None
        # The rounds' own time is soft: their least rounds always run (on a busy machine
        # they take longer than reckoned), past it they go on only within it; --budget's
        # deadline is hard (one round at least, so the record is never empty).
        until = started + rounds_budget_s(results, candidates, left)
        least = list(candidates)  # every worker times these its least rounds
        final_rounds = 0  # rounds run here, bounded by cap
        cap = MAX_ROUNDS
        fresh_started = 0  # fresh workers started here, at most self.workers - 1
        # Least rounds run here in each worker: never more than MIN_ROUNDS_PER_WORKER, as
        # when they were whole rounds, even where the fastest moves from round to round and
        # the pairs with it are counted afresh.
        least_run: dict[int, int] = {}
        arbiters = ARBITER_WORKERS if self.workers > 1 else 0
        # an arbiter: one more worker's start and least rounds
        arbiter_s = least_rounds_s(results, least, 2) - least_rounds_s(results, least, 1)
        stop = RoundsStop.MAX_ROUNDS
        while True:
            if final_rounds >= cap:
                stop = RoundsStop.MAX_ROUNDS
                break
            now = time.monotonic()
            if final_rounds > 0 and deadline is not None and now >= deadline:
                stop = RoundsStop.BUDGET  # --budget's deadline is hard
                break
            serial = self.host.worker_serial
            short = (self.least_round(least, steps_s)
                     if least_run.get(serial, 0) < MIN_ROUNDS_PER_WORKER else [])
            more_workers = fresh_started < self.workers - 1
            if short:  # this worker's least rounds, of the first candidates it lacks
                least_run[serial] = least_run.get(serial, 0) + 1
                if not self.round(short, steps_s):
                    stop = RoundsStop.FAILED
                    least = [b for b in least if b not in self.failed]
                    if len(set(candidates) - self.failed) < 2:
                        break
                final_rounds += 1
                continue
            if more_workers:  # then the same in a fresh worker
                fresh_started += 1
                try:
                    began = time.monotonic()
                    fresh = self.host.fresh_worker()
                    self.spent_s += time.monotonic() - began
                except ModelFileError:  # a fresh worker refused: the rounds so far stand
                    fresh = False
                if not fresh:
                    self.workers = fresh_started
                    if self.host.worker_serial != serial:
                        # The old worker was let go and the new one did not start: no
                        # worker is left to time in, and each block would try a start of
                        # its own. The rounds so far stand.
                        stop = RoundsStop.FAILED
                        break
                    # None can start by design (ranks over several nodes): the rounds go
                    # on in the worker they ran in.
                continue
            allowed = [b for b in candidates if b not in excluded and b not in self.failed]
            decision = paired_decision(self.blocks, allowed)
            if decision is None:
                stop = RoundsStop.FAILED
                break
            timed = paired_shares(self.blocks, decision.best)
            widened = [b for b in widened_candidates(candidates, results, decision, excluded,
                                                     timed)
                       if b not in self.failed]
            if widened != candidates:
                candidates = widened
                continue
            if (arbiters and not decision.separated and workers_disagree(decision, allowed)
                    and time.monotonic() + arbiter_s <= until):
                arbiters -= 1  # the workers disagree: a third is the majority
                self.workers += 1
                cap += MIN_ROUNDS_PER_WORKER
                continue
            pending = [b for b in allowed if b not in decision.shares]  # widened, untimed
            if decision.separated and not pending:
                stop = RoundsStop.SEPARATED
                break
            # The rounds' own time is soft, and checked only here, once every worker ran its
            # least rounds and the set was widened where the decision sat on its edge: a
            # size the widening added is timed its settled rounds first (one round of it
            # would leave it out of the set on chance).
            unsettled = any(self.rounds_timing(b) < SETTLED_ROUNDS for b in allowed)
            if not unsettled and now >= until:
                stop = RoundsStop.BUDGET
                break
            # Past the least rounds, only what is not settled: a round of the rest would
            # cost their steps without moving the decision.
            open_ = open_sizes(decision, candidates)
            # And none at all where every round still allowed (by MAX_ROUNDS and the rounds'
            # time) would leave the pick where it is and the sizes near the bar unseparated:
            # a flat top is a tie that the equivalent set states; more rounds only cost time.
            # A round costs what the last one took where that was more than reckoned (inputs
            # built again for each block, a warm-up step, a busy machine: the decode sample's
            # rounds took 3x their steps where its KV caches did not stay resident).
            more = rounds_affordable(
                until - now, round_cost_s([steps_s[b] for b in open_ if b in steps_s],
                                          self.block_s),
                self.last_round_s, self.last_reckoned_s, cap - final_rounds)
            if not unsettled and cannot_separate(decision, open_, more):
                stop = RoundsStop.UNSEPARABLE
                break
            if not self.round(open_, steps_s):
                stop = RoundsStop.FAILED
                if len(set(candidates) - self.failed) < 2:
                    break
            final_rounds += 1
        return self.record(candidates, excluded, stop, time.monotonic() - started)

    def record(self, candidates: list[int], excluded: set[int], stop: RoundsStop,
               wall_s: float) -> DecisionRounds:
        """The rounds' record: every block, and each timed size's share of the fastest."""
        allowed = [b for b in candidates if b not in excluded and b not in self.failed]
        decision = paired_decision(self.blocks, allowed)
        reference = (decision.best if decision is not None
                     else fastest(self.blocks) or candidates[0])
        shares = paired_shares(self.blocks, reference)
        # Workers numbered in the order they timed: 0 is the sweep's own.
        serials = list(dict.fromkeys(b.worker for b in self.blocks))
        blocks = [dataclasses.replace(b, worker=serials.index(b.worker)) for b in self.blocks]
        return DecisionRounds(
            candidates=sorted(b for b in candidates if b not in self.failed),
            reference=reference, blocks=blocks,
            shares=[shares[b] for b in sorted(shares)], stopped_by=stop,
            block_s=self.block_s, seed=self.seed,
            workers=len({b.worker for b in self.blocks}), wall_s=wall_s,
            machine_drift=machine_drift(self.blocks),
            decided=decision is not None and decision.separated)


def rounds_drift(results: Sequence[BatchResult], blocks: Sequence[RoundBlock],
                 seconds_apart: float) -> DriftControl | None:
    """report.json ``run.drift`` from the rounds: each size the rounds timed, its plan
    timing against the median of its blocks in the last worker that timed it (and their
    order-statistic interval), the sweep's first size first. Their median change is how far
    the plan's sequential timings sat from the interleaved ones: the drift every interval
    of the run is widened by. None where the rounds timed no measured size.
    ``seconds_apart``: from the first size's plan timing to the middle of the rounds."""
    by_size = {r.batch_size: r for r in measured(results)}
    timings: list[ControlTiming] = []
    for size in sorted({b.batch_size for b in blocks}, key=lambda b: (b != min(by_size), b)):
        first = by_size.get(size)
        # In the last worker that timed it: a fresh process, as a user starts one (the
        # sweep's own has run every size; on ranks, the second launch's communication).
        last = max((b.worker for b in blocks if b.batch_size == size), default=0)
        mine = [b for b in blocks if b.batch_size == size and b.worker == last]
        if first is None or first.latency_s is None or not mine:
            continue
        latencies = [b.latency_s for b in mine]
        low, high = median_interval(latencies)
        faults = [b.page_faults_per_step for b in mine if b.page_faults_per_step is not None]
        shares = [b.communication_share for b in mine if b.communication_share is not None]
        timings.append(ControlTiming(
            size, first.latency_s.median, statistics.median(latencies), low, high,
            communication_share(first), statistics.median(shares) if shares else None,
            first.page_faults_per_step, statistics.median(faults) if faults else None))
    return drift_control(timings, max(seconds_apart, 0.0))
