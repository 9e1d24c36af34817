"""A simulated machine for the decision logic's tests: each batch size's true throughput,
the machine's speed over time (a level, a trend, a step change, bursts), each worker
process's own speed, and the noise of one timing. Seeded: the same seed gives the same
timings on any machine, so the tests check the logic, never a speed of this one."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from batchscope.profiler.protocol import MeasureBatch
from batchscope.profiler.rounds_run import RoundsRun
from batchscope.profiler.timing import latency_stats
from batchscope.records import BatchResult, Status
from batchscope.records.rounds import DecisionRounds, RoundBlock

# Throughput curves (units/s by batch size) of the three shapes the issues name.
DECODE = {1: 26.0, 2: 51.0, 4: 99.0, 8: 185.0, 16: 310.0, 32: 420.0, 64: 470.0, 128: 480.0,
          256: 470.0}
FLAT_CNN = {1: 50.0, 2: 52.0, 4: 53.0, 8: 52.5}
MLP = {1: 3500.0, 2: 6800.0, 4: 13000.0, 8: 24000.0, 16: 40000.0, 32: 60000.0,
       64: 75000.0, 128: 80000.0, 256: 81000.0}


@dataclass
class Machine:
    """How fast the machine runs each size at each moment.

    Attributes:
        curve: each size's true throughput (units a second, one unit a row).
        speed: the machine's speed at a time (1: as the curve says; 0.2: five times slower).
        process_sigma: each worker process's own speed, log-normal around 1, for its life.
        block_sigma: the noise of one block's median.
        size_in_process: one size's own speed in one worker process, for its life (a
            BLAS path one process takes and the next does not): (worker, size) -> factor.
    """

    rng: random.Random
    curve: dict[int, float]
    speed: Callable[[float], float] = lambda _t: 1.0
    process_sigma: float = 0.03
    block_sigma: float = 0.03
    size_in_process: Callable[[int, int], float] = lambda _worker, _b: 1.0
    _process: dict[int, float] = field(default_factory=dict)

    def latency_s(self, batch_size: int, at_s: float, worker: int = 0) -> float:
        """One block's median step of ``batch_size`` at ``at_s`` in ``worker``."""
        own = self._process.setdefault(worker,
                                       math.exp(self.rng.gauss(0.0, self.process_sigma)))
        step = batch_size / self.curve[batch_size]
        own *= self.size_in_process(worker, batch_size)
        return step / (self.speed(at_s) * own) * math.exp(self.rng.gauss(0.0, self.block_sigma))

    def timed(self, batch_size: int, at_s: float, worker: int = 0, samples: int = 30
              ) -> BatchResult:
        """A sequential timing pass at ``at_s``: ``samples`` steps around the block's step."""
        step = self.latency_s(batch_size, at_s, worker)
        stats = latency_stats([step * math.exp(self.rng.gauss(0.0, 0.02))
                               for _ in range(samples)])
        return BatchResult(batch_size, Status.OK, latency_s=stats,
                           throughput_per_s=batch_size / stats.median, wall_s=1.0)


def sweep(machine: Machine, sizes: Sequence[int], seconds_per_size: float = 10.0
          ) -> list[BatchResult]:
    """The plan: every size timed once, one after another, ``seconds_per_size`` apart."""
    return [machine.timed(b, i * seconds_per_size) for i, b in enumerate(sizes)]


def rounds(machine: Machine, sizes: Sequence[int], rng: random.Random, *, start_s: float,
           per_worker: int = 5, workers: int = 2, block_gap_s: float = 0.3) -> list[RoundBlock]:
    """Interleaved rounds of ``sizes``: ``per_worker`` rounds in each worker, each round's
    order shuffled, blocks ``block_gap_s`` apart."""
    out: list[RoundBlock] = []
    at = start_s
    index = 0
    for worker in range(workers):
        for _ in range(per_worker):
            order = list(sizes)
            rng.shuffle(order)
            for position, b in enumerate(order):
                out.append(RoundBlock(index, worker, position, b,
                                      machine.latency_s(b, at, worker), 5, at))
                at += block_gap_s
            index += 1
    return out


@dataclass
class FakeHost:
    """A worker on a simulated machine, for :class:`~batchscope.profiler.rounds_run.RoundsRun`:
    each block's latency from ``machine`` at the fake clock, which every block moves on;
    ``fail`` sizes die; a fresh worker gets a new serial (and its own process speed)."""

    machine: Machine
    worker_serial: int = 1
    clock_s: float = 0.0
    fail: set[int] = field(default_factory=set)
    requests: list[MeasureBatch] = field(default_factory=list)
    fresh: int = 0

    def request_block(self, request: MeasureBatch) -> BatchResult:
        self.requests.append(request)
        self.clock_s += 0.2
        b = request.batch_size
        if b in self.fail:
            return BatchResult(b, Status.OOM, error="out of memory")
        step = self.machine.latency_s(b, self.clock_s, self.worker_serial)
        return BatchResult(b, Status.OK, latency_s=latency_stats([step] * 5),
                           throughput_per_s=b / step)

    def fresh_worker(self) -> bool:
        self.fresh += 1
        self.worker_serial += 1
        return True


def sweep_and_rounds(machine: Machine, rng: random.Random) -> tuple[list[BatchResult],
                                                                      DecisionRounds]:
    """A whole run: the plan over every size of the curve, then the real decision rounds
    (:class:`~batchscope.profiler.rounds_run.RoundsRun`: its candidates, its widening, its
    stop) against a host that plays the worker on ``machine``."""
    sizes = sorted(machine.curve)
    results = sweep(machine, sizes)
    host = FakeHost(machine, clock_s=len(sizes) * 10.0)
    record = RoundsRun(host, seed=rng.randrange(2**31)).decide(results, set(), deadline=None)
    assert record is not None
    return results, record
