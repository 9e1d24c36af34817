"""Which renderers a report gets: one dispatch on ``report.run.source``.

A report of what was measured here (a sweep, ``watch``, a finder, recorded traces) reads as
the sweep's page, summary, terminal table and explanation (html.py, markdown.py,
console.py, narrative.py); a report of Nsight Compute's exports alone (``diagnose ncu``)
and one predicted on a named GPU (``--target-gpu``) each have their own
(counters_render.py, target_render.py). The kind is what the run says it is, never guessed
from which sections happen to be filled. Everything that writes or shows a whole report
goes through here (``batchscope.reports``, the CLI, ``batchscope.save``).

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> page = render_html(load_report("report.json"))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from rich.console import Console

from batchscope.records import Report, Source
from batchscope.reports import console, counters_render, html, markdown, narrative, target_render

# summary.md's length, and how a summary of another kind is cut to it.
MAX_CHARS = markdown.MAX_CHARS
_CUT = "\n\n… (cut to fit a comment; see report.html)\n"


@dataclass(frozen=True)
class Kind:
    """A report kind's renderers: its page, its summary.md, its terminal summary and its
    explanation in words."""

    html: Callable[[Report], str]
    summary: Callable[[Report], str]
    console: Callable[[Console, Report], None]
    explanation: Callable[[Report], str]


MEASURED = Kind(html.render_html, markdown.render_summary, console.print_summary,
                narrative.explanation)
COUNTERS = Kind(counters_render.render_html, counters_render.render_summary,
                counters_render.print_summary,
                lambda r: "\n".join(counters_render.paragraphs(r.counters))
                if r.counters is not None else "")
TARGET = Kind(target_render.render_html, target_render.render_summary,
              target_render.print_summary,
              lambda r: "\n".join(target_render.paragraphs(r.target))
              if r.target is not None else "")
KINDS: dict[Source, Kind] = {Source.NCU: COUNTERS, Source.TARGET: TARGET}


def kind_of(report: Report) -> Kind:
    """The renderers of ``report``'s kind (its ``run.source``)."""
    return KINDS.get(report.run.source, MEASURED)


def render_html(report: Report) -> str:
    """report.html of any report."""
    return kind_of(report).html(report)


def render_summary(report: Report, max_chars: int = MAX_CHARS) -> str:
    """summary.md of any report, at most ``max_chars`` characters (a sweep's drops its
    longest optional blocks first; another kind's is cut)."""
    kind = kind_of(report)
    if kind is MEASURED:
        return markdown.render_summary(report, max_chars)
    text = kind.summary(report)
    if len(text) > max_chars:
        text = text[: max_chars - len(_CUT)].rsplit("\n", 1)[0] + _CUT
    return text


def print_summary(out: Console, report: Report) -> None:
    """The terminal's summary of any report."""
    kind_of(report).console(out, report)


def explanation(report: Report) -> str:
    """The explanation in words of any report (what report.json's own holds)."""
    return kind_of(report).explanation(report)
