"""Charts against batch size: throughput, latency, peak memory, time share, bytes, op curves.

Each function takes the report dict and returns a Plotly figure, or None when the report has
nothing for it (no measured batch, no per-op breakdown). The recommendation, the limits the
run was given and B* (predicted and measured) are drawn where they belong.
"""

from __future__ import annotations

import math
from typing import Any

from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text
from batchscope.reports.view import Doc

# Ops shown in the batch-response chart: the ones with the most time at the chosen batch.
TOP_OPS = 8
DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
ROW_HEIGHT_PX = 340
# Reports written before the rule's share was stored used this one (DESIGN.md).
DEFAULT_NEAR_BEST_SHARE = 0.9
# Labels of guides in this share of the batch axis at either end are anchored inwards.
EDGE_SHARE = 0.25


def _sizes(doc: Doc) -> list[int]:
    return [b["batch_size"] for b in v.batches(doc)]


def _rec_marks(doc: Doc, shapes: list[dict[str, Any]], notes: list[dict[str, Any]]) -> None:
    rec = v.recommendation(doc)
    if rec.get("batch_size") is not None:
        shapes.append(st.vline(rec["batch_size"], st.ACCENT_BAND, dash="solid", width=10))
        notes.append(st.note(_logx(doc, rec["batch_size"]), "paper:1.0",
                             f"recommended {rec['batch_size']}", color=st.ACCENT,
                             yanchor="bottom", xanchor=_anchor(doc, rec["batch_size"])))


def _anchor(doc: Doc, x: float) -> str:
    """Anchor a label so it stays inside the plot: left near the left edge, right near the right."""
    sizes = _sizes(doc)
    lo, hi = min(sizes), max(sizes)
    if hi <= lo:
        return "center"
    where = (math.log(x) - math.log(lo)) / (math.log(hi) - math.log(lo)) if lo > 0 else 0.5
    return "left" if where < EDGE_SHARE else "right" if where > 1 - EDGE_SHARE else "center"


def _logx(doc: Doc, x: float) -> float:
    """Annotation x on the batch axis (annotations on a log axis take log10)."""
    axis = st.batch_axis(_sizes(doc))
    return math.log10(x) if axis["type"] == "log" else x


def _guides(doc: Doc, y_lo: float, y_hi: float) -> list[dict[str, Any]]:
    """B* predicted, the measured knee and the rule's threshold, as legend-named lines.

    A guide outside the swept batch sizes keeps its legend entry (with the value) but draws
    no line, so the axis is not stretched to reach it.
    """
    rec, sizes = v.recommendation(doc), _sizes(doc)
    out: list[dict[str, Any]] = []
    if not sizes:
        return out
    lo, hi = min(sizes), max(sizes)
    marks = []
    if rec.get("predicted_critical_batch") is not None:
        marks.append((rec["predicted_critical_batch"], "B* predicted", "dot"))
    if rec.get("measured_knee_batch") is not None:
        marks.append((rec["measured_knee_batch"], "knee measured", "dashdot"))
    for x, label, dash in marks:
        inside = x is not None and lo <= x <= hi
        name = label if x is None else f"{label} {fmt.number(x)}"
        name += "" if inside or x is None else " (off the axis)"
        out.append({"type": "scatter", "mode": "lines", "name": name,
                    "x": [x, x] if inside else [None], "y": [y_lo, y_hi] if inside else [None],
                    "hoverinfo": "skip", "line": {"color": st.MUTED, "dash": dash, "width": 1.3}})
    best = rec.get("best_throughput_per_s")
    share = rec.get("near_best_share") or DEFAULT_NEAR_BEST_SHARE
    if best and sizes:
        out.append({"type": "scatter", "mode": "lines",
                    "name": f"{fmt.pct(share)} of best (the rule)", "x": [lo, hi],
                    "y": [share * best] * 2, "hoverinfo": "skip",
                    "line": {"color": st.ACCENT, "dash": "dash", "width": 1.2}})
    return out


def throughput(doc: Doc) -> st.Figure | None:
    """Throughput against batch size, the ideal line, the rule's threshold, failures."""
    ok = v.measured(doc)
    if not ok:
        return None
    unit = v.unit(doc)
    xs = [b["batch_size"] for b in ok]
    ys = [b["throughput_per_s"] for b in ok]
    log = st.wants_log(ys)
    y_lo, y_hi = (min(ys) / 1.6, max(ys) * 1.6) if log else (0.0, max(ys) * 1.18)
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": f"ideal: batch {xs[0]} × b/{xs[0]}",
         "x": xs, "y": [ys[0] * x / xs[0] for x in xs], "hoverinfo": "skip",
         "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2}},
        *_guides(doc, y_lo, y_hi),
        {"type": "scatter", "mode": "lines+markers", "name": f"measured {chart_text(unit)}s/s",
         "x": xs, "y": ys, "line": {"color": st.SERIES, "width": 2.5},
         "marker": {"size": 8, "color": st.SERIES},
         "hovertemplate": f"batch %{{x}}<br>%{{y:,.4~s}} {chart_text(unit)}s/s<extra></extra>"},
    ]
    predicted = v.prediction_rows(doc)
    if predicted:
        unmeasured = [r for r in predicted if not r["measured"]]
        data.append({"type": "scatter", "mode": "lines", "name": "predicted (step-time model)",
                     "x": [r["batch_size"] for r in predicted],
                     "y": [r["predicted_throughput_per_s"] for r in predicted],
                     "line": {"color": st.SERIES, "dash": "dash", "width": 1.5},
                     "hovertemplate": (f"batch %{{x}}<br>predicted %{{y:,.4~s}} "
                                       f"{chart_text(unit)}s/s<extra></extra>")})
        if unmeasured:
            data.append({"type": "scatter", "mode": "markers", "name": "not measured: predicted",
                         "x": [r["batch_size"] for r in unmeasured],
                         "y": [r["predicted_throughput_per_s"] for r in unmeasured],
                         "marker": {"size": 8, "symbol": "circle-open", "color": st.SERIES},
                         "hovertemplate": (f"batch %{{x}} not measured<br>predicted "
                                           f"%{{y:,.4~s}} {chart_text(unit)}s/s<extra></extra>")})
        ys = ys + [r["predicted_throughput_per_s"] for r in unmeasured]
        y_lo, y_hi = (min(ys) / 1.6, max(ys) * 1.6) if log else (0.0, max(ys) * 1.18)
    rec_batch = v.recommended(doc)
    if rec_batch:
        data.append({"type": "scatter", "mode": "markers", "name": "recommended",
                     "x": [rec_batch["batch_size"]], "y": [rec_batch["throughput_per_s"]],
                     "marker": {"size": 16, "symbol": "star", "color": st.ACCENT,
                                "line": {"color": "#ffffff", "width": 1}},
                     "hovertemplate": "recommended batch %{x}<extra></extra>"})
    failed = v.failed(doc)
    if failed:
        data.append({"type": "scatter", "mode": "markers+text", "name": "did not finish",
                     "x": [b["batch_size"] for b in failed], "y": [min(ys)] * len(failed),
                     "text": [chart_text(b.get("status", "?")) for b in failed],
                     "textposition": "top center", "textfont": {"color": st.LIMIT, "size": 11},
                     "cliponaxis": False,
                     "marker": {"symbol": "x", "size": 11, "color": st.LIMIT},
                     "hovertext": [chart_text(f"batch {b['batch_size']}: {b.get('status')} "
                                              f"{b.get('error', '')}", 200) for b in failed],
                     "hoverinfo": "text"})
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    _rec_marks(doc, shapes, notes)
    y_range = [math.log10(y_lo), math.log10(y_hi)] if log else [y_lo, y_hi]
    sizes = sorted({*_sizes(doc), *(r["batch_size"] for r in predicted)})
    lay = st.layout(ROW_HEIGHT_PX + 30, xaxis=st.batch_axis(sizes),
                    yaxis=st.axis(f"throughput ({chart_text(unit)}s/s{', log' if log else ''})",
                                  log=log, tickformat="~s", range=y_range),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52},
                    legend={"orientation": "h", "y": -0.24, "x": 0, "font": {"size": 10.5}})
    return st.figure(data, lay)


def latency(doc: Doc) -> st.Figure | None:
    """Median step latency with its interquartile range, the minimum and the latency limit."""
    ok = [b for b in v.measured(doc) if b.get("latency_s")]
    if not ok:
        return None
    limit = v.latency_limit_s(doc)
    largest = max([b["latency_s"]["median"] for b in ok] + ([limit] if limit else []))
    div, name = fmt.time_scale(largest)
    xs = [b["batch_size"] for b in ok]
    lat = [b["latency_s"] for b in ok]
    med = [x["median"] / div for x in lat]
    data = [
        {"type": "scatter", "mode": "lines", "name": "fastest step", "x": xs,
         "y": [(x.get("min") or x["median"]) / div for x in lat],
         "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2},
         "hovertemplate": f"batch %{{x}}: fastest %{{y:.4g}} {name}<extra></extra>"},
        {"type": "scatter", "mode": "lines+markers", "name": "median step (p25–p75 bars)",
         "x": xs, "y": med, "line": {"color": st.SERIES, "width": 2.5},
         "marker": {"size": 8, "color": st.SERIES},
         "error_y": {"type": "data", "symmetric": False, "color": st.SERIES, "thickness": 1.2,
                     "array": [(x["p75"] - x["median"]) / div for x in lat],
                     "arrayminus": [(x["median"] - x["p25"]) / div for x in lat]},
         "customdata": [[x["p25"] / div, x["p75"] / div, x["n"]] for x in lat],
         "hovertemplate": (f"batch %{{x}}: median %{{y:.4g}} {name}<br>p25–p75 "
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
    _rec_marks(doc, shapes, notes)
    lay = st.layout(ROW_HEIGHT_PX, xaxis=st.batch_axis(_sizes(doc)),
                    yaxis=st.axis(f"step latency ({name}{', log' if log else ''})", log=log,
                                  rangemode="tozero"),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52})
    return st.figure(data, lay)


def memory(doc: Doc) -> st.Figure | None:
    """Peak memory against batch size, the baseline before the first step, the budget."""
    ok = [b for b in v.measured(doc) if b.get("peak_memory_bytes")]
    if not ok:
        return None
    budget = v.memory_budget_bytes(doc)
    div, name = fmt.byte_scale(max([b["peak_memory_bytes"] for b in ok] + [budget or 0]))
    xs = [b["batch_size"] for b in ok]
    data = [{"type": "scatter", "mode": "lines+markers", "name": "peak", "x": xs,
             "y": [b["peak_memory_bytes"] / div for b in ok],
             "line": {"color": st.SERIES, "width": 2.5}, "marker": {"size": 8},
             "hovertemplate": f"batch %{{x}}: peak %{{y:,.1f}} {name}<extra></extra>"}]
    if any(b.get("baseline_memory_bytes") for b in ok):
        data.append({"type": "scatter", "mode": "lines", "name": "before the first step",
                     "x": xs, "y": [(b.get("baseline_memory_bytes") or 0) / div for b in ok],
                     "line": {"color": st.GUIDE, "dash": "dot", "width": 1.2},
                     "hovertemplate": f"batch %{{x}}: baseline %{{y:,.1f}} {name}<extra></extra>"})
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    if budget:
        shapes.append(st.hline(budget / div, st.LIMIT))
        notes.append(st.note("paper:0.0", budget / div, f"memory budget {fmt.nbytes(budget)}",
                             color=st.LIMIT, xanchor="left", yanchor="bottom"))
    _rec_marks(doc, shapes, notes)
    lay = st.layout(ROW_HEIGHT_PX, xaxis=st.batch_axis(_sizes(doc)),
                    yaxis=st.axis(f"peak memory ({name})", rangemode="tozero"),
                    shapes=shapes, annotations=notes, margin={"l": 64, "r": 24, "t": 28, "b": 52})
    return st.figure(data, lay)


def time_share(doc: Doc) -> st.Figure | None:
    """Stacked shares of the profiled step by bound, one bar per batch size."""
    ok = [b for b in v.analysed(doc) if b.get("time_share")]
    if not ok:
        return None
    xs = [str(b["batch_size"]) for b in ok]
    data = []
    for key in v.share_keys(doc):
        shares = [(b["time_share"].get(key) or 0.0) * 100 for b in ok]
        data.append({
            "type": "bar", "name": v.SHARE_LABELS[key], "x": xs, "y": shares,
            "marker": {"color": v.BOUND_COLORS[key]},
            "customdata": [fmt.seconds((b["time_share"].get(key) or 0.0)
                                       * (b.get("profiled_step_s") or 0.0)) for b in ok],
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


def bytes_per_step(doc: Doc) -> st.Figure | None:
    """Bytes per step split by kind, with a toggle to bytes per batch row."""
    ok = [b for b in v.analysed(doc) if v.step_bytes(b)]
    if not ok:
        return None
    div, name = fmt.byte_scale(max(v.step_bytes(b) or 0.0 for b in ok))
    row_div, row_name = fmt.byte_scale(
        max((v.step_bytes(b) or 0.0) / b["batch_size"] for b in ok))
    xs = [str(b["batch_size"]) for b in ok]
    per_step = [[b["bytes"].get(k, 0) / div for b in ok] for k in v.BYTE_KINDS]
    per_row = [[b["bytes"].get(k, 0) / b["batch_size"] / row_div for b in ok] for k in v.BYTE_KINDS]
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


def _top_op_ids(doc: Doc) -> list[str]:
    batch = v.recommended(doc) or (v.analysed(doc)[-1] if v.analysed(doc) else None)
    return [str(op.get("op_id")) for op in v.ops_by_time(batch)[:TOP_OPS]]


def batch_response(doc: Doc) -> st.Figure | None:
    """Time per batch row of the ops that matter most, against batch size (log-log)."""
    curves = doc.get("batch_response") or {}
    ids = [i for i in _top_op_ids(doc) if len(curves.get(i) or []) >= 2]
    if not ids:
        return None
    batch = v.recommended(doc) or v.analysed(doc)[-1]
    ops = {str(op.get("op_id")): op for op in batch.get("ops") or []}
    values = [p["time_per_row_s"] for i in ids for p in curves[i] if p.get("time_per_row_s")]
    div, name = fmt.time_scale(max(values))
    data = []
    for n, op_id in enumerate(ids):
        op = ops.get(op_id, {})
        pts = sorted(curves[op_id], key=lambda p: p["batch_size"])
        label = chart_text(f"{op.get('name', op_id)} · {op.get('module') or 'top level'}", 48)
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": label,
            "x": [p["batch_size"] for p in pts], "y": [p["time_per_row_s"] / div for p in pts],
            "line": {"color": v.BOUND_COLORS.get(op.get("bound", ""), st.GUIDE), "width": 2,
                     "dash": DASHES[n % len(DASHES)]},
            "marker": {"symbol": st.SYMBOLS[n % len(st.SYMBOLS)], "size": 7},
            "hovertemplate": (f"{label}<br>{chart_text(op_id)}<br>batch %{{x}}: %{{y:.4g}} "
                              f"{name} per row<extra></extra>"),
        })
    first = sorted(curves[ids[0]], key=lambda p: p["batch_size"])
    b0, t0 = first[0]["batch_size"], first[0]["time_per_row_s"] / div
    sizes = sorted({p["batch_size"] for i in ids for p in curves[i]})
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


def sequence_grid(doc: Doc) -> st.Figure | None:
    """Tokens a second against tokens per step, one line per sequence length (SEQ_LENS):
    lines that lie on one another say the tokens per step set the throughput, however they
    are split into rows; a dotted line marks the batch predicted to fill the memory at each
    length."""
    grid = doc.get("sequence_grid") if isinstance(doc.get("sequence_grid"), dict) else {}
    points = [p for p in grid.get("points") or [] if p.get("latency_s")
              and p.get("status") == "ok"]
    if not points:
        return None
    data: list[dict[str, Any]] = []
    shapes: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    lengths = sorted({p["seq_len"] for p in points})
    xs_all = [p["tokens_per_step"] for p in points]
    for i, length in enumerate(lengths):
        here = sorted((p for p in points if p["seq_len"] == length),
                      key=lambda p: p["batch_size"])
        data.append({
            "type": "scatter", "mode": "lines+markers", "name": f"{length} tokens a row",
            "x": [p["tokens_per_step"] for p in here],
            "y": [p["tokens_per_step"] / p["latency_s"] for p in here],
            "text": [f"batch {p['batch_size']} × {length}" for p in here],
            "line": {"dash": DASHES[i % len(DASHES)], "width": 2},
            "marker": {"size": 8, "symbol": st.SYMBOLS[i % len(st.SYMBOLS)]},
            "hovertemplate": "%{text}: %{x:,} tokens a step, %{y:,.4g} tokens/s<extra></extra>"})
    limits = [(row["seq_len"], limit) for row in grid.get("lengths") or []
              if (limit := (row.get("memory_limit") or {}).get("batch_size"))]
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
