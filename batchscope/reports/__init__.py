"""Renderers and writers of a :class:`~batchscope.report.Report` (the only code that writes files)."""

from __future__ import annotations

import os

from batchscope.report import Report
from batchscope.reports.json_report import read_json, write_json


def write_all(report: Report, out_dir: str | os.PathLike[str]) -> dict[str, str]:
    """Write every report format into ``out_dir``; returns format -> path."""
    return {"json": str(write_json(report, out_dir))}


__all__ = ["read_json", "write_all", "write_json"]
