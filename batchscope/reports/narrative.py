"""The explanation, in plain words with the user's numbers: the one home of the prose.

Every explanation sentence batchscope writes comes from the sections here, from the typed
:class:`~batchscope.records.Report` alone (what report.json holds), so report.json
(``recommendation.explanation``, filled by :func:`batchscope.reports.json_report.document`),
report.html, summary.md and the terminal say the same thing in the same words. Four
questions, each a titled section: where the model sits at its smallest batch, what sets the
critical batch size B* (and whether it is finite), why state such as a KV cache does not
amortize, and what the throughput curve means for serving (with data parallelism and the
sequence grid where they apply). Each is a module of :mod:`batchscope.reports.sections`
that owns its paragraphs; the banners above them are :mod:`batchscope.reports.headlines`
and the phrases they share :mod:`batchscope.reports.words`. The sections are plain
strings; each renderer escapes them for its own format.

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> print(explanation(load_report("batchscope-report/report.json")))  # doctest: +SKIP
"""

from __future__ import annotations

from batchscope.records import Report
from batchscope.reports.headlines import (
    accumulation_headline,
    allocator_headline,
    data_parallel_headline,
    predicted_pick_headline,
    trace_headline,
    uncounted_headline,
    uncounted_text,
)
from batchscope.reports.sections import sections
from batchscope.reports.sections.critical_batch import BSTAR_RANGE_WORDS, critical_batch
from batchscope.reports.sections.data_parallel import data_parallel, dp_seconds, dp_share
from batchscope.reports.sections.sequence import sequence
from batchscope.reports.sections.serving import drift_text, rounds_text, serving
from batchscope.reports.sections.state import state
from batchscope.reports.sections.where import where_it_sits
from batchscope.reports.words import (
    Section,
    equivalence_text,
    share_text,
    speedup_band,
    speedup_text,
)

# What ``explanation`` says when no batch size was measured.
NOTHING_MEASURED = "No batch size was measured, so there is nothing to explain."

__all__ = [
    "BSTAR_RANGE_WORDS", "NOTHING_MEASURED", "Section", "accumulation_headline",
    "allocator_headline", "critical_batch", "data_parallel", "data_parallel_headline",
    "dp_seconds", "dp_share", "drift_text", "equivalence_text", "explanation",
    "predicted_pick_headline", "rounds_text", "sections", "sequence", "serving", "share_text",
    "speedup_band", "speedup_text", "state", "trace_headline", "uncounted_headline",
    "uncounted_text", "where_it_sits",
]


def explanation(report: Report) -> str:
    """The sections as plain text: each title on its own line, then its paragraphs, one a
    line; a blank line between sections. What report.json holds and the terminal prints.

    Example:
        >>> from batchscope.reports.json_report import load_report
        >>> text = explanation(load_report("report.json"))  # doctest: +SKIP
        >>> text.splitlines()[0]  # doctest: +SKIP
        'Where the model sits at batch 1'
    """
    text = ["\n".join([s.title, *s.paragraphs]) for s in sections(report)]
    return "\n\n".join(text) or NOTHING_MEASURED
