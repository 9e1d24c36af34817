"""The engine's clocks: the host's, draining the device before it stops, and CUDA events on
the device's own stream (on a machine without a GPU: torch.cuda faked)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from batchscope.engine.clock import CudaEventClock, HostClock, device_clock


class FakeEvents:
    """torch.cuda's streams and events for two GPUs: ``current_stream(device)`` is that
    device's stream (cuda:0 for a bare one, the current device), and an event records on
    the stream it is given, else on the current device's, as ``Event.record`` does."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.recorded_on: list[int] = []
        fake = self

        class Event:
            def __init__(self, enable_timing: bool = False) -> None:
                self.device: int | None = None

            def record(self, stream: SimpleNamespace | None = None) -> None:
                self.device = (stream or fake.current_stream()).device_index
                fake.recorded_on.append(self.device)

            def synchronize(self) -> None:
                pass

            def elapsed_time(self, end: Event) -> float:
                assert end.device == self.device, "events of one timing on two devices"
                return 2.0  # milliseconds

        monkeypatch.setattr(torch.cuda, "current_stream", self.current_stream)
        monkeypatch.setattr(torch.cuda, "Event", Event)

    def current_stream(self, device: torch.device | None = None) -> SimpleNamespace:
        index = device.index if device is not None and device.index is not None else 0
        return SimpleNamespace(device_index=index)


def test_the_host_clock_stops_after_the_device_drained() -> None:
    log: list[str] = []
    now = [10.0]

    def call() -> None:
        log.append("call")
        now[0] += 1.0

    def sync() -> None:
        log.append("sync")
        now[0] += 0.5  # the device's queue: inside the sample

    seconds, ended_at = HostClock(sync, lambda: now[0]).time(call, inner=3)
    assert log == ["call", "call", "call", "sync"]
    assert (seconds, ended_at) == (3.5, 13.5)


def test_cuda_events_time_the_device_asked_for(monkeypatch: pytest.MonkeyPatch) -> None:
    fake = FakeEvents(monkeypatch)  # current device: cuda:0
    calls: list[int] = []
    seconds, ended_at = CudaEventClock(torch.device("cuda", 1), read=lambda: 7.0).time(
        lambda: calls.append(1), inner=4)
    assert fake.recorded_on == [1, 1] and len(calls) == 4
    assert (seconds, ended_at) == (pytest.approx(2e-3), 7.0)  # the fake's 2 ms


def test_each_device_gets_its_benchmarks_clock() -> None:
    assert isinstance(device_clock(torch.device("cpu")), HostClock)
    assert isinstance(device_clock(torch.device("cuda", 1)), CudaEventClock)
