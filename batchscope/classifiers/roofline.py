"""The roofline model, in one place: an op's roof time, its bound, and per-batch shares.

Every figure that compares work with this machine's ceilings goes through :class:`Roof`:
the classification of each op here, the predicted B* (:mod:`.critical_batch`) and the
estimates of ``watch`` (:mod:`.estimate`). Definitions as in DESIGN.md.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from batchscope.classifiers.data_parallel import communication_share
from batchscope.hardware.figures import AchievedPeak
from batchscope.hardware.types import FP32, Ceilings
from batchscope.op_families import is_dense
from batchscope.records import BatchResult, Bound, Flag, FlagKind, OpStat, Status, TimeShare
from batchscope.records.flags import Value
from batchscope.records.report import ResponsePoint

# An op may measure a little faster than its roof from timer resolution and the ±10% noise
# of the ceilings themselves; beyond this it is an accounting error, flagged.
ROOF_TOLERANCE = 1.15
# Working sets under the device's last-level cache (``Ceilings.cache_bytes``: a GPU's L2, the
# CPU's L3) may be served from it, which beats the DRAM roof: said in the flag, as the likely
# cause. This is the fallback where the ceilings do not know it (32 MB L3 on the trial CPUs).
CACHE_BYTES_HINT = 32 * 2**20
# A memory-bound op faster than its DRAM roof whose working set is under this many times the
# last-level cache may be partly served from it; beyond that, the bytes must be wrong.
PARTLY_CACHED = 4


@dataclass(frozen=True)
class Roof:
    """The roofline of one dtype on one machine.

    ``time_s`` is the roofline time ``max(FLOPs / peak, bytes / bandwidth)``; ``floored_s``
    adds the fixed cost of each call, ``max(roof, calls × per-op floor)``: what an op
    costs at best, measured ops included.
    """

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float  # the fixed cost of one small op: the floor under every call

    @classmethod
    def of(cls, ceilings: Ceilings, dtype: str | None) -> Roof:
        """The roof of ``dtype`` (fp32 when unknown) under ``ceilings``."""
        return cls(ceilings.peak_for(dtype or FP32), ceilings.bandwidth_bytes_per_s,
                   ceilings.overhead_s)

    @classmethod
    def of_op(cls, ceilings: Ceilings, op: OpStat) -> Roof:
        """The roof of one op: its ``roof_dtype`` (TF32 tensor cores for an fp32 matmul or
        convolution that ran on them) when set, else its dtype."""
        return cls.of(ceilings, op.roof_dtype or op.dtype)

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def time_s(self, flops: float, bytes_moved: float) -> float:
        return max(flops / self.peak_flops_per_s, bytes_moved / self.bandwidth_bytes_per_s)

    def floored_s(self, flops: float, bytes_moved: float, calls: int) -> float:
        return max(self.time_s(flops, bytes_moved), calls * self.overhead_s)


# torch.distributed's collectives as the counting pass sees them (the c10d namespace): no
# roofline of this machine's arithmetic or memory applies to bytes sent to other ranks.
COLLECTIVES = frozenset({
    "allreduce_", "allreduce_coalesced_", "broadcast_", "allgather_", "_allgather_base_",
    "allgather_into_tensor_coalesced_", "reduce_scatter_", "_reduce_scatter_base_",
    "reduce_scatter_tensor_coalesced_", "reduce_", "gather_", "scatter_", "alltoall_",
    "alltoall_base_", "send", "recv_", "barrier",
})


# When a dense kernel (a matmul or a convolution, op_families.is_dense: exact FLOPs) ran
# faster than the cached peak of its dtype, the peak was measured low (a slow minute of a
# shared VM, a slower BLAS path) and this run's own figure is the machine's. Only ops with
# at least this much profiled time count: below it the timer's granularity dominates.
ACHIEVED_MIN_TIME_S = 1e-3


def achieved_ceilings(ceilings: Ceilings, results: list[BatchResult]) -> Ceilings:
    """``ceilings`` with each dtype's peak raised to the best FLOP/s a dense op of this run
    reached where that beats it (``details.achieved_by_ops`` says which op, from what);
    the same object when no op did. An op's FLOPs are exact and its profiled time can
    only be longer than its true time, so what it reached the machine can do."""
    best: dict[str, tuple[float, OpStat, int]] = {}
    for r in results:
        for op in r.ops if r.status == Status.OK else []:
            key = op.roof_dtype or op.dtype
            if (not is_dense(op.name) or not op.flops or op.time_s < ACHIEVED_MIN_TIME_S
                    or key not in ceilings.peak_flops_per_s):
                continue
            rate = op.flops / op.time_s
            if rate > ceilings.peak_flops_per_s[key] and rate > best.get(key, (0.0,))[0]:
                best[key] = (rate, op, r.batch_size)
    if not best:
        return ceilings
    peaks = dict(ceilings.peak_flops_per_s)
    achieved = dict(ceilings.details.achieved_by_ops)
    for key, (rate, op, batch_size) in best.items():
        achieved[key] = AchievedPeak(measured_peak_flops_per_s=peaks[key], flops_per_s=rate,
                                     name=op.name, op_id=op.op_id, batch_size=batch_size)
        peaks[key] = rate
    return dataclasses.replace(
        ceilings, peak_flops_per_s=peaks,
        details=dataclasses.replace(ceilings.details, achieved_by_ops=achieved))


_ITEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def footprint_bytes(op: OpStat, bytes_per_call: float) -> float:
    """The distinct memory one call touches, for the cache test: its bytes moved, less the
    second count of the tensor an in-place op (``add_``) reads and then writes."""
    item = _ITEM_BYTES.get(op.dtype or "")
    if not op.name.endswith("_") or not op.input_shapes or item is None:
        return bytes_per_call
    elements = 1
    for d in op.input_shapes[0]:
        elements *= d
    return max(bytes_per_call - elements * item, 0.0) if op.input_shapes[0] else bytes_per_call


def classify_op(op: OpStat, ceilings: Ceilings) -> OpStat:
    """Intensity, roofline time, bound and efficiency of one op group (a new record)."""
    out = dataclasses.replace(op, flags=list(op.flags))
    if op.bound in (Bound.COMMUNICATION, Bound.TRANSFER):
        return out  # set from its kernels (a GPU trace): no roofline applies
    if op.name in COLLECTIVES:
        out.bound = Bound.COMMUNICATION  # its cost: batches[].communication_exposed_s
        return out
    if op.flops is None:
        out.bound = Bound.UNCOUNTED
        return out
    calls = max(op.calls, 1)
    total_bytes = op.bytes.total
    roof = Roof.of_op(ceilings, op)
    roof_s = roof.time_s(op.flops, total_bytes)
    out.roof_time_s = roof_s
    out.intensity = op.flops / total_bytes if total_bytes else None
    if roof_s / calls < roof.overhead_s:
        out.bound = Bound.OVERHEAD
    elif out.intensity is not None and out.intensity < roof.ridge_flops_per_byte:
        out.bound = Bound.MEMORY
    else:
        out.bound = Bound.COMPUTE
    if op.time_s > 0:
        out.efficiency = roof_s / op.time_s
        if out.efficiency > ROOF_TOLERANCE and out.bound != Bound.OVERHEAD:
            cache_bytes = ceilings.cache_bytes or CACHE_BYTES_HINT
            footprint = footprint_bytes(op, total_bytes / calls)
            values: dict[str, Value] = {"time_s": op.time_s, "roof_s": roof_s,
                                        "footprint_bytes": footprint, "cache_bytes": cache_bytes}
            if footprint < cache_bytes and out.bound == Bound.MEMORY:
                # Expected, not an error: the DRAM roof does not apply to a working set the
                # last-level cache holds.
                kind = FlagKind.SERVED_FROM_CACHE
            elif footprint < PARTLY_CACHED * cache_bytes and out.bound == Bound.MEMORY:
                # A working set a few times the cache: what the op before it wrote may still
                # be there (a gradient summed right after it was computed).
                kind = FlagKind.PARTLY_FROM_CACHE
            else:
                kind = FlagKind.ACCOUNTING_ERROR
            out.flags.append(Flag(kind, op_id=op.op_id, values=values))
    return out


def time_share(result: BatchResult) -> TimeShare | None:
    """Shares of the profiled step time by bound.

    On the CPU the gaps between ops are framework time. On a GPU (``time_basis ==
    "device"``) op times are kernel times, the step is the device's, and the time it ran
    nothing is idle (launch-bound when large); communication counts only where it was not
    hidden behind other kernels, so the shares still sum to 1.
    """
    step = result.profiled_step_s
    if not step or not result.ops:
        return None
    by_bound = dict.fromkeys(Bound, 0.0)
    for op in result.ops:
        by_bound[op.bound] += op.time_s
    unmatched = sum(result.unmatched_ops_s.values())
    exposed = max(by_bound[Bound.COMMUNICATION] - (result.communication_overlapped_s or 0.0), 0.0)
    framework = result.framework_s or 0.0
    if result.communication_exposed_s and result.time_basis == "cpu":
        # A data-parallel CPU step (gloo): DDP waits for its all-reduce at the end of
        # backward in C++ with no aten op around it, so the profile shows the wait as time
        # between ops; what the timed steps say it costs moves from there to communication,
        # as the same share of the step data_parallel reports (one function computes both),
        # so the report has one communication figure, not two. Without a latency to share
        # it against, the exposed time itself.
        share = communication_share(result)
        cost_s = share * step if share is not None else result.communication_exposed_s
        moved = min(cost_s, framework)
        exposed, framework = exposed + moved, framework - moved
    return TimeShare(
        memory=by_bound[Bound.MEMORY] / step,
        compute=by_bound[Bound.COMPUTE] / step,
        overhead=by_bound[Bound.OVERHEAD] / step,
        uncounted=(by_bound[Bound.UNCOUNTED] + unmatched) / step,
        framework=framework / step,
        communication=exposed / step,
        transfer=by_bound[Bound.TRANSFER] / step,
        idle=(result.device_idle_s or 0.0) / step,
    )


def classify_batch(result: BatchResult, ceilings: Ceilings) -> BatchResult:
    """A copy of ``result`` with every op classified and the time shares filled."""
    out = dataclasses.replace(result, ops=[classify_op(op, ceilings) for op in result.ops])
    out.time_share = time_share(out)
    predicted = [Roof.of_op(ceilings, op).floored_s(op.flops, op.bytes.total, op.calls)
                 for op in out.ops if op.flops is not None]
    out.predicted_step_s = sum(predicted) if predicted else None
    return out


def batch_response(results: list[BatchResult]) -> dict[str, list[ResponsePoint]]:
    """Per op across batch sizes: time per batch row against b (the batch-response curve).

    Keyed by ``op_id``: the same op at every batch size (see ``profiler.join.op_ids``).
    """
    curves: dict[str, list[ResponsePoint]] = {}
    for r in results:
        for op in r.ops:
            curves.setdefault(op.op_id, []).append(
                ResponsePoint(r.batch_size, op.time_s / r.batch_size))
    return curves
