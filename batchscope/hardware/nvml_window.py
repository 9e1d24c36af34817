"""NVML samples, the recording file, and the one function that summarises a window.

The live sampler and the replay double both end in :func:`summarize`, so a recording made
on a real GPU (``write_recording``) gives the CPU tests the very window the GPU run gave.

A recording is JSON lines: a header object (``format``, ``device``, ``interval_s``,
``duration_s``, ``unavailable``, ``notes``), then one :class:`NvmlSample` per line.
"""

from __future__ import annotations

import json
import statistics
from dataclasses import asdict, dataclass, field, fields
from itertools import pairwise
from pathlib import Path
from typing import Any

RECORDING_FORMAT = "batchscope.nvml_samples/1"
MJ_PER_J = 1000.0  # the energy counter counts millijoules

# Where a sample's power_w came from (NvmlSample.power_source, NvmlWindow.power_source).
POWER_SOURCE_INSTANT = "instantaneous (NVML_FI_DEV_POWER_INSTANT)"
# nvmlDeviceGetPowerUsage: instantaneous up to GA100 (A100), a 1 s moving average after it.
POWER_SOURCE_AVERAGE = "1 s average on GPUs after GA100 (nvmlDeviceGetPowerUsage)"

# Clock event ("throttle") reason bits of nvml.h, nvmlClocksEventReason*, lowest first.
THROTTLE_BITS: dict[int, str] = {
    0x001: "idle",
    0x002: "applications clocks setting",
    0x004: "sw power cap",
    0x008: "hw slowdown",
    0x010: "sync boost",
    0x020: "sw thermal",
    0x040: "hw thermal",
    0x080: "power brake",
    0x100: "display clock setting",
    0x200: "board limit",
    0x400: "reliability",
}
_KNOWN_THROTTLE_BITS = sum(THROTTLE_BITS)  # any other set bit is reported as unknown
# Reasons that lower clocks without the step being slowed by them: an idle GPU between
# steps, and clocks an administrator pinned on purpose.
BENIGN_THROTTLE = frozenset({"idle", "applications clocks setting"})

# Raw per-sample fields, with their units in the names.
SAMPLE_FIELDS = (
    "power_w", "energy_counter_mj", "sm_clock_mhz", "mem_clock_mhz", "temperature_c",
    "throttle_mask", "gpu_util_pct", "mem_util_pct", "memory_used_bytes",
)


def decode_throttle(mask: int) -> set[str]:
    """Names of the set bits of an NVML clock event reason mask.

    Example:
        >>> sorted(decode_throttle(0x4 | 0x40))
        ['hw thermal', 'sw power cap']
    """
    names = {name for bit, name in THROTTLE_BITS.items() if mask & bit}
    unknown = mask & ~_KNOWN_THROTTLE_BITS
    if unknown:
        names.add(f"unknown bits {unknown:#x}")
    return names


@dataclass
class NvmlSample:
    """One reading of every field; a field NVML would not give is None, its reason in errors."""

    timestamp_s: float  # since the window started
    power_w: float | None = None
    energy_counter_mj: int | None = None  # total energy since the driver loaded
    sm_clock_mhz: int | None = None
    mem_clock_mhz: int | None = None
    temperature_c: int | None = None
    throttle_mask: int | None = None
    gpu_util_pct: int | None = None
    mem_util_pct: int | None = None
    memory_used_bytes: int | None = None
    errors: dict[str, str] = field(default_factory=dict)
    power_source: str | None = None  # POWER_SOURCE_INSTANT or _AVERAGE; None without power


@dataclass
class NvmlRecording:
    """A window's raw material: the device, the samples and the window length."""

    device: dict[str, str | bool | None] = field(default_factory=dict)
    interval_s: float = 0.0
    duration_s: float | None = None  # start() to stop(); None while still recording
    samples: list[NvmlSample] = field(default_factory=list)
    unavailable: str | None = None  # why there is no sampling at all (null sampler)
    notes: list[str] = field(default_factory=list)


@dataclass
class NvmlWindow:
    """What NVML saw between ``start()`` and ``stop()``.

    Attributes:
        duration_s: wall time of the window.
        energy_j: energy the GPU used in the window.
        energy_method: "counter" (NVML's energy counter, Volta and later) or
            "integrated power" (trapezoid over the power samples); None without energy.
        power_source: where the power figures came from: :data:`POWER_SOURCE_INSTANT`, or
            :data:`POWER_SOURCE_AVERAGE` (which lags: a 1 s average after GA100), both
            joined by " then " if the window saw both; None without power readings.
        throttle_reasons: clock event reasons seen in any sample, "idle" left out.
        throttled: a reason other than idle or applications clocks setting was seen;
            None when the reasons could not be read.
        samples: number of samples taken.
        unsupported: raw field name (or "energy_j", or "all") -> why it is missing.
        device: uuid, name, how it was mapped, MIG or not.
        notes: caveats (MIG scope, CUDA order assumptions, energy method fallbacks).
    """

    duration_s: float | None = None
    energy_j: float | None = None
    energy_method: str | None = None
    power_w_mean: float | None = None
    power_w_max: float | None = None
    power_source: str | None = None
    sm_clock_mhz_median: float | None = None
    mem_clock_mhz_median: float | None = None
    temperature_c_max: int | None = None
    throttle_reasons: set[str] = field(default_factory=set)
    throttled: bool | None = None
    gpu_util_pct_mean: float | None = None
    mem_util_pct_mean: float | None = None
    memory_used_bytes_max: int | None = None
    samples: int = 0
    unsupported: dict[str, str] = field(default_factory=dict)
    device: dict[str, str | bool | None] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """JSON-safe dict (the set of throttle reasons becomes a sorted list)."""
        data = asdict(self)
        data["throttle_reasons"] = sorted(self.throttle_reasons)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> NvmlWindow:
        """Inverse of :meth:`to_dict`."""
        known = {f.name for f in fields(cls)}
        kwargs = {k: v for k, v in data.items() if k in known}
        kwargs["throttle_reasons"] = set(kwargs.get("throttle_reasons") or ())
        return cls(**kwargs)

    def throttled_by(self) -> list[str]:
        """Why clocks were held down, sorted (benign reasons left out); [] when they were
        not. The report's flag (FlagKind.GPU_THROTTLED) quotes them.

        Example:
            >>> NvmlWindow(throttled=True, throttle_reasons={"hw thermal", "sw power cap",
            ...                                              "applications clocks setting"}
            ...            ).throttled_by()
            ['hw thermal', 'sw power cap']
        """
        if not self.throttled:
            return []
        return sorted(self.throttle_reasons - BENIGN_THROTTLE)


def energy_per_unit_j(window: NvmlWindow, units_per_step: float, steps: int) -> float | None:
    """Energy per unit of work (J/token, J/image) over a window of ``steps`` steps.

    Example:
        >>> energy_per_unit_j(NvmlWindow(energy_j=300.0), units_per_step=64, steps=10)
        0.46875
    """
    units = units_per_step * steps
    if window.energy_j is None or units <= 0:
        return None
    return window.energy_j / units


# ---------------------------------------------------------------- summarising
def _values(samples: list[NvmlSample], name: str) -> list[Any]:
    return [getattr(s, name) for s in samples if getattr(s, name) is not None]


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def _unsupported(samples: list[NvmlSample]) -> dict[str, str]:
    """Per field: its reason when missing in every sample, else how often and from when."""
    out: dict[str, str] = {}
    for name in SAMPLE_FIELDS:
        missing = [s for s in samples if getattr(s, name) is None]
        if not missing:
            continue
        reason = missing[0].errors.get(name, "no reading")
        if len(missing) < len(samples):
            reason = (f"{reason}: missing in {len(missing)} of {len(samples)} samples, "
                      f"first at {missing[0].timestamp_s:.3f} s")
        out[name] = reason
    return out


def trapezoid_j(points: list[tuple[float, float]]) -> float:
    """Integral of power over time, (time s, power W) points in time order -> joules."""
    return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in pairwise(points))


def _energy(
    samples: list[NvmlSample], notes: list[str],
) -> tuple[float | None, str | None, str | None]:
    """(energy J, method, reason when None) over the window the samples span."""
    if len(samples) < 2:
        return None, None, "fewer than two samples"
    first, last = samples[0], samples[-1]
    if first.energy_counter_mj is not None and last.energy_counter_mj is not None:
        delta_mj = last.energy_counter_mj - first.energy_counter_mj
        if delta_mj > 0:
            return delta_mj / MJ_PER_J, "counter", None
        notes.append(f"the energy counter moved by {delta_mj} mJ: used integrated power")
    if first.power_w is not None and last.power_w is not None:
        points = [(s.timestamp_s, s.power_w) for s in samples if s.power_w is not None]
        if any(s.power_source == POWER_SOURCE_AVERAGE for s in samples):
            notes.append("energy integrated from nvmlDeviceGetPowerUsage, a 1 s moving average "
                         "on GPUs after GA100: it lags the window by up to a second")
        return trapezoid_j(points), "integrated power", None
    edge = first if first.power_w is None else last
    why = edge.errors.get("power_w", "no power reading")
    return None, None, f"no energy counter and no power reading at {edge.timestamp_s:.3f} s ({why})"


def summarize(recording: NvmlRecording) -> NvmlWindow:
    """The :class:`NvmlWindow` of a recording: the one summary of live and replayed runs."""
    window = NvmlWindow(duration_s=recording.duration_s, device=dict(recording.device),
                        notes=list(recording.notes), samples=len(recording.samples))
    if recording.unavailable is not None:
        window.unsupported = {"all": recording.unavailable}
        return window
    samples = recording.samples
    window.unsupported = _unsupported(samples)
    window.energy_j, window.energy_method, why = _energy(samples, window.notes)
    if why is not None:
        window.unsupported["energy_j"] = why
    power = _values(samples, "power_w")
    window.power_w_mean, window.power_w_max = _mean(power), max(power, default=None)
    sources = _values(samples, "power_source")
    window.power_source = " then ".join(dict.fromkeys(sources)) or None
    sm, mem = _values(samples, "sm_clock_mhz"), _values(samples, "mem_clock_mhz")
    window.sm_clock_mhz_median = statistics.median(sm) if sm else None
    window.mem_clock_mhz_median = statistics.median(mem) if mem else None
    window.temperature_c_max = max(_values(samples, "temperature_c"), default=None)
    masks = _values(samples, "throttle_mask")
    seen = set().union(*(decode_throttle(m) for m in masks)) if masks else set()
    window.throttle_reasons = seen - {"idle"}
    window.throttled = bool(seen - BENIGN_THROTTLE) if masks else None
    window.gpu_util_pct_mean = _mean(_values(samples, "gpu_util_pct"))
    window.mem_util_pct_mean = _mean(_values(samples, "mem_util_pct"))
    window.memory_used_bytes_max = max(_values(samples, "memory_used_bytes"), default=None)
    return window


# ---------------------------------------------------------------- the recording file
def write_recording(recording: NvmlRecording, path: str | Path) -> Path:
    """Write ``recording`` as JSON lines: the header, then one sample per line."""
    path = Path(path)
    header = {"format": RECORDING_FORMAT, "device": recording.device,
              "interval_s": recording.interval_s, "duration_s": recording.duration_s,
              "unavailable": recording.unavailable, "notes": recording.notes}
    lines = [json.dumps(header, sort_keys=True)]
    lines += [json.dumps(asdict(s), sort_keys=True) for s in recording.samples]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def read_recording(path: str | Path) -> NvmlRecording:
    """Read a file written by :func:`write_recording`.

    Raises:
        ValueError: the file is empty or not a batchscope NVML recording.
    """
    lines = [line for line in Path(path).read_text(encoding="utf-8").splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: empty NVML recording")
    header = json.loads(lines[0])
    if header.get("format") != RECORDING_FORMAT:
        raise ValueError(f"{path}: not a {RECORDING_FORMAT} file (format {header.get('format')!r})")
    known = {f.name for f in fields(NvmlSample)}
    samples = [NvmlSample(**{k: v for k, v in json.loads(line).items() if k in known})
               for line in lines[1:]]
    return NvmlRecording(
        device=header.get("device") or {}, interval_s=header.get("interval_s", 0.0),
        duration_s=header.get("duration_s"), samples=samples,
        unavailable=header.get("unavailable"), notes=header.get("notes") or [],
    )
