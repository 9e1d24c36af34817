"""Each stop policy's rule, read off a run's progress at set times: counts and rules, never
speeds (the samples here are numbers, not measurements)."""

from __future__ import annotations

import math

import pytest

from batchscope.engine import policies
from batchscope.engine.policies import (
    CHECK_GROWTH,
    LONG_MIN_STEPS,
    Adaptive,
    FixedCount,
    FixedTime,
    Progress,
    RepeatBudget,
    Settled,
    Spent,
    StoppedBy,
    two_fastest_spread,
)
from batchscope.engine.timer import Run
from batchscope.records import StoppedBy as RecordsStoppedBy

ADAPTIVE = Adaptive(min_samples=5, min_s=0.05, max_s=1.0, ci_rel=0.03, max_steps=5000)


def run_until_stopped(policy: policies.StopPolicy, step_s: float | list[float],
                      block: int = 1, limit: int = 100_000,
                      gap_s: float = 0.0) -> tuple[Run, int]:
    """Feed ``policy``'s run blocks of steps of ``step_s`` (or of each in turn) back to back
    (``gap_s`` between them, outside the blocks) until it stops; the run and the samples it
    took."""
    steps_s = step_s if isinstance(step_s, list) else [step_s]
    run, now = Run(policy, began_at=0.0, block_steps=block), 0.0
    for n in range(1, limit + 1):
        block_s = steps_s[(n - 1) % len(steps_s)] * block
        now += gap_s + block_s
        if run.add(block_s, now):
            return run, n
    raise AssertionError(f"{policy} never stopped in {limit} samples")


def test_records_speak_the_engines_stop_reasons() -> None:
    assert RecordsStoppedBy is StoppedBy  # one enum, re-exported as is


# -- Adaptive --------------------------------------------------------------------------------
def test_adaptive_stops_on_the_median_once_the_floor_is_passed() -> None:
    # steady 1 ms steps: the interval is pinned at once, so min_s (0.05 s: 50 steps) decides;
    # the first look past it is the 50th sample (looks at 5, then as the count grows)
    run, n = run_until_stopped(ADAPTIVE, 1e-3)
    assert run.stopped_by == StoppedBy.MEDIAN_CI
    assert 50 <= n < 50 * CHECK_GROWTH + 1


def test_adaptive_sorts_the_samples_only_at_its_checkpoints(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # a median that never settles: the interval is judged at 5 samples once past min_s,
    # then each time the count has grown by CHECK_GROWTH (a sort each time), never between
    looked: list[int] = []
    monkeypatch.setattr(policies, "median_ci_rel",
                        lambda values: looked.append(len(values)) or math.inf)
    judge = Adaptive(5, min_s=0.0, max_s=1.0, ci_rel=0.03, max_steps=5000).judge()
    progress = Progress(block_steps=1, began_at=0.0)
    for i in range(1, 30):
        progress.add(1e-3, i * 1e-3)
        assert judge.verdict(progress) == StoppedBy.NONE
    # 5, ceil(5 x 1.25) = 7, ceil(7 x 1.25) = 9, 12, 15, 19, 24
    assert looked == [5, 7, 9, 12, 15, 19, 24]


def test_adaptive_has_a_ceiling_a_step_cap_and_fewer_samples_past_the_ceiling() -> None:
    # a 4x spread between alternate steps never pins the median to ±3%
    ceiling = Adaptive(5, min_s=0.05, max_s=0.4, ci_rel=0.03, max_steps=5000)
    run, n = run_until_stopped(ceiling, [0.004, 0.016])
    assert run.stopped_by == StoppedBy.MAX_TIME and n == 40  # 20 x (4 + 16) ms = 0.4 s
    # 0.5 s steps: three are past the 1 s ceiling, and three then do
    run, n = run_until_stopped(ADAPTIVE, 0.5)
    assert (run.stopped_by, n) == (StoppedBy.MAX_TIME, LONG_MIN_STEPS)
    # 0.3 s: 0.9 s after three, so a fourth; past the ceiling at four
    assert run_until_stopped(ADAPTIVE, 0.3)[1] == 4
    # a 1,000-step block of 1 µs steps: the 2,000-step cap comes at two samples, but the
    # minimum of five samples holds
    capped = Adaptive(5, min_s=0.05, max_s=1.0, ci_rel=0.03, max_steps=2000)
    run, n = run_until_stopped(capped, [1e-6, 4e-6], block=1000)
    assert (run.stopped_by, n) == (StoppedBy.MAX_STEPS, 5)


# -- FixedTime -------------------------------------------------------------------------------
def test_fixed_time_runs_its_time_with_neither_a_cap_nor_an_early_stop() -> None:
    run, n = run_until_stopped(FixedTime(0.3, min_samples=5), 1e-3)
    assert (run.stopped_by, n) == (StoppedBy.MIN_TIME, 300)  # steady, yet all 0.3 s
    # 1 µs steps in blocks of 1,000: 300 samples, 300,000 steps, no step cap
    run, n = run_until_stopped(FixedTime(0.3, min_samples=5), 1e-6, block=1000)
    assert (run.stopped_by, n, run.progress.steps) == (StoppedBy.MIN_TIME, 300, 300_000)
    # a 0.5 s step against a 0.2 s time: still the minimum count, no long-step exception
    assert run_until_stopped(FixedTime(0.2, min_samples=5), 0.5)[1] == 5


# -- FixedCount ------------------------------------------------------------------------------
@pytest.mark.parametrize("step_s", [1e-6, 1e-3, 2.0])
def test_fixed_count_takes_exactly_its_samples_whatever_the_clock(step_s: float) -> None:
    run, n = run_until_stopped(FixedCount(7), step_s)
    assert (run.stopped_by, n) == (StoppedBy.SAMPLES, 7)
    # the ranks' count records what it always did (a fixed time of 0 s)
    ranks = FixedCount(7, reason=StoppedBy.MIN_TIME)
    assert run_until_stopped(ranks, step_s)[0].stopped_by == StoppedBy.MIN_TIME


# -- RepeatBudget ----------------------------------------------------------------------------
def test_a_repeat_budget_takes_its_least_then_stops_on_time_or_its_most() -> None:
    budget = RepeatBudget(min_repeats=3, max_repeats=10, min_time_s=0.05)
    assert run_until_stopped(budget, 1.0)[1] == 3  # long calls: the least still taken
    assert run_until_stopped(budget, 0.01)[1] == 5  # 5 x 10 ms = 0.05 s of wall time
    run, n = run_until_stopped(budget, 1e-4)
    assert (run.stopped_by, n) == (StoppedBy.MAX_STEPS, 10)


def test_a_repeat_budget_counts_wall_time_or_the_calls_own() -> None:
    # 10 ms calls with 40 ms between them (a barrier, fresh arguments): 50 ms of wall time a
    # sample, so the wall budget is spent at the least (2); the calls' own at the fifth
    wall = RepeatBudget(2, 25, 0.05, spent=Spent.WALL)
    sampled = RepeatBudget(2, 25, 0.05, spent=Spent.SAMPLED)
    assert run_until_stopped(wall, 0.01, gap_s=0.04)[1] == 2
    assert run_until_stopped(sampled, 0.01, gap_s=0.04)[1] == 5


def test_a_repeat_budget_stops_at_its_deadline_after_its_least() -> None:
    budget = RepeatBudget(3, 25, min_time_s=10.0, deadline=0.035)
    run, n = run_until_stopped(budget, 0.01)
    assert (run.stopped_by, n) == (StoppedBy.MAX_TIME, 4)  # the first sample past 35 ms
    with pytest.raises(ValueError, match="repeats"):
        RepeatBudget(5, 3, 0.1)


# -- Settled -------------------------------------------------------------------------------
def test_settled_stops_once_the_two_fastest_agree_or_at_its_most() -> None:
    rule = Settled(min_repeats=2, max_repeats=4, spread_rel=0.10)
    # 1.0 then 1.05: 1.05 / 1.0 - 1 = 5% apart, settled at the least
    run, n = run_until_stopped(rule, [1.0, 1.05])
    assert (run.stopped_by, n) == (StoppedBy.SETTLED, 2)
    # 1.0, 1.5 (50%), 1.3 (the two fastest 1.0 and 1.3: 30%), 1.02 (2%): settled at the 4th
    run, n = run_until_stopped(rule, [1.0, 1.5, 1.3, 1.02])
    assert (run.stopped_by, n) == (StoppedBy.SETTLED, 4)
    # 1.0, 2.0, 3.0, 4.0: 100% apart at every look, so its most ends it
    run, n = run_until_stopped(rule, [1.0, 2.0, 3.0, 4.0, 5.0])
    assert (run.stopped_by, n) == (StoppedBy.MAX_STEPS, 4)
    # one sample never agrees with itself: with a least of 1 the second decides
    run, n = run_until_stopped(Settled(1, 3, spread_rel=0.10), [1.0, 1.08])
    assert (run.stopped_by, n) == (StoppedBy.SETTLED, 2)
    assert rule.agree([1.3, 1.0, 1.05]) and not rule.agree([1.0])
    with pytest.raises(ValueError, match="repeats"):
        Settled(3, 2, spread_rel=0.10)


def test_the_two_fastest_spread_reads_the_fastest_two_in_any_order() -> None:
    assert two_fastest_spread([1.5, 1.0, 1.25]) == pytest.approx(0.25)  # 1.25 / 1.0 - 1
    assert two_fastest_spread([2.0]) is None and two_fastest_spread([]) is None
    assert two_fastest_spread([0.0, 1.0]) is None  # no ratio to a zero


# -- the window ------------------------------------------------------------------------------
def test_the_window_keeps_a_met_rule_going_and_says_so() -> None:
    # 8 samples of 50 µs are met long before a 1 s window: it runs to the window
    windowed = FixedCount(8, window_min_s=1.0)
    run, n = run_until_stopped(windowed, 50e-6, block=20)  # 1 ms blocks
    assert run.stopped_by == StoppedBy.NVML_WINDOW and run.progress.elapsed_s >= 1.0
    assert n == 1000  # the first block to close the window
    # a rule met at the sample that also closes the window keeps its own name
    run, n = run_until_stopped(FixedCount(2, window_min_s=1.0), 0.5)
    assert (run.stopped_by, n) == (StoppedBy.SAMPLES, 2)
    # and any policy takes a window: the adaptive ceiling came first here
    run, _ = run_until_stopped(Adaptive(5, 0.05, 0.3, 0.03, 5000, window_min_s=1.0),
                               [1e-3, 4e-3])
    assert run.stopped_by == StoppedBy.NVML_WINDOW and run.progress.elapsed_s >= 1.0


def test_a_run_cut_short_says_what_it_was_waiting_on() -> None:
    run = Run(FixedCount(3, window_min_s=1.0), began_at=0.0)
    run.add(0.1, 0.1)
    assert run.stopped_by == StoppedBy.NONE  # the rule not met yet
    run.add(0.1, 0.2)
    run.add(0.1, 0.3)
    assert run.stopped_by == StoppedBy.NVML_WINDOW  # met; the window kept it going
    assert run.result().measured_s == pytest.approx(0.3) and len(run.result().samples_s) == 3
