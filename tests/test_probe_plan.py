"""The kernel probes' plan (probe_plan): which probes the step-time model gets, at which
sizes, within what cost, in what order."""

from __future__ import annotations

import dataclasses

import pytest

from batchscope.probe_plan import (
    FIT_WINDOW,
    PROBE_BUDGET_MIN_S,
    PROBE_BUDGET_SHARE,
    PROBE_MAX_CALL_S,
    PROBE_ROUND_S,
    _probe_cost_s,
    final_probe_specs,
    probe_budget_s,
    probe_specs,
    stop_probe_specs,
)
from batchscope.records import BatchResult, ByteSplit, OpStat, Status
from batchscope.records.probe import ProbeSpec
from tests.classifiers.test_step_model import STRIDE_2, WEIGHTS, conv_op, measured, stepped


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
    assert [s.key for s in specs] == ["addmm[[1000],[8,1000],[1000,1000]]@float32",
                                         "addmm[[1000],[64,1000],[1000,1000]]@float32"]
    # --predict-to past --max-batch: a matmul's probe estimated over PROBE_MAX_CALL_S a
    # call (in proportion to the rows from batch 8) is skipped there, and only there.
    far = 2 ** 20
    assert results[-1].ops[0].time_s * far / 8 > PROBE_MAX_CALL_S
    keys = {s.batch for s in probe_specs(results, [64, far])}
    assert keys == {64, far}
    assert {s.batch for s in probe_specs(results, [64, far], bound_above=64)} == {64}


def test_a_matmul_that_ran_in_bfloat16_is_probed_in_bfloat16():
    # --amp: the model is fp32, its matmul ran in bf16; the probe says so in its spec and
    # key, so the worker times the bf16 kernel.
    results = [measured(b) for b in (4, 8)]
    for r in results:
        r.ops[0].input_shapes = [[1000], [r.batch_size, 1000], [1000, 1000]]
        r.ops[0].dtype = "bfloat16"
    (spec,) = [s for s in probe_specs(results, [64]) if s.batch == 64]
    assert spec.dtype == "bfloat16" and spec.key.endswith("@bfloat16")


def test_convolution_probes_carry_their_args_and_are_skipped_over_the_cost_bound():
    # 10 ms an image a call, measured at 4 and 8: a call is estimated at 0.64 s at 64 and
    # 1.28 s at 128 (over the bound). A matmul 50 ms a call at 8 keeps its probe at 1024:
    # its time there is not its weight read times 128.
    def at(b: int) -> BatchResult:
        addmm = OpStat("head:addmm#0", "addmm", [[1000], [b, 1000], [1000, 1000]], "float32",
                       "head", 1, 50e-3, 2 * 10**6 * b, ByteSplit(WEIGHTS, 0, 8000 * b))
        return stepped(b, [conv_op(b, 10e-3 * b), addmm])

    specs = probe_specs([at(4), at(8)], [8, 64, 128, 1024])
    convs = {s.shapes[0][0]: s for s in specs if s.name == "convolution"}
    assert sorted(convs) == [8, 64] and 64 * 10e-3 <= PROBE_MAX_CALL_S < 128 * 10e-3
    assert convs[64] == ProbeSpec(
        key="convolution[[64,64,56,56],[64,64,3,3]][[2,2],[1,1],[1,1],false,[0,0],1]@float32",
        name="convolution", shapes=[[64, 64, 56, 56], [64, 64, 3, 3]], args=STRIDE_2,
        op_id="layer:convolution#0", batch=64, dtype="float32",
        budget_s=PROBE_BUDGET_MIN_S)  # the worker stops them there, measured
    # the matmuls first; the convolutions after them, cheapest first
    assert [s.name for s in specs] == ["addmm"] * 4 + ["convolution"] * 2
    assert [s.shapes[0][0] for s in specs[4:]] == [8, 64]
    assert "addmm[[1000],[1024,1000],[1000,1000]]@float32" in {s.key for s in specs}
    assert all(s.args is None for s in specs if s.name == "addmm")
    # A convolution recorded without its args (an older report) is not probed.
    old = [at(4), at(8)]
    for r in old:
        r.ops[0].call_args = None
    assert all(s.name == "addmm" for s in probe_specs(old, [8, 64]))


def test_a_rounds_convolution_probes_stop_at_its_budget_cheapest_first():
    # 40 convolutions of other widths, each 0.9 s a call at 1024: ~150 s for every size.
    def at(b: int) -> BatchResult:
        return stepped(b, [conv_op(b, 0.9 * b / 1024, channels=16 + i, calls=1,
                                   op_id=f"l{i}:convolution#0") for i in range(40)])

    sizes = [16, 32, 64, 128, 256, 512, 1024]
    specs = probe_specs([at(4), at(8)], [8, *sizes], budget_s=PROBE_ROUND_S)
    assert sum(_probe_cost_s(0.9 * s.shapes[0][0] / 1024) for s in specs) <= PROBE_ROUND_S
    # every op keeps its reference size and the smaller sizes; the largest went first
    kept = [s.shapes[0][0] for s in specs]
    assert all(kept.count(b) == 40 for b in (8, 16, 32, 64, 128))
    assert 256 in kept and 512 not in kept and 1024 not in kept


def test_the_probe_budget_follows_the_sweeps_own_time():
    def measured(wall_s: float) -> list[BatchResult]:
        results = [stepped(b, [conv_op(b, 0.9 * b / 1024, channels=16 + i, calls=1,
                                       op_id=f"l{i}:convolution#0") for i in range(40)])
                   for b in (4, 8)]
        return [dataclasses.replace(r, wall_s=wall_s / 2) for r in results]

    assert probe_budget_s(measured(0.0)) == PROBE_BUDGET_MIN_S
    assert probe_budget_s(measured(20.0)) == pytest.approx(PROBE_BUDGET_SHARE * 20.0)
    assert probe_budget_s(measured(1e4)) == PROBE_ROUND_S
    sizes = [8, 16, 32, 64, 128, 256, 512, 1024]
    short = probe_specs(measured(0.0), sizes)
    assert sum(_probe_cost_s(0.9 * s.shapes[0][0] / 1024) for s in short) \
        <= PROBE_BUDGET_MIN_S
    assert len(short) < len(probe_specs(measured(60.0), sizes))


def with_matmul_shapes(sizes: tuple[int, ...]) -> list[BatchResult]:
    results = [measured(b) for b in sizes]
    for r in results:
        r.ops[0].input_shapes = [[1000], [r.batch_size, 1000], [1000, 1000]]
    return results


def test_the_stop_asks_for_probes_only_once_it_can_judge():
    # The predicted stop needs FIT_WINDOW + 1 measured sizes; then every probed op at the
    # remaining sizes and the measured ones.
    results = with_matmul_shapes((1, 2, 4, 8))
    assert stop_probe_specs(results[:FIT_WINDOW], [16]) == []
    assert stop_probe_specs(results, []) == []
    assert stop_probe_specs(results, [16, 32]) == probe_specs(results, [16, 32, 1, 2, 4, 8])
    assert sorted(s.batch for s in stop_probe_specs(results, [16, 32])) == [1, 2, 4, 8, 16, 32]


def test_the_reports_probes_cover_the_measured_and_predicted_sizes():
    # Without --predict-to: the sweep's own budget and no bound on a matmul; with it, a
    # round's whole PROBE_ROUND_S and a matmul bounded past --max-batch.
    def at(b: int) -> BatchResult:
        addmm = OpStat("head:addmm#0", "addmm", [[1000], [b, 1000], [1000, 1000]], "float32",
                       "head", 1, 50e-3, 2 * 10**6 * b, ByteSplit(WEIGHTS, 0, 8000 * b))
        return stepped(b, [conv_op(b, 1e-3 * b), addmm])

    results = [at(4), at(8), BatchResult(16, Status.OOM)]
    far = 2 ** 20
    plain = final_probe_specs(results, [32, far], max_batch=64)
    assert plain == probe_specs(results, [4, 8, 32, far])
    assert {s.budget_s for s in plain if s.name == "convolution"} == {probe_budget_s(results)}
    assert far in {s.batch for s in plain if s.name == "addmm"}
    predicting = final_probe_specs(results, [32, far], max_batch=64, predict_to=far)
    assert predicting == probe_specs(results, [4, 8, 32, far], budget_s=PROBE_ROUND_S,
                                     bound_above=64)
    assert {s.budget_s for s in predicting if s.name == "convolution"} == {PROBE_ROUND_S}
    assert far not in {s.batch for s in predicting if s.name == "addmm"}
