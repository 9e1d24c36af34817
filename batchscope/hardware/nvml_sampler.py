"""Power, energy, clocks and throttling around a measurement, sampled from NVML.

:func:`make_sampler` is the one entry point: a live :class:`NvmlSampler` on a CUDA device
NVML can see, else a :class:`NullSampler` whose window says why it is empty, so callers
never branch on the device. :class:`ReplaySampler` reads a recording the live sampler wrote
(``write_samples``) and gives the same window through the same :func:`summarize`.

Power is read as the instantaneous draw (the NVML field ``NVML_FI_DEV_POWER_INSTANT``)
where the driver has it, else with ``nvmlDeviceGetPowerUsage``, which on GPUs after GA100
(Ampere and later) is a one-second moving average, so the integrated-power fallback for
energy would lag the window. Each sample says which (``power_source``), and so does the
window. NVML's energy counter stays the first choice for energy wherever it exists.

Example:
    >>> sampler = make_sampler("cpu")
    >>> sampler.start()
    >>> window = sampler.stop()
    >>> window.unsupported
    {'all': 'no GPU: the device is cpu'}
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from batchscope.hardware.nvml_api import (
    ERROR_FUNCTION_NOT_FOUND,
    ERROR_INVALID_ARGUMENT,
    ERROR_NO_PERMISSION,
    ERROR_NOT_SUPPORTED,
    REASON_NOT_SUPPORTED_MIG,
    Handle,
    Nvml,
    NvmlUnavailable,
    Reading,
    init_nvml,
)
from batchscope.hardware.nvml_device import NvmlDevice, nvml_handle_for_cuda_index
from batchscope.hardware.nvml_window import (
    POWER_SOURCE_AVERAGE,
    POWER_SOURCE_INSTANT,
    SAMPLE_FIELDS,
    NvmlRecording,
    NvmlSample,
    NvmlWindow,
    read_recording,
    summarize,
    write_recording,
)

# 20 Hz: several samples even in a 0.2 s window, and nine NVML calls per sample stay cheap.
DEFAULT_INTERVAL_S = 0.05
# Below this the thread would spin; NVML's own power readings refresh far slower.
MIN_INTERVAL_S = 0.005
# Errors that will not change while the process lives: stop asking after the first one.
_PERMANENT_ERRORS = frozenset({ERROR_NOT_SUPPORTED, ERROR_NO_PERMISSION, ERROR_FUNCTION_NOT_FOUND})
# A field value the driver answers with one of these will not appear later: use the function.
# (INVALID_ARGUMENT too: a driver older than the field id may reject the id itself.)
_FIELD_ABSENT_ERRORS = _PERMANENT_ERRORS | {ERROR_INVALID_ARGUMENT}


class Sampler(Protocol):
    """What the worker uses, live, null or replayed alike."""

    def start(self) -> None: ...
    def stop(self) -> NvmlWindow: ...
    def write_samples(self, path: str | Path) -> Path: ...
    def close(self) -> None: ...


def _one(value: Any) -> tuple[Any, ...]:
    return (value,)


@dataclass(frozen=True)
class _Query:
    """One NVML reading feeding one or more sample fields."""

    fields: tuple[str, ...]
    read: Callable[[Nvml, Handle], Reading[Any]]  # a method of Nvml
    whole_gpu: bool  # a per-GPU quantity: read from the parent GPU on a MIG instance
    split: Callable[[Any], tuple[Any, ...]] = _one  # the reading's value -> the fields
    # A reading tried before ``read`` (an NVML field value, which the driver may lack; then
    # ``read`` serves), and how its value splits into the fields.
    first: Callable[[Nvml, Handle], Reading[Any]] | None = None
    first_split: Callable[[Any], tuple[Any, ...]] = _one


_QUERIES = (
    _Query(("power_w", "power_source"), Nvml.power_average_w, True,
           lambda w: (w, POWER_SOURCE_AVERAGE),
           first=Nvml.power_instant_w, first_split=lambda w: (w, POWER_SOURCE_INSTANT)),
    _Query(("energy_counter_mj",), Nvml.energy_counter_mj, True),
    _Query(("sm_clock_mhz",), Nvml.clock_sm_mhz, True),
    _Query(("mem_clock_mhz",), Nvml.clock_mem_mhz, True),
    _Query(("temperature_c",), Nvml.temperature_c, True),
    _Query(("throttle_mask",), Nvml.throttle_mask, True),
    _Query(("gpu_util_pct", "mem_util_pct"), Nvml.utilization_pct, False, tuple),
    _Query(("memory_used_bytes",), Nvml.memory_used_bytes, False),
)


class NvmlSampler:
    """Samples one GPU from a background thread between :meth:`start` and :meth:`stop`.

    Args:
        device: the NVML device (see :func:`nvml_handle_for_cuda_index`).
        nvml: initialised NVML (:func:`~batchscope.hardware.nvml_api.init_nvml`).
        interval_s: time between samples.
        clock: monotonic seconds; tests inject a fake one.
        owns_init: call ``nvmlShutdown`` in :meth:`close`.
    """

    def __init__(self, device: NvmlDevice, *, nvml: Nvml, interval_s: float = DEFAULT_INTERVAL_S,
                 clock: Callable[[], float] = time.perf_counter, owns_init: bool = False) -> None:
        self.device = device
        self.interval_s = max(interval_s, MIN_INTERVAL_S)
        self._nvml = nvml
        self._clock = clock
        self._owns_init = owns_init
        self._queries = _QUERIES
        self._permanent: dict[int, str] = {}  # query index -> reason it can never work
        self._field_absent: dict[int, str] = {}  # query index -> why its field value is not read
        self._notes: list[str] = []  # caveats found while sampling (kept for later windows)
        self._lost: str | None = None  # set once the GPU is gone: nothing more is asked
        self._lock = threading.Lock()
        self._samples: list[NvmlSample] = []
        self._t0: float | None = None
        self._duration_s: float | None = None
        self._stop_event = threading.Event()
        self._thread: threading.Thread | None = None

    @property
    def samples(self) -> list[NvmlSample]:
        """The raw samples of the current (or last) window."""
        with self._lock:
            return list(self._samples)

    def start(self, *, background: bool = True) -> None:
        """Begin a window: forget earlier samples, take one now, then every ``interval_s``.

        Args:
            background: sample from a thread; False leaves sampling to :meth:`sample_once`.
        """
        if self._thread is not None:
            raise RuntimeError("the sampler is already running; call stop() first")
        with self._lock:
            self._samples = []
        self._duration_s = None
        self._t0 = self._clock()
        self.sample_once()
        if background and self._lost is None:
            self._stop_event.clear()
            self._thread = threading.Thread(target=self._run, name="batchscope-nvml", daemon=True)
            self._thread.start()

    def _run(self) -> None:
        next_s = self._clock() + self.interval_s
        while not self._stop_event.wait(max(0.0, next_s - self._clock())):
            self.sample_once()
            if self._lost is not None:
                return  # a lost GPU answers nothing more; stop() still adds the last sample
            next_s = max(next_s + self.interval_s, self._clock())

    def _read_first(self, index: int, query: _Query, handle: Handle) -> tuple[Any, ...] | None:
        """The query's first reading (a field value), split; None to fall back to ``read``.

        A field the driver lacks is not asked again, and a note says what is read instead.
        """
        if query.first is None or index in self._field_absent:
            return None
        reading = query.first(self._nvml, handle)
        if reading.reason is None:
            return query.first_split(reading.value)
        reason = reading.reason
        if reading.code not in _FIELD_ABSENT_ERRORS:
            return None  # transient (or fatal, which the function call will meet too)
        self._field_absent[index] = reason
        if query.fields[0] == "power_w":
            self._notes.append(f"instantaneous power (NVML_FI_DEV_POWER_INSTANT): {reason}; "
                               f"power is {POWER_SOURCE_AVERAGE}")
        return None

    def _read(self, index: int, query: _Query) -> tuple[Any, ...] | str:
        """The converted values of one query, or the reason there are none."""
        if self._lost is not None:
            return self._lost
        if index in self._permanent:
            return self._permanent[index]
        on_parent = query.whole_gpu and self.device.is_mig and self.device.parent_handle is not None
        handle = self.device.parent_handle if on_parent else self.device.handle
        from_field = self._read_first(index, query, handle)
        if from_field is not None:
            return from_field
        reading = query.read(self._nvml, handle)
        if reading.reason is None:
            return query.split(reading.value)
        reason = reading.reason
        if reading.code == ERROR_NOT_SUPPORTED and self.device.is_mig and not on_parent:
            reason = REASON_NOT_SUPPORTED_MIG
        if reading.fatal:
            self._lost = reason
        elif reading.code in _PERMANENT_ERRORS:
            self._permanent[index] = reason
        return reason

    def sample_once(self) -> NvmlSample:
        """Read every field once and append the sample. Never raises."""
        if self._t0 is None:
            self._t0 = self._clock()
        sample = NvmlSample(timestamp_s=self._clock() - self._t0)
        for index, query in enumerate(self._queries):
            got = self._read(index, query)
            if isinstance(got, str):  # reasons are kept for readings, not for their labels
                sample.errors.update({name: got for name in query.fields if name in SAMPLE_FIELDS})
            else:
                for name, value in zip(query.fields, got):
                    setattr(sample, name, value)
        with self._lock:
            self._samples.append(sample)
        return sample

    def stop(self) -> NvmlWindow:
        """End the window: stop the thread, take a last sample, summarise."""
        if self._thread is not None:
            self._stop_event.set()
            self._thread.join()
            self._thread = None
        if self._t0 is None:
            self._t0 = self._clock()
        self.sample_once()
        self._duration_s = self._clock() - self._t0
        return summarize(self.recording())

    def recording(self) -> NvmlRecording:
        """The raw material of the current window, as :func:`write_samples` stores it."""
        return NvmlRecording(device=self.device.describe(), interval_s=self.interval_s,
                             duration_s=self._duration_s, samples=self.samples,
                             notes=[*self.device.notes, *self._notes])

    def write_samples(self, path: str | Path) -> Path:
        """Write the raw samples (JSON lines) for :class:`ReplaySampler` and the tests."""
        return write_recording(self.recording(), path)

    def close(self) -> None:
        """Stop sampling and release NVML (once)."""
        if self._thread is not None:
            self.stop()
        if self._owns_init:
            self._owns_init = False
            self._nvml.shutdown()


class NullSampler:
    """The sampler where NVML cannot help: every figure None, the reason under "all".

    Args:
        reason: why there is nothing to sample, e.g. "no GPU: the device is cpu".
        clock: monotonic seconds; the window still reports its wall duration.
    """

    def __init__(self, reason: str, *, clock: Callable[[], float] = time.perf_counter) -> None:
        self.reason = reason
        self._clock = clock
        self._t0: float | None = None
        self._duration_s: float | None = None

    def start(self, *, background: bool = True) -> None:
        """Note the start time; nothing else to do."""
        self._t0 = self._clock()
        self._duration_s = None

    def sample_once(self) -> None:
        """Nothing to sample."""
        return None

    def stop(self) -> NvmlWindow:
        """A window of nulls, ``unsupported={"all": reason}``."""
        if self._t0 is not None:
            self._duration_s = self._clock() - self._t0
        return summarize(self.recording())

    def recording(self) -> NvmlRecording:
        """An empty recording that carries the reason."""
        return NvmlRecording(duration_s=self._duration_s, unavailable=self.reason)

    def write_samples(self, path: str | Path) -> Path:
        """Write the empty recording, so a replay says the same thing."""
        return write_recording(self.recording(), path)

    def close(self) -> None:
        """Nothing to release."""


class ReplaySampler:
    """Replays a file written by ``write_samples``: the same window, without a GPU.

    Example:
        >>> window = ReplaySampler("tests/data/nvml/decode.jsonl").stop()  # doctest: +SKIP
        >>> window.energy_method  # doctest: +SKIP
        'counter'
    """

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self._recording = read_recording(self.path)

    @property
    def samples(self) -> list[NvmlSample]:
        """The recorded samples."""
        return list(self._recording.samples)

    def start(self, *, background: bool = True) -> None:
        """Nothing to start: the samples are already recorded."""

    def sample_once(self) -> None:
        """Nothing to sample."""
        return None

    def stop(self) -> NvmlWindow:
        """The recorded window, summarised by the live sampler's code."""
        return summarize(self._recording)

    def recording(self) -> NvmlRecording:
        """The recording as read."""
        return self._recording

    def write_samples(self, path: str | Path) -> Path:
        """Write the recording again (a copy)."""
        return write_recording(self._recording, path)

    def close(self) -> None:
        """Nothing to release."""


def _split_device(device_type: str, cuda_index: int) -> tuple[str, int]:
    """ "cuda:1" -> ("cuda", 1); "cuda" -> ("cuda", cuda_index)."""
    kind, _, index = device_type.partition(":")
    return kind, int(index) if index.isdigit() else cuda_index


def make_sampler(
    device_type: str,
    cuda_index: int = 0,
    torch_uuid: str | None = None,
    interval_s: float = DEFAULT_INTERVAL_S,
    *,
    nvml: Any = None,
    clock: Callable[[], float] = time.perf_counter,
) -> NvmlSampler | NullSampler:
    """The sampler for a device: live with NVML on CUDA, else null with the reason.

    Never raises. Call ``close()`` when done with it.

    Args:
        device_type: "cpu", "cuda" or "cuda:N" (N overrides ``cuda_index``).
        cuda_index: the CUDA ordinal in this process.
        torch_uuid: ``str(torch.cuda.get_device_properties(cuda_index).uuid)``.
        interval_s: time between samples.
        nvml: a ``pynvml``-shaped module instead of ``pynvml`` (tests).
        clock: monotonic seconds (tests).
    """
    kind, cuda_index = _split_device(device_type, cuda_index)
    if kind != "cuda":
        return NullSampler(f"no GPU: the device is {device_type}", clock=clock)
    try:
        library = init_nvml(nvml)
    except NvmlUnavailable as exc:
        return NullSampler(str(exc), clock=clock)
    try:
        device = nvml_handle_for_cuda_index(cuda_index, torch_uuid=torch_uuid, nvml=library)
    except Exception as exc:  # noqa: BLE001 - NvmlUnavailable or a surprise: still no crash
        library.shutdown()
        reason = str(exc) if isinstance(exc, NvmlUnavailable) else f"{type(exc).__name__}: {exc}"
        return NullSampler(f"no NVML device for cuda:{cuda_index}: {reason}", clock=clock)
    return NvmlSampler(device, nvml=library, interval_s=interval_s, clock=clock, owns_init=True)
