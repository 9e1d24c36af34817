"""Capture pass: torch.profiler over a few steps, parsed into per-step :class:`TimedOp` lists.

Profiled durations carry the profiler's own overhead (~1-3 µs per op on these CPUs), so they
are used for shares of a step and for per-op roofline positions, never as the step latency,
which the timing pass measures with no profiler attached.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch._C._profiler import _EventType
from torch.autograd.profiler import profile, record_function

from batchscope.records import Flag, TimedOp
from batchscope.records.flag_payloads import ProfileDisagrees, ProfileRetaken

STEP_TAG = "batchscope::step"
# Steps captured per batch size; a few let us check the op sequence repeats (non-determinism
# is flagged). One more step runs first under the profiler and is dropped: the first step
# after the profiler starts runs several times slower (its callbacks warm up).
CAPTURE_STEPS = 3
PROFILER_WARMUP_STEPS = 1
# A CPU step so short that CAPTURE_STEPS of it last under this long is profiled for more steps,
# up to SHORT_STEP_CAPTURE_STEPS, lasting about this long. The op times are means over the
# profiled steps, and the step-time model is fitted on them: three ~250 µs profiled steps
# of the MLP sample put one addmm at 41, 61, 40 and 71 µs at batches 1-8 (thread
# wake-ups), noise the fit read as a trend.
SHORT_CAPTURE_S = 0.03
SHORT_STEP_CAPTURE_STEPS = 50
# A CPU step at least this long is profiled twice with no warm-up step: the profiler's
# first-step cost (~20 ms at most on the samples) is then under a tenth of a step, and two
# such steps give stable op shares while still showing whether the op sequence repeats.
LONG_STEP_S = 0.2
LONG_STEP_CAPTURE_STEPS = 2
# A CPU step at least this long is profiled once: thousands of ops give its shares, the
# shorter batch sizes before it have shown whether the op sequence repeats, and a second
# step of the decode sample at batch 1024 would cost another 5 s.
VERY_LONG_STEP_S = 1.0
US = 1e-6
NS = 1e-9
# Kineto's log level: above its highest (USDT, 5), so it prints nothing. Below 6 torch 2.13's
# Kineto prints "USDT: ... profiler_start/stop" to stderr around every capture (once per
# batch size in a sweep, and into the user's own loop under watch). A level the user set is
# kept; Kineto reads it when the profiler first starts in the process.
KINETO_QUIET_LEVEL = "6"
# Utility events torch's own parser drops (profiler_util.py); their children are kept.
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
    # Time inside torch.compile'd graphs outside every aten op: inductor's fused kernels
    # (an extern matmul is an aten op).
    fused_s: float = 0.0
    # The fused kernels the profiler recorded by name (inductor's cpp kernel profiling, on
    # the CPU), seconds by kernel name ("cpp_fused_gelu_native_layer_norm_0"); part of
    # ``fused_s``.
    fused_kernels_s: dict[str, float] = field(default_factory=dict)


@dataclass
class Capture:
    """All profiled steps of one batch size."""

    steps: list[StepCapture]
    trace_path: str = ""
    # How the profile compares with the timed step, when it had to be retaken
    # (PROFILE_RETAKEN or PROFILE_DISAGREES); None when the first capture agreed.
    flag: Flag | None = None

    @property
    def step_s(self) -> float:
        """The mean profiled step."""
        return sum(s.step_s for s in self.steps) / len(self.steps) if self.steps else 0.0

    @property
    def ops_per_step(self) -> float:
        return sum(len(s.ops) for s in self.steps) / len(self.steps) if self.steps else 0.0


# The profiler's own cost per recorded op (~1-3 µs on the trial CPUs): a profiled step may
# exceed the timed one by this much per op and still agree with it.
PROFILER_COST_PER_OP_S = 3e-6
# Beyond this ratio of the profiled step to the timed one (its profiler cost allowed for),
# the profile does not describe the step that was timed (issue 13: BERT at batch 8 profiled
# at 1.52 s against 0.87 s timed, gelu 181 ms then 28.5 ms once the profiler was warm).
PROFILE_GAP_RATIO = 1.3
# Captures retaken, at most, while the profile disagrees with the timing.
RECAPTURES = 2


def profile_gap(capture: Capture, latency_s: float) -> float:
    """The profiled step over the timed one plus the profiler's expected cost."""
    expected = latency_s + capture.ops_per_step * PROFILER_COST_PER_OP_S
    return capture.step_s / expected if expected > 0 else 1.0


def capture_agreeing(step: Callable[[], Any], sync: Callable[[], None], device: torch.device,
                     latency_s: float, trace_path: Path | None = None) -> Capture:
    """Profile until the profiled step agrees with the timed latency (CPU), retaking the
    capture up to :data:`RECAPTURES` times with the profiler already warm, and keeping the
    one closest to the timing; ``flag`` says what happened when the first did not agree.

    Raises:
        ProfilerUnavailable: as :func:`capture_steps`.
    """
    capture = capture_steps(step, sync, device, trace_path=trace_path, step_s=latency_s)
    if device.type != "cpu" or latency_s <= 0:
        return capture
    first_gap = gap = profile_gap(capture, latency_s)
    tries = 0
    while gap > PROFILE_GAP_RATIO and tries < RECAPTURES:
        tries += 1
        # Retaken with a warm-up step under the profiler even for long steps (its first
        # step is the slow one).
        again = capture_steps(step, sync, device, trace_path=trace_path,
                              n_steps=long_step_captures(latency_s) if latency_s >= LONG_STEP_S
                              else short_step_captures(latency_s))
        again_gap = profile_gap(again, latency_s)
        if again_gap < gap:
            capture, gap = again, again_gap
    if tries == 0:
        return capture
    if gap <= PROFILE_GAP_RATIO:
        capture.flag = Flag.of(ProfileRetaken(
            tries=tries, first_gap=first_gap, profiled_s=capture.step_s,
            timed_s=latency_s))
    else:
        capture.flag = Flag.of(ProfileDisagrees(
            profiled_s=capture.step_s, timed_s=latency_s, gap=gap,
            cost_per_op_s=PROFILER_COST_PER_OP_S, captures=tries + 1))
    return capture


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

    Works on the events of a live profiler (``prof.function_events``): on a GPU, where an
    op's time is the device time of the kernels torch links to it (``use_device_time``).
    An op belongs to a step by time, on any thread: on a GPU autograd runs the backward
    pass on a thread of its own, not the thread of the step.
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
            and begin <= e.time_range.start
            and e.time_range.end <= end
        ]
        ops.sort(key=lambda e: (e.time_range.start, -e.time_range.end))
        captured.append(StepCapture(step_s=(end - begin) * US, ops=[
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
        ]))
    return captured


def _input_shapes(inputs: Iterable[Any]) -> list[Any]:
    """Shapes of an op's inputs as ``FunctionEvent.input_shapes`` gives them: a tensor's
    sizes, a list of sizes for a tensor list, ``[]`` for anything else."""
    shapes: list[Any] = []
    for value in inputs:
        if hasattr(value, "sizes"):
            shapes.append(list(value.sizes))
        elif isinstance(value, list) and value and all(hasattr(t, "sizes") for t in value):
            shapes.append([list(t.sizes) for t in value])
        else:
            shapes.append([])
    return shapes


def _children(event: Any) -> list[Any]:
    """An event's children in start order, a lone child of its own name merged into it
    (as torch's ``EventList`` does) and the utility events torch drops left out."""
    children = event.children
    while len(children) == 1 and children[0].name == event.name:
        children = children[0].children
    out: list[Any] = []
    for child in children:
        if child.name in _FILTERED_NAMES:
            out.extend(_children(child))
        elif child.tag == _EventType.TorchOp:
            out.append(child)
    return sorted(out, key=lambda e: (e.start_time_ns, -e.end_time_ns))


# The profiler's event around one call of a torch.compile'd graph (inductor's output code).
COMPILED_GRAPH_PREFIX = "## Call CompiledFxGraph"
# One of inductor's fused CPU kernels, as its kernel profiling names it: the graph, "cpp_fused_",
# the aten ops it fused (sorted, each once, joined by "_": group 2), its index. Group 1 is
# the kernel's name without the graph.
FUSED_KERNEL_RE = re.compile(r"^(?:graph_\d+_)?(cpp_fused_(\w+)_\d+)$")


def _step_ops(step: Any) -> tuple[list[TimedOp], float, dict[str, float]]:
    """The aten ops under one step event of torch's event tree, in start order, the time
    inside compiled graphs that no aten op covers (their fused kernels), and the fused
    kernels recorded by name, seconds each."""
    begin = step.start_time_ns
    ops: list[TimedOp] = []
    graphs: list[tuple[int, int]] = []
    kernels: dict[str, float] = {}
    pending = [(child, 0) for child in reversed(_children(step))]
    while pending:
        event, depth = pending.pop()
        if event.name.startswith(COMPILED_GRAPH_PREFIX) and depth == 0:
            graphs.append((event.start_time_ns - begin, event.end_time_ns - begin))
        kernel = FUSED_KERNEL_RE.match(event.name)
        if kernel and depth == 0:
            kernels[kernel.group(1)] = (kernels.get(kernel.group(1), 0.0)
                                        + (event.end_time_ns - event.start_time_ns) * NS)
        is_op = event.name.startswith("aten::")
        if is_op:
            ops.append(TimedOp(
                name=event.name[len("aten::"):],
                input_shapes=_input_shapes(event.extra_fields.inputs),
                start_s=(event.start_time_ns - begin) * NS,
                end_s=(event.end_time_ns - begin) * NS,
                duration_s=(event.end_time_ns - event.start_time_ns) * NS,
                depth=depth,
            ))
        pending.extend((c, depth + is_op) for c in reversed(_children(event)))
    fused_ns = 0.0
    for start, end in graphs:
        inside = sum(t.duration_s / NS for t in ops if t.depth == 0
                     and start * NS <= t.start_s + 1e-9 and t.end_s <= end * NS + 1e-9)
        fused_ns += max(end - start - inside, 0.0)
    return ops, fused_ns * NS, kernels


def parse_event_tree(roots: Iterable[Any]) -> list[StepCapture]:
    """The steps tagged with :data:`STEP_TAG` in torch's own event tree of a finished CPU
    run (``prof.kineto_results.experimental_event_tree()``), in start order.

    The tree is built by torch's profiler itself (parents, children, input metadata); it
    gives the same ops, shapes, depths and times as ``prof.function_events`` without the
    ~65 µs per event torch spends there on stacks, memory records and device links (0.35 s
    for a profiled GPT-2 step of 1.4k ops).
    """
    steps: list[Any] = []
    pending = list(roots)
    while pending:
        event = pending.pop()
        if event.name == STEP_TAG:
            steps.append(event)
        else:
            pending.extend(event.children)
    steps.sort(key=lambda e: e.start_time_ns)
    captured = []
    for s in steps:
        ops, fused_s, kernels = _step_ops(s)
        captured.append(StepCapture(step_s=(s.end_time_ns - s.start_time_ns) * NS, ops=ops,
                                    fused_s=fused_s, fused_kernels_s=kernels))
    return captured


class ProfilerSession:
    """torch.profiler around steps tagged :data:`STEP_TAG`: the one way batchscope profiles,
    for the sweep's capture pass and for ``watch`` alike.

    The autograd profiler is driven directly (with Kineto, as ``torch.profiler.profile``
    does): the ``torch.profiler`` wrapper imports ``torch._inductor`` and ``torch._dynamo``
    on its first use to read one config flag, ~1.2-1.7 s of a sweep on a 2-core CPU.

    Example:
        >>> session = ProfilerSession(torch.device("cpu"))
        >>> session.start()
        >>> with session.step():
        ...     _ = torch.ones(4) + 1
        >>> [op.name for op in session.stop()[0].ops]
        ['ones', 'empty', 'fill_', 'add']
    """

    def __init__(self, device: torch.device) -> None:
        self.on_gpu = device.type == "cuda"
        self._prof: Any = None

    def start(self) -> None:
        """Start profiling.

        Raises:
            ProfilerUnavailable: another profiler is active on this thread, or it failed.
        """
        if torch._C._autograd._profiler_enabled():  # torch.autograd's, typed
            raise ProfilerUnavailable("another profiler is already running on this thread")
        os.environ.setdefault("KINETO_LOG_LEVEL", KINETO_QUIET_LEVEL)
        try:
            self._prof = profile(use_cpu=True, use_device="cuda" if self.on_gpu else None,
                                 record_shapes=True, use_kineto=True)
            self._prof.__enter__()
        except RuntimeError as exc:
            raise ProfilerUnavailable(f"torch.profiler failed to start: {exc}") from exc

    def step(self) -> record_function:
        """A context manager around one step."""
        return record_function(STEP_TAG)

    def stop(self, trace_path: Path | None = None) -> list[StepCapture]:
        """Stop, export a Perfetto trace when asked, and parse the steps.

        On a GPU an op's time is the time of the kernels it launched (torch links them to
        their ops); the step's CPU range ends with a synchronise, so the rest of it (launch
        gaps, idle) is framework time. On the CPU torch's event tree suffices, and is fast.
        """
        prof, self._prof = self._prof, None
        prof.__exit__(None, None, None)
        if trace_path is not None:
            trace_path.parent.mkdir(parents=True, exist_ok=True)
            prof.export_chrome_trace(str(trace_path))
        if self.on_gpu:
            return parse_events(prof.function_events, use_device_time=True)
        return parse_event_tree(prof.kineto_results.experimental_event_tree())


def short_step_captures(step_s: float) -> int:
    """Steps to profile of a step of ``step_s`` seconds shorter than :data:`LONG_STEP_S`:
    :data:`CAPTURE_STEPS`, or as many as last :data:`SHORT_CAPTURE_S` (at most
    :data:`SHORT_STEP_CAPTURE_STEPS`).

    Example:
        >>> short_step_captures(0.05), short_step_captures(0.002), short_step_captures(1e-5)
        (3, 15, 50)
    """
    if step_s <= 0:
        return CAPTURE_STEPS
    return min(max(CAPTURE_STEPS, math.ceil(round(SHORT_CAPTURE_S / step_s, 6))),
               SHORT_STEP_CAPTURE_STEPS)


def long_step_captures(step_s: float) -> int:
    """Steps to profile of a CPU step of ``step_s`` seconds, :data:`LONG_STEP_S` or longer."""
    return 1 if step_s >= VERY_LONG_STEP_S else LONG_STEP_CAPTURE_STEPS


def capture_steps(
    step: Callable[[], Any],
    sync: Callable[[], None],
    device: torch.device,
    n_steps: int | None = None,
    trace_path: Path | None = None,
    step_s: float | None = None,
) -> Capture:
    """Profile ``n_steps`` steps and parse them; export a Perfetto trace when asked.

    ``step_s``, the step latency the timing pass measured, shortens the capture of long CPU
    steps to :func:`long_step_captures` steps without a warm-up step, and sets how many
    CPU steps are profiled when ``n_steps`` is not given (:func:`short_step_captures`;
    :data:`CAPTURE_STEPS` without ``step_s`` or on a GPU).

    Raises:
        ProfilerUnavailable: another profiler is active on this thread, or it failed to start.
    """
    session = ProfilerSession(device)
    warmup_steps = PROFILER_WARMUP_STEPS
    if n_steps is None:  # a GPU's kernel times hold still; its events cost more to parse
        n_steps = (short_step_captures(step_s) if step_s is not None and not session.on_gpu
                   else CAPTURE_STEPS)
    if not session.on_gpu and step_s is not None and step_s >= LONG_STEP_S:
        warmup_steps, n_steps = 0, min(n_steps, long_step_captures(step_s))
    session.start()
    try:
        for _ in range(warmup_steps + n_steps):
            with session.step():
                step()
                sync()
    finally:
        steps = session.stop(trace_path)
    return Capture(steps=steps[warmup_steps:], trace_path=str(trace_path) if trace_path else "")
