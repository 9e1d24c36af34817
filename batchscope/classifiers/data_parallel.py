"""Data-parallel figures: communication as its own bound, the global batch, stragglers.

A DDP step all-reduces every gradient once, whatever the per-rank batch: the same bytes at
batch 1 and at batch 512. So communication amortizes over the per-rank batch as a decode
step's weight read amortizes over its rows: its share of the step falls as the batch grows,
until memory stops the batch and gradient accumulation takes over (fewer all-reduces per
sample, at the cost of more micro-steps).

What is measured (profiler/ranks.py): in every timed step, rank 0's DDP communication hook
stamps each bucket's all-reduce; per step, the exposed time (the last completion past the
last bucket's hook call: the part backward did not hide), the time any all-reduce was in
flight, and the step itself. Here those samples become one figure per batch size with its
95% interval (:func:`communication_figures`), a trend that is stated only where the
intervals of the smallest and largest per-rank batch separate (:func:`communication_trend`),
and, for per-rank sizes the sweep did not measure, a band a measurement there falls inside
(:func:`predicted_band`). The all-reduce bus bandwidth (nccl-tests' ``busbw``), measured at
the start of the run, puts the gradient bytes on a time axis beside them.
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from batchscope.records import BatchResult, DataParallel, ModelInfo, Status
from batchscope.records.interval import DriftControl, Interval
from batchscope.records.noise import STAMP_RESOLUTION_S, communication_shares, latency_interval
from batchscope.records.noise import communication_share as sample_share
from batchscope.records.report import (
    CommunicationTrend,
    DataParallelBatch,
    DataParallelPick,
    DataParallelPrediction,
    StepPrediction,
)
from batchscope.stats import median_interval

# The least the communication share's interval allows for the share moving from one launch
# of the ranks to the next, whatever the sweep's control measured (its one or two sizes
# timed again in a fresh launch, DriftControl.communication_drift): two launches of
# tests/models/ddp_tiny.py on the 2-vCPU VM gave shares 1.10-1.46x apart at the same size,
# and the two runs of a training model 1.15-1.60x (docs/benchmarks.md section 10).
# The all-reduce's exposed part is a race between backward's last gradients and gloo's
# threads, which a shared machine's scheduling moves far more than it moves the step.
COMMUNICATION_DRIFT_FLOOR = 0.25


@dataclass(frozen=True)
class CommunicationFigures:
    """One per-rank batch size's all-reduce: medians over the timed steps, 95% intervals."""

    exposed_s: float
    exposed_interval_s: Interval
    share: float  # the median of the per-step exposed / step ratios
    share_interval: Interval
    in_flight_s: float | None
    steps: int


def communication_figures(exposed_s: Sequence[float], step_s: Sequence[float],
                          in_flight_s: Sequence[float] = (), drift_allowance: float = 0.0,
                          resolution_s: float = STAMP_RESOLUTION_S, *,
                          share_allowance: float = 0.0,
                          control_share: float | None = None) -> CommunicationFigures | None:
    """The exposed all-reduce time and its share of the step from per-step samples (one
    ``exposed_s``, ``step_s`` and, optionally, ``in_flight_s`` per timed step, paired):
    each the median with the distribution-free 95% interval of a median
    (:func:`~batchscope.stats.median_interval`). The exposed time's interval is widened by
    ``drift_allowance`` (relative: the machine's speed moved that much over the sweep,
    :meth:`~batchscope.records.interval.Interval.widened`). The share's is widened by
    ``share_allowance`` instead (how far the share moves from one launch of the ranks to
    the next, :func:`share_allowance`: a speed drift moves both sides of each step's ratio,
    the all-reduce's race with backward does not) and spans ``control_share``, this size's
    share in the control's launch where it was timed again; it is at most 1. A sample below
    ``resolution_s`` counts as 0, and no interval ends below it. None without samples.

    Example:
        >>> f = communication_figures([0.0, 0.0, 0.0], [0.01, 0.01, 0.01])
        >>> f.exposed_s, f.exposed_interval_s.low, f.exposed_interval_s.high
        (0.0, 0.0, 1e-06)
        >>> f = communication_figures([0.002] * 9, [0.01] * 9, share_allowance=0.25,
        ...                           control_share=0.3)
        >>> round(f.share_interval.low, 3), round(f.share_interval.high, 3)
        (0.16, 0.375)
    """
    n = min(len(exposed_s), len(step_s))
    if n == 0:
        return None
    exposed = [x if x >= resolution_s else 0.0 for x in exposed_s[:n]]
    shares = communication_shares(exposed_s[:n], step_s[:n], resolution_s)
    band = Interval(*median_interval(exposed)).widened(drift_allowance)
    share_low, share_high = median_interval(shares)
    if control_share is not None:
        share_low, share_high = min(share_low, control_share), max(share_high, control_share)
    share_band = Interval(share_low, share_high).widened(share_allowance)
    share_floor = resolution_s / max(statistics.median(step_s[:n]), resolution_s)
    in_flight = [x for x in in_flight_s[:n] if x >= 0]
    return CommunicationFigures(
        exposed_s=statistics.median(exposed),
        exposed_interval_s=Interval(band.low, max(band.high, resolution_s)),
        share=statistics.median(shares),
        share_interval=Interval(min(share_band.low, 1.0),
                                min(max(share_band.high, share_floor), 1.0)),
        in_flight_s=statistics.median(in_flight) if in_flight else None,
        steps=n,
    )


def share_allowance(control: DriftControl | None) -> float:
    """The relative allowance every communication share's interval is widened by: the
    control's measured launch-to-launch change (``communication_drift``), at least
    :data:`COMMUNICATION_DRIFT_FLOOR`.

    Example:
        >>> share_allowance(None)
        0.25
    """
    measured = control.communication_drift if control is not None else None
    return max(measured or 0.0, COMMUNICATION_DRIFT_FLOOR)


def communication_trend(rows: Sequence[DataParallelBatch]) -> CommunicationTrend | None:
    """Whether the communication share falls (or rises) from the smallest per-rank batch to
    the largest: only where the two sizes' 95% intervals do not overlap; ``within_noise``
    where they do. None with fewer than two sizes, or without both intervals.

    Example:
        >>> def row(b, low, high):
        ...     return DataParallelBatch(b, 2 * b, 1.0, None, (low + high) / 2, None, None,
        ...                              None, None,
        ...                              communication_share_interval=Interval(low, high))
        >>> communication_trend([row(1, 0.3, 0.4), row(8, 0.05, 0.1)]).value
        'falls'
        >>> communication_trend([row(1, 0.1, 0.3), row(8, 0.05, 0.15)]).value
        'within_noise'
    """
    if len(rows) < 2:
        return None
    first, last = rows[0], rows[-1]
    a, b = first.communication_share_interval, last.communication_share_interval
    if a is None or b is None:
        return None
    if b.high < a.low:
        return CommunicationTrend.FALLS
    if b.low > a.high:
        return CommunicationTrend.RISES
    return CommunicationTrend.WITHIN_NOISE


def communication_share(result: BatchResult,
                        figures: CommunicationFigures | None = None) -> float | None:
    """The share of ``result``'s step its exposed all-reduce takes: the report's one
    communication figure (``distributed.batches[].communication_share``, and what
    classifiers/roofline.time_share moves out of a CPU step's framework time). The median
    of the timed steps' own ratios (:func:`communication_figures`: samples under the stamp
    resolution count as 0, each ratio at most 1; ``figures`` where already computed); from
    a report that predates the samples, the exposed point over the median step. None
    without either.

    Example:
        >>> r = BatchResult(1, Status.OK, communication_exposed_samples_s=[3e-7, 0.002, 0.05],
        ...                 communication_step_samples_s=[0.01, 0.01, 0.04])
        >>> communication_share(r)  # 3e-7 counts as 0, 0.05 / 0.04 as 1
        0.2
    """
    share = figures.share if figures is not None else sample_share(result)
    if share is not None:
        return share
    exposed, lat = result.communication_exposed_s, result.latency_s
    if exposed is None or lat is None or lat.median <= 0:
        return None
    return exposed / lat.median


def step_interval_s(result: BatchResult, drift_allowance: float = 0.0) -> Interval | None:
    """A measured size's 95% interval of its median step, widened for drift once: the
    run's where classifiers/uncertainty.py filled it (already widened), else
    :func:`~batchscope.records.noise.latency_interval` with ``drift_allowance``."""
    if result.latency_interval_s is not None:
        return result.latency_interval_s
    if result.latency_s is None:
        return None
    return latency_interval(result.latency_s, drift_allowance)


@dataclass(frozen=True)
class MeasuredStep:
    """What a band for an unmeasured size rests on: one measured size's 95% intervals of
    its step's compute (the step less its exposed all-reduce) and of that all-reduce, each
    already widened for the run's drift (:func:`predicted_band` adds nothing)."""

    batch_size: int
    compute_s: Interval
    exposed_s: Interval


def measured_step(result: BatchResult, figures: CommunicationFigures | None,
                  drift_allowance: float = 0.0) -> MeasuredStep | None:
    """A measured size's :class:`MeasuredStep`: with the hook's samples, the compute is
    each step less its own exposed all-reduce (paired, so the all-reduce's noise leaves
    it), its median's interval widened by ``drift_allowance``, and the all-reduce's
    interval from ``figures`` (widened there); without them, the step's drift-widened
    interval (:func:`step_interval_s`) less the exposed point."""
    exposed = result.communication_exposed_s or 0.0
    steps, waits = result.communication_step_samples_s, result.communication_exposed_samples_s
    n = min(len(steps), len(waits))
    if figures is not None and n:
        low, high = median_interval([s - e for s, e in zip(steps[:n], waits[:n])])
        compute = Interval(max(low, 0.0), max(high, 0.0)).widened(drift_allowance)
        return MeasuredStep(result.batch_size, compute, figures.exposed_interval_s)
    step = step_interval_s(result, drift_allowance)
    if step is None:
        return None
    return MeasuredStep(result.batch_size,
                        Interval(max(step.low - exposed, 0.0), max(step.high - exposed, 0.0)),
                        Interval(exposed, exposed))


def predicted_band(batch_size: int, measured: Sequence[MeasuredStep]
                   ) -> tuple[Interval, list[int]] | None:
    """The 95% band of the median step at an unmeasured per-rank ``batch_size``, and the
    measured sizes it rests on.

    A data-parallel step is its compute plus its exposed all-reduce. The compute is taken
    as growing with the batch, at most in proportion to the rows (a larger batch is never
    slower per row), from the measured neighbours' compute intervals: between two measured
    sizes it lies between theirs; above the largest it is at least the largest's and at
    most that times the ratio of the rows; below the smallest, at least that in proportion
    and at most the smallest's. The exposed all-reduce at the unmeasured size, which does
    not follow the batch (the same bytes every step), lies anywhere between the smallest
    low end and the largest high end any measured size showed. The measured intervals
    carry the run's drift allowance already (:func:`measured_step`): the band is not
    widened again.

    Example:
        >>> m = [MeasuredStep(4, Interval(0.07, 0.10), Interval(0.01, 0.02))]
        >>> band, rests_on = predicted_band(8, m)
        >>> round(band.low, 3), round(band.high, 3), rests_on
        (0.08, 0.22, [4])
    """
    points = sorted(measured, key=lambda m: m.batch_size)
    if not points or any(m.batch_size == batch_size for m in points):
        return None
    exposed_low = min(m.exposed_s.low for m in points)
    exposed_high = max(m.exposed_s.high for m in points)
    below = [m for m in points if m.batch_size < batch_size]
    above = [m for m in points if m.batch_size > batch_size]
    if below and above:
        lo_m, hi_m = below[-1], above[0]
        low, high = lo_m.compute_s.low, hi_m.compute_s.high
        rests_on = [lo_m.batch_size, hi_m.batch_size]
    elif below:
        m = below[-1]
        low, high = m.compute_s.low, m.compute_s.high * batch_size / m.batch_size
        rests_on = [m.batch_size]
    else:
        m = above[0]
        low, high = m.compute_s.low * batch_size / m.batch_size, m.compute_s.high
        rests_on = [m.batch_size]
    return Interval(low + exposed_low, high + exposed_high), rests_on


def allreduce_time_s(bytes_per_step: int, world_size: int, busbw_bytes_per_s: float) -> float:
    """The all-reduce of ``bytes_per_step`` at a measured bus bandwidth: busbw = algbw x
    2(n-1)/n, and the time is bytes / algbw.

    Example:
        >>> allreduce_time_s(100_000_000, 2, 1e9)  # algbw = busbw for two ranks
        0.1
    """
    if world_size < 2 or busbw_bytes_per_s <= 0:
        return 0.0
    algbw = busbw_bytes_per_s * world_size / (2 * (world_size - 1))
    return bytes_per_step / algbw


def accumulation_steps(global_batch: int, per_step: int) -> int:
    """Gradient-accumulation steps of ``per_step`` rows that reach ``global_batch``."""
    return max(1, math.ceil(global_batch / per_step))


def data_parallel_summary(model: ModelInfo, batches: list[BatchResult],
                          recommended: int | None,
                          global_batch: int | None, *,
                          drift_allowance: float | None = None,
                          control: DriftControl | None = None,
                          prediction: StepPrediction | None = None) -> DataParallel | None:
    """report.json ``distributed``: per batch size the global batch and throughput, the
    communication exposed and its share with their 95% intervals, the slowest rank; the
    trend of the share where the intervals tell it; the recommendation's global batch
    (with ``global_batch``: the accumulation steps that reach it); and, for the per-rank
    sizes ``prediction`` (the step-time model) predicts without a measurement, the band a
    measurement there falls inside. ``drift_allowance`` (the run's, relative) widens the
    exposed time's interval and the measured compute the bands rest on, once; ``control``
    (the sweep's, ``run.drift``) sets each share interval's allowance
    (:func:`share_allowance`) and adds its second share at the sizes it timed again."""
    dist = model.distributed
    if dist is None:
        return None
    drift = drift_allowance or 0.0
    world = dist.world_size
    busbw = dist.bus_bandwidth.busbw_bytes_per_s if dist.bus_bandwidth else 0.0
    grads = dist.allreduce_bytes_per_step
    allreduce_s = allreduce_time_s(grads, world, busbw)
    rows = []
    measured: list[MeasuredStep] = []
    for r in batches:
        if r.status != Status.OK or r.latency_s is None:
            continue
        timed = [(x.rank, x.latency_s) for x in r.ranks if x.latency_s is not None]
        slowest = max(timed, key=lambda x: x[1]) if timed else None
        fastest = min(timed, key=lambda x: x[1]) if timed else None
        # From the hook's per-step samples; from a report that predates them, the point
        # alone (no interval).
        timing = control.timing(r.batch_size) if control is not None else None
        comm = communication_figures(r.communication_exposed_samples_s,
                                     r.communication_step_samples_s,
                                     r.communication_in_flight_samples_s, drift,
                                     share_allowance=share_allowance(control),
                                     control_share=(timing.control_communication_share
                                                    if timing is not None else None))
        exposed = comm.exposed_s if comm is not None else r.communication_exposed_s
        share = communication_share(r, comm)
        in_flight = comm.in_flight_s if comm is not None else None
        hidden_of = in_flight or allreduce_s
        rows.append(DataParallelBatch(
            batch_size=r.batch_size,
            global_batch=r.batch_size * world,
            global_throughput_per_s=(r.batch_size * world * model.units_per_row
                                     / r.latency_s.median),
            communication_exposed_s=exposed,
            communication_share=share,
            allreduce_at_bus_bandwidth_s=allreduce_s or None,
            hidden_share=(min(max(1 - exposed / hidden_of, 0.0), 1.0)
                          if exposed is not None and hidden_of else None),
            slowest_rank=slowest[0] if slowest else None,
            straggler_lag_s=slowest[1] - fastest[1] if slowest and fastest else None,
            communication_exposed_interval_s=comm.exposed_interval_s if comm else None,
            communication_share_interval=comm.share_interval if comm else None,
            communication_in_flight_s=in_flight,
            communication_steps=comm.steps if comm else None,
        ))
        point = measured_step(r, comm, drift)
        if point is not None:
            measured.append(point)
    pick = None
    row = next((x for x in rows if x.batch_size == recommended), None)
    if row is not None and recommended is not None:
        per_step = row.global_batch
        exposed_s = row.communication_exposed_s or 0.0
        band = row.communication_exposed_interval_s
        pick = DataParallelPick(
            per_rank_batch=recommended, global_batch=per_step,
            communication_per_sample_s=exposed_s / per_step,
            communication_per_sample_interval_s=band.scaled(1 / per_step) if band else None)
        if global_batch is not None:
            steps = accumulation_steps(global_batch, per_step)
            reached = steps * per_step
            pick = dataclasses.replace(
                pick, global_batch_target=global_batch, accumulation_steps=steps,
                global_batch_reached=reached,
                # One all-reduce per accumulated step (no_sync() on the others).
                communication_per_sample_with_accumulation_s=exposed_s / reached,
                communication_per_sample_with_accumulation_interval_s=(
                    band.scaled(1 / reached) if band else None))
    return DataParallel(world_size=world, nodes=dist.nodes, backend=dist.backend,
                        wrapped_by=dist.wrapped_by, allreduce_bytes_per_step=grads,
                        bus_bandwidth_bytes_per_s=busbw or None, batches=rows,
                        recommendation=pick, communication_trend=communication_trend(rows),
                        predictions=_predictions(prediction, measured, model, world))


def _predictions(prediction: StepPrediction | None, measured: list[MeasuredStep],
                 model: ModelInfo, world: int) -> list[DataParallelPrediction]:
    """A band for every per-rank size the step-time model predicts and the sweep did not
    measure, beside the model's own latency there and whether it lies inside."""
    if prediction is None or not measured:
        return []
    done = {m.batch_size for m in measured}
    out = []
    for point in prediction.points:
        b = point.batch_size
        if point.measured_latency_s is not None or b in done or b <= 0:
            continue
        got = predicted_band(b, measured)
        if got is None:
            continue
        band, rests_on = got
        model_s = point.predicted_latency_s
        finite = model_s is not None and math.isfinite(model_s) and model_s > 0
        out.append(DataParallelPrediction(
            batch_size=b, global_batch=b * world, step_interval_s=band,
            global_throughput_interval_per_s=band.reciprocal(b * world * model.units_per_row),
            from_batches=rests_on,
            step_model_latency_s=model_s if finite else None,
            step_model_inside=band.contains(model_s) if finite else None))
    return out
