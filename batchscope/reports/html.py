"""report.html: one self-contained page, rendered with jinja2 from the typed report.

The page opens offline and makes no network request: plotly.js (from the ``plotly``
package's bundled ``plotly.min.js``) and the page script are inlined once, the figures and
the report travel as JSON in ``<script type="application/json">`` blocks, and a Content
Security Policy allows only those two scripts (by hash) and no connection at all.

This is a measured report's page (a sweep, ``watch``, a finder, a trace); any report's
page, whatever its kind, is :func:`batchscope.reports.render_html`'s (reports/kinds.py).

Example:
    >>> from batchscope.reports import load_report, render_html
    >>> html = render_html(load_report("batchscope-report/report.json"))  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.records import SCHEMA, Report
from batchscope.reports import chart_style as st
from batchscope.reports import (
    counters_render,
    fmt,
    json_report,
    narrative,
    roofline_chart,
    sweep_charts,
)
from batchscope.reports import html_rows as rows
from batchscope.reports import view as v
from batchscope.reports.escape import json_for_script
from batchscope.reports.flag_text import (
    assumption_text,
    evidence_headline,
    evidence_reasons,
    limit_text,
    rule_text,
    stop_text,
)
from batchscope.reports.page import environment, page_csp, plotly_js, static_text

TEMPLATE = "report.html.j2"
# (id, title, builder) of every chart, in page order; the template lays them out by id.
CHARTS = (
    ("roofline", "Roofline", roofline_chart.roofline),
    ("throughput", "Throughput", sweep_charts.throughput),
    ("latency", "Step latency", sweep_charts.latency),
    ("memory", "Peak memory", sweep_charts.memory),
    ("time_share", "Time share by bound", sweep_charts.time_share),
    ("bytes", "Bytes per step", sweep_charts.bytes_per_step),
    ("batch_response", "Batch response of the ops that matter most", sweep_charts.batch_response),
    ("sequence_grid", "Batch size × sequence length", sweep_charts.sequence_grid),
)


@dataclass(frozen=True)
class Chip:
    """A colour key entry: a bound (or time share) or a byte kind, and its colour."""

    key: str
    label: str
    color: str


def figures(report: Report) -> dict[str, st.Figure]:
    """Every chart the report has data for, by id."""
    out = {}
    for key, _, build in CHARTS:
        fig = build(report)
        if fig is not None:
            out[key] = fig
    return out


def _method(report: Report) -> dict[str, object]:
    """The machine-and-method section's words: ceilings, timings, the model, the flags."""
    rec = report.recommendation
    options = report.run.options
    return {
        "ceiling_rows": rows.ceiling_rows(report), "timing_rows": rows.timing_rows(report),
        "kept_column": bool(rows.kept_cells(report)),
        "min_time_s": options.min_time_s if options is not None else None,
        "peak_memory_label": v.peak_memory_label(report),
        "prediction_rows": rows.prediction_rows(report),
        "prediction_summary": v.prediction_summary(report), "counts_note": v.counts_note(report),
        "prediction_assumptions": [assumption_text(a) for a in
                                   (report.prediction.assumptions if report.prediction else [])],
        "stop_reason": stop_text(report.stop, v.unit(report)),
        "excluded": [(v.size_label(report, e.batch_size), limit_text(e)) for e in
                     sorted(rec.rule.excluded if rec else [], key=lambda e: e.batch_size)],
        "flags": rows.flag_lines(report), "accounting_errors": len(v.accounting_errors(report)),
    }


def context(report: Report) -> dict[str, object]:
    """Everything the template needs; every string in it is escaped by jinja2."""
    figs = figures(report)
    rec = report.recommendation
    unplaced, unplaced_share, unplaced_batch = roofline_chart.unplaced(report)
    response = sweep_charts.response_batch(report)
    page_js = static_text("report.js")
    sequence_sizes, sequence_rows = v.sequence_table(report)
    return {
        "model": report.model, "run": report.run, "hw": v.hardware(report),
        "partial": report.partial, "schema": SCHEMA,
        "target": v.target(report), "unit": v.unit(report), "dtype": v.dtype_label(report),
        "roofline_dtype": v.model_dtype(report), "parameters": report.model.parameters,
        "rec": rec, "rec_batch": v.recommended(report),
        "rule": rule_text(rec.rule, v.unit(report)) if rec else "",
        "evidence": evidence_headline(report.evidence),
        "evidence_grade": report.evidence.grade.value if report.evidence else "",
        "evidence_reasons": evidence_reasons(report.evidence),
        "cards": rows.cards(report), "start_bar": rows.start_bar(report),
        "trace_headline": narrative.trace_headline(report),
        "size_known": v.batch_size_known(report),
        "rank_tables": rows.rank_tables(report), "allocator": narrative.allocator_headline(report),
        "predicted_pick": narrative.predicted_pick_headline(report),
        "uncounted": narrative.uncounted_headline(report),
        "data_parallel": rows.data_parallel(report),
        "dp_headline": (narrative.data_parallel_headline(report)
                        or narrative.accumulation_headline(report)),
        "failed": [(v.size_label(report, b.batch_size), b.status.value) for b in v.failed(report)],
        "sections": narrative.sections(report),
        "charts": {k: t for k, t, _ in CHARTS if k in figs},
        "bounds": [Chip(k, v.SHARE_LABELS[k], v.BOUND_COLORS[k]) for k in v.share_keys(report)],
        "byte_kinds": [Chip(k, k, v.BYTE_COLORS[k]) for k in v.BYTE_KINDS],
        "roofline_title": roofline_chart.title(report),
        "unplaced": unplaced, "unplaced_share": fmt.pct(unplaced_share),
        "unplaced_batch": (v.size_label(report, unplaced_batch)
                           if unplaced_batch is not None else ""),
        "response_batch": v.size_label(report, response.batch_size) if response else "",
        "op_rows": rows.op_rows(report), "batch_options": rows.batch_options(report),
        "sequence_sizes": sequence_sizes, "sequence_rows": sequence_rows,
        **_method(report), "fmt": fmt,
        "figures_json": json_for_script(figs),
        "report_json": json_for_script(json_report.document(report)),
        "css": static_text("report.css"), "page_js": page_js, "plotly_js": plotly_js(),
        "csp": page_csp(page_js),
        "counters": counters_render.page_section(report.counters),
    }


def render_html(report: Report) -> str:
    """report.html of a sweep, a watch, a trace or a finder (the module's docstring has an
    example). Every report's page by its kind: :func:`batchscope.reports.kinds.render_html`."""
    return environment().get_template(TEMPLATE).render(**context(report))
