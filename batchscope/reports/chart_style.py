"""Shared look of every chart in report.html: Plotly layouts, axes, units, guide lines.

Figures are plain Plotly JSON (``{"data": [...], "layout": {...}}``) built in Python, so the
page script only calls ``Plotly.newPlot`` and the figures can be checked in tests. Every
string that comes from the user goes through :func:`~batchscope.reports.escape.chart_text`.
"""

from __future__ import annotations

import math
from typing import Any

Figure = dict[str, Any]

FONT = "Inter, system-ui, -apple-system, 'Segoe UI', Roboto, Helvetica, Arial, sans-serif"
INK = "#1f2937"
MUTED = "#6b7280"
GRID = "#e5e7eb"
ACCENT = "#0f766e"  # the recommendation, in every chart
ACCENT_BAND = "rgba(15, 118, 110, 0.14)"  # a wide translucent line behind the recommended batch
SERIES = "#1e3a8a"  # the measured curve
LIMIT = "#b91c1c"  # limits the run was given
GUIDE = "#9ca3af"  # ideal lines and guides
# A quantity whose largest value is this many times its smallest is drawn on a log axis.
LOG_AXIS_SPAN = 30.0
# Marker symbols told apart at a glance, one per batch size (cycled beyond ten).
SYMBOLS = ("circle", "square", "diamond", "triangle-up", "pentagon", "star", "hexagon",
           "triangle-down", "cross", "x")


def wants_log(values: list[float]) -> bool:
    """True when positive values span more than :data:`LOG_AXIS_SPAN`."""
    positive = [x for x in values if x and x > 0]
    return len(positive) > 1 and max(positive) / min(positive) > LOG_AXIS_SPAN


def log_ticks(lo: float, hi: float, label: Any = None) -> dict[str, Any]:
    """Ticks at 1, 2, 5 × 10^k between ``lo`` and ``hi`` for a log axis spanning few decades.

    Plotly labels every digit of a short log axis (2, 3, 4, ... 9), which reads as noise.
    """
    if lo <= 0 or hi <= lo:
        return {}
    vals = [m * 10.0 ** k for k in range(math.floor(math.log10(lo)), math.ceil(math.log10(hi)) + 1)
            for m in (1, 2, 5) if lo <= m * 10.0 ** k <= hi]
    if len(vals) < 2:
        return {}
    text = [label(x) if label else f"{x:g}" for x in vals]
    return {"tickvals": vals, "ticktext": text}


def axis(title: str, *, log: bool = False, **extra: Any) -> dict[str, Any]:
    """One axis in the house style."""
    out: dict[str, Any] = {
        "title": {"text": title, "font": {"size": 12, "color": MUTED}},
        "type": "log" if log else "linear",
        "gridcolor": GRID,
        "zeroline": False,
        "linecolor": "#d1d5db",
        "ticks": "outside",
        "tickcolor": "#d1d5db",
        "automargin": True,
    }
    out.update(extra)
    return out


def batch_axis(batch_sizes: list[int], title: str = "batch size") -> dict[str, Any]:
    """A log-2 batch-size axis with a tick at every batch size swept."""
    sizes = sorted(set(batch_sizes))
    log = len(sizes) > 1 and sizes[-1] / max(sizes[0], 1) >= 4
    extra: dict[str, Any] = {"tickvals": sizes, "ticktext": [str(b) for b in sizes]}
    if log and sizes:
        extra["range"] = [math.log10(sizes[0]) - 0.12, math.log10(sizes[-1]) + 0.12]
    return axis(title, log=log, **extra)


def layout(height: int = 340, **extra: Any) -> dict[str, Any]:
    """A figure layout in the house style."""
    out: dict[str, Any] = {
        "height": height,
        "margin": {"l": 64, "r": 24, "t": 16, "b": 52},
        "font": {"family": FONT, "size": 12, "color": INK},
        "paper_bgcolor": "#ffffff",
        "plot_bgcolor": "#ffffff",
        "hoverlabel": {"font": {"family": FONT, "size": 12}, "align": "left"},
        "legend": {"orientation": "h", "y": -0.22, "x": 0, "font": {"size": 11}},
        "showlegend": True,
    }
    out.update(extra)
    return out


def vline(x: float, color: str, dash: str = "dot", width: float = 1.5) -> dict[str, Any]:
    """A vertical guide across the plot at data x."""
    return {"type": "line", "xref": "x", "yref": "paper", "x0": x, "x1": x, "y0": 0, "y1": 1,
            "line": {"color": color, "dash": dash, "width": width}, "layer": "below"}


def hline(y: float, color: str, dash: str = "dash", width: float = 1.5) -> dict[str, Any]:
    """A horizontal guide across the plot at data y."""
    return {"type": "line", "xref": "paper", "yref": "y", "x0": 0, "x1": 1, "y0": y, "y1": y,
            "line": {"color": color, "dash": dash, "width": width}, "layer": "below"}


def note(x: float | str, y: float | str, text: str, color: str = MUTED,
         **extra: Any) -> dict[str, Any]:
    """An annotation; ``x``/``y`` of ``"paper:<f>"`` are paper coordinates."""
    out: dict[str, Any] = {"text": text, "showarrow": False, "font": {"size": 11, "color": color},
                           "bgcolor": "rgba(255,255,255,0.85)"}
    for name, value in (("x", x), ("y", y)):
        if isinstance(value, str) and value.startswith("paper:"):
            out[name], out[name + "ref"] = float(value[6:]), "paper"
        else:
            out[name] = value
    out.update(extra)
    return out


def figure(data: list[dict[str, Any]], layout_: dict[str, Any]) -> Figure:
    """A Plotly figure as JSON: what ``Plotly.newPlot`` takes."""
    return {"data": data, "layout": layout_}

