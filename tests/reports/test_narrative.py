"""The one prose module: every fact of the explanation stated once, and the same text in
report.json, report.html and summary.md."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path
from typing import Any

from batchscope.assemble import Measured, assemble
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    LatencyStats,
    ModelInfo,
    Report,
    RunInfo,
    Status,
    Stop,
    StopKind,
)
from batchscope.reports import fmt, narrative
from batchscope.reports import view as v
from batchscope.reports.escape import md_text
from batchscope.reports.flag_text import rule_text
from batchscope.reports.html import render_html
from batchscope.reports.json_report import document
from batchscope.reports.markdown import render_summary
from tests.reports.conftest import load, typed
from tests.reports.test_html import parse

# A phrase per fact of the explanation; each must appear exactly once.
FACTS = (
    "Of the profiled step,",             # time share by bound at the first batch
    "One step moves",                    # the byte split
    "B* ≈",                              # the predicted B*, from shared and per-row time
    "that the whole batch shares",
    "Measured, the",                     # the measured knee against the prediction
    "of its roofline speed",             # efficiency at the first and the last batch
    "Batching lifts throughput",         # the speedup and the recommendation rule
)


def test_each_fact_is_stated_once(sample_reports: dict[str, Report]) -> None:
    for name, report in sample_reports.items():
        text = narrative.explanation(report)
        for fact in FACTS:
            assert text.count(fact) == 1, (name, fact)
        rec = report.recommendation
        assert rec is not None
        assert text.count(rule_text(rec.rule, report.model.unit)) == 1
        assert f"B* ≈ {fmt.number(rec.predicted_critical_batch)} row" in text


def test_where_the_layers_turn_compute_bound(sample_docs: dict[str, dict[str, Any]],
                                            sample_reports: dict[str, Report]) -> None:
    llm = narrative.explanation(sample_reports["llm_decode"])
    terms = sample_docs["llm_decode"]["recommendation"]["prediction"]
    # moving 494.6 MB whatever the batch, each row adds 252 MFLOP and 10.7 MB (9.6 MB state)
    assert f"move {fmt.nbytes(terms['layers_fixed_bytes'])} per step" in llm
    assert f"each row adds {fmt.flops(terms['layers_flops_per_row'])}" in llm
    assert "reach the ridge point of the float32 peak (13.8 FLOP/byte) at about 65 rows" in llm
    assert "compute-bound from the start" in narrative.explanation(sample_reports["cnn"])
    doc = copy.deepcopy(sample_docs["llm_decode"])
    doc["recommendation"].update(predicted_compute_bound_batch=None,
                                 predicted_compute_bound_infinite=True)
    assert "never turn compute-bound" in narrative.explanation(typed(doc))


def test_the_crossing_quotes_the_ridge_it_was_worked_out_against(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 32: the crossing is where the decoder's matmuls meet the matmul roof's ridge
    # (critical_batch.predict_compute_bound_batch), not the dtype's peak's, which a 3x3
    # convolution may set twice as high; the sentence quotes the ridge the number came from
    doc = copy.deepcopy(sample_docs["llm_decode"])
    terms = doc["recommendation"]["prediction"]
    terms["peak_flops_per_s"] = 5 * terms["bandwidth_bytes_per_s"]  # a matmul ridge of 5
    doc["hardware"]["family_peaks"] = {"matmul": {"float32": {
        "flops_per_s": terms["peak_flops_per_s"], "path": "mm"}}}
    llm = narrative.explanation(typed(doc))
    assert "reach the ridge point of the float32 matmul roof (5 FLOP/byte) at about 65" in llm
    # a blend of several families' roofs is named as such
    terms["peak_flops_per_s"] = 4 * terms["bandwidth_bytes_per_s"]
    assert ("reach the ridge point of the roofs their kernels run at, weighted by their FLOPs "
            "(4 FLOP/byte) at about 65") in narrative.explanation(typed(doc))
    # a report without the terms' roof (older): the dtype's peak's ridge, as before
    terms["peak_flops_per_s"] = None
    assert ("reach the ridge point of this machine's float32 peak (13.8 FLOP/byte)"
            in narrative.explanation(typed(doc)))


def test_the_knee_moves_by_the_efficiency_ratio(sample_docs: dict[str, dict[str, Any]],
                                                sample_reports: dict[str, Report]) -> None:
    doc = sample_docs["mlp"]
    first, last = doc["batches"][0], doc["batches"][-1]
    e0 = first["predicted_step_s"] / first["profiled_step_s"]
    e1 = last["predicted_step_s"] / last["profiled_step_s"]
    predicted = doc["recommendation"]["predicted_critical_batch"]
    text = narrative.explanation(sample_reports["mlp"])
    assert f"batch 1 ran at {fmt.pct(e0)} of its roofline speed" in text
    assert f"batch {last['batch_size']} at {fmt.pct(e1)}" in text
    # the knee moves by e1 / e0 on its own (2.6× in the recorded run: from 64 to about 164)
    assert f"to about {fmt.number(predicted * e1 / e0)}" in text


def test_the_max_batch_hint_only_when_the_cap_stopped_a_rising_curve(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    doc = copy.deepcopy(sample_docs["mlp"])
    assert "--max-batch" not in narrative.explanation(typed(doc))
    doc["recommendation"]["still_rising_at_cap"] = True
    text = narrative.explanation(typed(doc))
    assert text.count("raise --max-batch") == 1
    assert "still rising at the largest batch tried (1024)" in text


def test_html_and_markdown_show_the_explanation_once(
        sample_reports: dict[str, Report]) -> None:
    for report in sample_reports.values():
        page = " ".join(parse(render_html(report)).text)
        summary = render_summary(report)
        for paragraph in (p for s in narrative.sections(report) for p in s.paragraphs):
            assert page.count(paragraph) == 1
        for fact in FACTS:
            assert page.count(fact) == 1 and summary.count(md_text(fact)) == 1, fact


def ok(b: int, throughput: float) -> BatchResult:
    lat = b / throughput
    return BatchResult(b, Status.OK, latency_s=LatencyStats(lat, lat, lat, 5),
                       throughput_per_s=throughput)


def test_report_json_holds_the_same_text() -> None:
    results = [ok(1, 26.4), ok(2, 50.0), ok(4, 90.0)]
    model = ModelInfo(target="m.py", unit="token")
    report = assemble(Measured(model, RunInfo(), None, results, Limits(),
                               stop=Stop(StopKind.CAP, values={"largest": 4})))
    rec = report.recommendation
    assert rec is not None and rec.still_rising_at_cap
    text = narrative.explanation(report)
    assert document(report)["recommendation"]["explanation"] == text
    # 90 / 26.4, with the interval of the quotient (each side ±5%, the drift floor)
    assert rec.speedup_interval is not None
    assert "Batching lifts throughput 3.4× (3.1–3.8×) over batch 1" in text
    assert "raise --max-batch" in text
    stopped = assemble(Measured(model, RunInfo(), None, results, Limits(),
                                stop=Stop(StopKind.FAILED, 8, {"status": "oom"})))
    assert stopped.recommendation and not stopped.recommendation.still_rising_at_cap


def test_training_and_watch_reports_say_nothing_of_serving(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 13, finding 7: a training step or a watched loop carried a serving section
    inference = next(d for d in sample_docs.values() if d["model"].get("mode") != "train")
    assert "Continuous batching" in narrative.explanation(typed(inference))
    watched = {"steps": 40, "timed_steps": 30, "block_steps": 1}
    for change in ({"model": {**inference["model"], "mode": "train"}},
                   {"run": {**inference["run"], "watch": watched}},
                   {"run": {**inference["run"], "source": "watch"}}):
        doc = {**copy.deepcopy(inference), **change}
        text = narrative.explanation(typed(doc))
        assert "Continuous batching" not in text and "static batch" not in text.lower()
        assert "Batching lifts throughput" in text  # the verdict stays


def test_compute_bound_prose_agrees_with_the_measured_speedup(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 13, finding 7: "compute-bound already ... little to share" beside a 3.5x speedup
    doc = copy.deepcopy(sample_docs["cnn"])
    doc["batches"][0]["time_share"] = {"memory": 0.1, "compute": 0.8, "overhead": 0.05,
                                       "uncounted": 0.0, "framework": 0.05}
    rec = doc["recommendation"]
    rec.update(speedup_from_batching=3.5, predicted_compute_bound_batch=0.8,
               predicted_compute_bound_infinite=False)
    text = narrative.explanation(typed(doc))
    assert "Most of the step's time is in compute-bound ops" in text
    assert "Batching still lifted throughput 3.5×" in text
    assert "little" not in text and "small remainder" not in text
    rec["speedup_from_batching"] = 1.1
    text = narrative.explanation(typed(doc))
    assert "small remainder" in text and "little weight reading to share" in text


def test_the_ridge_point_names_the_dtype_it_belongs_to(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 30: under --amp bf16 the ridge quoted is bfloat16's (the matmuls ran in it), so
    # its dtype must say so, not the weights' float32
    doc = copy.deepcopy(sample_docs["cnn"])
    ridges = doc["hardware"]["ridge_flops_per_byte"]
    fp32 = f"ridge point of this machine's float32 peak ({fmt.number(ridges['float32'])} FLOP"
    assert fp32 in narrative.explanation(typed(doc))
    doc["model"]["amp"] = "bfloat16"
    text = narrative.explanation(typed(doc))
    assert (f"ridge point of this machine's bfloat16 peak ({fmt.number(ridges['bfloat16'])} "
            "FLOP/byte)") in text
    assert "float32 peak" not in text


# A real training CNN's report (diagnose samples/train_cnn.py --device cpu, this 2-core
# machine, 2026-12): batch norm backward records output_mask [true, true, true], the
# allocator was timed side by side, and the layers' crossing is read against the conv roof.
TRAIN_CNN = Path(__file__).resolve().parent.parent / "data" / "reports" / "train_cnn.json"


def _train_cnn() -> dict[str, Any]:
    return json.loads(TRAIN_CNN.read_text(encoding="utf-8"))


def test_a_training_cnn_report_reads_back() -> None:
    # call_args [true, 1e-05, [true, true, true]] was refused as "a boolean, not an integer"
    report = typed(_train_cnn())
    masks = [op.call_args for op in report.batches[0].ops
             if op.name == "native_batch_norm_backward"]
    assert masks and all(args is not None and args[2] == [True, True, True] for args in masks)


_RIDGE = re.compile(r"ridge point of ([^()]*?)\s*\(([\d.]+) FLOP/byte\)")


def test_every_ridge_point_quoted_names_its_roof() -> None:
    # issue 50: 4.23, 3.74 and 3.73 FLOP/byte in one report, none saying whose roof it was
    text = narrative.explanation(typed(_train_cnn()))
    quoted = _RIDGE.findall(text)
    assert len(quoted) >= 2
    assert text.count("ridge point of") == len(quoted)  # no bare "ridge point of 6.74"
    names = {name for name, _ in quoted}
    assert names == {"this machine's float32 peak", "the float32 conv roof"}


def test_a_memory_bound_step_above_the_ridge_is_not_said_to_wait_on_memory_so() -> None:
    # issue 50: "9.59 FLOP per byte, above this machine's ridge point of 4.23 FLOP/byte. So
    # the step waits on memory": the "so" did not follow from the numbers before it.
    doc = _train_cnn()
    doc["batches"][0]["time_share"] = {"memory": 0.6, "compute": 0.3, "overhead": 0.05,
                                       "uncounted": 0.0, "framework": 0.05}
    report = typed(doc)
    assert v.step_intensity(report.batches[0]) > v.ridge(report)  # 8.91 over 6.74
    text = narrative.explanation(report)
    assert "So the step waits on memory" not in text
    assert "Yet most of the step's time (60%) is in memory-bound ops: the step as a whole is " \
           "above the ridge only because" in text
    # Below the ridge the "so" follows, as before (the decoder at batch 1: 0.498 FLOP/byte).
    assert "So the step waits on memory, and mostly on weights" in narrative.explanation(
        typed(load("llm_decode")))


def test_two_picks_come_with_which_to_run_and_the_allocator_setting() -> None:
    # issue 50: "with the buffers kept the pick would be batch 16 ... instead of 4", and no
    # word on which to run or how.
    doc = _train_cnn()
    env = " ".join(f"{k}={val}" for k, val in doc["allocator"]["env"].items())
    headline = narrative.allocator_headline(typed(doc))
    assert headline is not None and "instead of 4. Run batch 4 as the process is" in headline
    # Where keeping the buffers ran batch 16 faster beyond noise: run it so, and how.
    kept = next(b for b in doc["allocator"]["batches"] if b["batch_size"] == 16)
    kept["speedup_interval"] = {"low": 1.1, "high": 1.6}
    headline = narrative.allocator_headline(typed(doc))
    assert headline is not None
    assert f"Run batch 16 with the buffers kept: start the process that runs it with {env}" \
           in headline
    assert f"`env {env} python train.py`" in headline
    assert headline.endswith("Without that setting run batch 4.")
