"""The critical batch size B*: predicted from the roofline, measured as the knee of T(b).

Predicted: per step, FLOPs and bytes are (almost exactly) linear in the batch size b:
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
The knee k is fitted to the measured latencies by least squares on log t.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, Status

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


def predict_critical_batch(results: list[BatchResult], ceilings: Ceilings,
                           dtype: str) -> Prediction | None:
    """Predict B* from the counted FLOPs and bytes of the measured batch sizes."""
    counted = [r for r in results if r.status == Status.OK and r.flops and r.bytes]
    if not counted:
        return None
    bs = [float(r.batch_size) for r in counted]
    flops = fit_line(bs, [float(r.flops) for r in counted])  # type: ignore[arg-type]
    weights = fit_line(bs, [float(r.bytes.weights) for r in counted])  # type: ignore[union-attr]
    state = fit_line(bs, [float(r.bytes.state) for r in counted])  # type: ignore[union-attr]
    acts = fit_line(bs, [float(r.bytes.activations) for r in counted])  # type: ignore[union-attr]
    if len(counted) == 1:  # one point: weights do not grow, the rest is per row
        weights = LinearFit(float(counted[0].bytes.weights), 0.0)  # type: ignore[union-attr]
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


def measured_knee(results: list[BatchResult]) -> tuple[float | None, bool]:
    """Fit ``t(b) = t0·max(1, b/k)`` to the measured median latencies.

    Returns the knee k and whether it lies inside the measured range (False: the curve was
    still flat at the largest batch size, the knee is beyond the sweep).
    """
    ok = [r for r in results if r.status == Status.OK and r.latency_s is not None]
    if len(ok) < 3:
        return None, False
    bs = [float(r.batch_size) for r in ok]
    logt = [math.log(r.latency_s.median) for r in ok]  # type: ignore[union-attr]
    lo, hi = math.log2(min(bs)), math.log2(max(bs)) + 1
    steps = int((hi - lo) * KNEE_GRID_PER_OCTAVE) + 1
    best: tuple[float, float] | None = None
    for i in range(steps + 1):
        k = 2 ** (lo + (hi - lo) * i / steps)
        shape = [math.log(max(1.0, b / k)) for b in bs]
        log_t0 = sum(y - s for y, s in zip(logt, shape)) / len(bs)
        err = sum((y - log_t0 - s) ** 2 for y, s in zip(logt, shape))
        if best is None or err < best[0] - 1e-12:
            best = (err, k)
    assert best is not None
    knee = best[1]
    return knee, knee <= max(bs)
