"""Capture pass: torch.profiler over a few steps, parsed into per-step :class:`TimedOp` lists.

Profiled durations carry the profiler's own overhead (~1-3 µs per op on these CPUs), so they
are used for shares of a step and for per-op roofline positions, never as the step latency,
which the timing pass measures with no profiler attached.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch.autograd import DeviceType
from torch.autograd.profiler import profile, record_function

from batchscope.records import TimedOp

STEP_TAG = "batchscope::step"
# Steps captured per batch size; a few let us check the op sequence repeats (non-determinism
# is flagged). One more step runs first under the profiler and is dropped: the first step
# after the profiler starts runs several times slower (its callbacks warm up).
CAPTURE_STEPS = 3
PROFILER_WARMUP_STEPS = 1
# A CPU step at least this long is profiled twice with no warm-up step: the profiler's
# first-step cost (~20 ms at most on the samples) is then under a tenth of a step, and two
# such steps give stable op shares while still showing whether the op sequence repeats.
LONG_STEP_S = 0.2
LONG_STEP_CAPTURE_STEPS = 2
US = 1e-6
# Utility events torch's own parser drops before building the event tree (profiler_util.py).
_FILTERED_NAMES = frozenset({
    "[memory]", "[OutOfMemory]", "profiler::_record_function_enter",
    "profiler::_record_function_enter_new", "profiler::_record_function_exit",
    "aten::is_leaf", "aten::output_nr", "aten::_version",
})


@dataclass
class StepCapture:
    """The aten ops of one profiled step, in start order."""

    step_s: float
    ops: list[TimedOp] = field(default_factory=list)


@dataclass
class Capture:
    """All profiled steps of one batch size."""

    steps: list[StepCapture]
    trace_path: str = ""


class ProfilerUnavailable(RuntimeError):
    """torch.profiler could not run here (already active on this thread, or missing)."""


def _depth(event: Any) -> int:
    depth = 0
    parent = event.cpu_parent
    while parent is not None:
        if parent.name.startswith("aten::"):
            depth += 1
        parent = parent.cpu_parent
    return depth


def _event_duration_s(event: Any, use_device_time: bool) -> float:
    if use_device_time:
        return float(getattr(event, "device_time_total", 0.0)) * US
    return float(event.cpu_time_total) * US


def parse_events(events: Iterable[Any], use_device_time: bool = False) -> list[StepCapture]:
    """Split profiler ``FunctionEvent`` objects into steps tagged with :data:`STEP_TAG`.

    Works on the events of a live ``torch.profiler.profile`` (``prof.events()``) and on any
    object with the same attributes (name, time_range, input_shapes, cpu_parent,
    cpu_time_total, thread).
    """
    events = list(events)
    steps = sorted((e for e in events if e.name == STEP_TAG), key=lambda e: e.time_range.start)
    captured: list[StepCapture] = []
    for step in steps:
        begin, end = step.time_range.start, step.time_range.end
        ops = [
            e
            for e in events
            if e.name.startswith("aten::")
            and e.thread == step.thread
            and begin <= e.time_range.start
            and e.time_range.end <= end
        ]
        ops.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        step_s = (end - begin) * US
        captured.append(
            StepCapture(
                step_s=step_s,
                ops=[
                    TimedOp(
                        name=e.name[len("aten::"):],
                        input_shapes=[list(s) if isinstance(s, (list, tuple)) else []
                                      for s in (e.input_shapes or [])],
                        start_s=(e.time_range.start - begin) * US,
                        end_s=(e.time_range.end - begin) * US,
                        duration_s=_event_duration_s(e, use_device_time),
                        depth=_depth(e),
                    )
                    for e in ops
                ],
            )
        )
    return captured


@dataclass
class _Range:
    start: float  # µs from the start of the trace, as FunctionEvent.time_range
    end: float


@dataclass(eq=False)
class _CpuEvent:
    """The attributes of a ``FunctionEvent`` that :func:`parse_events` reads."""

    name: str
    time_range: _Range
    input_shapes: list[Any]
    thread: int
    is_async: bool
    cpu_parent: _CpuEvent | None = None
    cpu_children: list[_CpuEvent] = field(default_factory=list)

    @property
    def cpu_time_total(self) -> float:
        return self.time_range.end - self.time_range.start


def cpu_events(kineto_results: Any) -> list[_CpuEvent]:
    """The CPU events of a finished Kineto run with their parents, as torch builds them.

    The same tree as ``profile.function_events`` (a child lies within its parent's time
    range on the same thread; a parent with a single child of its own name is merged into
    it), built from the raw events in ~1/10 of the time: torch also converts stacks, memory
    records and device links for every event, ~65 µs each, which is 0.35 s for a profiled
    GPT-2 step of 1.4k ops.
    """
    trace_start_ns = kineto_results.trace_start_ns()
    events: list[_CpuEvent] = []
    for e in kineto_results.events():
        if e.device_type() != DeviceType.CPU:
            continue
        name = e.name()
        if name in _FILTERED_NAMES or getattr(e, "is_hidden_event", lambda: False)():
            continue
        events.append(_CpuEvent(
            name=name,
            time_range=_Range((e.start_ns() - trace_start_ns) / 1000,
                              (e.end_ns() - trace_start_ns) / 1000),
            input_shapes=e.shapes(),
            thread=e.start_thread_id(),
            is_async=e.is_async() or e.start_thread_id() != e.end_thread_id(),
        ))
    _link_parents(events)
    return _merge_duplicates(events)


def _link_parents(events: list[_CpuEvent]) -> None:
    """Parent = the innermost enclosing event on the same thread (torch's algorithm)."""
    by_thread: dict[int, list[_CpuEvent]] = {}
    for e in events:
        if not e.is_async:
            by_thread.setdefault(e.thread, []).append(e)
    for thread_events in by_thread.values():
        thread_events.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        open_events: list[_CpuEvent] = []
        for e in thread_events:
            while open_events:
                parent = open_events[-1]
                if (e.time_range.start >= parent.time_range.end
                        or e.time_range.end > parent.time_range.end):
                    open_events.pop()
                else:
                    parent.cpu_children.append(e)
                    e.cpu_parent = parent
                    break
            open_events.append(e)


def _merge_duplicates(events: list[_CpuEvent]) -> list[_CpuEvent]:
    """Drop an event whose parent has its name and no other child, lifting its children."""
    while True:
        dropped: set[int] = set()
        for e in events:
            parent = e.cpu_parent
            if parent is not None and parent.name == e.name and len(parent.cpu_children) == 1:
                parent.cpu_children = e.cpu_children
                for child in e.cpu_children:
                    child.cpu_parent = parent
                dropped.add(id(e))
        if not dropped:
            return events
        events = [e for e in events if id(e) not in dropped]


def capture_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    device: torch.device,
    n_steps: int = CAPTURE_STEPS,
    trace_path: Path | None = None,
    step_s: float | None = None,
) -> Capture:
    """Profile ``n_steps`` steps and parse them; export a Perfetto trace when asked.

    ``step_s``, the step latency the timing pass measured, shortens the capture of long CPU
    steps to :data:`LONG_STEP_CAPTURE_STEPS` steps without a warm-up step.

    The autograd profiler is driven directly (with Kineto, as ``torch.profiler.profile``
    does): the ``torch.profiler`` wrapper imports ``torch._inductor`` and ``torch._dynamo``
    on its first use to read one config flag, ~1.2-1.7 s of a sweep on a 2-core CPU.

    Raises:
        ProfilerUnavailable: another profiler is active on this thread, or it failed to start.
    """
    if torch.autograd._profiler_enabled():
        raise ProfilerUnavailable("another profiler is already running on this thread")
    on_gpu = device.type == "cuda"
    warmup_steps = PROFILER_WARMUP_STEPS
    if not on_gpu and step_s is not None and step_s >= LONG_STEP_S:
        warmup_steps, n_steps = 0, min(n_steps, LONG_STEP_CAPTURE_STEPS)
    try:
        prof = profile(use_cpu=True, use_device="cuda" if on_gpu else None,
                       record_shapes=True, use_kineto=True)
        prof.__enter__()
    except RuntimeError as exc:
        raise ProfilerUnavailable(f"torch.profiler failed to start: {exc}") from exc
    try:
        for _ in range(warmup_steps + n_steps):
            with record_function(STEP_TAG):
                step()
                sync()
    finally:
        prof.__exit__(None, None, None)
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))
    # On a GPU an op's time is the time of the kernels it launched (torch links them to
    # their ops); the step's CPU range ends with a synchronise, so the rest of it (launch
    # gaps, idle) is framework time. On the CPU the raw events suffice and parse faster.
    events = prof.function_events if on_gpu else cpu_events(prof.kineto_results)
    steps = parse_events(events, use_device_time=on_gpu)
    steps = steps[warmup_steps:]
    return Capture(steps=steps, trace_path=str(trace_path) if trace_path else "")
