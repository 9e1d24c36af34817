"""T(batch, context): a decode step's time from a finished sweep, for the serving what-if.

A decode step does two kinds of work. Reading the weights is shared by the batch and does not
depend on the context; attention reads every row's KV cache, which grows by one token per
row per step. So at each measured batch size b:

    T(b, c) = shared_s(b) + per_token_s(b) * c

``per_token_s`` comes from the context grid where the sweep measured one (a line through
each batch size's step times at several contexts, the sweep's own among them) and otherwise
from the per-op split: the time of the ops, in proportion to the bytes of state (the KV
cache) they move, scaled with the context. Where the grid did not time a batch size,
``shared_s`` anchors the line on the step time the sweep measured at its own context.
Between measured batch sizes both are interpolated linearly in b; above the largest one the
model does not extrapolate (the what-if only tries caps that were measured).

Example:
    >>> model = fit_step_time(load_report("report.json"))  # doctest: +SKIP
    >>> model.step_s(8, 512)  # doctest: +SKIP
    0.0731
"""

from __future__ import annotations

import math
from bisect import bisect_left
from dataclasses import dataclass, field
from enum import Enum

from batchscope.errors import UsageError
from batchscope.records import BatchResult, Report, Status
from batchscope.records.serving import (
    CurveTerm,
    GridFit,
    KvBytesSource,
    StepTimeFit,
    StepTimeSource,
)
from batchscope.records.target import TargetBatch, TargetGridPoint

# Fewer grid points than this at one batch size cannot draw a line through context.
MIN_GRID_CONTEXTS = 2
# Contexts beyond this (the contract's own bound) are not a model's: refused, and grid points
# there ignored, before their squares overflow a float.
MAX_CONTEXT = 10_000_000
MAX_BATCH_SIZE = 2**40  # the contract's bound
# A step is never taken as faster than this (a fitted line may reach 0 at a short context).
MIN_STEP_S = 1e-9

# One grid point as the fit uses it: (context, median step s, input bytes or None).
_Point = tuple[int, float, int | None]


@dataclass
class StepTimeModel:
    """Decode step time over batch size and context, fitted from one report."""

    base_context: int
    batch_sizes: list[int]
    shared_s: list[float]
    per_token_s: list[float]
    source: StepTimeSource
    kv_bytes_per_token: float | None = None  # per row
    kv_bytes_source: KvBytesSource = KvBytesSource.NONE
    points: list[GridFit] = field(default_factory=list)  # the grid: measured against fitted

    @property
    def max_batch(self) -> int:
        return self.batch_sizes[-1]

    def step_s(self, batch: int, context: int) -> float:
        """Seconds for one decode step of ``batch`` rows whose longest cache holds
        ``context`` tokens."""
        return max(_lerp(self.batch_sizes, self.shared_s, batch)
                   + _lerp(self.batch_sizes, self.per_token_s, batch) * context,
                   MIN_STEP_S)

    def worst_error(self) -> float | None:
        """The largest |fitted / measured - 1| over the grid; None without a grid."""
        errors = [abs(p.error) for p in self.points]
        return max(errors) if errors else None

    def record(self) -> StepTimeFit:
        """The model as report.json ``serving.what_if.step_time`` holds it."""
        return StepTimeFit(
            base_context=self.base_context,
            source=self.source,
            kv_bytes_per_token=self.kv_bytes_per_token,
            kv_bytes_source=self.kv_bytes_source,
            curve=[CurveTerm(b, a, k)
                   for b, a, k in zip(self.batch_sizes, self.shared_s, self.per_token_s)],
            points=list(self.points),
            worst_error=self.worst_error(),
        )


def _median_s(batch: BatchResult) -> float | None:
    lat = batch.latency_s
    return lat.median if lat is not None and lat.median > 0 else None


def _ok_batches(report: Report) -> list[BatchResult]:
    """The measured batch sizes with a positive median step, ascending (the last of a
    repeated size wins)."""
    out = {b.batch_size: b for b in report.batches
           if b.status == Status.OK and _median_s(b) is not None}
    return [out[k] for k in sorted(out)]


def _state_time_s(batch: BatchResult, median_s: float) -> float | None:
    """Step time of the ops in proportion to the state bytes they move, on the timing's
    scale (the profile's op times rescaled to the measured median step)."""
    if not batch.ops:
        return None
    state_s = 0.0
    for op in batch.ops:
        moved = op.bytes.total
        if moved > 0:
            state_s += op.time_s * op.bytes.state / moved
    op_time = batch.op_time_s or sum(op.time_s for op in batch.ops)
    scale = median_s / op_time if op_time else 1.0
    return state_s * scale


def base_context(report: Report) -> int | None:
    """The sweep's own context: the first of the model file's CONTEXTS."""
    contexts = report.model.contexts
    return contexts[0] if contexts else None


def _grid(report: Report) -> dict[int, list[_Point]]:
    """Grid points by batch size, ascending in context, where a size has enough of them."""
    grid: dict[int, list[_Point]] = {}
    for p in report.serving.context_grid if report.serving is not None else []:
        lat = p.latency_s
        if p.status == Status.OK and lat is not None and lat.median > 0 \
                and p.context is not None and p.context <= MAX_CONTEXT:
            grid.setdefault(p.batch_size, []).append((p.context, lat.median, p.input_bytes))
    return {b: sorted(v, key=lambda p: (p[0], p[1], -1 if p[2] is None else p[2]))
            for b, v in grid.items() if len({c for c, _, _ in v}) >= MIN_GRID_CONTEXTS}


def _line(points: list[_Point]) -> tuple[float, float]:
    """Least squares T = a + k c with k >= 0 (a longer context never makes a step faster)."""
    n = len(points)
    mc = sum(c for c, _, _ in points) / n
    mt = sum(t for _, t, _ in points) / n
    var = sum((c - mc) ** 2 for c, _, _ in points)
    k = sum((c - mc) * (t - mt) for c, t, _ in points) / var if var else 0.0
    k = max(k, 0.0)
    return mt - k * mc, k


def _lerp(xs: list[int], ys: list[float], x: float) -> float:
    """Linear in ``x`` between the nearest of the ascending ``xs``, flat beyond them."""
    if x <= xs[0]:
        return ys[0]
    if x >= xs[-1]:
        return ys[-1]
    i = bisect_left(xs, x)
    return ys[i - 1] + (ys[i] - ys[i - 1]) * (x - xs[i - 1]) / (xs[i] - xs[i - 1])


def _interpolate(known: dict[int, float], batch: int) -> float:
    """``known`` (by batch size) at ``batch``: see :func:`_lerp`."""
    keys = sorted(known)
    return _lerp(keys, [known[k] for k in keys], batch)


def _kv_bytes(grid: dict[int, list[_Point]], batches: list[BatchResult],
              c0: int) -> tuple[float | None, KvBytesSource]:
    """KV bytes per token per row: from make_inputs' tensors at two contexts of the grid
    (the largest batch size that has them), else from the ops' state bytes at the sweep's
    context (c0 + 1 tokens per row: the cache and the new token)."""
    for b in sorted(grid, reverse=True):
        sized = [(c, n) for c, _, n in grid[b] if n is not None]
        if len({c for c, _ in sized}) >= MIN_GRID_CONTEXTS:
            (c1, n1), (c2, n2) = sized[0], sized[-1]
            if c2 > c1 and n2 > n1:
                return (n2 - n1) / (c2 - c1) / b, KvBytesSource.GRID_INPUTS
    for batch in reversed(batches):
        if batch.bytes is not None and batch.bytes.state > 0:
            return batch.bytes.state / batch.batch_size / (c0 + 1), KvBytesSource.STATE_BYTES
    return None, KvBytesSource.NONE


class Band(str, Enum):
    """Which of a prediction's steps: the point, or its band's low or high end."""

    POINT = "point"
    LOW = "low"
    HIGH = "high"


def _target_points(report: Report, band: Band = Band.POINT
                   ) -> tuple[dict[int, float], dict[int, list[_Point]]]:
    """A --target-gpu report's predicted steps (``band``'s): at its first context by batch
    size, and its grid at every context (a line through each size's contexts, as a sweep's
    grid)."""
    target = report.target
    assert target is not None

    def step(point: TargetBatch | TargetGridPoint) -> float:
        return {Band.POINT: point.predicted_step_s, Band.LOW: point.low_s,
                Band.HIGH: point.high_s}[band]

    latency = {b.batch_size: step(b) for b in target.batches if step(b) > 0}
    grid: dict[int, list[_Point]] = {}
    for p in target.context_grid:
        if step(p) > 0 and p.context <= MAX_CONTEXT:
            grid.setdefault(p.batch_size, []).append((p.context, step(p), p.input_bytes))
    return latency, {b: sorted(v) for b, v in grid.items()}


def paged_per_token_s(report: Report, kv_bytes_per_token: float, batch: int) -> float:
    """A paged-attention step's time per token of context: each of ``batch`` rows reads its
    own cache once, at the target GPU's bandwidth and the GEMMs' memory-side efficiency
    (the padded batch's copies of the cache, as transformers' DynamicCache makes, are not a
    paged engine's)."""
    target = report.target
    assert target is not None
    term = target.terms.gemm_memory or target.terms.gemm
    return batch * kv_bytes_per_token / (target.bandwidth_bytes_per_s * term.efficiency)


def fit_step_time(report: Report, context: int | None = None,
                  paged: bool = False, band: Band = Band.POINT) -> StepTimeModel:
    """The model from a report; ``context`` is the sweep's context where the report does
    not record it (a file without ``CONTEXTS``). A --target-gpu report's predicted steps
    are taken as a sweep's measured ones; with ``paged``, its time per token of context is
    :func:`paged_per_token_s` and its shared part the line's intercept at no context;
    ``band`` takes its band's low or high steps instead of its point.

    Raises:
        UsageError: no batch size was measured, or the context is unknown; ``paged`` on a
            report that is no prediction, or one without a KV cache's size.
    """
    if report.target is not None:
        return _fit_target(report, paged, band)
    if paged:
        raise UsageError("--paged simulates a paged-attention engine on a --target-gpu "
                         "prediction; a sweep's report holds the step its model timed here.")
    batches = _ok_batches(report)
    if not batches:
        raise UsageError("the report has no measured batch size to take step times from.")
    c0 = base_context(report)
    if c0 is None:
        c0 = context
    if c0 is not None and c0 > MAX_CONTEXT:
        raise UsageError(f"the report's context, {c0:,} tokens, is beyond any model's window.")
    if c0 is None:
        raise UsageError("the report does not say what context its steps ran at: give "
                         "--context, or set CONTEXTS in the model file.")
    sizes = [b.batch_size for b in batches]
    if sizes[-1] > MAX_BATCH_SIZE:
        raise UsageError(f"the report's batch size {sizes[-1]:,} is beyond any device.")
    latency = {b.batch_size: s for b in batches if (s := _median_s(b)) is not None}
    split = {b.batch_size: s / (c0 + 1) for b in batches
             if (s := _state_time_s(b, latency[b.batch_size])) is not None}
    grid = _grid(report)
    # At a batch size the grid timed, the line goes through every step time measured there:
    # the grid's and the sweep's own at its context (each is one noisy draw of the same step).
    lines = {b: _line([*points, (c0, latency[b], None)] if b in latency else points)
             for b, points in grid.items()}
    fitted = {b: k for b, (_, k) in lines.items()}
    # The split at every size (interpolated where a size has no op breakdown).
    alone = {b: split[b] if b in split else _interpolate(split, b) for b in sizes} if split else {}
    per_token: dict[int, float]
    if fitted:
        # The split's shape across batch sizes, scaled to the grid's slopes where it has one.
        source = StepTimeSource.CONTEXT_GRID
        ratio = {b: fitted[b] / split[b] for b in fitted if split.get(b)}
        per_token = {b: fitted[b] if b in fitted else
                     split[b] * _interpolate(ratio, b) if ratio and b in split else
                     _interpolate(fitted, b) for b in sizes}
    elif split:
        source, per_token = StepTimeSource.PER_OP_SPLIT, alone
    else:
        source, per_token = StepTimeSource.NONE, dict.fromkeys(sizes, 0.0)
    model = StepTimeModel(
        base_context=c0, batch_sizes=sizes,
        shared_s=[max(lines[b][0] if b in lines else latency[b] - per_token[b] * c0, 0.0)
                  for b in sizes],
        per_token_s=[per_token[b] for b in sizes], source=source)
    if not all(math.isfinite(x) and x >= 0 for x in model.shared_s + model.per_token_s):
        raise UsageError("the report's step times and contexts do not give a finite step time "
                         "(a context or a time out of any real range).")
    model.kv_bytes_per_token, model.kv_bytes_source = _kv_bytes(grid, batches, c0)
    split_model = None
    if split and fitted:  # the split alone, for its error on the grid
        split_model = StepTimeModel(c0, sizes, [max(latency[b] - alone[b] * c0, 0.0)
                                                for b in sizes],
                                    [alone[b] for b in sizes], StepTimeSource.PER_OP_SPLIT)
    for b, points in sorted(grid.items()):
        for c, measured, _ in points:
            predicted = model.step_s(b, c)
            split_s = split_model.step_s(b, c) if split_model is not None else None
            model.points.append(GridFit(
                batch_size=b, context=c, measured_s=measured, predicted_s=predicted,
                error=predicted / measured - 1, split_predicted_s=split_s,
                split_error=split_s / measured - 1 if split_s is not None else None))
    return model


def _fit_target(report: Report, paged: bool, band: Band = Band.POINT) -> StepTimeModel:
    latency, grid = _target_points(report, band)
    c0 = base_context(report)
    if not latency or c0 is None:
        raise UsageError("the prediction holds no decode step to simulate: predict a decode "
                         "model (a file with CONTEXTS, or hf:MODEL --task causal-lm-decode).")
    sizes = sorted(latency)
    lines = {b: _line(points) for b, points in grid.items()
             if b in latency and len({c for c, _, _ in points}) >= MIN_GRID_CONTEXTS}
    kv, kv_source = _kv_bytes(grid, [], c0)
    if paged:
        if kv is None:
            raise UsageError("--paged needs the KV cache's size per token: predict the decode "
                             "model at two contexts or more (--contexts 1,512).")
        source = StepTimeSource.PAGED_KV
        per_token = {b: paged_per_token_s(report, kv, b) for b in sizes}
    elif lines:
        source = StepTimeSource.CONTEXT_GRID
        fitted = {b: k for b, (_, k) in lines.items()}
        per_token = {b: _interpolate(fitted, b) for b in sizes}
    else:
        source, per_token = StepTimeSource.NONE, dict.fromkeys(sizes, 0.0)
    # The shared part: the line's at no context, or (a size the grid did not predict) the
    # step at the first context less what its context costs.
    shared = {b: lines[b][0] if b in lines else latency[b] - per_token[b] * c0 for b in sizes}
    model = StepTimeModel(base_context=c0, batch_sizes=sizes,
                          shared_s=[max(shared[b], 0.0) for b in sizes],
                          per_token_s=[per_token[b] for b in sizes], source=source,
                          kv_bytes_per_token=kv, kv_bytes_source=kv_source)
    if not all(math.isfinite(x) and x >= 0 for x in model.shared_s + model.per_token_s):
        raise UsageError("the prediction's step times and contexts do not give a finite step "
                         "time (a context or a time out of any real range).")
    # No grid fit is recorded: the grid was predicted, not measured, and under --paged the
    # model is not fitted to it at all.
    return model
