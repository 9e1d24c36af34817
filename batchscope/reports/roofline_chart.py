"""The roofline, a roof per dtype and per kernel family, with every op at every batch size:
this machine's measured roofs, or the datasheet roofs of the GPU a trace names.

Log-log: x is arithmetic intensity (FLOP per byte), y the FLOP/s an op attained (its counted
FLOPs over its profiled time). Each roof is ``min(peak, intensity × bandwidth)``. Every
dtype's peak is drawn (the roof of ops of no kernel family with probes of their own), and
beside it each kernel family's roof the run's ops were placed against, labelled with the
probe that reached it: a matmul is drawn under the matmul roof it is classified against, so
an addmm at 92% of that roof sits at 92% of a line, not at 45% of a convolution's (issue
32). The model's dtype is drawn solid, the other dtypes dashed; a dotted line marks the ridge
of the roof the model's ops spent the most time under. Points are coloured by the bound the
classifier gave them, shaped by batch size, sized by their share of the step, and a thin
path joins one op across batch sizes: ops whose weights amortize walk right as the batch
grows, ops that read per-row state stay put.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from batchscope.hardware.types import FP32, Ceilings
from batchscope.op_families import PATH_WORDS
from batchscope.op_families import family as kernel_family
from batchscope.records import BatchResult, OpStat, Report
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text
from batchscope.reports.html_rows import (
    FAMILY_WORDS,
    family_order,
    family_roof_name,
)

# Marker diameter in px: the floor, and what a share of 100% of the step adds (by sqrt).
MARKER_MIN_PX = 6.0
MARKER_SCALE_PX = 34.0
# Room left around the points and roofs, in decades of the log axes.
PAD_DECADES = 0.35
ROOF_HEIGHT_PX = 540
# Two roof labels closer than this (in decades of FLOP/s) would overlap.
LABEL_GAP_DECADES = 0.15
# The kernel families' roofs (op_families.Family), each in its own colour; the dtypes' peaks
# keep the ink (the model's dtype) and the guide grey (the others).
FAMILY_COLORS = {"matmul": "#1e3a8a", "conv": "#7c3aed"}


def _placeable(op: OpStat) -> bool:
    """An op can sit on a log-log roofline when it has FLOPs, bytes and time."""
    return bool(op.flops) and bool(op.intensity) and op.time_s > 0


def _attained(op: OpStat) -> float:
    """FLOP/s a placeable op attained: its counted FLOPs over its profiled time."""
    return (op.flops or 0) / op.time_s


def _hover(report: Report, op: OpStat, batch: BatchResult, roof: str) -> str:
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
        f"{fmt.pct(op.efficiency)} of its roof: the {chart_text(roof)}",
    ]
    return "<br>".join(lines)


def _marker_size(op: OpStat, batch: BatchResult) -> float:
    share = v.op_share(op, batch) or 0.0
    return MARKER_MIN_PX + MARKER_SCALE_PX * math.sqrt(min(max(share, 0.0), 1.0))


def _point_traces(report: Report,
                  hw: Ceilings) -> tuple[list[dict[str, Any]], list[float], list[float]]:
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
            "x": x, "y": y,
            "hovertext": [_hover(report, op, batch, _roof_name(hw, *roof_of(hw, op)))
                          for op in ops],
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


@dataclass(frozen=True)
class _Line:
    """One roof drawn: a kernel family's in a dtype, a dtype's peak, or both at once where
    they are the same figure (a convolution that reached the dtype's best)."""

    name: str  # the legend's: "float32 matmul roof", "float32 roof"
    label: str  # the words on the chart before its figure: "float32 matmul"
    dtype: str
    family: str | None  # None: the dtype's peak alone
    flops_per_s: float
    via: str = ""  # the probe (or op) that reached it, after the figure: "torch.mm"


def roof_of(hw: Ceilings, op: OpStat) -> tuple[str, str | None]:
    """The roof an op is placed against, as roofline.Roof.of_op finds it: the dtype whose
    figures it uses and its kernel family where that family has a roof there (None: the
    dtype's peak)."""
    dtype = op.roof_dtype or op.dtype or FP32
    key = dtype if hw.peak_flops_per_s.get(dtype) else FP32
    found = kernel_family(op.name)
    has_roof = found is not None and key in hw.family_peaks.get(found.value, {})
    return key, found.value if has_roof and found is not None else None


def _roof_name(hw: Ceilings, dtype: str, family: str | None) -> str:
    """A roof's name in the legend and the hover: "float32 matmul roof"; a dtype's peak is
    "float32 peak" beside family roofs (as the ceilings table has it), "float32 roof" in
    ceilings without them (the one roof of its dtype)."""
    if family:
        return family_roof_name(dtype, family)
    return f"{dtype} peak" if hw.family_peaks else f"{dtype} roof"


def _time_by_roof(report: Report, hw: Ceilings) -> dict[tuple[str, str | None], float]:
    """Seconds of the placeable ops of every analysed batch size under each roof."""
    used: dict[tuple[str, str | None], float] = {}
    for batch in v.analysed(report):
        for op in batch.ops:
            if _placeable(op):
                key = roof_of(hw, op)
                used[key] = used.get(key, 0.0) + op.time_s
    return used


def _lines(hw: Ceilings, used: dict[tuple[str, str | None], float]) -> list[_Line]:
    """Every dtype's peak, and each kernel family's roof the run's ops were placed against,
    highest first; a family roof that is its dtype's peak too is one line of two names."""
    lines = []
    for dtype, peak in hw.peak_flops_per_s.items():
        merged = False
        for family in sorted(hw.family_peaks, key=family_order):
            roof = hw.family_peaks[family].get(dtype)
            if roof is None or (dtype, family) not in used:
                continue
            via = f"{roof.path}, this run" if roof.op_id else PATH_WORDS.get(roof.path,
                                                                               roof.path)
            name = family_roof_name(dtype, family)
            label = f"{dtype} {FAMILY_WORDS.get(family, family)}"
            if roof.flops_per_s == peak and not merged:  # the same line: one, both names
                name, label, merged = f"{name} = {dtype} peak", f"{label} = peak", True
            lines.append(_Line(name, label, dtype, family, roof.flops_per_s, via))
        if not merged:
            lines.append(_Line(_roof_name(hw, dtype, None),
                               f"{dtype} peak" if hw.family_peaks else dtype, dtype, None, peak))
    return sorted(lines, key=lambda line: -line.flops_per_s)


def _main_roof(hw: Ceilings, dtype: str, used: dict[tuple[str, str | None], float]) -> float:
    """The roof whose ridge is drawn: the one the placed ops spent the most time under (a
    decoder's matmuls', a CNN's convolutions', autocast's dtype under --amp), else the
    model's dtype's peak."""
    if used:
        key, family = max(used, key=lambda roof: used[roof])
        return hw.peak_for(key, family)
    return hw.peak_flops_per_s.get(dtype, max(hw.peak_flops_per_s.values()))


def _roofs(hw: Ceilings, dtype: str, lines: list[_Line], ridge: float, x_lo: float,
           x_hi: float, ridge_of: str | None = None
           ) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    bw = float(hw.bandwidth_bytes_per_s)
    traces: list[dict[str, Any]] = []
    notes: list[dict[str, Any]] = []
    last_label_y = math.inf
    for line in lines:
        peak, own = line.flops_per_s, line.dtype == dtype
        color = (FAMILY_COLORS.get(line.family, st.MUTED) if line.family
                 else st.INK if own else st.GUIDE)
        traces.append({
            "type": "scatter", "mode": "lines", "name": chart_text(line.name),
            "x": [x_lo, peak / bw, x_hi], "y": [x_lo * bw, peak, peak],
            "hovertemplate": (f"{chart_text(line.name)}: {fmt.si(peak, 'FLOP/s')}, "
                              f"ridge {fmt.number(peak / bw)} FLOP/byte<extra></extra>"),
            "line": {"color": color, "width": 2.4 if own else 1.2,
                     "dash": "solid" if own else "dash"},
        })
        # Roofs closer than LABEL_GAP_DECADES get their label under the line, not over it.
        below = last_label_y - math.log10(peak) < LABEL_GAP_DECADES
        notes.append(st.note(math.log10(x_hi), math.log10(peak),
                             chart_text(f"{line.label} {fmt.si(peak, 'FLOP/s')}"
                                        + (f" ({line.via})" if line.via else "")),
                             color=color if own else st.MUTED, xanchor="right",
                             yanchor="top" if below else "bottom", bgcolor="rgba(0,0,0,0)"))
        last_label_y = math.log10(peak) - (1.0 if below else 0.0)
    whose = f" of the {chart_text(ridge_of)}" if ridge_of else ""
    notes.append(st.note(math.log10(ridge), "paper:0.0",
                         f"ridge{whose}: {fmt.number(ridge)} FLOP/byte", xanchor="left",
                         yanchor="bottom"))
    # The bandwidth label sits on the sloped roof, a fifth of the way from the left edge.
    x_label = 10 ** (math.log10(x_lo) + 0.2 * (math.log10(ridge) - math.log10(x_lo)))
    notes.append(st.note(math.log10(x_label), math.log10(x_label * bw),
                         f"memory {fmt.si(bw, 'B/s')}", xanchor="right", yanchor="bottom"))
    return traces, notes


def roofline(report: Report) -> st.Figure | None:
    """The roofline figure, or None without measured ceilings or placeable ops."""
    hw = v.hardware(report)
    if hw is None or not hw.bandwidth_bytes_per_s:
        return None
    points, xs, ys = _point_traces(report, hw)
    if not points:
        return None
    dtype = v.model_dtype(report)
    used = _time_by_roof(report, hw)
    lines = _lines(hw, used)
    bw = hw.bandwidth_bytes_per_s
    main = _main_roof(hw, dtype, used)
    ridge = main / bw
    # The dotted ridge says whose it is: a chart may draw several roofs, and the prose
    # quotes other ridges by name (issue 50: three unnamed ridges in one report).
    ridge_of = next((line.name for line in lines if line.flops_per_s == main), None)
    ridges = [line.flops_per_s / bw for line in lines]
    x_lo = 10 ** (math.floor(math.log10(min(xs + ridges))) - PAD_DECADES)
    x_hi = 10 ** (math.ceil(math.log10(max(xs + ridges))) + PAD_DECADES)
    roof_traces, notes = _roofs(hw, dtype, lines, ridge, x_lo, x_hi, ridge_of)
    y_lo = 10 ** (math.log10(min([*ys, x_lo * bw])) - PAD_DECADES)
    y_hi = 10 ** (math.log10(max([*ys, *(line.flops_per_s for line in lines)])) + PAD_DECADES)
    paths = _paths(report)
    data = roof_traces + ([paths] if paths else []) + points
    lay = st.layout(
        ROOF_HEIGHT_PX,
        xaxis=st.axis("arithmetic intensity (FLOP/byte, log)", log=True,
                      range=[math.log10(x_lo), math.log10(x_hi)], exponentformat="power"),
        yaxis=st.axis("attained FLOP/s (log)", log=True, tickformat="~s",
                      range=[math.log10(y_lo), math.log10(y_hi)]),
        annotations=notes, shapes=[st.vline(ridge, st.MUTED, dash="dot", width=1)],
        legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
        margin={"l": 70, "r": 150, "t": 16, "b": 56},
        hovermode="closest",
    )
    return st.figure(data, lay)


def title(report: Report) -> str:
    """The chart's heading: whose roofs these are. A trace's roofs are the datasheet of the
    GPU it names, never measured here, so they are not "this machine's"."""
    hw = v.hardware(report)
    if hw is not None and hw.source == "datasheet":
        return f"Roofline of the {hw.name} datasheet"
    return "Roofline of this machine"


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
