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

import math
from typing import Any

from batchscope.records import BatchResult, Status


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


def data_parallel_summary(info: dict[str, Any], batches: list[BatchResult],
                          recommended: int | None,
                          global_batch: int | None) -> dict[str, Any] | None:
    """report.json ``distributed``: per batch size the global batch and throughput, the
    communication exposed and its share, the slowest rank; and the recommendation's
    global batch (with ``global_batch``: the accumulation steps that reach it)."""
    dist = info.get("distributed")
    if not dist:
        return None
    world = int(dist["world_size"])
    busbw = (dist.get("bus_bandwidth") or {}).get("busbw_bytes_per_s") or 0.0
    grads = int(dist.get("allreduce_bytes_per_step") or 0)
    allreduce_s = allreduce_time_s(grads, world, busbw)
    rows = []
    for r in batches:
        if r.status != Status.OK or r.latency_s is None:
            continue
        ranks = [x for x in r.ranks if x.latency_s is not None]
        slowest = max(ranks, key=lambda x: x.latency_s) if ranks else None
        fastest = min(ranks, key=lambda x: x.latency_s) if ranks else None
        exposed = r.communication_exposed_s
        rows.append({
            "batch_size": r.batch_size,
            "global_batch": r.batch_size * world,
            "global_throughput_per_s": (r.batch_size * world * int(info.get("units_per_row") or 1)
                                        / r.latency_s.median),
            "communication_exposed_s": exposed,
            "communication_share": (exposed / r.latency_s.median
                                    if exposed is not None else None),
            "allreduce_at_bus_bandwidth_s": allreduce_s or None,
            "hidden_share": (max(1 - exposed / allreduce_s, 0.0)
                             if exposed is not None and allreduce_s else None),
            "slowest_rank": slowest.rank if slowest else None,
            "straggler_lag_s": (slowest.latency_s - fastest.latency_s
                                if slowest and fastest else None),
        })
    out: dict[str, Any] = {
        "world_size": world,
        "nodes": dist.get("nodes", 1),
        "backend": dist.get("backend"),
        "wrapped_by": dist.get("wrapped_by"),
        "allreduce_bytes_per_step": grads,
        "bus_bandwidth_bytes_per_s": busbw or None,
        "bus_bandwidth": dist.get("bus_bandwidth"),
        "batches": rows,
        "recommendation": None,
    }
    row = next((x for x in rows if x["batch_size"] == recommended), None)
    if row is not None:
        per_step = row["global_batch"]
        rec: dict[str, Any] = {
            "per_rank_batch": recommended,
            "global_batch": per_step,
            "communication_per_sample_s": ((row["communication_exposed_s"] or 0.0) / per_step),
        }
        if global_batch is not None:
            steps = accumulation_steps(global_batch, per_step)
            rec.update({
                "global_batch_target": global_batch,
                "accumulation_steps": steps,
                "global_batch_reached": steps * per_step,
                # One all-reduce per accumulated step (no_sync() on the others).
                "communication_per_sample_with_accumulation_s":
                    (row["communication_exposed_s"] or 0.0) / (steps * per_step),
            })
        out["recommendation"] = rec
    return out
