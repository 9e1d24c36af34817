"""report.html in a real headless browser: every chart drawn, no network request, a screenshot.

Skipped where no chromium is installed (``.ci/run`` installs Debian's). Set
``BATCHSCOPE_SCREENSHOT_DIR`` to keep the screenshots (CI uploads them as an artifact).
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

import pytest

from batchscope.records import Report
from batchscope.reports.html import render_html
from tests.reports.browser import PageRun, find_chromium, open_page, png_size
from tests.reports.conftest import SAMPLES, load, typed

CHROMIUM = find_chromium()
pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason="no chromium on PATH (apt-get install chromium)")
WIDTH, HEIGHT = 1400, 4000
# A blank or failed page compresses to a few kB; a page of charts is far larger.
MIN_SCREENSHOT_BYTES = 100_000


def check_page(run: PageRun) -> None:
    body = run.body
    assert body, f"no <body> in the dumped DOM; stderr: {run.stderr}"
    assert "data-chart-errors" not in body, body.get("data-chart-errors")
    assert int(body["data-charts-expected"]) > 0
    assert body["data-charts-drawn"] == body["data-charts-expected"]
    assert body["data-resource-requests"] == "0"
    assert body["data-csp-violations"] == "0"
    assert body.get("data-page-overflow-x", "0") == "0"  # the page never scrolls sideways
    assert run.page_requests == []
    assert png_size(run.screenshot) == (WIDTH, HEIGHT)
    assert run.screenshot.stat().st_size > MIN_SCREENSHOT_BYTES
    keep = os.environ.get("BATCHSCOPE_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(run.screenshot, Path(keep) / run.screenshot.name)


def open_report(report: Report, name: str, tmp_path: Path) -> PageRun:
    page = tmp_path / f"{name}.html"
    page.write_text(render_html(report), encoding="utf-8")
    assert CHROMIUM is not None
    return open_page(CHROMIUM, page, tmp_path / "browser", WIDTH, HEIGHT)


@pytest.mark.parametrize("name", SAMPLES)
def test_sample_report_draws_every_chart_offline(name: str, tmp_path: Path) -> None:
    run = open_report(typed(load(name)), name, tmp_path)
    check_page(run)
    assert run.body["data-charts-drawn"] == "7"  # every chart of the report
    assert run.dom.count("<script") == 4  # plotly.js, the page script, two JSON blocks
    assert 'class="main-svg"' in run.dom  # plotly drew SVG
    # The op table's script ran: it filtered to the recommended batch and counted the rows.
    rec = load(name)["recommendation"]["batch_size"]
    shown = sum(len(b["ops"]) for b in load(name)["batches"] if b["batch_size"] == rec)
    assert re.search(rf'id="op-count"[^>]*>{shown} of \d+ rows<', run.dom)


def test_serving_page_draws_its_charts_offline(tmp_path: Path) -> None:
    from batchscope.reports.serving_render import render_html as render_serving
    from batchscope.serving.requests import TokenRange
    from batchscope.serving.whatif import WhatIfOptions, what_if
    from tests.serving.conftest import decode_model

    result = what_if(decode_model(target="<b>hostile</b>"),
                     WhatIfOptions(requests=60, output_tokens=TokenRange(4, 32)))
    page = tmp_path / "serving.html"
    page.write_text(render_serving(result), encoding="utf-8")
    assert CHROMIUM is not None
    run = open_page(CHROMIUM, page, tmp_path / "browser", WIDTH, HEIGHT)
    check_page(run)
    assert run.body["data-charts-drawn"] == "3"  # TPOT, TTFT and throughput against rate
    assert "<b>hostile</b>" not in run.dom
    keep = os.environ.get("BATCHSCOPE_SCREENSHOT_DIR")
    if keep:
        shutil.copy(run.screenshot, Path(keep) / run.screenshot.name)


def test_a_failed_sweeps_page_does_not_scroll_sideways(tmp_path: Path) -> None:
    # issue 32: the timings table and a long error widened the page past 1400 px
    from tests.reports.test_labels import LONG_TOKEN, failed_report

    run = open_report(failed_report(load("cnn")), "failed", tmp_path)
    check_page(run)
    assert run.body["data-page-overflow-x"] == "0"
    assert LONG_TOKEN in run.dom
