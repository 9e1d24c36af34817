"""Device backends: chosen once per device, and the timing pass and watch's push mode run
through them into the one producer of a result's timed part (record_timing)."""

from __future__ import annotations

import pytest
import torch

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import FixedCount
from batchscope.hardware.nvml_sampler import NullSampler
from batchscope.hardware.nvml_window import NvmlWindow
from batchscope.profiler.device import CpuBackend, CudaBackend, backend
from batchscope.profiler.measurement import NVML_WINDOW_MIN_S, record_timing
from batchscope.profiler.memory import MemoryReading, PageFaults
from batchscope.profiler.timing import TimingConfig
from batchscope.records import BatchResult, PeakMemoryMethod, Status, StoppedBy

CUDA = torch.device("cuda")  # only its type is read: nothing here touches CUDA


class Sampler:
    """An NVML sampler that samples: its window spans start to stop on a fake clock."""

    def __init__(self, clock: list[float]) -> None:
        self.clock, self.closed = clock, False

    def start(self) -> None:
        self.began = self.clock[0]

    def stop(self) -> NvmlWindow:
        return NvmlWindow(duration_s=self.clock[0] - self.began, samples=3)

    def close(self) -> None:
        self.closed = True


class Memory:
    def __init__(self, log: list[str]) -> None:
        self.log = log

    def start(self) -> None:
        self.log.append("memory start")

    def stop(self) -> MemoryReading:
        self.log.append("memory stop")
        return MemoryReading(8 << 20, 4 << 20, PeakMemoryMethod.CUDA_MAX_ALLOCATED)


class FakeCudaBackend(CudaBackend):
    """CUDA's backend with a fake host clock, sync and peak memory (no GPU here)."""

    def __init__(self, clock: list[float], log: list[str]) -> None:
        super().__init__(CUDA, Sampler(clock))
        self.log = log
        self.host_clock = HostClock(self.sync, lambda: clock[0])

    def sync(self) -> None:
        self.log.append("sync")

    def peak_memory(self) -> Memory:
        return Memory(self.log)


def test_each_device_gets_its_backend_once() -> None:
    cpu = backend(torch.device("cpu"))
    try:
        assert isinstance(cpu, CpuBackend) and isinstance(cpu.sampler, NullSampler)
        assert isinstance(cpu.page_faults(), PageFaults) and cpu.window_min_s == 0.0
        assert not cpu.nvml_samples
        config = TimingConfig()
        assert cpu.timing(config) is config
    finally:
        cpu.close()
    # CUDA with a sampler that samples: the window, no host page faults, events for
    # benchmarks (nothing here touches CUDA: the sampler is given)
    cuda = backend(CUDA, Sampler([0.0]))
    assert isinstance(cuda, CudaBackend) and cuda.page_faults() is None
    assert cuda.nvml_samples
    assert cuda.window_min_s == NVML_WINDOW_MIN_S
    assert cuda.timing(TimingConfig()).window_min_s == NVML_WINDOW_MIN_S
    # ...and CUDA without NVML: no window to wait for
    assert backend(CUDA, NullSampler("pynvml is not installed")).window_min_s == 0.0


def test_the_timing_pass_on_the_cpu_lands_in_a_result() -> None:
    cpu = backend(torch.device("cpu"))
    try:
        timed = cpu.measure(lambda: sum(range(1000)), TimingConfig(), monitored=True)
        untimed = cpu.measure(lambda: sum(range(1000)), TimingConfig(), monitored=False)
    finally:
        cpu.close()
    assert timed.page_faults is not None and timed.nvml is not None  # the CPU's null window
    assert untimed.page_faults is None and untimed.nvml is None
    assert timed.memory.method != PeakMemoryMethod.NONE and timed.latency.first_step_s
    result = record_timing(BatchResult(8, Status.OK), timed, units_per_row=2)
    assert result.latency_s is timed.latency
    assert result.throughput_per_s == pytest.approx(8 * 2 / timed.latency.median)
    assert result.page_faults_per_step == timed.page_faults / timed.latency.n
    assert result.peak_memory_method == timed.memory.method


def test_the_timing_pass_reads_memory_around_the_warm_up_and_nvml_around_the_steps() -> None:
    clock, log = [0.0], []
    gpu = FakeCudaBackend(clock, log)

    def step() -> None:
        log.append("step")
        clock[0] += 0.25

    timed = gpu.measure(step, gpu.timing(TimingConfig.fixed(0.5)), policy=FixedCount(2))
    # memory from before the warm-up step to after the timed ones; every step synchronised
    assert log == ["memory start"] + ["step", "sync"] * 3 + ["memory stop"]
    assert timed.nvml is not None and timed.nvml.duration_s == pytest.approx(0.5)
    assert timed.latency.stopped_by == StoppedBy.SAMPLES and timed.latency.n == 2


def test_watchs_push_mode_ends_in_the_same_timed_steps() -> None:
    clock, log = [0.0], []
    gpu = FakeCudaBackend(clock, log)
    pushed = gpu.push(FixedCount(4, window_min_s=gpu.window_min_s), warmup_s=[0.1, 400e-6])
    assert pushed.timer.block_steps == 3  # 400 µs steps in blocks of ~1 ms, as the sweep
    last, done = clock[0], False
    while not done:
        clock[0] += 400e-6  # one step of the user's loop
        if pushed.timer.closes_sample():
            gpu.sync()
            done = pushed.timer.add(last, clock[0])
            last = clock[0]
    timed = pushed.stop()
    assert timed is not None and timed.latency.stopped_by == StoppedBy.NVML_WINDOW
    assert timed.latency.measured_s >= NVML_WINDOW_MIN_S
    assert timed.nvml is not None and timed.nvml.duration_s >= NVML_WINDOW_MIN_S
    assert timed.latency.block_steps == 3 and timed.latency.median == pytest.approx(400e-6)
    assert log[0] == "memory start" and log[-1] == "memory stop"
    # stopped before a block ended: nothing measured
    assert gpu.push(FixedCount(4), warmup_s=[]).stop() is None
