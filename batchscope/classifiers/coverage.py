"""How much of a step ran in ops nobody counted: the hole every count-based figure names.

FLOPs and bytes are exact where an op is counted; an op with no count (no formula, no
decomposition that runs on meta tensors: ``OpStat.flops`` None) or a profiled op the
counting pass never saw (``BatchResult.unmatched_ops_s``) is work the totals leave out.
Where such ops take :data:`HOLE_SHARE` of a step or more, every figure that reads the
counts says so: the headline, ``compare``'s work gate (which then cannot call the work the
same), B*, the step-time model and its predicted pick, the sweep's predicted stop and
``watch``'s estimates. Inductor's fused kernels are not a hole: the ops they fused were
counted on the eager module, only their time is the kernels'.

Example:
    >>> from batchscope.records import BatchResult, ByteSplit, OpStat, Status
    >>> fused = OpStat("k", "_transformer_encoder_layer_fwd", [], "float32", "", 4, 0.9,
    ...                None, ByteSplit())
    >>> head = OpStat("h", "addmm", [], "float32", "", 1, 0.05, 10, ByteSplit())
    >>> r = BatchResult(1, Status.OK, ops=[fused, head], profiled_step_s=1.0)
    >>> hole = uncounted_work([r])
    >>> round(hole.share, 2), hole.ops
    (0.9, ['_transformer_encoder_layer_fwd'])
"""

from __future__ import annotations

from collections import defaultdict

from batchscope.records import FUSED_KERNEL_PREFIX, FUSED_KERNELS, BatchResult, Status
from batchscope.records.report import UncountedWork

# Uncounted ops taking this share of a step leave a hole every count-based figure must
# name: the largest error the roofline's exact counts tolerate in a step time (the timing's
# own noise is 5-10% on these machines), and the threshold.
HOLE_SHARE = 0.05
# How many of the uncounted ops a sentence names, largest first.
NAMED_OPS = 4


def _is_fused_kernel(name: str) -> bool:
    return name == FUSED_KERNELS or name.startswith(FUSED_KERNEL_PREFIX)


def uncounted_times_s(result: BatchResult) -> dict[str, float]:
    """Seconds a step spent in each op that was not counted, by name."""
    times: dict[str, float] = defaultdict(float)
    for op in result.ops:
        if op.flops is None:
            times[op.name] += op.time_s
    for name, seconds in result.unmatched_ops_s.items():
        if not _is_fused_kernel(name):
            times[name] += seconds
    return dict(times)


def uncounted_share(result: BatchResult | None) -> float | None:
    """The share of ``result``'s profiled step in uncounted ops; None where no op
    breakdown ran (nothing to judge)."""
    if result is None or result.status != Status.OK or not result.ops \
            or not result.profiled_step_s:
        return None
    return min(sum(uncounted_times_s(result).values()) / result.profiled_step_s, 1.0)


def has_hole(result: BatchResult | None) -> bool:
    """True where uncounted ops took :data:`HOLE_SHARE` of the step or more."""
    share = uncounted_share(result)
    return share is not None and share >= HOLE_SHARE


def uncounted_work(results: list[BatchResult]) -> UncountedWork | None:
    """The batch size whose step ran the largest share in uncounted ops, where that is
    :data:`HOLE_SHARE` or more; None where every step was counted (or none profiled)."""
    judged = [(share, r) for r in results if (share := uncounted_share(r)) is not None]
    if not judged:
        return None
    share, worst = max(judged, key=lambda item: item[0])
    if share < HOLE_SHARE:
        return None
    times = sorted(uncounted_times_s(worst).items(), key=lambda kv: -kv[1])[:NAMED_OPS]
    step_s = worst.profiled_step_s or 1.0
    return UncountedWork(share=share, batch_size=worst.batch_size,
                         ops=[name for name, _ in times],
                         op_shares=[seconds / step_s for _, seconds in times],
                         batch_sizes=[r.batch_size for s, r in judged if s >= HOLE_SHARE])
