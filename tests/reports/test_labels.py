"""Issue 32 (H4): labels that match the numbers, in the terminal and the page.

A verdict word ("mostly", "launch-bound") only where its share is a majority; a duration
never printed in exponent notation; an error shown whole; no prediction above a batch size
that failed; report.html never scrolling sideways because of a wide table or a long token.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any

from rich.console import Console

from batchscope.assemble import Measured, assemble
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    Interval,
    LatencyStats,
    ModelInfo,
    Report,
    RunInfo,
    Source,
    Status,
    TimeBasis,
    TimeShare,
)
from batchscope.reports import fmt, narrative
from batchscope.reports.console import _latency_cells, print_summary
from batchscope.reports.html import render_html
from tests.reports.conftest import typed


def _console(report: Report, width: int = 80) -> str:
    console = Console(width=width, record=True, color_system=None)
    print_summary(console, report)
    return console.export_text()


def _flat(text: str) -> str:
    """Text with every run of whitespace one space (a terminal wraps long lines)."""
    return " ".join(text.split())


# -- verdicts only where the share is a majority -------------------------------------------
def _as_trace(report: Report, share: TimeShare) -> Report:
    """A sample's report as a GPU trace of unknown batch size whose first batch's step
    divides as ``share`` says."""
    first = dataclasses.replace(report.batches[0], time_share=share,
                                time_basis=TimeBasis.DEVICE)
    run = dataclasses.replace(report.run, source=Source.TRACE, batch_size_known=False)
    return dataclasses.replace(report, run=run, batches=[first], recommendation=None)


# The trace: 28% of the step in ops without a FLOP formula is its largest share,
# but not most of it (28 + 27 + 20 + 15 + 10 = 100%).
SPLIT = TimeShare(uncounted=0.28, idle=0.27, memory=0.20, compute=0.15, overhead=0.10)


def test_a_largest_share_under_half_is_not_called_most_of_the_step(
        sample_reports: dict[str, Report]) -> None:
    report = _as_trace(sample_reports["mlp"], SPLIT)
    headline = narrative.trace_headline(report)
    assert headline is not None
    assert "mostly" not in headline
    assert "largest share in ops without a FLOP formula (28% of the step, less than half)" \
        in headline
    explanation = narrative.explanation(report)
    assert "Most of the step" not in explanation
    assert "The largest share of the step (28%, less than half) is in ops without" \
        in explanation


def test_a_majority_keeps_its_verdict(sample_reports: dict[str, Report]) -> None:
    idle = TimeShare(idle=0.62, memory=0.2, compute=0.18)
    report = _as_trace(sample_reports["mlp"], idle)
    assert "launch-bound, the GPU waiting on the host (62% of the step)" in (
        narrative.trace_headline(report) or "")
    assert "The step is launch-bound: the GPU sits idle most of the time" in (
        narrative.explanation(report))
    # ...and an idle share under half is the largest share, not "launch-bound"
    under = _as_trace(sample_reports["mlp"], TimeShare(idle=0.4, memory=0.35, compute=0.25))
    assert "launch-bound" not in (narrative.trace_headline(under) or "")
    assert "sits idle most of the time" not in narrative.explanation(under)


# -- the roofline says whose roofs it draws ------------------------------------------------
def test_a_datasheet_roofline_is_not_this_machines(sample_reports: dict[str, Report]) -> None:
    report = sample_reports["mlp"]
    assert "<h3>Roofline of this machine</h3>" in render_html(report)
    assert report.hardware is not None
    sheet = dataclasses.replace(report.hardware, source="datasheet",
                                name="NVIDIA H100 80GB HBM3")
    page = render_html(dataclasses.replace(report, hardware=sheet))
    assert "Roofline of this machine" not in page
    assert "<h3>Roofline of the NVIDIA H100 80GB HBM3 datasheet</h3>" in page


# -- numbers in the terminal ---------------------------------------------------------------
def test_a_figure_that_rounds_up_moves_to_the_next_unit() -> None:
    # 999.6 µs at 3 significant digits is 1,000 µs: "1 ms", never "1e+03 µs"
    assert fmt.seconds(999.6e-6) == "1 ms"
    assert fmt.seconds(0.99996) == "1.00 s"
    assert fmt.si(999_700, "FLOP/s") == "1 MFLOP/s"
    assert fmt.number(999.7) == "1,000"
    # the ends of an interval in the figure's unit: 999.7 µs among µs is "1,000 µs"
    assert fmt.seconds_band(538e-6, Interval(500e-6, 999.7e-6)) == "538 µs (500–1,000 µs)"
    assert fmt.seconds_band(999.7e-6, Interval(0.9e-3, 1.1e-3)) == "1 ms (0.9–1.1 ms)"


def test_the_spread_column_formats_both_ends_as_the_median() -> None:
    # A report written before intervals shows p25-p75 (the "538-1.24e+03")
    lat = LatencyStats(700e-6, 538e-6, 999.7e-6, 40)
    batch = BatchResult(1, Status.OK, latency_s=lat, throughput_per_s=1 / 700e-6)
    median, spread = _latency_cells(batch)
    assert (median, spread) == ("700 µs", "538–1,000 µs")
    report = _report([batch])
    # as written before intervals: the p25-p75 column is the terminal's only spread
    old = dataclasses.replace(report, batches=[dataclasses.replace(
        b, latency_interval_s=None, throughput_interval_per_s=None) for b in report.batches])
    table = _console(old)
    assert "p25-p75" in table and "538–1,000 µs" in table and "e+" not in table


def _ok(b: int, step_s: float) -> BatchResult:
    lat = LatencyStats(step_s, step_s * 0.97, step_s * 1.03, 40)
    return BatchResult(b, Status.OK, latency_s=lat, throughput_per_s=b / step_s)


def _report(results: list[BatchResult], max_batch: int = 8) -> Report:
    return assemble(Measured(ModelInfo(target="fragile.py"), RunInfo(), None, results,
                             Limits(max_batch=max_batch)))


# The user's error, past any column's width: its cause is at the end.
ERROR = ("RuntimeError: fragile model cannot take a batch of 8 rows: its reshape needs a "
         "multiple of 3 rows, and 8 is not one")
FRAME = '  File "fragile.py", line 12, in make_inputs'


def test_an_error_is_shown_whole_under_the_table() -> None:
    failed = BatchResult(8, Status.MODEL_ERROR, error=f"{ERROR}\n{FRAME}")
    text = _console(_report([_ok(1, 1e-3), _ok(2, 1.5e-3), _ok(4, 2.5e-3), failed]))
    flat = _flat(text)
    assert f"batch 8 (model_error): {ERROR}" in flat
    assert _flat(FRAME) in flat
    # the table's status column says the status only
    row = next(line for line in text.splitlines() if re.match(r"\W*8\b", line))
    assert "model_error" in row and "fragile" not in row


# -- no prediction above a size that failed -------------------------------------------------
def _cut_short(doc: dict[str, Any], failed: BatchResult, max_batch: int) -> Report:
    """The sample's report measured below ``failed``'s batch size, which failed."""
    sample = typed(doc)
    kept = [b for b in sample.batches if b.batch_size < failed.batch_size]
    return assemble(Measured(sample.model, sample.run, sample.hardware, [*kept, failed],
                             Limits(max_batch=max_batch)))


def test_no_size_above_one_that_failed_is_predicted(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    for status in (Status.MODEL_ERROR, Status.TIMEOUT):
        failed = BatchResult(8, status, error=ERROR)
        report = _cut_short(sample_docs["llm_decode"], failed, max_batch=64)
        points = report.prediction.points if report.prediction else []
        assert all(p.batch_size < 8 for p in points), status
        assert report.prediction is None or report.prediction.pick is None
        text = _flat(_console(report, width=200))
        assert "not measured, predicted" not in text
        assert not re.search(r"batch (8|16|32|64) [\d.]+ k? ?tokens/s", text)


# -- report.html never scrolls sideways -----------------------------------------------------
# An error with no space to break at (a path), as long as a page is wide.
LONG_TOKEN = "/very/long/path/" + "segment_" * 60 + "model.py"


def failed_report(doc: dict[str, Any]) -> Report:
    """A sample's report with a batch size that failed on a long unbroken error, and a
    flag quoting it: the wide content of a real failed sweep."""
    doc = dict(doc, batches=[*doc["batches"], {
        "batch_size": 4096, "status": "model_error",
        "error": f"RuntimeError: cannot open {LONG_TOKEN}\n  File \"{LONG_TOKEN}\", line 3"}])
    return typed(doc)


def test_every_table_scrolls_in_its_own_box(sample_docs: dict[str, dict[str, Any]]) -> None:
    page = render_html(failed_report(sample_docs["cnn"]))
    body = page[page.index("<body"):]
    tables = [m.start() for m in re.finditer(r"<table\b", body)]
    assert len(tables) >= 3  # the ops, the ceilings, the timings
    for start in tables:
        before = body[:start].rstrip()
        assert before.endswith('<div class="table-wrap">'), body[start - 200:start + 80]
    assert LONG_TOKEN in page  # the error is shown whole, in the timings table


def test_grid_columns_shrink_and_long_tokens_break() -> None:
    from batchscope.reports.page import static_text as _static

    css = _static("report.css")
    # A grid column sized "1fr" is at least as wide as its widest table (min-width: auto):
    # every flexible column is minmax(<floor>, Nfr), and the row's children may shrink.
    for columns in re.findall(r"grid-template-columns:\s*([^;}]+)", css):
        bare = re.sub(r"minmax\((0|\d+px), \d+fr\)", "", columns)
        assert "fr" not in bare, columns
    assert re.search(r"\.row > \* \{ min-width: 0; \}", css)
    assert re.search(r"\.table-wrap \{[^}]*overflow-x: auto", css)
    error_cell = re.search(r"\.error-row td \{([^}]*)\}", css)
    assert error_cell and "overflow-wrap: anywhere" in error_cell.group(1)
    assert re.search(r"main li[^{]*\{ overflow-wrap: anywhere; \}", css)
