"""The work half of ``diagnose compare``: counted FLOPs, bytes, op and kernel calls per step,
compared exactly (issue 31). A head that does more work at the gate fails whatever its clock
says; two runs of the same code count the same."""

from __future__ import annotations

import copy
import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.records import ByteSplit, KernelStat, Report
from batchscope.records.work import WorkCount, WorkMeasure, work_count, work_delta
from batchscope.reports.compare import compare, compare_files
from batchscope.reports.compare_render import render_markdown
from tests.reports.conftest import REPORTS, typed

runner = CliRunner()
MLP = REPORTS / "mlp.json"
MLP_SCHEMA_1 = REPORTS / "schema1" / "mlp.json"
DOC = json.loads((REPORTS / "llm_decode.json").read_text(encoding="utf-8"))
GATE = DOC["recommendation"]["batch_size"]


def more_flops(doc: dict[str, Any], factor: float, sizes: set[int]) -> dict[str, Any]:
    """A copy whose counted FLOPs at ``sizes`` are ``factor`` times (batch and ops alike)."""
    out = copy.deepcopy(doc)
    for b in out["batches"]:
        if b["batch_size"] in sizes and b.get("flops") is not None:
            b["flops"] = round(b["flops"] * factor)
            for op in b["ops"]:
                if op.get("flops") is not None:
                    op["flops"] = round(op["flops"] * factor)
    return out


def test_two_real_reports_of_the_same_sweep_count_the_same_work() -> None:
    result = compare_files(MLP_SCHEMA_1, MLP)
    assert result.work and all(d.same for d in result.work)
    assert result.work_gate is not None and result.work_gate.batch_size == 1024
    assert {c.measure for c in result.work_gate.changes} == {
        WorkMeasure.FLOPS, WorkMeasure.BYTES, WorkMeasure.OP_CALLS}
    assert not result.work_regression
    assert "the work per step at batch 1024 is the same" in result.verdict
    text = render_markdown(result)
    assert "#### Work per step (counted: no noise)" in text
    assert "same at every batch size both counted" in text


def test_more_flops_at_the_gate_is_a_regression_whatever_the_clock(tmp_path: Path) -> None:
    head = tmp_path / "head.json"
    head.write_text(json.dumps(more_flops(DOC, 1.3, {GATE})), encoding="utf-8")
    base = tmp_path / "base.json"
    base.write_text(json.dumps(DOC), encoding="utf-8")
    out = runner.invoke(tools_app, ["compare", str(base), str(head), "--format", "markdown"])
    assert out.exit_code == 1, out.output
    assert out.output.startswith("### ❌ batchscope compare: regression")
    said = " ".join(out.output.split())
    assert f"the head does more work per step at batch {GATE}" in said
    assert "FLOPs +30.0%" in said and "no drift explains it" in said
    result = compare(typed(DOC), typed(more_flops(DOC, 1.3, {GATE})))
    assert result.work_regression and not result.time_regression and result.regression
    assert result.gate_change == 0.0  # the clock says nothing changed


def slower(doc: dict[str, Any], factor: float) -> dict[str, Any]:
    """A copy whose every batch size's step takes ``factor`` times as long (work alike)."""
    out = copy.deepcopy(doc)
    for b in out["batches"]:
        if b.get("throughput_per_s"):
            b["throughput_per_s"] /= factor
            b.pop("throughput_interval_per_s", None)
            for key in ("median", "p25", "p75", "min", "max"):
                if (b.get("latency_s") or {}).get(key) is not None:
                    b["latency_s"][key] *= factor
    return out


def test_work_only_gates_on_the_work_alone(tmp_path: Path) -> None:
    base, time_only, work = (tmp_path / f"{n}.json" for n in ("base", "time", "work"))
    base.write_text(json.dumps(DOC), encoding="utf-8")
    time_only.write_text(json.dumps(slower(DOC, 3.0)), encoding="utf-8")  # a 67% drop
    work.write_text(json.dumps(more_flops(DOC, 1.25, {GATE})), encoding="utf-8")
    plain = runner.invoke(tools_app, ["compare", str(base), str(time_only)])
    assert plain.exit_code == 1, plain.output  # past the drift of one run a side: time fails
    only = runner.invoke(tools_app, ["compare", str(base), str(time_only), "--work-only"])
    assert only.exit_code == 0, only.output  # ... but --work-only leaves time to --ab
    assert "regression" in only.output  # the time verdict is still printed
    out = runner.invoke(tools_app, ["compare", str(base), str(work), "--work-only"])
    assert out.exit_code == 1, out.output
    assert "FLOPs +25.0%" in " ".join(out.output.split())


def test_less_work_is_reported_and_passes() -> None:
    result = compare(typed(DOC), typed(more_flops(DOC, 0.7, {GATE})))
    assert not result.regression and not result.work_regression
    assert result.work_gate is not None and result.work_gate.less_work
    assert f"the head does less work per step at batch {GATE}: FLOPs −30.0%" in result.verdict


def test_more_work_elsewhere_is_a_warning_only() -> None:
    other = next(b["batch_size"] for b in DOC["batches"] if b["batch_size"] != GATE)
    result = compare(typed(DOC), typed(more_flops(DOC, 2.0, {other})))
    assert not result.regression
    assert any(f"batch {other}: FLOPs +100.0%" in w for w in result.warnings)
    assert f"| {other} |" in render_markdown(result)  # the row that moved is shown


def test_more_op_calls_at_the_gate_is_a_regression() -> None:
    head = copy.deepcopy(DOC)
    (gate,) = [b for b in head["batches"] if b["batch_size"] == GATE]
    calls = sum(op["calls"] for op in gate["ops"])
    gate["ops"][0]["calls"] += calls  # twice the op calls, the same FLOPs
    result = compare(typed(DOC), typed(head))
    assert result.work_regression
    assert result.work_gate is not None
    assert [c.measure for c in result.work_gate.more_work] == [WorkMeasure.OP_CALLS]
    assert "op calls +100.0%" in result.verdict


def test_kernel_launches_are_compared_where_a_trace_counted_them() -> None:
    base = typed(DOC)

    def with_kernels(report: Report, calls: float) -> Report:
        batches = []
        for b in report.batches:
            if b.batch_size == GATE:
                ops = [dataclasses.replace(op, kernels=[KernelStat("k", calls, 1e-6)])
                       for op in b.ops]
                b = dataclasses.replace(b, ops=ops)
            batches.append(b)
        return dataclasses.replace(report, batches=batches)

    result = compare(with_kernels(base, 1.0), with_kernels(base, 2.0))
    assert result.work_gate is not None
    assert [c.measure for c in result.work_gate.more_work] == [WorkMeasure.KERNEL_CALLS]
    assert "kernel launches +100.0%" in result.verdict


def test_a_timing_only_head_leaves_the_gate_to_time() -> None:
    head = copy.deepcopy(DOC)
    for b in head["batches"]:
        b.update(flops=None, bytes=None, ops=[])
    result = compare(typed(DOC), typed(head))
    assert result.work == [] and result.work_gate is None and not result.regression
    assert "was not counted on both sides" in result.verdict
    assert "the work was not compared" in render_markdown(result)


def test_work_counts_and_deltas() -> None:
    assert work_count(None) is None
    base = typed(DOC).batches[0]
    count = work_count(base)
    assert count is not None and count.flops == base.flops
    assert count.bytes == (base.bytes or ByteSplit()).total and count.kernel_calls is None
    assert count.op_calls == sum(op.calls for op in base.ops)
    # new work where the base counted none: no ratio, and more
    new = work_delta(1, WorkCount(flops=0), WorkCount(flops=5), 0.1)
    assert [(c.change, c.more, c.less) for c in new.changes] == [(None, True, False)]
    none = work_delta(1, WorkCount(flops=0, bytes=10), WorkCount(flops=0, bytes=10), 0.1)
    assert none.same and not none.more_work
    within = work_delta(1, WorkCount(bytes=100), WorkCount(bytes=105), 0.1)
    assert not within.same and not within.more_work and not within.less_work


def with_hole(doc: dict[str, Any], share: float) -> dict[str, Any]:
    """A copy whose largest op at every size has no count and ``share`` of the step."""
    out = copy.deepcopy(doc)
    for b in out["batches"]:
        if b.get("ops") and b.get("profiled_step_s"):
            top = max(b["ops"], key=lambda o: o["time_s"])
            top["flops"], top["time_s"] = None, share * b["profiled_step_s"]
    return out


def test_a_hole_in_the_counts_is_never_the_same_work() -> None:
    # issue 48: the gate said "FLOPs 70.7 kFLOP (same)", "no regression" of an encoder
    # whose feed-forward grew 1.5x, 96% of its step in ops nobody counted
    base = with_hole(DOC, 0.96)
    result = compare(typed(base), typed(more_flops(base, 1.0, {GATE})))
    assert result.work_gate is not None
    assert {c.measure for c in result.work_gate.changes} == {WorkMeasure.OP_CALLS}
    assert f"cannot judge the work: 96% of the step at batch {GATE} is uncounted" \
        in result.verdict
    assert "is the same" not in result.verdict and "counted alike" in result.verdict
    # more FLOPs counted beside the hole are not judged either way: time and op calls are
    grown = compare(typed(base), typed(more_flops(base, 1.3, {GATE})))
    assert not grown.work_regression and "cannot judge the work" in grown.verdict
    # a hole on one side only is a hole
    one_side = compare(typed(DOC), typed(with_hole(DOC, 0.2)))
    assert "cannot judge the work: 20%" in one_side.verdict


def test_more_op_calls_beside_a_hole_still_fail_the_gate() -> None:
    base = with_hole(DOC, 0.5)
    head = copy.deepcopy(base)
    for b in head["batches"]:
        if b["batch_size"] == GATE:
            for o in b["ops"]:
                o["calls"] *= 2
    result = compare(typed(base), typed(head))
    assert result.work_regression and "cannot judge the work" in result.verdict
    assert "op calls +" in result.verdict


@pytest.mark.slow
def test_a_wider_feed_forward_fails_the_gate_on_work_and_the_same_code_passes(
        tmp_path: Path) -> None:
    # issue 48: a TransformerEncoder classifier whose feed-forward grew 1.5x ran 1.28x
    # slower, and compare said "FLOPs 70.7 kFLOP (same)", "no regression", exit 0
    from batchscope.api import Options, diagnose_file
    from tests.target.test_one_counter import classifier_file

    def sweep(ff: int, name: str) -> Path:
        out = tmp_path / name
        diagnose_file(classifier_file(tmp_path, ff=ff), Options(
            out_dir=str(out), batch_sizes=[2], min_time_s=0.02, device="cpu",
            measure_ceilings=False, rounds=False, allocator_check=False))
        return out / "report.json"

    base, again, wide = sweep(128, "base"), sweep(128, "again"), sweep(192, "wide")
    out = runner.invoke(tools_app, ["compare", str(base), str(wide)])
    assert out.exit_code == 1, out.output
    said = " ".join(out.output.split())
    assert "the head does more work per step" in said and "FLOPs +" in said
    same = compare_files(base, again)
    assert not same.work_regression and same.work_gate is not None and same.work_gate.same
    assert "is the same" in same.verdict
