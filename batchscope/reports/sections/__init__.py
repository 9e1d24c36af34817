"""The explanation's sections, each a module that owns its paragraphs, in reading order.

A section is a function of the typed report that returns its :class:`~batchscope.reports.
words.Section` (a title and paragraphs), or None where it does not apply. Adding one is a
module here and a line in :data:`SECTIONS`; every renderer (report.json's explanation,
report.html, summary.md, the terminal) reads them through :func:`sections`.
"""

from __future__ import annotations

from collections.abc import Callable

from batchscope.records import Report
from batchscope.reports.sections.critical_batch import critical_batch
from batchscope.reports.sections.data_parallel import data_parallel
from batchscope.reports.sections.sequence import sequence
from batchscope.reports.sections.serving import serving
from batchscope.reports.sections.state import state
from batchscope.reports.sections.where import where_it_sits
from batchscope.reports.words import Section

# Every section, in reading order.
SECTIONS: tuple[Callable[[Report], Section | None], ...] = (
    where_it_sits, critical_batch, state, data_parallel, serving, sequence)


def sections(report: Report) -> list[Section]:
    """The explanation, in reading order; empty when nothing was measured."""
    out = [section(report) for section in SECTIONS]
    return [s for s in out if s is not None and s.paragraphs]
