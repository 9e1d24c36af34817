"""One recorded trace -> one :class:`~batchscope.records.BatchResult`, as the sweep makes.

Per step (``ProfilerStep#N``, or the whole trace), each device event is attributed to the op
that launched it (:mod:`.timeline`); each such op is counted from its recorded shapes
(:mod:`.recorded_ops`), climbing to the nearest enclosing op that can be counted
(``aten::cudnn_convolution`` has no formula of its own; ``aten::convolution`` around it has).
Calls are grouped per op name, shapes and dtype and averaged over the steps, as the sweep's
join does; the classifiers and reports then treat the result like a measured batch size.

What a trace cannot give is said, not guessed: the batch size (unless told), which tensors
are weights (bytes stay ``unsplit``), a step latency without the profiler attached (the
step is the device's, from the trace).
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from batchscope.profiler.join import _shape_key as shape_key
from batchscope.profiler.join import call_args_key, op_ids
from batchscope.profiler.timing import latency_stats
from batchscope.records import (
    BatchResult,
    Bound,
    ByteSplit,
    CountedOp,
    Flag,
    KernelStat,
    OpStat,
    Status,
    TimeBasis,
)
from batchscope.records.flag_payloads import TraceIncomplete
from batchscope.records.flags import TraceGap
from batchscope.traces.kineto import KinetoTrace
from batchscope.traces.recorded_ops import DTYPES, Recorded, count_recorded
from batchscope.traces.timeline import (
    NO_OP,
    DeviceKind,
    Launched,
    Timeline,
    TraceStep,
    device_kind,
)

# Kernel names of fp32 GEMMs and convolutions on TF32 tensor cores (cuBLAS/CUTLASS/cuDNN):
# "cutlass_80_tensorop_s1688gemm_...", "sm80_xmma_gemm_f32f32_tf32f32_f32_...".
_TF32_KERNEL = re.compile(r"tf32|tensorop_s\d{3,5}|_s1688|_s16816", re.IGNORECASE)
KERNEL_FLOOR_PERCENTILE = 0.05
KERNELS_KEPT = 3  # per op, the longest kernels named in the report
KERNEL_NAME_CHARS = 200
_BACKWARD = re.compile(r"Backward|autograd::engine")

# What a trace may lack is a records.flags.TraceGap (a TRACE_INCOMPLETE flag's ``missing``;
# reports/flag_text.py says what each costs the analysis).
MISSING_TRUNCATED = TraceGap.TRUNCATED
MISSING_KERNELS = TraceGap.NO_KERNELS
MISSING_LAUNCHES = TraceGap.NO_LAUNCHES
MISSING_SHAPES = TraceGap.NO_SHAPES
MISSING_STEPS = TraceGap.NO_STEPS
MISSING_DEVICE = TraceGap.NO_DEVICE


@dataclass
class _Group:
    """One op group over all steps (sums; divided by the steps at the end)."""

    op_id: str
    counted: CountedOp
    calls: int = 0
    time_s: float = 0.0
    flops: int = 0
    uncounted: bool = False
    bytes: ByteSplit = field(default_factory=ByteSplit)
    kernels: dict[str, list[float]] = field(default_factory=dict)  # name -> [calls, seconds]
    kinds: set[str] = field(default_factory=set)


def dominant_dtype(trace: KinetoTrace) -> str:
    """The floating-point dtype most ops' first tensor has ("bfloat16"), or ""."""
    seen: Counter[str] = Counter()
    for event in trace.ops:
        for recorded in (event.get("args") or {}).get("Input type") or ():
            dtype = DTYPES.get(recorded)
            if dtype is not None and dtype.is_floating_point:
                seen[str(dtype).removeprefix("torch.")] += 1
                break
    return seen.most_common(1)[0][0] if seen else ""


def has_backward(trace: KinetoTrace) -> bool:
    return any(_BACKWARD.search(str(e.get("name", ""))) for e in trace.ops)


def _op_name(event: dict[str, Any]) -> str:
    return str(event.get("name", "")).removeprefix("aten::")


def _unit(call: Launched, dtype_hint: str) -> tuple[dict[str, Any], CountedOp]:
    """The op a launch is counted as: the innermost enclosing aten op that can be counted,
    else the innermost op, uncounted (FLOPs None, with the shapes it recorded)."""
    for event in call.chain:
        if not str(event.get("name", "")).startswith("aten::"):
            continue
        recorded = Recorded.from_event(event, dtype_hint)
        counted = count_recorded(recorded) if recorded is not None else None
        if counted is not None:
            return event, counted
    event = call.chain[0]
    dims = (event.get("args") or {}).get("Input Dims") or []
    shapes = [d for d in dims if isinstance(d, list) and all(isinstance(x, int) for x in d)]
    return event, CountedOp(name=_op_name(event), input_shapes=shapes, dtype="", flops=None,
                            bytes=ByteSplit())


def _group_key(op: CountedOp) -> tuple[Any, ...]:
    return (op.name, shape_key(op.input_shapes), op.dtype, call_args_key(op.call_args))


def _op_stat(group: _Group, n_steps: int) -> OpStat:
    op = group.counted
    kernels = sorted(group.kernels.items(), key=lambda kv: -kv[1][1])
    stat = OpStat(
        op_id=group.op_id,
        name=op.name,
        input_shapes=[list(s) for s in op.input_shapes],
        dtype=op.dtype,
        module="",
        calls=max(round(group.calls / n_steps), 1),
        time_s=group.time_s / n_steps,
        flops=None if group.uncounted else round(group.flops / n_steps),
        bytes=group.bytes.scaled(1 / n_steps),
        kernels=[KernelStat(name=name[:KERNEL_NAME_CHARS], calls=calls / n_steps,
                            time_s=seconds / n_steps)
                 for name, (calls, seconds) in kernels[:KERNELS_KEPT]],
        call_args=op.call_args,
    )
    if group.kinds == {DeviceKind.COMMUNICATION}:
        stat.bound = Bound.COMMUNICATION
    elif group.kinds == {DeviceKind.TRANSFER}:
        stat.bound = Bound.TRANSFER
    if op.dtype == "float32" and any(_TF32_KERNEL.search(k) for k in group.kernels):
        stat.roof_dtype = "tfloat32"
    return stat


def _cpu_op_tree(trace: KinetoTrace, step: TraceStep
                 ) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    """The aten ops of a step with no aten op around them (on any thread), and each op's
    aten children: a CPU trace's ops, as the sweep's CPU capture sees them."""
    inside = [e for e in trace.ops if str(e.get("name", "")).startswith("aten::")
              and step.cpu_start_us <= e["ts"] and e["ts"] + e["dur"] <= step.cpu_end_us]
    tops: list[dict[str, Any]] = []
    children: dict[int, list[dict[str, Any]]] = {}
    stacks: dict[Any, list[dict[str, Any]]] = {}
    for event in sorted(inside, key=lambda e: (e["ts"], -e["dur"])):
        stack = stacks.setdefault((event.get("pid"), event.get("tid")), [])
        while stack and stack[-1]["ts"] + stack[-1]["dur"] <= event["ts"]:
            stack.pop()
        if stack:
            children.setdefault(id(stack[-1]), []).append(event)
        else:
            tops.append(event)
        stack.append(event)
    return tops, children


def _count_tree(event: dict[str, Any], children: dict[int, list[dict[str, Any]]],
                dtype_hint: str) -> CountedOp:
    """An op counted whole when it can be, else as the sum of its children (a composite
    ``linear`` is its ``t`` and ``addmm``); uncounted when any part cannot be counted."""
    _, counted = _unit(Launched(chain=(event,)), dtype_hint)
    kids = children.get(id(event), [])
    if counted.flops is not None or not kids:
        return counted
    parts = [_count_tree(k, children, dtype_hint) for k in kids]
    if any(p.flops is None for p in parts):
        return counted
    total = ByteSplit()
    for part in parts:
        total = total + part.bytes
    dtype = next((p.dtype for p in parts if p.dtype), "")
    return CountedOp(name=counted.name, input_shapes=counted.input_shapes, dtype=dtype,
                     flops=sum(p.flops or 0 for p in parts), bytes=total)


def _add(groups: dict[tuple[Any, ...], _Group], units: list[tuple[CountedOp, float,
         list[dict[str, Any]]]]) -> None:
    """Add one step's calls (counted op, seconds, device events) to the groups."""
    ids = op_ids([counted for counted, _, _ in units])
    for op_id, (counted, seconds, events) in zip(ids, units, strict=True):
        group = groups.setdefault(_group_key(counted), _Group(op_id=op_id, counted=counted))
        group.calls += 1
        group.time_s += seconds
        group.uncounted |= counted.flops is None
        group.flops += counted.flops or 0
        group.bytes = group.bytes + counted.bytes
        for e in events:
            entry = group.kernels.setdefault(str(e.get("name", "")), [0, 0.0])
            entry[0] += 1
            entry[1] += float(e["dur"]) * 1e-6
            group.kinds.add(device_kind(e))


def _cpu_step_units(trace: KinetoTrace, step: TraceStep, dtype_hint: str
                    ) -> list[tuple[CountedOp, float, list[dict[str, Any]]]]:
    tops, children = _cpu_op_tree(trace, step)
    return [(_count_tree(event, children, dtype_hint), float(event["dur"]) * 1e-6, [])
            for event in tops]


def _device_step_units(step: TraceStep, dtype_hint: str
                       ) -> list[tuple[CountedOp, float, list[dict[str, Any]]]]:
    units: dict[int, tuple[CountedOp, list[dict[str, Any]]]] = {}
    for call in step.launched:
        event, counted = _unit(call, dtype_hint)
        units.setdefault(id(event), (counted, []))[1].extend(call.events)
    return [(counted, sum(float(e["dur"]) for e in events) * 1e-6, events)
            for counted, events in units.values()]


def kernel_launches(trace: KinetoTrace, timeline: Timeline) -> list[tuple[str, dict[str, Any]]]:
    """Every kernel event of the steps :func:`trace_result` reads, in launch order, with
    the ``op_id`` of the op group it is counted under there (the first step's id of the
    group, as the report names it): what a per-kernel measurement (Nsight Compute's) is
    joined to an op through. Copies, sets and kernels no op launched are left out."""
    dtype_hint = dominant_dtype(trace)
    steps = [s for s in timeline.steps if s.launched or s.unattributed] or timeline.steps
    # Launch order is the host's: kernels on several streams may start in another order.
    launched_at = {(e.get("args") or {}).get("correlation"): float(e.get("ts", 0.0))
                   for e in trace.launches}
    first_ids: dict[tuple[Any, ...], str] = {}
    out: list[tuple[str, dict[str, Any]]] = []
    for step in steps:
        units = _device_step_units(step, dtype_hint)
        ids = op_ids([counted for counted, _, _ in units])
        for op_id, (counted, _, events) in zip(ids, units, strict=True):
            group_id = first_ids.setdefault(_group_key(counted), op_id)
            out += [(group_id, e) for e in events if e.get("cat") == "kernel"]
    out.sort(key=lambda pair: launched_at.get((pair[1].get("args") or {}).get("correlation"),
                                              float(pair[1].get("ts", 0.0))))
    return out


def trace_result(trace: KinetoTrace, timeline: Timeline, batch_size: int,
                 batch_size_known: bool) -> BatchResult:
    """The trace's steps as one batch size: per-op device time, FLOPs and bytes per step.

    A trace with no device events (a CPU-only profile) gives its top-level aten ops with
    their CPU time instead, the time between them being framework time, as in a CPU sweep.
    """
    if not trace.device_events:
        return _cpu_result(trace, timeline, batch_size, batch_size_known)
    dtype_hint = dominant_dtype(trace)
    steps = [s for s in timeline.steps if s.launched or s.unattributed] or timeline.steps
    n = len(steps)
    groups: dict[tuple[Any, ...], _Group] = {}
    unattributed_s = 0.0
    for step in steps:
        _add(groups, _device_step_units(step, dtype_hint))
        unattributed_s += sum(float(e["dur"]) for e in step.unattributed) * 1e-6
    return _result(trace, [_op_stat(g, n) for g in groups.values()],
                   [s.span_s for s in steps], batch_size, batch_size_known,
                   op_time_s=sum(s.device_s for s in steps) / n,
                   unmatched_ops_s={NO_OP: unattributed_s / n} if unattributed_s > 0 else {},
                   time_basis=TimeBasis.DEVICE,
                   device_idle_s=sum(s.idle_s for s in steps) / n,
                   communication_overlapped_s=sum(s.communication_overlapped_s
                                                  for s in steps) / n)


def _result(trace: KinetoTrace, ops: list[OpStat], spans_s: list[float], batch_size: int,
            batch_size_known: bool, op_time_s: float, **fields: Any) -> BatchResult:
    """The batch result of a trace's grouped ops and step spans, as the sweep would make it
    (the step latency from the spans, coverage over ``op_time_s``); ``fields`` are the rest."""
    latency = latency_stats(spans_s) if spans_s and max(spans_s) > 0 else None
    counted_s = sum(op.time_s for op in ops if op.flops is not None)
    total = ByteSplit()
    for op in ops:
        total = total + op.bytes
    return BatchResult(
        batch_size=batch_size, status=Status.OK, latency_s=latency,
        throughput_per_s=(batch_size / latency.median
                          if batch_size_known and latency and latency.median > 0 else None),
        profiled_step_s=sum(spans_s) / len(spans_s), op_time_s=op_time_s,
        coverage=counted_s / op_time_s if op_time_s > 0 else None,
        flops=sum(op.flops or 0 for op in ops), bytes=total, ops=ops,
        trace_path=trace.path, **fields)


def _cpu_result(trace: KinetoTrace, timeline: Timeline, batch_size: int,
                batch_size_known: bool) -> BatchResult:
    dtype_hint = dominant_dtype(trace)
    steps = timeline.steps
    n = len(steps)
    groups: dict[tuple[Any, ...], _Group] = {}
    for step in steps:
        _add(groups, _cpu_step_units(trace, step, dtype_hint))
    ops = [_op_stat(g, n) for g in groups.values()]
    return _result(trace, ops, [(s.cpu_end_us - s.cpu_start_us) * 1e-6 for s in steps],
                   batch_size, batch_size_known, op_time_s=sum(op.time_s for op in ops),
                   time_basis=TimeBasis.CPU)


def kernel_floor_s(trace: KinetoTrace) -> float | None:
    """The shortest a kernel runs on this GPU, from the trace: the 5th percentile of its
    kernel durations. It is the per-op floor on the device timeline; the host's cost of
    launching shows as idle time, not in the ops."""
    durations = sorted(float(e["dur"]) * 1e-6 for e in trace.device_events
                       if e.get("cat") == "kernel" and float(e["dur"]) > 0)
    if not durations:
        return None
    return durations[int(KERNEL_FLOOR_PERCENTILE * (len(durations) - 1))]


def _incomplete(missing: TraceGap, events: int | None = None) -> Flag:
    return Flag.of(TraceIncomplete(missing=missing.value, events=events))


def missing_pieces(trace: KinetoTrace, timeline: Timeline) -> list[Flag]:
    """One flag per piece the analysis needs that this trace lacks (TRACE_INCOMPLETE, its
    ``missing`` one of the MISSING_* names); the sentences say what remains."""
    flags = []
    if trace.truncated_after is not None:
        flags.append(_incomplete(MISSING_TRUNCATED, events=trace.truncated_after))
    if not trace.device_events:
        flags.append(_incomplete(MISSING_KERNELS))
    elif not trace.launches:
        flags.append(_incomplete(MISSING_LAUNCHES))
    if trace.ops and not any((e.get("args") or {}).get("Input Dims") for e in trace.ops):
        flags.append(_incomplete(MISSING_SHAPES))
    if timeline.step_source != "ProfilerStep#N":
        flags.append(_incomplete(MISSING_STEPS))
    if not trace.device_properties:
        flags.append(_incomplete(MISSING_DEVICE))
    return flags
