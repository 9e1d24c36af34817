"""A batch curve predicted on a named GPU (``report.target``, no batch measured) rendered on
its own page, summary and console table; every figure called predicted, the user's text
escaped, and report.json read back with the section equal."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

from rich.console import Console

from batchscope.records import ByteSplit, Report
from batchscope.records.report import ModelInfo, RunInfo, Source
from batchscope.records.target import KernelTerm, ModelTerms, PickRule, TargetBatch, TargetSection
from batchscope.reports import explanation, load_report, print_summary, write_all
from batchscope.reports.target_render import bound_of, paragraphs, throughput_chart

GIB = 2**30
HOSTILE = "<script>alert(1)</script>"


def _batch(batch_size: int, step_s: float, memory_gib: float, fits: bool, host_s: float,
           device_s: float, memory_s: float, compute_s: float) -> TargetBatch:
    return TargetBatch(
        batch_size=batch_size, predicted_step_s=step_s, low_s=step_s * 0.8,
        high_s=step_s * 1.3, predicted_throughput_per_s=batch_size / step_s,
        predicted_peak_memory_bytes=int(memory_gib * GIB), fits=fits, host_s=host_s,
        device_s=device_s, memory_s=memory_s, compute_s=compute_s,
        latency_s=device_s - memory_s - compute_s, launched_ops=412,
        flops=batch_size * 10**9, bytes=ByteSplit(weights=400 * 10**6,
                                                  activations=batch_size * 10**6))


def _section(gpu: str = "Tesla T4 16GB") -> TargetSection:
    terms = ModelTerms(
        gemm=KernelTerm(fixed_s=5.8e-6, efficiency=0.42, ops=310, calls=9100,
                        median_abs_log_error=0.22),
        gemm_fp32=KernelTerm(fixed_s=7e-6, efficiency=0.72, ops=19, calls=23,
                             median_abs_log_error=0.19),
        other=KernelTerm(fixed_s=3.5e-6, efficiency=0.60, ops=880, calls=40000,
                         median_abs_log_error=0.31),
        host_s_per_op=81e-6, host_low_s_per_op=49e-6, host_high_s_per_op=168e-6,
        traces=["rtx5090-llm", "a100-resnet", "h100-vit"])
    batches = [
        # host 412 ops × 81 µs = 33.4 ms against 2 ms of kernels: launch-bound
        _batch(1, 33.4e-3, 1.2, True, 33.4e-3, 2.0e-3, 1.5e-3, 0.3e-3),
        _batch(64, 60e-3, 3.9, True, 33.4e-3, 60e-3, 40e-3, 18e-3),
        _batch(128, 110e-3, 7.1, True, 33.4e-3, 110e-3, 45e-3, 62e-3),
        _batch(512, 420e-3, 21.3, False, 33.4e-3, 420e-3, 150e-3, 265e-3),
    ]
    return TargetSection(
        gpu=gpu, dtype="float16", peak_flops_per_s=65e12, bandwidth_bytes_per_s=320e9,
        memory_bytes=16 * GIB, terms=terms, batches=batches, pick=128,
        pick_rule=PickRule.NEAR_BEST, best_batch_size=128, critical_batch=94.2,
        knee_batch=70.0, knee_within=True, reserved_bytes=int(0.9 * GIB))


def _report(target: TargetSection, name: str = "samples/mlp.py") -> Report:
    return Report(model=ModelInfo(target=name, dtype="float16"), hardware=None, batches=[],
                  recommendation=None,
                  run=RunInfo(source=Source.TARGET, tool_version="test"), target=target)


def test_the_prediction_is_written_read_back_and_every_output_says_predicted(
        tmp_path: Path) -> None:
    target = _section()
    write_all(_report(target), tmp_path)
    assert load_report(str(tmp_path / "report.json")).target == target
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["run"]["source"] == "target" and doc["batches"] == []

    summary = (tmp_path / "summary.md").read_text()
    assert summary.startswith("### batchscope · samples/mlp.py on NVIDIA Tesla T4 16GB "
                              "(predicted)")
    assert "predicted" in summary and "nothing was timed on this machine" in summary
    assert "Pick: batch 128" in summary
    assert "within 90% of the best predicted" in summary
    assert "Batch 512 needs a predicted 21.3 GiB of the GPU's 16 GiB: does not fit" in summary
    assert "| 1.22 k samples/s |" in summary
    assert "B\\* ≈ 94.2" in summary  # md-escaped asterisk
    assert "launch-bound, the host issues its 412 ops slower than the GPU runs them" in summary
    assert "calibrated on 3 real GPU traces (rtx5090-llm, a100-resnet, h100-vit)" in summary
    assert "| **128** |" in summary and "| 512 |" in summary
    assert "| no | 33.4 ms | 420 ms | compute |" in summary

    page = (tmp_path / "report.html").read_text()
    assert "<h1 class=\"target\">samples/mlp.py</h1>" in page
    assert "<td>1</td><td>33.4 ms (26.7 ms–43.4 ms)</td>" in page
    assert "<td>21.3 GiB</td><td>no</td><td>33.4 ms</td><td>420 ms</td><td>compute</td>" in page
    assert "<td>1.2 GiB</td><td>yes</td><td>33.4 ms</td><td>2 ms</td><td>launch</td>" in page
    assert "<td><strong>128</strong></td>" in page
    assert 'id="fig-throughput"' in page  # the predicted-throughput chart


def test_bounds_knee_and_none_fits_read_as_predictions() -> None:
    target = _section()
    assert [bound_of(b) for b in target.batches] == ["launch", "memory", "compute", "compute"]
    text = " ".join(paragraphs(target))
    assert "Batch 64: memory-bound" in text and "Batches 128 and 512: compute-bound" in text
    assert "knee near batch 70" in text
    assert "(GEMMs 42%, +5.8 µs; other ops 60%, +3.5 µs), the host 81 µs an op" in text

    # fp32: the GEMMs' FP32-units term is shown; kernels mostly fixed cost: latency-bound
    tiny = dataclasses.replace(target.batches[0], host_s=1e-3, device_s=2e-3,
                               memory_s=0.2e-3, compute_s=0.1e-3, latency_s=1.7e-3)
    fp32 = dataclasses.replace(target, dtype="float32", batches=[tiny, *target.batches[1:]])
    text = " ".join(paragraphs(fp32))
    assert "GEMMs 42%, +5.8 µs; on the FP32 units 72%, +7 µs;" in text
    assert "Batch 1: latency-bound" in text and "launch-bound" not in text

    none = dataclasses.replace(
        target, pick=None, pick_rule=PickRule.NONE_FITS, critical_batch=None,
        knee_batch=600.0, knee_within=False,
        batches=[dataclasses.replace(b, fits=False) for b in target.batches])
    text = " ".join(paragraphs(none))
    assert "No pick: no batch size asked fits in the 16 GiB" in text
    assert "the step never turns compute-bound on this GPU" in text
    assert "beyond the largest size asked" in text
    fig = throughput_chart(none)
    assert fig is not None and any(t["name"] == "does not fit" for t in fig["data"])


def test_the_console_and_the_explanation_show_the_prediction() -> None:
    report = _report(_section())
    out = io.StringIO()
    print_summary(Console(file=out, width=160), report)
    shown = out.getvalue()
    assert "nothing was timed" in shown and "128 *" in shown and "21.3 GiB" in shown
    assert explanation(report).startswith("Predicted on NVIDIA Tesla T4 16GB in float16")


def test_hostile_model_and_gpu_names_are_inert_in_every_output(tmp_path: Path) -> None:
    target = dataclasses.replace(_section(gpu=f"T4 {HOSTILE}"), unit=f"|{HOSTILE}")
    report = _report(target, name=f"{HOSTILE}[x](http://e.vil) @me")
    write_all(report, tmp_path)
    page = (tmp_path / "report.html").read_text()
    assert HOSTILE not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page
    summary = (tmp_path / "summary.md").read_text()
    assert HOSTILE not in summary and "<script" not in summary
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in summary
    assert "\\[x\\](http:&#8203;//e.vil)" in summary and "@&#8203;me" in summary
    assert all(line.count("|") - line.count("\\|") == 9
               for line in summary.splitlines() if line.startswith("| "))  # no cell split
    fig = throughput_chart(target)
    assert fig is not None and all("<script" not in json.dumps(t) for t in fig["data"])
    assert load_report(str(tmp_path / "report.json")).target == report.target
