"""NVML probe, CUDA -> NVML mapping, sampler, summary and replay, against a fake pynvml.

There is no GPU in CI: a fake module of pynvml's shape (its real error classes, fake
devices) drives the real code. Tests drive ``sample_once()`` under a fake clock, so the
arithmetic is exact and nothing sleeps, except one short test of the background thread.
"""

from __future__ import annotations

import ctypes
import inspect
import json
import sys
import time
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

import pynvml as real
import pytest

from batchscope.hardware import nvml_api
from batchscope.hardware.nvml_api import (
    REASON_GPU_LOST,
    REASON_NOT_SUPPORTED_MIG,
    Nvml,
    NvmlUnavailable,
)
from batchscope.hardware.nvml_device import (
    nvml_handle_for_cuda_index,
    nvml_status,
    parse_visible_devices,
)
from batchscope.hardware.nvml_sampler import NullSampler, NvmlSampler, ReplaySampler, make_sampler
from batchscope.hardware.nvml_window import (
    POWER_SOURCE_AVERAGE,
    POWER_SOURCE_INSTANT,
    NvmlWindow,
    decode_throttle,
    energy_per_unit_j,
    trapezoid_j,
)
from batchscope.profiler.measurement import TimedSteps, record_timing
from batchscope.profiler.memory import MemoryReading
from batchscope.records import (
    BatchResult,
    FlagKind,
    LatencyStats,
    PeakMemoryMethod,
    Status,
)
from batchscope.reports.flag_text import flag_text

GPU0 = "GPU-8f3c1111-0000-0000-0000-000000000000"
GPU1 = "GPU-8f3d2222-0000-0000-0000-000000000000"
MIG_A = "MIG-aaaa1111-0000-0000-0000-000000000000"
MIG_B = "MIG-bbbb2222-0000-0000-0000-000000000000"
GIB = 1 << 30
WHOLE_GPU_FUNCTIONS = (
    "nvmlDeviceGetPowerUsage", "nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetUtilizationRates",
)


class FakeClock:
    """Seconds that move only when the test says so."""

    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


class FakeDevice:
    """One GPU or MIG instance; each reading is a function of the fake time since 100 s.

    ``power_w`` is what nvmlDeviceGetPowerUsage answers (a 1 s average on real GPUs after
    GA100), ``instant_w`` the NVML_FI_DEV_POWER_INSTANT field (None: a driver without it,
    which answers that field with NVML_ERROR_NOT_SUPPORTED), ``instant_return`` the field's
    own nvmlReturn at a time (0: success).
    """

    def __init__(self, uuid: str, clock: FakeClock, *, name: str = "Fake H100",
                 power_w: Callable[[float], float] = lambda t: 300.0,
                 energy_mj: Callable[[float], int] | None = lambda t: 5_000_000 + int(300_000 * t),
                 throttle: Callable[[float], int] = lambda t: 0,
                 instant_w: Callable[[float], float] | None = None,
                 instant_return: Callable[[float], int] = lambda t: real.NVML_SUCCESS,
                 fail: dict[str, type[Exception]] | None = None) -> None:
        self.uuid, self.name, self.clock = uuid, name, clock
        self.power_w, self.energy_mj, self.throttle = power_w, energy_mj, throttle
        self.instant_w, self.instant_return = instant_w, instant_return
        self.fail = dict(fail or {})
        self.lost = False
        self.parent: FakeDevice | None = None
        self.migs: list[tuple[int, int, FakeDevice]] = []  # (gpu instance, compute instance, mig)
        if energy_mj is None:
            self.fail["nvmlDeviceGetTotalEnergyConsumption"] = real.NVMLError_NotSupported

    def answer(self, function: str, value: Callable[[float], Any]) -> Any:
        if self.lost:
            raise real.NVMLError_GpuIsLost()
        if function in self.fail:
            raise self.fail[function]()
        return value(self.clock.t - 100.0)

    def add_mig(self, uuid: str, gpu_instance: int, compute_instance: int) -> FakeDevice:
        mig = FakeDevice(uuid, self.clock, name=f"{self.name} MIG 1g.10gb",
                         fail=dict.fromkeys(WHOLE_GPU_FUNCTIONS, real.NVMLError_NotSupported))
        mig.parent = self
        self.migs.append((gpu_instance, compute_instance, mig))
        return mig


class FakeNvml(SimpleNamespace):
    """pynvml's shape: its constants and error classes, fake devices behind the functions."""

    def __init__(self, gpus: list[FakeDevice], *,
                 init_error: type[Exception] | None = None) -> None:
        super().__init__(NVMLError=real.NVMLError, NVML_CLOCK_SM=real.NVML_CLOCK_SM,
                         NVML_CLOCK_MEM=real.NVML_CLOCK_MEM,
                         NVML_TEMPERATURE_GPU=real.NVML_TEMPERATURE_GPU)
        self.gpus, self.init_error = gpus, init_error
        self.calls: dict[str, int] = {}
        self.inits = self.shutdowns = 0

    def _count(self, name: str) -> None:
        self.calls[name] = self.calls.get(name, 0) + 1

    def _every(self) -> list[FakeDevice]:
        return [d for g in self.gpus for d in [g, *(m for _, _, m in g.migs)]]

    # -- library
    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise self.init_error()
        self.inits += 1

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return "550.54.15"

    # -- devices
    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeDevice:
        if not 0 <= index < len(self.gpus):
            raise real.NVMLError_InvalidArgument()
        return self.gpus[index]

    def nvmlDeviceGetHandleByUUID(self, uuid: str) -> FakeDevice:
        for device in self._every():
            if device.uuid == uuid:
                return device
        raise real.NVMLError_NotFound()

    def nvmlDeviceGetUUID(self, h: FakeDevice) -> str:
        return h.uuid

    def nvmlDeviceGetName(self, h: FakeDevice) -> str:
        return h.name

    def nvmlDeviceIsMigDeviceHandle(self, h: FakeDevice) -> ctypes.c_uint:
        return ctypes.c_uint(h.parent is not None)  # the real binding returns a c_uint too

    def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(self, h: FakeDevice) -> FakeDevice:
        if h.parent is None:
            raise real.NVMLError_InvalidArgument()
        return h.parent

    def nvmlDeviceGetMaxMigDeviceCount(self, h: FakeDevice) -> int:
        if not h.migs:
            raise real.NVMLError_NotSupported()
        return 7

    def nvmlDeviceGetMigDeviceHandleByIndex(self, h: FakeDevice, index: int) -> FakeDevice:
        if index >= len(h.migs):
            raise real.NVMLError_NotFound()
        return h.migs[index][2]

    def nvmlDeviceGetGpuInstanceId(self, h: FakeDevice) -> int:
        return next(gi for gi, _, m in h.parent.migs if m is h)

    def nvmlDeviceGetComputeInstanceId(self, h: FakeDevice) -> int:
        return next(ci for _, ci, m in h.parent.migs if m is h)

    # -- readings
    def nvmlDeviceGetPowerUsage(self, h: FakeDevice) -> int:
        self._count("power")
        return h.answer("nvmlDeviceGetPowerUsage", lambda t: round(h.power_w(t) * 1000))

    def nvmlDeviceGetFieldValues(self, h: FakeDevice, field_ids: list[int]) -> ctypes.Array:
        """As the real binding: an array of the real c_nvmlFieldValue_t, one per field, each
        with its own nvmlReturn (the call itself succeeds for fields the driver lacks)."""
        self._count("field")

        def values(t: float) -> ctypes.Array:
            out = (real.c_nvmlFieldValue_t * len(field_ids))()
            for slot, field_id in zip(out, field_ids):
                slot.fieldId = field_id
                if field_id != real.NVML_FI_DEV_POWER_INSTANT or h.instant_w is None:
                    slot.nvmlReturn = real.NVML_ERROR_NOT_SUPPORTED
                    continue
                slot.nvmlReturn = h.instant_return(t)
                slot.valueType = real.NVML_VALUE_TYPE_UNSIGNED_INT
                slot.value.uiVal = round(h.instant_w(t) * 1000)  # milliwatts
            return out

        return h.answer("nvmlDeviceGetFieldValues", values)

    def nvmlDeviceGetTotalEnergyConsumption(self, h: FakeDevice) -> int:
        self._count("energy")
        return h.answer("nvmlDeviceGetTotalEnergyConsumption", h.energy_mj)

    def nvmlDeviceGetClockInfo(self, h: FakeDevice, kind: int) -> int:
        self._count("clock")
        mhz = 1980 if kind == real.NVML_CLOCK_SM else 2619
        return h.answer("nvmlDeviceGetClockInfo", lambda t: mhz)

    def nvmlDeviceGetTemperature(self, h: FakeDevice, sensor: int) -> int:
        assert sensor == real.NVML_TEMPERATURE_GPU
        return h.answer("nvmlDeviceGetTemperature", lambda t: 60 + int(t))

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeDevice) -> int:
        self._count("events")
        return h.answer("nvmlDeviceGetCurrentClocksEventReasons", h.throttle)

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, h: FakeDevice) -> int:
        self._count("throttle_old")
        return h.answer("nvmlDeviceGetCurrentClocksThrottleReasons", h.throttle)

    def nvmlDeviceGetUtilizationRates(self, h: FakeDevice) -> SimpleNamespace:
        rates = SimpleNamespace(gpu=90, memory=40)
        return h.answer("nvmlDeviceGetUtilizationRates", lambda t: rates)

    def nvmlDeviceGetMemoryInfo(self, h: FakeDevice) -> SimpleNamespace:
        return h.answer("nvmlDeviceGetMemoryInfo",
                        lambda t: SimpleNamespace(used=(8 + int(t)) * GIB))


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def no_cvd(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)


def run_window(sampler: NvmlSampler | NullSampler, clock: FakeClock,
               times_s: list[float]) -> NvmlWindow:
    """Start at times_s[0], sample at each later time, stop at the last (which samples too)."""
    clock.t = 100.0 + times_s[0]
    sampler.start(background=False)
    for t in times_s[1:-1]:
        clock.t = 100.0 + t
        sampler.sample_once()
    clock.t = 100.0 + times_s[-1]
    return sampler.stop()


# ------------------------------------------------------------------ probe and factory
def test_probe_never_raises_on_this_machine() -> None:
    ok, reason = nvml_status()
    assert isinstance(ok, bool) and reason
    if not ok:  # the CPU machines this suite runs on have no NVIDIA driver
        assert "not found" in reason or "not importable" in reason


@pytest.mark.parametrize(("error", "words"), [
    (real.NVMLError_LibraryNotFound, "libnvidia-ml.so.1"),
    (real.NVMLError_DriverNotLoaded, "driver is not loaded"),
    (real.NVMLError_NoPermission, "no permission"),
    (RuntimeError, "RuntimeError"),
])
def test_probe_says_why_nvml_cannot_start(error: type[Exception], words: str) -> None:
    ok, reason = nvml_status(FakeNvml([], init_error=error))
    assert ok is False and words in reason


def test_probe_without_the_binding(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml now raises ImportError
    ok, reason = nvml_status()
    assert ok is False and "nvidia-ml-py is not importable" in reason


def test_probe_ok_and_no_gpu(clock: FakeClock) -> None:
    fake = FakeNvml([FakeDevice(GPU0, clock), FakeDevice(GPU1, clock)])
    assert nvml_status(fake) == (True, "NVML ok: 2 GPU(s), driver 550.54.15")
    assert fake.inits == fake.shutdowns == 1
    assert nvml_status(FakeNvml([])) == (False, "NVML sees no GPU")


def test_cpu_sampler_is_null_with_reason() -> None:
    sampler = make_sampler("cpu")
    assert isinstance(sampler, NullSampler)
    sampler.start()
    window = sampler.stop()
    assert window.unsupported == {"all": "no GPU: the device is cpu"}
    assert window.energy_j is window.power_w_mean is window.throttled is None
    assert window.samples == 0 and window.duration_s is not None and window.duration_s >= 0
    assert energy_per_unit_j(window, 8, 10) is None
    json.dumps(window.to_dict())


def test_cuda_sampler_without_nvml_is_null_with_reason() -> None:
    ok, probe_reason = nvml_status()
    if ok:
        pytest.skip("this machine has working NVML")
    window = make_sampler("cuda").stop()
    assert window.unsupported == {"all": probe_reason}


def test_cuda_sampler_with_unmappable_device_is_null(clock: FakeClock, no_cvd: None) -> None:
    fake = FakeNvml([FakeDevice(GPU0, clock)])
    sampler = make_sampler("cuda:3", nvml=fake, clock=clock)
    assert isinstance(sampler, NullSampler)
    assert "no NVML device for cuda:3" in sampler.stop().unsupported["all"]
    assert fake.inits == fake.shutdowns == 1  # NVML released again


# ------------------------------------------------------------------ CUDA -> NVML mapping
@pytest.mark.parametrize(("value", "expected"), [
    (None, None),
    ("1,0", [1, 0]),
    (" 2 , 0", [2, 0]),
    ("1gpu,3", [1, 3]),  # read like strtoul
    ("0,-1,2", [0]),  # an invalid entry ends the list
    ("0,0", []),  # a repeated entry hides every device
    ("", []),
    (f"{GPU1},GPU-8f3c", [GPU1, "GPU-8f3c"]),
    (f"{MIG_A}", [MIG_A]),
])
def test_parse_visible_devices(value: str | None, expected: list[int | str] | None) -> None:
    assert parse_visible_devices(value) == expected


@pytest.fixture
def two_gpus(clock: FakeClock) -> tuple[FakeNvml, FakeDevice, FakeDevice, FakeDevice, FakeDevice]:
    gpu0, gpu1 = FakeDevice(GPU0, clock), FakeDevice(GPU1, clock, name="Fake A100")
    mig_a, mig_b = gpu1.add_mig(MIG_A, 1, 0), gpu1.add_mig(MIG_B, 2, 0)
    return FakeNvml([gpu0, gpu1]), gpu0, gpu1, mig_a, mig_b


@pytest.mark.parametrize(("cvd", "cuda_index", "which"), [
    (None, 1, "gpu1"),
    ("1,0", 0, "gpu1"),
    ("1,0", 1, "gpu0"),
    (GPU1, 0, "gpu1"),
    (f"GPU-8f3d,{GPU0}", 1, "gpu0"),  # a unique prefix, then a full UUID
    ("GPU-8f3d", 0, "gpu1"),
    (MIG_B, 0, "mig_b"),
    ("MIG-aaaa", 0, "mig_a"),
    (f"MIG-{GPU1}/2/0", 0, "mig_b"),  # the pre-R470 form
])
def test_mapping_through_cuda_visible_devices(
    two_gpus: tuple, cvd: str | None, cuda_index: int, which: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake, gpu0, gpu1, mig_a, mig_b = two_gpus
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if cvd is None:
        monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    else:
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    device = nvml_handle_for_cuda_index(cuda_index, nvml=Nvml(fake))
    expected = {"gpu0": gpu0, "gpu1": gpu1, "mig_a": mig_a, "mig_b": mig_b}[which]
    assert device.handle is expected and device.uuid == expected.uuid
    assert device.is_mig is which.startswith("mig")
    if device.is_mig:
        assert device.parent_handle is gpu1
        assert any("whole GPU " + GPU1 in note for note in device.notes)
    else:
        assert device.parent_handle is None and device.notes == []


@pytest.mark.parametrize(("cvd", "cuda_index", "words"), [
    ("1,0", 2, "not visible"),
    ("GPU-8f3", 0, "ambiguous"),
    ("GPU-ffff", 0, "matches no device"),
    (f"MIG-{GPU1}/5/0", 0, "no MIG instance 5/0"),
    ("7", 0, "no GPU at index 7"),
])
def test_mapping_failures_say_why(two_gpus: tuple, cvd: str, cuda_index: int, words: str,
                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", cvd)
    with pytest.raises(NvmlUnavailable, match=words):
        nvml_handle_for_cuda_index(cuda_index, nvml=Nvml(two_gpus[0]))


def test_mapping_prefers_torch_uuid(two_gpus: tuple, monkeypatch: pytest.MonkeyPatch) -> None:
    fake, gpu0, gpu1, mig_a, _ = two_gpus
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")  # would say gpu0; torch's UUID wins
    nvml = Nvml(fake)
    device = nvml_handle_for_cuda_index(0, torch_uuid=GPU1.removeprefix("GPU-"), nvml=nvml)
    assert device.handle is gpu1 and device.mapping == "torch UUID"
    mig = nvml_handle_for_cuda_index(0, torch_uuid=MIG_A.removeprefix("MIG-"), nvml=nvml)
    assert mig.handle is mig_a and mig.is_mig
    unknown = nvml_handle_for_cuda_index(0, torch_uuid="0123abcd-0000", nvml=nvml)
    assert unknown.handle is gpu0 and "NVML does not know torch's UUID" in unknown.notes[0]


def test_index_mapping_warns_about_cuda_order(two_gpus: tuple, no_cvd: None) -> None:
    device = nvml_handle_for_cuda_index(0, nvml=Nvml(two_gpus[0]))
    assert any("CUDA_DEVICE_ORDER" in note for note in device.notes)


# ------------------------------------------------------------------ sampling and summary
def live_sampler(fake: FakeNvml, clock: FakeClock, cuda_index: int = 0) -> NvmlSampler:
    sampler = make_sampler("cuda", cuda_index, interval_s=0.05, nvml=fake, clock=clock)
    assert isinstance(sampler, NvmlSampler), sampler.stop().unsupported
    return sampler


def test_trapezoid_when_the_energy_counter_is_not_supported(clock: FakeClock, no_cvd: None) -> None:
    power = {0.0: 100.0, 1.0: 100.0, 2.0: 200.0}
    fake = FakeNvml([FakeDevice(GPU0, clock, power_w=power.__getitem__, energy_mj=None)])
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0, 2.0])
    # samples (0 s, 100 W), (1 s, 100 W), (2 s, 200 W):
    # (100 + 100) / 2 * 1 s + (100 + 200) / 2 * 1 s = 100 + 150 = 250 J
    assert window.energy_j == pytest.approx(250.0)
    assert window.energy_method == "integrated power"
    assert window.unsupported["energy_counter_mj"] == "not supported on this GPU"
    assert window.power_w_mean == pytest.approx(400 / 3) and window.power_w_max == 200.0
    assert window.duration_s == 2.0 and window.samples == 3
    assert fake.calls["energy"] == 1  # a permanent "not supported" is not asked again
    assert trapezoid_j([(0.0, 100.0), (1.0, 100.0), (2.0, 200.0)]) == 250.0


def test_energy_from_the_counter(clock: FakeClock, no_cvd: None) -> None:
    fake = FakeNvml([FakeDevice(GPU0, clock)])  # counter 5_000_000 mJ + 300_000 mJ/s
    window = run_window(live_sampler(fake, clock), clock, [0.0, 0.5, 1.0, 1.5, 2.0])
    # (5_600_000 - 5_000_000) mJ / 1000 = 600 J over 2 s, i.e. 300 W
    assert window.energy_j == 600.0 and window.energy_method == "counter"
    assert window.power_w_mean == 300.0 and window.sm_clock_mhz_median == 1980
    assert window.mem_clock_mhz_median == 2619 and window.temperature_c_max == 62
    assert window.gpu_util_pct_mean == 90 and window.mem_util_pct_mean == 40
    assert window.memory_used_bytes_max == 10 * GIB
    assert window.throttled is False and window.throttle_reasons == set()
    assert window.unsupported == {} and window.device["uuid"] == GPU0
    # 64 tokens per step for 10 steps: 600 J / 640 tokens = 0.9375 J/token
    assert energy_per_unit_j(window, units_per_step=64, steps=10) == 0.9375


def test_no_permission_for_clocks_is_null_with_reason(clock: FakeClock, no_cvd: None) -> None:
    gpu = FakeDevice(GPU0, clock, fail={"nvmlDeviceGetClockInfo": real.NVMLError_NoPermission})
    window = run_window(live_sampler(FakeNvml([gpu]), clock), clock, [0.0, 1.0])
    assert window.sm_clock_mhz_median is None and window.mem_clock_mhz_median is None
    assert window.unsupported == {"sm_clock_mhz": "no permission", "mem_clock_mhz": "no permission"}
    assert window.energy_method == "counter"


def test_throttle_bits_decode() -> None:
    assert decode_throttle(0) == set()
    assert decode_throttle(0x1 | 0x4) == {"idle", "sw power cap"}
    assert decode_throttle(0x8 | 0x40 | 0x80) == {"hw slowdown", "hw thermal", "power brake"}
    assert decode_throttle(0x20 | 0x10 | 0x2) == {
        "sw thermal", "sync boost", "applications clocks setting"}
    assert decode_throttle(0x1000) == {"unknown bits 0x1000"}


@pytest.mark.parametrize(("masks", "reasons", "throttled"), [
    ([0x1, 0x1], set(), False),  # idle between steps only
    ([0x2, 0x3], {"applications clocks setting"}, False),  # clocks pinned on purpose
    ([0x0, 0x4, 0x1], {"sw power cap"}, True),
    ([0x40, 0x0, 0x0], {"hw thermal"}, True),
])
def test_throttled_ignores_idle_and_pinned_clocks(
    masks: list[int], reasons: set[str], throttled: bool, clock: FakeClock, no_cvd: None,
) -> None:
    by_time = dict(zip([0.0, 1.0, 2.0], masks))
    fake = FakeNvml([FakeDevice(GPU0, clock, throttle=by_time.__getitem__)])
    window = run_window(live_sampler(fake, clock), clock, list(by_time))
    assert window.throttle_reasons == reasons and window.throttled is throttled
    assert window.throttled_by() == (sorted(reasons) if throttled else [])
    # the timing pass flags it (the sentence is the reports layer's)
    result = record_timing(BatchResult(8, Status.OK), TimedSteps(
        LatencyStats(0.01, 0.01, 0.01, 10),
        MemoryReading(1, 0, PeakMemoryMethod.CUDA_MAX_ALLOCATED), window))
    flags = [f for f in result.flags if f.kind == FlagKind.GPU_THROTTLED]
    assert len(flags) == int(throttled)
    if throttled:
        assert flags[0].values["reasons"] == sorted(reasons)
        assert next(iter(reasons)) in flag_text(flags[0])


def test_old_drivers_use_the_throttle_reasons_function(clock: FakeClock, no_cvd: None) -> None:
    missing = {"nvmlDeviceGetCurrentClocksEventReasons": real.NVMLError_FunctionNotFound}
    gpu = FakeDevice(GPU0, clock, throttle=lambda t: 0x4, fail=missing)
    fake = FakeNvml([gpu])
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0, 2.0])
    assert window.throttle_reasons == {"sw power cap"} and window.throttled is True
    assert fake.calls["events"] == 1 and fake.calls["throttle_old"] == 3  # the new one tried once


def test_gpu_lost_mid_window_keeps_the_samples_so_far(clock: FakeClock, no_cvd: None) -> None:
    gpu = FakeDevice(GPU0, clock, power_w={0.0: 100.0, 1.0: 300.0}.get)
    fake = FakeNvml([gpu])
    sampler = live_sampler(fake, clock)
    sampler.start(background=False)  # t = 0 s
    clock.t += 1.0
    sampler.sample_once()
    gpu.lost = True
    clock.t += 1.0
    sampler.sample_once()
    calls = dict(fake.calls)
    clock.t += 1.0
    window = sampler.stop()  # t = 3 s
    assert fake.calls == calls  # nothing asked of a lost GPU after the first failure
    samples = sampler.samples
    assert [s.power_w for s in samples] == [100.0, 300.0, None, None]
    assert samples[3].errors["memory_used_bytes"] == REASON_GPU_LOST
    assert window.samples == 4 and window.duration_s == 3.0
    assert window.power_w_mean == 200.0 and window.power_w_max == 300.0
    assert window.unsupported["power_w"] == (
        f"{REASON_GPU_LOST}: missing in 2 of 4 samples, first at 2.000 s")
    assert window.energy_j is None and "GPU is lost" in window.unsupported["energy_j"]


def test_mig_reads_whole_gpu_figures_from_the_parent(two_gpus: tuple, clock: FakeClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake = two_gpus[0]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_A)
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0])
    assert window.energy_method == "counter" and window.power_w_mean == 300.0  # the parent's
    assert window.memory_used_bytes_max == 9 * GIB  # the instance's own
    assert window.unsupported == {"gpu_util_pct": REASON_NOT_SUPPORTED_MIG,
                                  "mem_util_pct": REASON_NOT_SUPPORTED_MIG}
    assert window.device["is_mig"] is True and "whole GPU" in window.notes[0]


def test_background_thread_samples_until_stop(clock: FakeClock, no_cvd: None) -> None:
    fake = FakeNvml([FakeDevice(GPU0, clock)])
    sampler = make_sampler("cuda", interval_s=0.005, nvml=fake)  # real clock, short interval
    sampler.start()
    time.sleep(0.05)
    window = sampler.stop()
    sampler.close()
    assert window.samples >= 3 and window.power_w_mean == 300.0
    assert fake.shutdowns == fake.inits == 1
    stamps = [s.timestamp_s for s in sampler.samples]
    assert stamps == sorted(stamps) and stamps[0] == pytest.approx(0.0, abs=0.01)


# ------------------------------------------------------------------ instantaneous power
def test_power_is_the_instantaneous_field_where_the_driver_has_it(
    clock: FakeClock, no_cvd: None, tmp_path,
) -> None:
    # A step from 100 W to 400 W at 1 s: the instantaneous field follows it, the 1 s average
    # of nvmlDeviceGetPowerUsage still says 100 W (it lags), and there is no energy counter.
    instant = {0.0: 100.0, 1.0: 400.0, 2.0: 400.0}
    gpu = FakeDevice(GPU0, clock, power_w=lambda t: 100.0, instant_w=instant.__getitem__,
                     energy_mj=None)
    fake = FakeNvml([gpu])
    sampler = live_sampler(fake, clock)
    window = run_window(sampler, clock, [0.0, 1.0, 2.0])
    assert window.power_source == POWER_SOURCE_INSTANT
    assert [s.power_w for s in sampler.samples] == [100.0, 400.0, 400.0]
    assert all(s.power_source == POWER_SOURCE_INSTANT for s in sampler.samples)
    # (100 + 400) / 2 * 1 s + (400 + 400) / 2 * 1 s = 250 + 400 = 650 J
    assert window.energy_method == "integrated power" and window.energy_j == pytest.approx(650.0)
    assert window.power_w_max == 400.0 and "power_source" not in window.unsupported
    assert fake.calls["field"] == 3 and "power" not in fake.calls  # the average never asked
    assert not any("moving average" in note for note in window.notes)
    assert window.to_dict()["power_source"] == POWER_SOURCE_INSTANT  # BatchResult.nvml
    replayed = ReplaySampler(sampler.write_samples(tmp_path / "nvml.jsonl")).stop()
    assert replayed == window


def test_power_falls_back_to_the_average_where_the_field_is_unsupported(
    clock: FakeClock, no_cvd: None,
) -> None:
    power = {0.0: 100.0, 1.0: 100.0, 2.0: 200.0}
    fake = FakeNvml([FakeDevice(GPU0, clock, power_w=power.__getitem__, energy_mj=None)])
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0, 2.0])
    assert window.power_source == POWER_SOURCE_AVERAGE
    assert window.energy_j == pytest.approx(250.0) and window.energy_method == "integrated power"
    assert fake.calls["field"] == 1 and fake.calls["power"] == 3  # the field asked once only
    assert any("(NVML_FI_DEV_POWER_INSTANT): not supported on this GPU" in n for n in window.notes)
    assert any("lags the window" in note for note in window.notes)


def test_power_falls_back_where_the_driver_lacks_field_values(
    clock: FakeClock, no_cvd: None,
) -> None:
    missing = {"nvmlDeviceGetFieldValues": real.NVMLError_FunctionNotFound}
    gpu = FakeDevice(GPU0, clock, instant_w=lambda t: 500.0, fail=missing)
    fake = FakeNvml([gpu])
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0, 2.0])
    assert window.power_source == POWER_SOURCE_AVERAGE and window.power_w_mean == 300.0
    assert fake.calls["field"] == 1
    assert any("driver too old" in note for note in window.notes)


def test_a_transient_field_error_uses_the_average_for_that_sample_only(
    clock: FakeClock, no_cvd: None,
) -> None:
    not_ready = {0.0: real.NVML_SUCCESS, 1.0: 27, 2.0: real.NVML_SUCCESS}  # NVML_ERROR_NOT_READY
    gpu = FakeDevice(GPU0, clock, instant_w=lambda t: 250.0, instant_return=not_ready.__getitem__)
    fake = FakeNvml([gpu])
    sampler = live_sampler(fake, clock)
    window = run_window(sampler, clock, [0.0, 1.0, 2.0])
    assert [s.power_source for s in sampler.samples] == [
        POWER_SOURCE_INSTANT, POWER_SOURCE_AVERAGE, POWER_SOURCE_INSTANT]
    assert [s.power_w for s in sampler.samples] == [250.0, 300.0, 250.0]
    assert window.power_source == f"{POWER_SOURCE_INSTANT} then {POWER_SOURCE_AVERAGE}"
    assert fake.calls["field"] == 3


def test_the_energy_counter_stays_preferred_over_instantaneous_power(
    clock: FakeClock, no_cvd: None,
) -> None:
    fake = FakeNvml([FakeDevice(GPU0, clock, instant_w=lambda t: 999.0)])
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0, 2.0])
    assert window.energy_method == "counter" and window.energy_j == 600.0  # 300_000 mJ/s, 2 s
    assert window.power_source == POWER_SOURCE_INSTANT and window.power_w_mean == 999.0


def test_mig_reads_instantaneous_power_of_the_parent(two_gpus: tuple, clock: FakeClock,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    fake, _, gpu1, *_ = two_gpus
    gpu1.instant_w = lambda t: 420.0
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", MIG_A)
    window = run_window(live_sampler(fake, clock), clock, [0.0, 1.0])
    assert window.power_source == POWER_SOURCE_INSTANT and window.power_w_mean == 420.0


@pytest.mark.parametrize(("value_type", "member", "number"), [
    (real.NVML_VALUE_TYPE_UNSIGNED_INT, "uiVal", 123_456),
    (real.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG, "ullVal", 2**40),
    (real.NVML_VALUE_TYPE_DOUBLE, "dVal", 12.5),
])
def test_field_values_are_read_by_their_value_type(value_type: int, member: str,
                                                   number: float) -> None:
    class Binding:
        def nvmlDeviceGetFieldValues(self, handle: object, field_ids: list[int]) -> ctypes.Array:
            out = (real.c_nvmlFieldValue_t * 1)()
            out[0].fieldId, out[0].valueType = field_ids[0], value_type
            setattr(out[0].value, member, number)
            return out

    reading = Nvml(Binding()).field_value(object(), real.NVML_FI_DEV_POWER_INSTANT)
    assert reading.value == number and reading.reason is None


# ------------------------------------------------------------------ record and replay
def test_replay_gives_the_live_window(tmp_path, clock: FakeClock, two_gpus: tuple,
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    fake, gpu0, *_ = two_gpus
    gpu0.throttle = lambda t: 0x4 if t >= 1.0 else 0x1
    gpu0.fail["nvmlDeviceGetClockInfo"] = real.NVMLError_NoPermission
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", GPU0)
    sampler = live_sampler(fake, clock)
    live = run_window(sampler, clock, [0.0, 0.25, 0.5, 1.0, 1.5])
    path = sampler.write_samples(tmp_path / "nvml.jsonl")
    replayed = ReplaySampler(path).stop()
    assert replayed == live
    assert NvmlWindow.from_dict(json.loads(json.dumps(live.to_dict()))) == live
    # Independently from the file: the counter moved 300_000 mJ/s for 1.5 s = 450 J.
    lines = path.read_text().splitlines()
    first, last = json.loads(lines[1]), json.loads(lines[-1])
    assert (last["energy_counter_mj"] - first["energy_counter_mj"]) / 1000 == live.energy_j == 450.0
    assert len(lines) == 1 + live.samples == 6
    assert live.throttled is True and live.unsupported["sm_clock_mhz"] == "no permission"


def test_replay_of_a_null_sampler_says_the_same(tmp_path) -> None:
    null = make_sampler("cpu")
    null.start()
    window = null.stop()
    assert ReplaySampler(null.write_samples(tmp_path / "none.jsonl")).stop() == window


def test_replay_rejects_foreign_files(tmp_path) -> None:
    (tmp_path / "x.jsonl").write_text('{"format": "something else"}\n')
    with pytest.raises(ValueError, match=r"not a batchscope\.nvml_samples/1 file"):
        ReplaySampler(tmp_path / "x.jsonl")


# ------------------------------------------------------------------ the real binding
class _RealSignatures:
    """nvidia-ml-py's own functions as a binding whose every call fails the way a driver
    without the function answers (``NVMLError_FunctionNotFound``), once its arguments have
    been bound to the real function's signature; it records each name asked for."""

    def __init__(self) -> None:
        self.called: set[str] = set()
        self.missing: set[str] = set()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        function = getattr(real, name, None)
        if function is None:
            self.missing.add(name)
            raise AttributeError(name, name=name, obj=self)
        signature = inspect.signature(function)

        def call(*args: Any) -> Any:
            signature.bind(*args)  # a TypeError here: called with the wrong arguments
            self.called.add(name)
            raise real.NVMLError_FunctionNotFound()

        return call


# An argument for each of Nvml's methods' parameters, by name.
_ARGUMENTS = {"handle": object(), "index": 0, "uuid": GPU0, "field_id": 186}


def test_every_method_calls_functions_the_real_binding_has_with_their_arguments() -> None:
    """The fakes above must not hide a typo: every method of the wrapper, called on the
    real binding's functions (each failing as an old driver's would, so that a method tries
    its older function too), asks only for functions nvidia-ml-py has, with arguments their
    signatures accept."""
    binding = _RealSignatures()
    nvml = Nvml(binding)
    methods = [(name, method) for name, method in inspect.getmembers(nvml, inspect.ismethod)
               if not name.startswith("_")]
    assert len(methods) > 20
    for name, method in methods:
        args = [_ARGUMENTS[p] for p in inspect.signature(method).parameters]
        reading = method(*args)
        assert reading.value is None and reading.code == nvml_api.ERROR_FUNCTION_NOT_FOUND, name
    assert binding.missing == set()
    # 4 of the library (init, shutdown, driver version, count) + 10 of devices (handles by
    # index and UUID, UUID, name, MIG: is one, its parent, count, by index, the two
    # instance ids) + 10 of readings (field values, power, energy, clocks, temperature and
    # its older function, throttle reasons and theirs, utilisation, memory) = 24
    assert len(binding.called) == 24
    assert {"nvmlDeviceGetTemperature", "nvmlDeviceGetCurrentClocksThrottleReasons"} <= (
        binding.called)


def test_the_enum_values_and_error_codes_written_in_the_wrapper_are_the_bindings() -> None:
    assert (nvml_api.CLOCK_SM, nvml_api.CLOCK_MEM) == (real.NVML_CLOCK_SM, real.NVML_CLOCK_MEM)
    assert nvml_api.TEMPERATURE_GPU == real.NVML_TEMPERATURE_GPU
    assert nvml_api.FI_DEV_POWER_INSTANT == real.NVML_FI_DEV_POWER_INSTANT
    for name, code in vars(nvml_api).items():
        if name.startswith("ERROR_"):
            assert getattr(real, f"NVML_{name}") == code, name


def test_a_function_missing_from_the_binding_is_a_reason_not_a_crash() -> None:
    reading = Nvml(SimpleNamespace()).driver_version()
    assert reading.value is None and reading.code == nvml_api.ERROR_FUNCTION_NOT_FOUND
    assert reading.reason == "nvmlSystemGetDriverVersion is not in this nvidia-ml-py version"


def test_real_binding_errors_become_reasons() -> None:
    ok, _ = nvml_status()
    if ok:
        pytest.skip("this machine has working NVML")
    reading = Nvml(real).power_average_w(None)  # NVML never initialised here
    assert reading.value is None and reading.reason == "NVML is not initialised"
