"""The engine's own decode step, fitted from its timed forward calls (serving/engine_cost.py
``fit_engine_step``, records/engine.py ``EngineStep``): on synthetic calls whose times are
known, never a speed of this machine."""

from __future__ import annotations

import dataclasses

import pytest

from batchscope.records.engine import Engine, EngineStep, EngineStepPoint, PrefillPoint
from batchscope.records.policy import Policy
from batchscope.serving.engine_cost import (
    MIN_STEP_SHARE,
    fit_engine,
    fit_engine_step,
    fit_prefill,
    with_engine,
)
from batchscope.serving.engines.runs import (
    EngineMeasurement,
    EngineRun,
    ForwardTiming,
    ServedTiming,
)
from batchscope.serving.requests import Request
from batchscope.serving.simulator import simulate
from batchscope.serving.step_time import fit_step_time
from tests.serving.conftest import decode_model

PER_KV_S = 1e-7


def engine_step_s(rows: int, context: int) -> float:
    """The synthetic engine's true decode step: nothing like the sweep's."""
    return 0.010 + 0.002 * rows + PER_KV_S * rows * context


def _forwards(rows: int, contexts: range) -> list[ForwardTiming]:
    calls = [ForwardTiming(engine_step_s(rows, c), rows, rows, rows * c) for c in contexts]
    # A prefill call (more tokens than rows) and one call in a slow window: neither moves
    # the step.
    calls.append(ForwardTiming(1.0, rows, rows * 50, rows * 50))
    calls.append(ForwardTiming(engine_step_s(rows, contexts[0]) * 3, rows, rows,
                               rows * contexts[0]))
    return calls


def engine_run(policy: Policy, cap: int, prefill, forwards: bool = True) -> EngineRun:
    """A run that took exactly the simulation on the engine's own step."""
    requests = [Request(0.0, 40 + 8 * i, 6 + i % 3) for i in range(2 * cap)]
    sim = simulate(requests, policy, cap, engine_step_s, None, prefill.prefill_s)
    span = max(s.finished_s for s in sim.served)
    rows = [cap] if policy == Policy.STATIC else sorted(set(sim.step_rows))
    calls = [c for r in rows for c in _forwards(r, range(40, 90, 7))] if forwards else []
    return EngineRun(policy, cap, [ServedTiming(r, span, r.output_tokens) for r in requests],
                     forward_calls=sim.steps, forward_s=span * 0.9, forwards=calls)


def measurement(runs: list[EngineRun]) -> EngineMeasurement:
    return EngineMeasurement(Engine.TRANSFORMERS, "test", runs,
                             [PrefillPoint(40, 0.01), PrefillPoint(80, 0.02)],
                             max_output_tokens=32, repeats=2, wall_s=1.0)


def test_the_step_is_each_rows_median_call_plus_the_kv_it_read():
    step = fit_engine_step(Policy.STATIC, [engine_run(Policy.STATIC, c, fit_prefill([]))
                                           for c in (1, 4, 16)])
    assert step is not None and step.policy == Policy.STATIC
    assert step.per_kv_token_s == pytest.approx(PER_KV_S, rel=0.2)
    assert [p.rows for p in step.points] == [1, 4, 16]
    assert all(p.forwards == 9 for p in step.points)  # the 8 contexts and the slow call
    for rows in (1, 4, 16):
        assert step.step_s(rows, 60) == pytest.approx(engine_step_s(rows, 60), rel=0.01)


def test_no_decode_call_gives_no_step():
    run = engine_run(Policy.STATIC, 4, fit_prefill([]), forwards=False)
    assert fit_engine_step(Policy.STATIC, [run]) is None
    prefill_only = dataclasses.replace(run, forwards=[ForwardTiming(0.1, 4, 200, 200)])
    assert fit_engine_step(Policy.STATIC, [prefill_only]) is None


def test_the_step_is_linear_between_its_rows_flat_below_and_never_falls_beyond():
    step = EngineStep(Policy.CONTINUOUS, 0.0, [EngineStepPoint(2, 5, 0.010),
                                               EngineStepPoint(4, 5, 0.014),
                                               EngineStepPoint(8, 5, 0.013)])
    assert step.step_s(1, 100) == 0.010
    assert step.step_s(3, 100) == pytest.approx(0.012)
    assert step.step_s(6, 100) == pytest.approx(0.0135)
    assert step.step_s(16, 100) == 0.013  # the last line falls: held at the largest's step
    rising = EngineStep(Policy.STATIC, 1e-6, [EngineStepPoint(1, 1, 0.01),
                                             EngineStepPoint(2, 1, 0.02)])
    assert rising.step_s(4, 10) == pytest.approx(0.04 + 1e-6 * 40)
    assert EngineStep(Policy.STATIC, 0.0, [EngineStepPoint(4, 1, 0.02)]).step_s(16, 1) == 0.02
    with pytest.raises(ValueError, match="no timed forward call"):
        EngineStep(Policy.STATIC, 0.0, []).step_s(1, 1)


def test_the_calibration_keeps_the_engines_step_beside_the_sweeps():
    prefill = fit_prefill([PrefillPoint(40, 0.01), PrefillPoint(80, 0.02)])
    runs = [engine_run(p, c, prefill) for p in Policy for c in (1, 4, 16)]
    sweep_step = fit_step_time(decode_model()).step_s
    calibration = fit_engine(sweep_step, prefill, measurement(runs))
    assert {s.policy for s in calibration.steps} == set(Policy)
    for point in calibration.points:
        # The engine's own calls alone give back what the engine took; the sweep's step
        # does not, and its cost per step makes up the difference.
        assert point.engine_step_only_s == pytest.approx(point.measured_s, rel=0.03)
        assert abs(point.model_only_s / point.measured_s - 1) > 0.2
        assert abs(point.error) < 0.08
    # What is simulated is the sweep's step plus the cost, not the engine's step.
    cost = calibration.cost(Policy.STATIC)
    assert cost is not None
    for rows in (1, 4, 16):
        assert with_engine(sweep_step, cost)(rows, 64) == pytest.approx(max(
            sweep_step(rows, 64) + cost.step_s(rows), sweep_step(rows, 64) * MIN_STEP_SHARE))


def test_a_record_without_forward_calls_has_no_engine_step():
    prefill = fit_prefill([])
    runs = [engine_run(Policy.STATIC, c, prefill, forwards=False) for c in (1, 4)]
    calibration = fit_engine(fit_step_time(decode_model()).step_s, prefill, measurement(runs))
    assert calibration.steps == [] and calibration.step(Policy.STATIC) is None
    assert all(p.engine_step_only_s is None for p in calibration.points)


def test_an_engine_step_that_runs_below_zero_leaves_the_fit_whole():
    """Calls whose KV slope is steep and whose KV read was large: the line left after it
    is negative at short contexts, where the step would take no time. The fit stands on
    the sweep's step; the engine's own figure is left out."""
    prefill = fit_prefill([])
    run = engine_run(Policy.STATIC, 4, prefill, forwards=False)
    steep = dataclasses.replace(run, forwards=[ForwardTiming(0.01, 4, 4, 1000),
                                               ForwardTiming(0.03, 4, 4, 2000)])
    calibration = fit_engine(fit_step_time(decode_model()).step_s, prefill,
                             measurement([steep]))
    step = calibration.step(Policy.STATIC)
    assert step is not None and step.step_s(4, 10) < 0
    assert [p.engine_step_only_s for p in calibration.points] == [None]
    assert calibration.points[0].simulated_s > 0

