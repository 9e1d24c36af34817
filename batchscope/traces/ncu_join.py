"""Nsight Compute's launches joined to a trace's ops (``diagnose trace TRACE --ncu CSV``).

The two tools demangle kernel names differently (ncu's ``<unnamed>`` and ``(int)4`` against
Kineto's ``(anonymous namespace)`` and ``4``), so names are compared normalised
(:func:`batchscope.profiler.ncu_export.normalise_kernel_name`). Within one normalised name, the
profiled launches (in ncu's ID order) are paired with the trace's kernels of that name in
launch order: the first ``vectorized_elementwise_kernel`` ncu profiled with the first one
the trace's steps launched, and so on. Where ncu profiled fewer launches than the trace
holds (``--launch-count``), the rest stay unmatched, and an op's measured figures are its
matched launches' scaled to all of its launches; the ``matched`` count says how much that
rests on.
"""

from __future__ import annotations

from collections import defaultdict, deque
from dataclasses import dataclass

from batchscope.profiler.ncu_export import normalise_kernel_name
from batchscope.records.counter_report import OpCounters
from batchscope.records.counters import KernelCounters, NcuExport
from batchscope.traces.analysis import kernel_launches
from batchscope.traces.kineto import KinetoTrace
from batchscope.traces.timeline import build_timeline


@dataclass
class _OpSums:
    name: str
    launches: int = 0
    matched: int = 0
    dram_bytes: float = 0.0
    dram_known: int = 0
    flops: float = 0.0
    flops_known: int = 0
    flops_complete: bool = True


def _launch_order(kernel: KernelCounters) -> tuple[str, int, str]:
    try:
        number = int(kernel.launch_id)
    except ValueError:
        number = -1
    return (kernel.process_id, number, kernel.launch_id)


def join_ops(trace: KinetoTrace, export: NcuExport, op_names: dict[str, str]
             ) -> list[OpCounters]:
    """Every op of ``trace`` that launched a kernel, with its launches' measured DRAM bytes
    and FLOPs per step (unjudged: the classifiers add the modelled figures and bounds).
    ``op_names`` maps the report's op ids to their names (ops missing from it keep their
    id as the name). Ops with no matched launch are left out.

    Example:
        >>> ops = join_ops(load_trace("t.json"), read_ncu_exports(["n.csv"]), {})
        ... # doctest: +SKIP
    """
    timeline = build_timeline(trace)
    steps = max(len([s for s in timeline.steps if s.launched or s.unattributed]), 1)
    profiled: dict[str, deque[KernelCounters]] = defaultdict(deque)
    for kernel in sorted(export.kernels, key=_launch_order):
        profiled[kernel.normalised_name].append(kernel)
    sums: dict[str, _OpSums] = {}
    for op_id, event in kernel_launches(trace, timeline):
        entry = sums.setdefault(op_id, _OpSums(op_names.get(op_id, op_id)))
        entry.launches += 1
        queue = profiled.get(normalise_kernel_name(str(event.get("name", ""))))
        if not queue:
            continue
        kernel = queue.popleft()
        entry.matched += 1
        if kernel.dram_bytes is not None:
            entry.dram_bytes += kernel.dram_bytes
            entry.dram_known += 1
        if kernel.flops is not None:
            entry.flops += kernel.flops
            entry.flops_known += 1
        entry.flops_complete &= kernel.flops_complete
    out = []
    for op_id, entry in sums.items():
        if entry.matched == 0:
            continue
        out.append(OpCounters(
            op_id=op_id, name=entry.name, launches=entry.launches, matched=entry.matched,
            dram_bytes=(entry.dram_bytes * entry.launches / entry.dram_known / steps
                        if entry.dram_known else None),
            flops=(entry.flops * entry.launches / entry.flops_known / steps
                   if entry.flops_known else None),
            flops_complete=entry.flops_complete and entry.flops_known == entry.matched,
        ))
    return out
