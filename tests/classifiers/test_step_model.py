"""The fitted step-time model on hand-checkable ops: a known curve must come back."""

from __future__ import annotations

import dataclasses

import pytest

from batchscope.classifiers.analyze import unmeasured_sizes
from batchscope.classifiers.step_model import (
    ALONE_SHARE,
    fit_power,
    fit_sizes,
    fit_step_model,
    plateau_overruled,
    predict,
    predicted_stop,
)
from batchscope.hardware.figures import CeilingDetails, MatmulFigures, MatmulSize
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.probe_plan import FIT_WINDOW, probe_specs
from batchscope.records import (
    BatchResult,
    ByteSplit,
    FlagKind,
    LatencyStats,
    OpStat,
    Status,
    StopKind,
)
from batchscope.records.noise import DRIFT_FLOOR
from batchscope.records.report import Assumption, AssumptionKind
from batchscope.reports.flag_text import assumption_text, stop_text

PEAK, BW = 200e9, 40e9  # ridge 5 FLOP/byte
CEIL = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": PEAK},
                bandwidth_bytes_per_s=BW, overhead_s=3e-6)
WEIGHTS = 4 * 10**6  # a 1000x1000 fp32 linear: 2e6 FLOP per row


def linear_time_s(b: int, memory_factor: float = 2.0, compute_factor: float = 1.5,
                  fixed_s: float = 20e-6) -> float:
    """The ground truth the fit must recover: fixed + max of the factored roofs."""
    return fixed_s + max(memory_factor * (WEIGHTS + 8000 * b) / BW,
                         compute_factor * 2e6 * b / PEAK)


def measured(b: int, framework_s: float = 1e-4, gelu_s: float = 5e-6,
             **truth: float) -> BatchResult:
    linear = linear_time_s(b, **truth)
    ops = [
        OpStat("fc:addmm#0", "addmm", [], "float32", "fc", 1, linear, 2 * 10**6 * b,
               ByteSplit(WEIGHTS, 0, 8000 * b)),
        OpStat("fc:view#0", "view", [], "float32", "fc", 1, 2e-6, 0, ByteSplit()),
        OpStat("act:gelu#0", "gelu", [], "float32", "act", 1, gelu_s, 8 * 1000 * b,
               ByteSplit(0, 0, 8000 * b)),
    ]
    step = linear + 2e-6 + gelu_s + framework_s
    return BatchResult(b, Status.OK, latency_s=LatencyStats(step, step, step, 5),
                       throughput_per_s=b / step, profiled_step_s=step, ops=ops,
                       op_time_s=step - framework_s)


def test_fit_recovers_a_memory_bound_op_and_predicts_where_it_turns_compute_bound():
    # Fitted on 1-8 (memory-bound: intensity < 5 below b = 10), the memory factor 2 and
    # fixed cost come back exactly; the compute side is unmeasured, so the op's kind has no
    # measured compute factor and it is assumed at the roof (no paths in these ceilings).
    results = [measured(b) for b in (1, 2, 4, 8)]
    model = fit_step_model(results, CEIL, [1, 2, 4, 8])
    curve = next(c for c in model.ops if c.name == "addmm")
    assert curve.memory_factor == pytest.approx(2.0, rel=1e-6)
    assert curve.fixed_s == pytest.approx(20e-6, rel=1e-4)
    assert curve.measured_sides == ("memory",)
    assert curve.compute_factor == 1.0
    assert model.assumptions == [Assumption(AssumptionKind.AT_ROOF, "matmul")]
    assert assumption_text(model.assumptions[0]) == ("matmul: never measured compute-bound; "
                                                     "assumed at the compute roof")
    # At 1024 the compute roof (1e-5 s a row) has long overtaken: the kernel-step rule
    # takes the memory factor to the fastest of its kind (2 here, the only one), and the
    # compute time at the roof is what binds.
    expected = 20e-6 + 1.0 * 2e6 * 1024 / PEAK
    assert curve.time_s(1024) == pytest.approx(expected, rel=1e-6)


def test_fit_across_the_ridge_measures_both_factors():
    results = [measured(b) for b in (4, 8, 16, 32, 64)]
    model = fit_step_model(results, CEIL, [4, 8, 16, 32, 64])
    curve = next(c for c in model.ops if c.name == "addmm")
    assert curve.measured_sides == ("compute", "memory")
    assert curve.memory_factor == pytest.approx(2.0, rel=1e-6)
    assert curve.compute_factor == pytest.approx(1.5, rel=1e-6)
    for b in (128, 1024):
        assert curve.time_s(b) == pytest.approx(linear_time_s(b), rel=1e-6)


def test_whole_step_prediction_matches_truth_beyond_the_fitted_window():
    truth = [measured(b) for b in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    model = fit_step_model(truth, CEIL)
    assert model.fitted_on == [64, 128, 256] == fit_sizes(truth)
    for r in truth[6:]:  # the fitted op is exact; framework and views are flat, as built
        assert model.latency_s(r.batch_size) == pytest.approx(r.latency_s.median, rel=0.02)
    # Below the window the op is memory-bound, a side the window never saw: its memory
    # factor is taken as its compute factor (1.5 for the true 2), so it is predicted faster.
    assert model.latency_s(1) < truth[0].latency_s.median
    assert model.latency_s(1024) == pytest.approx(linear_time_s(1024) + 2e-6 + 5e-6 + 1e-4,
                                                  rel=0.02)


def test_noise_does_not_become_a_trend_and_growth_is_at_most_linear():
    flat = fit_power([1, 2, 4, 8], [1.0e-4, 1.2e-4, 0.9e-4, 1.1e-4])
    assert flat.exponent == 0 and flat(1024) == pytest.approx(1.05e-4)  # their median
    # A dip under a tenth on a rise is noise on it (an op with no FLOP formula): it grows.
    assert fit_power([4, 8, 16], [1.0e-4, 2.1e-4, 2.05e-4]).exponent > 0.5
    # Up and down by more than NOISE_GROWTH (a regime change at batch 4, noise): no trend.
    noisy = fit_power([1, 2, 4, 8], [0.8e-4, 0.75e-4, 1.7e-4, 1.4e-4])
    assert noisy.exponent == 0 and noisy(1024) == pytest.approx(1.1e-4)
    # Risen at every size, unevenly: the scale is the points' least-squares one at the
    # exponent, not the largest point's alone (each is one size's profiled steps).
    rising = fit_power([1, 2, 4, 8], [1.0e-4, 1.1e-4, 1.3e-4, 2.0e-4])
    assert 0 < rising.exponent < 0.5
    assert 1.5e-4 < rising(8) < 2.0e-4
    grows = fit_power([1, 2, 4, 8], [1e-4, 2e-4, 4e-4, 8e-4])
    assert grows.exponent == pytest.approx(1.0) and grows(1024) == pytest.approx(1.024e-1)
    faster = fit_power([1, 2, 4], [1e-4, 4e-4, 16e-4])
    assert faster.exponent == 1.0  # capped: nothing here grows faster than the batch


def test_profiler_cost_is_taken_off_as_a_fixed_amount():
    # the profiled step ran 50 µs longer than the timed one
    results = [dataclasses.replace(r, profiled_step_s=r.latency_s.median + 50e-6)
               for r in (measured(b) for b in (1, 2, 4))]
    model = fit_step_model(results, CEIL)
    assert model.profiler_gap_s == pytest.approx(50e-6)
    assert model.latency_s(4) == pytest.approx(results[-1].latency_s.median, rel=0.01)


def test_each_measured_size_is_forecast_from_the_three_before_it():
    results = [measured(b) for b in (1, 2, 4, 8, 16, 32)]
    # batch 8 far off the curve
    results[3] = dataclasses.replace(results[3], latency_s=LatencyStats(1.0, 1.0, 1.0, 5))
    pred = predict(results, CEIL, [64, 128])
    by_b = {p.batch_size: p for p in pred.points}
    # 1, 2 and 4 have too few sizes before them; 8 is forecast from 1, 2, 4 and misses by
    # as much as it strays; 16 and 32 are forecast from windows that include it.
    assert sorted(by_b) == [8, 16, 32, 64, 128]
    assert by_b[8].predicted_from == [1, 2, 4] and by_b[16].predicted_from == [2, 4, 8]
    assert by_b[8].error == pytest.approx(by_b[8].predicted_latency_s / 1.0 - 1)
    assert by_b[8].predicted_latency_s == pytest.approx(measured(8).latency_s.median, rel=0.02)
    assert pred.max_abs_error == pytest.approx(max(abs(p.error) for p in pred.points
                                                   if p.error is not None))
    # The unmeasured ones from the three largest measured.
    assert pred.fitted_on == [8, 16, 32] == by_b[128].predicted_from
    assert by_b[64].measured_latency_s is None and by_b[64].error is None
    assert by_b[64].predicted_throughput_per_s == pytest.approx(
        64 / by_b[64].predicted_latency_s)
    assert pred.ceiling_sensitivity is None  # these ceilings record no repeats


def test_ceiling_spread_moves_the_prediction_where_the_roof_is_assumed():
    flops = 2 * 2048**3
    peak_row = MatmulSize(n=2048, flops_per_call=flops, repeats=5, median_s=2 * flops / PEAK,
                          best_s=flops / PEAK, worst_s=3 * flops / PEAK, spread=0.5, inner=1,
                          warmup_s=0.0, best_flops_per_s=PEAK, median_flops_per_s=PEAK / 2)
    spread = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": PEAK},
                      bandwidth_bytes_per_s=BW, overhead_s=3e-6, details=CeilingDetails(
                          matmul={"float32": MatmulFigures(sizes=[peak_row], peak_size=2048)}))
    results = [measured(b) for b in (1, 2, 4)]  # memory-bound under either peak
    pred = predict(results, spread, [4096])
    # At 4096 the step is mostly the assumed compute roof: half the peak, twice its time,
    # diluted by the memory-bound gelu and the fixed costs.
    assert 0.8 < pred.ceiling_sensitivity < 1.0


def test_unmeasured_sizes_stop_below_the_first_that_did_not_fit():
    results = [measured(b) for b in (1, 2, 4)] + [BatchResult(16, Status.OOM)]
    assert unmeasured_sizes(results, Limits(max_batch=64)) == [8]
    # --predict-to: past the measured sizes, up to its own cap...
    fits = [measured(b) for b in (1, 2, 4, 8)]
    assert unmeasured_sizes(fits, Limits(max_batch=8, predict_to=64)) == [16, 32, 64]
    # ...and below the first size the measured peaks, extrapolated, put past the memory
    # budget (1 GiB a row from 1 GiB at batch 1: batch 32 would need 32 GiB).
    fits = [dataclasses.replace(r, peak_memory_bytes=r.batch_size * 2**30) for r in fits]
    assert unmeasured_sizes(fits, Limits(max_batch=8, memory_budget_bytes=20 * 2**30,
                                         predict_to=64)) == [16]


def levelled(b: int) -> BatchResult:
    """A step that is all per-row work past batch 8, and measured 20% slower from 32 on
    (a cache spill): throughput levels off, then drops."""
    r = measured(b, framework_s=1e-6, fixed_s=0.0, memory_factor=1.0, compute_factor=1.5)
    if b >= 32:
        r.ops[0].time_s *= 1.2
        lat = r.latency_s.median + 0.2 * linear_time_s(b, 1.0, 1.5, 0.0)
        r = dataclasses.replace(r, latency_s=LatencyStats(lat, lat, lat, 5),
                                profiled_step_s=lat, op_time_s=lat - 1e-6,
                                throughput_per_s=b / lat)
    return r


def test_predicted_stop_needs_a_checked_model_and_a_pick_that_cannot_move():
    results = [levelled(b) for b in (1, 2, 4, 8, 16, 32, 64)]
    best = max(r.throughput_per_s for r in results)
    pick = min(r.throughput_per_s for r in results if r.throughput_per_s >= 0.9 * best)
    stop = predicted_stop(results, CEIL, [128, 256], pick, 0.9)
    assert stop is not None and stop.kind == StopKind.PREDICTED
    assert stop.values["remaining"] == [128, 256] and stop.values["fitted_on"] == [16, 32, 64]
    assert stop_text(stop, "row").startswith(
        "batches 128, 256 not measured: the step-time model, fitted on batches 16, 32, 64")
    # A pick far below the best: a larger batch would move it, so go on.
    assert predicted_stop(results, CEIL, [128], pick * 0.5, 0.9) is None
    # Too few sizes to check the model on one it was not fitted on.
    assert predicted_stop(results[:FIT_WINDOW], CEIL, [8], pick, 0.9) is None
    # The last size far off what the sizes before it predicted: no trust, go on.
    jumped = [*results[:-1], measured(64, fixed_s=0.05)]
    assert predicted_stop(jumped, CEIL, [128], pick, 0.9) is None


def test_predicted_stop_compares_units_with_units():
    """Issue 30: a row that yields 512 tokens (UNITS_PER_ROW) has throughputs in tokens/s;
    the stop projected rows/s against a bar in tokens/s, so it stopped a sweep whose pick a
    larger batch would still move ("predicts at most 19.95 ± 10% tokens/s … under the
    1,844", where 19.95 was rows/s)."""
    units = 512
    # record_timing: rows/s × UNITS_PER_ROW
    results = [dataclasses.replace(r, throughput_per_s=r.throughput_per_s * units)
               for r in (levelled(b) for b in (1, 2, 4, 8, 16, 32, 64))]
    best = max(r.throughput_per_s for r in results)
    pick = min(r.throughput_per_s for r in results if r.throughput_per_s >= 0.9 * best)
    # The same judgements as in rows (the test above), in tokens: a pick far below the
    # best goes on...
    assert predicted_stop(results, CEIL, [128], pick * 0.5, 0.9) is None
    # ...and a pick that cannot move stops, quoting both figures in tokens/s.
    stop = predicted_stop(results, CEIL, [128, 256], pick, 0.9)
    assert stop is not None
    # Projected from the top of the last size's interval (no samples here: its median
    # widened by the 5% drift floor), so one noisy low point cannot stop the sweep.
    assert stop.values["projected_per_s"] == pytest.approx(
        results[-1].throughput_per_s * (1 + DRIFT_FLOOR) * stop.values["gain"])
    assert stop.values["bar_per_s"] == pytest.approx(pick / 0.9)
    text = stop_text(stop, "token")
    projected = f"{stop.values['projected_per_s']:,.4g}"
    bar = f"{stop.values['bar_per_s']:,.4g}"
    margin = stop.values["margin"]
    assert f"predicts at most {projected} ± {margin:.0%} tokens/s there" in text
    assert f"under the {bar} tokens/s that would change the pick" in text
    assert stop.values["projected_per_s"] * (1 + margin) < stop.values["bar_per_s"]


def test_probed_matmul_scales_its_measured_time_by_the_probes_ratio():
    # The formula says one thing; the probes (the kernel at each size, timed alone) say the
    # op runs 10x as long at 64 as at 8, where it was measured: that is what is predicted.
    results = [measured(b) for b in (2, 4, 8)]
    for r in results:
        r.ops[0].input_shapes = [[1000], [r.batch_size, 1000], [1000, 1000]]
    probes = {"addmm[[1000],[8,1000],[1000,1000]]@float32": 1e-3,
              "addmm[[1000],[64,1000],[1000,1000]]@float32": 10e-3,
              "addmm[[1000],[16,1000],[1000,1000]]@float32": 20e-6}  # too short to trust
    model = fit_step_model(results, CEIL, probes_s=probes)
    curve = next(c for c in model.ops if c.name == "addmm")
    assert curve.probed(64) and not curve.probed(16) and not curve.probed(32)
    assert curve.time_s(64) == pytest.approx(10 * results[-1].ops[0].time_s)
    assert model.probed_ops(64) == 1
    pred = predict(results, CEIL, [16, 64], probes)
    assert set(pred.probes_s) == set(probes)  # the ones this model's ops can use, kept
    assert {p.batch_size: p.probed_ops for p in pred.points} == {16: 0, 64: 1}


def pooled(b: int, per_row_s: float, floor_s: float) -> BatchResult:
    """One activation-bound op (1 MB a row) at a tenth of its roof or flat at a floor."""
    roof_s = 1e6 * b / BW
    t = per_row_s * b if per_row_s else floor_s
    op = OpStat("pool:max_pool2d#0", "max_pool2d", [], "float32", "pool", 1, t, 10**5 * b,
                ByteSplit(0, 0, 10**6 * b))
    assert roof_s < 0.25 * t  # a sliver of its measured time, at every size
    return BatchResult(b, Status.OK, latency_s=LatencyStats(t, t, t, 5), throughput_per_s=b / t,
                       profiled_step_s=t, ops=[op], op_time_s=t)


def test_a_slow_kernel_is_not_mistaken_for_per_call_cost():
    # train_cnn's max-pool and batch norm run at ~10% of their roof on a CPU and grow with
    # the batch; called per-call cost they were predicted +169% at batch 1 from [1, 2, 4, 8]
    slow = [pooled(b, per_row_s=250e-6, floor_s=0) for b in (1, 2, 4, 8, 16)]
    model = fit_step_model(slow, CEIL, [1, 2, 4, 8])
    for r in slow:
        assert model.latency_s(r.batch_size) == pytest.approx(r.latency_s.median, rel=0.05)
    # an op flat at 4 ms whatever the batch (a per-call cost) stays flat
    flat = [pooled(b, per_row_s=0, floor_s=4e-3) for b in (1, 2, 4, 8, 16)]
    model = fit_step_model(flat, CEIL, [1, 2, 4, 8])
    assert model.latency_s(16) == pytest.approx(4e-3, rel=0.1)


STRIDE_2 = [[2, 2], [1, 1], [1, 1], False, [0, 0], 1]  # a convolution's call args


def conv_op(b: int, call_s: float, channels: int = 64, calls: int = 2,
            op_id: str = "layer:convolution#0") -> OpStat:
    """A 3x3 stride-2 convolution called ``calls`` times a step, ``call_s`` a call."""
    flops = 2 * channels * channels * 9 * 28 * 28 * b * calls
    return OpStat(op_id, "convolution", [[b, channels, 56, 56], [channels, channels, 3, 3]],
                  "float32", "layer", calls, call_s * calls, flops,
                  ByteSplit(channels * channels * 9 * 4 * calls, 0,
                            channels * 4 * (56 * 56 + 28 * 28) * b * calls),
                  call_args=STRIDE_2)


def stepped(b: int, ops: list[OpStat]) -> BatchResult:
    step = sum(op.time_s for op in ops) + 1e-4
    return BatchResult(b, Status.OK, latency_s=LatencyStats(step, step, step, 5),
                       throughput_per_s=b / step, profiled_step_s=step, ops=ops,
                       op_time_s=step - 1e-4)


def test_a_convolution_past_its_largest_probe_grows_with_the_rows():
    # Probed at 8 (its reference), 16 and 32; 64 was over the cost bound: its time there
    # is its time at 32, scaled by the rows, and the prediction says so.
    from batchscope.records.probe import probe_key

    results = [stepped(b, [conv_op(b, 1e-3 * b)]) for b in (2, 4, 8)]
    probes = {probe_key("convolution", [[b, 64, 56, 56], [64, 64, 3, 3]], STRIDE_2, "float32"): t
              for b, t in ((8, 8e-3), (16, 20e-3), (32, 50e-3))}
    model = fit_step_model(results, CEIL, probes_s=probes)
    (curve,) = model.ops
    assert curve.probed(16) and curve.probed(32) and not curve.probed(64)
    assert curve.scaled_from(64) == 32 and curve.scaled_from(32) is None
    assert curve.time_s(64) == pytest.approx(2 * curve.time_s(32))
    assert curve.time_s(32) == pytest.approx(results[-1].ops[0].time_s * 50 / 8)
    pred = predict(results, CEIL, [16, 32, 64], probes)
    assert any(a.kind == AssumptionKind.NOT_PROBED and "not probed at batch 64"
               in assumption_text(a) for a in pred.assumptions)
    assert {p.batch_size: p.probed_ops for p in pred.points} == {16: 1, 32: 1, 64: 0}


def test_a_probe_far_faster_alone_than_in_the_step_is_a_floor_not_a_ratio():
    # In the step a call at 8 takes 8 ms (two calls: 16 ms); alone it took 1 ms (hot
    # inputs), then 40 ms at 64 once out of cache. The ratio would give 16 ms x 40 = 640
    # ms at 64; the floor rule gives the larger of the fit (~8x the step's 16 ms) and the
    # probe (2 calls x 40 ms).
    from batchscope.records.probe import probe_key

    results = [stepped(b, [conv_op(b, 1e-3 * b)]) for b in (2, 4, 8)]

    def probes(at_8: float) -> dict[str, float]:
        return {probe_key("convolution", [[b, 64, 56, 56], [64, 64, 3, 3]], STRIDE_2, "float32"): t
                for b, t in ((8, at_8), (16, 5e-3), (64, 40e-3))}

    (curve,) = fit_step_model(results, CEIL, probes_s=probes(1e-3)).ops
    assert 1e-3 * curve.calls < ALONE_SHARE * curve.ref_time_s
    fitted = curve._fitted_time_s(64)
    assert fitted == pytest.approx(8 * curve.ref_time_s, rel=0.05)
    assert curve.time_s(64) == pytest.approx(max(fitted, 2 * 40e-3))
    assert curve.time_s(16) == pytest.approx(curve._fitted_time_s(16))  # 2 x 5 ms: below
    # alone as in the step (8 ms a call): the ratio, as before
    (alike,) = fit_step_model(results, CEIL, probes_s=probes(8e-3)).ops
    assert alike.time_s(64) == pytest.approx(alike.ref_time_s * 40 / 8)


def test_a_measured_convolution_is_probed_end_to_end():
    # A conv model measured for real (counting and profiler passes joined) at 2, 4 and 8,
    # through the worker's pipe; the model asks for its convolution at 16, the probe runs
    # on this CPU, and the prediction at 16 uses it.
    import torch
    from torch import nn

    from batchscope.profiler.capture import capture_steps
    from batchscope.profiler.counting import count_step
    from batchscope.profiler.join import fill_breakdown
    from batchscope.profiler.probe import run_probes
    from batchscope.records.codec import decode, to_builtins

    torch.manual_seed(0)
    # Big enough that a call at 8 takes over PROBE_MIN_S (50 us) on a fast CPU too.
    model = nn.Sequential(nn.Conv2d(32, 64, 3, stride=2, padding=1), nn.ReLU()).eval()
    results = []
    for b in (2, 4, 8):
        x = torch.randn(b, 32, 64, 64)
        result = BatchResult(b, Status.OK)
        with torch.inference_mode():
            capture = capture_steps(lambda x=x: model(x), lambda: None, torch.device("cpu"))
            counted = count_step(lambda x=x: model(x), weights=list(model.parameters()),
                                 state=[x], root=model)
        result = fill_breakdown(result, counted, capture.steps)
        step = result.profiled_step_s
        result = dataclasses.replace(
            result, latency_s=LatencyStats(step, step, step, len(capture.steps)))
        results.append(decode(to_builtins(result), BatchResult))  # as report.json holds it
    specs = probe_specs(results, [16, 8])
    assert [(s.name, s.shapes, s.args) for s in specs] == [  # cheapest first
        ("convolution", [[b, 32, 64, 64], [64, 32, 3, 3], [64]], STRIDE_2) for b in (8, 16)]
    out = run_probes(specs, torch.float32, torch.device("cpu"), lambda: None)
    assert out.errors == {} and all(t > 0 for t in out.times_s.values())
    fitted = fit_step_model(results, CEIL, probes_s=out.times_s)
    conv = next(c for c in fitted.ops if c.name == "convolution")
    assert conv.probed(16) and conv.time_s(16) > 0
    assert fitted.probed_ops(16) >= 1



def test_the_step_model_overrules_a_plateau_its_exact_counts_do_not_show():
    """A memory-bound step measured at 1, 2, 4: whatever bent those three throughputs, the
    weights read once per step say a larger batch gains many-fold, so the plateau rule's
    stop is overruled; a bar beyond anything the model predicts lets it stand."""
    results = [measured(b) for b in (1, 2, 4)]
    last = results[-1].throughput_per_s
    flag = plateau_overruled(results, CEIL, [8, 16, 32, 64], last * 1.5)
    assert flag is not None and flag.kind == FlagKind.PLATEAU_OVERRULED
    # As far ahead as the plateau rule looked back (two doublings), no further: the model's
    # throughput never falls with b, so a gain at the largest size would overrule anything.
    assert flag.batch_size == 4 and flag.values["highest"] == 16
    assert flag.values["projected_per_s"] >= last * 1.5
    assert flag.values["fitted_on"] == [1, 2, 4]
    assert plateau_overruled(results, CEIL, [8, 16, 32, 64], last * 1000) is None
    # A flat curve (all per-row work past the weights): nothing to overrule.
    flat = [levelled(b) for b in (16, 32, 64)]
    assert plateau_overruled(flat, CEIL, [128], flat[-1].throughput_per_s * 1.1) is None
    assert plateau_overruled(results, CEIL, [], last * 1.5) is None
