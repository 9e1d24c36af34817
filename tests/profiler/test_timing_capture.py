"""The timing pass's stop rule, the capture pass's own event parser, and what the parent imports."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch
from torch import nn
from torch.autograd.profiler import profile, record_function

from batchscope.engine import policies
from batchscope.engine.clock import HostClock
from batchscope.engine.policies import median_ci_rel
from batchscope.engine.timer import block_steps_for
from batchscope.profiler.capture import (
    CAPTURE_STEPS,
    LONG_STEP_CAPTURE_STEPS,
    LONG_STEP_S,
    SHORT_STEP_CAPTURE_STEPS,
    STEP_TAG,
    VERY_LONG_STEP_S,
    capture_steps,
    parse_event_tree,
    parse_events,
    short_step_captures,
)
from batchscope.profiler.timing import MEASURE_MIN_STEPS, TimingConfig, time_steps
from tests.conftest import ROOT


def test_median_ci_uses_order_statistics() -> None:
    # n = 5: no inner rank covers 95% (P(Bin(5, 1/2) = 0) alone is 3%): the whole range
    assert median_ci_rel([1.0, 1.0, 1.1, 1.2, 1.2]) == pytest.approx((1.2 - 1.0) / 2 / 1.1)
    # n = 100: the 40th and 61st values (1-based; 0-based 39 .. 60) cover 96.5%, the 41st
    # and 60th 94.3%, around a median of 49.5
    values = [float(i) for i in range(100)]
    assert median_ci_rel(values) == pytest.approx((60 - 39) / 2 / 49.5)
    assert median_ci_rel([1.0]) == float("inf")


class _FakeClock:
    """Stands in for the host's clock (read through a HostClock): each step advances it by
    a set duration."""

    def __init__(self, durations: list[float]) -> None:
        self.now = 0.0
        self.durations = durations
        self.steps = 0

    def perf_counter(self) -> float:
        return self.now

    def step(self) -> None:
        self.now += self.durations[self.steps % len(self.durations)]
        self.steps += 1


def _timed(durations: list[float], config: TimingConfig) -> tuple[list[float], float]:
    clock = _FakeClock(durations)
    _, samples, _ = time_steps(clock.step, HostClock(read=clock.perf_counter), config)
    return samples, sum(samples)


def test_steady_steps_stop_at_the_minimum_time() -> None:
    # 1 ms steps with a ±1% wobble: the median is pinned at once, so the floor decides
    samples, total = _timed([0.00099, 0.001, 0.00101],
                            TimingConfig(measure_min_s=0.05, measure_max_s=1.0))
    assert 0.05 <= total < 0.05 * policies.CHECK_GROWTH + 0.002
    assert len(samples) >= MEASURE_MIN_STEPS


def test_slow_steps_take_fewer_samples_once_past_the_ceiling() -> None:
    samples, _ = _timed([0.5], TimingConfig())
    assert len(samples) == policies.LONG_MIN_STEPS  # 1.5 s is past the 1 s ceiling
    samples, _ = _timed([0.3], TimingConfig())
    assert len(samples) == 4  # 0.9 s after three: not yet past it
    # under the ceiling the minimum count holds, and a fixed time keeps it whatever the step
    samples, _ = _timed([0.1], TimingConfig())
    assert len(samples) == MEASURE_MIN_STEPS
    samples, _ = _timed([0.5], TimingConfig.fixed(0.2))
    assert len(samples) == MEASURE_MIN_STEPS


def test_fixed_time_measures_that_long() -> None:
    _, total = _timed([0.001], TimingConfig.fixed(0.3))
    assert 0.3 <= total < 0.302


def test_noisy_steps_run_to_the_ceiling() -> None:
    # a 4x spread between alternate steps never pins the median to ±3%
    _, total = _timed([0.001, 0.004], TimingConfig(measure_max_s=0.4))
    assert 0.4 <= total < 0.405


def test_fast_steps_are_timed_in_blocks_that_keep_their_hiccups() -> None:
    # 10 µs steps with a 100 µs hiccup every tenth: a loop of them sustains 19 µs a step,
    # the median single step says 10 µs
    durations = [10e-6] * 9 + [100e-6]
    clock = _FakeClock(durations)
    stats, samples, _ = time_steps(clock.step, HostClock(read=clock.perf_counter),
                                   TimingConfig(block_min_s=0.001))
    assert stats.block_steps == 100  # the warm-up's later half is mostly 10 µs steps
    assert stats.n == len(samples) * 100
    assert stats.median == pytest.approx(19e-6)
    assert len(samples) >= MEASURE_MIN_STEPS


def test_steps_as_long_as_a_block_are_timed_alone() -> None:
    clock = _FakeClock([0.002])
    stats, samples, _ = time_steps(clock.step, HostClock(read=clock.perf_counter),
                                   TimingConfig(block_min_s=0.001))
    assert stats.block_steps == 1 and stats.n == len(samples)
    assert block_steps_for(0.0005, 0.001) == 2


def test_the_step_cap_never_leaves_fewer_than_the_minimum_samples() -> None:
    clock = _FakeClock([1e-6])
    stats, samples, _ = time_steps(clock.step, HostClock(read=clock.perf_counter),
                                   TimingConfig(block_min_s=0.001, measure_max_steps=2000))
    assert len(samples) == MEASURE_MIN_STEPS and stats.n == MEASURE_MIN_STEPS * 1000


def _model_and_step() -> tuple[nn.Module, torch.Tensor]:
    model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.LayerNorm(32), nn.Linear(32, 4))
    return model.eval(), torch.randn(8, 16)


def test_own_event_parser_matches_torch_function_events() -> None:
    model, x = _model_and_step()
    with torch.inference_mode(), profile(use_cpu=True, record_shapes=True,
                                         use_kineto=True) as prof:
        for _ in range(2):
            with record_function(STEP_TAG):
                model(x)
    ours = parse_event_tree(prof.kineto_results.experimental_event_tree())
    torchs = parse_events(prof.function_events)
    assert len(ours) == len(torchs) == 2
    for a, b in zip(ours, torchs, strict=True):
        assert a.step_s == pytest.approx(b.step_s)
        assert [(o.name, o.input_shapes, o.depth) for o in a.ops] == \
            [(o.name, o.input_shapes, o.depth) for o in b.ops]
        assert [o.duration_s for o in a.ops] == pytest.approx([o.duration_s for o in b.ops])
        assert {"addmm", "relu", "native_layer_norm"} <= {o.name for o in a.ops}


def test_steps_captured_by_length_short_ones_for_longer_long_ones_without_warm_up() -> None:
    model, x = _model_and_step()
    calls = []

    def step() -> None:
        calls.append(1)
        model(x)

    with torch.inference_mode():
        short = capture_steps(step, lambda: None, torch.device("cpu"), step_s=0.05)
        assert len(short.steps) == CAPTURE_STEPS == 3 and len(calls) == 4  # warm-up dropped
        calls.clear()
        # A 1 ms step is profiled for about SHORT_CAPTURE_S: its op times are means over
        # enough steps to read a trend in them, not the noise of three.
        shorter = capture_steps(step, lambda: None, torch.device("cpu"), step_s=0.001)
        assert len(shorter.steps) == short_step_captures(0.001) == 30 == len(calls) - 1
        assert short_step_captures(1e-6) == SHORT_STEP_CAPTURE_STEPS
        calls.clear()
        explicit = capture_steps(step, lambda: None, torch.device("cpu"), n_steps=2,
                                 step_s=0.001)
        assert len(explicit.steps) == 2
        calls.clear()
        long = capture_steps(step, lambda: None, torch.device("cpu"), step_s=LONG_STEP_S)
        assert len(long.steps) == LONG_STEP_CAPTURE_STEPS == len(calls)
        calls.clear()
        longer = capture_steps(step, lambda: None, torch.device("cpu"),
                               step_s=VERY_LONG_STEP_S)
    assert len(longer.steps) == 1 == len(calls)  # a second step would add seconds


def _imports(code: str) -> str:
    return subprocess.run([sys.executable, "-c", code], cwd=ROOT, text=True, check=True,
                          capture_output=True).stdout.strip()


def test_the_sweeps_parent_process_never_imports_torch() -> None:
    code = ("import sys, batchscope, batchscope.cli, batchscope.api, batchscope.hardware; "
            "print('torch' in sys.modules)")
    assert _imports(code) == "False"


def test_dtype_names_are_the_workers_dtypes() -> None:
    from batchscope.profiler.worker import DTYPES
    from batchscope.profiler.worker_config import DTYPE_NAMES

    assert set(DTYPE_NAMES) == set(DTYPES)


@pytest.mark.slow
def test_neither_pass_imports_dynamo() -> None:
    code = """
import sys, torch
from batchscope.profiler.capture import capture_steps
from batchscope.profiler.counting import count_step
m = torch.nn.Linear(4, 4)
x = torch.randn(2, 4)
with torch.inference_mode():
    capture_steps(lambda: m(x), lambda: None, torch.device("cpu"))
    count_step(lambda: m(x), weights=m.parameters(), state=[x], root=m)
print("torch._dynamo" in sys.modules)
"""
    assert _imports(code).splitlines()[-1] == "False"
