"""A data-parallel sweep: the all-reduce per step and per sample, and the sizes predicted
between the measured ones."""

from __future__ import annotations

from batchscope.records import (
    Interval,
    Report,
)
from batchscope.records.noise import STAMP_RESOLUTION_S
from batchscope.records.report import (
    CommunicationTrend,
    DataParallelBatch,
    DataParallelPrediction,
    WrappedBy,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.words import Section, accumulation_steps_text, dp_pct


def _per_unit(seconds_per_row: float | None, report: Report) -> float | None:
    """Seconds per row as seconds per unit (UNITS_PER_ROW units a row)."""
    return None if seconds_per_row is None else seconds_per_row / report.model.units_per_row

def dp_seconds(value: float | None, interval: Interval | None, *,
               resolution_s: float = STAMP_RESOLUTION_S) -> str:
    """A data-parallel time with its 95% interval: ``"12 ms [8.1 ms–15 ms]"``; ``"< 1 µs"``
    where the interval starts at 0 and the median is 0 (too small for the clock, never a
    bare 0), and a low end of 0 under a median above it as ``"< 1 µs"`` too
    (``resolution_s``: the hook's stamp resolution, in the figure's own unit); the point
    alone without an interval (a report that predates them).

    Example:
        >>> dp_seconds(12e-6, Interval(0.0, 30e-6))
        '12 µs [< 1 µs–30 µs]'
    """
    if interval is None or value is None:
        return fmt.seconds(value)
    if value <= 0 and interval.low <= 0:
        return f"< {fmt.seconds(interval.high)}"
    low = (f"< {fmt.seconds(resolution_s)}" if interval.low <= 0
           else fmt.seconds(interval.low))
    return f"{fmt.seconds(value)} [{low}–{fmt.seconds(interval.high)}]"

def dp_share(value: float | None, interval: Interval | None, *,
             step_s: float | None = None) -> str:
    """A share of the step with its 95% interval: ``"23% [18%–31%]"``, or ``"< 0.1%"``.
    A low end of 0 under a median above it is never a bare 0: with the median step
    ``step_s``, below what the hook's stamps resolve of it (``"23% [< 0.01%–31%]"``);
    without, the interval's high end alone (``"23% [up to 31%]"``).

    Example:
        >>> dp_share(0.23, Interval(0.0, 0.31), step_s=0.01)
        '23% [< 0.01%–31%]'
        >>> dp_share(0.23, Interval(0.0, 0.31))
        '23% [up to 31%]'
    """
    if interval is None or value is None:
        return fmt.pct(value)
    if value <= 0 and interval.low <= 0:
        return f"< {dp_pct(interval.high)}"
    if interval.low <= 0:
        if not step_s or step_s <= 0:
            return f"{dp_pct(value)} [up to {dp_pct(interval.high)}]"
        return (f"{dp_pct(value)} [< {dp_pct(min(STAMP_RESOLUTION_S / step_s, 1.0))}–"
                f"{dp_pct(interval.high)}]")
    return f"{dp_pct(value)} [{dp_pct(interval.low)}–{dp_pct(interval.high)}]"

def _dp_step_s(row: DataParallelBatch, units_per_row: int) -> float | None:
    """A row's median step, back from its global throughput (global batch x units per row
    a step)."""
    if not row.global_throughput_per_s or row.global_throughput_per_s <= 0:
        return None
    return row.global_batch * units_per_row / row.global_throughput_per_s

def _communication_paragraph(first: DataParallelBatch, last: DataParallelBatch,
                             trend: CommunicationTrend | None, units_per_row: int = 1) -> str:
    """What the all-reduce adds to a step at both ends of the sweep, and whether it falls:
    said only where the two sizes' intervals do not overlap."""
    if trend is None:  # a report that predates the intervals: the points alone
        falls = (last.communication_share or 0) < (first.communication_share or 0)
        trend = CommunicationTrend.FALLS if falls else CommunicationTrend.RISES
        caveat = " (no interval recorded: a single timing each, which noise alone can move)"
    else:
        caveat = ""
    verdict = {
        CommunicationTrend.FALLS:
            "the same bytes every step, shared by more rows as the batch grows, as a "
            "decode step's weight read is" + caveat + ".",
        CommunicationTrend.RISES:
            "its share did not fall with the batch here, so communication is not what "
            "a larger per-rank batch buys back on this machine" + caveat + ".",
        CommunicationTrend.WITHIN_NOISE:
            "the two shares' 95% intervals overlap, so whether it falls with the batch is "
            "within noise here.",
    }[trend]
    first_share = dp_share(first.communication_share, first.communication_share_interval,
                           step_s=_dp_step_s(first, units_per_row))
    last_share = dp_share(last.communication_share, last.communication_share_interval,
                          step_s=_dp_step_s(last, units_per_row))
    return (
        f"The all-reduce adds "
        f"{dp_seconds(first.communication_exposed_s, first.communication_exposed_interval_s)}"
        f" to a step at batch {first.batch_size} ({first_share} of it) "
        f"and {dp_seconds(last.communication_exposed_s, last.communication_exposed_interval_s)}"
        f" at batch {last.batch_size} ({last_share}): "
        + verdict
        + " Measured in the timed steps by a DDP communication hook on rank 0: the time its "
        "last all-reduce finished after backward's last gradients were ready, the part "
        "backward did not hide (medians over the steps, 95% intervals in brackets); it "
        "includes the wait for the slowest rank and, on a CPU, the cores gloo's threads "
        "take from the step.")

def _predictions_paragraph(predictions: list[DataParallelPrediction], unit: str) -> str:
    """The bands of per-rank sizes the sweep did not measure, and the step-time model's
    figures that fall outside them."""
    parts = [f"batch {p.batch_size} per rank: "
             f"{fmt.rate(p.global_throughput_interval_per_s.low, unit)} to "
             f"{fmt.rate(p.global_throughput_interval_per_s.high, unit)} across ranks"
             for p in predictions]
    text = ("Not measured, predicted as a band a measurement falls inside: "
            + "; ".join(parts) + ". Each rests on the nearest measured sizes' step intervals "
            "(the compute taken to grow with the batch, at most in proportion to the rows) "
            "and on every measured all-reduce interval, widened by the run's drift.")
    outside = [p for p in predictions if p.step_model_inside is False]
    if outside:
        text += (" The step-time model's own figure for batch "
                 + ", ".join(str(p.batch_size) for p in outside)
                 + " lies outside its band: it has no term for the all-reduce, so it is not "
                 "a data-parallel prediction.")
    return text

def data_parallel(report: Report) -> Section | None:
    """A data-parallel sweep: the global batch, the all-reduce's cost per step and how the
    per-rank batch amortizes it, accumulation to a target global batch, the slowest rank."""
    dp = report.distributed
    rows = dp.batches if dp is not None else []
    if dp is None or not rows:
        return None
    unit, world = v.unit(report), dp.world_size
    nodes = dp.nodes or 1
    sec = Section("data_parallel", "Data parallel: communication against the per-rank batch")
    wrapped = "the model file" if dp.wrapped_by == WrappedBy.MODEL_FILE else "batchscope"
    sec.paragraphs.append(
        f"{world} ranks on {nodes} node{'s' if nodes != 1 else ''} ({dp.backend}, "
        f"DistributedDataParallel applied by {wrapped}); every batch size here is per rank, "
        f"and the global batch is {world}× it. Each step all-reduces "
        f"{fmt.nbytes(dp.allreduce_bytes_per_step)} of gradients whatever the batch; "
        "the all-reduce's bus bandwidth, measured at the start, was "
        f"{fmt.si(dp.bus_bandwidth_bytes_per_s, 'B/s')}.")
    first, last = rows[0], rows[-1]
    if first.communication_share is not None and last is not first:
        sec.paragraphs.append(_communication_paragraph(first, last, dp.communication_trend,
                                                       report.model.units_per_row))
    rec = dp.recommendation
    if rec is not None:
        per_unit = 1 / report.model.units_per_row
        band = rec.communication_per_sample_interval_s
        # The stamps resolve 1 µs of a step, shared by every unit of the global batch.
        per_sample = dp_seconds(_per_unit(rec.communication_per_sample_s, report),
                                band.scaled(per_unit) if band else None,
                                resolution_s=STAMP_RESOLUTION_S * per_unit / rec.global_batch)
        text = (f"At the recommended per-rank batch {rec.per_rank_batch} the global batch is "
                f"{rec.global_batch}, and communication costs {per_sample} per {unit}.")
        if rec.accumulation_steps:
            accumulated_s = _per_unit(rec.communication_per_sample_with_accumulation_s, report)
            band = rec.communication_per_sample_with_accumulation_interval_s
            accumulated = dp_seconds(
                accumulated_s, band.scaled(per_unit) if band else None,
                resolution_s=STAMP_RESOLUTION_S * per_unit
                / (rec.global_batch_reached or rec.global_batch))
            text += (f" To reach a global batch of {rec.global_batch_target}: "
                     f"{accumulation_steps_text(rec.accumulation_steps)} of "
                     f"{rec.global_batch} (no_sync() on all but the last), "
                     f"{(rec.global_batch_reached or 0) * report.model.units_per_row} {unit}s per "
                     "optimizer step, one all-reduce for all of them: "
                     f"{accumulated} "
                     f"per {unit}.")
        sec.paragraphs.append(text)
    if dp.predictions:
        sec.paragraphs.append(_predictions_paragraph(dp.predictions, unit))
    lagging = max(rows, key=lambda r: r.straggler_lag_s or 0.0)
    if lagging.straggler_lag_s is not None and lagging.slowest_rank is not None:
        sec.paragraphs.append(
            f"The largest gap between ranks: at batch {lagging.batch_size}, rank "
            f"{lagging.slowest_rank} took {fmt.seconds(lagging.straggler_lag_s)} longer "
            "per step than the fastest; in a synchronous step every rank waits for it.")
    return sec
