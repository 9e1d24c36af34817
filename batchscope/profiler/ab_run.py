"""Two model files, one run: the A/B mode of ``diagnose compare`` (``--ab``).

Two workers start, one per file, with the same options (device, dtype, mode, threads), each
with a short fixed timing pass (:meth:`TimingConfig.fixed`). Each first measures the batch
size once with the op breakdown: the counting pass gives its exact work (FLOPs, bytes, op
calls), the gate's noise-free evidence, and the step warms up. Then the two are timed in
``pairs`` pairs of blocks, one block each (``MeasureBatch(b, op_breakdown=False)``), base or
head first as a seeded draw decides (randomized interleaved trials; duet benchmarking,
Bulej et al., ICPE 2020). A pair's two blocks run seconds apart at most, so the drift of a
shared machine over minutes moves both alike and cancels in their ratio, and the random
order keeps a periodic disturbance from always hitting the same side. One worker times
while the other waits on its pipe, so the two never compete for the cores.

Nothing is judged here: :mod:`batchscope.reports.ab_compare` reads the
:class:`~batchscope.records.ab.ABMeasurement`.

Example:
    >>> m = run_ab(ABConfig("a.py", "b.py", WorkerConfig("a.py"), batch_size=8))  # doctest: +SKIP
    >>> [p.ratio for p in m.pairs]  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

from batchscope.errors import ModelFileError, NothingMeasuredError
from batchscope.profiler.protocol import (
    BatchDone,
    ContractError,
    LoadOom,
    MeasureBatch,
    Ready,
    WorkerDied,
    WorkerTimedOut,
)
from batchscope.profiler.supervisor import (
    WORKER_START_TIMEOUT_S,
    ProcessDied,
    ProcessHandle,
    death_status,
    load_oom_message,
)
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import BatchResult, ModelInfo, Status
from batchscope.records.ab import (
    INNER_INTERVAL_PAIRS,
    ABMeasurement,
    ABPair,
    ABSide,
    ABStop,
    ABStopKind,
    first_line,
)
from batchscope.records.run import DEFAULT_BATCH_TIMEOUT_S
from batchscope.records.work import work_count

# Pairs of blocks: 30 give the median ratio an order-statistic interval from the 10th to
# the 21st ratio (stats.median_interval's exact binomial ranks), enough to catch a 15% slower
# step in 95% of runs whose ratios scatter by 10% (reports/ab_compare.py), in ~20 s of timing
# at the default block on a 2-core VM.
DEFAULT_PAIRS = 30
# With 8 pairs or fewer the median's 95% interval is the pairs' whole range (the exact
# binomial ranks reach an inner one at 9: the 2nd to the 8th ratio), which one stalled block
# stretches as far as it likes: the judge needs at least 9.
MIN_PAIRS = INNER_INTERVAL_PAIRS
# Seconds of timed steps per block (then at least 5 samples, as every timing pass): short,
# so that a pair's two blocks sit close in time and drift over minutes cancels in the ratio.
DEFAULT_BLOCK_S = 0.2
SIDES = ("base", "head")
# Pairs of worker processes the pairs are split over, each pair of processes started afresh:
# a process's own speed can differ from the next one's for its whole life, which no
# interleaving inside one pair of processes cancels. MobileNet's batch 2 (issue 31) ran
# identical files at 0.86x and 2.03x in two pairs of processes, their pairs' ratios tight
# around each (a false regression); the judge reads the rounds apart
# (reports/ab_compare.py). Ten rounds make their medians samples of their own (nine or more
# give the median an inner interval): MobileNet's 15% slower copy was caught in 6 of 6
# trials (3 of 6 with three rounds) and identical files were never a regression, in ~40 s
# an A/B on the 2-core VM (docs/benchmarks.md, section 10).
DEFAULT_ROUNDS = 10


@dataclass
class ABConfig:
    """What to run: the two files, the options both share (``worker``: its model path and
    timing are replaced per side), the batch size, and the pairs."""

    base_path: str
    head_path: str
    worker: WorkerConfig
    batch_size: int
    pairs: int = DEFAULT_PAIRS
    block_s: float = DEFAULT_BLOCK_S
    seed: int = 0
    timeout_s: float = DEFAULT_BATCH_TIMEOUT_S
    rounds: int = DEFAULT_ROUNDS


# (pairs done, pairs asked): after the counting passes (0) and after each pair.
Progress = Callable[[int, int], None]


class _Side:
    """One side's worker and what it said when it started."""

    def __init__(self, label: str, path: str, config: WorkerConfig) -> None:
        self.label, self.path, self.config = label, path, config
        self.handle = ProcessHandle(config)
        self.model = ModelInfo(target=path)

    def restart(self) -> None:
        """A fresh worker process in place of this one (not yet ready)."""
        self.handle.stop(graceful=True)
        self.handle = ProcessHandle(self.config)

    def ready(self, deadline: float) -> None:
        """Wait for the worker's Ready.

        Raises:
            ModelFileError: the file breaks the contract (the sentence names the side).
            NothingMeasuredError: the model could not be loaded.
        """
        try:
            reply = self.handle.recv(deadline)
        except WorkerDied as exc:
            raise NothingMeasuredError(
                f"the {self.label} worker died while loading {self.path}: {exc}.") from None
        except WorkerTimedOut:
            raise NothingMeasuredError(
                f"loading the {self.label} model {self.path} took longer than "
                f"{WORKER_START_TIMEOUT_S:.0f} s.") from None
        if isinstance(reply, ContractError):
            raise ModelFileError(reply.message, detail=reply.detail)
        if isinstance(reply, LoadOom):
            raise NothingMeasuredError(f"{self.label}: {load_oom_message(reply)}")
        if not isinstance(reply, Ready):
            raise NothingMeasuredError(f"the {self.label} worker sent {type(reply).__name__} "
                                       "before it was ready.")
        self.model = reply.model

    def measure(self, request: MeasureBatch, timeout_s: float) -> BatchResult:
        """One batch size measured by this side's worker; a death or a timeout is the
        result's status (the worker is gone after either).

        Raises:
            ModelFileError: at the first step, the file breaks the contract.
        """
        deadline = time.monotonic() + timeout_s
        try:
            self.handle.send(request)
            while True:
                reply = self.handle.recv(deadline)
                if isinstance(reply, BatchDone):
                    return reply.result
                if isinstance(reply, ContractError):
                    raise ModelFileError(reply.message, detail=reply.detail)
        except WorkerDied as exc:
            code = exc.exitcode if isinstance(exc, ProcessDied) else None
            status, why = death_status(code)
            return BatchResult(request.batch_size, status, error=why)
        except WorkerTimedOut:
            self.handle.stop(graceful=False)
            return BatchResult(request.batch_size, Status.TIMEOUT,
                               error=f"no result within {timeout_s:.0f} s")


def side_config(template: WorkerConfig, path: str, block_s: float) -> WorkerConfig:
    """The worker options of one side: ``template``'s, this file, a fixed short timing and
    no breakdown unless asked (the counting pass asks)."""
    return dataclasses.replace(template, model_path=path, timing=TimingConfig.fixed(block_s),
                               op_breakdown=False, trace_dir=None, callables=None)


def run_ab(config: ABConfig, progress: Progress | None = None) -> ABMeasurement:
    """Count each side's work at the batch size, then time the pairs; the workers are
    stopped however it ends. An interrupt (Ctrl-C) keeps the pairs timed so far
    (``stop`` says so: :attr:`ABStopKind.INTERRUPTED`, on which the CLI exits 2).

    Raises:
        ModelFileError: a file breaks the contract (exit 4).
        NothingMeasuredError: a side could not be loaded, or the base could not run the
            batch size (exit 5). A head that cannot run it is a result (the verdict's
            regression), not an error.
    """
    started = time.monotonic()
    paths = (config.base_path, config.head_path)
    sides: list[_Side] = []
    try:
        for label, path in zip(SIDES, paths, strict=True):
            sides.append(_Side(label, path, side_config(config.worker, path, config.block_s)))
        deadline = time.monotonic() + WORKER_START_TIMEOUT_S
        for side in sides:  # both load at once; each is read in turn
            side.ready(deadline)
        base, head = sides
        records = []
        for side in sides:
            result = side.measure(MeasureBatch(config.batch_size, first_step=True,
                                               op_breakdown=True), config.timeout_s)
            latency = result.latency_s.median if result.latency_s else None
            records.append(ABSide(side.path, side.model, result.status,
                                  result.error, work_count(result), latency))
        measurement = ABMeasurement(config.batch_size, records[0], records[1],
                                    config.block_s, config.seed, pairs_asked=config.pairs,
                                    rounds=max(1, min(config.rounds, config.pairs)))
        if records[0].status != Status.OK:
            raise NothingMeasuredError(
                f"the base ({config.base_path}) could not run batch {config.batch_size}: "
                f"{records[0].status.value}, {first_line(records[0].error)}.")
        if records[1].status == Status.OK:
            _time_pairs(config, base, head, measurement, progress)
        measurement.wall_s = time.monotonic() - started
        return measurement
    finally:
        for side in sides:
            side.handle.stop(graceful=True)


def _time_pairs(config: ABConfig, base: _Side, head: _Side, measurement: ABMeasurement,
                progress: Progress | None) -> None:
    """Time ``config.pairs`` pairs into ``measurement.pairs``, in seeded random order; a
    failed block or an interrupt ends them (``measurement.stop`` says which)."""
    rng = random.Random(config.seed)
    request = MeasureBatch(config.batch_size, first_step=False, op_breakdown=False)
    if progress:
        progress(0, config.pairs)
    rounds = measurement.rounds
    i = 0
    try:
        for i in range(config.pairs):
            round_ = i * rounds // config.pairs
            if i and round_ != (i - 1) * rounds // config.pairs:
                failed = _fresh_workers(config, (base, head))
                if failed is not None:  # the pairs timed so far stand
                    side, result = failed
                    kind = ABStopKind.HEAD_FAILED if side is head else ABStopKind.BASE_FAILED
                    measurement.stop = ABStop(kind, i + 1, result.status, result.error)
                    return
            head_first = rng.random() < 0.5
            latency: dict[str, float] = {}
            for side in (head, base) if head_first else (base, head):
                result = side.measure(request, config.timeout_s)
                if result.status != Status.OK or result.latency_s is None:
                    kind = ABStopKind.HEAD_FAILED if side is head else ABStopKind.BASE_FAILED
                    measurement.stop = ABStop(kind, i + 1, result.status, result.error)
                    if side is head:
                        measurement.head.status = result.status
                        measurement.head.error = result.error
                    return
                latency[side.label] = result.latency_s.median
            measurement.pairs.append(ABPair(i, head_first, latency["base"], latency["head"],
                                            round=round_))
            if progress:
                progress(i + 1, config.pairs)
    except KeyboardInterrupt:
        measurement.stop = ABStop(ABStopKind.INTERRUPTED, i + 1)


def _fresh_workers(config: ABConfig, sides: tuple[_Side, _Side]
                   ) -> tuple[_Side, BatchResult] | None:
    """Both sides in new worker processes, loaded at once and warmed up at the batch size
    (its first step, untimed here) before the next round's pairs; the side that could not
    be loaded again or warmed up, and why (None: both are ready)."""
    for side in sides:
        side.restart()
    deadline = time.monotonic() + WORKER_START_TIMEOUT_S
    warm = MeasureBatch(config.batch_size, first_step=True, op_breakdown=False)
    for side in sides:
        try:
            side.ready(deadline)
            result = side.measure(warm, config.timeout_s)
        except (NothingMeasuredError, ModelFileError) as exc:
            result = BatchResult(config.batch_size, Status.KILLED, error=str(exc))
        if result.status != Status.OK:
            return side, result
    return None
