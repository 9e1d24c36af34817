"""The engine's own cost per step and the model's prefill, fitted from what a real engine's
calibration runs measured (:class:`~batchscope.serving.engines.runs.EngineMeasurement`).

A calibration run serves requests that all arrive at once. The simulator serves the same
requests on the sweep's step times ``T(rows, context)`` and the prefill fit alone; whatever
the engine took beyond that, per simulated step, is its cost at the run's mean rows; between
the runs' mean rows the cost is linear, beyond them flat.
Every forward call of the model inside the engine is timed too: its decode calls give the
engine's own step (:func:`fit_engine_step`), kept beside the fit (what the same runs take
on it alone) but not simulated on: on the benchmark (docs/serving.md, runs 4 and 5) the
sweep's step plus the cost came as close to transformers' measured throughput or closer,
and the engine's step of continuous batching, whose calls hold every number of rows only a
few times each, came out uneven in the rows.
Each run is then simulated again with the cost added, and its error is kept beside it: at a
calibration point the error is the fit's own, and the benchmark (docs/serving.md) checks
the simulation on streams the calibration never saw.

Example:
    >>> calibration = fit_engine(step_model, prefill, measurement)  # doctest: +SKIP
    >>> calibration.cost(Policy.CONTINUOUS).step_s(8)  # doctest: +SKIP
    0.0021
"""

from __future__ import annotations

import math
import statistics

from batchscope.engine.policies import two_fastest_spread
from batchscope.errors import UsageError
from batchscope.records.engine import (
    CalibrationPoint,
    EngineCalibration,
    EngineCost,
    EngineCostPoint,
    EngineStep,
    EngineStepPoint,
    PrefillFit,
    PrefillPoint,
    PrefillSource,
)
from batchscope.records.policy import Policy
from batchscope.serving.engines.runs import EngineMeasurement, EngineRun
from batchscope.serving.simulator import Simulation, StepTime, simulate

# A step is never taken as faster than this share of the sweep's own step, whatever the
# engine's cost (a negative cost, where the engine's forward beats the sweep's, is bounded).
MIN_STEP_SHARE = 0.05
# The KV slope compares every two decode calls of one number of rows, at most this many
# calls of each (evenly spaced in KV read).
MAX_CALLS_PER_ROWS = 200


def fit_prefill(points: list[PrefillPoint], source: PrefillSource = PrefillSource.MODEL
                ) -> PrefillFit:
    """``fixed_s + per_token_s × prompt_tokens`` by least squares (one point: all per token);
    the slope is never negative (a longer prompt never prefills faster)."""
    if not points:
        return PrefillFit(PrefillSource.NONE)
    xs = [float(p.prompt_tokens) for p in points]
    ys = [p.measured_s for p in points]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    var = sum((x - mx) ** 2 for x in xs)
    if var > 0:
        slope = max(sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / var, 0.0)
        fixed = my - slope * mx
    else:
        slope, fixed = (my / mx if mx > 0 else 0.0), 0.0
    fit = PrefillFit(source, fixed_s=fixed, per_token_s=slope, points=list(points))
    errors = [abs(fit.prefill_s(p.prompt_tokens) / p.measured_s - 1)
              for p in points if p.measured_s > 0]
    return PrefillFit(source, fixed_s=fixed, per_token_s=slope, points=list(points),
                      worst_error=max(errors, default=None))


def with_engine(step_s: StepTime, cost: EngineCost | None) -> StepTime:
    """The sweep's step time plus the engine's cost at the step's rows."""
    if cost is None:
        return step_s

    def step(rows: int, context: int) -> float:
        model_s = step_s(rows, context)
        return max(model_s + cost.step_s(rows), model_s * MIN_STEP_SHARE)

    return step


def fit_engine_step(policy: Policy, runs: list[EngineRun]) -> EngineStep | None:
    """The engine's decode step from the decode forward calls of ``runs`` (one policy's):
    the time per KV position read is the median slope of call time on KV read between calls
    of one number of rows (never negative); at each number of rows the median call less
    that.
    None where no decode call was timed (a record from before calls were kept)."""
    by_rows: dict[int, list[tuple[int, float]]] = {}
    for run in runs:
        for call in run.forwards:
            if call.decode and call.duration_s > 0:
                by_rows.setdefault(call.rows, []).append((call.kv_tokens, call.duration_s))
    if not by_rows:
        return None
    # Theil-Sen: the median of the slopes between every two calls of one number of rows,
    # so a call that ran in a slow window does not tilt it (least squares did: one such call
    # at the shortest context took the slope below zero).
    slopes = []
    for calls in by_rows.values():
        spaced = sorted(calls)[::max(len(calls) // MAX_CALLS_PER_ROWS, 1)]
        slopes += [(t2 - t1) / (kv2 - kv1) for i, (kv1, t1) in enumerate(spaced)
                   for kv2, t2 in spaced[i + 1:] if kv2 != kv1]
    per_kv_s = max(statistics.median(slopes), 0.0) if slopes else 0.0
    points = [EngineStepPoint(rows, len(by_rows[rows]),
                              statistics.median(t - per_kv_s * kv for kv, t in by_rows[rows]))
              for rows in sorted(by_rows)]
    return EngineStep(policy, per_kv_s, points)


def _span_s(sim: Simulation) -> float:
    finished = [s.finished_s for s in sim.served if s.finished_s is not None]
    first = min(s.request.arrival_s for s in sim.served)
    return max(finished) - first if finished else math.inf


def _simulate(run: EngineRun, step_s: StepTime, prefill: PrefillFit, paged: bool = False
              ) -> Simulation:
    requests = [s.request for s in run.served]
    try:
        return simulate(requests, run.policy, run.cap, step_s, None,
                        prefill.prefill_s if prefill.charged else None, paged)
    except ValueError as exc:  # a step time out of range: the report's numbers are not
        raise UsageError(f"the report's step times cannot be simulated: {exc}.") from None


def repeat_spreads(runs: list[EngineRun]) -> dict[tuple[Policy, int], tuple[float, int]]:
    """Per policy and cap run more than once: its second-fastest repeat's time over its
    fastest's, minus 1 (how far the figure kept, the fastest, would move with the next best
    run: the same requests served again on the same machine), and how many runs it took."""
    spans: dict[tuple[Policy, int], list[float]] = {}
    for run in runs:
        spans.setdefault((run.policy, run.cap), []).append(run.span_s)
    return {key: (spread, len(v)) for key, v in spans.items()
            if (spread := two_fastest_spread(v)) is not None}


def fastest_runs(runs: list[EngineRun]) -> list[EngineRun]:
    """One run per policy and cap: the fastest of its repeats (noise only adds time)."""
    best: dict[tuple[Policy, int], EngineRun] = {}
    for run in runs:
        key = (run.policy, run.cap)
        if key not in best or run.span_s < best[key].span_s:
            best[key] = run
    return [best[k] for k in sorted(best, key=lambda k: (k[0] != Policy.STATIC, k[1]))]


def fit_engine(step_s: StepTime, prefill: PrefillFit,
               measurement: EngineMeasurement) -> EngineCalibration:
    """The engine's cost per step for each policy, and every calibration run measured
    beside simulated.

    Raises:
        UsageError: a calibration run served nothing, or its times are out of range.
    """
    runs = fastest_runs(measurement.runs)
    for run in runs:
        if not run.served or not 0 < run.span_s < math.inf:
            raise UsageError(f"the {measurement.engine.value} calibration run at cap {run.cap} "
                             f"({run.policy.value}) served no request in a measurable time.")
    steps = [step for policy in Policy
             if (step := fit_engine_step(policy, [r for r in runs if r.policy == policy]))]
    by_step = {s.policy: s for s in steps}
    alone = {(run.policy, run.cap): _simulate(run, step_s, prefill) for run in runs}
    costs = []
    for policy in Policy:
        mine = [(run, alone[(run.policy, run.cap)]) for run in runs if run.policy == policy]
        mine = [(run, sim) for run, sim in mine if sim.steps]
        if mine:
            costs.append(EngineCost(policy, _cost_points(mine)))
    by_policy = {c.policy: c for c in costs}
    spreads = repeat_spreads(measurement.runs)
    points = []
    for run in runs:
        key = (run.policy, run.cap)
        sim = alone[key]
        fitted = _simulate(run, with_engine(step_s, by_policy.get(run.policy)), prefill)
        model_only_s, simulated_s = _span_s(sim), _span_s(fitted)
        points.append(CalibrationPoint(
            policy=run.policy, cap=run.cap, requests=len(run.served),
            output_tokens=run.output_tokens, measured_s=run.span_s,
            engine_forward_calls=run.forward_calls, model_forward_s=run.forward_s,
            startup_s=run.startup_s, simulated_steps=sim.steps,
            model_only_s=model_only_s, simulated_s=simulated_s,
            mean_rows=sim.row_steps / sim.steps if sim.steps else 0.0,
            measured_tokens_per_s=run.output_tokens / run.span_s,
            simulated_tokens_per_s=run.output_tokens / simulated_s,
            error=run.span_s / simulated_s - 1,
            engine_share=max(1 - model_only_s / run.span_s, 0.0),
            repeat_spread=spreads[key][0] if key in spreads else None,
            runs=spreads[key][1] if key in spreads else 1,
            engine_step_only_s=_own_step_s(run, by_step.get(run.policy), prefill)))
    return EngineCalibration(
        engine=measurement.engine, engine_version=measurement.engine_version, costs=costs,
        points=points, max_output_tokens=measurement.max_output_tokens,
        repeats=measurement.repeats, wall_s=measurement.wall_s, steps=steps)


def _own_step_s(run: EngineRun, own: EngineStep | None, prefill: PrefillFit) -> float | None:
    """``run`` simulated on the engine's own decode step and the prefill alone: its KV in the
    calls' own terms (continuous batching's calls read each row's own cache: the rows' mean
    context; generate()'s a padded batch: the longest)."""
    if own is None:
        return None
    try:
        sim = _simulate(run, own.step_s, prefill, paged=run.policy == Policy.CONTINUOUS)
    except UsageError:  # a step of no time where the KV line runs below zero: no figure
        return None
    return _span_s(sim)


def _cost_points(runs: list[tuple[EngineRun, Simulation]]) -> list[EngineCostPoint]:
    """Each run's extra time per simulated step, at its mean rows (runs at one mean
    averaged), ascending: linear between them, flat beyond.

    One value per calibration run, so at the caps calibrated (by default the caps the
    what-if tries) the simulation reproduces what the engine measured there, whatever the
    sweep's own step at that size. Two alternatives measured worse on the benchmark
    (docs/serving.md): a least-squares line in the rows carried a sweep's slow batch size
    into the simulation (-23% at cap 4, +31% at cap 8 on one model), and a curve solved so
    each run's total is exact at every step's own rows swung by 20 ms from one cap to the
    next on the noise of 2-3 s runs."""
    by_rows: dict[float, list[float]] = {}
    for run, sim in runs:
        rows = round(sim.row_steps / sim.steps, 6)
        by_rows.setdefault(rows, []).append((run.span_s - _span_s(sim)) / sim.steps)
    return [EngineCostPoint(r, sum(v) / len(v)) for r, v in sorted(by_rows.items())]
