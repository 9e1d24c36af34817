"""``diagnose trace``: the sweep's report, from profiler traces users already have.

One trace per batch size (in the order of ``--batch-sizes``), or several traces of the same
step from different ranks (``distributedInfo.rank``), analysed per rank with the slowest
named; the report shows the slowest rank, which sets the pace of a synchronous step. The
roofs are datasheet figures of the GPU named in ``deviceProperties``, labelled as such.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.kernel_roofline import counters_section
from batchscope.classifiers.roofline import time_share
from batchscope.errors import ExitCode, UsageError
from batchscope.hardware.figures import CeilingDetails
from batchscope.hardware.gpu_specs import lookup
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits
from batchscope.records import (
    BatchResult,
    Flag,
    ModelInfo,
    Report,
    RunInfo,
    Source,
    Stop,
)
from batchscope.records.counter_report import DEFAULT_KERNEL_FLOOR_S as KERNEL_FLOOR_S
from batchscope.records.flag_payloads import (
    GpuNotInDatasheets,
    SlowestRank,
    TraceNotRead,
    TracesOnDifferentGpus,
    TracesStop,
)
from batchscope.records.report import Mode, TraceFile, TraceRank
from batchscope.reports import write_all
from batchscope.traces.analysis import (
    dominant_dtype,
    has_backward,
    kernel_floor_s,
    missing_pieces,
    trace_result,
)
from batchscope.traces.kineto import KinetoTrace, TraceUnreadable, load_trace
from batchscope.traces.ncu_diagnose import read_exports
from batchscope.traces.ncu_join import join_ops
from batchscope.traces.timeline import build_timeline
from batchscope.version import __version__

# Per-op floor when a trace has no kernels to measure it from.
DEFAULT_KERNEL_FLOOR_S = KERNEL_FLOOR_S


class NoTraceReadable(UsageError):
    """None of the traces could be read (exit 4)."""

    exit_code = ExitCode.USAGE


@dataclass
class TraceAnalysis:
    """One trace's analysis: which rank, its result (the flags of what it lacked among the
    result's own) and the GPU it names."""

    path: str
    rank: int | None
    result: BatchResult
    device_name: str | None


def datasheet_ceilings(trace: KinetoTrace) -> Ceilings | None:
    """The roofs of the GPU the trace names, from its datasheet (never measured here)."""
    name = trace.device_name()
    if not name:
        return None
    spec = lookup(name, memory_bytes=trace.device_memory_bytes())
    if spec is None:
        return None
    floor_s = kernel_floor_s(trace)
    return Ceilings(
        device="cuda",
        name=name,
        peak_flops_per_s=dict(spec.peak_flops_per_s),
        bandwidth_bytes_per_s=spec.bandwidth_bytes_per_s,
        overhead_s=floor_s if floor_s is not None else DEFAULT_KERNEL_FLOOR_S,
        source="datasheet",
        key=f"datasheet:{spec.product}",
        # Dense, boost-clock figures, never measured (real kernels reach 60-90% of them);
        # the per-op floor is the 5th percentile of the trace's kernel durations, or a
        # near-empty kernel's time where the trace has no kernels.
        details=CeilingDetails(kernel_floor_from_trace=floor_s is not None),
        spec=spec,
        cache_bytes=spec.l2_bytes,
    )


def _analyse(trace: KinetoTrace, batch_size: int, known: bool) -> TraceAnalysis:
    timeline = build_timeline(trace)
    result = trace_result(trace, timeline, batch_size, known)
    result = dataclasses.replace(result, flags=[*result.flags,
                                                *missing_pieces(trace, timeline)])
    return TraceAnalysis(path=trace.path, rank=trace.rank, result=result,
                         device_name=trace.device_name())


def _batch_plan(traces: Sequence[KinetoTrace], batch_sizes: Sequence[int] | None
                ) -> list[tuple[int, list[KinetoTrace]]]:
    """(batch size, the traces of that batch size) in the order given."""
    if batch_sizes is not None:
        if len(batch_sizes) != len(traces):
            raise UsageError(f"--batch-sizes gives {len(batch_sizes)} sizes for {len(traces)} "
                             "readable traces; give one batch size per trace, in order.")
        plan: dict[int, list[KinetoTrace]] = {}
        for size, trace in zip(batch_sizes, traces, strict=True):
            plan.setdefault(size, []).append(trace)
        return list(plan.items())
    ranks = [t.rank for t in traces]
    if len(traces) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        raise UsageError("several traces without --batch-sizes must be ranks of one step "
                         "(each with its own distributedInfo.rank); otherwise give "
                         "--batch-sizes, one per trace.")
    return [(1, list(traces))]


def _rank_rows(ranks: list[TraceAnalysis], slowest: TraceAnalysis) -> list[TraceRank]:
    rows = []
    for r in ranks:
        result = r.result
        share = time_share(result)
        rows.append(TraceRank(
            rank=r.rank,
            trace=Path(r.path).name,
            step_s=result.latency_s.median if result.latency_s else None,
            device_busy_s=(result.profiled_step_s or 0.0) - (result.device_idle_s or 0.0),
            idle_share=share.idle if share else None,
            communication_share=share.communication if share else None,
            device=r.device_name,
            slowest=r is slowest,
        ))
    return rows


def _slowest(ranks: list[TraceAnalysis]) -> TraceAnalysis:
    return max(ranks, key=lambda r: r.result.latency_s.median if r.result.latency_s else 0.0)


def _gpu_flags(traces: list[KinetoTrace], ceilings: Ceilings | None) -> list[Flag]:
    """What the roofs cannot say: traces of different GPUs (the first one's roofs apply),
    or a GPU the datasheets do not list."""
    first = traces[0]
    flags = []
    names = sorted({t.device_name() or "unknown" for t in traces})
    if len(names) > 1:
        flags.append(Flag.of(TracesOnDifferentGpus(
            gpus=list(names), roofs_of=first.device_name() or "unknown")))
    if ceilings is None and first.device_name() and first.device_events:
        flags.append(Flag.of(GpuNotInDatasheets(gpu=first.device_name() or "")))
    return flags


def diagnose_traces(paths: Sequence[str | Path], batch_sizes: Sequence[int] | None = None,
                    out_dir: str | None = None,
                    ncu_paths: Sequence[str | Path] = ()) -> Report:
    """Analyse recorded profiler traces; write report.json/html and summary.md to ``out_dir``.

    Example:
        >>> report = diagnose_traces(["rank0.json.gz"], [64], out_dir="out")  # doctest: +SKIP
        >>> report.batches[0].time_share.idle  # doctest: +SKIP

    Raises:
        NoTraceReadable: no file could be read as a trace (exit 4).
        UsageError: the batch sizes do not fit the traces, or an ``ncu_paths`` file is not
            a Nsight Compute CSV export (exit 4).

    With ``ncu_paths`` (``--ncu``), the first trace's ops are joined to the kernel launches
    those exports profiled (traces/ncu_join.py): report.json ``counters`` holds both, the
    ops' measured bytes and FLOPs beside the modelled ones, and a flag says where the
    measured intensity puts an op under another bound.
    """
    started = time.time()
    export = read_exports(ncu_paths) if ncu_paths else None
    traces: list[KinetoTrace] = []
    unreadable: list[str] = []
    for path in paths:
        try:
            traces.append(load_trace(path))
        except TraceUnreadable as exc:
            unreadable.append(str(exc))
    if not traces:
        raise NoTraceReadable(unreadable[0] if len(unreadable) == 1 else
                              "no trace could be read: " + "; ".join(unreadable))
    known = batch_sizes is not None
    plan = _batch_plan(traces, batch_sizes)
    results: list[BatchResult] = []
    per_rank: dict[int, list[TraceRank]] = {}
    for size, group in plan:
        ranks = [_analyse(t, size, known) for t in group]
        slowest = _slowest(ranks)
        result = slowest.result
        if len(ranks) > 1:
            per_rank[size] = _rank_rows(ranks, slowest)
            result = dataclasses.replace(result, flags=[*result.flags, Flag.of(
                SlowestRank(rank=slowest.rank, ranks=len(ranks),
                            trace=Path(slowest.path).name))])
        results.append(result)
    first = traces[0]
    # A GPU's roofs apply to kernel times only: a CPU-only trace gets none.
    ceilings = datasheet_ceilings(first) if first.device_events else None
    flags = [Flag.of(TraceNotRead(error=message))
             for message in unreadable]
    flags += _gpu_flags(traces, ceilings)
    dtype = dominant_dtype(first)
    model = ModelInfo(
        target=", ".join(Path(p).name for p in paths),
        mode=Mode.TRAIN if has_backward(first) else Mode.INFERENCE,
        unit="sample",
        dtype=dtype or None,
        device=first.device_name() or "unknown",
    )
    run = RunInfo(
        source=Source.TRACE,
        tool_version=__version__,
        started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
        traces=[TraceFile(path=t.path, rank=t.rank, world_size=t.world_size,
                          device=t.device_name()) for t in traces],
        batch_size_known=known,
        ranks=per_rank,
        wall_s=time.time() - started,
    )
    counters = None
    if export is not None:
        first_size = plan[0][0]
        names = {op.op_id: op.name for r in results if r.batch_size == first_size
                 for op in r.ops}
        counters = dataclasses.replace(
            counters_section(export, ceilings.spec if ceilings is not None else None),
            ops=join_ops(first, export, names), batch_size=first_size)
    report = assemble(Measured(
        model=model, run=run, ceilings=ceilings, results=results,
        limits=Limits(max_batch=max(size for size, _ in plan)),
        stop=Stop.of(TracesStop()), flags=flags,
        recommends=known,  # one trace of an unknown batch size recommends nothing
        counters=counters,
    ))
    if out_dir is not None:
        write_all(report, out_dir)
    return report
