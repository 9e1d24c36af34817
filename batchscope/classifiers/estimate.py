"""What a larger batch would buy, estimated from one measured batch size (``watch``).

Each measured op is scaled by how its roofline time grows: FLOPs, state and activation bytes
grow with the batch, weight bytes do not, and no op gets faster than the per-op floor. Its
measured time is multiplied by that growth, so the efficiency it reached at the measured
batch size carries over. Time between ops (Python, the data loader) stays the same per step.
This is an estimate, labelled as one everywhere it is shown.
"""

from __future__ import annotations

from batchscope.classifiers.roofline import Roof
from batchscope.hardware.types import Ceilings
from batchscope.records import BatchResult, Estimate, OpStat


def _roof(op: OpStat, scale: float, ceilings: Ceilings) -> float:
    """The op's floored roof time with its batch-dependent work scaled by ``scale``."""
    moved = op.bytes.weights + (op.bytes.state + op.bytes.activations) * scale
    return Roof.of_op(ceilings, op).floored_s((op.flops or 0) * scale, moved, op.calls)


def estimate_batch(result: BatchResult, ceilings: Ceilings, batch_size: int,
                   units_per_row: int = 1) -> Estimate | None:
    """Estimate latency and throughput (units a second, ``units_per_row`` a row) at
    ``batch_size`` from a measured, profiled ``result``."""
    if not result.ops or not result.profiled_step_s or result.latency_s is None:
        return None
    scale = batch_size / result.batch_size
    op_time = 0.0
    for op in result.ops:
        if op.flops is None:
            op_time += op.time_s * scale  # no formula: assume it grows with the batch
        else:
            op_time += op.time_s * _roof(op, scale, ceilings) / _roof(op, 1.0, ceilings)
    op_time += sum(result.unmatched_ops_s.values()) * scale
    profiled = op_time + (result.framework_s or 0.0)
    # Profiled times carry the profiler's overhead; the ratio carries over to the latency.
    latency = result.latency_s.median * profiled / result.profiled_step_s
    return Estimate(batch_size, latency, batch_size * units_per_row / latency)
