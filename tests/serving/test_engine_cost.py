"""The engine's cost per step and the prefill fit (serving/engine_cost.py), the calibration's
plan (serving/engines/calibrate.py) and ``diagnose serve --engine``'s refusals: on
synthetic runs whose extra time is known, never a speed of this machine."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.records.engine import (
    Engine,
    EngineCost,
    EngineCostPoint,
    PrefillPoint,
    PrefillSource,
)
from batchscope.records.policy import Policy
from batchscope.serving.engine_cost import (
    MIN_STEP_SHARE,
    fastest_runs,
    fit_engine,
    fit_prefill,
    repeat_spreads,
    with_engine,
)
from batchscope.serving.engines import calibrate
from batchscope.serving.engines.calibrate import (
    MAX_REPEATS,
    calibration_caps,
    calibration_requests,
    measure_engine,
    prompt_lengths,
    settled,
)
from batchscope.serving.engines.runs import EngineMeasurement, EngineRun, ServedTiming
from batchscope.serving.requests import Request, TokenRange
from batchscope.serving.simulator import simulate
from batchscope.serving.step_time import fit_step_time
from batchscope.serving.whatif import WhatIfOptions, serving_plan, what_if
from tests.serving.conftest import decode_doc, decode_model

runner = CliRunner()


def test_prefill_line_is_recovered_from_its_points():
    points = [PrefillPoint(p, 0.004 + 0.0005 * p) for p in (48, 64, 80)]
    fit = fit_prefill(points)
    assert fit.source == PrefillSource.MODEL and fit.charged
    assert fit.fixed_s == pytest.approx(0.004) and fit.per_token_s == pytest.approx(0.0005)
    assert fit.prefill_s(100) == pytest.approx(0.054)
    assert fit.worst_error == pytest.approx(0.0, abs=1e-12)


def test_prefill_never_gets_faster_with_a_longer_prompt_and_one_point_is_all_per_token():
    falling = fit_prefill([PrefillPoint(10, 0.02), PrefillPoint(20, 0.01)])
    assert falling.per_token_s == 0.0 and falling.fixed_s == pytest.approx(0.015)
    one = fit_prefill([PrefillPoint(50, 0.01)])
    assert one.fixed_s == 0.0 and one.per_token_s == pytest.approx(0.0002)
    none = fit_prefill([])
    assert none.source == PrefillSource.NONE and not none.charged


def test_engine_cost_is_linear_between_its_points_and_flat_beyond():
    cost = EngineCost(Policy.CONTINUOUS, [EngineCostPoint(4, 0.010), EngineCostPoint(16, -0.002)])
    assert cost.step_s(1) == 0.010 and cost.step_s(32) == -0.002
    assert cost.step_s(10) == pytest.approx(0.004)
    assert EngineCost(Policy.STATIC, []).step_s(8) == 0.0


def test_a_negative_cost_never_takes_a_step_below_its_floor():
    step = with_engine(lambda rows, context: 0.1, EngineCost(
        Policy.STATIC, [EngineCostPoint(1, -1.0)]))
    assert step(4, 10) == pytest.approx(0.1 * MIN_STEP_SHARE)
    assert with_engine(lambda r, c: 0.1, None)(4, 10) == 0.1


def _requests(cap: int) -> list[Request]:
    return [Request(0.0, 40 + 8 * i, 6 + i % 3) for i in range(2 * cap)]


def _run(policy: Policy, cap: int, extra_s: float, prefill, *, slower: float = 0.0,
         startup_s: float = 0.0) -> EngineRun:
    """An engine run that took the model-only simulation plus ``extra_s`` every step."""
    step = fit_step_time(decode_model()).step_s
    requests = _requests(cap)
    sim = simulate(requests, policy, cap, step, None, prefill.prefill_s)
    span = max(s.finished_s for s in sim.served) + extra_s * sim.steps + slower
    return EngineRun(policy, cap, [ServedTiming(r, span, r.output_tokens) for r in requests],
                     forward_calls=sim.steps, forward_s=span / 2, startup_s=startup_s)


def _measurement(runs: list[EngineRun]) -> EngineMeasurement:
    return EngineMeasurement(Engine.TRANSFORMERS, "test", runs,
                             [PrefillPoint(40, 0.01), PrefillPoint(80, 0.02)],
                             max_output_tokens=32, repeats=2, wall_s=1.0)


def test_fit_engine_recovers_each_policys_extra_time_per_step():
    prefill = fit_prefill([PrefillPoint(40, 0.01), PrefillPoint(80, 0.02)])
    extra = {(Policy.STATIC, 2): 0.001, (Policy.STATIC, 8): 0.003,
             (Policy.CONTINUOUS, 2): 0.020, (Policy.CONTINUOUS, 8): 0.050}
    runs = [_run(p, c, x, prefill, startup_s=0.5 if p == Policy.CONTINUOUS else 0.0)
            for (p, c), x in extra.items()]
    runs.append(_run(Policy.STATIC, 2, 0.001, prefill, slower=5.0))  # a slow repeat: dropped
    step = fit_step_time(decode_model()).step_s
    calibration = fit_engine(step, prefill, _measurement(runs))
    static, cont = calibration.cost(Policy.STATIC), calibration.cost(Policy.CONTINUOUS)
    assert static is not None and cont is not None
    assert [p.extra_s for p in static.points] == pytest.approx([0.001, 0.003])
    # Two runs: the line goes through both, at their mean rows.
    assert [p.extra_s for p in cont.points] == pytest.approx([0.020, 0.050])
    assert len(calibration.points) == 4
    for point in calibration.points:
        # At a calibration point the fitted cost gives back the measured time: exactly for
        # static batches (every step has cap rows), closely for continuous ones (the cost
        # is fitted at the run's mean rows and charged at each step's own).
        exact = point.policy == Policy.STATIC
        assert point.simulated_s == pytest.approx(point.measured_s, rel=1e-9 if exact else 0.05)
        assert abs(point.error) <= (1e-9 if exact else 0.05)
        assert point.engine_share == pytest.approx(1 - point.model_only_s / point.measured_s)
        assert point.measured_tokens_per_s == pytest.approx(point.output_tokens
                                                            / point.measured_s)
    assert {p.startup_s for p in calibration.points if p.policy == Policy.CONTINUOUS} == {0.5}


def test_each_run_gives_one_point_at_its_mean_rows():
    prefill = fit_prefill([])
    # Static runs whose extra per step is 1 ms per row, but the middle one 6 ms off: kept,
    # as measured (at a cap calibrated, the simulation gives back what the engine did).
    runs = [_run(Policy.STATIC, 1, 0.001, prefill), _run(Policy.STATIC, 4, 0.010, prefill),
            _run(Policy.STATIC, 8, 0.008, prefill)]
    step = fit_step_time(decode_model()).step_s
    cost = fit_engine(step, prefill, _measurement(runs)).cost(Policy.STATIC)
    assert cost is not None
    assert [p.rows for p in cost.points] == [1.0, 4.0, 8.0]
    assert [p.extra_s for p in cost.points] == pytest.approx([0.001, 0.010, 0.008])
    assert cost.step_s(6) == pytest.approx(0.009)
    assert cost.step_s(100) == cost.step_s(8)  # flat beyond the rows calibrated


def test_fastest_runs_keeps_one_run_per_policy_and_cap():
    prefill = fit_prefill([])
    slow = _run(Policy.STATIC, 4, 0.0, prefill, slower=1.0)
    fast = _run(Policy.STATIC, 4, 0.0, prefill)
    assert fastest_runs([slow, fast]) == [fast]


def test_the_engines_cost_moves_the_simulation_and_can_rank_the_policies_the_other_way():
    report = decode_model()
    options = WhatIfOptions(rates_per_s=[50.0], requests=60, caps=[2, 8],
                            output_tokens=TokenRange(4, 8))
    plain = what_if(report, options)
    assert plain.engine is None and plain.prefill is not None
    assert plain.prefill.source == PrefillSource.NOT_TIMED
    # Continuous batching whose engine adds 0.5 s to every step: static wins.
    prefill = fit_prefill([])
    runs = [_run(Policy.STATIC, c, 0.0, prefill) for c in (2, 8)] + \
        [_run(Policy.CONTINUOUS, c, 0.5, prefill) for c in (2, 8)]
    slow = what_if(report, dataclasses.replace(options, engine=_measurement(runs)))
    assert slow.engine is not None and slow.prefill is not None
    assert slow.prefill.source == PrefillSource.MODEL  # the measurement's prefill points

    def best(result, policy):
        return max(r.throughput_tokens_per_s for r in result.runs if r.policy == policy)

    assert best(plain, Policy.CONTINUOUS) >= best(plain, Policy.STATIC)
    assert best(slow, Policy.CONTINUOUS) < best(slow, Policy.STATIC)
    # --prefill-ms-per-token wins over a timed prefill.
    option = what_if(report, dataclasses.replace(options, prefill_s_per_token=1e-3,
                                                 prefill_points=[PrefillPoint(10, 1.0)]))
    assert option.prefill is not None and option.prefill.source == PrefillSource.OPTION


def test_calibration_caps_requests_and_prompt_lengths():
    assert calibration_caps([16, 1, 2, 4, 8]) == [1, 4, 16]
    assert calibration_caps([8, 4]) == [1, 4, 8]
    assert calibration_caps([16, 4, 8, 32]) == [1, 4, 16, 32]
    stream = [Request(3.0, 10, 100), Request(5.0, 30, 5)]
    got = calibration_requests(stream, 2, 32)
    assert got == [Request(0.0, 10, 32), Request(0.0, 30, 5)] * 2
    assert prompt_lengths([Request(0, p, 1) for p in (50, 10, 30, 20)]) == [10, 30, 50]


def test_serving_plan_gives_the_streams_lengths_and_the_caps():
    report = decode_model()
    stream, caps = serving_plan(report, WhatIfOptions(requests=7, caps=[4, 2]))
    assert len(stream) == 7 and caps == [2, 4]
    assert {r.prompt_tokens for r in stream} == {128}  # the sweep's context


class _ScriptedEngine:
    """An engine driver whose runs take scripted spans: ``spans[(policy, cap)]`` in turn (the
    last repeated), so the calibration's repeat logic is checked without an engine."""

    def __init__(self, spans: dict[tuple[Policy, int], list[float]]):
        self.spans = spans
        self.served: list[tuple[Policy, int]] = []

    def load_engine_model(self, target):
        return object()

    def engine_version(self):
        return "scripted"

    def time_prefill(self, model, prompts):
        return [PrefillPoint(p, 1e-3) for p in prompts]

    def serve(self, model, policy, requests, cap):
        if all(r.output_tokens <= 2 for r in requests):  # the warm-up (outputs cut to 2)
            return EngineRun(policy, cap, [], 0, 0.0)
        script = self.spans[(policy, cap)]
        n = sum(1 for key in self.served if key == (policy, cap))
        self.served.append((policy, cap))
        span = script[min(n, len(script) - 1)]
        return EngineRun(policy, cap, [ServedTiming(r, span, r.output_tokens)
                                       for r in requests], 1, span)


def test_runs_whose_first_repeats_are_far_apart_are_run_again(monkeypatch):
    quiet, noisy = (Policy.STATIC, 4), (Policy.CONTINUOUS, 4)
    # Static at cap 4: 1.00 then 1.05 s (settled). Continuous at cap 4: 1.0 then 1.5 (50%
    # apart), then 1.3 (the two fastest still 30% apart), then 1.02 (settled at 2%).
    spans = {(p, c): [1.0, 1.05] for p in Policy for c in (1, 4)}
    spans[noisy] = [1.0, 1.5, 1.3, 1.02]
    driver = _ScriptedEngine(spans)
    monkeypatch.setattr(calibrate, "_driver", lambda engine: driver)
    measured = measure_engine(Engine.TRANSFORMERS, "decode.py",
                              [Request(0, 8, 4)] * 4, [4])
    assert driver.served.count(quiet) == 2 and driver.served.count(noisy) == MAX_REPEATS
    assert driver.served.count((Policy.STATIC, 1)) == 2  # cap 1 is calibrated too
    assert settled(measured.runs, *quiet) and settled(measured.runs, *noisy)
    # Never more than MAX_REPEATS: a run that never settles stops there.
    spans[noisy] = [1.0, 2.0, 3.0, 4.0, 5.0]
    driver = _ScriptedEngine(spans)
    monkeypatch.setattr(calibrate, "_driver", lambda engine: driver)
    measured = measure_engine(Engine.TRANSFORMERS, "decode.py", [Request(0, 8, 4)] * 4, [4])
    assert driver.served.count(noisy) == MAX_REPEATS and not settled(measured.runs, *noisy)
    # What the calibration records: the second-fastest over the fastest, and the runs.
    spreads = repeat_spreads(measured.runs)
    assert spreads[noisy] == (pytest.approx(1.0), MAX_REPEATS)
    assert spreads[quiet] == (pytest.approx(0.05), 2)


def test_after_round_runs_after_every_round_on_the_engines_model(monkeypatch):
    spans = {(p, c): [1.0, 1.05] for p in Policy for c in (1, 4)}
    spans[(Policy.CONTINUOUS, 4)] = [1.0, 1.5, 1.02]  # one more round, of that run only
    driver = _ScriptedEngine(spans)
    monkeypatch.setattr(calibrate, "_driver", lambda engine: driver)
    seen: list[tuple[object, int]] = []
    measured = measure_engine(Engine.TRANSFORMERS, "decode.py", [Request(0, 8, 4)] * 4, [4],
                              after_round=lambda model: seen.append((model,
                                                                     len(driver.served))))
    # After each of the two rounds of all four runs (4 served, then 8) and the third, of
    # the one run not yet settled (9).
    assert [served for _, served in seen] == [4, 8, 9]
    assert len({id(model) for model, _ in seen}) == 1
    assert measured.wall_s >= 0


@pytest.mark.parametrize("engine", [Engine.VLLM, Engine.SGLANG])
def test_a_gpu_engine_is_one_sentence_not_a_traceback(engine):
    with pytest.raises(UsageError, match="not supported yet"):
        measure_engine(engine, "decode.py", [Request(0, 8, 8)], [1])


@pytest.mark.parametrize("engine, words", [("vllm", "not supported yet"),
                                           ("tgi", "not an engine batchscope runs")])
def test_serve_with_an_engine_it_cannot_run_exits_4(tmp_path, engine, words):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc()))
    result = runner.invoke(tools_app, ["serve", str(report), "--engine", engine,
                                       "--requests", "10", "--rate", "1"])
    assert result.exit_code == 4, result.output
    (line,) = result.stderr.splitlines()[-1:]
    assert words in line
    assert not (tmp_path / "serving.json").exists()


def test_serve_without_a_model_to_time_charges_no_prefill_and_says_so(tmp_path):
    """decode.py does not exist: the report is simulated as before, prefill not charged."""
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc()))
    result = runner.invoke(tools_app, ["serve", str(report), "--requests", "10",
                                       "--rate", "1", "--output-tokens", "4:8"])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "serving.json").read_text())
    assert doc["prefill"]["source"] == "none" and doc["engine"] is None


def test_an_engine_that_fails_mid_calibration_is_one_sentence(monkeypatch):
    from types import SimpleNamespace

    from batchscope.serving.engines import calibrate

    def serve(model, policy, requests, cap):
        raise RuntimeError("paged cache exhausted\nsecond line")

    fake = SimpleNamespace(load_engine_model=lambda target: object(),
                           time_prefill=lambda model, lengths: [],
                           serve=serve, engine_version=lambda: "x")
    monkeypatch.setattr(calibrate, "_driver", lambda engine: fake)
    with pytest.raises(UsageError) as caught:
        measure_engine(Engine.TRANSFORMERS, "m.py", [Request(0, 8, 8)], [2])
    assert str(caught.value) == ("transformers failed serving the calibration's static batches "
                                 "at cap 1: RuntimeError: paged cache exhausted")


def test_step_times_that_cannot_be_simulated_are_one_sentence():
    prefill = fit_prefill([])
    run = _run(Policy.STATIC, 2, 0.0, prefill)
    with pytest.raises(UsageError, match="cannot be simulated"):
        fit_engine(lambda rows, context: float("nan"), prefill, _measurement([run]))
