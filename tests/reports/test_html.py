from __future__ import annotations

import base64
import copy
import hashlib
import json
import re
from html.parser import HTMLParser
from typing import Any

import pytest

from batchscope.records import Report
from batchscope.reports import fmt, json_report, view
from batchscope.reports.html import CHARTS, render_html
from tests.reports.conftest import typed

PLOTLY_BANNER = "plotly.js v"
# A start tag, and one attribute in it (name, then an optional quoted or bare value).
START_TAG = re.compile(
    r"""<[a-zA-Z][\w-]*((?:\s+[^\s=>/]+(?:\s*=\s*(?:"[^"]*"|'[^']*'|[^\s>]+))?)*)\s*/?>""")
ATTRIBUTE = re.compile(r"""\s+([^\s=>/]+)(?:\s*=\s*("[^"]*"|'[^']*'|[^\s>]+))?""")


class Page(HTMLParser):
    """The parts of a rendered page the tests look at."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.scripts: list[tuple[dict[str, str | None], str]] = []
        self.ids: set[str] = set()
        self.urls: list[str] = []
        self.csp = ""
        self.text: list[str] = []
        self._script: dict[str, str | None] | None = None
        self._body: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if a.get("id"):
            self.ids.add(str(a["id"]))
        for name in ("src", "href", "action", "srcset", "poster", "data"):
            if a.get(name):
                self.urls.append(str(a[name]))
        if tag == "meta" and a.get("http-equiv") == "Content-Security-Policy":
            self.csp = str(a.get("content"))
        if tag == "script":
            self._script, self._body = a, []

    def handle_endtag(self, tag: str) -> None:
        if tag == "script" and self._script is not None:
            self.scripts.append((self._script, "".join(self._body)))
            self._script = None

    def handle_data(self, data: str) -> None:
        if self._script is not None:
            self._body.append(data)
        else:
            self.text.append(data)


def parse(html: str) -> Page:
    page = Page()
    page.feed(html)
    page.close()
    return page


def json_block(page: Page, block_id: str) -> Any:
    for attrs, body in page.scripts:
        if attrs.get("id") == block_id:
            assert attrs.get("type") == "application/json"
            return json.loads(body)
    raise AssertionError(f"no JSON block {block_id}")


def sha(script: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(script.encode()).digest()).decode() + "'"


def test_page_is_self_contained(sample_doc: dict[str, Any]) -> None:
    report = typed(sample_doc)
    html = render_html(report)
    page = parse(html)
    assert html.count(PLOTLY_BANNER) == 1  # plotly.js inlined exactly once
    assert all(u.startswith("#") for u in page.urls), page.urls  # no external resource
    code = [body for attrs, body in page.scripts if attrs.get("type") != "application/json"]
    assert len(code) == 2 and not any(attrs.get("src") for attrs, _ in page.scripts)
    # The CSP allows exactly these two scripts and no connection at all.
    assert "default-src 'none'" in page.csp and "connect-src 'none'" in page.csp
    assert all(sha(body) in page.csp for body in code)
    # The page carries report.json's document, sentences included, and it reads back as
    # the report it was rendered from.
    embedded = json_block(page, "batchscope-report")
    assert embedded == json_report.document(report)
    assert typed(embedded) == report


def test_every_chart_has_a_place_and_data(sample_doc: dict[str, Any]) -> None:
    page = parse(render_html(typed(sample_doc)))
    figures = json_block(page, "batchscope-figures")
    # The samples have data for every chart but the batch × sequence grid (no SEQ_LENS;
    # tests/test_sequence_grid.py has it).
    assert set(figures) == {key for key, _, _ in CHARTS} - {"sequence_grid"}
    for key, fig in figures.items():
        assert f"fig-{key}" in page.ids
        assert fig["data"] and fig["layout"]["height"] > 0


def test_roofline_has_a_roof_per_dtype_and_every_op(sample_doc: dict[str, Any]) -> None:
    report = typed(sample_doc)
    figures = json_block(parse(render_html(report)), "batchscope-figures")
    traces = figures["roofline"]["data"]
    roofs = {t["name"] for t in traces if t["name"].endswith(" roof")}
    assert roofs == {f"{d} roof" for d in sample_doc["hardware"]["peak_flops_per_s"]}
    points = [t for t in traces if t.get("mode") == "markers" and t.get("showlegend") is False]
    expected = [op for b in view.measured(report) for op in b.ops
                if op.flops and op.intensity and op.time_s > 0]
    assert sum(len(t["x"]) for t in points) == len(expected)
    colours = [c for t in points for c in t["marker"]["color"]]
    assert colours == [view.BOUND_COLORS[op.bound.value] for op in expected]
    assert figures["roofline"]["layout"]["xaxis"]["type"] == "log"
    assert figures["roofline"]["layout"]["yaxis"]["type"] == "log"


def test_every_attribute_is_quoted(sample_doc: dict[str, Any]) -> None:
    html = render_html(typed(sample_doc))
    markup = re.sub(r"(?s)<(script|style)\b([^>]*)>.*?</\1>", r"<\1\2></\1>", html)
    tags = list(START_TAG.finditer(markup))
    assert len(tags) > 100
    for tag in tags:
        for name, value in ATTRIBUTE.findall(tag.group(1)):
            assert value.startswith('"'), f"{name} is not quoted in {tag.group(0)[:120]}"


def test_the_explanation_uses_the_users_numbers(sample_reports: dict[str, Report]) -> None:
    text = {name: " ".join(parse(render_html(report)).text)
            for name, report in sample_reports.items()}
    llm = text["llm_decode"]
    for heading in ("Where the model sits at batch 1", "What sets the critical batch size B*",
                    "Why state such as a KV cache does not amortize",
                    "What the curve means for serving"):
        assert heading in llm
    rec = sample_reports["llm_decode"].recommendation
    assert rec is not None
    predicted = rec.predicted_critical_batch
    assert f"B* ≈ {fmt.number(predicted)} rows" in llm
    assert "turn compute-bound" in llm or "reach the ridge point" in llm
    assert "every row owns its own, so no batch can share it" in llm
    assert "Continuous batching" in llm and "static batch" in llm
    assert "compute-bound from the start" in text["cnn"]
    assert "dominated by fixed costs" in text["mlp"]


def test_machine_and_method(sample_doc: dict[str, Any]) -> None:
    text = " ".join(parse(render_html(typed(sample_doc))).text)
    for dtype in sample_doc["hardware"]["peak_flops_per_s"]:
        # ceilings of before kernel families had roofs: one peak a dtype, whatever reached it
        # (tests/reports/test_roofs_shown.py has the roof of each family)
        assert f"{dtype} peak" in text
    assert "memory bandwidth" in text and "fixed cost of one small op" in text
    assert "IQR / median" in text and "Measured" in text and "Computed" in text


def _without_ceilings(doc: dict[str, Any]) -> dict[str, Any]:
    doc["hardware"] = None
    for b in doc["batches"]:
        b["time_share"] = None
        for op in b["ops"]:
            op.update(bound="uncounted", intensity=None, efficiency=None, roof_time_s=None)
    return doc


def _nothing_measured(doc: dict[str, Any]) -> dict[str, Any]:
    for b in doc["batches"]:
        b.update(status="oom", throughput_per_s=None, latency_s=None, ops=[], error="CUDA OOM")
    doc["recommendation"] = None
    return doc


def _no_ops(doc: dict[str, Any]) -> dict[str, Any]:
    for b in doc["batches"]:
        b.update(ops=[], time_share=None, flops=None, bytes=None)
    doc["batch_response"] = {}
    return doc


def _one_batch(doc: dict[str, Any]) -> dict[str, Any]:
    doc["batches"] = doc["batches"][:1]
    doc["recommendation"]["batch_size"] = doc["batches"][0]["batch_size"]
    return doc


def _gpu_like(doc: dict[str, Any]) -> dict[str, Any]:
    """Ceilings shaped like a GPU's: more dtypes, no CPU benchmark details, a datasheet."""
    bw = 3.35e12
    peaks = {"float32": 5.1e13, "tfloat32": 3.8e14, "bfloat16": 7.4e14, "float16": 7.5e14}
    doc["hardware"] = {"device": "cuda", "name": "NVIDIA H100 80GB HBM3", "threads": 1,
                       "peak_flops_per_s": peaks, "bandwidth_bytes_per_s": bw,
                       "overhead_s": 4e-6, "source": "measured", "details": {},
                       "ridge_flops_per_byte": {k: p / bw for k, p in peaks.items()},
                       "spec": {"product": "H100 SXM5 80GB", "peak_flops_per_s": {
                                    "bfloat16": 9.89e14}, "bandwidth_bytes_per_s": bw,
                                "memory_bytes": 80 * 2**30, "source": "datasheet"}}
    return doc


@pytest.mark.parametrize("change", [_without_ceilings, _nothing_measured, _no_ops, _one_batch,
                                    _gpu_like])
@pytest.mark.slow
def test_partial_and_degenerate_reports_render(sample_doc: dict[str, Any], change: Any) -> None:
    doc = change(sample_doc)
    doc["partial"] = True
    page = parse(render_html(typed(doc)))
    figures = json_block(page, "batchscope-figures")
    assert all(f"fig-{key}" in page.ids for key in figures)
    assert "Partial report" in " ".join(page.text)


def _header(html: str) -> str:
    """The text of the page's header line (model, dtype, mode, machine)."""
    match = re.search(r'(?s)<p class="meta">(.*?)</p>', html)
    assert match, "no header line"
    return " ".join(match.group(1).split())


def test_an_amp_report_names_its_autocast_dtype_in_the_header(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # --amp bf16: float32 weights, matmuls in bfloat16. The header used to say "float32".
    doc = copy.deepcopy(sample_docs["mlp"])
    doc["model"]["amp"] = "bfloat16"
    doc["run"]["options"]["amp"] = "bf16"
    header = _header(render_html(typed(doc)))
    assert "float32 weights, bfloat16 autocast · inference" in header
    # Without --amp, the model's dtype alone, as before.
    assert "· float32 · inference ·" in _header(render_html(typed(sample_docs["mlp"])))


def _unknown_size_trace(doc: dict[str, Any]) -> Report:
    """A trace analysed without --batch-sizes: one batch, reported as 1 for want of a size,
    with no throughput (nothing says how many rows a step held)."""
    doc["batches"] = [b for b in doc["batches"] if b["batch_size"] == 1]
    doc["batches"][0]["throughput_per_s"] = None
    doc["run"] = {"source": "trace", "batch_size_known": False}
    doc["recommendation"] = None
    doc["batch_response"] = {}
    doc["prediction"] = None
    return typed(doc)


def test_a_trace_of_unknown_batch_size_is_never_labelled_batch_1(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    report = _unknown_size_trace(copy.deepcopy(sample_docs["mlp"]))
    html = render_html(report)
    figures = json_block(parse(html), "batchscope-figures")
    # Bars against batch size: one category, "unknown", hovered as "batch unknown".
    for key in ("time_share", "bytes"):
        assert {x for trace in figures[key]["data"] for x in trace["x"]} == {"unknown"}
    # The roofline's legend and every point's hover text.
    points = [t for t in figures["roofline"]["data"] if t.get("mode") == "markers"]
    assert points and {t["name"] for t in points} == {"batch unknown"}
    hovers = [h for t in points for h in t.get("hovertext") or []]
    assert hovers and all("batch unknown · " in h for h in hovers)
    assert not re.search(r"batch 1\b", json.dumps(figures))
    # Tables: the op table's batch column and filter, the timings table.
    assert '<option value="unknown">unknown</option>' in html
    rows = re.findall(r'<tr data-batch="([^"]*)"', html)
    assert rows and set(rows) == {"unknown"}
    assert re.search(r'<td data-v="1">unknown</td>', html)
    timings = html[html.index("Timings and their spread"):]
    assert re.search(r"<tr><td>unknown</td><td>ok</td>", timings)
    assert "<tr><td>1</td>" not in timings
