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
