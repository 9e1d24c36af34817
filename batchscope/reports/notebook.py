"""A report in a notebook: the whole report.html, inline and sandboxed.

``batchscope.show(report)`` returns a :class:`ReportPage`, which Jupyter displays by its
``_repr_html_``; ``import batchscope`` in a running IPython also tells its HTML formatter to
show a bare ``report`` that way (:func:`show_reports_in`). The records stay data: nothing
here is reached from them.

Example:
    >>> page = show(report)  # doctest: +SKIP
    >>> page  # in a notebook: the report  # doctest: +SKIP
"""

from __future__ import annotations

import html
from dataclasses import dataclass
from typing import Any

from batchscope.records import Report
from batchscope.reports.kinds import render_html

# The iframe's height: the report scrolls inside it.
FRAME_HEIGHT_PX = 900


@dataclass(frozen=True)
class ReportPage:
    """A rendered report.html, shown by Jupyter in a sandboxed iframe (its scripts run in
    the frame, apart from the notebook's page).

    Attributes:
        html: the whole page, as report.html holds it.
    """

    html: str

    def _repr_html_(self) -> str:
        return (f'<iframe srcdoc="{html.escape(self.html, quote=True)}" sandbox="allow-scripts"'
                f' style="width: 100%; height: {FRAME_HEIGHT_PX}px; border: 0"></iframe>')


def show(report: Report) -> ReportPage:
    """``report`` as a notebook shows it: its report.html in a sandboxed iframe."""
    return ReportPage(render_html(report))


def show_reports_in(shell: Any) -> bool:
    """Tell an IPython ``shell``'s HTML formatter to display a :class:`Report` as
    :func:`show` does (IPython's own way of giving a type a display: IPython is untyped,
    and never imported here). False where there is no shell (a script, a terminal without
    IPython)."""
    if shell is None:
        return False
    shell.display_formatter.formatters["text/html"].for_type(
        Report, lambda report: show(report)._repr_html_())
    return True
