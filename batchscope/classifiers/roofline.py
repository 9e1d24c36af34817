"""Per-op roofline classification and per-batch time shares (DESIGN.md, Definitions)."""

from __future__ import annotations

import dataclasses

from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, Bound, OpStat, TimeShare

# An op may measure a little faster than its roof from timer resolution and the ±10% noise
# of the ceilings themselves; beyond this it is an accounting error, flagged.
ROOF_TOLERANCE = 1.15
# Working sets under this may be served from the CPU's last-level cache (32 MB on the trial
# machines), which beats the DRAM roof: said in the flag, as the likely cause.
CACHE_BYTES_HINT = 32 * 2**20


def classify_op(op: OpStat, ceilings: Ceilings) -> OpStat:
    """Intensity, roofline time, bound and efficiency of one op group (a new record)."""
    out = dataclasses.replace(op, flags=list(op.flags))
    if op.flops is None:
        out.bound = Bound.UNCOUNTED
        return out
    calls = max(op.calls, 1)
    total_bytes = op.bytes.total
    peak = ceilings.peak_for(op.dtype or "float32")
    roof_s = max(op.flops / peak, total_bytes / ceilings.bandwidth_bytes_per_s)
    out.roof_time_s = roof_s
    out.intensity = op.flops / total_bytes if total_bytes else None
    if roof_s / calls < ceilings.overhead_s:
        out.bound = Bound.OVERHEAD
    elif out.intensity is not None and out.intensity < ceilings.ridge_for(op.dtype or "float32"):
        out.bound = Bound.MEMORY
    else:
        out.bound = Bound.COMPUTE
    if op.time_s > 0:
        out.efficiency = roof_s / op.time_s
        if out.efficiency > ROOF_TOLERANCE and out.bound != Bound.OVERHEAD:
            note = (
                f"accounting error: measured {op.time_s * 1e6:.1f} µs is faster than its "
                f"roof of {roof_s * 1e6:.1f} µs"
            )
            if total_bytes / calls < CACHE_BYTES_HINT and out.bound == Bound.MEMORY:
                note += " (its bytes fit in cache, which beats the DRAM bandwidth roof)"
            out.flags.append(note)
    return out


def time_share(result: BatchResult) -> TimeShare | None:
    """Shares of the profiled step time by bound; framework time is the gaps between ops."""
    step = result.profiled_step_s
    if not step or not result.ops:
        return None
    by_bound = {b: 0.0 for b in Bound}
    for op in result.ops:
        by_bound[op.bound] += op.time_s
    unmatched = sum(result.unmatched_ops_s.values())
    framework = max(step - (result.op_time_s or 0.0), 0.0)
    return TimeShare(
        memory=by_bound[Bound.MEMORY] / step,
        compute=by_bound[Bound.COMPUTE] / step,
        overhead=by_bound[Bound.OVERHEAD] / step,
        uncounted=(by_bound[Bound.UNCOUNTED] + unmatched) / step,
        framework=framework / step,
    )


def classify_batch(result: BatchResult, ceilings: Ceilings) -> BatchResult:
    """A copy of ``result`` with every op classified and the time shares filled."""
    out = dataclasses.replace(result, ops=[classify_op(op, ceilings) for op in result.ops])
    out.time_share = time_share(out)
    predicted = [max(op.roof_time_s, op.calls * ceilings.overhead_s)
                 for op in out.ops if op.roof_time_s is not None]
    out.predicted_step_s = sum(predicted) if predicted else None
    return out


def batch_response(results: list[BatchResult]) -> dict[str, list[dict[str, float]]]:
    """Per op across batch sizes: time per batch row against b (the batch-response curve).

    Keyed by ``op_id``, which is stable across batch sizes while the op sequence is.
    """
    curves: dict[str, list[dict[str, float]]] = {}
    for r in results:
        for op in r.ops:
            curves.setdefault(op.op_id, []).append(
                {"batch_size": r.batch_size, "time_per_row_s": op.time_s / r.batch_size}
            )
    return curves
