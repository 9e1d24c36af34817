"""The one timer: samples of timed calls under a stop policy, pulled or pushed.

Every timing loop of batchscope is this one: the timing pass (warm-up, blocks of fast steps,
garbage collection paused, a monitor around the samples), the ranks' fixed count and their
all-reduce repeats, the kernel probes' and the ceilings' repeat budgets, ``watch``'s timed
phase, and ``serve --engine``'s prefill timings and calibration runs (a :class:`Run` per
policy and cap, fed the engine runs' spans). A run is a :class:`Run`: each sample goes in
with its seconds and end time, the policy's judge (:mod:`batchscope.engine.policies`) says
when the rule is met, and the run then goes on until its samples span the policy's window.
:func:`sample` pulls samples from a callable; :class:`PushTimer` takes them from a loop that
is not ours, one step at a time, with the same blocks and the same rules.

Example:
    >>> from batchscope.engine.clock import HostClock
    >>> from batchscope.engine.policies import FixedCount
    >>> sampled, _ = sample(lambda: sum(range(100)), HostClock(), FixedCount(4), block_steps=10)
    >>> len(sampled.samples_s), sampled.block_steps, sampled.stopped_by.value
    (4, 10, 'samples')
"""

from __future__ import annotations

import gc
import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from batchscope.engine.clock import Clock
from batchscope.engine.policies import Progress, StoppedBy, StopPolicy


@dataclass(frozen=True)
class Warmup:
    """Warm up until both hold: at least ``min_steps`` calls and ``min_s`` seconds."""

    min_steps: int
    min_s: float = 0.0


def warm_up(work: Callable[[], object], clock: Clock, warmup: Warmup) -> list[float]:
    """Call ``work`` until ``warmup`` holds, each call timed alone; their seconds."""
    started = clock.now()
    warmup_s: list[float] = []
    while len(warmup_s) < warmup.min_steps or clock.now() - started < warmup.min_s:
        warmup_s.append(clock.time(work)[0])
    return warmup_s


def block_steps_for(step_s: float, block_min_s: float) -> int:
    """Steps per timed block: enough that a block lasts ``block_min_s``, 1 for slower steps.

    Example:
        >>> block_steps_for(30e-6, 0.001), block_steps_for(0.002, 0.001)
        (34, 1)
    """
    if step_s <= 0:
        return 1
    return max(1, math.ceil(round(block_min_s / step_s, 6)))  # 0.001 / 1e-5 is 100.00000000000001


def block_for(warmup_s: Sequence[float], block_min_s: float) -> int:
    """Steps per timed block after a warm-up: judged on the median of its later half (the
    first steps at a new shape are the slow ones); 1 without a warm-up."""
    later = warmup_s[len(warmup_s) // 2:]
    return block_steps_for(statistics.median(later), block_min_s) if later else 1


class Monitor(Protocol):
    """Something that observes the timed samples (the NVML sampler, page faults)."""

    def start(self) -> None: ...
    def stop(self) -> Any: ...


class Monitors:
    """Several monitors as one: started in order, stopped in reverse; ``stop`` returns what
    each observed, in the order given (None for a missing one)."""

    def __init__(self, *monitors: Monitor | None) -> None:
        self.monitors = monitors

    def start(self) -> None:
        for m in self.monitors:
            if m is not None:
                m.start()

    def stop(self) -> tuple[Any, ...]:
        seen = [m.stop() if m is not None else None for m in reversed(self.monitors)]
        return tuple(reversed(seen))


@dataclass(frozen=True)
class Sampled:
    """What one run measured.

    Attributes:
        samples_s: seconds per call of each sample (a block's mean call), in order.
        block_steps: calls per sample.
        measured_s: wall time from the run's start to its last sample's end.
        stopped_by: what ended it (:attr:`StoppedBy.NONE` for a run cut short before its
            rule was met; :attr:`StoppedBy.NVML_WINDOW` once met and waiting on the window).
    """

    samples_s: list[float]
    block_steps: int
    measured_s: float
    stopped_by: StoppedBy

    @property
    def steps(self) -> int:
        return len(self.samples_s) * self.block_steps


class Run:
    """One run of samples under a policy: the rule, then the window.

    Each :meth:`add` asks the policy's judge until its rule is met; from then on the run
    only waits for its samples to span the policy's ``window_min_s``. It ends with the rule
    met at the sample that also closed the window, else with
    :attr:`StoppedBy.NVML_WINDOW`: the rule came first and the window kept it going.
    """

    def __init__(self, policy: StopPolicy, began_at: float, block_steps: int = 1) -> None:
        self.progress = Progress(block_steps, began_at)
        self._judge = policy.judge()
        self._window_min_s = policy.window_min_s
        self._rule = StoppedBy.NONE  # the rule met, NONE while it is not
        self._ended: StoppedBy | None = None

    def add(self, seconds: float, ended_at: float) -> bool:
        """One sample of a whole block, ``seconds`` long, ending at ``ended_at``; True once
        the run is over (further samples are not taken)."""
        if self._ended is not None:
            return True
        progress = self.progress
        progress.add(seconds, ended_at)
        met_now = self._rule == StoppedBy.NONE
        if met_now:
            self._rule = self._judge.verdict(progress)
        if self._rule != StoppedBy.NONE and progress.elapsed_s >= self._window_min_s:
            self._ended = self._rule if met_now else StoppedBy.NVML_WINDOW
            return True
        return False

    @property
    def stopped_by(self) -> StoppedBy:
        """What ended the run; while it runs, the window once the rule is met, else NONE."""
        if self._ended is not None:
            return self._ended
        return StoppedBy.NVML_WINDOW if self._rule != StoppedBy.NONE else StoppedBy.NONE

    def result(self) -> Sampled:
        p = self.progress
        return Sampled(list(p.samples_s), p.block_steps, p.elapsed_s, self.stopped_by)


def sample(work: Callable[[], object], clock: Clock, policy: StopPolicy, block_steps: int = 1,
           *, monitor: Monitor | None = None, pause_gc: bool = False, floor_s: float = 0.0,
           prepare: Callable[[], object] | None = None) -> tuple[Sampled, Any]:
    """Time samples of ``block_steps`` calls of ``work`` until ``policy`` stops them; what
    was measured, and what ``monitor`` observed over the samples (None without one).

    Args:
        work: one call (a step, a kernel, a collective).
        clock: what times a sample (:mod:`batchscope.engine.clock`).
        policy: when to stop (:mod:`batchscope.engine.policies`).
        block_steps: calls per sample; each sample is their mean.
        monitor: started before the first sample, stopped after the last.
        pause_gc: pause garbage collection over the samples, as :mod:`timeit` (and so
            ``torch.utils.benchmark.Timer``) does, so a collection does not land in one.
        floor_s: the least a sample's block may take (a clock's resolution).
        prepare: called before each sample, outside its time (a barrier between ranks).
    """
    # No gc.collect() first (timeit does none either): with torch loaded a full collection
    # takes ~75 ms, longer than measuring a small model's batch size.
    gc_was_enabled = pause_gc and gc.isenabled()
    observed = None
    started = False
    try:  # a monitor that fails to start leaves garbage collection as it found it
        if pause_gc:
            gc.disable()
        if monitor is not None:
            monitor.start()
            started = True
        run = Run(policy, clock.now(), block_steps)
        while True:
            if prepare is not None:
                prepare()
            seconds, ended_at = clock.time(work, block_steps)
            if run.add(max(seconds, floor_s), ended_at):
                break
    finally:
        if started and monitor is not None:
            observed = monitor.stop()
        if gc_was_enabled:
            gc.enable()
    return run.result(), observed


class PushTimer:
    """Timed samples fed by a loop that is not ours (``watch``: the user's loop calls its
    ``step()``), with :func:`sample`'s blocks and rules.

    At each step of the loop, :meth:`closes_sample` says whether it ends a block; only then
    does the caller drain the device, read its clock and :meth:`add` the block, so a block of
    fast steps costs one sync and one clock read, as a pulled one does.

    Example:
        >>> from batchscope.engine.policies import FixedCount
        >>> timer = PushTimer(FixedCount(2), block_steps=2, began_at=0.0)
        >>> [timer.closes_sample() for _ in range(4)]
        [False, True, False, True]
        >>> timer.add(0.0, 0.004), timer.add(0.004, 0.010)  # two blocks of two steps
        (False, True)
        >>> timer.result().samples_s
        [0.002, 0.003]
    """

    def __init__(self, policy: StopPolicy, block_steps: int, began_at: float) -> None:
        self._run = Run(policy, began_at, block_steps)
        self._in_block = 0

    @property
    def block_steps(self) -> int:
        return self._run.progress.block_steps

    @property
    def steps(self) -> int:
        """Steps timed so far (whole blocks)."""
        return self._run.progress.steps

    def closes_sample(self) -> bool:
        """One step of the loop ended: True when it closes a block."""
        self._in_block += 1
        if self._in_block < self.block_steps:
            return False
        self._in_block = 0
        return True

    def add(self, started_at: float, ended_at: float) -> bool:
        """The block that ran from ``started_at`` to ``ended_at`` (the caller's clock); True
        once the run is over."""
        return self._run.add(ended_at - started_at, ended_at)

    def result(self) -> Sampled | None:
        """What was measured so far (None before the first block ended)."""
        return self._run.result() if self._run.progress.samples_s else None
