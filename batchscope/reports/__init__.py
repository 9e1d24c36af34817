"""Renderers and writers of a :class:`~batchscope.records.Report` (the only code that writes
report files): report.json with its sentences, report.html, summary.md; the terminal's
summary and ``diagnose compare``.

Every renderer reads the typed report; report.json is read back into one by
:func:`load_report`, so a later reader sees what the renderers saw. ``batchscope.save``,
``batchscope.explanation`` and ``batchscope.show`` are :func:`write_all`, :func:`explanation`
and :func:`~batchscope.reports.notebook.show` from here; each renders by the report's kind
(reports/kinds.py). The records never call them: a report is data.
"""

from __future__ import annotations

import os
from pathlib import Path

from batchscope.records import Report
from batchscope.reports.json_report import atomic_write_text, load_report, write_json
from batchscope.reports.kinds import explanation, print_summary, render_html, render_summary
from batchscope.reports.notebook import ReportPage, show, show_reports_in

HTML_NAME = "report.html"
SUMMARY_NAME = "summary.md"


def write_all(report: Report, out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Write report.json, report.html and summary.md into ``out_dir``; returns format -> path.

    report.json goes first: it is the record. Each file is replaced atomically, so a reader
    never sees half of one.
    """
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    paths = {"json": str(write_json(report, out_dir))}
    for key, name, render in (("html", HTML_NAME, render_html),
                              ("markdown", SUMMARY_NAME, render_summary)):
        path = Path(out_dir) / name
        atomic_write_text(path, render(report))
        paths[key] = str(path)
    return paths


__all__ = ["ReportPage", "explanation", "load_report", "print_summary", "render_html",
           "render_summary", "show", "show_reports_in", "write_all", "write_json"]
