"""Read-only accessors over the typed report, shared by every renderer.

Renderers never recompute the analysis: the assembler did that and put it in the
:class:`~batchscope.records.Report`. What lives here is lookup (the recommended batch, the
ops of one batch size, the limits the run was given), the words some fields need (the
peak-memory method, the dtype a run computed in, a batch's label) and small display
arithmetic on measured values (a share, a per-row figure).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from enum import Enum

from batchscope.classifiers.step_model import MIN_MARGIN, band_margin
from batchscope.classifiers.uncertainty import ratio
from batchscope.hardware.types import Ceilings
from batchscope.op_families import ProbeKind, probed
from batchscope.page_faults import PAGE_FAULT_COST_S
from batchscope.page_faults import fault_share as step_fault_share
from batchscope.records import (
    BatchResult,
    ByteSplit,
    Flag,
    FlagKind,
    Interval,
    OpStat,
    PeakMemoryMethod,
    Recommendation,
    Report,
    Source,
    Status,
    TimeBasis,
    TimeShare,
)
from batchscope.records.flag_payloads import PageFaults
from batchscope.records.report import CurvePoint, SequenceGrid, StepPrediction
from batchscope.reports import fmt
from batchscope.reports.flag_text import flag_body, flag_detail, flag_label, flag_text

# Op names whose kernel probes time matmuls from their shapes.
MATMUL_PROBE_NAMES = probed(ProbeKind.SHAPES)

BOUNDS = ("memory", "compute", "overhead", "uncounted")
BYTE_KINDS = ("weights", "state", "activations", "unsplit")
# Time shares of a batch, in stacking order: the four bounds and the time between ops (CPU)
# or, on a GPU, communication, host<->device copies and the device's idle time.
CPU_SHARES = (*BOUNDS, "framework")
DEVICE_SHARES = (*BOUNDS, "communication", "transfer", "idle")
SHARES = (*BOUNDS, "framework", "communication", "transfer", "idle")
SHARE_LABELS = {
    "memory": "memory-bound",
    "compute": "compute-bound",
    "overhead": "overhead-bound",
    "uncounted": "uncounted (no FLOP formula)",
    "framework": "between ops (Python, dispatch)",
    "communication": "communication (collectives, not hidden)",
    "transfer": "host-device copies",
    "idle": "GPU idle (waiting on the host)",
}
# Colours, one per bound and one per byte kind, used by every chart and legend in the HTML.
BOUND_COLORS = {
    "memory": "#2563eb",
    "compute": "#dc2626",
    "overhead": "#d97706",
    "uncounted": "#7c8594",
    "framework": "#cbd2dc",
    "communication": "#059669",
    "transfer": "#a16207",
    "idle": "#e2e8f0",
}
BYTE_COLORS = {"weights": "#7c3aed", "state": "#0d9488", "activations": "#94a3b8",
               "unsplit": "#64748b"}


def on_device_time(report: Report) -> bool:
    """True when op times are GPU kernel times (a GPU run or a recorded trace)."""
    return any(b.time_basis == TimeBasis.DEVICE for b in report.batches)


def share_keys(report: Report) -> tuple[str, ...]:
    """The time shares that apply to this report, in stacking order."""
    return DEVICE_SHARES if on_device_time(report) else CPU_SHARES


def share_of(share: TimeShare | None, key: str) -> float:
    """One share of a batch's time (0 when there is none)."""
    return float(getattr(share, key)) if share is not None else 0.0


def from_trace(report: Report) -> bool:
    """True for a report of recorded profiler traces (``diagnose trace``)."""
    return report.run.source == Source.TRACE


def batch_size_known(report: Report) -> bool:
    """False for a trace analysed without ``--batch-sizes``."""
    return not from_trace(report) or report.run.batch_size_known


def batch_label(report: Report, batch: BatchResult) -> str:
    """"batch 8", or "the trace's batch (size unknown)"."""
    if not batch_size_known(report):
        return "the trace's batch (size unknown)"
    return f"batch {batch.batch_size}"


def size_label(report: Report, batch_size: int) -> str:
    """A batch size as a chart legend or table cell says it: "8", or "unknown" for a trace
    analysed without ``--batch-sizes`` (whose batch is reported as 1 for want of one)."""
    return str(batch_size) if batch_size_known(report) else "unknown"


def unit(report: Report) -> str:
    """What one batch row yields per step ("token", "image", ...)."""
    return report.model.unit or "sample"


def target(report: Report) -> str:
    """The model file the report is about."""
    return report.model.target or "model"


def model_dtype(report: Report) -> str:
    """The dtype the model's weights are in, as a torch name ("float32")."""
    return report.model.dtype or "float32"


def dtype_label(report: Report) -> str:
    """The dtype a reader should see in a header: the model's, and under --amp the dtype
    autocast ran its matmuls in ("float32 weights, bfloat16 autocast")."""
    if report.model.amp:
        return f"{model_dtype(report)} weights, {report.model.amp} autocast"
    return model_dtype(report) if report.model.dtype else "dtype unknown"


def hardware(report: Report) -> Ceilings | None:
    """The ceilings, or None when they were not measured (or name no peak)."""
    hw = report.hardware
    return hw if hw is not None and hw.peak_flops_per_s else None


def ridge(report: Report) -> float | None:
    """Ridge point of the dtype the matmuls ran in, in FLOP/byte (falls back to float32)."""
    hw = hardware(report)
    if hw is None:
        return None
    ridges = hw.ridge_flops_per_byte
    return ridges.get(report.model.compute_dtype) or ridges.get("float32")


def ridge_dtype(report: Report) -> str:
    """The dtype :func:`ridge` is of: the one the matmuls ran in, else float32."""
    hw = hardware(report)
    dtype = report.model.compute_dtype
    return dtype if hw is not None and hw.ridge_flops_per_byte.get(dtype) else "float32"


# A peak within this share of a roof's is that roof: the same figure, rounded through JSON.
ROOF_MATCH_REL = 1e-3


def roof_name(report: Report, peak_flops_per_s: float | None) -> str | None:
    """Which of the machine's roofs ``peak_flops_per_s`` is, in words: "float32 matmul roof",
    "float32 conv roof" (a kernel family's, in the dtype the matmuls ran in) or "float32
    peak"; None where it is none of them (a blend of several families' roofs)."""
    hw = hardware(report)
    if hw is None or not peak_flops_per_s:
        return None
    dtype = ridge_dtype(report)

    def matches(flops_per_s: float | None) -> bool:
        return bool(flops_per_s) and abs((flops_per_s or 0.0) - peak_flops_per_s) <= (
            ROOF_MATCH_REL * peak_flops_per_s)
    for family in sorted(hw.family_peaks):
        roof = hw.family_peaks[family].get(dtype)
        if roof is not None and matches(roof.flops_per_s):
            return f"{dtype} {family} roof"
    return f"{dtype} peak" if matches(hw.peak_flops_per_s.get(dtype)) else None


def latency_limit_s(report: Report) -> float | None:
    """The --latency-limit-ms the run was given, in seconds (None: no limit)."""
    return report.run.options.latency_limit_s if report.run.options else None


def memory_budget_bytes(report: Report) -> float | None:
    """The --memory-budget the run was given, in bytes (None: no budget)."""
    return report.run.options.memory_budget_bytes if report.run.options else None


def is_measured(batch: BatchResult) -> bool:
    """True for a batch size that finished with a throughput."""
    return batch.status == Status.OK and bool(batch.throughput_per_s)


def measured(report: Report) -> list[BatchResult]:
    """The batch sizes that were measured, smallest first."""
    return sorted((b for b in report.batches if is_measured(b)), key=lambda b: b.batch_size)


def analysed(report: Report) -> list[BatchResult]:
    """The measured batch sizes; for a trace of unknown batch size (no throughput), the
    batches it analysed."""
    if not from_trace(report):
        return measured(report)
    return sorted((b for b in report.batches if b.status == Status.OK and b.latency_s),
                  key=lambda b: b.batch_size)


def failed(report: Report) -> list[BatchResult]:
    """The batch sizes that did not finish (OOM, error, timeout...)."""
    return [b for b in report.batches if b.status != Status.OK]


def failure_text(batch: BatchResult) -> str:
    """Why a batch size did not finish: its error, or why it was skipped."""
    if batch.error:
        return batch.error
    return "; ".join(flag_body(f) for f in batch.flags
                     if f.kind == FlagKind.PREDICTED_NOT_TO_FIT)


def recommendation(report: Report) -> Recommendation | None:
    """The recommendation, or None when there is none."""
    return report.recommendation


def batch_of(report: Report, batch_size: int | None) -> BatchResult | None:
    """The measured batch of that size, or None."""
    return next((b for b in measured(report) if b.batch_size == batch_size), None)


def recommended(report: Report) -> BatchResult | None:
    """The measured batch the report recommends."""
    rec = report.recommendation
    return batch_of(report, rec.batch_size) if rec else None


def latency_median(batch: BatchResult | None) -> float | None:
    """Median step latency of a batch in seconds, or None."""
    return batch.latency_s.median if batch is not None and batch.latency_s else None


# -- figures with their 95% intervals --------------------------------------------------------
def latency_parts(batch: BatchResult | None) -> fmt.Band:
    """The median step and its 95% interval, formatted apart (:class:`fmt.Band`)."""
    return fmt.seconds_parts(latency_median(batch),
                             batch.latency_interval_s if batch is not None else None)


def latency_text(batch: BatchResult | None) -> str:
    """The median step with its 95% interval: ``"746 µs (685–815 µs)"``; the median alone
    for a report written before intervals."""
    return latency_parts(batch).text


def throughput_parts(batch: BatchResult | None) -> fmt.Band:
    """The throughput and its 95% interval, formatted apart, without a unit."""
    if batch is None:
        return fmt.Band(fmt.MISSING)
    return fmt.si_parts(batch.throughput_per_s, batch.throughput_interval_per_s)


def throughput_text(batch: BatchResult | None) -> str:
    """The throughput with its 95% interval, without a unit: ``"686 k (629–748 k)"``."""
    return throughput_parts(batch).text


def gain_over(batch: BatchResult, base: BatchResult | None) -> tuple[float | None,
                                                                     Interval | None]:
    """``batch``'s throughput over ``base``'s, with the interval of the quotient where both
    have one (classifiers/uncertainty.ratio: at the intervals' ends)."""
    if base is None or not base.throughput_per_s or not batch.throughput_per_s \
            or not is_measured(batch):
        return None, None
    if batch is base or batch.batch_size == base.batch_size:
        return 1.0, None  # the base against itself: no interval to quote
    num, den = batch.throughput_interval_per_s, base.throughput_interval_per_s
    if num is None or den is None:
        return batch.throughput_per_s / base.throughput_per_s, None
    return ratio((batch.throughput_per_s, num), (base.throughput_per_s, den))


class Reading(str, Enum):
    """What a gain's 95% interval says: a lift (all of it above 1.0), noise (it holds 1.0)
    or a loss (all of it below 1.0)."""

    LIFT = "lift"
    NOISE = "noise"
    LOSS = "loss"


def reading(gain: Interval | None) -> Reading | None:
    """A gain read from its interval; None without one (a report written before intervals
    says what it measured).

    Example:
        >>> reading(Interval(0.97, 1.2)), reading(Interval(0.7, 0.9)), reading(None)
        (<Reading.NOISE: 'noise'>, <Reading.LOSS: 'loss'>, None)
    """
    if gain is None or math.isnan(gain.low) or math.isnan(gain.high):
        return None
    if gain.contains(1.0):
        return Reading.NOISE
    return Reading.LOSS if gain.high < 1.0 else Reading.LIFT


def within_noise(gain: Interval | None) -> bool:
    """True when a gain's interval holds 1.0: noise alone could explain it, neither a lift
    nor a loss (False without an interval)."""
    return reading(gain) == Reading.NOISE


def is_loss(gain: Interval | None) -> bool:
    """True when a gain's whole interval lies below 1.0: a loss noise cannot explain."""
    return reading(gain) == Reading.LOSS


def speedup_within_noise(rec: Recommendation | None) -> bool:
    """True when the speedup from batching cannot be told from noise."""
    return rec is not None and rec.speedup_from_batching is not None \
        and within_noise(rec.speedup_interval)


def speedup_is_loss(rec: Recommendation | None) -> bool:
    """True when batching lowered throughput beyond noise (the speedup's interval below 1)."""
    return rec is not None and rec.speedup_from_batching is not None \
        and is_loss(rec.speedup_interval)


# -- page faults: one figure, one source ------------------------------------------------------
def fault_cost(report: Report) -> tuple[float, bool]:
    """Seconds one page fault costs a step, and whether it was measured: the side-by-side
    check's ``allocator.cost_per_fault_s`` where it ran and saved time, else the estimate
    page_faults.PAGE_FAULT_COST_S. The one source of every page-fault share shown."""
    measured = report.allocator.cost_per_fault_s if report.allocator is not None else None
    return (measured, True) if measured else (PAGE_FAULT_COST_S, False)


def fault_share(report: Report, batch: BatchResult) -> float | None:
    """The share of ``batch``'s step its page faults take, at :func:`fault_cost` a fault
    (page_faults.fault_share; ``BatchResult.page_fault_share``, the flag's own figure, where
    the cost is the estimate)."""
    cost, measured = fault_cost(report)
    if not measured:
        return batch.page_fault_share
    return step_fault_share(batch.page_faults_per_step, latency_median(batch), cost)


def shown_flag(report: Report, flag: Flag) -> Flag:
    """The flag as the report words it: a page-fault flag's shares restated at
    :func:`fault_cost` where the side-by-side check measured it, so the flag and the
    headline give one figure; any other flag as it is."""
    cost, measured = fault_cost(report)
    if flag.kind != FlagKind.PAGE_FAULTS or not measured:
        return flag
    faults = PageFaults.of(flag)
    batches = {b.batch_size: b for b in report.batches}
    shares: list[float] = []
    for size in faults.batch_sizes:
        batch = batches.get(size)
        shares.append((fault_share(report, batch) if batch is not None else None) or 0.0)
    return Flag.of(dataclasses.replace(faults, shares=shares, cost_s=cost, measured=True),
                   flag.batch_size, flag.op_id)


# What each peak-memory method counts, in words.
PEAK_MEMORY_LABELS = {
    PeakMemoryMethod.CUDA_MAX_ALLOCATED: (
        "peak tensor memory (torch.cuda.max_memory_allocated): weights, state and activations; "
        "excludes the allocator's cached reserve and the CUDA context (~300-500 MB)"),
    PeakMemoryMethod.WORKER_PEAK_RSS: (
        "peak resident memory of the worker process (VmHWM, reset per batch size): weights, "
        "state and activations, and also the Python interpreter, torch's libraries and memory "
        "the allocator holds on to: what the machine must hold, not the tensors alone"),
    PeakMemoryMethod.LIFETIME_PEAK_RSS: (
        "lifetime peak resident memory of the worker process (VmHWM, not reset per batch "
        "size: the highest since it started): weights, state and activations, and also the "
        "Python interpreter, torch's libraries and memory the allocator holds on to"),
    PeakMemoryMethod.LIFETIME_MAXRSS: (
        "lifetime peak resident memory of the worker process (ru_maxrss, not reset per batch "
        "size: the highest since it started): weights, state and activations, and also the "
        "Python interpreter, torch's libraries and memory the allocator holds on to"),
}


def memory_method_label(method: PeakMemoryMethod) -> str:
    """What a peak-memory method counts, in words; "peak memory" for none.

    Example:
        >>> label = memory_method_label(PeakMemoryMethod.CUDA_MAX_ALLOCATED)
        >>> "weights" in label and "excludes the allocator's cached reserve" in label
        True
    """
    return PEAK_MEMORY_LABELS.get(method, "peak memory")


def peak_memory_method(report: Report) -> PeakMemoryMethod:
    """The method the report's batches name (the first that names one)."""
    return next((b.peak_memory_method for b in report.batches if b.peak_memory_method),
                PeakMemoryMethod.NONE)


def peak_memory_label(report: Report) -> str:
    """What the report's peak memory counts, in words."""
    return memory_method_label(peak_memory_method(report))


def bytes_of(split: ByteSplit | None, kind: str) -> int:
    """Bytes of one kind (:data:`BYTE_KINDS`) in a split; 0 without one."""
    return int(getattr(split, kind)) if split is not None else 0


def step_bytes(batch: BatchResult) -> float | None:
    """Counted bytes of one step, all kinds together."""
    return float(batch.bytes.total) if batch.bytes is not None else None


def step_intensity(batch: BatchResult) -> float | None:
    """FLOP per byte of the whole step (counted FLOPs over counted bytes)."""
    total = step_bytes(batch)
    return batch.flops / total if batch.flops and total else None


def op_share(op: OpStat, batch: BatchResult) -> float | None:
    """An op's share of the profiled step time."""
    step = batch.profiled_step_s
    return op.time_s / step if step else None


def ops_by_time(batch: BatchResult | None) -> list[OpStat]:
    """Ops of one batch, most time first."""
    return sorted(batch.ops if batch else [], key=lambda o: -o.time_s)


def step_efficiency(batch: BatchResult) -> float | None:
    """Roofline-predicted step time over the profiled step time (1 = the step at its roof)."""
    predicted, profiled = batch.predicted_step_s, batch.profiled_step_s
    if not predicted or not profiled or predicted <= 0 or profiled <= 0:
        return None
    return predicted / profiled


@dataclass(frozen=True)
class ShownFlag:
    """One line of the report's flags, as every format shows it."""

    text: str
    batch_size: int | None = None
    op_id: str = ""


def op_place(op: OpStat) -> str:
    """Where an op ran: its module path; in a trace (no modules), the longest kernel it
    launched; "" at the top level."""
    if op.kernels and not op.module:
        return "kernel " + op.kernels[0].name
    return op.module


def op_flags(report: Report) -> list[tuple[BatchResult, OpStat, Flag]]:
    """Every op's flags, one per op group and batch size, as the report holds them."""
    return [(b, op, f) for b in report.batches for op in b.ops for f in op.flags]


def flags(report: Report) -> list[ShownFlag]:
    """Report-level flags first, then op flags grouped by kind and op, the groups with the
    most step time at stake first. Hundreds of per-op flags (one per op group and batch
    size) become a few lines that say what matters."""
    out = [ShownFlag(flag_text(shown_flag(report, f)), f.batch_size, f.op_id or "")
           for f in report.flags]
    groups: dict[tuple[FlagKind, str], list[tuple[BatchResult, OpStat, Flag]]] = {}
    for b, op, f in op_flags(report):
        groups.setdefault((f.kind, op.name), []).append((b, op, f))
    ranked = []
    for (_, name), members in groups.items():
        at_stake = sum(op.time_s for _, op, _ in members)
        sizes = sorted({b.batch_size for b, _, _ in members})
        worst_b, worst_op, worst_f = max(members, key=lambda m: m[1].time_s)
        if len(members) == 1:
            shown = ShownFlag(flag_text(worst_f), worst_b.batch_size, worst_op.op_id)
        else:
            where = ", ".join(str(x) for x in sizes[:8]) + (" …" if len(sizes) > 8 else "")
            shown = ShownFlag(
                f"{flag_label(worst_f)}, {name}: {len(members)} op groups at batch {where}, "
                f"{fmt.seconds(at_stake)} of profiled time; the largest (batch "
                f"{worst_b.batch_size}, {worst_op.op_id}): {flag_detail(worst_f)}")
        ranked.append((at_stake, shown))
    out += [shown for _, shown in sorted(ranked, key=lambda r: -r[0])]
    return out


def accounting_errors(report: Report) -> list[tuple[BatchResult, OpStat, Flag]]:
    """Ops measured faster than their roof: the ceilings or the counts are off."""
    return [m for m in op_flags(report) if m[2].kind == FlagKind.ACCOUNTING_ERROR]


def dominant_bound(batch: BatchResult) -> str | None:
    """The bound (or "framework", "idle", ...) holding the largest share of the step."""
    share = batch.time_share
    if share is None:
        return None
    return max(SHARES, key=lambda k: share_of(share, k))


def prediction(report: Report) -> StepPrediction | None:
    """report.json ``prediction`` (the fitted step-time model), None when absent."""
    return report.prediction


def prediction_rows(report: Report) -> list[tuple[CurvePoint, bool]]:
    """The model's points, each with whether its batch size was measured."""
    pred = report.prediction
    return [(p, p.measured_latency_s is not None) for p in (pred.points if pred else [])]


# How many measured sizes each forecast is fitted on (probe_plan.FIT_WINDOW).
FORECAST_WINDOW_WORD = "three"


def _probed_kinds(probes: dict[str, float]) -> str:
    """What the kernel probes timed, in words, from their keys ("mm[[8,16],[16,4]]")."""
    names = {key.split("[", 1)[0] for key in probes}
    kinds = [kind for kind, hit in (
        ("matmuls", bool(names & MATMUL_PROBE_NAMES)),
        ("convolutions", "convolution" in names),
        ("per-row ops (batch norm, pooling, ...)",
         bool(names - MATMUL_PROBE_NAMES - {"convolution"}))
    ) if hit]
    return " and ".join(kinds) if len(kinds) < 3 else f"{kinds[0]}, {kinds[1]} and {kinds[2]}"


def prediction_margin(pred: StepPrediction | None) -> float | None:
    """:func:`band_margin` of the model's largest miss; None where it forecast no measured
    size (and so has no band)."""
    if pred is None or pred.max_abs_error is None or math.isnan(pred.max_abs_error):
        return None
    return band_margin(pred.max_abs_error)


def predicted_band(throughput_per_s: float, margin: float) -> Interval:
    """A predicted throughput's band: its step within :func:`band_margin` of ``margin``
    either way (the one band of every predicted figure shown).

    Example:
        >>> band = predicted_band(110.0, 0.04)  # a 4% miss: the 10% floor
        >>> round(band.low, 6), round(band.high, 6)
        (100.0, 122.222222)
    """
    m = band_margin(margin)
    return Interval(throughput_per_s / (1 + m),
                    throughput_per_s / (1 - m) if m < 1 else math.inf)


def prediction_summary(report: Report) -> str:
    """One sentence: what the model was fitted on, how it held, what it predicts unmeasured."""
    pred = report.prediction
    rows = prediction_rows(report)
    if pred is None or not rows:
        return ""
    unit_name = unit(report)
    forecasts = [p for p, was_measured in rows if was_measured and p.error is not None]
    if forecasts:
        errors = [p.error for p in forecasts if p.error is not None]
        text = (f"Step-time model, each size forecast from the {FORECAST_WINDOW_WORD} measured "
                f"before it: off by "
                + (f"{errors[0]:+.0%} at batch {forecasts[0].batch_size}" if len(errors) == 1
                   else f"{min(errors):+.0%} to {max(errors):+.0%} at batches "
                        f"{forecasts[0].batch_size}-{forecasts[-1].batch_size}"))
    else:
        fitted = ", ".join(str(b) for b in pred.fitted_on)
        text = (f"Step-time model fitted on batches {fitted} (too few sizes to forecast one "
                f"from those before it)")
    if pred.knee_batch is not None:
        knee = f"{pred.knee_batch:,.3g}"
        text += f"; its curve bends at {knee} row{'' if knee == '1' else 's'}"
    if pred.probes_s:
        text += (f"; its {_probed_kinds(pred.probes_s)} were timed alone at their own shapes "
                 f"({len(pred.probes_s)} kernel probes) where the kernel changes with the rows")
    unmeasured = [p for p, was_measured in rows if not was_measured]
    if unmeasured:
        fitted = ", ".join(str(b) for b in pred.fitted_on)
        # no band over time in ops nobody counted (report.uncounted)
        margin = prediction_margin(pred) if report.uncounted is None else None

        def band(p: CurvePoint) -> Interval | None:
            return (predicted_band(p.predicted_throughput_per_s, margin)
                    if margin is not None else None)
        text += f"; not measured, predicted from batches {fitted}: " + ", ".join(
            f"batch {p.batch_size} "
            f"{fmt.rate_band(p.predicted_throughput_per_s, band(p), unit_name)}"
            for p in unmeasured[:6])
        if len(unmeasured) > 6:
            text += f" (and {len(unmeasured) - 6} more)"
        if margin is not None:
            text += (f", each with its step within ±{fmt.pct(margin)} (the model's largest "
                     f"miss, at least {fmt.pct(MIN_MARGIN)}): predictions, not measurements")
        elif report.uncounted is not None:
            text += (f": predictions, not measurements, with no band: "
                     f"{fmt.pct(report.uncounted.share)} of the step at batch "
                     f"{report.uncounted.batch_size} is in ops batchscope could not count, "
                     "whose time the model extends without knowing their work")
    sensitivity = pred.ceiling_sensitivity
    if sensitivity is not None and abs(sensitivity) >= 0.01:
        text += (f"; with each compute roof at its median repeat instead of its best, the "
                 f"largest batch's predicted step moves {sensitivity:+.0%}")
    return text + "."


def counts_note(report: Report) -> str:
    """Which batch sizes' FLOPs and bytes were carried from two counted ones, or ""."""
    carried = [(b.batch_size, b.counts_extrapolated_from) for b in report.batches
               if len(b.counts_extrapolated_from) == 2]
    if not carried:
        return ""
    sizes = ", ".join(str(b) for b, _ in carried)
    sources = sorted({(src[0], src[1]) for _, src in carried})
    froms = "; ".join(f"batches {a} and {b}" for a, b in sources)
    return (f"FLOPs and bytes at batch{'es' if len(carried) > 1 else ''} {sizes} were "
            f"carried op by op from the counts at {froms} (linear in the batch: checked "
            f"exact on a third counted size), not counted again.")


def sequence_grid(report: Report) -> SequenceGrid | None:
    """report.json ``sequence_grid`` (batch size × sequence length), None when absent."""
    return report.sequence_grid


@dataclass(frozen=True)
class SequenceRow:
    """One sequence length of the grid's table: units/s (or a failed point's status) by
    batch size, and the batch predicted to fill the memory there."""

    seq_len: int
    cells: dict[int, str]
    limit: str


def sequence_table(report: Report) -> tuple[list[int], list[SequenceRow]]:
    """The grid as a table: the batch sizes (columns) and one row per sequence length."""
    grid = report.sequence_grid
    if grid is None:
        return [], []
    sizes = sorted({p.batch_size for p in grid.points})
    rows = []
    for length in grid.seq_lens:
        cells = {p.batch_size: (fmt.si(p.throughput_per_s, digits=3) if p.throughput_per_s
                                else p.status.value)
                 for p in grid.points if p.seq_len == length}
        row = next((r for r in grid.lengths if r.seq_len == length), None)
        limit = row.memory_limit.batch_size if row and row.memory_limit else None
        rows.append(SequenceRow(length, cells,
                                f"{limit:,}" if limit is not None else fmt.MISSING))
    return sizes, rows
