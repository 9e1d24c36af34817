"""The roofline of this machine, a roof per dtype, with every op at every batch size.

Log-log: x is arithmetic intensity (FLOP per byte), y the FLOP/s an op attained (its counted
FLOPs over its profiled time). Each roof is ``min(peak, intensity × bandwidth)``; the
model's dtype is drawn solid, the other measured dtypes dashed. Points are coloured by the
bound the classifier gave them, shaped by batch size, sized by their share of the step, and
a thin path joins one op across batch sizes: ops whose weights amortize walk right as the
batch grows, ops that read per-row state stay put.
"""

from __future__ import annotations

import math
from typing import Any

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, OpStat, Report
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text

# Marker diameter in px: the floor, and what a share of 100% of the step adds (by sqrt).
MARKER_MIN_PX = 6.0
MARKER_SCALE_PX = 34.0
# Room left around the points and roofs, in decades of the log axes.
PAD_DECADES = 0.35
ROOF_HEIGHT_PX = 540
# Two roof labels closer than this (in decades of FLOP/s) would overlap.
LABEL_GAP_DECADES = 0.15


def _placeable(op: OpStat) -> bool:
    """An op can sit on a log-log roofline when it has FLOPs, bytes and time."""
    return bool(op.flops) and bool(op.intensity) and op.time_s > 0


def _attained(op: OpStat) -> float:
    """FLOP/s a placeable op attained: its counted FLOPs over its profiled time."""
    return (op.flops or 0) / op.time_s


def _hover(report: Report, op: OpStat, batch: BatchResult) -> str:
    split = op.bytes
    lines = [
        f"<b>{chart_text(op.name)}</b>  {chart_text(op.op_id)}",
        f"module {chart_text(op.module or '(top level)', 80)}",
        f"batch {v.size_label(report, batch.batch_size)} · {op.calls} calls · "
        f"{chart_text(op.dtype or '?')}",
        f"shapes {chart_text(fmt.shapes(op.input_shapes), 120)}",
        f"time {fmt.seconds(op.time_s)} ({fmt.pct(v.op_share(op, batch), 1)} of step)",
        f"FLOPs {fmt.si(op.flops, 'FLOP')} → {fmt.si(_attained(op), 'FLOP/s')}",
        f"bytes {fmt.nbytes(split.total)}: weights {fmt.nbytes(split.weights)}, "
        f"state {fmt.nbytes(split.state)}, "
        f"activations {fmt.nbytes(split.activations)}",
        f"intensity {fmt.number(op.intensity)} FLOP/byte · "
        f"<b>{chart_text(op.bound.value)}-bound</b> · "
        f"{fmt.pct(op.efficiency)} of roof",
    ]
    return "<br>".join(lines)


def _marker_size(op: OpStat, batch: BatchResult) -> float:
    share = v.op_share(op, batch) or 0.0
    return MARKER_MIN_PX + MARKER_SCALE_PX * math.sqrt(min(max(share, 0.0), 1.0))


def _point_traces(report: Report) -> tuple[list[dict[str, Any]], list[float], list[float]]:
    traces: list[dict[str, Any]] = []
    xs: list[float] = []
    ys: list[float] = []
    for i, batch in enumerate(v.analysed(report)):
        ops = [op for op in batch.ops if _placeable(op)]
        if not ops:
            continue
        x = [op.intensity or 0.0 for op in ops]
        y = [_attained(op) for op in ops]
        xs += x
        ys += y
        group = f"batch {v.size_label(report, batch.batch_size)}"
        symbol = st.SYMBOLS[i % len(st.SYMBOLS)]
        traces.append({  # the legend entry: the shape in a neutral colour (points carry the bound)
            "type": "scatter", "mode": "markers", "name": group, "legendgroup": group,
            "x": [None], "y": [None], "hoverinfo": "skip",
            "marker": {"symbol": symbol, "size": 10, "color": st.MUTED},
        })
        traces.append({
            "type": "scatter", "mode": "markers", "name": group, "legendgroup": group,
            "showlegend": False,
            "x": x, "y": y, "hovertext": [_hover(report, op, batch) for op in ops],
            "hoverinfo": "text",
            "marker": {
                "symbol": symbol,
                "size": [_marker_size(op, batch) for op in ops],
                "color": [v.BOUND_COLORS.get(op.bound.value, st.GUIDE) for op in ops],
                "opacity": 0.8, "line": {"color": "#ffffff", "width": 0.8},
            },
        })
    return traces, xs, ys


def _paths(report: Report) -> dict[str, Any] | None:
    """One polyline per op across batch sizes (None separates ops)."""
    by_op: dict[str, list[tuple[int, float, float]]] = {}
    for batch in v.analysed(report):
        for op in batch.ops:
            if _placeable(op):
                by_op.setdefault(op.op_id, []).append(
                    (batch.batch_size, op.intensity or 0.0, _attained(op)))
    x: list[float | None] = []
    y: list[float | None] = []
    for points in by_op.values():
        if len(points) < 2:
            continue
        for _, px, py in sorted(points):
            x.append(px)
            y.append(py)
        x.append(None)
        y.append(None)
    if not x:
        return None
    return {"type": "scatter", "mode": "lines", "name": "one op across batch sizes",
            "x": x, "y": y, "hoverinfo": "skip", "connectgaps": False,
            "line": {"color": "#cbd5e1", "width": 1}}


def _roofs(hw: Ceilings, dtype: str, x_lo: float,
           x_hi: float) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bw = float(hw.bandwidth_bytes_per_s)
    traces: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    peaks = sorted(hw.peak_flops_per_s.items(), key=lambda kv: -kv[1])
    last_label_y = math.inf
    for name, peak in peaks:
        ridge = peak / bw
        own = name == dtype
        traces.append({
            "type": "scatter", "mode": "lines", "name": f"{chart_text(name)} roof",
            "x": [x_lo, ridge, x_hi], "y": [x_lo * bw, peak, peak],
            "hovertemplate": (f"{chart_text(name)}: peak {fmt.si(peak, 'FLOP/s')}, "
                              f"ridge {fmt.number(ridge)} FLOP/byte<extra></extra>"),
            "line": {"color": st.INK if own else st.GUIDE, "width": 2.4 if own else 1.2,
                     "dash": "solid" if own else "dash"},
        })
        # Roofs closer than LABEL_GAP_DECADES get their label under the line, not over it.
        below = last_label_y - math.log10(peak) < LABEL_GAP_DECADES
        notes.append(st.note(math.log10(x_hi), math.log10(peak),
                             f"{chart_text(name)} {fmt.si(peak, 'FLOP/s')}",
                             color=st.INK if own else st.MUTED, xanchor="right",
                             yanchor="top" if below else "bottom", bgcolor="rgba(0,0,0,0)"))
        last_label_y = math.log10(peak) - (1.0 if below else 0.0)
    ridge = hw.peak_flops_per_s.get(dtype, peaks[0][1]) / bw
    notes.append(st.note(math.log10(ridge), "paper:0.0",
                         f"ridge {fmt.number(ridge)} FLOP/byte", xanchor="left", yanchor="bottom"))
    # The bandwidth label sits on the sloped roof, a fifth of the way from the left edge.
    x_label = 10 ** (math.log10(x_lo) + 0.2 * (math.log10(ridge) - math.log10(x_lo)))
    notes.append(st.note(math.log10(x_label), math.log10(x_label * bw),
                         f"memory {fmt.si(bw, 'B/s')}", xanchor="right", yanchor="bottom"))
    return traces, notes


def _ridge_line(hw: Ceilings, dtype: str) -> dict[str, Any]:
    ridge = hw.peak_flops_per_s.get(dtype, max(hw.peak_flops_per_s.values()))
    return st.vline(ridge / hw.bandwidth_bytes_per_s, st.MUTED, dash="dot", width=1)


def roofline(report: Report) -> st.Figure | None:
    """The roofline figure, or None without measured ceilings or placeable ops."""
    hw = v.hardware(report)
    if hw is None or not hw.bandwidth_bytes_per_s:
        return None
    points, xs, ys = _point_traces(report)
    if not points:
        return None
    dtype = v.model_dtype(report)
    ridges = [p / hw.bandwidth_bytes_per_s for p in hw.peak_flops_per_s.values()]
    x_lo = 10 ** (math.floor(math.log10(min(xs + ridges))) - PAD_DECADES)
    x_hi = 10 ** (math.ceil(math.log10(max(xs + ridges))) + PAD_DECADES)
    roof_traces, notes = _roofs(hw, dtype, x_lo, x_hi)
    y_lo = 10 ** (math.log10(min([*ys, x_lo * hw.bandwidth_bytes_per_s])) - PAD_DECADES)
    y_hi = 10 ** (math.log10(max([*ys, *hw.peak_flops_per_s.values()])) + PAD_DECADES)
    paths = _paths(report)
    data = roof_traces + ([paths] if paths else []) + points
    lay = st.layout(
        ROOF_HEIGHT_PX,
        xaxis=st.axis("arithmetic intensity (FLOP/byte, log)", log=True,
                      range=[math.log10(x_lo), math.log10(x_hi)], exponentformat="power"),
        yaxis=st.axis("attained FLOP/s (log)", log=True, tickformat="~s",
                      range=[math.log10(y_lo), math.log10(y_hi)]),
        annotations=notes, shapes=[_ridge_line(hw, dtype)],
        legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
        margin={"l": 70, "r": 150, "t": 16, "b": 56},
        hovermode="closest",
    )
    return st.figure(data, lay)


def unplaced(report: Report) -> tuple[int, float | None, int | None]:
    """Op groups left off the roofline at the recommended batch (else the largest analysed):
    their count, their share of its step, and that batch size."""
    analysed = v.analysed(report)
    batch = v.recommended(report) or (analysed[-1] if analysed else None)
    if batch is None:
        return 0, None, None
    off = [op for op in batch.ops if not _placeable(op)]
    step = batch.profiled_step_s
    share = sum(op.time_s for op in off) / step if step else None
    return len(off), share, batch.batch_size
