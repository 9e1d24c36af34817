"""What report.html's template reads: cards, bars and table rows, each a small frozen
dataclass built from the typed :class:`~batchscope.records.Report`.

Every string here is plain text; jinja2 escapes it where the template puts it. A batch size
is shown through :func:`~batchscope.reports.view.size_label`, so a trace analysed without
``--batch-sizes`` reads "unknown", never "1".
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.hardware.figures import CopyFigures, MatmulFigures
from batchscope.records import BatchResult, OpStat, Report, Status
from batchscope.reports import fmt, narrative
from batchscope.reports import view as v
from batchscope.reports.escape import truncate_text
from batchscope.reports.flag_text import flag_text
from batchscope.reports.narrative import dp_seconds, dp_share

# Longest error text shown per failed batch size in the page.
MAX_ERROR_CHARS = 1200
# Longest module path and shapes shown in an op row (the cell's title holds them whole).
MAX_MODULE_CHARS = 120
MAX_SHAPES_CHARS = 160


@dataclass(frozen=True)
class Card:
    """One figure beside the recommendation: a label, the value (and its unit), a line under."""

    label: str
    value: str
    sub: str
    unit: str = ""
    band: str = ""  # the value's interval in parentheses, "(629–748 k)", shown beside it
    band_title: str = "95% interval"  # what ``band`` is, the hover on it


def _card(label: str, parts: fmt.Band, sub: str, unit: str = "",
          band_title: str = "95% interval") -> Card:
    """A card of a figure and its interval, each from the numbers (``fmt.*_parts``)."""
    return Card(label, parts.figure, sub, unit=unit, band=parts.bracketed,
                band_title=band_title)


def cards(report: Report) -> list[Card]:
    """The recommendation's figures, each with its 95% interval: throughput, speedup,
    latency, B*, the batch sizes noise cannot tell apart and the drift control."""
    rec, batch = report.recommendation, v.recommended(report)
    unit = v.unit(report)
    out: list[Card] = []
    if rec is not None and batch is not None:
        lat = batch.latency_s
        out.append(_card(f"throughput at batch {batch.batch_size}", v.throughput_parts(batch),
                         f"best measured: {fmt.rate(rec.best_throughput_per_s, unit)}"
                         f" at batch {rec.best_batch_size}", unit=f"{unit}s/s"))
        noise = ("; within noise" if v.speedup_within_noise(rec) else
                 "; a loss beyond noise" if v.speedup_is_loss(rec) else "")
        out.append(_card("speedup from batching",
                         fmt.ratio_parts(rec.speedup_from_batching, rec.speedup_interval),
                         f"best throughput over batch {rec.speedup_baseline_batch}{noise}"))
        out.append(_card(f"step latency at batch {batch.batch_size}", v.latency_parts(batch),
                         f"p25–p75 {fmt.seconds(lat.p25 if lat else None)} – "
                         f"{fmt.seconds(lat.p75 if lat else None)}"))
    if rec is not None:
        knee = rec.measured_knee_batch
        where = "" if knee is None else (" (in the sweep)" if rec.measured_knee_within_sweep
                                         else " (beyond the sweep)")
        knee_parts = fmt.number_parts(knee, rec.measured_knee_interval)
        # B*'s band is a range (B* under the roofs' best and median repeats), not a 95%
        # interval; the measured knee's is a 95% bootstrap interval.
        out.append(_card("critical batch B*, predicted",
                         fmt.number_parts(rec.predicted_critical_batch,
                                          rec.predicted_critical_batch_interval),
                         f"knee measured: {knee_parts.text}"
                         f"{' at 95%' if knee_parts.interval else ''}{where}",
                         band_title=narrative.BSTAR_RANGE_WORDS))
        if len(rec.equivalent_batch_sizes) > 1:
            out.append(Card("equivalent within noise",
                            ", ".join(str(b) for b in rec.equivalent_batch_sizes),
                            f"the rule picks the smallest whose throughput could be within "
                            f"{fmt.pct(rec.near_best_share)} of the best"))
    drift, allowance = report.run.drift, report.run.drift_allowance
    if rec is not None and drift is not None:
        timed = ", ".join(f"{t.batch_size}: {fmt.pct(t.change)}" for t in drift.timings) or (
            f"{drift.batch_size}: {fmt.seconds(drift.first_latency_s)} then "
            f"{fmt.seconds(drift.control_latency_s)}")
        out.append(Card("drift over the sweep", fmt.pct(drift.drift),
                        f"the median change of the sizes timed again at the end ({timed}); "
                        f"every interval allows "
                        f"{fmt.pct(allowance if allowance is not None else drift.drift)}"))
    elif rec is not None and allowance is not None:
        out.append(Card("drift allowance", fmt.pct(allowance),
                        "no drift control ran: every interval carries this floor"))
    return out


@dataclass(frozen=True)
class Segment:
    """One share of the step in the bar at the top of the page."""

    key: str
    label: str
    color: str
    share: float
    pct: str


@dataclass(frozen=True)
class StartBar:
    """Where the step's time goes at the smallest analysed batch."""

    label: str
    segments: list[Segment]


def start_bar(report: Report) -> StartBar | None:
    """The time share at the smallest analysed batch, as segments of a bar."""
    shared = [b for b in v.analysed(report) if b.time_share]
    if not shared:
        return None
    b0 = shared[0]
    segments = [Segment(key, v.SHARE_LABELS[key], v.BOUND_COLORS[key],
                        v.share_of(b0.time_share, key), fmt.pct(v.share_of(b0.time_share, key)))
                for key in v.share_keys(report)]
    return StartBar(v.batch_label(report, b0), segments)


@dataclass(frozen=True)
class RankRow:
    """One rank's trace of a step in a multi-rank trace analysis."""

    rank: int | None
    trace: str
    slowest: bool
    step: str
    busy: str
    communication: str
    idle: str


@dataclass(frozen=True)
class RankTable:
    """The ranks at one batch size ("" when the batch size is unknown)."""

    batch: str
    rows: list[RankRow]


def rank_tables(report: Report) -> list[RankTable]:
    """Per batch size of a multi-rank trace analysis: one row per rank, the slowest marked."""
    known = v.batch_size_known(report)
    return [RankTable(str(size) if known else "", [
        RankRow(r.rank, r.trace, r.slowest, fmt.seconds(r.step_s), fmt.seconds(r.device_busy_s),
                fmt.pct(r.communication_share), fmt.pct(r.idle_share)) for r in rows])
        for size, rows in report.run.ranks.items() if rows]


@dataclass(frozen=True)
class DataParallelRow:
    """One per-rank batch size of a data-parallel sweep."""

    batch: int
    global_batch: int
    rate: str
    exposed: str
    share: str
    slowest: int | None
    lag: str


@dataclass(frozen=True)
class SyncRow:
    """One rank at one batch size: its median step, the gradient all-reduce included."""

    rank: int
    host: str
    status: str
    step: str
    memory: str
    error: str


@dataclass(frozen=True)
class SyncTable:
    batch: int
    rows: list[SyncRow]


@dataclass(frozen=True)
class DataParallelView:
    """A data-parallel sweep's tables: per batch size, then every rank at every size."""

    world: int
    rows: list[DataParallelRow]
    ranks: list[SyncTable]


def data_parallel(report: Report) -> DataParallelView | None:
    """The data-parallel section's tables, or None for a single-process run."""
    dp = report.distributed
    if dp is None or not dp.batches:
        return None
    unit = v.unit(report)
    rows = [DataParallelRow(r.batch_size, r.global_batch,
                            fmt.rate(r.global_throughput_per_s, unit),
                            dp_seconds(r.communication_exposed_s,
                                       r.communication_exposed_interval_s),
                            dp_share(r.communication_share, r.communication_share_interval),
                            r.slowest_rank, fmt.seconds(r.straggler_lag_s)) for r in dp.batches]
    ranks = [SyncTable(b.batch_size, [
        SyncRow(r.rank, r.host, r.status.value, fmt.seconds(r.latency_s),
                fmt.nbytes(r.peak_memory_bytes), r.error)
        for r in b.ranks]) for b in report.batches if b.ranks]
    return DataParallelView(dp.world_size, rows, ranks)


@dataclass(frozen=True)
class OpRow:
    """One op group at one batch size in the op table: sort keys and shown text."""

    batch_size: int
    batch: str  # the batch size as shown (and filtered on)
    op_id: str
    name: str
    module: str
    shapes: str
    dtype: str
    calls: int
    time_s: float
    time: str
    share: float
    share_text: str
    flops: int | None
    flops_text: str
    weights: int
    weights_text: str
    state: int
    state_text: str
    activations: int
    activations_text: str
    intensity: float | None
    intensity_text: str
    bound: str
    efficiency: float | None
    efficiency_text: str
    flags: str


def _op_row(report: Report, batch: BatchResult, op: OpStat) -> OpRow:
    share = v.op_share(op, batch)
    split = op.bytes
    return OpRow(
        batch_size=batch.batch_size, batch=v.size_label(report, batch.batch_size),
        op_id=op.op_id, name=op.name, module=truncate_text(v.op_place(op), MAX_MODULE_CHARS),
        shapes=truncate_text(fmt.shapes(op.input_shapes), MAX_SHAPES_CHARS),
        dtype=op.dtype, calls=op.calls, time_s=op.time_s, time=fmt.seconds(op.time_s),
        share=share or 0.0, share_text=fmt.pct(share, 1),
        flops=op.flops, flops_text=fmt.si(op.flops),
        weights=split.weights, weights_text=fmt.nbytes(split.weights),
        state=split.state, state_text=fmt.nbytes(split.state),
        activations=split.activations, activations_text=fmt.nbytes(split.activations),
        intensity=op.intensity, intensity_text=fmt.number(op.intensity),
        bound=op.bound.value, efficiency=op.efficiency,
        efficiency_text=fmt.pct(op.efficiency),
        flags="; ".join(flag_text(f) for f in op.flags),
    )


def op_rows(report: Report) -> list[OpRow]:
    """Every op group at every analysed batch size, most time first within a batch."""
    return [_op_row(report, batch, op) for batch in v.analysed(report)
            for op in v.ops_by_time(batch)]


@dataclass(frozen=True)
class BatchOption:
    """One choice of the op table's batch-size filter."""

    value: str
    selected: bool


def batch_options(report: Report) -> list[BatchOption]:
    """The op table's batch sizes, the recommended one selected."""
    rec = report.recommendation
    return [BatchOption(v.size_label(report, b.batch_size),
                        rec is not None and b.batch_size == rec.batch_size)
            for b in v.analysed(report)]


@dataclass(frozen=True)
class PredictionRow:
    """One batch size of the step-time model's table."""

    batch: int
    source: str
    measured: str
    predicted: str
    error: str
    rate: str


def prediction_rows(report: Report) -> list[PredictionRow]:
    """The step-time model's table: each measured size forecast from the ones before it,
    and the unmeasured ones predicted."""
    return [PredictionRow(
        p.batch_size, ", ".join(str(b) for b in p.predicted_from),
        fmt.seconds(p.measured_latency_s) if was_measured else "not measured",
        fmt.seconds(p.predicted_latency_s),
        f"{p.error:+.0%}" if p.error is not None else fmt.MISSING,
        fmt.si(p.predicted_throughput_per_s)) for p, was_measured in v.prediction_rows(report)]


def kept_cells(report: Report) -> dict[int, str]:
    """Per re-timed batch size: its median step and page faults with the buffers kept."""
    cells: dict[int, str] = {}
    for r in report.allocator.batches if report.allocator else []:
        if r.status != Status.OK:
            cells[r.batch_size] = r.status.value
            continue
        faults = r.kept_page_faults_per_step
        cell = (f"{fmt.seconds(r.kept_latency_s)} · {faults:,.0f} faults"
                if faults is not None else fmt.seconds(r.kept_latency_s))
        if r.speedup is not None:  # the gain with its 95% interval
            cell += f" · {fmt.ratio_band(r.speedup, r.speedup_interval)}"
            if v.within_noise(r.speedup_interval):
                cell += ", within noise"
            elif v.is_loss(r.speedup_interval):
                cell += ", slower beyond noise"
        cells[r.batch_size] = cell
    return cells


@dataclass(frozen=True)
class TimingRow:
    """One batch size in the timings table, its error (if any) on a line of its own."""

    batch: str
    status: str
    n: int | None
    block: int
    median: str  # with its 95% interval
    throughput: str  # with its 95% interval
    p25: str
    p75: str
    min: str
    max: str
    iqr: str
    faults: str
    kept: str
    profiled: str
    coverage: str
    error: str


def timing_rows(report: Report) -> list[TimingRow]:
    """Every batch size tried, in sweep order: its timings and their spread."""
    rows = []
    kept = kept_cells(report)
    for b in report.batches:
        lat = b.latency_s
        med = lat.median if lat else None
        iqr = (lat.p75 - lat.p25) / med if lat and med else None
        faults = b.page_faults_per_step
        rows.append(TimingRow(
            batch=v.size_label(report, b.batch_size), status=b.status.value,
            n=lat.n if lat else None, block=(lat.block_steps if lat else 0) or 1,
            median=v.latency_text(b) if lat else fmt.MISSING,
            throughput=v.throughput_text(b) if v.is_measured(b) else fmt.MISSING,
            p25=fmt.seconds(lat.p25 if lat else None),
            p75=fmt.seconds(lat.p75 if lat else None),
            min=fmt.seconds(lat.min if lat else None), max=fmt.seconds(lat.max if lat else None),
            iqr=fmt.pct(iqr, 1), faults=f"{faults:,.0f}" if faults is not None else fmt.MISSING,
            kept=kept.get(b.batch_size, fmt.MISSING), profiled=fmt.seconds(b.profiled_step_s),
            coverage=fmt.pct(b.coverage),
            error=truncate_text(v.failure_text(b), MAX_ERROR_CHARS)))
    return rows


@dataclass(frozen=True)
class CeilingRow:
    """One ceiling of the machine: what it is, its value, where it came from."""

    name: str
    value: str
    how: str


def _bandwidth_paths(copy: CopyFigures) -> str:
    """The copy and in-place figures beside each other, and which one is the ceiling."""
    if not copy.paths:
        return ""
    figures = ", ".join(f"{name.replace('_', '-')} {fmt.si(value, 'B/s')}"
                        for name, value in copy.paths.items())
    return f"; {figures}: the ceiling is the {copy.peak_path.replace('_', '-')}'s"


def _matmul_how(d: MatmulFigures | None, datasheet: bool) -> str:
    """How one dtype's matmul peak was found, from the benchmark's figures."""
    if d is None:
        return "datasheet figure, not measured" if datasheet else "measured"
    how = (f"best of {len(d.sizes)} square matmul sizes, peak at n = "
           f"{d.peak_size if d.peak_size is not None else '?'}")
    paths = {k: f.peak_flops_per_s for k, f in d.paths.items()}
    if paths:
        how = (f"the best of the paths models take: torch.mm "
               f"{fmt.si(d.peak_flops_per_s, 'FLOP/s')} ({how}), "
               + ", ".join(f"{'F.linear' if k == 'linear' else '3x3 conv2d'} "
                           f"{fmt.si(val, 'FLOP/s')}" for k, val in paths.items())
               + f"; the peak is {d.peak_path or 'mm'}'s")
    spread = [s.spread for s in d.sizes]
    return how + (f"; spread {fmt.pct(max(spread), 1)}" if spread else "")


def ceiling_rows(report: Report) -> list[CeilingRow]:
    """The machine's ceilings and how each was measured (the benchmarks' raw details)."""
    hw = v.hardware(report)
    if hw is None:
        return []
    details = hw.details
    ridges = hw.ridge_flops_per_byte
    rows = []
    for dtype, peak in hw.peak_flops_per_s.items():
        rows.append(CeilingRow(f"peak {dtype} matmul", fmt.si(peak, "FLOP/s"),
                               _matmul_how(details.matmul.get(dtype),
                                           hw.source == "datasheet")))
        rows.append(CeilingRow(f"ridge point {dtype}",
                               f"{fmt.number(ridges.get(dtype))} FLOP/byte",
                               "computed: peak / bandwidth"))
    copy = details.copy
    rows.append(CeilingRow(
        "memory bandwidth", fmt.si(hw.bandwidth_bytes_per_s, "B/s"),
        (f"streaming copy of {fmt.nbytes(copy.buffer_bytes)}, bytes read + written, "
         f"best of {copy.repeats}; spread {fmt.pct(copy.spread, 1)}"
         + _bandwidth_paths(copy)) if copy is not None else "measured"))
    add = details.overhead.ops.get("add") if details.overhead is not None else None
    rows.append(CeilingRow(
        "fixed cost of one small op", fmt.seconds(hw.overhead_s),
        (f"median of {add.repeats} chunks of {add.calls_per_chunk} one-element adds; "
         f"spread {fmt.pct(add.spread, 1)}") if add is not None else "measured"))
    return rows


@dataclass(frozen=True)
class FlagLine:
    """One line of the flags list: an op flag starts with its batch size and op."""

    where: str
    text: str


def flag_lines(report: Report) -> list[FlagLine]:
    """The flags as ``view.flags`` orders them; the report's own flags say their batch size
    in their sentence, an op's flag is introduced by its batch size and op id."""
    shown = v.flags(report)
    own = len(report.flags)  # view.flags lists the report's own flags first
    return [FlagLine(f"batch {v.size_label(report, f.batch_size)} · {f.op_id}"
                     if i >= own and f.batch_size is not None else "", f.text)
            for i, f in enumerate(shown)]
