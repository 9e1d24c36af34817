"""Intervals and the decisions that read them, on seeded synthetic runs: what two runs of the
same code on a drifting machine give (their picks from paired rounds), never a speed of
this one."""

from __future__ import annotations

import itertools
import math
import random

import pytest

from batchscope.classifiers.recommend import recommend
from batchscope.classifiers.uncertainty import (
    DRIFT_FLOOR,
    drift_allowance,
    equivalent_batch_sizes,
    knee_interval,
    pick_within_noise,
    with_intervals,
)
from batchscope.plan import Limits, Plan, plateaued
from batchscope.profiler.protocol import MeasureBatch
from batchscope.profiler.rounds_run import RoundsRun, rounds_drift
from batchscope.profiler.timing import latency_stats
from batchscope.records import BatchResult, Interval, LatencyStats, Status
from batchscope.records.noise import control_timing, drift_control, latency_interval
from batchscope.records.rounds import (
    DecisionRounds,
)

# Throughput curves (units/s by batch size) of the three shapes the issue names.
DECODE = {1: 26.0, 2: 51.0, 4: 99.0, 8: 185.0, 16: 310.0, 32: 420.0, 64: 470.0, 128: 480.0,
          256: 470.0}
FLAT_CNN = {1: 50.0, 2: 52.0, 4: 53.0, 8: 52.5}
MLP = {1: 3500.0, 2: 6800.0, 4: 13000.0, 8: 24000.0, 16: 40000.0, 32: 60000.0,
       64: 75000.0, 128: 80000.0, 256: 81000.0}


def _measured(rng: random.Random, b: int, throughput: float, speed: float) -> BatchResult:
    """One batch size timed: 30 samples around its step at the machine's ``speed`` now."""
    step = b / throughput / speed
    samples = [step * math.exp(rng.gauss(0.0, 0.03)) for _ in range(30)]
    stats = latency_stats(samples)
    return BatchResult(b, Status.OK, latency_s=stats, throughput_per_s=b / stats.median)


def _run(rng: random.Random, curve: dict[int, float]
         ) -> tuple[list[BatchResult], float, DecisionRounds]:
    """A sweep on a machine whose speed wanders: a level of its own each run, a trend of up
    to ±12% over the run, ±6% from one timing pass to the next, and each size ±3% of its
    own in each worker process; then its decision rounds (the real ones, over two workers;
    see Host). (Its results with intervals, the allowance, the rounds.)"""
    level = rng.uniform(0.85, 1.15)
    trend = rng.uniform(-0.12, 0.12)
    own = [{b: math.exp(rng.gauss(0.0, 0.03)) for b in curve} for _ in range(2)]
    sizes = sorted(curve)

    def speed(at: float) -> float:
        return level * (1 + trend * at) * math.exp(rng.gauss(0.0, 0.06))

    results = [_measured(rng, b, curve[b] * own[0][b], speed(i / (len(sizes) - 1)))
               for i, b in enumerate(sizes)]

    class Host:
        """The worker of the real rounds (RoundsRun: its candidates, widening and stop):
        blocks a fraction of a second apart, so the machine's speed wanders slowly from one
        to the next (1% a block, a random walk from its speed at the run's end) and each
        block's own noise is ±3%."""

        worker_serial = 0
        now = speed(1.0)

        def request_block(self, request: MeasureBatch) -> BatchResult:
            b = request.batch_size
            self.now *= math.exp(rng.gauss(0.0, 0.01))
            step = b / (curve[b] * own[self.worker_serial % 2][b] * self.now)
            step *= math.exp(rng.gauss(0.0, 0.03))
            return BatchResult(b, Status.OK, latency_s=latency_stats([step] * 5),
                               throughput_per_s=b / step)

        def fresh_worker(self) -> bool:
            self.worker_serial += 1
            return True

    rounds = RoundsRun(Host(), seed=rng.randrange(2**31)).decide(results, set(), None)
    assert rounds is not None
    control = rounds_drift(results, rounds.blocks, 30.0)
    allowance = drift_allowance(control)
    assert control is not None
    return [with_intervals(r, allowance, control.timing(r.batch_size)) for r in results], \
        allowance, rounds


@pytest.mark.parametrize("curve", [DECODE, FLAT_CNN, MLP], ids=["decode", "flat-cnn", "mlp"])
def test_two_runs_of_the_same_code_land_in_each_others_equivalent_set(curve):
    rng = random.Random(7)
    runs = []
    for _ in range(10):
        results, allowance, rounds = _run(rng, curve)
        choice = recommend(results, Limits(), allowance=allowance, rounds=rounds)
        assert choice is not None and choice.batch_size in choice.equivalent_batch_sizes
        runs.append((choice.batch_size, set(choice.equivalent_batch_sizes)))
    pairs = list(itertools.permutations(runs, 2))
    inside = sum(pick in other for (pick, _), (_, other) in pairs)
    assert inside / len(pairs) >= 0.9
    picks = [pick for pick, _ in runs]
    # The same pick in half the runs at least: DECODE's 32 gives 87.5% of the best, under
    # the 90% bar by less than the workers' ±3%, so it is picked in about half the runs
    # (and lies in every run's equivalent set); MLP's and FLAT_CNN's picks hold in 9-10.
    assert max(picks.count(p) for p in set(picks)) >= 5


def test_the_set_holds_every_size_noise_cannot_tell_from_the_rule_and_no_other():
    points = {1: (50.0, Interval(45.0, 56.0)), 2: (54.0, Interval(49.0, 60.0)),
              4: (58.0, Interval(52.0, 64.0)), 8: (30.0, Interval(28.0, 33.0))}
    # 90% of the bottom of the best's interval (52) is 46.8: 8 (at most 33) is out.
    assert equivalent_batch_sizes(points, 0.9) == [1, 2, 4]
    # The pick's bar is 90% of the best median (58): 52.2, which 1 (at most 56) reaches.
    assert pick_within_noise(points, 0.9) == 1
    # Narrow intervals separate them: 1 (at most 50.5) is then below both bars.
    narrow = {b: (t, Interval(t * 0.99, t * 1.01)) for b, (t, _) in points.items()}
    assert pick_within_noise(narrow, 0.9) == 2
    assert equivalent_batch_sizes(narrow, 0.9) == [2, 4]


def test_a_speedup_inside_the_noise_has_an_interval_that_holds_one():
    flat = [with_intervals(_measured(random.Random(b), b, 50.0, 1.0), 0.10) for b in (1, 2, 4)]
    choice = recommend(flat, Limits(), allowance=0.10)
    assert choice is not None and choice.speedup_interval is not None
    assert choice.speedup_interval.contains(1.0)
    rising = [with_intervals(_measured(random.Random(b), b, 50.0 * b, 1.0), 0.05)
              for b in (1, 2, 4)]
    steep = recommend(rising, Limits(), allowance=0.05)
    assert steep is not None and steep.speedup_interval is not None
    assert steep.speedup_interval.low > 3.0
    assert steep.pick_share_of_best_interval is not None
    assert steep.pick_share_of_best_interval.contains(steep.pick_share_of_best or 0.0)


def test_the_drift_allowance_is_the_controls_never_below_the_floor():
    a = LatencyStats(0.010, 0.009, 0.011, 50)

    def timed(b: int, first: LatencyStats, again: LatencyStats):
        return control_timing(b, first, again)

    assert drift_allowance(None) == DRIFT_FLOOR
    calm = drift_control([timed(1, a, LatencyStats(0.0101, 0.009, 0.011, 50))], 5.0)
    assert drift_allowance(calm) == DRIFT_FLOOR
    drifted = drift_control([timed(1, a, LatencyStats(0.013, 0.012, 0.014, 50))], 5.0)
    assert drifted is not None and drifted.drift == pytest.approx(0.3)
    assert drift_allowance(drifted) == pytest.approx(0.3)
    # The median over the sizes timed again: the reference's 30% is one of three.
    three = drift_control([timed(1, a, LatencyStats(0.013, 0.012, 0.014, 50)),
                           timed(8, a, LatencyStats(0.0104, 0.01, 0.011, 50)),
                           timed(16, a, LatencyStats(0.0098, 0.009, 0.011, 50))], 5.0)
    assert three is not None and three.drift == pytest.approx(0.04)
    assert drift_control([], 5.0) is None
    # The interval is the samples' own widened by the allowance both ways.
    interval = latency_interval(LatencyStats(0.010, 0.009, 0.011, 50, median_low=0.0099,
                                             median_high=0.0102), 0.3)
    assert interval.low == pytest.approx(0.0099 / 1.3)
    assert interval.high == pytest.approx(0.0102 * 1.3)


def test_a_size_timed_again_spans_both_timings_not_the_runs_allowance():
    first = LatencyStats(0.010, 0.009, 0.011, 50, median_low=0.0099, median_high=0.0101)
    again = LatencyStats(0.012, 0.011, 0.013, 50, median_low=0.0118, median_high=0.0122)
    interval = latency_interval(first, 0.5, control_timing(8, first, again))
    assert interval.low == pytest.approx(0.0099 / (1 + DRIFT_FLOOR))
    assert interval.high == pytest.approx(0.0122 * (1 + DRIFT_FLOOR))


def test_the_knee_interval_is_seeded_and_holds_the_knee_of_the_medians():
    rng = random.Random(5)
    results = [with_intervals(_measured(rng, b, t, 1.0), 0.05) for b, t in DECODE.items()]
    first, again = knee_interval(results), knee_interval(results)
    assert first is not None and first == again
    choice_knee = 32.0  # where DECODE's step starts growing with the batch
    assert first.low < choice_knee * 2 and first.high > choice_knee / 2
    assert knee_interval(results[:2]) is None


def _at(b: int, throughput: float, faults: float | None = None) -> BatchResult:
    step = b / throughput
    return BatchResult(b, Status.OK, latency_s=LatencyStats(step, step, step, 30, median_low=step,
                                                            median_high=step),
                       throughput_per_s=throughput, page_faults_per_step=faults)


def test_one_noisy_low_point_does_not_stop_the_sweep_but_two_flat_ones_do():
    # 4 slow by noise, 8 back on the curve: the best of the two recent ones still rose.
    assert not plateaued([_at(1, 100.0), _at(2, 160.0), _at(4, 120.0), _at(8, 240.0)])
    assert plateaued([_at(1, 100.0), _at(2, 160.0), _at(4, 150.0), _at(8, 155.0)])


def test_sizes_slowed_by_page_faults_count_at_their_fault_free_speed():
    """GPT-2 decode on a 2-core VM: 169, 96.8, 132 tokens/s at 1, 2, 4, the drop being the
    allocator's page faults (buffers kept: 417 at 4). The plateau rule goes on."""
    slowed = [_at(1, 169.0), _at(2, 96.8, faults=2.0e4), _at(4, 132.0, faults=2.0e4)]
    # 4's step is 30 ms, 20k faults at 1 us are 20 ms of it: 396/s without them.
    assert not plateaued(slowed)
    assert plateaued([_at(1, 169.0), _at(2, 96.8), _at(4, 132.0)])
    plan = Plan(None, Limits(max_batch=8))
    assert plan.next_batch(slowed) == 8


def test_a_change_the_page_faults_moved_with_widens_no_other_interval():
    # Issue 31, MobileNet: timed again in a fresh worker, batches 1, 2 and 4 ran 2.4x, 10x
    # and 6.8x slower with tens of thousands of page faults a step where the sweep's worker
    # had few: the allocators differed, and a "drift" of 581% made every size equivalent.
    def timed(b, first_s, again_s, first_faults, again_faults):
        return control_timing(b, LatencyStats(first_s, first_s, first_s, 20),
                              LatencyStats(again_s, again_s * 0.98, again_s * 1.02, 20),
                              first_page_faults_per_step=first_faults,
                              control_page_faults_per_step=again_faults)

    allocator = [timed(1, 0.0134, 0.0325, 7_500.0, 26_000.0),
                 timed(2, 0.0066, 0.0669, 0.0, 55_000.0),
                 timed(4, 0.0177, 0.1204, 55.0, 95_000.0)]
    assert all(t.allocator_change() for t in allocator)
    control = drift_control(allocator, 60.0)
    assert control.drift == 0.0 and drift_allowance(control) == DRIFT_FLOOR
    # the size itself still spans both of its timings
    first = LatencyStats(0.0066, 0.0066, 0.0066, 20, median_low=0.0065, median_high=0.0067)
    band = latency_interval(first, drift_allowance(control), allocator[1])
    assert band.contains(0.0066) and band.contains(0.0669)
    # a change with the same faults is drift, as before
    machine = timed(1, 0.010, 0.013, 100.0, 120.0)
    assert not machine.allocator_change()
    mixed = drift_control([machine, *allocator[1:]], 60.0)
    assert mixed.drift == pytest.approx(0.3)
    # faults that moved the other way are not the allocator's doing
    assert not timed(1, 0.010, 0.020, 50_000.0, 0.0).allocator_change()
