"""``watch`` on a GPU (issue 15, bug 5), without a GPU: a fake CUDA device behind the seams
watch measures through (its device backend's sync, host clock, NVML sampler and peak memory;
the profiler session's torch profiler), the user's model itself running on the CPU.

What must hold on a GPU: the timed steps end with the device synchronised, so a step's time
is the device's time, not the host's launch time; the profile comes from the sweep's own
:class:`ProfilerSession`, built for the CUDA device, so an op's time is its kernels' time;
and while NVML samples, the timed steps span its window.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from contextlib import contextmanager
from types import SimpleNamespace
from typing import Any

import pytest
import torch

from batchscope.engine.clock import HostClock
from batchscope.hardware.nvml_window import NvmlWindow
from batchscope.hardware.types import Ceilings
from batchscope.profiler.capture import STEP_TAG, ProfilerSession
from batchscope.profiler.device import CudaBackend
from batchscope.profiler.measurement import NVML_WINDOW_MIN_S
from batchscope.profiler.memory import MemoryReading
from batchscope.records import PeakMemoryMethod, StoppedBy, TimeBasis

watch_module = importlib.import_module("batchscope.watching")

CUDA = torch.device("cuda")  # only its type is read: nothing here touches CUDA
KERNEL_S = 400e-6  # the device's time for one step
LAUNCH_S = 5e-6  # the host's time to launch it
US = 1e-6


class FakeGpu:
    """The host clock (read through the backend's ``host_clock``) and a device queue:
    ``launch`` costs the host ``LAUNCH_S`` and queues a kernel; ``sync`` waits until the
    queue is empty."""

    def __init__(self) -> None:
        self.now = 100.0
        self.device_free_at = 0.0
        self.log: list[str] = []
        self.synced: list[torch.device] = []

    def perf_counter(self) -> float:
        return self.now

    def launch(self, kernel_s: float = KERNEL_S) -> None:
        self.now += LAUNCH_S
        self.device_free_at = max(self.now, self.device_free_at) + kernel_s

    def sync_of(self, device: torch.device):
        """What the device backend's ``sync`` does: wait for the queue."""
        def sync() -> None:
            self.synced.append(device)
            self.log.append("sync")
            self.now = max(self.now, self.device_free_at)
        return sync


class FakeEvent:
    """The fields of a profiler ``FunctionEvent`` that ``capture.parse_events`` reads."""

    def __init__(self, name: str, start_us: float, end_us: float, device_us: float = 0.0,
                 shapes: list[list[int]] | None = None, parent: Any = None) -> None:
        self.name, self.thread = name, 1
        self.time_range = SimpleNamespace(start=start_us, end=end_us)
        self.input_shapes = shapes or []
        self.cpu_parent = parent
        self.cpu_time_total = end_us - start_us
        self.device_time_total = device_us


class FakeProfiler:
    """Stands in for torch's profiler inside a CUDA :class:`ProfilerSession`: per step, one
    ``addmm`` whose launch takes the host 5 µs and whose kernel runs ``KERNEL_S``."""

    def __init__(self, steps: list[tuple[float, float]]) -> None:
        self.steps = steps

    def __exit__(self, *exc: object) -> None:
        pass

    @property
    def function_events(self) -> list[FakeEvent]:
        events = []
        for begin_s, end_s in self.steps:
            step = FakeEvent(STEP_TAG, begin_s / US, end_s / US)
            events += [step, FakeEvent("aten::addmm", begin_s / US + 1, begin_s / US + 6,
                                       device_us=KERNEL_S / US,
                                       shapes=[[16], [4, 16], [16, 16]], parent=step)]
        return events


def _fake_cuda(monkeypatch: pytest.MonkeyPatch) -> SimpleNamespace:
    """Put a fake CUDA device behind watch; what watch asked of it is recorded."""
    gpu = FakeGpu()
    seen = SimpleNamespace(gpu=gpu, sessions=[], sampler_devices=[], memory_devices=[])

    class RecordedSession(ProfilerSession):
        """The real session (its CUDA parsing included), torch's profiler faked."""

        def __init__(self, device: torch.device) -> None:
            super().__init__(device)
            seen.sessions.append(self)
            self.step_ranges: list[tuple[float, float]] = []

        def start(self) -> None:
            self._prof = FakeProfiler(self.step_ranges)

        @contextmanager
        def step(self) -> Iterator[None]:
            begin = gpu.now
            gpu.log.append("profiled step begins")
            yield
            gpu.log.append("profiled step ends")
            self.step_ranges.append((begin, gpu.now))

    class Sampler:
        def start(self) -> None:
            self.began = gpu.now

        def stop(self) -> NvmlWindow:
            return NvmlWindow(duration_s=gpu.now - self.began, samples=10)

        def close(self) -> None:
            pass

    class Memory:
        def __init__(self, device: torch.device) -> None:
            seen.memory_devices.append(device)

        def start(self) -> None:
            pass

        def stop(self) -> MemoryReading:
            return MemoryReading(8 << 20, 4 << 20, PeakMemoryMethod.CUDA_MAX_ALLOCATED)

    def sampler_of(device: torch.device) -> Sampler:
        seen.sampler_devices.append(device)
        return Sampler()

    class FakeCudaBackend(CudaBackend):
        """CUDA's backend (what ``backend(device)`` picks there) on the fake device: its
        sync and host clock, an NVML sampler that samples, a peak memory reading."""

        def __init__(self, device: torch.device) -> None:
            super().__init__(device, sampler_of(device))
            self.host_clock = HostClock(self.sync, gpu.perf_counter)

        def sync(self) -> None:
            gpu.sync_of(self.device)()

        def peak_memory(self) -> Memory:
            return Memory(self.device)

    ceilings = Ceilings(device="cuda", name="fake GPU", peak_flops_per_s={"float32": 50e12},
                        bandwidth_bytes_per_s=2e12, overhead_s=5e-6)
    monkeypatch.setattr(watch_module, "model_device", lambda model: CUDA)
    monkeypatch.setattr(watch_module, "backend", FakeCudaBackend)
    monkeypatch.setattr(watch_module, "ProfilerSession", RecordedSession)
    monkeypatch.setattr(watch_module, "available_bytes", lambda device: None)
    monkeypatch.setattr("batchscope.hardware.load_or_measure",
                        lambda device, **kwargs: ceilings)
    return seen


def _run_loop(w: Any, gpu: FakeGpu, model: torch.nn.Module, x: torch.Tensor) -> None:
    with torch.inference_mode(), w:
        for _ in range(100_000):
            if not w.active:
                break
            model(x)
            gpu.launch()  # the step's kernels: queued, not waited for
            w.step()


def test_watch_times_device_completion_and_profiles_kernels(
        monkeypatch: pytest.MonkeyPatch) -> None:
    seen = _fake_cuda(monkeypatch)
    gpu = seen.gpu
    model, x = torch.nn.Linear(16, 16).eval(), torch.randn(4, 16)
    w = watch_module.watch(model, out_dir=None)
    _run_loop(w, gpu, model, x)
    assert not w.active
    batch = w.report.batches[0]
    assert w.report.model.device == "cuda"

    # Timing: every sync is the CUDA device's, and a step's time is the kernel's, not the
    # 5 µs the host took to launch it (a clock read without a sync would see that).
    assert set(gpu.synced) == {CUDA}
    # The device's memory is read over the timed steps and over their repeat at the end.
    assert seen.sampler_devices == [CUDA] and seen.memory_devices == [CUDA, CUDA]
    assert batch.latency_s.median == pytest.approx(KERNEL_S, rel=0.02)
    drift = w.report.run.drift  # the repeat ran at the same kernel time: no drift
    assert drift is not None and drift.drift == pytest.approx(0.0, abs=0.05)
    assert batch.latency_s.block_steps == 3  # 400 µs steps in blocks of ~1 ms, as the sweep
    # NVML samples: the timed steps cover its window, though 8 samples took 10 ms
    assert batch.latency_s.measured_s >= NVML_WINDOW_MIN_S
    assert batch.latency_s.stopped_by == StoppedBy.NVML_WINDOW
    assert batch.nvml is not None and batch.nvml.duration_s >= NVML_WINDOW_MIN_S

    # Profiling: the sweep's session, built for the CUDA device, each step ending with the
    # device synchronised inside its range; an op's time is its kernel's time.
    (session,) = seen.sessions
    assert session.on_gpu
    profiled = [i for i, entry in enumerate(gpu.log) if entry == "profiled step begins"]
    assert len(profiled) == 1 + watch_module.PROFILED_STEPS
    for i in profiled:
        assert gpu.log[i:i + 3] == ["profiled step begins", "sync", "profiled step ends"]
    assert batch.profiled_step_s >= KERNEL_S
    assert batch.op_time_s == pytest.approx(KERNEL_S)  # device time; the CPU range is 5 µs
    (addmm,) = [op for op in batch.ops if op.name == "addmm"]
    assert addmm.time_s == pytest.approx(KERNEL_S)
    # in device terms, as the sweep: the step is the timed latency, its gaps GPU idle
    assert batch.time_basis == TimeBasis.DEVICE and batch.framework_s is None
    assert batch.profiled_step_s == pytest.approx(batch.latency_s.median)
    assert batch.device_idle_s == pytest.approx(batch.profiled_step_s - KERNEL_S)


def test_work_queued_before_watch_is_not_a_watched_step(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 20 ms of the loop's earlier work still runs on the device when watch starts; with one
    # warm-up step, that step alone picks the timing's block size.
    seen = _fake_cuda(monkeypatch)
    gpu = seen.gpu
    model, x = torch.nn.Linear(16, 16).eval(), torch.randn(4, 16)
    gpu.launch(kernel_s=0.02)
    w = watch_module.watch(model, out_dir=None, warmup_steps=1, profiled_steps=0)
    _run_loop(w, gpu, model, x)
    assert w.report.run.watch is not None
    assert w.report.run.watch.block_steps == 3  # from a 400 µs step, not a 20 ms one
    assert w.report.batches[0].latency_s.median == pytest.approx(KERNEL_S, rel=0.02)
