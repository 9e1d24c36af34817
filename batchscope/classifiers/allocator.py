"""The allocator's share of a CPU step: page faults, and the side-by-side re-timing.

glibc's malloc serves blocks above its mmap threshold (at most 32 MiB unless the environment
raises it) with fresh mappings and hands them back on free, so a model whose activations are
large faults them in again every step. A user's long-running process with the same allocator
pays the same faults, so the sweep's figures are what that process sees. When the faults
take a notable share of a step, the sweep times the same batch sizes once more in a worker
whose allocator keeps its buffers (glibc told through ``mallopt`` in the sweep's own worker,
else a fresh worker started with ``KEPT_BUFFERS_ENV``), and the report puts both side by
side: what the user's job sees as it is, and what it would see with the remedy, with the
batch size each would be recommended.
"""

from __future__ import annotations

import dataclasses

from batchscope.classifiers.recommend import recommend
from batchscope.classifiers.uncertainty import DRIFT_FLOOR, latency_interval, ratio
from batchscope.page_faults import PAGE_BYTES as PAGE_BYTES
from batchscope.page_faults import PAGE_FAULT_COST_S as PAGE_FAULT_COST_S
from batchscope.page_faults import fault_share
from batchscope.plan import Limits
from batchscope.profiler.worker_config import KEPT_BUFFERS_ENV
from batchscope.records import BatchResult, Flag, Interval, LatencyStats, Status
from batchscope.records.flag_payloads import PageFaults
from batchscope.records.report import AllocatorCheck, AllocatorSetBy, KeptBatch

# Flag a batch size whose page faults would take at least this share of its step.
PAGE_FAULT_FLAG_SHARE = 0.05
# A batch size whose kept-buffers run still faults more than this share of the default
# run's faults did not take the setting (another allocator, or a libc that ignores it).
NOT_TAKEN_SHARE = 0.5


def page_fault_share(r: BatchResult) -> float | None:
    """The estimated share of a batch size's step its page faults take, or None."""
    return fault_share(r.page_faults_per_step,
                       r.latency_s.median if r.latency_s is not None else None)


def page_fault_flags(results: list[BatchResult]) -> list[Flag]:
    """One flag for the batch sizes that map and fault in enough memory every step to cost a
    noticeable share of it: the allocator is handing buffers back to the OS between steps."""
    hit = [(r.batch_size, r.page_faults_per_step or 0.0, share) for r in results
           if (share := page_fault_share(r)) is not None and share >= PAGE_FAULT_FLAG_SHARE]
    if not hit:
        return []
    return [Flag.of(PageFaults(
        batch_sizes=[b for b, _, _ in hit], faults=[f for _, f, _ in hit],
        shares=[s for _, _, s in hit], page_bytes=PAGE_BYTES,
        cost_s=PAGE_FAULT_COST_S))]


def retime_sizes(results: list[BatchResult]) -> list[int]:
    """The batch sizes to time again with the allocator keeping its buffers: none unless one
    is flagged; then every measured size, so that the pick with the buffers kept compares
    like with like (a size that faults little by the count may still run faster: a
    MobileNetV2-shaped net's batches 2 and 4 were under 1%)."""
    sizes = [r.batch_size for r in results if r.status == Status.OK and r.latency_s is not None]
    if not any((page_fault_share(r) or 0.0) >= PAGE_FAULT_FLAG_SHARE for r in results):
        return []
    return sorted(sizes)


def _with_estimated_savings(results: list[BatchResult]) -> list[BatchResult]:
    """Each result's throughput as if its page faults cost nothing (the estimate)."""
    out = []
    for r in results:
        share = page_fault_share(r) or 0.0
        out.append(dataclasses.replace(r, throughput_per_s=r.throughput_per_s
                                       / max(1.0 - min(share, 0.9), 0.1),
                                       latency_interval_s=None, throughput_interval_per_s=None)
                   if r.throughput_per_s else r)
    return out


def _with_kept(results: list[BatchResult], kept: list[BatchResult]) -> list[BatchResult]:
    """The sweep's results with the kept-buffers figures where they were measured; a size
    whose re-timing failed (or never ran: the sweep was stopped) keeps its own figures."""
    by_size = {k.batch_size: k for k in kept if k.status == Status.OK and k.throughput_per_s}
    return [dataclasses.replace(r, throughput_per_s=by_size[r.batch_size].throughput_per_s,
                                latency_s=by_size[r.batch_size].latency_s,
                                latency_interval_s=None, throughput_interval_per_s=None)
            if r.batch_size in by_size and r.status == Status.OK else r for r in results]


def pick_without_page_faults(results: list[BatchResult], limits: Limits, objective: str,
                             kept: list[BatchResult] | None = None,
                             allowance: float = DRIFT_FLOOR) -> int | None:
    """The batch size the rule picks for a process whose allocator keeps its buffers: from
    the kept-buffers re-timing where it ran, else estimated at ``PAGE_FAULT_COST_S`` a fault;
    None when no batch size faults enough to be flagged."""
    if not retime_sizes(results):
        return None
    ok_kept = [k for k in kept or [] if k.status == Status.OK]
    alternative = _with_kept(results, ok_kept) if ok_kept else _with_estimated_savings(results)
    choice = recommend(alternative, limits, objective, allowance)
    return choice.batch_size if choice else None


def allocator_summary(results: list[BatchResult], kept: list[BatchResult], limits: Limits,
                      objective: str, set_by: AllocatorSetBy | None = None,
                      allowance: float = DRIFT_FLOOR) -> AllocatorCheck | None:
    """report.json ``allocator``: both allocators side by side at every re-timed batch size,
    the pick with the buffers kept and the cost of a fault measured on this machine; None
    when nothing was re-timed. ``set_by``: how the re-timing's allocator was told to keep
    its buffers (mallopt in the sweep's worker, or a fresh worker's environment); each
    size's gain comes with its 95% interval, both timings widened by ``allowance``."""
    if not kept:
        return None
    default = {r.batch_size: r for r in results}
    rows: list[KeptBatch] = []
    saved_s, saved_faults = 0.0, 0.0
    for k in kept:
        d = default.get(k.batch_size)
        if k.status != Status.OK or d is None or d.latency_s is None or k.latency_s is None:
            rows.append(KeptBatch(k.batch_size, k.status,
                                  error=k.error.splitlines()[0] if k.error else ""))
            continue
        faults_d, faults_k = d.page_faults_per_step or 0.0, k.page_faults_per_step or 0.0
        # A size that never faulted says nothing about whether the setting was taken.
        taken = faults_k <= NOT_TAKEN_SHARE * faults_d if faults_d > 0 else None
        rows.append(KeptBatch(
            k.batch_size, k.status,
            latency_s=d.latency_s.median, kept_latency_s=k.latency_s.median,
            kept_timed_steps=k.latency_s.n,
            throughput_per_s=d.throughput_per_s, kept_throughput_per_s=k.throughput_per_s,
            page_faults_per_step=faults_d, kept_page_faults_per_step=faults_k,
            speedup=d.latency_s.median / k.latency_s.median if k.latency_s.median > 0 else None,
            speedup_interval=_gain_interval(d.latency_s, k.latency_s, allowance),
            taken=taken))
        if taken and faults_d - faults_k > 0:
            saved_s += d.latency_s.median - k.latency_s.median
            saved_faults += faults_d - faults_k
    merged = _with_kept(results, [k for k in kept if k.status == Status.OK])
    choice = recommend(merged, limits, objective, allowance)
    chosen = next((r for r in merged if choice and r.batch_size == choice.batch_size), None)
    return AllocatorCheck(
        env=dict(KEPT_BUFFERS_ENV),  # what a user sets to keep them
        set_by=set_by,
        batches=rows,
        batch_size=choice.batch_size if choice else None,
        throughput_per_s=chosen.throughput_per_s if chosen else None,
        # Seconds one fault cost here: step time saved per fault avoided, over every
        # re-timed size that took the setting (None when none saved time).
        cost_per_fault_s=saved_s / saved_faults if saved_faults > 0 and saved_s > 0 else None,
        taken=any(r.taken for r in rows),
    )


def _gain_interval(default: LatencyStats, kept: LatencyStats, allowance: float) -> Interval:
    """The 95% interval of the kept buffers' speedup (default step over kept step)."""
    _, interval = ratio((default.median, latency_interval(default, allowance)),
                        (kept.median, latency_interval(kept, allowance)))
    return interval
