"""The device's theoretical peak FLOP/s per dtype: the bound every measured rate is set against.

A roof is the best this machine's probes reached; the theoretical peak is what its silicon
could do at most. Set side by side they say two things a roof alone cannot: a rate above the
bound did fewer multiplications than the FLOPs counted (a Winograd convolution) or ran at a
clock above the one read; a roof far below it came from a slow library path the user could
change (a BLAS build, a dtype the CPU only emulates).

On a CPU (x86 and Arm, from /proc/cpuinfo and sysfs; nothing else is needed, so the parent
process can work it out too)::

    bound = cores × clock × FLOP per cycle per core
    FLOP per cycle per core = vector lanes of the dtype × 2 (a fused multiply-add) × FMA units

with the widest vector ISA the CPU's flags name (AVX-512: 16 fp32 lanes, AVX/AVX2: 8,
SSE or Arm NEON: 4), bf16 and fp16 at twice the fp32 lanes where the CPU multiplies them
natively (AVX512-BF16's dot products, AVX512-FP16, Arm's half-precision SIMD; Arm's BF16
matrix multiply at four times) and at a matrix unit's own rate where it has one (AMX: 1024
bf16 or fp16 FLOP a cycle per core); a dtype the CPU only converts runs at fp32's bound.
The assumptions (each makes it a bound, not a prediction) are on
:class:`~batchscope.hardware.figures.TheoreticalPeak`. On a GPU it is the datasheet's dense
figures.

Example:
    >>> info = "model name : AMD EPYC\\ncpu MHz : 2000.0\\nflags : fpu avx fma avx2\\n"
    >>> peak = cpu_theoretical(2, info, Path("/nonexistent"), cpu_count=2)
    >>> peak.isa, peak.flops_per_cycle_per_core["float32"], peak.flops_per_s["float32"] / 1e9
    ('avx2', 32.0, 128.0)
"""

from __future__ import annotations

import contextlib
import re
from pathlib import Path

from batchscope.hardware.figures import DatasheetSpec, TheoreticalPeak

FP32, BF16, FP16 = "float32", "bfloat16", "float16"
CPU_ROOT = Path("/sys/devices/system/cpu")
CPUINFO = Path("/proc/cpuinfo")

# fp32 lanes of the widest vector ISA a flag names, widest first (x86, then Arm).
_LANES = (("avx512f", 16), ("avx2", 8), ("avx", 8), ("sse2", 4), ("asimd", 4))
_ARM_ISAS = frozenset({"asimd"})
# FMA units per core: nothing exposes them, so a guess per ISA family, the most a current
# core of that family has (x86: two, as Intel's server cores and Zen 5; Arm: four 128-bit
# pipes, as Neoverse V1/V2), so that the product stays a bound.
FMA_UNITS_X86 = 2
FMA_UNITS_ARM = 4
# A fused multiply-add is two FLOPs (DESIGN.md: multiply and add count 1 each).
FLOP_PER_FMA = 2
# Intel AMX's TMUL: 1024 bf16 (or fp16, AMX-FP16) FLOP a cycle per core, Intel's figure.
AMX_FLOP_PER_CYCLE = 1024.0
# Native 16-bit arithmetic multiplies this many times the fp32 lanes: AVX512-BF16's
# vdpbf16ps and AVX512-FP16 hold two 16-bit values where fp32 holds one; Arm's BFMMLA
# does a 2x4 by 4x2 product where an fp32 FMA of the same width does four lanes.
_NATIVE_16BIT = ((BF16, "amx_bf16", None), (BF16, "avx512_bf16", 2.0), (BF16, "bf16", 4.0),
                 (FP16, "amx_fp16", None), (FP16, "avx512_fp16", 2.0),
                 (FP16, "asimdhp", 2.0))
_MODEL_GHZ = re.compile(r"@\s*([0-9.]+)\s*GHz", re.IGNORECASE)


def _values(cpuinfo: str, key: str) -> list[str]:
    """Every /proc/cpuinfo value under ``key`` (one per logical CPU)."""
    out = []
    for line in cpuinfo.splitlines():
        name, _, value = line.partition(":")
        if name.strip() == key and value.strip():
            out.append(value.strip())
    return out


def cpu_flags(cpuinfo: str) -> set[str]:
    """The ISA flags of the first CPU listed (x86 ``flags``, Arm ``Features``)."""
    found = _values(cpuinfo, "flags") or _values(cpuinfo, "Features")
    return set(found[0].split()) if found else set()


def cpu_clock_hz(cpuinfo: str, cpu_root: Path = CPU_ROOT) -> tuple[float, str] | None:
    """The highest clock the machine reports, and where it came from: sysfs' maximum
    frequency (turbo included), else /proc/cpuinfo's "cpu MHz" (what the cores ran at when
    read; a VM's nominal clock), else the "@ 2.40GHz" of an Intel model name; None where
    none is there."""
    khz = []
    for path in cpu_root.glob("cpu[0-9]*/cpufreq/cpuinfo_max_freq"):
        with contextlib.suppress(OSError, ValueError):
            khz.append(int(path.read_text().strip()))
    if khz and max(khz) > 0:
        return max(khz) * 1e3, "cpuinfo_max_freq"
    mhz = []
    for value in _values(cpuinfo, "cpu MHz"):
        with contextlib.suppress(ValueError):
            mhz.append(float(value))
    if mhz and max(mhz) > 0:
        return max(mhz) * 1e6, "cpu MHz"
    match = _MODEL_GHZ.search(" ".join(_values(cpuinfo, "model name")))
    if match and float(match[1]) > 0:
        return float(match[1]) * 1e9, "model name"
    return None


def flops_per_cycle_per_core(flags: set[str]) -> tuple[str, int, dict[str, float],
                                                        str | None] | None:
    """(ISA, FMA units assumed, dtype -> FLOP a cycle per core, matrix unit) for a CPU with
    these flags; None where no vector ISA this knows is named."""
    isa, lanes = next(((name, n) for name, n in _LANES if name in flags), (None, 0))
    if isa is None:
        return None
    units = FMA_UNITS_ARM if isa in _ARM_ISAS else FMA_UNITS_X86
    fp32 = float(lanes * FLOP_PER_FMA * units)
    rates = {FP32: fp32, BF16: fp32, FP16: fp32}  # converted to fp32 where not native
    matrix = None
    for dtype, flag, times in _NATIVE_16BIT:
        if flag not in flags or rates[dtype] != fp32:
            continue  # not there, or a faster unit already counted (listed first)
        if times is None:
            rates[dtype], matrix = AMX_FLOP_PER_CYCLE, "amx"
        else:
            rates[dtype] = fp32 * times
    return isa, units, rates, matrix


def cpu_theoretical(threads: int, cpuinfo: str | None = None, cpu_root: Path = CPU_ROOT,
                    cpu_count: int | None = None) -> TheoreticalPeak | None:
    """The CPU's theoretical peak with ``threads`` intra-op threads, each counted as a core
    (at most ``cpu_count``, the logical CPUs); None where the flags or the clock cannot be
    read (another OS, an unknown ISA).

    Args:
        threads: ``torch.get_num_threads()`` of the measurement.
        cpuinfo: /proc/cpuinfo's text (read here when None).
        cpu_root: sysfs' CPU folder, for the maximum frequency.
        cpu_count: logical CPUs (``os.cpu_count()``); threads beyond them share cores.
    """
    if cpuinfo is None:
        try:
            cpuinfo = CPUINFO.read_text(errors="replace")
        except OSError:
            return None
    per_core = flops_per_cycle_per_core(cpu_flags(cpuinfo))
    clock = cpu_clock_hz(cpuinfo, cpu_root)
    if per_core is None or clock is None or threads < 1:
        return None
    isa, units, rates, matrix = per_core
    cores = min(threads, cpu_count) if cpu_count else threads
    return TheoreticalPeak(
        flops_per_s={dtype: cores * clock[0] * rate for dtype, rate in rates.items()},
        source="cpu flags", flops_per_cycle_per_core=rates, cores=cores, clock_hz=clock[0],
        clock_source=clock[1], isa=isa, fma_units=units, matrix_unit=matrix)


def gpu_theoretical(spec: DatasheetSpec | None) -> TheoreticalPeak | None:
    """A GPU's theoretical peak: its datasheet row's dense figures (None for a GPU not in
    the table)."""
    if spec is None:
        return None
    return TheoreticalPeak(flops_per_s=dict(spec.peak_flops_per_s),
                           source=f"datasheet: {spec.product} ({spec.source})")
