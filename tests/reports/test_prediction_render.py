"""The fitted step-time model in every format: predicted against measured, and the batch
sizes that were not measured, labelled as predictions."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from batchscope.classifiers.analyze import analyze
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.records import batch_result_from_dict
from batchscope.reports.console import print_summary
from batchscope.reports.html import render_html
from batchscope.reports.markdown import render_summary


def test_unmeasured_sizes_are_predicted_and_labelled(sample_docs: dict[str, dict[str, Any]]):
    doc = sample_docs["llm_decode"]
    measured = [batch_result_from_dict(b) for b in doc["batches"] if b["batch_size"] <= 8]
    report = analyze(doc["model"], Ceilings.from_dict(doc["hardware"]), measured,
                     Limits(max_batch=32), doc["run"])
    out = report.to_dict()
    points = {p["batch_size"]: p for p in out["prediction"]["points"]}
    assert sorted(points) == [8, 16, 32]  # 8 forecast from 1, 2, 4; 16 and 32 predicted
    assert points[16]["measured_latency_s"] is None and points[8]["error"] is not None
    assert out["prediction"]["fitted_on"] == [2, 4, 8] == points[32]["predicted_from"]

    summary = render_summary(out)
    table = summary[summary.index("#### Predicted against measured"):]
    assert "| 16 | not measured |" in table and "| 2, 4, 8 |" in table
    assert "each size forecast from the three measured before it" in table
    assert "not measured, predicted from batches 2, 4, 8: batch 16" in table

    page = render_html(out)
    assert "Predicted against measured" in page and "not measured: predicted" in page

    console = Console(file=io.StringIO(), width=200)
    print_summary(console, report)
    assert "Step-time model, each size forecast" in console.file.getvalue()


def test_the_sentence_names_what_the_probes_timed():
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
        sample_docs: dict[str, dict[str, Any]]):
    # Decode measured to batch 8 only (a sweep cut short), predicted to 64: the model puts
    # 64 far past batch 8 even at the low end of its band, so the report says which batch
    # the pick would be, labelled a prediction, in every format.
    doc = sample_docs["llm_decode"]
    measured = [batch_result_from_dict(b) for b in doc["batches"] if b["batch_size"] <= 8]
    report = analyze(doc["model"], Ceilings.from_dict(doc["hardware"]), measured,
                     Limits(max_batch=64), doc["run"])
    out = report.to_dict()
    pick = out["prediction"]["pick"]
    assert report.recommendation.batch_size == 8 and pick["instead_of"] == 8
    assert pick["batch_size"] > 8 and not pick["measured"]
    assert pick["margin"] == out["prediction"]["max_abs_error"] >= 0.1
    # The same sample's full sweep measured that size: it does beat batch 8 by more than
    # the rule's 1/0.9, as predicted.
    full = {b["batch_size"]: b["throughput_per_s"] for b in doc["batches"]}
    assert full[pick["batch_size"]] > full[8] / 0.9

    sentence = f"Not measured, predicted: batch {pick['batch_size']} at"
    assert sentence in render_summary(out)
    assert sentence in render_html(out)
    console = Console(file=io.StringIO(), width=400)
    print_summary(console, report)
    assert sentence in console.file.getvalue()
    assert f"--batch-sizes {pick['batch_size']}" in console.file.getvalue()
    # The full sweep itself (nothing unmeasured below its largest size) has no such pick.
    whole = analyze(doc["model"], Ceilings.from_dict(doc["hardware"]),
                    [batch_result_from_dict(b) for b in doc["batches"]],
                    Limits(max_batch=max(full)), doc["run"])
    assert whole.prediction is not None and whole.prediction.pick is None


def test_a_pick_whose_fields_are_not_numbers_is_not_said():
    from batchscope.reports.narrative import predicted_pick_headline

    good = {"batch_size": 64, "throughput_per_s": 650.0, "measured": False,
            "best_batch_size": 64, "best_throughput_per_s": 650.0, "margin": 0.2,
            "instead_of": 8, "instead_of_throughput_per_s": 116.0}
    doc = {"model": {"unit": "token"}, "batches": [], "prediction": {"pick": good}}
    assert predicted_pick_headline(doc).startswith(
        "Not measured, predicted: batch 64 at 650 tokens/s, at least 542 tokens/s with its "
        "step 20% longer (the step-time model's largest miss on the sizes it forecast). If "
        "that holds, it would be recommended instead of batch 8 (116 tokens/s measured)")
    assert predicted_pick_headline(doc).endswith("Measure to be sure: --batch-sizes 64.")
    # The pick may be a smaller size than the fastest predicted: both are worth measuring.
    doc["prediction"]["pick"] = {**good, "batch_size": 32, "throughput_per_s": 600.0}
    assert predicted_pick_headline(doc).endswith("--batch-sizes 32,64.")
    # "measured" must be true itself, not a string that reads as true.
    doc["prediction"]["pick"] = {**good, "measured": "no"}
    assert "it would be recommended instead of batch 8" in predicted_pick_headline(doc)
    for field, bad in (("batch_size", "<b>64</b>"), ("instead_of", True), ("margin", -1),
                       ("throughput_per_s", float("inf")), ("margin", float("nan")),
                       ("best_throughput_per_s", None)):
        doc["prediction"]["pick"] = {**good, field: bad}
        assert predicted_pick_headline(doc) is None
