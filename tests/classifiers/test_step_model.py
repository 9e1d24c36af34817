"""The fitted step-time model on hand-checkable ops: a known curve must come back."""

from __future__ import annotations

import pytest

from batchscope.classifiers.analyze import unmeasured_sizes
from batchscope.classifiers.step_model import (
    FIT_WINDOW,
    fit_power,
    fit_sizes,
    fit_step_model,
    predict,
    predicted_stop,
    probe_specs,
)
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits, Plan, default_batch_sizes
from batchscope.records import BatchResult, ByteSplit, LatencyStats, OpStat, Status

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
    assert model.assumptions == ["matmul: never measured compute-bound; assumed at the "
                                 "compute roof"]
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
    assert flat.exponent == 0 and flat(1024) == pytest.approx(1.1e-4)
    grows = fit_power([1, 2, 4, 8], [1e-4, 2e-4, 4e-4, 8e-4])
    assert grows.exponent == pytest.approx(1.0) and grows(1024) == pytest.approx(1.024e-1)
    faster = fit_power([1, 2, 4], [1e-4, 4e-4, 16e-4])
    assert faster.exponent == 1.0  # capped: nothing here grows faster than the batch


def test_profiler_cost_is_taken_off_as_a_fixed_amount():
    results = [measured(b) for b in (1, 2, 4)]
    for r in results:  # the profiled step ran 50 µs longer than the timed one
        r.profiled_step_s = r.latency_s.median + 50e-6
    model = fit_step_model(results, CEIL)
    assert model.profiler_gap_s == pytest.approx(50e-6)
    assert model.latency_s(4) == pytest.approx(results[-1].latency_s.median, rel=0.01)


def test_each_measured_size_is_forecast_from_the_three_before_it():
    results = [measured(b) for b in (1, 2, 4, 8, 16, 32)]
    results[3].latency_s = LatencyStats(1.0, 1.0, 1.0, 5)  # batch 8 far off the curve
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
    spread = Ceilings(device="cpu", name="test", peak_flops_per_s={"float32": PEAK},
                      bandwidth_bytes_per_s=BW, overhead_s=3e-6, details={"matmul": {
                          "float32": {"peak_size": 2048, "sizes": [
                              {"n": 2048, "best_flops_per_s": PEAK,
                               "median_flops_per_s": PEAK / 2}]}}})
    results = [measured(b) for b in (1, 2, 4)]  # memory-bound under either peak
    pred = predict(results, spread, [4096])
    # At 4096 the step is mostly the assumed compute roof: half the peak, twice its time,
    # diluted by the memory-bound gelu and the fixed costs.
    assert 0.8 < pred.ceiling_sensitivity < 1.0


def test_unmeasured_sizes_stop_below_the_first_that_did_not_fit():
    results = [measured(b) for b in (1, 2, 4)] + [BatchResult(16, Status.OOM)]
    assert unmeasured_sizes(results, Limits(max_batch=64)) == [8]


def levelled(b: int) -> BatchResult:
    """A step that is all per-row work past batch 8, and measured 20% slower from 32 on
    (a cache spill): throughput levels off, then drops."""
    r = measured(b, framework_s=1e-6, fixed_s=0.0, memory_factor=1.0, compute_factor=1.5)
    if b >= 32:
        r.ops[0].time_s *= 1.2
        lat = r.latency_s.median + 0.2 * linear_time_s(b, 1.0, 1.5, 0.0)
        r.latency_s = LatencyStats(lat, lat, lat, 5)
        r.profiled_step_s, r.op_time_s, r.throughput_per_s = lat, lat - 1e-6, b / lat
    return r


def test_predicted_stop_needs_a_checked_model_and_a_pick_that_cannot_move():
    results = [levelled(b) for b in (1, 2, 4, 8, 16, 32, 64)]
    best = max(r.throughput_per_s for r in results)
    pick = min(r.throughput_per_s for r in results if r.throughput_per_s >= 0.9 * best)
    reason = predicted_stop(results, CEIL, [128, 256], pick, 0.9, "row")
    assert reason.startswith("batches 128, 256 not measured: the step-time model, fitted "
                             "on batches 16, 32, 64")
    # A pick far below the best: a larger batch would move it, so go on.
    assert predicted_stop(results, CEIL, [128], pick * 0.5, 0.9, "row") == ""
    # Too few sizes to check the model on one it was not fitted on.
    assert predicted_stop(results[:FIT_WINDOW], CEIL, [8], pick, 0.9, "row") == ""
    # The last size far off what the sizes before it predicted: no trust, go on.
    jumped = results[:-1] + [measured(64, fixed_s=0.05)]
    assert predicted_stop(jumped, CEIL, [128], pick, 0.9, "row") == ""


def test_plan_consults_the_prediction_unless_told_to_measure_all():
    # Throughput doubling with every doubling: neither the plateau rule nor the real
    # prediction would stop; a hook that says "stop" after five sizes is obeyed, and
    # measure_all ignores it. (predicted_stop itself is tested above.)
    truth = {b: measured(b, framework_s=0.0, fixed_s=0.0, memory_factor=1.0,
                         compute_factor=1.0) for b in default_batch_sizes(64)}
    seen: list[list[int]] = []

    def hook(results: list[BatchResult], remaining: list[int]) -> str:
        seen.append(remaining)
        return "predicted: no need" if len(results) >= 5 else ""

    def run(plan: Plan) -> list[int]:
        results: list[BatchResult] = []
        while (b := plan.next_batch(results)) is not None:
            results.append(truth[b])
        return [r.batch_size for r in results]

    predicted = Plan(None, Limits(max_batch=64), hook)
    assert run(predicted) == [1, 2, 4, 8, 16]
    assert predicted.stop_reason == "predicted: no need" and seen[-1] == [32, 64]
    assert run(Plan(None, Limits(max_batch=64), hook, measure_all=True)) == sorted(truth)
    assert run(Plan([1, 2, 4, 8, 16, 32], Limits(), hook)) == [1, 2, 4, 8, 16, 32]


def test_probe_specs_scale_the_batch_dimension_and_keep_the_rest():
    from batchscope.batch_shapes import scaled_shapes as _scaled

    assert _scaled([[2304], [4, 768], [768, 2304]], 4,
                   [[2304], [8, 768], [768, 2304]], 8, 1024) == [[2304], [1024, 768],
                                                                  [768, 2304]]
    assert _scaled([[3, 5]], 4, [[6, 5]], 8, 3) is None  # 6 * 3 / 8 rows is not whole
    assert _scaled([[3, 5]], 4, [[7, 5]], 8, 16) is None  # neither fixed nor in proportion
    results = [measured(b) for b in (4, 8)]
    for r in results:
        r.ops[0].input_shapes = [[1000], [r.batch_size, 1000], [1000, 1000]]
    specs = probe_specs(results, [8, 64])
    assert [s["key"] for s in specs] == ["addmm[[1000],[8,1000],[1000,1000]]",
                                         "addmm[[1000],[64,1000],[1000,1000]]"]


def test_probed_matmul_scales_its_measured_time_by_the_probes_ratio():
    # The formula says one thing; the probes (the kernel at each size, timed alone) say the
    # op runs 10x as long at 64 as at 8, where it was measured: that is what is predicted.
    results = [measured(b) for b in (2, 4, 8)]
    for r in results:
        r.ops[0].input_shapes = [[1000], [r.batch_size, 1000], [1000, 1000]]
    probes = {"addmm[[1000],[8,1000],[1000,1000]]": 1e-3,
              "addmm[[1000],[64,1000],[1000,1000]]": 10e-3,
              "addmm[[1000],[16,1000],[1000,1000]]": 20e-6}  # too short to trust
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
