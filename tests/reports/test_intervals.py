"""Issue 31: every figure with its 95% interval, in every format, and sentences that decide
only where the intervals hold. The reports are typed and built from known timings (no speed
of this machine is asserted): each timing pass's own interval of its median is given, the
drift control's numbers too, and assemble widens them as a sweep's would be.
"""

from __future__ import annotations

import dataclasses
import re

from rich.console import Console

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.uncertainty import ratio
from batchscope.page_faults import fault_share
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    DriftControl,
    Interval,
    LatencyStats,
    ModelInfo,
    Report,
    RunInfo,
    Status,
    Stop,
    StopKind,
)
from batchscope.records.report import CurvePoint, PredictedPick, StepPrediction
from batchscope.reports import fmt, html_rows, narrative, sweep_charts
from batchscope.reports import view as v
from batchscope.reports.console import _latency_cells, print_summary
from batchscope.reports.escape import md_text
from batchscope.reports.html import render_html
from batchscope.reports.json_report import document
from batchscope.reports.markdown import render_summary
from tests.reports.test_html import parse

# The drift control of the example: batch 1 at 281 µs, then 364 µs 12 s later.
DRIFT = DriftControl(1, 281e-6, 364e-6, 12.0, 364 / 281 - 1)


def _batch(b: int, step_s: float, spread: float = 0.02, faults: float | None = None
           ) -> BatchResult:
    """Batch ``b`` timed at ``step_s`` a step, its median's own interval ±``spread``."""
    lat = LatencyStats(step_s, step_s * 0.97, step_s * 1.03, 60, min=step_s * 0.9,
                       median_low=step_s * (1 - spread), median_high=step_s * (1 + spread))
    return BatchResult(b, Status.OK, latency_s=lat, throughput_per_s=b / step_s,
                       page_faults_per_step=faults)


def _report(results: list[BatchResult], drift: DriftControl | None = DRIFT,
            unit: str = "token", kept: list[BatchResult] | None = None,
            stop: Stop | None = None) -> Report:
    return assemble(Measured(ModelInfo(target="m.py", unit=unit), RunInfo(drift=drift), None,
                             results, Limits(), stop=stop or Stop(StopKind.LIST_DONE),
                             kept_buffers=kept or []))


def _console(report: Report) -> str:
    console = Console(width=400, record=True, color_system=None)
    print_summary(console, report)
    return console.export_text()


def _html_text(report: Report) -> str:
    return " ".join(parse(render_html(report)).text)


def _everywhere(report: Report) -> dict[str, str]:
    """What each format says: the explanation, summary.md, the terminal and the page."""
    return {"explanation": narrative.explanation(report), "markdown": render_summary(report),
            "console": _console(report), "html": _html_text(report)}


# Batching that pays: 4 and 8 rows a step cost little more than 1.
RISING = [_batch(1, 0.010), _batch(2, 0.011), _batch(4, 0.012), _batch(8, 0.013)]
# Batching within noise: the step grows with the rows, the throughput stays put.
FLAT = [_batch(1, 0.010), _batch(2, 0.0198), _batch(4, 0.0405)]


def test_every_measured_size_shows_its_intervals_in_every_table() -> None:
    report = _report(RISING)
    shown = _everywhere(report)
    for b in report.batches:
        assert b.latency_interval_s is not None and b.throughput_interval_per_s is not None
        latency, throughput = v.latency_text(b), v.throughput_text(b)
        assert re.fullmatch(r"\S+ \S+ \(\S+–\S+ \S+\)", latency), latency
        assert re.fullmatch(r"\S+ \(\S+–\S+\)", throughput) or "k (" in throughput
        for name in ("markdown", "console", "html"):
            assert latency in shown[name] and throughput in shown[name], (name, b.batch_size)
    # the interval is the pass's own widened by the drift the control measured (29.5%)
    first = report.batches[0]
    assert first.latency_interval_s == Interval(0.0098 / (1 + DRIFT.drift),
                                                0.0102 * (1 + DRIFT.drift))
    assert v.latency_text(first) == "10 ms (7.57–13.2 ms)"


def test_a_speedup_beyond_noise_is_said_with_its_interval() -> None:
    report = _report(RISING)
    rec = report.recommendation
    assert rec is not None and rec.speedup_interval is not None
    assert rec.speedup_interval.low > 1
    band = fmt.ratio_band(rec.speedup_from_batching, rec.speedup_interval)
    for name, text in _everywhere(report).items():
        assert "within noise: the best throughput" not in text, name
        assert "gain over batch 1 is within noise" not in text, name
        assert band in text, name
    assert f"Batching lifts throughput {band} over batch 1" in narrative.explanation(report)


def test_a_speedup_within_noise_claims_no_gain() -> None:
    report = _report(FLAT)
    rec = report.recommendation
    assert rec is not None and rec.speedup_interval is not None
    assert rec.speedup_interval.contains(1.0)
    for name, text in _everywhere(report).items():
        assert "within noise" in text, name
        assert "Batching lifts throughput" not in text, name
        assert "batching lifts throughput" not in text, name
        assert "lifted throughput" not in text, name
    assert ("Batching's gain over batch 1 is within noise: the best throughput is "
            f"{fmt.ratio_band(rec.speedup_from_batching, rec.speedup_interval)} batch 1's"
            ) in narrative.explanation(report)
    assert "speedup from batching: " in _console(report)
    assert re.search(r"speedup from batching: \S+ \(\S+\): within noise", _console(report))


def test_the_equivalent_set_is_listed_with_the_rule() -> None:
    report = _report(FLAT)
    rec = report.recommendation
    assert rec is not None and rec.equivalent_batch_sizes == [1, 2, 4]
    sentence = ("Batch sizes 1, 2 and 4 are equivalent within noise; the rule picks the "
                "smallest whose throughput could be within 90% of the best.")
    shown = _everywhere(report)
    assert sentence in shown["explanation"] and sentence in shown["html"]
    assert md_text(sentence) in shown["markdown"]
    assert "equivalent within noise: batch sizes 1, 2, 4" in shown["console"]
    # the rule's own words say it reads intervals
    assert "within noise: the top of its 95% interval reaches that" in shown["explanation"]
    # a pick noise sets apart says that no other size is equivalent
    alone = _report(RISING, drift=None)  # the floor of 5%: 4 is set apart from 8
    assert alone.recommendation is not None and alone.recommendation.equivalent_batch_sizes == [8]
    assert "No other batch size measured is equivalent to batch 8 within noise" in (
        narrative.explanation(alone))


def test_the_picks_share_of_the_best_has_its_interval() -> None:
    # batch 4 within noise of 8 (the best): the rule takes 4, and says what it gave up
    results = [_batch(1, 0.010), _batch(2, 0.011), _batch(4, 0.0125), _batch(8, 0.0235)]
    report = _report(results, drift=dataclasses.replace(DRIFT, drift=0.02))
    rec = report.recommendation
    assert rec is not None and rec.batch_size == 4 and rec.best_batch_size == 8
    assert rec.pick_share_of_best is not None and rec.pick_share_of_best_interval is not None
    share = fmt.pct_band(rec.pick_share_of_best, rec.pick_share_of_best_interval)
    assert re.fullmatch(r"\d+% \(\d+–\d+%\)", share)
    assert f"Batch 4 gives {share} of the best measured throughput (batch 8" in (
        narrative.explanation(report))


def test_the_drift_is_said_with_its_numbers() -> None:
    text = narrative.explanation(_report(RISING))
    assert ("Batch 1 was timed again: batch 1 timed 281 µs at first and 364 µs 12 s later "
            "(30%). That change, 30%, is the drift every interval here includes") in text
    # a drift under the floor: the floor is what the intervals carry
    small = _report(RISING, drift=dataclasses.replace(DRIFT, control_latency_s=284e-6,
                                                        drift=0.0107))
    assert "That change, 1%, is under the floor of 5% that every interval here carries" in (
        narrative.explanation(small))
    # nothing timed twice: the floor, said as such
    none = narrative.explanation(_report(RISING, drift=None))
    assert "No decision rounds ran" in none and "the floor of 5%" in none
    # the page shows the drift as a card too
    assert "drift over the run" in _html_text(_report(RISING))


def test_a_report_written_before_intervals_reads_as_before() -> None:
    report = _report(RISING)
    rec = report.recommendation
    assert rec is not None
    old = dataclasses.replace(
        report, run=dataclasses.replace(report.run, drift=None, drift_allowance=None),
        batches=[dataclasses.replace(b, latency_interval_s=None, throughput_interval_per_s=None)
                 for b in report.batches],
        recommendation=dataclasses.replace(rec, speedup_interval=None,
                                           equivalent_batch_sizes=[],
                                           pick_share_of_best_interval=None,
                                           measured_knee_interval=None,
                                           predicted_critical_batch_interval=None))
    text = narrative.explanation(old)
    assert "is within noise" not in text and "equivalent" not in text and "drift" not in text
    assert f"Batching lifts throughput {fmt.ratio(rec.speedup_from_batching)} over batch 1" in text
    assert v.throughput_text(old.batches[0]) == fmt.si(old.batches[0].throughput_per_s)


def test_the_throughput_chart_has_error_bars() -> None:
    report = _report(RISING)
    fig = sweep_charts.throughput(report)
    assert fig is not None
    (measured,) = [t for t in fig["data"] if str(t.get("name", "")).startswith("measured")]
    bars = measured["error_y"]
    for b, up, down, y in zip(report.batches, bars["array"], bars["arrayminus"], measured["y"],
                              strict=True):
        iv = b.throughput_interval_per_s
        assert iv is not None
        assert abs(y + up - iv.high) < 1e-6 * iv.high and abs(y - down - iv.low) < 1e-6 * iv.low
    assert measured["customdata"] == [v.throughput_text(b) for b in report.batches]


def test_b_star_and_the_knee_with_their_intervals() -> None:
    report = _report(RISING)
    assert report.recommendation is not None
    rec = dataclasses.replace(report.recommendation, predicted_critical_batch=6.0,
                              predicted_critical_batch_interval=Interval(5.5, 6.0),
                              measured_knee_batch=4.2, measured_knee_within_sweep=True,
                              measured_knee_interval=Interval(3.1, 5.9))
    report = dataclasses.replace(report, recommendation=rec)
    text = narrative.explanation(report)
    assert "knee of about 4.2 rows (3.1–5.9 at 95%)" in text
    # B*'s band is a range (best against median roofs), never called a 95% interval
    assert ("against the predicted 6 (5.5–6, the range under the roofs' best and median "
            "repeats): the knee's 95% interval reaches B*'s range.") in text
    assert "agree within their intervals" not in text
    summary = render_summary(report)
    assert "| 4.2 (3.1–5.9) (in the sweep) |" in summary
    assert ("| critical batch B\\*, predicted (the range under the roofs' best and median "
            "repeats) | 6 (5.5–6) |") in summary
    # the page's card: the range hovers as what it is, the knee's interval as 95%
    (card,) = [c for c in html_rows.cards(report) if c.label.startswith("critical batch B*")]
    assert (card.value, card.band) == ("6", "(5.5–6)")
    assert card.band_title == narrative.BSTAR_RANGE_WORDS
    assert card.sub == "knee measured: 4.2 (3.1–5.9) at 95% (in the sweep)"
    page = render_html(report)
    assert f'title="{narrative.BSTAR_RANGE_WORDS}">(5.5–6)<' in page.replace("&#39;", "'")
    # a knee clear of the range is said so
    apart = dataclasses.replace(report, recommendation=dataclasses.replace(
        rec, measured_knee_interval=Interval(1.5, 2.5), measured_knee_batch=2.0))
    assert "the knee's 95% interval lies clear of B*'s range" in narrative.explanation(apart)


def test_kept_buffers_gains_say_within_noise_and_one_page_fault_figure() -> None:
    # batch 4 spends most of its step faulting memory in: 40,000 faults a 50 ms step. Kept,
    # batch 4 runs in 20 ms (a gain beyond noise); batch 2 gains 2%, within noise.
    default = [_batch(1, 0.010), _batch(2, 0.0200, faults=15_000),
               _batch(4, 0.050, faults=40_000)]
    kept = [_batch(2, 0.0196, faults=10), _batch(4, 0.020, faults=10)]
    report = _report(default, kept=kept)
    section = report.allocator
    assert section is not None and section.cost_per_fault_s is not None
    rows = {r.batch_size: r for r in section.batches}
    assert rows[2].speedup_interval is not None and rows[2].speedup_interval.contains(1.0)
    assert rows[4].speedup_interval is not None and rows[4].speedup_interval.low > 1
    headline = narrative.allocator_headline(report)
    assert headline is not None
    assert "the gain is beyond noise at batch 4 and within noise at batch 2" in headline
    assert fmt.ratio_band(rows[4].speedup, rows[4].speedup_interval) in headline
    # the share of the step: one figure, the measured cost of a fault, in the flag and the
    # headline alike (and in report.json's flag text)
    share = v.fault_share(report, report.batches[2])
    assert share == 40_000 * section.cost_per_fault_s / 0.050
    assert f"Page faults take ~{fmt.pct(share)} of the step at batch 4" in headline
    (flag,) = [f.text for f in v.flags(report) if "page faults per step" in f.text]
    assert f"~{fmt.pct(share)})" in flag and "measured side by side on this machine" in flag
    assert "~1 µs" not in flag
    (shown,) = [f["text"] for f in document(report)["flags"] if "page faults" in f["text"]]
    assert shown == flag
    # the page's kept column gives each size's gain with its interval
    page = _html_text(report)
    assert "within noise" in page and fmt.ratio_band(rows[4].speedup,
                                                     rows[4].speedup_interval) in page


def test_page_faults_without_the_check_are_the_estimate_in_both_places() -> None:
    default = [_batch(1, 0.010), _batch(2, 0.030, faults=20_000)]
    report = _report(default)
    assert report.allocator is None
    share = report.batches[1].page_fault_share
    assert share is not None
    headline = narrative.allocator_headline(report)
    assert headline is not None and f"~{fmt.pct(share)} of the step at batch 2" in headline
    assert "an estimate" in headline
    (flag,) = [f.text for f in v.flags(report) if "page faults per step" in f.text]
    assert f"~{fmt.pct(share)})" in flag and "an estimate" in flag


def test_user_text_beside_the_intervals_stays_inert() -> None:
    unit = 'tok"]|[x](y) <b>@someone'
    report = _report(FLAT, unit=unit)
    summary = render_summary(report)
    assert "<b>" not in summary and "[x](y)" not in summary
    page = render_html(report)
    assert "<b>@someone" not in page
    console = _console(report)
    assert "within noise" in console


def test_still_rising_at_the_cap_only_beyond_noise() -> None:
    cap = Stop(StopKind.CAP, values={"largest": 8})
    rising = narrative.explanation(_report(RISING, drift=None, stop=cap))
    assert "Throughput was still rising at the largest batch tried (8)" in rising
    # 8 barely above 4 (326 against 320 tokens/s): the best, but not a rise noise can see
    level = [_batch(1, 0.010), _batch(2, 0.011), _batch(4, 0.0125), _batch(8, 0.0245)]
    report = _report(level, stop=cap)
    assert report.recommendation is not None and report.recommendation.still_rising_at_cap
    text = narrative.explanation(report)
    assert "still rising" not in text
    assert "highest at the largest batch tried (8), though within noise of batch 4" in text
    assert "raise --max-batch" in text


def _flag_share(flag: str, batch_size: int) -> str:
    """The page-fault flag's share at one batch size: "batch 4: 40,000 (156 MiB, ~13%)"."""
    found = re.search(rf"batch {batch_size}: [\d,]+ \([\d,]+ MiB, ~(\d+%)\)", flag)
    assert found is not None, flag
    return found.group(1)


def _headline_share(headline: str) -> tuple[str, int]:
    found = re.search(r"Page faults take ~(\d+%) of the step at batch (\d+)", headline)
    assert found is not None, headline
    return found.group(1), int(found.group(2))


def test_the_page_fault_flag_and_the_headline_give_one_figure_per_batch_size() -> None:
    # measured cost (the side-by-side check ran) and the estimate (it did not): for the batch
    # size the headline names, the flag's share is the same figure
    default = [_batch(1, 0.010), _batch(2, 0.0200, faults=15_000),
               _batch(4, 0.050, faults=40_000)]
    measured = _report(default, kept=[_batch(2, 0.0196, faults=10), _batch(4, 0.020, faults=10)])
    estimated = _report(default)
    for report, is_measured in ((measured, True), (estimated, False)):
        cost, was_measured = v.fault_cost(report)
        assert was_measured is is_measured
        headline = narrative.allocator_headline(report)
        assert headline is not None
        share, size = _headline_share(headline)
        (flag,) = [f.text for f in v.flags(report) if "page faults per step" in f.text]
        assert _flag_share(flag, size) == share, (is_measured, flag, headline)
        batch = next(b for b in report.batches if b.batch_size == size)
        figure = v.fault_share(report, batch)
        assert figure is not None and fmt.pct(figure) == share
        # one computation: page_faults.fault_share at the cost shown
        expected = fault_share(batch.page_faults_per_step, v.latency_median(batch), cost)
        assert expected is not None and abs(figure - expected) < 1e-12
        # every flagged size's share is the same figure the view gives it
        for b in report.batches:
            if f"batch {b.batch_size}: " in flag:
                assert _flag_share(flag, b.batch_size) == fmt.pct(v.fault_share(report, b))


def test_a_loss_is_never_called_within_noise() -> None:
    assert v.within_noise(Interval(0.97, 1.2)) and not v.is_loss(Interval(0.97, 1.2))
    assert not v.within_noise(Interval(0.7, 0.9)) and v.is_loss(Interval(0.7, 0.9))
    assert not v.within_noise(Interval(1.02, 1.2)) and not v.is_loss(Interval(1.02, 1.2))
    assert v.within_noise(Interval(1.0, 1.0))
    assert not v.within_noise(None) and not v.is_loss(None)
    assert not v.within_noise(Interval(float("nan"), 1.2))


def test_kept_buffers_that_run_slower_are_a_loss() -> None:
    # with the buffers kept batch 2 runs 30 ms against 20 ms (slower beyond noise at the 5%
    # floor), batch 4 20 ms against 50 ms (faster beyond noise)
    default = [_batch(1, 0.010), _batch(2, 0.0200, faults=15_000),
               _batch(4, 0.050, faults=40_000)]
    report = _report(default, drift=None,
                     kept=[_batch(2, 0.030, faults=10), _batch(4, 0.020, faults=10)])
    assert report.allocator is not None
    rows = {r.batch_size: r for r in report.allocator.batches}
    assert rows[2].speedup_interval is not None and rows[2].speedup_interval.high < 1
    assert rows[4].speedup_interval is not None and rows[4].speedup_interval.low > 1
    headline = narrative.allocator_headline(report)
    assert headline is not None
    assert "the gain is beyond noise at batch 4, and batch 2 ran slower beyond noise" in headline
    assert "within noise" not in headline
    cells = html_rows.kept_cells(report)
    assert cells[2].endswith(
        f"{fmt.ratio_band(rows[2].speedup, rows[2].speedup_interval)}, slower beyond noise")
    assert "within noise" not in cells[2] and "noise" not in cells[4]
    # every re-timed size slower: no gain, and the losses named
    worse = _report(default, drift=None,
                    kept=[_batch(2, 0.030, faults=10), _batch(4, 0.080, faults=10)])
    text = narrative.allocator_headline(worse)
    assert text is not None
    assert "no batch size ran faster beyond noise" in text
    assert "batches 2 and 4 ran slower beyond noise with them kept" in text


def test_a_speedup_below_one_is_said_as_a_loss() -> None:
    report = _report(RISING)
    assert report.recommendation is not None
    rec = dataclasses.replace(report.recommendation, speedup_from_batching=0.8,
                              speedup_interval=Interval(0.7, 0.9))
    lost = dataclasses.replace(report, recommendation=rec)
    assert v.speedup_is_loss(rec) and not v.speedup_within_noise(rec)
    assert narrative.speedup_text(rec).startswith("Batching lowers throughput beyond noise")
    console = _console(lost)
    assert "speedup from batching: 0.8× (0.7–0.9×): a loss beyond noise" in console
    (card,) = [c for c in html_rows.cards(lost) if c.label == "speedup from batching"]
    assert card.sub.endswith("; a loss beyond noise") and card.band == "(0.7–0.9×)"
    for text in _everywhere(lost).values():
        assert "0.8× (0.7–0.9×): within noise" not in text


def test_gain_over_is_the_ratio_of_the_two_figures() -> None:
    report = _report(RISING)
    first, last = report.batches[0], report.batches[-1]
    num, den = last.throughput_interval_per_s, first.throughput_interval_per_s
    assert num is not None and den is not None
    assert last.throughput_per_s is not None and first.throughput_per_s is not None
    assert v.gain_over(last, first) == ratio((last.throughput_per_s, num),
                                             (first.throughput_per_s, den))
    assert v.gain_over(first, first) == (1.0, None)
    old = dataclasses.replace(last, throughput_interval_per_s=None)
    assert v.gain_over(old, first) == (last.throughput_per_s / first.throughput_per_s, None)


def test_a_predicted_size_has_one_band_wherever_it_is_shown() -> None:
    # the model missed by 4% at most: its band is still the 10% floor the rule counts it at,
    # in the model's summary and in the predicted pick alike
    report = _report(RISING)
    t = 2_000.0
    point = CurvePoint(64, 64 / t, t, predicted_from=[4, 8])
    prediction = StepPrediction([1, 2, 4, 8], [point], None, max_abs_error=0.04,
                                pick=PredictedPick(64, t, False, 64, t, 0.04, 8, 615.0))
    report = dataclasses.replace(report, prediction=prediction)
    assert v.prediction_margin(prediction) == 0.1
    band = fmt.rate_band(t, Interval(t / 1.1, t / 0.9), "token")
    assert band == "2 k (1.82–2.22 k) tokens/s"
    summary = v.prediction_summary(report)
    assert f"batch 64 {band}" in summary and "within ±10% (the model's largest miss" in summary
    headline = narrative.predicted_pick_headline(report)
    assert headline is not None and f"batch 64 at {band}, its step within ±10%" in headline


def test_interval_cells_are_built_from_the_numbers() -> None:
    # a NaN end (a spread the worker could not compute) leaves the cell empty, never raises
    nan = _batch(1, 0.010)
    assert nan.latency_s is not None
    nan = dataclasses.replace(nan, latency_s=dataclasses.replace(nan.latency_s,
                                                                 p75=float("nan")))
    assert _latency_cells(nan) == ("10 ms", fmt.MISSING)
    assert _latency_cells(_batch(1, 0.010))[1] == "9.7–10.3 ms"
    parts = fmt.seconds_parts(0.0103, Interval(0.0091, 0.0112))
    assert (parts.figure, parts.interval, parts.bracketed) == ("10.3 ms", "9.1–11.2 ms",
                                                               "(9.1–11.2 ms)")
    # Issue 47: an interval too wide to mean anything is never shown as a number.
    for wide in (Interval(1.5, float("inf")), Interval(0.0, 199266.0), Interval(0.1, 8.0)):
        assert fmt.ratio_parts(2.0, wide).text == "2.0× (not measurable here)"
        assert fmt.pct_parts(0.5, wide).text == "50% (not measurable here)"
        assert fmt.seconds_parts(0.002, wide).text == "2 ms (not measurable here)"
    assert fmt.ratio_band(82.36, Interval(68.18, 97.06)) == "82.4× (68.2–97.1×)"
    # a card's band from the numbers: the throughput card of a report with its intervals
    report = _report(RISING)
    batch = v.recommended(report)
    assert batch is not None
    (card,) = [c for c in html_rows.cards(report) if c.label.startswith("throughput at")]
    assert f"{card.value} {card.band}" == v.throughput_text(batch)
    assert card.band_title == "95% interval"
