"""Renderers and writers of a :class:`~batchscope.records.Report` (the only code that writes files).

Every renderer takes the report dict (what report.json holds), so the HTML, the Markdown and
``compare`` read exactly what a later reader of report.json would.
"""

from __future__ import annotations

import os
from pathlib import Path

from batchscope.records import Report
from batchscope.reports.html import render_html
from batchscope.reports.json_report import atomic_write_text, load_report, write_json
from batchscope.reports.markdown import render_summary

HTML_NAME = "report.html"
SUMMARY_NAME = "summary.md"


def write_all(report: Report, out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Write report.json, report.html and summary.md into ``out_dir``; returns format -> path.

    report.json goes first: it is the record, and the other two are rendered from its dict.
    Each file is replaced atomically, so a reader never sees half of one.
    """
    paths = {"json": str(write_json(report, out_dir))}
    doc = report.to_dict()
    for key, name, render in (("html", HTML_NAME, render_html),
                              ("markdown", SUMMARY_NAME, render_summary)):
        path = Path(out_dir) / name
        atomic_write_text(path, render(doc))
        paths[key] = str(path)
    return paths


__all__ = ["load_report", "write_all", "write_json"]
