"""What report.html's template reads: cards, bars and table rows, each a small frozen
dataclass built from the typed :class:`~batchscope.records.Report`.

Every string here is plain text; jinja2 escapes it where the template puts it. A batch size
is shown through :func:`~batchscope.reports.view.size_label`, so a trace analysed without
``--batch-sizes`` reads "unknown", never "1".
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.hardware.figures import (
    CopyFigures,
    FamilyPeak,
    MatmulFigures,
    TheoreticalPeak,
)
from batchscope.hardware.theoretical import AMX_FLOP_PER_CYCLE
from batchscope.hardware.types import Ceilings
from batchscope.op_families import PATH_FAMILY, PATH_WORDS, Family
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
    latency, B*, the batch sizes noise cannot tell apart, the rounds and the drift."""
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
    drift, allowance, rounds = report.run.drift, report.run.drift_allowance, report.run.rounds
    if rec is not None and rounds is not None:
        out.append(Card("paired rounds", str(rounds.rounds),
                        f"{', '.join(str(b) for b in rounds.candidates)} timed side by side in "
                        f"{rounds.workers} worker process{'es' if rounds.workers != 1 else ''}"
                        + ("; separated" if rounds.decided else "; within noise near the bar")))
    if rec is not None and drift is not None:
        timed = ", ".join(f"{t.batch_size}: {fmt.pct(t.change)}" for t in drift.timings) or (
            f"{drift.batch_size}: {fmt.seconds(drift.first_latency_s)} then "
            f"{fmt.seconds(drift.control_latency_s)}")
        where = ("the sweep's timings against the rounds'" if rounds is not None
                 else "the sizes timed again")
        out.append(Card("drift over the run", fmt.pct(drift.drift),
                        f"the median change of {where} ({timed}); every interval allows "
                        f"{fmt.pct(allowance if allowance is not None else drift.drift)}"))
    elif rec is not None and allowance is not None:
        out.append(Card("drift allowance", fmt.pct(allowance),
                        "no rounds ran: every interval carries this floor"))
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
    """One ceiling of the machine: what it is, its value, its ridge point (a compute roof's),
    where it came from."""

    name: str
    value: str
    how: str
    ridge: str = ""


# Kernel families (op_families.Family) in words, as the flags name them ("the float32 conv
# roof", reports/flag_text.py), in the order their rows are listed: the matmul's first, the
# roof B* is worked out against.
FAMILY_WORDS = {"matmul": "matmul", "conv": "conv"}
# Where a CPU's clock was read (hardware/theoretical.cpu_clock_hz), in words: a VM's
# /proc/cpuinfo reports its base clock, and turbo may run above it.
_CLOCK_WORDS = {"cpuinfo_max_freq": "sysfs' maximum, turbo included",
                "cpu MHz": "/proc/cpuinfo's, a VM's base clock",
                "model name": "the model name's, a base clock"}


@dataclass(frozen=True)
class RoofRow:
    """One compute roof of one dtype: what report.html's ceilings table and ``diagnose
    hardware`` list (:func:`roof_rows`).

    Attributes:
        name: the roof: "float32 matmul roof", "float32 peak: every other op's roof",
            "float32 theoretical peak (a bound)".
        flops_per_s: its value.
        ridge_flops_per_byte: the ridge point it makes with the bandwidth (None for the
            bound, which no op is placed against).
        how: the probe (or the run's op) that reached it, or the bound's formula with its
            numbers.
    """

    name: str
    flops_per_s: float
    ridge_flops_per_byte: float | None
    how: str


def family_order(family: str) -> tuple[int, str]:
    """Families in :data:`FAMILY_WORDS` order, any other after them."""
    order = list(FAMILY_WORDS)
    return (order.index(family) if family in order else len(order), family)


def family_roof_name(dtype: str, family: str) -> str:
    """"float32 matmul roof": the name a kernel family's roof goes by in every table,
    chart and legend."""
    return f"{dtype} {FAMILY_WORDS.get(family, family)} roof"


def _probe_at(figures: MatmulFigures | None, path: str) -> str:
    """A probe and the size its best came at: "torch.mm at n=2048"."""
    rates = figures.path_rates(path) if figures is not None else None
    words = PATH_WORDS.get(path, path)
    return f"{words} at {rates.size}" if rates is not None else words


def _family_how(hw: Ceilings, dtype: str, family: str, roof: FamilyPeak) -> str:
    """Which probe reached a family's roof, beside the family's other probes; or the op of
    the run that beat them."""
    if roof.op_id is not None:
        raised = hw.details.achieved_by_ops.get(f"{dtype} {family}")
        before = (f", above the probes' {fmt.si(raised.measured_peak_flops_per_s, 'FLOP/s')}"
                  if raised is not None else "")
        batch = f" at batch {raised.batch_size}" if raised is not None else ""
        return f"reached by {roof.path} ({roof.op_id}){batch} in this run{before}"
    figures = hw.details.matmul.get(dtype)
    how = f"reached by {_probe_at(figures, roof.path)}"
    if figures is None:
        return how
    rates = {"mm": figures.peak_flops_per_s,
             **{path: f.peak_flops_per_s for path, f in figures.paths.items()}}
    others = [f"{PATH_WORDS.get(path, path)} {fmt.si(rate, 'FLOP/s')}"
              for path, rate in rates.items()
              if rate and path != roof.path and PATH_FAMILY.get(path) == Family(family)]
    return how + (f" (the better of its probes: {', '.join(others)})" if others else "")


def _peak_how(hw: Ceilings, dtype: str, peak: float) -> str:
    """How a dtype's peak, the roof of ops of no family with probes of their own, came."""
    if hw.source == "datasheet" and dtype not in hw.details.matmul:
        return "datasheet figure, not measured"
    figures = hw.details.matmul.get(dtype)
    if not hw.family_peaks:  # ceilings measured before families had roofs of their own
        return _matmul_how(figures, hw.source == "datasheet")
    best = next((roof for by_dtype in hw.family_peaks.values()
                 if (roof := by_dtype.get(dtype)) is not None and roof.flops_per_s == peak),
                None)
    path = best.path if best is not None else (figures.peak_path if figures else None) or "mm"
    what = (f"{path} ({best.op_id}) in this run" if best is not None and best.op_id
            else _probe_at(figures, path))
    return f"the best of all probes: {what}"


def theoretical_how(theoretical: TheoreticalPeak, dtype: str) -> str:
    """The theoretical peak's formula with its numbers (a CPU), or its datasheet row, and
    its assumptions: a bound, not a prediction.

    Example:
        >>> t = TheoreticalPeak({"float32": 307.2e9}, "cpu flags", {"float32": 64.0}, cores=2,
        ...                     clock_hz=2.4e9, clock_source="cpu MHz", isa="avx512f",
        ...                     fma_units=2)
        >>> theoretical_how(t, "float32")[:71]
        'a bound, not a measurement: 2 cores × 2.40 GHz × 64 FLOP/cycle (avx512f'
    """
    per_cycle = theoretical.flops_per_cycle_per_core.get(dtype)
    if theoretical.cores is None or theoretical.clock_hz is None or per_cycle is None:
        return f"a bound, not a measurement ({theoretical.source}, dense)"
    matrix = (f", {theoretical.matrix_unit.upper()} for {dtype}"
              if theoretical.matrix_unit and per_cycle == AMX_FLOP_PER_CYCLE else "")
    clock = _CLOCK_WORDS.get(theoretical.clock_source or "", theoretical.clock_source or "?")
    cores = f"{theoretical.cores} core{'s' if theoretical.cores != 1 else ''}"
    return (f"a bound, not a measurement: {cores} × "
            f"{theoretical.clock_hz / 1e9:.2f} GHz × {per_cycle:,.0f} FLOP/cycle "
            f"({theoretical.isa}{matrix}, {theoretical.fma_units} FMA units a core assumed; "
            f"SMT threads count as cores; clock {clock})")


def roof_rows(hw: Ceilings) -> list[RoofRow]:
    """Per dtype: each kernel family's roof and the probe that reached it, the dtype's peak
    (the roof of every other op) and the theoretical peak, the bound all are set against."""
    bw = hw.bandwidth_bytes_per_s
    rows = []
    for dtype, peak in hw.peak_flops_per_s.items():
        for family in sorted(hw.family_peaks, key=family_order):
            roof = hw.family_peaks[family].get(dtype)
            if roof is not None:
                rows.append(RoofRow(family_roof_name(dtype, family), roof.flops_per_s,
                                    roof.flops_per_s / bw if bw else None,
                                    _family_how(hw, dtype, family, roof)))
        name = f"{dtype} peak: every other op's roof" if hw.family_peaks else f"{dtype} peak"
        rows.append(RoofRow(name, peak, peak / bw if bw else None, _peak_how(hw, dtype, peak)))
        bound = hw.theoretical.flops_per_s.get(dtype) if hw.theoretical is not None else None
        if hw.theoretical is not None and bound:
            rows.append(RoofRow(f"{dtype} theoretical peak (a bound)", bound, None,
                                theoretical_how(hw.theoretical, dtype)))
    return rows


def _bandwidth_paths(copy: CopyFigures) -> str:
    """The copy and in-place figures beside each other, and which one is the ceiling."""
    if not copy.paths:
        return ""
    figures = ", ".join(f"{name.replace('_', '-')} {fmt.si(value, 'B/s')}"
                        for name, value in copy.paths.items())
    return f"; {figures}: the ceiling is the {copy.peak_path.replace('_', '-')}'s"


def _matmul_how(d: MatmulFigures | None, datasheet: bool) -> str:
    """How one dtype's peak was found, from the benchmark's figures (ceilings measured
    before kernel families had roofs of their own)."""
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
    rows = [CeilingRow(r.name, fmt.si(r.flops_per_s, "FLOP/s"), r.how,
                       f"{fmt.number(r.ridge_flops_per_byte)} FLOP/byte"
                       if r.ridge_flops_per_byte is not None else "")
            for r in roof_rows(hw)]
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
