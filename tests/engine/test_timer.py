"""The one timer on a fake clock: what it calls, when, and how many times; never speeds."""

from __future__ import annotations

import gc

import pytest

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import FixedCount, RepeatBudget, Spent, StoppedBy
from batchscope.engine.timer import (
    PushTimer,
    Warmup,
    block_for,
    block_steps_for,
    sample,
    warm_up,
)
from batchscope.profiler.ranks import ONE_WARMUP_STEP
from batchscope.profiler.timing import time_steps


class FakeHost:
    """A host clock that moves only when told: a call costs ``call_s``, a sync ``sync_s``."""

    def __init__(self, call_s: float = 1e-3, sync_s: float = 0.0) -> None:
        self.now, self.call_s, self.sync_s = 0.0, call_s, sync_s
        self.log: list[str] = []

    def read(self) -> float:
        return self.now

    def call(self) -> None:
        self.log.append("call")
        self.now += self.call_s

    def sync(self) -> None:
        self.log.append("sync")
        self.now += self.sync_s

    def clock(self) -> HostClock:
        return HostClock(self.sync, self.read)


def test_a_sample_is_a_block_of_calls_then_one_sync() -> None:
    host = FakeHost(call_s=2e-3)
    sampled, observed = sample(host.call, host.clock(), FixedCount(3), block_steps=4)
    assert host.log == (["call"] * 4 + ["sync"]) * 3
    assert sampled.samples_s == pytest.approx([2e-3] * 3) and observed is None
    assert sampled.steps == 12
    assert sampled.stopped_by == StoppedBy.SAMPLES
    assert sampled.measured_s == pytest.approx(3 * 4 * 2e-3)


def test_the_monitor_spans_the_samples_and_gc_pauses_only_when_asked() -> None:
    host = FakeHost()
    gc_seen: list[bool] = []

    class Monitor:
        def start(self) -> None:
            host.log.append("start")

        def stop(self) -> str:
            host.log.append("stop")
            return "seen"

    def call() -> None:
        gc_seen.append(gc.isenabled())
        host.call()

    was = gc.isenabled()
    _, observed = sample(call, host.clock(), FixedCount(2), monitor=Monitor(), pause_gc=True)
    assert host.log == ["start", "call", "sync", "call", "sync", "stop"] and observed == "seen"
    assert gc_seen == [False, False] and gc.isenabled() == was  # restored as it was
    gc_seen.clear()
    sample(call, host.clock(), FixedCount(2))
    assert gc_seen == [was, was]


def test_what_runs_between_samples_is_outside_them_and_a_floor_holds() -> None:
    # a barrier of 5 ms before each 1 ms call: in the run's wall time, not in a sample
    host = FakeHost(call_s=1e-3)

    def barrier() -> None:
        host.log.append("barrier")
        host.now += 5e-3

    sampled, _ = sample(host.call, host.clock(), FixedCount(3), prepare=barrier)
    assert host.log == ["barrier", "call", "sync"] * 3
    assert sampled.samples_s == pytest.approx([1e-3] * 3)
    assert sampled.measured_s == pytest.approx(3 * 6e-3)
    # a clock that reads 0 for a call: each sample is the floor, over the block
    still = FakeHost(call_s=0.0)
    floored, _ = sample(still.call, still.clock(), FixedCount(2), block_steps=4, floor_s=1e-7)
    assert floored.samples_s == [pytest.approx(1e-7 / 4)] * 2


def test_a_repeat_budget_run_as_the_probes_and_the_ceilings_run_it() -> None:
    # (times in 1/128 s, exact in binary) the probes: the calls' own time, least 2, most
    # 25; what runs before each call (its arguments, a sync) is not counted
    tick = 1 / 128
    host = FakeHost(call_s=tick)

    def before() -> None:
        host.now += 2 * tick

    budget = RepeatBudget(2, 25, 5 * tick, spent=Spent.SAMPLED)
    probe, _ = sample(host.call, host.clock(), budget, prepare=before)
    assert (len(probe.samples_s), probe.stopped_by) == (5, StoppedBy.MIN_TIME)
    # counted in wall time instead, the two ticks between calls spend it by the least
    wall_budget = RepeatBudget(2, 25, 5 * tick, spent=Spent.WALL)
    assert len(sample(host.call, host.clock(), wall_budget, prepare=before)[0].samples_s) == 2
    # the ceilings: wall time and a deadline, blocks of two calls
    bench_host = FakeHost(call_s=tick)
    bench, _ = sample(bench_host.call, bench_host.clock(),
                      RepeatBudget(3, 25, 1.0, deadline=9 * tick), block_steps=2)
    assert (len(bench.samples_s), bench.stopped_by) == (5, StoppedBy.MAX_TIME)  # 10 ticks


def test_warm_up_takes_its_count_and_its_time_and_sizes_the_blocks() -> None:
    host = FakeHost(call_s=4e-3)
    assert warm_up(host.call, host.clock(), Warmup(2, 0.0)) == [4e-3, 4e-3]
    assert len(warm_up(host.call, host.clock(), Warmup(1, 0.02))) == 5  # 5 x 4 ms = 20 ms
    # the later half of the warm-up sizes the blocks (the first steps at a shape are slow)
    assert block_for([0.5, 30e-6, 30e-6], 0.001) == block_steps_for(30e-6, 0.001) == 34
    assert block_for([], 0.001) == 1


def test_the_ranks_time_exactly_one_warm_up_step_and_their_count() -> None:
    # every rank runs the same steps, whatever its clock says: 1 warm-up + n timed, alone
    for call_s in (1e-6, 0.3):
        host = FakeHost(call_s=call_s)
        count = FixedCount(7, reason=StoppedBy.MIN_TIME)
        stats, samples, _ = time_steps(host.call, host.clock(), ONE_WARMUP_STEP, policy=count)
        assert host.log.count("call") == 1 + 7 and len(samples) == 7
        assert (stats.block_steps, stats.n, stats.stopped_by) == (1, 7, StoppedBy.MIN_TIME)


def test_a_pushed_run_takes_blocks_and_rules_as_a_pulled_one() -> None:
    # watch's loop: 400 µs steps in blocks of 3, 8 samples, then a 1 s window
    timer = PushTimer(FixedCount(8, window_min_s=1.0), block_steps=3, began_at=0.0)
    assert timer.result() is None
    now, last, closed, steps = 0.0, 0.0, 0, 0
    while True:
        now += 400e-6
        steps += 1
        if not timer.closes_sample():
            continue
        closed += 1
        done = timer.add(last, now)
        last = now
        if done:
            break
    assert steps == 3 * closed and timer.steps == steps
    sampled = timer.result()
    assert sampled is not None and sampled.stopped_by == StoppedBy.NVML_WINDOW
    assert sampled.measured_s >= 1.0 and len(sampled.samples_s) == closed
    assert sampled.samples_s[0] == pytest.approx(400e-6)
    # without a window the count ends it, under its own name
    short = PushTimer(FixedCount(2), block_steps=1, began_at=0.0)
    assert (short.add(0.0, 0.1), short.add(0.1, 0.2)) == (False, True)
    assert short.result().stopped_by == StoppedBy.SAMPLES
