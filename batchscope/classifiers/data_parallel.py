"""Data-parallel figures: communication as its own bound, the global batch, stragglers.

A DDP step all-reduces every gradient once, whatever the per-rank batch: the same bytes at
batch 1 and at batch 512. So communication amortizes over the per-rank batch as a decode
step's weight read amortizes over its rows: its share of the step falls as the batch grows,
until memory stops the batch and gradient accumulation takes over (fewer all-reduces per
sample, at the cost of more micro-steps).

What is measured (profiler/ranks.py): each rank's median step with the all-reduce and under
DDP's ``no_sync()`` (no all-reduce), so ``communication_exposed_s`` is what the all-reduce
adds to a step, the part backward did not hide; the all-reduce bus bandwidth (nccl-tests'
``busbw``) at the start of the run, which puts the gradient bytes on a time axis: the
all-reduce's own duration at that bandwidth, most of which backward hides.
"""

from __future__ import annotations

import dataclasses
import math

from batchscope.records import BatchResult, DataParallel, ModelInfo, Status
from batchscope.records.report import DataParallelBatch, DataParallelPick


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
                          global_batch: int | None) -> DataParallel | None:
    """report.json ``distributed``: per batch size the global batch and throughput, the
    communication exposed and its share, the slowest rank; and the recommendation's
    global batch (with ``global_batch``: the accumulation steps that reach it)."""
    dist = model.distributed
    if dist is None:
        return None
    world = dist.world_size
    busbw = dist.bus_bandwidth.busbw_bytes_per_s if dist.bus_bandwidth else 0.0
    grads = dist.allreduce_bytes_per_step
    allreduce_s = allreduce_time_s(grads, world, busbw)
    rows = []
    for r in batches:
        if r.status != Status.OK or r.latency_s is None:
            continue
        timed = [(x.rank, x.latency_s) for x in r.ranks if x.latency_s is not None]
        slowest = max(timed, key=lambda x: x[1]) if timed else None
        fastest = min(timed, key=lambda x: x[1]) if timed else None
        exposed = r.communication_exposed_s
        rows.append(DataParallelBatch(
            batch_size=r.batch_size,
            global_batch=r.batch_size * world,
            global_throughput_per_s=(r.batch_size * world * model.units_per_row
                                     / r.latency_s.median),
            communication_exposed_s=exposed,
            communication_share=exposed / r.latency_s.median if exposed is not None else None,
            allreduce_at_bus_bandwidth_s=allreduce_s or None,
            hidden_share=(max(1 - exposed / allreduce_s, 0.0)
                          if exposed is not None and allreduce_s else None),
            slowest_rank=slowest[0] if slowest else None,
            straggler_lag_s=slowest[1] - fastest[1] if slowest and fastest else None,
        ))
    pick = None
    row = next((x for x in rows if x.batch_size == recommended), None)
    if row is not None and recommended is not None:
        per_step = row.global_batch
        exposed_s = row.communication_exposed_s or 0.0
        pick = DataParallelPick(per_rank_batch=recommended, global_batch=per_step,
                                communication_per_sample_s=exposed_s / per_step)
        if global_batch is not None:
            steps = accumulation_steps(global_batch, per_step)
            pick = dataclasses.replace(
                pick, global_batch_target=global_batch, accumulation_steps=steps,
                global_batch_reached=steps * per_step,
                # One all-reduce per accumulated step (no_sync() on the others).
                communication_per_sample_with_accumulation_s=exposed_s / (steps * per_step))
    return DataParallel(world_size=world, nodes=dist.nodes, backend=dist.backend,
                        wrapped_by=dist.wrapped_by, allreduce_bytes_per_step=grads,
                        bus_bandwidth_bytes_per_s=busbw or None, batches=rows,
                        recommendation=pick)
