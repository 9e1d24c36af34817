"""The fitted step-time model in every format: predicted against measured, and the batch
sizes that were not measured, labelled as predictions."""

from __future__ import annotations

import copy
import io
from typing import Any

import pytest
from rich.console import Console

from batchscope.assemble import Measured, assemble
from batchscope.errors import UsageError
from batchscope.plan import Limits
from batchscope.records import SCHEMA, Report
from batchscope.reports.console import print_summary
from batchscope.reports.html import render_html
from batchscope.reports.markdown import render_summary
from tests.reports.conftest import typed


def _cut_short(doc: dict[str, Any], largest: int, max_batch: int) -> Report:
    """The sample's report as if its sweep had measured up to ``largest`` only, with the
    plan's limit at ``max_batch`` (the step-time model predicts the sizes in between)."""
    sample = typed(doc)  # a fresh copy: assemble must not share records with the fixture
    measured = [b for b in sample.batches if b.batch_size <= largest]
    return assemble(Measured(sample.model, sample.run, sample.hardware, measured,
                             Limits(max_batch=max_batch)))


def _console_text(report: Report, width: int) -> str:
    out = io.StringIO()
    print_summary(Console(file=out, width=width), report)
    return out.getvalue()


def test_unmeasured_sizes_are_predicted_and_labelled(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    report = _cut_short(sample_docs["llm_decode"], largest=8, max_batch=32)
    assert report.prediction is not None
    points = {p.batch_size: p for p in report.prediction.points}
    assert sorted(points) == [8, 16, 32]  # 8 forecast from 1, 2, 4; 16 and 32 predicted
    assert points[16].measured_latency_s is None and points[8].error is not None
    assert report.prediction.fitted_on == [2, 4, 8] == points[32].predicted_from

    summary = render_summary(report)
    table = summary[summary.index("#### Predicted against measured"):]
    assert "| 16 | not measured |" in table and "| 2, 4, 8 |" in table
    assert "each size forecast from the three measured before it" in table
    assert "not measured, predicted from batches 2, 4, 8: batch 16" in table

    page = render_html(report)
    assert "Predicted against measured" in page and "not measured: predicted" in page

    assert "Step-time model, each size forecast" in _console_text(report, 200)


def test_the_sentence_names_what_the_probes_timed() -> None:
    from batchscope.reports.view import _probed_kinds

    assert _probed_kinds({"mm[[8,16],[16,4]]": 1e-4}) == "matmuls"
    both = {"addmm[[4],[8,16],[16,4]]": 1e-4, "convolution[[8,3,8,8],[4,3,3,3]][]": 1e-4}
    assert _probed_kinds(both) == "matmuls and convolutions"
    # a backward convolution is a per-row op here, not a convolution
    assert _probed_kinds({"convolution_backward[[8,4,6,6]]": 1e-4}) == (
        "per-row ops (batch norm, pooling, ...)")
    assert _probed_kinds({**both, "native_batch_norm[[8,4,6,6]]": 1e-4}) == (
        "matmuls, convolutions and per-row ops (batch norm, pooling, ...)")


def test_unmeasured_sizes_that_would_move_the_pick_are_said_and_hold_on_the_full_sweep(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # Decode measured to batch 8 only (a sweep cut short), predicted to 64: the model puts
    # 64 far past batch 8 even at the low end of its band, so the report says which batch
    # the pick would be, labelled a prediction, in every format.
    doc = sample_docs["llm_decode"]
    report = _cut_short(doc, largest=8, max_batch=64)
    assert report.prediction is not None and report.recommendation is not None
    pick = report.prediction.pick
    assert pick is not None
    assert report.recommendation.batch_size == 8 and pick.instead_of == 8
    assert pick.batch_size > 8 and not pick.measured
    assert report.prediction.max_abs_error is not None
    assert pick.margin == report.prediction.max_abs_error >= 0.1
    # The same sample's full sweep measured that size: it does beat batch 8 by more than
    # the rule's 1/0.9, as predicted.
    full = {b["batch_size"]: b["throughput_per_s"] for b in doc["batches"]}
    assert full[pick.batch_size] > full[8] / 0.9

    sentence = f"Not measured, predicted: batch {pick.batch_size} at"
    assert sentence in render_summary(report)
    assert sentence in render_html(report)
    console = _console_text(report, 400)
    assert sentence in console
    assert f"--batch-sizes {pick.batch_size}" in console
    # The full sweep itself (nothing unmeasured below its largest size) has no such pick.
    whole = _cut_short(doc, largest=max(full), max_batch=max(full))
    assert whole.prediction is not None and whole.prediction.pick is None


def _with_pick(pick: dict[str, Any]) -> dict[str, Any]:
    """A report dict holding nothing but a predicted pick."""
    return {"schema": SCHEMA, "model": {"target": "m", "unit": "token"}, "hardware": None,
            "batches": [], "recommendation": None, "run": {},
            "prediction": {"fitted_on": [], "points": [], "knee_batch": None,
                           "max_abs_error": None, "pick": pick}}


def test_a_pick_whose_fields_are_not_numbers_is_not_said() -> None:
    from batchscope.reports.narrative import predicted_pick_headline

    good = {"batch_size": 64, "throughput_per_s": 650.0, "measured": False,
            "best_batch_size": 64, "best_throughput_per_s": 650.0, "margin": 0.2,
            "instead_of": 8, "instead_of_throughput_per_s": 116.0}
    headline = predicted_pick_headline(typed(_with_pick(good)))
    assert headline is not None and headline.startswith(
        "Not measured, predicted: batch 64 at 650 (542–812) tokens/s, its step within ±20% "
        "(the step-time model's largest miss on the sizes it forecast, at least 10%); the rule "
        "counts it at the low end. If the prediction holds, it would be recommended instead "
        "of batch 8 (116 tokens/s measured)")
    assert headline.endswith("Measure to be sure: --batch-sizes 64.")
    # The pick may be a smaller size than the fastest predicted: both are worth measuring.
    smaller = predicted_pick_headline(
        typed(_with_pick({**good, "batch_size": 32, "throughput_per_s": 600.0})))
    assert smaller is not None and smaller.endswith("--batch-sizes 32,64.")
    # A negative band is no prediction to quote.
    assert predicted_pick_headline(typed(_with_pick({**good, "margin": -1}))) is None
    # Fields of the wrong type (a string for a bool, markup for a size, a bool for a size, a
    # non-finite or missing number) never reach a renderer: the one loader refuses them.
    for field, bad in (("measured", "no"), ("batch_size", "<b>64</b>"), ("instead_of", True),
                       ("throughput_per_s", float("inf")), ("margin", float("nan")),
                       ("best_throughput_per_s", None)):
        with pytest.raises(UsageError, match="is not a batchscope report"):
            typed(_with_pick({**good, field: bad}))


def _with_uncounted_attention(doc: dict[str, Any], share: float) -> dict[str, Any]:
    """The report as if its attention had no count: that op's FLOPs None and its time
    ``share`` of every profiled step (issue 48: a fused path nobody counted)."""
    out = copy.deepcopy(doc)
    for b in out["batches"]:
        ops = b.get("ops") or []
        attention = next((o for o in ops if "attention" in o["name"]), None)
        if attention is None or not b.get("profiled_step_s"):
            continue
        attention["flops"] = None
        attention["time_s"] = share * b["profiled_step_s"]
    return out


def test_a_step_with_a_hole_moves_no_pick_and_claims_no_band(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 48: an interrupted run of the encoder classifier said "batch 1024 at 1.72 k
    # (1.57-1.91 k) sequences/s, its step within ±10%"; 96% of its step was uncounted, and
    # full sweeps measured 52 sequences/s there
    doc = _with_uncounted_attention(sample_docs["llm_decode"], 0.3)
    report = _cut_short(doc, largest=8, max_batch=64)
    assert report.uncounted is not None and report.uncounted.share >= 0.3
    assert "_scaled_dot_product_flash_attention_for_cpu" in report.uncounted.ops
    assert report.prediction is not None and report.prediction.pick is None
    summary = render_summary(report)
    assert "Not measured, predicted" not in summary  # the pick the counts cannot back
    said = " ".join(summary.split())
    assert "Uncounted: 30% of the step at batch" in said
    assert "with no band" in said and "±" not in v_prediction(report)
    assert "Uncounted:" in _console_text(report, 400)
    assert "Uncounted:" in render_html(report)
    # B* says what it reads
    from batchscope.reports.narrative import critical_batch

    section = critical_batch(report)
    assert section is not None and "read the counted ops only" in " ".join(section.paragraphs)


def test_a_fully_counted_report_says_nothing_of_holes(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    report = _cut_short(sample_docs["llm_decode"], largest=8, max_batch=64)
    assert report.uncounted is None and report.prediction is not None
    assert report.prediction.pick is not None
    assert "Uncounted" not in render_summary(report)


def v_prediction(report: Report) -> str:
    from batchscope.reports.view import prediction_summary

    return prediction_summary(report)
