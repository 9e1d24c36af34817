"""Charts against batch size: throughput, latency, peak memory, time share, bytes, op curves.

Each function takes the typed report and returns a Plotly figure, or None when the report
has nothing for it (no measured batch, no per-op breakdown). The recommendation, the limits
the run was given and B* (predicted and measured) are drawn where they belong. A trace
analysed without ``--batch-sizes`` labels its batch "unknown" (``view.size_label``).
"""

from __future__ import annotations

import math
from typing import Any

from batchscope.records import BatchResult, LatencyStats, Report, Status
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text

# Ops shown in the batch-response chart: the ones with the most time at the chosen batch.
TOP_OPS = 8
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
ROW_HEIGHT_PX = 340
# Labels of guides in this share of the batch axis at either end are anchored inwards.
EDGE_SHARE = 0.25


def _sizes(report: Report) -> list[int]:
    return [b.batch_size for b in report.batches]


def _rec_marks(report: Report, shapes: list[dict[str, Any]], notes: list[dict[str, Any]]) -> None:
    rec = report.recommendation
    if rec is not None:
        shapes.append(st.vline(rec.batch_size, st.ACCENT_BAND, dash="solid", width=10))
        notes.append(st.note(_logx(report, rec.batch_size), "paper:1.0",
                             f"recommended {rec.batch_size}", color=st.ACCENT,
                             yanchor="bottom", xanchor=_anchor(report, rec.batch_size)))


def _anchor(report: Report, x: float) -> str:
    """Anchor a label so it stays inside the plot: left near the left edge, right near the right."""
    sizes = _sizes(report)
    lo, hi = min(sizes), max(sizes)
    if hi <= lo:
        return "center"
    where = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo)) if lo > 0 else 0.5
    return "left" if where < EDGE_SHARE else "right" if where > 1 - EDGE_SHARE else "center"


def _logx(report: Report, x: float) -> float:
    """Annotation x on the batch axis (annotations on a log axis take log10)."""
    axis = st.batch_axis(_sizes(report))
    return math.log10(x) if axis["type"] == "log" else x


def _guides(report: Report, y_lo: float, y_hi: float) -> list[dict[str, Any]]:
    """B* predicted, the measured knee and the rule's threshold, as legend-named lines.

    A guide outside the swept batch sizes keeps its legend entry (with the value) but draws
    no line, so the axis is not stretched to reach it.
    """
    rec, sizes = report.recommendation, _sizes(report)
    out: list[dict[str, Any]] = []
    if rec is None or not sizes:
        return out
    lo, hi = min(sizes), max(sizes)
    marks: list[tuple[float, str, str]] = []
    if rec.predicted_critical_batch is not None:
        marks.append((rec.predicted_critical_batch, "B* predicted", "dot"))
    if rec.measured_knee_batch is not None:
        marks.append((rec.measured_knee_batch, "knee measured", "dashdot"))
    for x, label, dash in marks:
        inside = lo <= x <= hi
        name = f"{label} {fmt.number(x)}" + ("" if inside else " (off the axis)")
        out.append({"type": "scatter", "mode": "lines", "name": name,
                    "x": [x, x] if inside else [None], "y": [y_lo, y_hi] if inside else [None],
                    "hoverinfo": "skip", "line": {"color": st.MUTED, "dash": dash, "width": 1.3}})
    best = rec.best_throughput_per_s
    share = rec.near_best_share
    if best:
        out.append({"type": "scatter", "mode": "lines",
                    "name": f"{fmt.pct(share)} of best (the rule)", "x": [lo, hi],
                    "y": [share * best] * 2, "hoverinfo": "skip",
                    "line": {"color": st.ACCENT, "dash": "dash", "width": 1.2}})
    return out


def _error_bars(ok: list[BatchResult], unit: str) -> dict[str, Any]:
    """The measured throughputs' 95% intervals as asymmetric error bars, and a hover that
    quotes them (fmt.si_band, as every table does); the hover alone for a report written
    before intervals. ``unit`` is already chart_text-escaped."""
    hover = f"batch %{{x}}<br>%{{customdata}} {unit}s/s<extra></extra>"
    out: dict[str, Any] = {"customdata": [chart_text(v.throughput_text(b)) for b in ok],
                           "hovertemplate": hover}
    bands = [b.throughput_interval_per_s for b in ok]
    if not any(bands):
        return out
    ys = [b.throughput_per_s or 0.0 for b in ok]
    up = [max(iv.high - y, 0.0) if iv is not None and math.isfinite(iv.high) else 0.0
          for iv, y in zip(bands, ys)]
    down = [max(y - iv.low, 0.0) if iv is not None else 0.0 for iv, y in zip(bands, ys)]
    out["error_y"] = {"type": "data", "symmetric": False, "array": up, "arrayminus": down,
                      "color": st.SERIES, "thickness": 1.2, "width": 4}
    return out


def throughput(report: Report) -> st.Figure | None:
    """Throughput against batch size, the ideal line, the rule's threshold, failures."""
    ok = v.measured(report)
    if not ok:
        return None
    unit = chart_text(v.unit(report))
    xs = [b.batch_size for b in ok]
    ys = [b.throughput_per_s or 0.0 for b in ok]
    log = st.wants_log(ys)
    # The axis reaches the top of every error bar (a finite one).
    tops = [iv.high for b in ok if (iv := b.throughput_interval_per_s) is not None
            and math.isfinite(iv.high)]
    y_lo, y_hi = ((min(ys) / 1.6, max(ys + tops) * 1.6) if log
                  else (0.0, max(ys + tops) * 1.18))
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": f"ideal: batch {xs[0]} × b/{xs[0]}",
         "x": xs, "y": [ys[0] * x / xs[0] for x in xs], "hoverinfo": "skip",
         "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2}},
        *_guides(report, y_lo, y_hi),
        {"type": "scatter", "mode": "lines+markers", "name": f"measured {unit}s/s",
         "x": xs, "y": ys, "line": {"color": st.SERIES, "width": 2.5},
         "marker": {"size": 8, "color": st.SERIES},
         **_error_bars(ok, unit)},
    ]
    predicted = [p for p, _ in v.prediction_rows(report)]
    if predicted:
        unmeasured = [p for p, was_measured in v.prediction_rows(report) if not was_measured]
        data.append({"type": "scatter", "mode": "lines", "name": "predicted (step-time model)",
                     "x": [p.batch_size for p in predicted],
                     "y": [p.predicted_throughput_per_s for p in predicted],
                     "line": {"color": st.SERIES, "dash": "dash", "width": 1.5},
                     "hovertemplate": (f"batch %{{x}}<br>predicted %{{y:,.4~s}} "
                                       f"{unit}s/s<extra></extra>")})
        if unmeasured:
            data.append({"type": "scatter", "mode": "markers", "name": "not measured: predicted",
                         "x": [p.batch_size for p in unmeasured],
                         "y": [p.predicted_throughput_per_s for p in unmeasured],
                         "marker": {"size": 8, "symbol": "circle-open", "color": st.SERIES},
                         "hovertemplate": (f"batch %{{x}} not measured<br>predicted "
                                           f"%{{y:,.4~s}} {unit}s/s<extra></extra>")})
        ys = ys + [p.predicted_throughput_per_s for p in unmeasured]
        y_lo, y_hi = ((min(ys) / 1.6, max(ys + tops) * 1.6) if log
                      else (0.0, max(ys + tops) * 1.18))
    rec_batch = v.recommended(report)
    if rec_batch:
        data.append({"type": "scatter", "mode": "markers", "name": "recommended",
                     "x": [rec_batch.batch_size], "y": [rec_batch.throughput_per_s],
                     "marker": {"size": 16, "symbol": "star", "color": st.ACCENT,
                                "line": {"color": "#ffffff", "width": 1}},
                     "hovertemplate": "recommended batch %{x}<extra></extra>"})
    failed = v.failed(report)
    if failed:
        data.append({"type": "scatter", "mode": "markers+text", "name": "did not finish",
                     "x": [b.batch_size for b in failed], "y": [min(ys)] * len(failed),
                     "text": [chart_text(b.status.value) for b in failed],
                     "textposition": "top center", "textfont": {"color": st.LIMIT, "size": 11},
                     "cliponaxis": False,
                     "marker": {"symbol": "x", "size": 11, "color": st.LIMIT},
                     "hovertext": [chart_text(f"batch {b.batch_size}: {b.status.value} "
                                              f"{b.error}", 200) for b in failed],
                     "hoverinfo": "text"})
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    _rec_marks(report, shapes, notes)
    y_range = [math.log10(y_lo), math.log10(y_hi)] if log else [y_lo, y_hi]
    sizes = sorted({*_sizes(report), *(p.batch_size for p in predicted)})
    lay = st.layout(ROW_HEIGHT_PX + 30, xaxis=st.batch_axis(sizes),
                    yaxis=st.axis(f"throughput ({unit}s/s{', log' if log else ''})",
                                  log=log, tickformat="~s", range=y_range),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52},
                    legend={"orientation": "h", "y": -0.24, "x": 0, "font": {"size": 10.5}})
    return st.figure(data, lay)


def _timed(report: Report) -> list[tuple[BatchResult, LatencyStats]]:
    """The measured batch sizes that have step latencies, with them."""
    return [(b, b.latency_s) for b in v.measured(report) if b.latency_s is not None]


def latency(report: Report) -> st.Figure | None:
    """Median step latency with its interquartile range, the minimum and the latency limit."""
    ok = _timed(report)
    if not ok:
        return None
    limit = v.latency_limit_s(report)
    largest = max([lat.median for _, lat in ok] + ([limit] if limit else []))
    div, name = fmt.time_scale(largest)
    xs = [b.batch_size for b, _ in ok]
    lat = [x for _, x in ok]
    med = [x.median / div for x in lat]
    data = [
        {"type": "scatter", "mode": "lines", "name": "fastest step", "x": xs,
         "y": [(x.min or x.median) / div for x in lat],
         "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2},
         "hovertemplate": f"batch %{{x}}: fastest %{{y:.4g}} {name}<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "median step (p25–p75 bars)",
         "x": xs, "y": med, "line": {"color": st.SERIES, "width": 2.5},
         "marker": {"size": 8, "color": st.SERIES},
         "error_y": {"type": "data", "symmetric": False, "color": st.SERIES, "thickness": 1.2,
                     "array": [(x.p75 - x.median) / div for x in lat],
                     "arrayminus": [(x.median - x.p25) / div for x in lat]},
         "customdata": [[x.p25 / div, x.p75 / div, x.n, chart_text(v.latency_text(b))]
                        for b, x in ok],
         "hovertemplate": (f"batch %{{x}}: median %{{customdata[3]}} (95%)<br>p25–p75 "
                           f"%{{customdata[0]:.4g}}–%{{customdata[1]:.4g}} {name} "
                           "(%{customdata[2]} steps)<extra></extra>")},
    ]
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    log = st.wants_log(med)
    if limit:
        shapes.append(st.hline(limit / div, st.LIMIT))
        notes.append(st.note("paper:0.0", math.log10(limit / div) if log else limit / div,
                             f"latency limit {fmt.seconds(limit)}", color=st.LIMIT,
                             xanchor="left", yanchor="bottom"))
    _rec_marks(report, shapes, notes)
    lay = st.layout(ROW_HEIGHT_PX, xaxis=st.batch_axis(_sizes(report)),
                    yaxis=st.axis(f"step latency ({name}{', log' if log else ''})", log=log,
                                  rangemode="tozero"),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52})
    return st.figure(data, lay)


def memory(report: Report) -> st.Figure | None:
    """Peak memory against batch size, the baseline before the first step, the budget."""
    ok = [(b, b.peak_memory_bytes) for b in v.measured(report) if b.peak_memory_bytes]
    if not ok:
        return None
    budget = v.memory_budget_bytes(report)
    div, name = fmt.byte_scale(max([peak for _, peak in ok] + [budget or 0]))
    xs = [b.batch_size for b, _ in ok]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "peak", "x": xs,
             "y": [peak / div for _, peak in ok],
             "line": {"color": st.SERIES, "width": 2.5}, "marker": {"size": 8},
             "hovertemplate": f"batch %{{x}}: peak %{{y:,.1f}} {name}<extra></extra>"}]
    if any(b.baseline_memory_bytes for b, _ in ok):
        data.append({"type": "scatter", "mode": "lines", "name": "before the first step",
                     "x": xs, "y": [(b.baseline_memory_bytes or 0) / div for b, _ in ok],
                     "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2},
                     "hovertemplate": f"batch %{{x}}: baseline %{{y:,.1f}} {name}<extra></extra>"})
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    if budget:
        shapes.append(st.hline(budget / div, st.LIMIT))
        notes.append(st.note("paper:0.0", budget / div, f"memory budget {fmt.nbytes(budget)}",
                             color=st.LIMIT, xanchor="left", yanchor="bottom"))
    _rec_marks(report, shapes, notes)
    lay = st.layout(ROW_HEIGHT_PX, xaxis=st.batch_axis(_sizes(report)),
                    yaxis=st.axis(f"peak memory ({name})", rangemode="tozero"),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52})
    return st.figure(data, lay)


def time_share(report: Report) -> st.Figure | None:
    """Stacked shares of the profiled step by bound, one bar per batch size."""
    ok = [b for b in v.analysed(report) if b.time_share]
    if not ok:
        return None
    xs = [v.size_label(report, b.batch_size) for b in ok]
    data: list[dict[str, Any]] = []
    for key in v.share_keys(report):
        data.append({
            "type": "bar", "name": v.SHARE_LABELS[key], "x": xs,
            "y": [v.share_of(b.time_share, key) * 100 for b in ok],
            "marker": {"color": v.BOUND_COLORS[key]},
            "customdata": [fmt.seconds(v.share_of(b.time_share, key)
                                       * (b.profiled_step_s or 0.0)) for b in ok],
            "hovertemplate": f"batch %{{x}}: %{{y:.1f}}% {v.SHARE_LABELS[key]} "
                             "(%{customdata})<extra></extra>",
        })
    lay = st.layout(ROW_HEIGHT_PX, barmode="stack", bargap=0.35,
                    xaxis=st.axis("batch size", type="category"),
                    yaxis=st.axis("share of the profiled step (%)", range=[0, 100.5],
                                  ticksuffix="%"),
                    legend={"orientation": "h", "y": -0.22, "x": 0, "traceorder": "normal",
                            "font": {"size": 11}})
    return st.figure(data, lay)


def _byte_hover(unit_name: str, what: str) -> list[str]:
    return [f"batch %{{x}}: %{{y:,.3g}} {unit_name} of {kind} {what}<extra></extra>"
            for kind in v.BYTE_KINDS]


def bytes_per_step(report: Report) -> st.Figure | None:
    """Bytes per step split by kind, with a toggle to bytes per batch row."""
    ok = [b for b in v.analysed(report) if v.step_bytes(b)]
    if not ok:
        return None
    div, name = fmt.byte_scale(max(v.step_bytes(b) or 0.0 for b in ok))
    row_div, row_name = fmt.byte_scale(
        max((v.step_bytes(b) or 0.0) / b.batch_size for b in ok))
    xs = [v.size_label(report, b.batch_size) for b in ok]
    per_step = [[v.bytes_of(b.bytes, k) / div for b in ok] for k in v.BYTE_KINDS]
    per_row = [[v.bytes_of(b.bytes, k) / b.batch_size / row_div for b in ok]
               for k in v.BYTE_KINDS]
    step_hover, row_hover = _byte_hover(name, "per step"), _byte_hover(row_name, "per row")
    data = [{"type": "bar", "name": kind, "x": xs, "y": per_step[i],
             "marker": {"color": v.BYTE_COLORS[kind]}, "hovertemplate": step_hover[i]}
            for i, kind in enumerate(v.BYTE_KINDS)]
    buttons = [
        {"label": "per step", "method": "update",
         "args": [{"y": per_step, "hovertemplate": step_hover},
                  {"yaxis.title.text": f"bytes per step ({name})"}]},
        {"label": "per batch row", "method": "update",
         "args": [{"y": per_row, "hovertemplate": row_hover},
                  {"yaxis.title.text": f"bytes per batch row ({row_name})"}]},
    ]
    lay = st.layout(ROW_HEIGHT_PX, barmode="stack", bargap=0.35,
                    xaxis=st.axis("batch size", type="category"),
                    yaxis=st.axis(f"bytes per step ({name})", rangemode="tozero"),
                    legend={"orientation": "h", "y": -0.22, "x": 0, "traceorder": "normal",
                            "font": {"size": 11}},
                    updatemenus=[{"type": "buttons", "direction": "right", "x": 0, "y": 1.2,
                                  "xanchor": "left", "showactive": True, "buttons": buttons,
                                  "font": {"size": 11}, "pad": {"r": 4, "t": 0}}],
                    margin={"l": 64, "r": 24, "t": 52, "b": 52})
    return st.figure(data, lay)


def response_batch(report: Report) -> BatchResult | None:
    """The batch whose slowest ops the batch-response chart follows: the recommended one,
    else the largest analysed."""
    analysed = v.analysed(report)
    return v.recommended(report) or (analysed[-1] if analysed else None)


def batch_response(report: Report) -> st.Figure | None:
    """Time per batch row of the ops that matter most, against batch size (log-log)."""
    curves = report.batch_response
    batch = response_batch(report)
    ids = [op.op_id for op in v.ops_by_time(batch)[:TOP_OPS]
           if len(curves.get(op.op_id) or []) >= 2]
    if batch is None or not ids:
        return None
    ops = {op.op_id: op for op in batch.ops}
    values = [p.time_per_row_s for i in ids for p in curves[i] if p.time_per_row_s]
    div, name = fmt.time_scale(max(values))
    data: list[dict[str, Any]] = []
    for n, op_id in enumerate(ids):
        op = ops.get(op_id)
        pts = sorted(curves[op_id], key=lambda p: p.batch_size)
        label = chart_text(f"{op.name if op else op_id} · "
                           f"{(op.module if op else '') or 'top level'}", 48)
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": label,
            "x": [p.batch_size for p in pts], "y": [p.time_per_row_s / div for p in pts],
            "line": {"color": v.BOUND_COLORS.get(op.bound.value if op else "", st.GUIDE),
                     "width": 2, "dash": DASHES[n % len(DASHES)]},
            "marker": {"symbol": st.SYMBOLS[n % len(st.SYMBOLS)], "size": 7},
            "hovertemplate": (f"{label}<br>{chart_text(op_id)}<br>batch %{{x}}: %{{y:.4g}} "
                              f"{name} per row<extra></extra>"),
        })
    first = min(curves[ids[0]], key=lambda p: p.batch_size)
    b0, t0 = first.batch_size, first.time_per_row_s / div
    sizes = sorted({p.batch_size for i in ids for p in curves[i]})
    data.append({"type": "scatter", "mode": "lines", "name": "∝ 1/b: a fixed cost per step",
                 "x": sizes, "y": [t0 * b0 / b for b in sizes], "hoverinfo": "skip",
                 "line": {"color": st.GUIDE, "dash": "dot", "width": 1}})
    shown = [y for trace in data for y in trace["y"] if y and y > 0]
    lo, hi = min(shown) / 1.3, max(shown) * 1.3
    lay = st.layout(ROW_HEIGHT_PX + 60, xaxis=st.batch_axis(sizes),
                    yaxis=st.axis(f"time per batch row ({name}, log)", log=True,
                                  range=[math.log10(lo), math.log10(hi)],
                                  **st.log_ticks(lo, hi)),
                    legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
                    margin={"l": 64, "r": 24, "t": 16, "b": 52})
    return st.figure(data, lay)


def sequence_grid(report: Report) -> st.Figure | None:
    """Tokens a second against tokens per step, one line per sequence length (SEQ_LENS):
    lines that lie on one another say the tokens per step set the throughput, however they
    are split into rows; a dotted line marks the batch predicted to fill the memory at each
    length."""
    grid = report.sequence_grid
    if grid is None:
        return None
    points = [(p, p.latency_s) for p in grid.points
              if p.latency_s and p.status == Status.OK]
    if not points:
        return None
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    lengths = sorted({p.seq_len for p, _ in points})
    xs_all = [p.tokens_per_step for p, _ in points]
    for i, length in enumerate(lengths):
        here = sorted(((p, lat) for p, lat in points if p.seq_len == length),
                      key=lambda pl: pl[0].batch_size)
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{length} tokens a row",
            "x": [p.tokens_per_step for p, _ in here],
            "y": [p.tokens_per_step / lat for p, lat in here],
            "text": [f"batch {p.batch_size} × {length}" for p, _ in here],
            "line": {"dash": DASHES[i % len(DASHES)], "width": 2},
            "marker": {"size": 8, "symbol": st.SYMBOLS[i % len(st.SYMBOLS)]},
            "hovertemplate": "%{text}: %{x:,} tokens a step, %{y:,.4g} tokens/s<extra></extra>"})
    limits = [(row.seq_len, row.memory_limit.batch_size) for row in grid.lengths
              if row.memory_limit is not None and row.memory_limit.batch_size]
    xs_all += [length * limit for length, limit in limits]
    log = st.wants_log([min(xs_all), max(xs_all)])
    for length, limit in limits:
        x = length * limit
        shapes.append(st.vline(x, st.LIMIT))
        notes.append(st.note(math.log10(x) if log else x, "paper:1.0",
                             f"{length}: fits to batch {limit}", color=st.LIMIT,
                             textangle=-90, xanchor="right", yanchor="top"))
    lay = st.layout(ROW_HEIGHT_PX,
                    xaxis=st.axis("tokens per step (batch × sequence length)", log=log),
                    yaxis=st.axis("tokens/s", rangemode="tozero"),
                    shapes=shapes, annotations=notes,
                    margin={"l": 64, "r": 24, "t": 28, "b": 52})
    return st.figure(data, lay)
