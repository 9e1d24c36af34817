"""The critical batch size B*: predicted from the roofline, measured as the knee of T(b).

Predicted: over the layers that read weights or state (elementwise ops on activations alone
have an intensity fixed by their kind, never cross the ridge whatever the batch, and are
left out), FLOPs and bytes per step are (almost exactly) linear in the batch size b:
``F(b) = F0 + F1·b`` and ``bytes(b) = W + V·b`` where W is the weight bytes (read once per
step whatever b) and V the bytes every extra row adds (state such as a KV cache, and
activations). The step stops being memory-bound where compute time catches up with memory
time, ``(F0 + F1·b) / P = (W + V·b) / BW``, so

    B* = (W/BW - F0/P) / (F1/P - V/BW)

For a weight-only layer (F0 = 0, V ≈ 0, F1 = 2·W/bytes-per-element) this is the textbook
``R × bytes-per-element / 2``. When a row's own bytes take as long to move as its FLOPs take
to compute (F1/P ≤ V/BW), B* is infinite: the step never leaves the memory roof.

Measured: the latency of a step that is memory-bound on its weights stays flat while the
batch grows, then rises linearly once the batch is compute-bound: ``t(b) = t0·max(1, b/k)``.
The knee k is fitted to the measured latencies by least squares on log t. The same fit on
the roofline-predicted step times gives the predicted knee: unlike B*, it also counts the
per-row time of ops that run one after another in eager mode (attention over a KV cache,
elementwise ops), so it is the like-for-like counterpart of the measured knee.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, ByteSplit, Status

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


@dataclass
class Prediction:
    """Predicted B* and the terms it came from (all per step)."""

    critical_batch: float | None  # None: infinite
    flops: LinearFit
    weight_bytes: float
    per_row_bytes: float  # state + activations added by one more row
    state_bytes_per_row: float
    peak_flops_per_s: float
    bandwidth_bytes_per_s: float


def layer_totals(result: BatchResult) -> tuple[int, ByteSplit]:
    """FLOPs and bytes per step of the ops that read weights or state."""
    flops = 0
    total = ByteSplit()
    for op in result.ops:
        if op.flops is not None and (op.bytes.weights or op.bytes.state):
            flops += op.flops
            total = total + op.bytes
    return flops, total


def predict_critical_batch(results: list[BatchResult], ceilings: Ceilings,
                           dtype: str) -> Prediction | None:
    """Predict B* from the counted FLOPs and bytes of the measured batch sizes."""
    counted = [(r.batch_size, *layer_totals(r)) for r in results
               if r.status == Status.OK and r.ops]
    counted = [c for c in counted if c[1] > 0]
    if not counted:
        return None
    bs = [float(b) for b, _, _ in counted]
    flops = fit_line(bs, [float(f) for _, f, _ in counted])
    weights = fit_line(bs, [float(t.weights) for _, _, t in counted])
    state = fit_line(bs, [float(t.state) for _, _, t in counted])
    acts = fit_line(bs, [float(t.activations) for _, _, t in counted])
    if len(counted) == 1:  # one point: weights do not grow, the rest is per row
        weights = LinearFit(float(counted[0][2].weights), 0.0)
        state = LinearFit(0.0, state.slope)
        acts = LinearFit(0.0, acts.slope)
    peak = ceilings.peak_for(dtype)
    bw = ceilings.bandwidth_bytes_per_s
    fixed_bytes = weights.intercept + state.intercept + acts.intercept
    per_row_bytes = weights.slope + state.slope + acts.slope
    numerator = fixed_bytes / bw - flops.intercept / peak
    denominator = flops.slope / peak - per_row_bytes / bw
    if denominator <= 0:
        critical = None
    else:
        critical = max(numerator / denominator, 1.0)
    return Prediction(critical, flops, fixed_bytes, per_row_bytes, state.slope, peak, bw)


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


def predicted_knee(results: list[BatchResult]) -> tuple[float | None, bool]:
    """The knee of the roofline-predicted step times, fitted exactly as the measured one,
    so the two compare like with like."""
    ok = [r for r in results if r.status == Status.OK and r.predicted_step_s]
    return fit_knee([float(r.batch_size) for r in ok],
                    [r.predicted_step_s for r in ok])  # type: ignore[misc]
