"""A model whose file name and error text are markup: every report keeps them inert text.

The model is real and runs through the real sweep (``diagnose_file``); it raises at batch 2
with a message full of HTML, Markdown table pipes, a link and a mention, and its file name
holds the same characters (all but ``/``, which no file name can hold).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from markdown_it import MarkdownIt

from batchscope.api import Options, diagnose_file
from batchscope.reports.json_report import load_report
from tests.reports.browser import find_chromium, open_page
from tests.reports.test_html import parse, sha

MESSAGE = "<script>alert(1)</script> | [x](y) @someone"
FILE_NAME = "<script>alert(1)<script> | [x](y) @someone.py"
MODEL = f'''
import torch

BATCH_SIZES = [1, 2]


class Model(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.shape[0] == 2:
            raise RuntimeError({MESSAGE!r})
        return self.lin(x)


def build_model() -> torch.nn.Module:
    return Model().eval()


def make_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 16)
'''


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    folder = tmp_path_factory.mktemp("hostile")
    model = folder / FILE_NAME
    model.write_text(MODEL, encoding="utf-8")
    out = folder / "out"
    report = diagnose_file(model, Options(out_dir=str(out), min_time_s=0.05,
                                          measure_ceilings=False))
    assert [b.status.value for b in report.batches] == ["ok", "model_error"]
    # write_all wrote the three formats atomically: no temporary file is left behind.
    assert sorted(p.name for p in out.iterdir()) == ["report.html", "report.json", "summary.md"]
    assert MESSAGE in report.batches[1].error
    return {"dir": out, "html": (out / "report.html").read_text(encoding="utf-8"),
            "md": (out / "summary.md").read_text(encoding="utf-8"),
            "json": json.loads((out / "report.json").read_text(encoding="utf-8"))}


@pytest.mark.slow
def test_html_holds_it_as_text(outputs: dict[str, Any]) -> None:
    html = outputs["html"]
    page = parse(html)
    # Exactly our four <script> elements: two JSON blocks, the page script, plotly.js.
    assert [a.get("id") for a, _ in page.scripts if a.get("type") == "application/json"] == [
        "batchscope-figures", "batchscope-report"]
    code = [body for a, body in page.scripts if a.get("type") != "application/json"]
    assert len(page.scripts) == 4 and all(sha(body) in page.csp for body in code)
    assert html.count("<script") == 4
    assert "<script>alert" not in html and "</script> |" not in html
    text = " ".join(page.text)
    assert MESSAGE in text  # what the reader sees: the message, as text
    assert FILE_NAME in text
    for attrs, body in page.scripts:  # the data blocks cannot close themselves
        if attrs.get("type") == "application/json":
            assert "<" not in body and json.loads(body)


def test_report_json_reads_back_with_the_text_intact(outputs: dict[str, Any]) -> None:
    # The typed loader (what `diagnose compare` and `diagnose serve` read) keeps the markup
    # as the plain text it is: nothing to escape in a record, only where it is rendered.
    report = load_report(outputs["dir"] / "report.json")
    assert MESSAGE in report.batches[1].error
    assert report.model.target.endswith(FILE_NAME)
    assert report.batches[1].status.value == outputs["json"]["batches"][1]["status"]


def test_summary_holds_it_as_text(outputs: dict[str, Any]) -> None:
    md = outputs["md"]
    assert "@someone" not in md and "<script" not in md
    assert not re.search(r"(?<!\\)\]\(", md)  # every "](" of a would-be link is escaped
    html = MarkdownIt("commonmark", {"html": True}).enable("table").render(md)
    assert "<script" not in html and "<a " not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt; | [x](y) @\u200bsomeone" in html
    batch_table = html.split("<table>")[2]
    head = len(re.findall(r"<th[ >]", batch_table.split("</thead>")[0]))
    for row in batch_table.split("<tbody>")[1].split("</tr>")[:-1]:
        assert len(re.findall(r"<td[ >]", row)) == head  # the pipe made no new column


@pytest.mark.skipif(find_chromium() is None, reason="no chromium on PATH")
def test_browser_runs_only_our_scripts(outputs: dict[str, Any], tmp_path: Path) -> None:
    run = open_page(find_chromium() or "", outputs["dir"] / "report.html", tmp_path, 1200, 1600)
    assert run.body["data-charts-drawn"] == run.body["data-charts-expected"]
    assert run.body["data-csp-violations"] == "0" and run.page_requests == []
    assert run.dom.count("<script") == 4
