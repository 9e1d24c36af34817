"""One device's measuring seams, chosen once: :func:`backend`.

A :class:`DeviceBackend` holds what timing a step on a device needs, so no caller asks
``device.type == "cuda"`` again: how to wait for the device (:meth:`~DeviceBackend.sync`),
the clock the timing pass reads (:attr:`~DeviceBackend.host_clock`: the host's, the device
drained before it stops; a benchmark of the device reads ``engine.clock.device_clock``),
its peak memory
(:class:`~batchscope.profiler.memory.PeakMemory`), page faults (the CPU only: host faults
only matter to a step that runs on the host), and its NVML sampler (a null one off CUDA, or
where NVML is missing, saying why). :meth:`~DeviceBackend.measure` runs the timing pass
with all of them; :meth:`~DeviceBackend.push` gives ``watch`` the same for a loop that is
not ours. Both end in a :class:`~batchscope.profiler.measurement.TimedSteps`, which
:func:`~batchscope.profiler.measurement.record_timing` alone puts into a result.

Example:
    >>> import torch
    >>> cpu = backend(torch.device("cpu"))
    >>> timed = cpu.measure(lambda: sum(range(100)), TimingConfig())
    >>> timed.latency.n > 0 and timed.page_faults is not None
    True
    >>> cpu.close()
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import StopPolicy
from batchscope.engine.timer import Monitors, PushTimer, block_for
from batchscope.hardware.nvml_sampler import NullSampler, NvmlSampler, make_sampler
from batchscope.profiler.measurement import (
    NVML_WINDOW_MIN_S,
    TimedSteps,
    nvml_samples,
    timing_for,
)
from batchscope.profiler.memory import PageFaults, PeakMemory
from batchscope.profiler.timing import BLOCK_MIN_S, TimingConfig, latency_stats, time_steps


def cuda_identity(device: torch.device) -> tuple[int, str | None]:
    """CUDA index and the UUID torch reports, for the NVML handle (0, None on the CPU)."""
    if device.type != "cuda":
        return 0, None
    index = device.index if device.index is not None else torch.cuda.current_device()
    return index, str(torch.cuda.get_device_properties(index).uuid)


class DeviceBackend:
    """The measuring seams of one device (use :func:`backend`, which picks the subclass).

    Attributes:
        device: the device measured.
        sampler: its NVML sampler (a :class:`~batchscope.hardware.nvml_sampler.NullSampler`
            where NVML does not sample it); :meth:`close` closes it.
        host_clock: the host's clock, the device drained before it stops: what the timing
            pass, the kernel probes and ``watch`` read (launches and all).
    """

    def __init__(self, device: torch.device, sampler: NvmlSampler | NullSampler) -> None:
        self.device = device
        self.sampler = sampler
        self.host_clock = HostClock(self.sync)

    def sync(self) -> None:
        """Wait for the device's queued work (nothing to wait for on the CPU)."""

    def peak_memory(self) -> PeakMemory:
        """A fresh peak-memory reading of the device, not started."""
        return PeakMemory(self.device)

    def page_faults(self) -> PageFaults | None:
        """A counter of the host's minor page faults where they matter (the CPU)."""
        return None

    def monitors(self) -> Monitors:
        """What observes the timed steps; ``stop()`` gives (NVML window, page faults)."""
        return Monitors(self.sampler, self.page_faults())

    @property
    def nvml_samples(self) -> bool:
        """Whether NVML samples the timed steps here."""
        return nvml_samples(self.device, self.sampler)

    @property
    def window_min_s(self) -> float:
        """The least the timed steps span here: :data:`NVML_WINDOW_MIN_S` while NVML
        samples (its power readings average over about a second), else 0."""
        return NVML_WINDOW_MIN_S if self.nvml_samples else 0.0

    def timing(self, config: TimingConfig) -> TimingConfig:
        """``config`` with this device's window
        (:func:`~batchscope.profiler.measurement.timing_for`)."""
        return timing_for(self.device, config, self.sampler)

    def measure(self, step: Callable[[], Any], config: TimingConfig, *,
                policy: StopPolicy | None = None, monitored: bool = True) -> TimedSteps:
        """The timing pass of ``step`` (:func:`~batchscope.profiler.timing.time_steps`):
        peak memory from before the warm-up (its first step allocates the most) to the end,
        and, ``monitored``, the NVML window and page faults over the timed steps."""
        memory = self.peak_memory()
        memory.start()
        monitors = self.monitors() if monitored else None
        stats, _, observed = time_steps(step, self.host_clock, config, monitors, policy=policy)
        window, faults = observed if observed is not None else (None, None)
        return TimedSteps(stats, memory.stop(), window, faults)

    def push(self, policy: StopPolicy, warmup_s: Sequence[float],
             memory: PeakMemory | None = None) -> PushedSteps:
        """Timed steps that a loop not ours feeds (``watch``, a finder's trial), starting
        now: blocks sized from ``warmup_s`` as the timing pass sizes them, the monitors
        started, and peak memory from now, or ``memory``'s reading, already started (a
        finder's, before its warm-up: as the timing pass's, whose first step allocates the
        most)."""
        return PushedSteps(self, policy, block_for(warmup_s, BLOCK_MIN_S), memory)

    def close(self) -> None:
        """Release the NVML sampler."""
        self.sampler.close()


class CpuBackend(DeviceBackend):
    """A host device: nothing to wait for, the worker's peak RSS, page faults on the CPU."""

    def page_faults(self) -> PageFaults | None:
        return PageFaults() if self.device.type == "cpu" else None


class CudaBackend(DeviceBackend):
    """A CUDA device: its own synchronize, CUDA events for benchmarks, the allocator's peak."""

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)


def backend(device: torch.device,
            sampler: NvmlSampler | NullSampler | None = None) -> DeviceBackend:
    """The backend of ``device``: CUDA's, else the host's; its NVML sampler made here (a
    null one off CUDA, saying why) unless given. Never raises for a missing NVML."""
    if sampler is None:
        sampler = make_sampler(device.type, *cuda_identity(device))
    if device.type == "cuda":
        return CudaBackend(device, sampler)
    return CpuBackend(device, sampler)


class PushedSteps:
    """The timed phase of a loop that is not ours (``watch``): the engine's
    :class:`~batchscope.engine.timer.PushTimer` between the device's peak memory and its
    monitors, ending in the same :class:`TimedSteps` as :meth:`DeviceBackend.measure`.

    The caller, at each step of its loop: ``if timer.closes_sample()``, syncs the device,
    reads :attr:`DeviceBackend.host_clock` and calls ``timer.add(block_began, now)``, which
    says when the policy is done; then :meth:`stop`.
    """

    def __init__(self, device: DeviceBackend, policy: StopPolicy, block_steps: int,
                 memory: PeakMemory | None = None) -> None:
        self._memory = memory if memory is not None else device.peak_memory()
        self._monitors = device.monitors()
        if memory is None:
            self._memory.start()
        self._monitors.start()
        self.timer = PushTimer(policy, block_steps, device.host_clock.now())

    def stop(self) -> TimedSteps | None:
        """Stop the monitors and the memory reading; what was measured (None when no block
        ended)."""
        window, faults = self._monitors.stop()
        memory = self._memory.stop()
        sampled = self.timer.result()
        if sampled is None:
            return None
        stats = latency_stats(sampled.samples_s, sampled.block_steps,
                              measured_s=sampled.measured_s, stopped_by=sampled.stopped_by)
        return TimedSteps(stats, memory, window, faults)
