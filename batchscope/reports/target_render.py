"""A batch curve predicted on a named GPU (``diagnose MODEL --target-gpu NAME``) rendered:
report.html, summary.md, the console summary and the explanation. Nothing in it was timed,
so every figure shown is called predicted. Pure functions of report.json ``target``
(:class:`~batchscope.records.target.TargetSection`); the model and GPU names are the
user's text and are escaped as the counters page escapes them.

Example:
    >>> page = render_html(report)  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from batchscope.records import Report
from batchscope.records.rounds import NEAR_BEST_SHARE
from batchscope.records.target import KernelTerm, PickRule, TargetBatch, TargetSection
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text, json_for_script, md_text
from batchscope.reports.page import environment, page_csp, plotly_js, static_text

TEMPLATE = "target.html.j2"
GIB = float(2**30)
# At most this many batch sizes are named in one sentence; the rest are counted.
LISTED = 8


def gib(value: float) -> str:
    """Bytes in GiB, as GPU memory is sold: ``"21.3 GiB"``; a whole number without decimals.

    Example:
        >>> gib(16 * 2**30), gib(22.87e9), gib(0.5 * 2**30)
        ('16 GiB', '21.3 GiB', '512 MiB')
    """
    shown = value / GIB
    if shown < 0.95:
        return f"{value / 2**20:.0f} MiB"
    return f"{shown:.0f} GiB" if abs(shown - round(shown)) < 0.05 else f"{shown:.1f} GiB"


def gpu_name(target: TargetSection) -> str:
    """The GPU as a reader names it: the datasheet's product ("A100 SXM4 80GB") after
    "NVIDIA", which the datasheets' names leave out."""
    name = target.gpu.strip()
    return name if name.lower().startswith("nvidia") else f"NVIDIA {name}"


def bound_of(b: TargetBatch) -> str:
    """What bounds the predicted step: "launch" where the host issues the ops no faster
    than the kernels run, else "memory" or "compute" by the larger of the kernels' two
    times ("latency" where the kernels whose fixed cost outweighs both take longer)."""
    if b.host_s >= b.device_s:
        return "launch"
    if b.latency_s > max(b.memory_s, b.compute_s):
        return "latency"
    return "memory" if b.memory_s >= b.compute_s else "compute"


def _sizes(batches: list[TargetBatch]) -> str:
    """"batch 1", "batches 1, 8 and 64", with a count past LISTED."""
    sizes = [str(b.batch_size) for b in batches]
    if len(sizes) == 1:
        return f"batch {sizes[0]}"
    if len(sizes) > LISTED:
        return f"batches {', '.join(sizes[:LISTED])} and {len(sizes) - LISTED} more"
    return f"batches {', '.join(sizes[:-1])} and {sizes[-1]}"


def _error_pct(log_error: float) -> str:
    """A median absolute log error as the factor it spans either way: 0.3 -> "×/÷ 1.35"."""
    return f"×/÷ {math.exp(log_error):.2f}"


def _term(term: KernelTerm) -> str:
    return f"{fmt.pct(term.efficiency)}, +{fmt.seconds(term.fixed_s)}"


def headline(target: TargetSection) -> str:
    """Where the curve was predicted, from which datasheet figures; nothing timed."""
    return (f"Predicted on {gpu_name(target)} in {target.dtype} (datasheet: "
            f"{fmt.si(target.peak_flops_per_s, 'FLOP/s')}, "
            f"{fmt.si(target.bandwidth_bytes_per_s, 'B/s')}, {gib(target.memory_bytes)}); "
            "nothing was timed on this machine.")


def pick_text(target: TargetSection) -> str:
    """The pick and its rule, or that no size fits."""
    if target.pick_rule == PickRule.NONE_FITS or target.pick is None:
        smallest = min(target.batches, key=lambda b: b.batch_size, default=None)
        if smallest is None:
            return "No pick: no batch size was predicted."
        return (f"No pick: no batch size asked fits in the {gib(target.memory_bytes)} of the "
                f"{gpu_name(target)} (the smallest asked, batch {smallest.batch_size}, needs a "
                f"predicted {gib(smallest.predicted_peak_memory_bytes)}).")
    picked = next((b for b in target.batches if b.batch_size == target.pick), None)
    rate = (f" at a predicted {fmt.rate(picked.predicted_throughput_per_s, target.unit)}"
            if picked else "")
    text = (f"Pick: batch {target.pick}{rate}, the smallest batch size that fits whose "
            f"predicted throughput is within {fmt.pct(NEAR_BEST_SHARE)} of the best predicted")
    best = next((b for b in target.batches if b.batch_size == target.best_batch_size), None)
    if best is not None and best.batch_size != target.pick:
        text += (f" (batch {best.batch_size}, "
                 f"{fmt.rate(best.predicted_throughput_per_s, target.unit)})")
    return text + "."


def shape_text(target: TargetSection) -> str:
    """B* and the knee of the predicted step times."""
    if target.critical_batch is None:
        bstar = ("B*: none, the step never turns compute-bound on this GPU (its predicted "
                 "bytes over the bandwidth outlast its FLOPs over the peak at every size).")
    else:
        bstar = (f"B* ≈ {fmt.number(target.critical_batch)}: where the step's FLOPs over the "
                 "datasheet's peak meet its bytes over its bandwidth (predicted; the counts "
                 "are exact).")
    if target.knee_batch is None:
        knee = "The predicted step times show no knee: they stay flat across the sizes asked."
    elif target.knee_within:
        knee = ("The predicted step times bend at a knee near batch "
                f"{fmt.number(target.knee_batch)}.")
    else:
        largest = max(b.batch_size for b in target.batches)
        knee = (f"The knee of the predicted step times is beyond the largest size asked "
                f"({largest}; the fit puts it near {fmt.number(target.knee_batch)}).")
    return f"{bstar} {knee}"


def memory_text(target: TargetSection) -> str:
    """The sizes that do not fit, each with its predicted need; "" when all fit."""
    out = [f"batch {b.batch_size} needs a predicted {gib(b.predicted_peak_memory_bytes)} of "
           f"the GPU's {gib(target.memory_bytes)}: does not fit"
           for b in target.batches if not b.fits]
    if not out:
        return ""
    shown = out[:LISTED] + ([f"and {len(out) - LISTED} larger sizes neither"]
                            if len(out) > LISTED else [])
    text = "; ".join(shown)
    return (text[0].upper() + text[1:] + f" (each need counts "
            f"{gib(target.reserved_bytes)} the GPU holds besides the step's tensors: the CUDA "
            "context and library workspaces).")


def bound_text(target: TargetSection) -> str:
    """Which sizes are launch-bound, which memory- and which compute-bound."""
    groups: dict[str, list[TargetBatch]] = {"launch": [], "memory": [], "compute": [],
                                            "latency": []}
    for b in target.batches:
        groups[bound_of(b)].append(b)
    parts: list[str] = []
    host = groups["launch"]
    if host:
        ops = sorted({b.launched_ops for b in host})
        count = str(ops[0]) if len(ops) == 1 else f"{ops[0]}–{ops[-1]}"
        first = host[0]
        parts.append(f"{_sizes(host).capitalize()}: launch-bound, the host issues its {count} "
                     f"ops slower than the GPU runs them (at batch {first.batch_size}: "
                     f"predicted host {fmt.seconds(first.host_s)} against kernels "
                     f"{fmt.seconds(first.device_s)}).")
    for kind in ("memory", "compute"):
        group = groups[kind]
        if group:
            parts.append(f"{_sizes(group).capitalize()}: {kind}-bound (the kernels' predicted "
                         f"{kind} time is the larger, and outlasts the host's).")
    if groups["latency"]:
        parts.append(f"{_sizes(groups['latency']).capitalize()}: latency-bound (most of the "
                     "kernels' predicted time is their fixed cost per launch, and it outlasts "
                     "the host's).")
    return " ".join(parts)


def terms_text(target: TargetSection) -> str:
    """The performance model's terms in one sentence, with where they come from."""
    t = target.terms
    traces = t.traces
    names = ", ".join(traces[:LISTED]) + (f" and {len(traces) - LISTED} more"
                                          if len(traces) > LISTED else "")
    calibrated = (f"calibrated on {len(traces)} real GPU trace{'s' if len(traces) != 1 else ''}"
                  f" ({names})" if traces else "calibrated on real GPU traces")
    # fp32 GEMMs run on the plain FP32 units where the GPU gives no TF32 peak to use.
    fp32 = f"; on the FP32 units {_term(t.gemm_fp32)}" if target.dtype == "float32" else ""
    spread = max(t.gemm.median_abs_log_error, t.gemm_fp32.median_abs_log_error,
                 t.other.median_abs_log_error)
    memory = (f"; their memory side {fmt.pct(t.gemm_memory.efficiency)}, from "
              f"{t.gemm_memory.ops} Nsight Compute kernel{'s' if t.gemm_memory.ops != 1 else ''} "
              f"({', '.join(t.ncu_exports)})" if t.gemm_memory is not None else "")
    host = ("no host cost per op (each step replayed as one CUDA graph, --cuda-graphs)"
            if target.cuda_graphs else
            f"the host {fmt.seconds(t.host_s_per_op)} an op ({fmt.seconds(t.host_low_s_per_op)}"
            f"–{fmt.seconds(t.host_high_s_per_op)})")
    if target.fused:
        host += ("; each run of non-GEMM ops between two GEMMs fused into one kernel "
                 "(--fused: one fixed cost, every op's bytes)")
    band = ("the kernels' variable part at their median error" if target.cuda_graphs else
            "the host's range and the kernels' variable part at their median error")
    return (f"Model: each kernel max(FLOPs/peak, bytes/bandwidth) / efficiency + a fixed cost "
            f"(GEMMs {_term(t.gemm)}{memory}{fp32}; other ops {_term(t.other)}), {host}; "
            f"{calibrated}. The band is {band} ({_error_pct(spread)}, the "
            "largest of the families').")


def paragraphs(target: TargetSection) -> list[str]:
    """The verdict, in order: what was predicted where, the pick, B* and the knee, memory,
    the bounds, the model's terms."""
    out = [headline(target), pick_text(target)]
    if target.batches:
        out += [shape_text(target), memory_text(target), bound_text(target)]
    out.append(terms_text(target))
    return [p for p in out if p]


# -- the table ------------------------------------------------------------------------------
@dataclass(frozen=True)
class BatchRow:
    """One batch size as the tables show it; every figure predicted."""

    batch: int
    step: str
    band: str
    throughput: str
    memory: str
    fits: str
    host: str
    kernels: str
    bound: str
    picked: bool


def batch_rows(target: TargetSection) -> list[BatchRow]:
    return [BatchRow(
        batch=b.batch_size, step=fmt.seconds(b.predicted_step_s),
        band=f"{fmt.seconds(b.low_s)}–{fmt.seconds(b.high_s)}",
        throughput=fmt.rate(b.predicted_throughput_per_s, target.unit),
        memory=gib(b.predicted_peak_memory_bytes), fits="yes" if b.fits else "no",
        host=fmt.seconds(b.host_s), kernels=fmt.seconds(b.device_s), bound=bound_of(b),
        picked=b.batch_size == target.pick,
    ) for b in sorted(target.batches, key=lambda b: b.batch_size)]


# -- the chart ------------------------------------------------------------------------------
def throughput_chart(target: TargetSection) -> st.Figure | None:
    """Predicted throughput against batch size with its band (batch / high_s to batch /
    low_s), the sizes that do not fit marked, the pick starred; None without sizes."""
    batches = sorted(target.batches, key=lambda b: b.batch_size)
    if not batches:
        return None
    unit = chart_text(target.unit)
    xs = [b.batch_size for b in batches]
    ys = [b.predicted_throughput_per_s for b in batches]
    lows = [b.batch_size / b.high_s if b.high_s > 0 else y for b, y in zip(batches, ys)]
    highs = [b.batch_size / b.low_s if b.low_s > 0 else y for b, y in zip(batches, ys)]
    data: list[dict[str, Any]] = [
        {"type": "scatter", "mode": "lines", "name": "band (high)", "x": xs, "y": highs,
         "line": {"width": 0}, "showlegend": False, "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines", "name": "predicted band", "x": xs, "y": lows,
         "line": {"width": 0}, "fill": "tonexty", "fillcolor": st.ACCENT_BAND,
         "hoverinfo": "skip"},
        {"type": "scatter", "mode": "lines+markers", "name": f"predicted {unit}s/s",
         "x": xs, "y": ys, "line": {"color": st.SERIES, "width": 2.5},
         "marker": {"size": 8, "color": st.SERIES},
         "hovertemplate": f"batch %{{x}}<br>predicted %{{y:,.4~s}} {unit}s/s<extra></extra>"},
    ]
    unfit = [b for b in batches if not b.fits]
    if unfit:
        data.append({"type": "scatter", "mode": "markers", "name": "does not fit",
                     "x": [b.batch_size for b in unfit],
                     "y": [b.predicted_throughput_per_s for b in unfit],
                     "marker": {"size": 12, "symbol": "x", "color": st.LIMIT},
                     "hovertemplate": "batch %{x} does not fit<extra></extra>"})
    picked = next((b for b in batches if b.batch_size == target.pick), None)
    if picked is not None:
        data.append({"type": "scatter", "mode": "markers", "name": "pick",
                     "x": [picked.batch_size], "y": [picked.predicted_throughput_per_s],
                     "marker": {"size": 16, "symbol": "star", "color": st.ACCENT,
                                "line": {"color": "#ffffff", "width": 1}},
                     "hovertemplate": "pick: batch %{x}<extra></extra>"})
    log = st.wants_log(ys)
    top = max(highs + ys)
    yaxis = (st.axis(f"predicted {unit}s/s (log)", log=True, tickformat="~s")
             if log else st.axis(f"predicted {unit}s/s", tickformat="~s",
                                 range=[0.0, top * 1.15]))
    lay = st.layout(360, xaxis=st.batch_axis(xs), yaxis=yaxis, hovermode="closest")
    return st.figure(data, lay)


# -- the four outputs -----------------------------------------------------------------------
def title(report: Report) -> str:
    """``<target> on <gpu> (predicted)``: the user's text, unescaped (each output escapes)."""
    target = report.target
    assert target is not None
    return f"{v.target(report)} on {gpu_name(target)} (predicted)"


def render_html(report: Report) -> str:
    """report.html of a target prediction: self-contained and offline, like a sweep's."""
    from batchscope.reports.json_report import document

    target = report.target
    assert target is not None
    page_js = static_text("report.js")
    fig = throughput_chart(target)
    figs = {"throughput": fig} if fig else {}
    return environment().get_template(TEMPLATE).render(
        target=v.target(report), gpu=gpu_name(target), dtype=target.dtype, unit=target.unit,
        sizes=len(target.batches), paragraphs=paragraphs(target), rows=batch_rows(target),
        charts={"throughput": "Predicted throughput"} if fig else {},
        css=static_text("report.css"), page_js=page_js, plotly_js=plotly_js(),
        figures_json=json_for_script(figs),
        report_json=json_for_script(document(report)),
        csp=page_csp(page_js))


def render_summary(report: Report) -> str:
    """summary.md of a target prediction: the verdict and the predicted table."""
    target = report.target
    assert target is not None
    lines = [f"### batchscope · {md_text(v.target(report), 200)} on "
             f"{md_text(gpu_name(target), 120)} (predicted)", ""]
    lines += [md_text(p, 1500) + "\n" for p in paragraphs(target)]
    unit = md_text(target.unit, 40)
    lines += [f"| batch | predicted step (low–high) | predicted {unit}s/s | predicted peak "
              "memory | fits | host | kernels | bound |",
              "|---|---|---|---|---|---|---|---|"]
    # The figure as fmt writes it, the user's unit escaped apart (a cell is not a line
    # start: "1.07 k" needs no list escape).
    rates = {b.batch_size: f"{fmt.si(b.predicted_throughput_per_s)} {unit}s/s"
             for b in target.batches}
    lines += [f"| {'**' + str(r.batch) + '**' if r.picked else r.batch} | {r.step} "
              f"({r.band}) | {rates[r.batch]} | {r.memory} | {r.fits} | {r.host} | "
              f"{r.kernels} | {r.bound} |" for r in batch_rows(target)]
    return "\n".join(lines) + "\n"


def print_summary(console: Console, report: Report) -> None:
    """The console summary of a target prediction."""
    target = report.target
    assert target is not None
    for p in paragraphs(target):
        console.print(p, markup=False, highlight=False)
    table = Table(title=Text(title(report)), title_justify="left", box=box.SIMPLE_HEAD)
    for column in ("batch", "step (low–high)", f"{target.unit}s/s", "peak mem", "fits",
                   "host", "kernels", "bound"):
        table.add_column(Text(column), no_wrap=True)
    for r in batch_rows(target):
        table.add_row(Text(f"{r.batch}{' *' if r.picked else ''}"), f"{r.step} ({r.band})",
                      Text(r.throughput), r.memory, r.fits, r.host, r.kernels, r.bound)
    console.print(table)
