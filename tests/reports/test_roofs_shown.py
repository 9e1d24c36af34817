"""Each kernel family's roof and the theoretical peak, where a user reads the ceilings:
``diagnose hardware``, report.html's ceilings table and its roofline chart (issue 32).

The ceilings are issue 32's, synthetic (tests/hardware/test_roofs.py): an AMD EPYC whose
3x3 convolution reached 380 GFLOP/s while ``torch.mm`` reached 173 and ``F.linear`` 160,
2 vCPUs at 2.40 GHz with AVX-512. Nothing here is this machine's speed.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from rich.console import Console

from batchscope.classifiers.roofline import classify_batch
from batchscope.hardware.figures import TheoreticalPeak
from batchscope.hardware.theoretical import cpu_theoretical
from batchscope.records import BatchResult, ByteSplit, LatencyStats, OpStat, Report, Status
from batchscope.reports import html_rows, roofline_chart
from batchscope.reports.console import print_ceilings
from batchscope.reports.html import render_html
from batchscope.reports.markdown import render_summary
from tests.hardware.test_roofs import GFLOP, zen5
from tests.reports.test_html import parse

MATMUL, CONV = 173 * GFLOP, 380 * GFLOP
# The theoretical peak of zen5(theoretical=True): 2 cores x 2.4 GHz x 64 FLOP a cycle
# (16 fp32 lanes x 2 for an FMA x 2 FMA units).
BOUND = 2 * 2.4e9 * 64


def _printed(ceilings: object) -> str:
    console = Console(record=True, width=240)
    print_ceilings(console, ceilings)  # type: ignore[arg-type]
    return console.export_text()


def test_diagnose_hardware_shows_each_family_roof_and_the_bound() -> None:
    text = _printed(zen5(theoretical=True))
    lines = {line.split("│")[1].strip(): line for line in text.splitlines() if "│" in line}
    # one row a family and dtype, each with the probe that reached it
    assert "173 GFLOP/s" in lines["float32 matmul roof"]
    assert "reached by torch.mm at n=2048" in lines["float32 matmul roof"]
    assert "F.linear 160 GFLOP/s" in lines["float32 matmul roof"]  # the family's other probe
    assert "4.33 FLOP/byte" in lines["float32 matmul roof"]  # 173 / 40 GB/s
    assert "380 GFLOP/s" in lines["float32 conv roof"]
    assert "reached by a 3x3 conv2d at batch 16" in lines["float32 conv roof"]
    assert "a 3x3 conv2d" in lines["float32 peak: every other op's roof"]
    # the theoretical peak, labelled a bound, with its formula's numbers
    bound = lines["float32 theoretical peak (a bound)"]
    assert f"{BOUND / 1e9:.0f} GFLOP/s" in bound
    assert "a bound, not a measurement: 2 cores × 2.40 GHz × 64 FLOP/cycle" in bound
    assert "2 FMA units a core assumed" in text and "SMT threads count as cores" in text
    # the old label, which called the convolution's rate the matmul peak, is gone
    assert "matmul (via" not in text and "peak float32 matmul" not in text
    # what a report would flag about these roofs, in the same words: the convolution's
    # 380 GFLOP/s is 124% of the bound
    assert ("* a 3x3 conv2d, a probe of the float32 conv roof, reached 380 GFLOP/s in float32, "
            "124% of this machine's theoretical peak of 307 GFLOP/s") in " ".join(text.split())


def test_a_roof_an_op_raised_names_the_op() -> None:
    c = zen5()
    c.family_peaks["matmul"]["float32"] = dataclasses.replace(
        c.family_peaks["matmul"]["float32"], flops_per_s=200 * GFLOP, path="addmm",
        op_id="0:addmm#0")
    (row,) = [r for r in html_rows.roof_rows(c) if r.name == "float32 matmul roof"]
    assert row.flops_per_s == 200 * GFLOP
    assert row.how == "reached by addmm (0:addmm#0) in this run"


def test_the_html_ceilings_table_lists_the_family_roofs(
        sample_reports: dict[str, Report]) -> None:
    report = dataclasses.replace(sample_reports["cnn"], hardware=zen5(theoretical=True))
    text = " ".join(parse(render_html(report)).text)
    for shown in ("float32 matmul roof", "173 GFLOP/s", "reached by torch.mm at n=2048",
                  "float32 conv roof", "reached by a 3x3 conv2d at batch 16",
                  "float32 theoretical peak (a bound)",
                  "2 cores × 2.40 GHz × 64 FLOP/cycle", "ridge point"):
        assert shown in text, shown


def _op(name: str, gflops_per_s: float, intensity: float, flops: float = 2e9) -> OpStat:
    """An op of ``flops`` at this rate and intensity (its time and its bytes set them)."""
    return OpStat(op_id=f"0:{name}#0", name=name, input_shapes=[[256, 2048], [2048, 2048]],
                  dtype="float32", module="0", calls=1, time_s=flops / (gflops_per_s * GFLOP),
                  flops=int(flops), bytes=ByteSplit(0, 0, int(flops / intensity)))


def _report(sample: Report, ops: list[OpStat]) -> Report:
    """The sample with one measured batch size of these ops, classified under zen5()."""
    c = zen5()
    step = sum(op.time_s for op in ops)
    batch = classify_batch(BatchResult(8, Status.OK, ops=ops, profiled_step_s=step,
                                       latency_s=LatencyStats(step, step, step, 5),
                                       throughput_per_s=8 / step), c)
    return dataclasses.replace(sample, hardware=c, batches=[batch], recommendation=None)


def test_the_roofline_draws_the_family_roof_each_op_is_placed_against(
        sample_reports: dict[str, Report]) -> None:
    # issue 32: an addmm at 92% of the matmul roof (160 of 173 GFLOP/s) showed at 42% of
    # the one line drawn, the dtype's peak, which was the convolution's 380
    report = _report(sample_reports["mlp"], [_op("addmm", 160, 20.0),
                                                    _op("gelu", 1, 0.1, flops=1e6)])
    fig = roofline_chart.roofline(report)
    assert fig is not None
    lines = {t["name"]: t for t in fig["data"] if t.get("mode") == "lines"
             and t["name"].endswith(("roof", "peak"))}
    # the matmul roof the run used, and the dtype's peak (the gelu's roof); no convolution
    # ran, so no convolution roof is drawn
    assert set(lines) == {"float32 matmul roof", "float32 peak"}
    assert lines["float32 matmul roof"]["y"][-1] == MATMUL
    assert lines["float32 peak"]["y"][-1] == CONV
    labels = [a["text"] for a in fig["layout"]["annotations"]]
    assert "float32 matmul 173 GFLOP/s (torch.mm)" in labels
    # the addmm sits at its efficiency of that line: 160 / 173 = 92%
    (addmm,) = [op for op in report.batches[0].ops if op.name == "addmm"]
    assert addmm.efficiency == pytest.approx(160 / 173)
    points = [t for t in fig["data"] if t.get("showlegend") is False]
    (y,) = [y for t in points for y, hover in zip(t["y"], t["hovertext"]) if "addmm" in hover]
    assert y / lines["float32 matmul roof"]["y"][-1] == pytest.approx(addmm.efficiency)
    hover = next(h for t in points for h in t["hovertext"] if "addmm" in h)
    assert "92% of its roof: the float32 matmul roof" in hover
    # the ridge drawn is the matmul roof's, where the op spent its time: 173 / 40 GB/s
    assert fig["layout"]["shapes"][0]["x0"] == pytest.approx(MATMUL / 40e9)
    # and its label says so (issue 50: a report quoted ridges without saying whose)
    assert "ridge of the float32 matmul roof: 4.33 FLOP/byte" in labels


def test_a_family_roof_that_is_the_dtypes_peak_is_one_line(
        sample_reports: dict[str, Report]) -> None:
    report = _report(sample_reports["cnn"], [_op("convolution", 300, 60.0),
                                             _op("addmm", 100, 20.0)])
    fig = roofline_chart.roofline(report)
    assert fig is not None
    # the convolution's roof is the dtype's peak (the best of every probe): one line, named
    # for both, labelled with the probe that reached it
    names = [t["name"] for t in fig["data"] if t.get("mode") == "lines"]
    assert names == ["float32 conv roof = float32 peak", "float32 matmul roof"]
    labels = [a["text"] for a in fig["layout"]["annotations"]]
    assert "float32 conv = peak 380 GFLOP/s (a 3x3 conv2d)" in labels


def test_summary_md_quotes_the_matmul_roof_beside_the_peak(
        sample_reports: dict[str, Report]) -> None:
    # the "of roof" of its top ops is against the matmul roof: the facts say which it is
    report = dataclasses.replace(sample_reports["mlp"], hardware=zen5())
    ceilings = next(line for line in render_summary(report).splitlines()
                    if line.startswith("| ceilings |"))
    assert ("float32 matmul roof 173 GFLOP/s (torch.mm), peak 380 GFLOP/s, 40 GB/s, "
            "matmul ridge 4.33 FLOP/byte") in ceilings


def test_the_bounds_words_name_its_source() -> None:
    # a GPU's bound is its datasheet row's dense figure, not a product of guesses
    gpu = TheoreticalPeak({"bfloat16": 989e12}, "datasheet: H100 SXM (NVIDIA H100 datasheet)")
    assert html_rows.theoretical_how(gpu, "bfloat16") == (
        "a bound, not a measurement (datasheet: H100 SXM (NVIDIA H100 datasheet), dense)")
    # AMX: its bf16 rate is the matrix unit's, named; fp32's is the vector units'
    spr = ("model name\t: Intel(R) Xeon(R) Platinum 8480+ @ 2.00GHz\n"
           "flags\t\t: fma avx2 avx512f avx512_bf16 amx_tile amx_bf16\n")
    xeon = cpu_theoretical(1, spr, Path("/nonexistent"), cpu_count=8)
    assert xeon is not None
    assert html_rows.theoretical_how(xeon, "bfloat16").startswith(
        "a bound, not a measurement: 1 core × 2.00 GHz × 1,024 FLOP/cycle (avx512f, AMX for "
        "bfloat16, 2 FMA units a core assumed")
    assert "AMX" not in html_rows.theoretical_how(xeon, "float32")
    assert "clock the model name's, a base clock" in html_rows.theoretical_how(xeon, "float32")
