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
from torch.profiler import ProfilerActivity, profile, record_function

from batchscope.records import TimedOp

STEP_TAG = "batchscope::step"
# Steps captured per batch size; a few let us check the op sequence repeats (non-determinism
# is flagged). One more step runs first under the profiler and is dropped: the first step
# after the profiler starts runs several times slower (its callbacks warm up).
CAPTURE_STEPS = 3
PROFILER_WARMUP_STEPS = 1
US = 1e-6


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


def capture_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    device: torch.device,
    n_steps: int = CAPTURE_STEPS,
    trace_path: Path | None = None,
) -> Capture:
    """Profile ``n_steps`` steps and parse them; export a Perfetto trace when asked.

    Raises:
        ProfilerUnavailable: another profiler is active on this thread, or it failed to start.
    """
    if torch.autograd._profiler_enabled():
        raise ProfilerUnavailable("another profiler is already running on this thread")
    activities = [ProfilerActivity.CPU]
    if device.type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    try:
        prof = profile(activities=activities, record_shapes=True)
        prof.__enter__()
    except RuntimeError as exc:
        raise ProfilerUnavailable(f"torch.profiler failed to start: {exc}") from exc
    try:
        for _ in range(PROFILER_WARMUP_STEPS + n_steps):
            with record_function(STEP_TAG):
                step()
                sync()
    finally:
        prof.__exit__(None, None, None)
    if trace_path is not None:
        trace_path.parent.mkdir(parents=True, exist_ok=True)
        prof.export_chrome_trace(str(trace_path))
    # On a GPU an op's time is the time of the kernels it launched; the step's CPU range
    # ends with a synchronise, so the rest of it (launch gaps, idle) is framework time.
    steps = parse_events(prof.events(), use_device_time=device.type == "cuda")
    steps = steps[PROFILER_WARMUP_STEPS:]
    return Capture(steps=steps, trace_path=str(trace_path) if trace_path else "")
