"""Steps, launches and kernels of a recorded trace: which op launched each kernel, per step.

- **Launch -> op.** A kernel (or memcpy/memset) carries ``args.correlation``, equal to that of
  the ``cuda_runtime``/``cuda_driver`` call that launched it; that call sits inside the ops
  open on its thread at that moment. The innermost is the op that launched it; the chain of
  enclosing ops is kept so the counting step can climb to the nearest op it can count.
  Ops are matched on the launching thread, whatever it is: backward ops run on the autograd
  thread, not the thread of ``ProfilerStep#N``.
- **Steps.** ``ProfilerStep#N`` annotations when present, else the whole trace as one step.
  A device event belongs to the step whose CPU window holds its launch.
- **Device time of a step** runs from the step's start on the host (or the end of the
  previous step's last kernel, if later) to the end of its last kernel; the time inside it
  with no kernel, copy or set running is *idle*: the GPU waiting on the host.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from batchscope.traces.kineto import GPU_MEMCPY, USER_ANNOTATION, KinetoTrace

US = 1e-6
_STEP = re.compile(r"^ProfilerStep#(\d+)$")
_NCCL = re.compile(r"(^|[^a-z0-9_])nccl", re.IGNORECASE)
# Copies between host and device (or peers); device-to-device copies and sets are memory
# work of the op that issued them.
_TRANSFER = re.compile(r"\b(HtoD|DtoH|PtoP|HtoH)\b")
NO_OP = "(no launching op recorded)"


class DeviceKind:
    """What a device event is, beyond a kernel of an op."""

    COMPUTE = "kernel"
    COMMUNICATION = "communication"
    TRANSFER = "transfer"


def device_kind(event: dict[str, Any]) -> str:
    """``communication`` for NCCL kernels (any NCCL version's naming), ``transfer`` for
    host<->device copies, else ``kernel`` (device copies and sets included)."""
    name = str(event.get("name", ""))
    if _NCCL.search(name):
        return DeviceKind.COMMUNICATION
    if event.get("cat") == GPU_MEMCPY and _TRANSFER.search(name):
        return DeviceKind.TRANSFER
    return DeviceKind.COMPUTE


@dataclass
class Launched:
    """The device events one op call launched (directly, or in ops it called)."""

    chain: tuple[dict[str, Any], ...]  # the op that launched, then its enclosing ops outward
    events: list[dict[str, Any]] = field(default_factory=list)

    @property
    def device_s(self) -> float:
        return sum(float(e["dur"]) for e in self.events) * US


@dataclass
class TraceStep:
    """One step of a trace: its device span and what ran in it."""

    name: str
    cpu_start_us: float
    cpu_end_us: float
    start_us: float = 0.0  # device span (see the module docstring)
    end_us: float = 0.0
    launched: list[Launched] = field(default_factory=list)  # in launch order
    unattributed: list[dict[str, Any]] = field(default_factory=list)  # no launching op
    busy_s: float = 0.0  # union of all device events
    communication_overlapped_s: float = 0.0  # NCCL time that ran beside other kernels

    @property
    def span_s(self) -> float:
        return max(self.end_us - self.start_us, 0.0) * US

    @property
    def idle_s(self) -> float:
        return max(self.span_s - self.busy_s, 0.0)

    @property
    def device_s(self) -> float:
        """Device time of every event of the step, overlaps counted twice."""
        return (sum(x.device_s for x in self.launched)
                + sum(float(e["dur"]) for e in self.unattributed) * US)


@dataclass
class Timeline:
    """The steps of one trace and how they were found."""

    steps: list[TraceStep]
    step_source: str  # "ProfilerStep#N" or "whole trace"


def _threads(ops: Iterable[dict[str, Any]]) -> dict[tuple[Any, Any], list[dict[str, Any]]]:
    by_thread: dict[tuple[Any, Any], list[dict[str, Any]]] = defaultdict(list)
    for op in ops:
        by_thread[(op.get("pid"), op.get("tid"))].append(op)
    return by_thread


def enclosing_ops(ops: list[dict[str, Any]], launches: list[dict[str, Any]]
                  ) -> dict[int, tuple[dict[str, Any], ...]]:
    """For each launch (by ``id``), the ops open around it on its thread, innermost first."""
    chains: dict[int, tuple[dict[str, Any], ...]] = {}
    op_threads = _threads(ops)
    for thread, thread_launches in _threads(launches).items():
        thread_ops = sorted(op_threads.get(thread, []), key=lambda e: (e["ts"], -e["dur"]))
        stack: list[dict[str, Any]] = []
        i = 0
        for launch in sorted(thread_launches, key=lambda e: e["ts"]):
            at = launch["ts"]
            while i < len(thread_ops) and thread_ops[i]["ts"] <= at:
                op = thread_ops[i]
                while stack and stack[-1]["ts"] + stack[-1]["dur"] <= op["ts"]:
                    stack.pop()
                stack.append(op)
                i += 1
            while stack and stack[-1]["ts"] + stack[-1]["dur"] < at:
                stack.pop()
            chains[id(launch)] = tuple(reversed(stack))
    return chains


def _union_s(intervals: list[tuple[float, float]]) -> float:
    total, end = 0.0, float("-inf")
    for a, b in sorted(intervals):
        if b <= end:
            continue
        total += b - max(a, end)
        end = b
    return total * US


def _overlap_s(mine: list[tuple[float, float]], others: list[tuple[float, float]]) -> float:
    """Time of ``mine`` (a union) that also lies inside ``others`` (a union)."""
    return max(_union_s(mine) + _union_s(others) - _union_s(mine + others), 0.0)


def _step_windows(trace: KinetoTrace) -> tuple[list[TraceStep], str]:
    steps = [TraceStep(name=e["name"], cpu_start_us=e["ts"], cpu_end_us=e["ts"] + e["dur"])
             for e in trace.ops
             if e.get("cat") == USER_ANNOTATION and _STEP.match(str(e.get("name", "")))]
    if steps:
        steps.sort(key=lambda s: s.cpu_start_us)
        return steps, "ProfilerStep#N"
    times = [e["ts"] for e in trace.ops] + [e["ts"] for e in trace.device_events]
    ends = ([e["ts"] + e["dur"] for e in trace.ops]
            + [e["ts"] + e["dur"] for e in trace.device_events])
    return [TraceStep(name="whole trace", cpu_start_us=min(times), cpu_end_us=max(ends))], \
        "whole trace"


def _step_of(steps: list[TraceStep], at_us: float) -> TraceStep | None:
    for step in steps:
        if step.cpu_start_us <= at_us <= step.cpu_end_us:
            return step
    return None


def build_timeline(trace: KinetoTrace) -> Timeline:
    """Find the steps, attribute every device event to the op that launched it."""
    steps, source = _step_windows(trace)
    chains = enclosing_ops(trace.ops, trace.launches)
    by_correlation = {}
    for launch in trace.launches:
        correlation = (launch.get("args") or {}).get("correlation")
        if correlation is not None:
            by_correlation[correlation] = launch
    calls: dict[tuple[int, int], Launched] = {}  # (step, innermost op) -> its events
    for event in sorted(trace.device_events, key=lambda e: e["ts"]):
        launched_by = by_correlation.get((event.get("args") or {}).get("correlation"))
        step = _step_of(steps, launched_by["ts"] if launched_by else event["ts"])
        if step is None:
            continue
        chain = chains.get(id(launched_by), ()) if launched_by else ()
        if not chain:
            step.unattributed.append(event)
            continue
        key = (id(step), id(chain[0]))
        if key not in calls:
            calls[key] = Launched(chain=chain)
            step.launched.append(calls[key])
        calls[key].events.append(event)
    previous_end = float("-inf")
    for step in steps:
        events = [e for x in step.launched for e in x.events] + step.unattributed
        if not events:
            step.start_us, step.end_us = step.cpu_start_us, step.cpu_end_us
            continue
        step.start_us = max(step.cpu_start_us, min(previous_end, min(e["ts"] for e in events)))
        step.end_us = max(e["ts"] + e["dur"] for e in events)
        previous_end = step.end_us
        spans = [(max(e["ts"], step.start_us), e["ts"] + e["dur"]) for e in events]
        step.busy_s = _union_s(spans)
        comm = [(e["ts"], e["ts"] + e["dur"]) for e in events
                if device_kind(e) == DeviceKind.COMMUNICATION]
        rest = [(e["ts"], e["ts"] + e["dur"]) for e in events
                if device_kind(e) != DeviceKind.COMMUNICATION]
        step.communication_overlapped_s = _overlap_s(comm, rest) if comm else 0.0
    return Timeline(steps=steps, step_source=source)
