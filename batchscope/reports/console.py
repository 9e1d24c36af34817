"""Terminal output: a progress bar while the sweep runs, a summary table at the end.

Numbers go through :mod:`batchscope.reports.fmt` and the explanation is the text report.json
holds, so the terminal reads like report.html and summary.md (decimal bytes included).
"""

from __future__ import annotations

import os
import signal
from types import TracebackType
from typing import Any

from rich import box
from rich.console import Console, ConsoleDimensions
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    SpinnerColumn,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.table import Table

from batchscope.classifiers.roofline import roof_flags
from batchscope.errors import ExitCode
from batchscope.hardware.types import Ceilings
from batchscope.profiler.supervisor import Callbacks
from batchscope.records import (
    BatchResult,
    Interval,
    LatencyStats,
    ModelInfo,
    PeakMemoryMethod,
    Recommendation,
    Report,
    Status,
)
from batchscope.records.evidence import Grade
from batchscope.reports import fmt, html_rows, narrative
from batchscope.reports import view as v
from batchscope.reports.flag_text import evidence_headline, flag_text, rule_text, stop_text

# How the evidence line looks in a terminal: its grade at a glance.
EVIDENCE_STYLE = {Grade.GOOD: "green", Grade.NOISY: "bold yellow", Grade.UNRELIABLE: "bold red"}

# Where output goes to a file or a pipe (a CI log) there is no terminal to fit: rich would
# lay it out for 80 columns and cut table cells to "1…". It is laid out this wide instead, so
# every table keeps its cells whole and a paragraph stays one line (COLUMNS still wins).
PIPED_WIDTH = 1000


class ReportConsole(Console):
    """A rich console that uses the full width of its text when it writes to no terminal:
    a file, a pipe, a CI log (``COLUMNS`` set in the environment still decides)."""

    def _size(self) -> ConsoleDimensions:
        size: ConsoleDimensions = Console.size.fget(self)  # type: ignore[attr-defined]
        if (self._width is None and not self.is_terminal
                and not os.environ.get("COLUMNS", "").isdigit()):
            return ConsoleDimensions(PIPED_WIDTH, size.height)
        return size

    size = property(_size, Console.size.fset)  # type: ignore[attr-defined]


def make_console(*, stderr: bool = False) -> Console:
    """The CLI's console for stdout (or stderr): :class:`ReportConsole`, no highlighting."""
    return ReportConsole(stderr=stderr, highlight=False)


def _exit_now(signum: int, frame: object) -> None:
    os._exit(int(ExitCode.INTERRUPTED))


class ProgressCallbacks(Callbacks):
    """A rich progress bar, one step per batch size, on the given (stderr) console."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress = Progress(
            SpinnerColumn(), TextColumn("{task.description}"), BarColumn(),
            TextColumn("{task.completed}/{task.total} batch sizes"), TimeElapsedColumn(),
            console=console, transient=True,
        )
        self.task = TaskID(0)  # the one task, added on __enter__
        self.unit = "sample"

    def __enter__(self) -> ProgressCallbacks:
        self.progress.__enter__()
        self.task = self.progress.add_task("starting the worker", total=None)
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.progress.__exit__(exc_type, exc, tb)

    def on_ready(self, model: ModelInfo) -> None:
        self.unit = model.unit
        self.progress.update(self.task, description=escape(
            f"{model.target}: {model.parameters or 0:,} parameters on "
            f"{model.device}, measuring ceilings"))

    def on_interrupt(self) -> None:
        """A second Ctrl-C while the partial report is written exits at once."""
        signal.signal(signal.SIGINT, _exit_now)
        signal.signal(signal.SIGTERM, _exit_now)
        self.console.print("interrupted: writing the partial report (Ctrl-C again to quit now)")

    def on_ceilings(self, ceilings: Ceilings) -> None:
        self.progress.update(self.task, description="ceilings ready")

    def on_phase(self, batch_size: int, phase: str) -> None:
        self.progress.update(self.task, description=f"batch {batch_size}: {phase}")

    def on_result(self, result: BatchResult, results: list[BatchResult]) -> None:
        self.progress.advance(self.task)
        thr = fmt.rate(result.throughput_per_s, self.unit) if result.throughput_per_s else ""
        self.console.print(escape(
            f"  batch {result.batch_size:>5}: {result.status.value:<11} {thr}"))


def _latency_cells(batch: BatchResult) -> tuple[str, str]:
    """The median with its 95% interval, and the p25-p75 range in the median's unit."""
    lat: LatencyStats | None = batch.latency_s
    if lat is None:
        return fmt.MISSING, fmt.MISSING
    # p25-p75 as an interval's two ends, in the median's unit; "–" where one end is NaN
    spread = fmt.seconds_parts(lat.median, Interval(lat.p25, lat.p75)).interval
    return v.latency_text(batch), spread or fmt.MISSING


def _failure_lines(console: Console, report: Report) -> None:
    """Why each batch size failed, in full, under the table: a table cell would cut the
    error to its column's width, and the sentence that names the cause is often its end."""
    for b in report.batches:
        why = v.failure_text(b) if b.status != Status.OK else ""
        if not why:
            continue
        first, *rest = why.splitlines()
        console.print(escape(f"batch {v.size_label(report, b.batch_size)} "
                             f"({b.status.value}): {first}"), overflow="fold")
        for line in rest:  # the user's frames, indented under their error
            console.print(escape(f"    {line}"), overflow="fold")


def _recommendation_lines(console: Console, report: Report, rec: Recommendation) -> None:
    """The pick, its rule, the speedup, the parallel headline and the explanation."""
    unit = v.unit(report)
    console.print(escape(f"* recommended batch size: {rec.batch_size} "
                         f"({rule_text(rec.rule, unit)})"))
    speedup = narrative.speedup_band(rec)
    if v.speedup_within_noise(rec):
        speedup += ": within noise"
    elif v.speedup_is_loss(rec):
        speedup += ": a loss beyond noise"
    console.print(escape(f"speedup from batching: {speedup}"))
    if len(rec.equivalent_batch_sizes) > 1:
        console.print(escape("equivalent within noise: batch sizes "
                             + ", ".join(str(b) for b in rec.equivalent_batch_sizes)))
    parallel = (narrative.data_parallel_headline(report)
                or narrative.accumulation_headline(report))
    if parallel:
        console.print(escape(parallel))
    console.print()
    console.print(escape(narrative.explanation(report)))
    console.print()


def print_summary(console: Console, report: Report) -> None:
    """The short table at the end: batch, latency, throughput, memory, status; then the
    pick, the explanation and why the sweep stopped.

    Example:
        >>> print_summary(Console(), load_report("report.json"))  # doctest: +SKIP
    """
    unit = v.unit(report)
    rec = report.recommendation
    evidence = evidence_headline(report.evidence)
    if evidence:  # first: the report speaks with the confidence its evidence allows
        style = EVIDENCE_STYLE[report.evidence.grade] if report.evidence else ""
        console.print(f"[{style}]{escape(evidence)}[/]" if style else escape(evidence))
    title = "batchscope trace" if v.from_trace(report) else "batchscope sweep"
    table = Table(title=title, title_justify="left", padding=(0, 1))
    # Latency and throughput with their 95% intervals (fmt's *_band: "686 k (629–748 k)");
    # the p25-p75 spread only for a report written before intervals (summary.md and
    # report.html keep both), so the table fits a terminal of 80 columns.
    spread_column = not any(b.latency_interval_s for b in report.batches)
    columns = ["batch", "latency (95%)", *(["p25-p75"] if spread_column else []),
               escape(f"{unit}s/s (95%)"), "peak mem", "status"]
    for col in columns:
        table.add_column(col, justify="left" if col == "status" else "right")
    for b in report.batches:
        median, spread = _latency_cells(b)
        mark = " *" if rec and rec.batch_size == b.batch_size else ""
        table.add_row(
            f"{b.batch_size}{mark}" if v.batch_size_known(report) else "?", median,
            *([spread] if spread_column else []),
            escape(v.throughput_text(b)), fmt.nbytes(b.peak_memory_bytes),
            escape(b.status.value),
        )
    console.print(table)
    _failure_lines(console, report)
    if v.peak_memory_method(report) != PeakMemoryMethod.NONE:
        console.print(escape(f"peak mem = {v.peak_memory_label(report)}"))
    allocator = narrative.allocator_headline(report)
    if allocator:
        console.print(f"[bold yellow]{escape(allocator)}[/]")
    predicted_pick = narrative.predicted_pick_headline(report)
    if predicted_pick:
        console.print(f"[bold yellow]{escape(predicted_pick)}[/]")
    uncounted = narrative.uncounted_headline(report)
    if uncounted:
        console.print(f"[bold yellow]{escape(uncounted)}[/]")
    if rec is not None:
        _recommendation_lines(console, report, rec)
    for estimate in report.estimates:
        console.print(escape(
            f"estimate (not measured), batch {estimate.batch_size}: "
            f"{fmt.rate(estimate.throughput_per_s, unit)} at "
            f"{fmt.seconds(estimate.latency_s)} per step"
            + (" (its uncounted ops grown with the rows)" if report.uncounted else "")))
    predicted = v.prediction_summary(report)
    if predicted:
        console.print(escape(predicted))
    headline = narrative.trace_headline(report) if rec is None else None
    if headline:
        console.print(escape(headline))
    stopped = stop_text(report.stop, unit)
    if stopped:
        console.print(escape(f"stopped: {stopped}"))


def print_bus_bandwidths(console: Console, groups: list[dict[str, Any]]) -> None:
    """The all-reduce bandwidths distributed sweeps measured here (hardware/interconnect)."""
    if not groups:
        console.print("all-reduce bus bandwidth: not measured yet (a distributed sweep, "
                      "diagnose FILE --nproc-per-node N, measures and caches it)")
        return
    for g in groups:
        group = g.get("group") or {}
        hosts = ", ".join(f"{n} on {h}" for h, n in group.get("ranks_per_host", []))
        console.print(escape(
            f"all-reduce bus bandwidth, {group.get('world_size')} ranks "
            f"({group.get('backend')}, {group.get('device')}; {hosts}): "
            f"{fmt.si(g.get('busbw_bytes_per_s'), 'B/s')} (busbw as nccl-tests define it)"))


def print_ceilings(console: Console, ceilings: Ceilings) -> None:
    """This machine's ceilings as a table: per dtype each kernel family's roof and the probe
    that reached it, the dtype's peak (every other op's roof) and the theoretical peak with
    its formula's numbers (html_rows.roof_rows: the rows report.html lists); then the
    bandwidth and the per-op floor, and what a report would flag about the roofs."""
    table = Table(title=escape(f"{ceilings.name} ({ceilings.device}, {ceilings.threads} threads)"),
                  title_justify="left")
    table.add_column("ceiling")
    table.add_column("value", justify="right")
    table.add_column("ridge point", justify="right")
    table.add_column("where it came from")
    for row in html_rows.roof_rows(ceilings):
        ridge = (f"{fmt.number(row.ridge_flops_per_byte)} FLOP/byte"
                 if row.ridge_flops_per_byte is not None else "")
        table.add_row(escape(row.name), fmt.si(row.flops_per_s, "FLOP/s"), ridge,
                      escape(row.how))
    copy = ceilings.details.copy
    how = {"in_place": "in-place update"}.get(copy.peak_path if copy else "copy", "copy")
    table.add_row("memory bandwidth", fmt.si(ceilings.bandwidth_bytes_per_s, "B/s"), "",
                  f"{how}, bytes read + written")
    table.add_row("fixed cost of one small op", fmt.seconds(ceilings.overhead_s), "", "")
    console.print(table)
    console.print(escape(f"source: {ceilings.source} (torch {ceilings.torch_version}, "
                         f"measured {ceilings.measured_at})"))
    spec = ceilings.spec
    if spec is not None:
        peaks = ", ".join(f"{dtype} {fmt.si(peak, 'FLOP/s')}"
                          for dtype, peak in spec.peak_flops_per_s.items())
        console.print(escape(f"datasheet cross-check: {spec.product}: {peaks}; "
                             f"{fmt.si(spec.bandwidth_bytes_per_s, 'B/s')} ({spec.source})"))
    # What a run's report would flag about these roofs: a probe whose repeats spread, a rate
    # above the theoretical peak, a family's roof far below it (every family: no run yet).
    for dtype in ceilings.peak_flops_per_s:
        for flag in roof_flags(ceilings, dtype):
            console.print(escape(f"* {flag_text(flag)}"), overflow="fold")


def print_gpu_specs(console: Console) -> None:
    """``diagnose hardware --list-gpus``: the datasheet table --target-gpu and --gpu read."""
    from batchscope.hardware.gpu_specs import SPECS

    table = Table(box=box.SIMPLE_HEAD)
    for column in ("GPU", "memory", "bandwidth", "dense peaks (TFLOP/s)"):
        table.add_column(column)
    for spec in SPECS:
        peaks = ", ".join(f"{dtype} {flops / 1e12:g}"
                          for dtype, flops in sorted(spec.peak_flops_per_s.items()))
        table.add_row(spec.product, f"{spec.memory_bytes / 2**30:.0f} GiB",
                      f"{spec.bandwidth_bytes_per_s / 1e9:,.0f} GB/s", peaks)
    console.print(table)
