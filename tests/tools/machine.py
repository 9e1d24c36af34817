"""A simulated machine for the decision logic's tests: each batch size's true throughput,
the machine's speed over time (a level, a trend, a step change, bursts), each worker
process's own speed, and the noise of one timing. Seeded: the same seed gives the same
timings on any machine, so the tests check the logic, never a speed of this one."""

from __future__ import annotations

import math
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from batchscope.profiler.timing import latency_stats
from batchscope.records import BatchResult, Status
from batchscope.records.rounds import RoundBlock
from batchscope.rounds import decision_candidates

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
    """

    rng: random.Random
    curve: dict[int, float]
    speed: Callable[[float], float] = lambda _t: 1.0
    process_sigma: float = 0.03
    block_sigma: float = 0.03
    _process: dict[int, float] = field(default_factory=dict)

    def latency_s(self, batch_size: int, at_s: float, worker: int = 0) -> float:
        """One block's median step of ``batch_size`` at ``at_s`` in ``worker``."""
        own = self._process.setdefault(worker,
                                       math.exp(self.rng.gauss(0.0, self.process_sigma)))
        step = batch_size / self.curve[batch_size]
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


def sweep_and_rounds(machine: Machine, rng: random.Random, per_worker: int = 5
                     ) -> tuple[list[BatchResult], list[RoundBlock]]:
    """A whole run: the plan over every size of the curve, then the rounds of the
    candidates the real rule chooses from it."""
    sizes = sorted(machine.curve)
    results = sweep(machine, sizes)
    candidates = decision_candidates(results)
    blocks = rounds(machine, candidates, rng, start_s=len(sizes) * 10.0,
                    per_worker=per_worker)
    return results, blocks
