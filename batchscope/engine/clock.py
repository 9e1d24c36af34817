"""What reads the time of timed calls: the host's clock, or CUDA events on a device's stream.

:class:`HostClock` reads ``time.perf_counter`` around the calls and drains the device before
it stops (its ``sync``), so a sample is the time from the first launch to the device's
completion as the host sees it: what the timing pass and the kernel probes measure, launches
included. :class:`CudaEventClock` times the same calls with CUDA events recorded on the
device's own stream: the device's time alone, what the ceilings' benchmarks read.
:func:`device_clock` picks the one a device's benchmarks use.

Both return ``(seconds, ended_at)``: what was measured, and the host clock's reading once the
calls ended (the device drained), from which a run's wall time and deadlines are read.

Example:
    >>> seconds, ended_at = HostClock().time(lambda: sum(range(100)), inner=3)
    >>> 0 <= seconds <= ended_at
    True
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:  # the parent process reads the engine without torch
    import torch


def _nothing() -> None:
    """The CPU's sync: nothing is queued anywhere."""


class Clock(Protocol):
    """Reads the time of timed calls, and the host's time."""

    def now(self) -> float:
        """Host seconds (``time.perf_counter``): a run's start, its wall time, deadlines."""
        ...

    def time(self, fn: Callable[[], object], inner: int = 1) -> tuple[float, float]:
        """``inner`` back-to-back calls of ``fn``: (their seconds together, the host's
        :meth:`now` once they ended and the device drained)."""
        ...


class HostClock:
    """The host's clock around the calls, the device drained (``sync``) before it stops.

    Args:
        sync: waits for the device's queued work (nothing on the CPU).
        read: the host clock (``time.perf_counter``; a test's fake clock).
    """

    def __init__(self, sync: Callable[[], None] = _nothing,
                 read: Callable[[], float] = time.perf_counter) -> None:
        self.sync = sync
        self.read = read

    def now(self) -> float:
        return self.read()

    def time(self, fn: Callable[[], object], inner: int = 1) -> tuple[float, float]:
        started = self.read()
        for _ in range(inner):
            fn()
        self.sync()
        ended = self.read()
        return ended - started, ended


class CudaEventClock:
    """CUDA events around the calls, recorded on ``device``'s current stream whatever the
    current device: a bare ``Event.record()`` records on the current device's stream, which
    for ``cuda:1`` called outside ``torch.cuda.device(1)`` would time cuda:0, not the work.
    Waits for the end event, so the device is drained when it returns."""

    def __init__(self, device: torch.device,
                 read: Callable[[], float] = time.perf_counter) -> None:
        self.device = device
        self.read = read

    def now(self) -> float:
        return self.read()

    def time(self, fn: Callable[[], object], inner: int = 1) -> tuple[float, float]:
        import torch

        stream = torch.cuda.current_stream(self.device)
        begin, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        begin.record(stream)
        for _ in range(inner):
            fn()
        end.record(stream)
        end.synchronize()
        return float(begin.elapsed_time(end)) / 1e3, self.read()  # elapsed_time: milliseconds


def device_clock(device: torch.device) -> Clock:
    """The clock a device's benchmarks read: CUDA events on its stream on a GPU, the host's
    clock elsewhere (nothing queued to wait for)."""
    if device.type == "cuda":
        return CudaEventClock(device)
    return HostClock()
