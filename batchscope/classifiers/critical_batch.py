"""The critical batch size B*: predicted from the roofline, measured as the knee of T(b).

Every op's FLOPs and bytes per step are (almost exactly) linear in the batch size b:
``F(b) = F0 + F1·b`` and ``bytes(b) = W + V·b``, W being the weights it reads once per step
whatever b, V what each row adds (its state such as a KV cache, its activations). Its
roofline time is ``max(F(b)/P, bytes(b)/BW, calls × per-op floor)``.

**Predicted B\\*** (the knee of batching). In eager mode ops run one after another, so the
step's predicted time is the sum over ops. At small b it is flat, ``t0 = Σ max(F0/P, W/BW,
floor)`` (reading the weights, paid once for the whole batch); at large b every row costs
``c = Σ max(F1/P, V/BW)``. Batching pays until the per-row work catches up with the shared
part, at ``B* = t0 / c``. For one weight-only layer (V ≈ 0, F1 = 2·W/bytes-per-element) this
is the textbook ``R × bytes-per-element / 2``. State that grows with b (a KV cache) raises c,
so throughput levels off sooner and lower: it never amortizes.

**Compute-bound batch** (where the layers cross the ridge). Over the layers that read weights
or state (elementwise ops on activations alone have an intensity fixed by their kind and
never cross the ridge), the batch where their compute time catches up with their memory
time, ``(F0 + F1·b)/P = (W + V·b)/BW``: ``b = (W/BW - F0/P) / (F1/P - V/BW)``. State pushes
it up; when a row's own bytes take as long to move as its FLOPs take to compute
(F1/P ≤ V/BW) it is infinite: the layers never leave the memory roof.

P is each op's own roof, as everywhere (:meth:`Roof.of_op`): its kernel family's where the
ceilings have one (a matmul under the matmul roof, a convolution under the convolution's),
else its dtype's peak. So for a decoder, whose weight-reading layers are matmuls, both
predictions are where its matmuls cross the matmul ridge, never a faster convolution
library's (issue 32: on an EPYC whose 3x3 convolution ran at twice torch.mm's rate, the
dtype's peak put that crossing twice as far out). With several families the compute time
is the sum of each family's FLOPs over its own roof: ``F0/P`` and ``F1/P`` above stand for
``Σ F0_f/P_f`` and ``Σ F1_f/P_f``.

**Measured knee**: fit ``t(b) = t0·max(1, b/k)`` to the measured median latencies by least
squares on log t. The same two-asymptote shape underlies the predicted B*, so the two
compare like with like.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass

from batchscope.classifiers.roofline import Roof
from batchscope.hardware.types import Ceilings
from batchscope.op_families import Family
from batchscope.op_families import family as kernel_family
from batchscope.records import BatchResult, ByteSplit, OpStat, Status

# Candidate knees tried per octave of batch size when fitting the measured curve.
KNEE_GRID_PER_OCTAVE = 16


@dataclass
class LinearFit:
    """y = intercept + slope·b."""

    intercept: float
    slope: float

    def __call__(self, b: float) -> float:
        return self.intercept + self.slope * b


def fit_line(xs: list[float], ys: list[float]) -> LinearFit:
    """Least-squares line; a single point gives a line through the origin."""
    n = len(xs)
    if n == 1:
        return LinearFit(0.0, ys[0] / xs[0])
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    sxy = sum((x - mx) * (y - my) for x, y in zip(xs, ys))
    slope = sxy / sxx if sxx else 0.0
    return LinearFit(my - slope * mx, slope)


def _fit_split(points: list[tuple[float, int, ByteSplit]]) -> tuple[LinearFit, LinearFit,
                                                                     LinearFit, LinearFit]:
    """Lines for FLOPs, weight, state and activation bytes over (b, flops, bytes) points.

    With a single batch size, weights are taken as fixed and the rest as per row.
    """
    bs = [p[0] for p in points]
    flops = fit_line(bs, [float(p[1]) for p in points])
    if len(points) == 1:
        b, _, split = points[0]
        return (flops, LinearFit(float(split.weights), 0.0),
                LinearFit(0.0, split.state / b), LinearFit(0.0, split.activations / b))
    return (flops, fit_line(bs, [float(p[2].weights) for p in points]),
            fit_line(bs, [float(p[2].state) for p in points]),
            fit_line(bs, [float(p[2].activations) for p in points]))


@dataclass
class ComputeBoundPrediction:
    """Where the layers that read weights or state cross the ridge (all per step)."""

    batch: float | None  # None: infinite, they never become compute-bound
    flops: LinearFit
    fixed_bytes: float  # bytes moved per step whatever the batch (mostly weights)
    per_row_bytes: float  # state + activations (+ gathered weight rows) added by one row
    state_bytes_per_row: float
    # The roof the per-row FLOPs run at: the matmul roof for a model whose weight-reading
    # layers are all matmuls; with several families, their FLOPs over their summed times.
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float


def _layer_totals(result: BatchResult, ceilings: Ceilings,
                  dtype: str) -> tuple[int, ByteSplit, float]:
    """FLOPs and bytes of the ops that read weights or state, and the seconds their FLOPs
    take at their roofs: each op's kernel family's in ``dtype`` (a matmul's the matmul
    roof), the dtype's peak for an op of no family with a roof of its own."""
    flops = 0
    total = ByteSplit()
    compute_s = 0.0
    for op in result.ops:
        if op.flops is not None and (op.bytes.weights or op.bytes.state):
            found = kernel_family(op.name)
            flops += op.flops
            total = total + op.bytes
            compute_s += op.flops / ceilings.peak_for(dtype, found.value if found else None)
    return flops, total, compute_s


def predict_compute_bound_batch(results: list[BatchResult], ceilings: Ceilings,
                                dtype: str) -> ComputeBoundPrediction | None:
    """The batch at which the weight- and state-reading layers turn compute-bound, each
    layer's FLOPs at its own kernel family's roof (module doc)."""
    totals = [(float(r.batch_size), *_layer_totals(r, ceilings, dtype)) for r in results
              if r.status == Status.OK and r.ops]
    totals = [t for t in totals if t[1] > 0]
    if not totals:
        return None
    flops, weights, state, acts = _fit_split([(b, f, split) for b, f, split, _ in totals])
    # Least squares is linear in y, so the line through the summed seconds is the sum of
    # each family's FLOP line over its roof: Σ F0_f/P_f + b·Σ F1_f/P_f.
    compute_s = fit_line([t[0] for t in totals], [t[3] for t in totals])
    bw = ceilings.bandwidth_bytes_per_s
    fixed_bytes = weights.intercept + state.intercept + acts.intercept
    per_row_bytes = weights.slope + state.slope + acts.slope
    numerator = fixed_bytes / bw - compute_s.intercept
    denominator = compute_s.slope - per_row_bytes / bw
    batch = max(numerator / denominator, 1.0) if denominator > 0 else None
    # The roof the per-row FLOPs run at: one family's roof where all are of one family (a
    # decoder's matmuls), so that a sentence quoting it quotes the roof the crossing used.
    peak = (flops.slope / compute_s.slope if flops.slope > 0 and compute_s.slope > 0
            else Roof.of(ceilings, dtype, Family.MATMUL.value).peak_flops_per_s)
    return ComputeBoundPrediction(batch, flops, fixed_bytes, per_row_bytes, state.slope,
                                  peak, bw)


@dataclass
class KneePrediction:
    """The predicted B*: the shared per-step time over the per-row time."""

    batch: float
    shared_s: float  # t0: predicted step time as b -> 0 (mostly reading the weights)
    per_row_s: float  # c: predicted time each extra row adds


def predict_critical_batch(results: list[BatchResult], ceilings: Ceilings) -> KneePrediction | None:
    """B* = t0 / c from per-op linear fits of the counted FLOPs and bytes (module doc)."""
    by_op: dict[str, list[tuple[float, OpStat]]] = defaultdict(list)
    for r in results:
        if r.status == Status.OK:
            for op in r.ops:
                if op.flops is not None:
                    by_op[op.op_id].append((float(r.batch_size), op))
    if not by_op:
        return None
    shared = per_row = 0.0
    for points in by_op.values():
        op = points[0][1]
        roof = Roof.of_op(ceilings, op)
        flops, weights, state, acts = _fit_split([(b, o.flops or 0, o.bytes) for b, o in points])
        fixed_bytes = max(weights.intercept + state.intercept + acts.intercept, 0.0)
        row_bytes = max(weights.slope + state.slope + acts.slope, 0.0)
        shared += roof.floored_s(max(flops.intercept, 0.0), fixed_bytes, op.calls)
        per_row += roof.time_s(max(flops.slope, 0.0), row_bytes)
    if per_row <= 0:
        return None
    return KneePrediction(max(shared / per_row, 1.0), shared, per_row)


def fit_knee(batch_sizes: list[float], latencies_s: list[float]) -> tuple[float | None, bool]:
    """Fit ``t(b) = t0·max(1, b/k)`` by least squares on log t; return k and whether it lies
    inside the batch sizes given (False: still flat at the largest, the knee is beyond)."""
    if len(batch_sizes) < 3:
        return None, False
    logt = [math.log(t) for t in latencies_s]
    lo, hi = math.log2(min(batch_sizes)), math.log2(max(batch_sizes)) + 1
    steps = int((hi - lo) * KNEE_GRID_PER_OCTAVE) + 1
    best: tuple[float, float] | None = None
    for i in range(steps + 1):
        k = 2 ** (lo + (hi - lo) * i / steps)
        shape = [math.log(max(1.0, b / k)) for b in batch_sizes]
        log_t0 = sum(y - s for y, s in zip(logt, shape)) / len(batch_sizes)
        err = sum((y - log_t0 - s) ** 2 for y, s in zip(logt, shape))
        if best is None or err < best[0] - 1e-12:
            best = (err, k)
    assert best is not None
    return best[1], best[1] <= max(batch_sizes)


def measured_knee(results: list[BatchResult]) -> tuple[float | None, bool]:
    """The knee of the measured median latencies (see :func:`fit_knee`)."""
    ok = [r for r in results if r.status == Status.OK and r.latency_s is not None]
    return fit_knee([float(r.batch_size) for r in ok],
                    [r.latency_s.median for r in ok])  # type: ignore[union-attr]
