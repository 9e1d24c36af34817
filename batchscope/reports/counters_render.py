"""A report of Nsight Compute counters (``diagnose ncu``) rendered: the kernels on a
roofline with their measured bytes and FLOPs, as report.html, summary.md and the console
summary. Pure functions of report.json ``counters``
(:class:`~batchscope.records.counter_report.CountersSection`).

Example:
    >>> page = render_html(diagnose_ncu(["ncu.csv"]))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from batchscope.records import Bound, Report
from batchscope.records.counter_report import (
    ComputeRoof,
    CounterKernel,
    CounterRoofs,
    CountersSection,
    RoofSource,
)
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.escape import chart_text, json_for_script, md_text
from batchscope.reports.flag_text import ncu_note_text
from batchscope.reports.page import environment, page_csp, plotly_js, static_text

TEMPLATE = "counters.html.j2"
# A kernel's name in tables: its first characters (ncu's demangled names run to hundreds).
NAME_CHARS = 72
# The bounds in the order the headline counts them.
BOUND_ORDER = (Bound.MEMORY, Bound.COMPUTE, Bound.OVERHEAD, Bound.UNCOUNTED)
BOUND_WORDS = {Bound.MEMORY: "memory-bound", Bound.COMPUTE: "compute-bound",
               Bound.OVERHEAD: "latency-bound", Bound.UNCOUNTED: "not placed"}
# The memory levels a hierarchical roofline draws, with their marker.
LEVEL_SYMBOLS = {"DRAM": "circle", "L2": "square", "L1": "diamond"}


def short_name(name: str, limit: int = NAME_CHARS) -> str:
    """A kernel's name cut for a table cell: ``void`` dropped, at most ``limit`` characters.

    Example:
        >>> short_name("void vectorized_elementwise_kernel<4, BinaryFunctor<float>>(int)", 30)
        'vectorized_elementwise_kerne…'
    """
    text = name[5:] if name.startswith("void ") else name
    return text if len(text) <= limit else text[: limit - 1] + "…"


def section(report: Report) -> CountersSection | None:
    return report.counters


def headline(counters: CountersSection) -> str:
    """The launches by bound, with the share of their time each bound holds.

    Example:
        >>> from batchscope.records.counter_report import CounterKernel
        >>> k = [CounterKernel("0", "1", "a", 3e-6, 1e6, 0.0, bound=Bound.MEMORY),
        ...      CounterKernel("1", "1", "b", 1e-6, 1e3, 0.0, bound=Bound.OVERHEAD)]
        >>> headline(CountersSection(["x.csv"], k, None))  # doctest: +NORMALIZE_WHITESPACE
        '2 kernel launches measured by Nsight Compute: 1 memory-bound (75% of their time),
        1 latency-bound (25%).'
    """
    kernels = counters.kernels
    total_s = sum(k.duration_s or 0.0 for k in kernels)
    parts: list[str] = []
    for bound in BOUND_ORDER:
        group = [k for k in kernels if k.bound == bound]
        if not group:
            continue
        share = sum(k.duration_s or 0.0 for k in group) / total_s if total_s else None
        words = f"{len(group)} {BOUND_WORDS[bound]}"
        if share is not None:
            words += f" ({fmt.pct(share)} of their time)" if not parts else f" ({fmt.pct(share)})"
        parts.append(words)
    launches = "kernel launch" if len(kernels) == 1 else "kernel launches"
    text = f"{len(kernels)} {launches} measured by Nsight Compute"
    return text + (": " + ", ".join(parts) + "." if parts else ".")


def roofs_text(counters: CountersSection) -> str:
    """Whose roofs the kernels are placed under, with their figures, and what that misses."""
    roofs = counters.roofs
    if roofs is None:
        return ("No roofs: the exports hold no roofline section and no --gpu was named, so "
                "no kernel is classified; the measured bytes and FLOPs stand.")
    figures = [f"DRAM {fmt.si(roofs.dram_bytes_per_s, 'B/s')}" if roofs.dram_bytes_per_s
               else "", f"FP32 {fmt.si(roofs.fp32_flops_per_s, 'FLOP/s')}"
               if roofs.fp32_flops_per_s else "",
               f"{roofs.tensor_dtype} tensor {fmt.si(roofs.tensor_flops_per_s, 'FLOP/s')}"
               if roofs.tensor_flops_per_s else ""]
    listed = ", ".join(f for f in figures if f)
    if roofs.source == RoofSource.DATASHEET:
        text = (f"Roofs from the {roofs.product} datasheet (dense, at boost clock; never "
                f"measured here): {listed}.")
    else:
        text = (f"Roofs from the exports' own roofline section (at the clocks ncu measured): "
                f"{listed}.")
        tensor = [k for k in counters.kernels if k.compute_roof == ComputeRoof.TENSOR]
        if tensor and roofs.tensor_flops_per_s is None:
            text += (f" It has no tensor-core roof, so the {len(tensor)} kernels that ran on "
                     "the tensor pipe are set against the FP32 rate, which calls them "
                     "compute-bound too early: name the GPU with --gpu to use its datasheet's "
                     "tensor roof.")
    text += (f" A kernel whose roofs' time is under the GPU's kernel floor, "
             f"{fmt.seconds(roofs.floor_s)} (the shortest launch profiled where there are ten "
             "or more, else a near-empty kernel's 2 µs), with that floor at least half its "
             "duration, is latency-bound.")
    return text


def settings_text(counters: CountersSection) -> str:
    """ncu's cache and clock control, where known, and what its defaults do to a kernel."""
    if counters.cache_control is None and counters.clock_control is None:
        return ("The exports do not say how ncu ran: by default it flushes every cache before "
                "each kernel (inputs come from DRAM even where a real step would find them in "
                "L2) and locks the clocks to base, so DRAM bytes may be above and rates below "
                "what the same kernel does inside a step.")
    return (f"ncu ran with --cache-control {counters.cache_control or 'all'} and "
            f"--clock-control {counters.clock_control or 'base'}.")


@dataclass(frozen=True)
class KernelRow:
    """One launch as the tables show it."""

    launch: str
    name: str
    full_name: str
    duration: str
    dram: str
    flops: str
    intensity: str
    achieved_flops: str
    achieved_bytes: str
    efficiency: str
    roof: str
    bound: str
    sol: str


def kernel_rows(counters: CountersSection) -> list[KernelRow]:
    """Every launch, in the exports' order."""
    return [KernelRow(
        launch=k.launch_id if len({x.process_id for x in counters.kernels}) == 1
        else f"{k.process_id}:{k.launch_id}",
        name=short_name(k.name), full_name=k.name,
        duration=fmt.seconds(k.duration_s),
        dram=fmt.si(k.dram_bytes, "B") if k.dram_bytes is not None else "n/a",
        flops=(fmt.si(k.flops, "FLOP") + ("" if k.flops_complete else " (at least)"))
        if k.flops is not None else "n/a",
        intensity=f"{k.intensity:.3g}" if k.intensity is not None else "n/a",
        achieved_flops=fmt.si(k.achieved_flops_per_s, "FLOP/s")
        if k.achieved_flops_per_s is not None else "n/a",
        achieved_bytes=fmt.si(k.achieved_dram_bytes_per_s, "B/s")
        if k.achieved_dram_bytes_per_s is not None else "n/a",
        efficiency=fmt.pct(k.efficiency) if k.efficiency is not None else "n/a",
        roof=k.compute_roof.value,
        bound=k.bound.value,
        sol=(f"SM {fmt.pct(k.sm_throughput_share)}, DRAM {fmt.pct(k.dram_throughput_share)}"
             if k.sm_throughput_share is not None and k.dram_throughput_share is not None
             else "n/a"),
    ) for k in counters.kernels]


@dataclass(frozen=True)
class OpRow:
    """One op of a trace joined to its kernels' counters, as the table shows it."""

    op: str
    matched: str
    dram: str
    modelled_dram: str
    flops: str
    modelled_flops: str
    bound: str
    modelled_bound: str
    disagrees: bool


def op_rows(counters: CountersSection) -> list[OpRow]:
    """The joined ops, the most measured DRAM bytes first."""
    ops = sorted(counters.ops, key=lambda o: -(o.dram_bytes or 0.0))
    return [OpRow(
        op=o.name, matched=f"{o.matched} of {o.launches}",
        dram=fmt.si(o.dram_bytes, "B") if o.dram_bytes is not None else "n/a",
        modelled_dram=fmt.si(o.modelled_bytes, "B") if o.modelled_bytes is not None else "n/a",
        flops=(fmt.si(o.flops, "FLOP") + ("" if o.flops_complete else " (at least)"))
        if o.flops is not None else "n/a",
        modelled_flops=fmt.si(o.modelled_flops, "FLOP")
        if o.modelled_flops is not None else "uncounted",
        bound=o.bound.value, modelled_bound=o.modelled_bound.value, disagrees=o.disagrees,
    ) for o in ops]


def ops_text(counters: CountersSection) -> str:
    """The join in one sentence: how many ops got measured kernels, and where the measured
    intensity disagrees with the model; "" without a join."""
    if not counters.ops:
        return ""
    disagree = [o for o in counters.ops if o.disagrees]
    text = (f"{len(counters.ops)} ops of the trace were joined to the profiled launches of "
            f"their kernels (by name and launch order)")
    if not disagree:
        return text + "; each sits on the same side of its roof's ridge measured as modelled."
    names = ", ".join(o.name for o in disagree[:5]) + (" …" if len(disagree) > 5 else "")
    return (text + f"; {len(disagree)} sit on the other side of the ridge measured ({names}): "
            "the model's bytes or FLOPs are wrong for their kernels.")


def page_section(counters: CountersSection | None) -> dict[str, Any] | None:
    """What report.html's counters section shows (a sweep with --ncu, a trace with --ncu)."""
    if counters is None:
        return None
    rows = kernel_rows(counters)
    batches = [k.batch_size for k in counters.kernels]
    return {
        "paragraphs": [p for p in (*paragraphs(counters), ops_text(counters)) if p],
        "op_rows": op_rows(counters),
        "kernel_rows": [dict(r.__dict__, batch=b if b is not None else "")
                        for r, b in zip(rows, batches)],
        "batched": any(b is not None for b in batches),
    }


# What the figures rest on: the counts are exact, each duration one timing.
NOISE_TEXT = ("The bytes and FLOPs are counted, exact; each duration is one launch timed once "
              "by ncu, with no interval, so an efficiency or a bound near the ridge or the "
              "floor is within the noise of that one timing.")


def paragraphs(counters: CountersSection) -> list[str]:
    """The page's verdict, in order."""
    out = [headline(counters), roofs_text(counters), settings_text(counters), NOISE_TEXT]
    if counters.notes:
        out.append(f"The reader set {len(counters.notes)} figures aside; they are listed at "
                   "the end.")
    return out


# -- the roofline ---------------------------------------------------------------------------
def _placed(kernels: list[CounterKernel]) -> list[tuple[CounterKernel, str, float, float]]:
    """(kernel, level, intensity, attained FLOP/s) of every kernel point a log-log chart
    can draw, at each memory level recorded."""
    points = []
    for k in kernels:
        if not k.flops or not k.duration_s:
            continue
        rate = k.flops / k.duration_s
        for level, intensity in (("DRAM", k.intensity), ("L2", k.l2_intensity),
                                 ("L1", k.l1_intensity)):
            if intensity:
                points.append((k, level, intensity, rate))
    return points


def _roof_line(name: str, peak: float, bandwidth: float, x_lo: float, x_hi: float,
               color: str, dash: str) -> dict[str, Any]:
    ridge = peak / bandwidth
    xs = [x_lo, min(max(ridge, x_lo), x_hi), x_hi]
    return {"type": "scatter", "mode": "lines", "name": chart_text(name),
            "x": xs, "y": [min(peak, x * bandwidth) for x in xs],
            "line": {"color": color, "dash": dash, "width": 2}, "hoverinfo": "skip"}


def roofline(counters: CountersSection) -> st.Figure | None:
    """Every kernel with FLOPs at its measured intensity and attained FLOP/s, at each memory
    level recorded (a hierarchical roofline), under the DRAM roof and the compute roofs;
    None without roofs or placeable kernels."""
    roofs: CounterRoofs | None = counters.roofs
    points = _placed(counters.kernels)
    if roofs is None or not roofs.dram_bytes_per_s or not points:
        return None
    bw = roofs.dram_bytes_per_s
    peaks = [(f"FP32 {fmt.si(roofs.fp32_flops_per_s, 'FLOP/s')}", roofs.fp32_flops_per_s,
              st.MUTED, "dash"),
             (f"{roofs.tensor_dtype} tensor {fmt.si(roofs.tensor_flops_per_s, 'FLOP/s')}",
              roofs.tensor_flops_per_s, st.INK, "solid")]
    peaks = [(n, p, c, d) for n, p, c, d in peaks if p]
    xs = [x for _, _, x, _ in points] + [p / bw for _, p, _, _ in peaks if p]
    ys = [y for _, _, _, y in points] + [p for _, p, _, _ in peaks if p]
    x_lo = 10 ** (math.floor(math.log10(min(xs))) - 0.35)
    x_hi = 10 ** (math.ceil(math.log10(max(xs))) + 0.35)
    data = [_roof_line(name, peak, bw, x_lo, x_hi, color, dash)
            for name, peak, color, dash in peaks if peak]
    for bound in BOUND_ORDER:
        for level, symbol in LEVEL_SYMBOLS.items():
            group = [p for p in points if p[0].bound == bound and p[1] == level]
            if not group:
                continue
            data.append({
                "type": "scatter", "mode": "markers",
                "name": chart_text(f"{bound.value} ({level})"),
                "x": [p[2] for p in group], "y": [p[3] for p in group],
                "marker": {"color": v.BOUND_COLORS.get(bound.value, st.MUTED), "size": 10,
                           "symbol": symbol, "line": {"color": "#ffffff", "width": 1}},
                "text": [chart_text(f"{short_name(p[0].name, 60)}<br>{level}: "
                                    f"{p[2]:.3g} FLOP/byte, {fmt.si(p[3], 'FLOP/s')}, "
                                    f"{fmt.seconds(p[0].duration_s)}") for p in group],
                "hoverinfo": "text",
            })
    y_lo = 10 ** (math.log10(min([*ys, x_lo * bw])) - 0.35)
    y_hi = 10 ** (math.log10(max(ys)) + 0.35)
    lay = st.layout(
        520,
        xaxis=st.axis("arithmetic intensity (FLOP/byte, log)", log=True,
                      range=[math.log10(x_lo), math.log10(x_hi)], exponentformat="power"),
        yaxis=st.axis("attained FLOP/s (log)", log=True, tickformat="~s",
                      range=[math.log10(y_lo), math.log10(y_hi)]),
        legend={"orientation": "v", "x": 1.01, "y": 1, "font": {"size": 11}},
        margin={"l": 70, "r": 170, "t": 16, "b": 56}, hovermode="closest")
    return st.figure(data, lay)


# -- the three outputs ----------------------------------------------------------------------
def render_html(report: Report) -> str:
    """report.html of a counters report: self-contained and offline, like a sweep's."""
    from batchscope.reports.json_report import document

    counters = report.counters
    assert counters is not None
    page_js = static_text("report.js")
    fig = roofline(counters)
    figs = {"roofline": fig} if fig else {}
    return environment().get_template(TEMPLATE).render(
        target=v.target(report), device=report.model.device,
        launches=len(counters.kernels), files=counters.files,
        paragraphs=paragraphs(counters), rows=kernel_rows(counters),
        notes=[ncu_note_text(n) for n in counters.notes],
        charts={"roofline": "Measured kernels on the roofline"} if fig else {},
        css=static_text("report.css"), page_js=page_js, plotly_js=plotly_js(),
        figures_json=json_for_script(figs),
        report_json=json_for_script(document(report)),
        csp=page_csp(page_js))


def render_summary(report: Report) -> str:
    """summary.md of a counters report: the verdict and the kernels' table."""
    counters = report.counters
    assert counters is not None
    lines = [f"### batchscope · {md_text(v.target(report), 200)}", ""]
    lines += [md_text(p, 1500) + "\n" for p in paragraphs(counters)]
    lines += ["| # | kernel | duration | DRAM bytes | FLOPs | FLOP/byte | FLOP/s | DRAM B/s | "
              "of roof | bound |", "|---|---|---|---|---|---|---|---|---|---|"]
    lines += [f"| {md_text(r.launch, 20)} | {md_text(r.name, NAME_CHARS)} | {r.duration} | "
              f"{r.dram} | {r.flops} | {r.intensity} | {r.achieved_flops} | "
              f"{r.achieved_bytes} | {r.efficiency} | {r.bound} |"
              for r in kernel_rows(counters)]
    if counters.notes:
        lines += ["", "Set aside by the reader:", ""]
        lines += [f"- {md_text(ncu_note_text(n), 400)}" for n in counters.notes[:20]]
        if len(counters.notes) > 20:
            lines.append(f"- … and {len(counters.notes) - 20} more (report.json)")
    return "\n".join(lines) + "\n"


def print_summary(console: Console, report: Report) -> None:
    """The console summary of a counters report."""
    counters = report.counters
    assert counters is not None
    for p in paragraphs(counters):
        console.print(p, markup=False, highlight=False)
    table = Table(box=box.SIMPLE_HEAD)
    table.add_column("kernel", no_wrap=True, overflow="ellipsis", max_width=28)
    for column in ("duration", "DRAM", "FLOPs", "FLOP/B", "of roof", "bound"):
        table.add_column(column, no_wrap=True)
    for r in kernel_rows(counters):
        # Text, not markup: ncu's names hold "[lambda() (instance 1)]".
        table.add_row(Text(short_name(r.full_name, 28)), r.duration, r.dram, r.flops,
                      r.intensity, r.efficiency, r.bound)
    console.print(table)
