from __future__ import annotations

import copy
import re
from typing import Any

import pytest
from markdown_it import MarkdownIt

from batchscope.records import Report
from batchscope.reports import view
from batchscope.reports.markdown import (
    ERROR_FRAMES,
    ERROR_LINE_CHARS,
    MAX_CHARS,
    render_summary,
)
from tests.reports.conftest import typed

HOSTILE = "<script>alert(1)</script> | [x](y) @someone"


def render(markdown: str) -> str:
    """GitHub-like rendering: CommonMark with GFM tables and raw HTML passed through."""
    return MarkdownIt("commonmark", {"html": True}).enable("table").render(markdown)


def note(text: str) -> dict[str, Any]:
    """A flag as report.json holds it, of the kind that says its text as it is."""
    return {"kind": "note", "batch_size": None, "op_id": None, "values": {"text": text}}


def test_summary_of_each_sample(sample_doc: dict[str, Any]) -> None:
    report = typed(sample_doc)
    text = render_summary(report)
    rec = sample_doc["recommendation"]
    assert len(text) < MAX_CHARS
    assert f"**Recommended batch size: {rec['batch_size']}**" in text
    assert "Rule: smallest batch size" in text
    assert "```mermaid\nxychart-beta" in text
    sizes = ", ".join(str(b.batch_size) for b in view.measured(report))
    assert f'x-axis "batch size" [{sizes}]' in text
    assert "#### Top ops at batch" in text
    assert "| dtype | float32 |" in text
    html = render(text)
    assert html.count("<table>") == 3  # facts, batch sizes, top ops
    assert "<script" not in html and "<a " not in html


def test_batch_table_has_one_row_per_batch(sample_doc: dict[str, Any]) -> None:
    html = render(render_summary(typed(sample_doc)))
    batch_table = html.split("<table>")[2]
    rows = batch_table.split("<tbody>")[1].count("<tr>")
    assert rows == len(sample_doc["batches"])
    assert "★" in batch_table


def _hostile(doc: dict[str, Any]) -> dict[str, Any]:
    doc["model"]["target"] = f"models/{HOSTILE}.py"
    doc["model"]["unit"] = 'tok"]|[x](y)'
    doc["batches"][-1].update(status="model_error", error=f"RuntimeError: {HOSTILE}\n" + "x" * 5000)
    doc["flags"] = [note(HOSTILE)] * 3
    op = max(doc["batches"][0]["ops"], key=lambda o: o["time_s"])
    op["module"] = HOSTILE
    op["flags"] = [{**note(HOSTILE), "op_id": op["op_id"]}]
    return doc


def test_user_text_is_inert(sample_doc: dict[str, Any]) -> None:
    text = render_summary(typed(_hostile(sample_doc)))
    html = render(text)
    assert "<script" not in html and "<a " not in html and "<img" not in html
    assert "@someone" not in text and "@\u200bsomeone" in html  # no mention: a ZWSP breaks it
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html  # shown as text
    for table in html.split("<table>")[1:]:  # the pipes did not add columns
        head = len(re.findall(r"<th[ >]", table.split("</thead>")[0]))
        body = table.split("<tbody>")[1].split("</tbody>")[0]
        for row in body.split("</tr>")[:-1]:
            assert len(re.findall(r"<td[ >]", row)) == head
    mermaid = text.split("```mermaid")[1].split("```")[0]
    assert not re.search(r'[\[\]|]', mermaid.split("y-axis")[1].split("\n")[0].strip('" '))


def test_long_error_text_is_cut(sample_doc: dict[str, Any]) -> None:
    # A line of 5000 characters is no message (an exception's is cut at 2000 where it is
    # caught): shown up to ERROR_LINE_CHARS, and said to be cut.
    text = render_summary(typed(_hostile(sample_doc)))
    assert "x" * (ERROR_LINE_CHARS - 1) + "…" in text and "x" * ERROR_LINE_CHARS not in text


# issue 32: the status cell cut a model error to 100 characters, and its cause, at the end of
# the message, was cut off; the terminal prints it in full under the table.
SHAPES = ("RuntimeError: mat1 and mat2 shapes cannot be multiplied (8x3 and 4x5) in the "
          "projection of the third decoder block, after the attention's output was "
          "reshaped for the MLP: check the hidden size the model file builds")
FRAMES = ('  File "/home/u/models/m.py", line 12, in run\n'
          "    return model(x)\n"
          '  File "/home/u/models/m.py", line 40, in forward\n'
          "    x = self.proj(x)  # <script>alert(1)</script> | [x](y) @someone")


def test_a_failed_batch_sizes_error_is_shown_in_full_under_the_table(
        sample_doc: dict[str, Any]) -> None:
    assert len(SHAPES) > 100
    sample_doc["batches"][-1].update(status="model_error", error=f"{SHAPES}\n{FRAMES}")
    size = sample_doc["batches"][-1]["batch_size"]
    text = render_summary(typed(sample_doc))
    table, after = text.split("| batch | status |", 1)[1].split("\n\n", 1)
    assert "model\\_error |" in table and "RuntimeError" not in table  # the cell: the status
    # the whole message on the line of its batch size, escaped
    escaped = SHAPES.replace("_", "\\_")
    assert f"- batch {size} (model\\_error): {escaped}\n" in after
    # the user's frames under it, one a line, innermost last, escaped as all user text
    assert ('  - File "/home/u/models/m.py", line 12, in run: return model(x)\n'
            '  - File "/home/u/models/m.py", line 40, in forward: x = self.proj(x)') in after
    html = render(text)
    assert "<script" not in html and "<a " not in html and "@someone" not in text
    item = html.split("<li>batch")[1]
    assert "<ul>" in item and "&lt;script&gt;alert(1)&lt;/script&gt;" in item


def test_a_runaway_traceback_keeps_its_innermost_frames(sample_doc: dict[str, Any]) -> None:
    # A recursion of 1,000 frames: the error whole, the frames nearest it, the count left out.
    frames = "\n".join(f'  File "m.py", line {i}, in f\n    return f(x)' for i in range(1000))
    sample_doc["batches"][-1].update(status="model_error",
                                     error=f"RecursionError: maximum depth\n{frames}")
    text = render_summary(typed(sample_doc))
    assert "RecursionError: maximum depth" in text
    assert f"  - … {1000 - ERROR_FRAMES} outer frames left out\n" in text
    assert 'line 999, in f: return f(x)' in text
    assert f'line {999 - ERROR_FRAMES}, in f' not in text


@pytest.mark.slow
def test_a_huge_report_stays_under_the_comment_limit(sample_doc: dict[str, Any]) -> None:
    doc = copy.deepcopy(sample_doc)
    template = doc["batches"][-1]
    doc["batches"] = [dict(template, batch_size=i + 1) for i in range(300)]
    doc["recommendation"]["batch_size"] = 300  # one of the copies
    doc["flags"] = [note(f"flag {i}: " + "y" * 3000) for i in range(500)]
    text = render_summary(typed(doc))
    assert len(text) <= MAX_CHARS
    assert text.startswith("### batchscope")
    assert "**Recommended batch size" in text


def test_nothing_measured(sample_doc: dict[str, Any]) -> None:
    for b in sample_doc["batches"]:
        b.update(status="oom", throughput_per_s=None, latency_s=None, ops=[])
    sample_doc["recommendation"] = None
    text = render_summary(typed(sample_doc))
    assert "**No batch size could be measured**" in text and "mermaid" not in text


def test_op_flags_are_grouped_and_ranked_by_time_at_stake(
        sample_reports: dict[str, Report]) -> None:
    # issue 13, finding 8: one line per op group and batch size (46 on the CNN sample),
    # printed twice, drowned what mattered
    report = sample_reports["cnn"]
    raw, grouped = view.op_flags(report), view.flags(report)
    assert len(raw) == 46 and len(grouped) == 3
    stakes = [float(sum(op.time_s for b in report.batches for op in b.ops
                        if op.name == g.text.split(":")[0].split(", ")[1] and op.flags))
              for g in grouped]
    assert stakes == sorted(stakes, reverse=True)  # the most time at stake first
    assert sum(int(g.text.split(": ")[1].split(" ")[0]) for g in grouped) == 46
    summary = render_summary(report)
    assert "Flags (3)" in summary and "accounting error, relu\\_: 23 op groups" in summary


def test_a_batch_sizes_own_flag_names_its_batch_once(sample_reports: dict[str, Report]) -> None:
    # The report's own flags carry their batch size and say it in their sentence; only an
    # op flag shown alone is prefixed with where it is.
    summary = render_summary(sample_reports["mlp"])
    assert "- batch 1: noisy timing, p25-p75 spans" in summary
    assert "batch 1 · " not in summary


def test_an_amp_report_says_both_dtypes(sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 30: a --amp bf16 report's header said just "float32" (the weights' dtype) and
    # quoted float32's peak beside bfloat16's ridge point
    doc = copy.deepcopy(sample_docs["cnn"])
    doc["model"]["amp"] = "bfloat16"
    text = render_summary(typed(doc))
    assert "| dtype | float32 weights, bfloat16 autocast |" in text
    ceilings = next(line for line in text.splitlines() if line.startswith("| ceilings |"))
    # bf16's peak (md_cell escapes the "1." that could start a list)
    assert "1\\.96 TFLOP/s bfloat16" in ceilings and "float32" not in ceilings
    assert "bfloat16 peak ridge 79.7 FLOP/byte" in ceilings  # 1.96e12 FLOP/s / 24.6 GB/s


def test_a_trace_of_unknown_batch_size_names_no_batch(
        sample_docs: dict[str, dict[str, Any]]) -> None:
    # issue 30: a trace analysed without --batch-sizes is reported as batch 1 for want of a
    # size; its table must not call it that
    doc = copy.deepcopy(sample_docs["mlp"])
    doc["batches"] = doc["batches"][:1]
    doc["run"].update(source="trace", batch_size_known=False)
    text = render_summary(typed(doc))
    assert "| × batch unknown |" in text and "× batch 1" not in text
    assert "#### Top ops at the trace's batch (size unknown)" in text
