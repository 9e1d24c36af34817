"""Short micro-benchmarks that measure a device's ceilings.

Three roofs, each measured the way the roofline needs it:

* peak FLOP/s per dtype and per kernel family: square ``torch.mm`` at a few sizes (2·n³
  FLOP each) and ``F.linear`` (the matmul family's roof: the better of the two), a 3x3
  convolution (the convolution family's), each the best of its repeats at its best size;
  the dtype's peak, the roof of every other op, is the best of all three. A roof should be
  the fastest the machine can go, so that an op measured faster than its roof really is an
  accounting error, and the fastest its own kind of kernel can go, so that a matmul is not
  held to a convolution library's rate. Each is set beside the device's theoretical peak
  (hardware/theoretical.py).
* sustained memory bandwidth: ``dst.copy_(src)`` on buffers well past the last-level
  cache, counting bytes read plus written.
* fixed cost of one small op: a one-element ``torch.add`` in a tight Python loop under
  ``torch.inference_mode()``, median per call. An op whose roofline time is below it is
  overhead-bound.

Every benchmark runs under a time budget (the whole CPU calibration takes a few seconds)
and records its raw figures (size, repeats, median, best, spread) in ``Ceilings.details``.
CUDA paths time with CUDA events (host clock plus synchronisation for the small-op loop),
every one of them on the device asked for: ``cuda:1`` is measured on cuda:1, never on the
current device. ``Ceilings.cache_bytes`` is the device's last-level cache: the L2 a CUDA
device reports, or the highest-level CPU cache sysfs lists.

Example:
    >>> from batchscope.hardware.microbench import measure
    >>> c = measure("cpu", quick=True)
    >>> c.peak_flops_per_s["float32"] > 0 and c.bandwidth_bytes_per_s > 0
    True
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math
import os
import platform
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from batchscope.engine.clock import Clock, HostClock, device_clock
from batchscope.engine.policies import FixedCount, RepeatBudget
from batchscope.engine.timer import sample
from batchscope.hardware import gpu_specs
from batchscope.hardware.figures import (
    BenchPlanInfo,
    CeilingDetails,
    CopyFigures,
    FamilyPeak,
    GpuIdentity,
    HostInfo,
    InPlaceFigures,
    MatmulFigures,
    MatmulSize,
    OpCost,
    OverheadFigures,
    PathFigures,
    PathSize,
    Repeats,
)
from batchscope.hardware.theoretical import cpu_theoretical, gpu_theoretical
from batchscope.hardware.types import BF16, FP16, FP32, TF32, Ceilings
from batchscope.op_families import PATH_FAMILY

MIB = 2**20

# (name, torch dtype, TF32 on?) measured per device type; TF32 is a CUDA-only mode of fp32.
_CPU_DTYPES = (
    (FP32, torch.float32, False),
    (BF16, torch.bfloat16, False),
    (FP16, torch.float16, False),
)
_CUDA_DTYPES = (
    (FP32, torch.float32, False),
    (TF32, torch.float32, True),
    (BF16, torch.bfloat16, False),
    (FP16, torch.float16, False),
)
# bf16 and TF32 tensor cores arrive with Ampere (sm_80); older GPUs would only emulate them.
_CUDA_TENSOR_CORE_BF16_CC = (8, 0)
# Never let the two copy buffers take more than this share of the free memory.
_COPY_MEMORY_SHARE = 0.25
# A timed sample shorter than this is dominated by clock resolution; floor for division too.
_MIN_TIMED_S = 1e-7
# Cap on calls per timed sample, so a tiny op cannot make one sample run for ages.
_MAX_INNER = 10_000
_UNSET = object()  # marks a precision flag that could not be read, so is not restored


@dataclass(frozen=True)
class BenchPlan:
    """Sizes and time budgets of one calibration.

    Attributes:
        matmul_sizes: square sizes tried in ascending order; larger ones are skipped once
            the projected time would overrun ``matmul_budget_s``.
        matmul_budget_s: wall-time budget per dtype (``min_repeats`` are always taken).
        copy_min_bytes: smallest copy buffer (one of two), whatever the cache reports.
        copy_max_bytes: largest copy buffer.
        copy_budget_s: wall-time budget of the copy benchmark (``min_repeats`` always taken).
        min_sample_s: calls are grouped so that one timed sample lasts at least this long.
        min_repeats: timed samples taken at least (per size, per benchmark).
        max_repeats: timed samples taken at most.
        min_time_s: keep sampling one size until this much time has passed.
        overhead_chunks: timed chunks of the small-op loop.
        overhead_calls: calls per chunk of the small-op loop.
    """

    matmul_sizes: tuple[int, ...]
    matmul_budget_s: float
    copy_min_bytes: int
    copy_max_bytes: int
    copy_budget_s: float
    min_sample_s: float
    min_repeats: int
    max_repeats: int
    min_time_s: float
    overhead_chunks: int
    overhead_calls: int


# CPU: 256 MiB buffers are 8x the 32 MB L3 seen in trials; the 512 MiB cap bounds the
# first-touch cost (page faults in a busy VM ran at 0.3-2 GB/s); the run fits ~8 s on 2 cores.
_CPU_FULL = BenchPlan(
    (1024, 2048, 4096), 1.5, 256 * MIB, 512 * MIB, 0.4, 1e-3, 3, 25, 0.25, 25, 400
)
_CPU_QUICK = BenchPlan((256, 512, 1024), 0.35, 32 * MIB, 32 * MIB, 0.1, 1e-3, 3, 10, 0.05, 9, 200)
# CUDA: a GPU needs n >= 4096 to fill its tensor cores; 1 GiB buffers dwarf any L2 (<= 128 MB).
_CUDA_FULL = BenchPlan(
    (4096, 8192, 16384), 1.5, 1024 * MIB, 1024 * MIB, 0.5, 5e-3, 3, 25, 0.25, 25, 400
)
_CUDA_QUICK = BenchPlan((1024, 2048), 0.3, 128 * MIB, 128 * MIB, 0.1, 2e-3, 3, 10, 0.05, 9, 200)
_PLANS = {
    ("cpu", False): _CPU_FULL,
    ("cpu", True): _CPU_QUICK,
    ("cuda", False): _CUDA_FULL,
    ("cuda", True): _CUDA_QUICK,
}


# ---------------------------------------------------------------------------- identity
def _cpuinfo(*keys: str) -> str:
    """The first non-empty /proc/cpuinfo value under one of ``keys`` ("" where none)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text(errors="replace").splitlines():
            key, _, value = line.partition(":")
            if key.strip() in keys and value.strip():
                return value.strip()
    return ""


def cpu_model_name() -> str:
    """The CPU model, from /proc/cpuinfo "model name", else ``platform.processor()``."""
    return _cpuinfo("model name") or platform.processor() or platform.machine() or "unknown CPU"


def cpu_has_native_bf16() -> bool:
    """Whether the CPU has bf16 arithmetic in hardware (AVX512-BF16, AMX-BF16, Arm BF16)."""
    return bool(set(_cpuinfo("flags", "Features").split()) & {"avx512_bf16", "amx_bf16", "bf16"})


def gpu_identity(device: torch.device) -> GpuIdentity:
    """Index, name, UUID and driver version of a CUDA device (initialises CUDA here).

    The index keeps two GPUs of one model apart in the cache even where torch reports no
    UUID (older torch); the UUID, where present, tells them apart across renumbering.

    Args:
        device: a CUDA device; without an index, the current device.
    """
    index = device.index if device.index is not None else torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    return GpuIdentity(index=index, name=props.name,
                       uuid=str(getattr(props, "uuid", "") or ""), driver=_nvidia_driver())


def gpu_l2_bytes(device: torch.device) -> int | None:
    """The L2 cache of a CUDA device in bytes, as the driver reports it (None if it does not)."""
    size = getattr(torch.cuda.get_device_properties(device), "L2_cache_size", None)
    return int(size) if size else None


def _nvidia_driver() -> str:
    """The NVIDIA driver version from NVML, or "" where NVML is missing (never raises)."""
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            version = pynvml.nvmlSystemGetDriverVersion()
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - a probe: any NVML failure means "unknown driver"
        return ""
    return version.decode() if isinstance(version, bytes) else str(version)


_CPU_CACHE_DIR = Path("/sys/devices/system/cpu/cpu0/cache")


def _sysfs_bytes(text: str) -> int:
    """A sysfs cache size ("32768K", "1M", "512") in bytes; ValueError if malformed."""
    text = text.strip().upper()
    scale = {"K": 1024, "M": MIB, "G": 1024 * MIB}.get(text[-1:], 1)
    return int(text.rstrip("KMG")) * scale


def _llc_bytes(cache_dir: Path = _CPU_CACHE_DIR) -> int | None:
    """Size of the CPU's last-level cache as cpu0 sees it (sysfs), or None where unknown.

    The last level is the highest ``level`` listed (instruction caches left out); a
    listing without readable levels falls back to the largest size. The size is one
    instance of that cache (an L3 shared by a core complex counts once), which is what a
    single working set can stay in.
    """
    by_level: list[tuple[int, int]] = []  # (level or 0 where unknown, bytes)
    for index in cache_dir.glob("index*"):
        try:
            size = _sysfs_bytes((index / "size").read_text())
        except (OSError, ValueError):
            continue
        with contextlib.suppress(OSError):
            if (index / "type").read_text().strip() == "Instruction":
                continue
        try:
            level = int((index / "level").read_text().strip())
        except (OSError, ValueError):
            level = 0
        by_level.append((level, size))
    if not by_level:
        return None
    top = max(level for level, _ in by_level)
    return max(size for level, size in by_level if level == top) or None


def _available_memory_bytes(device: torch.device) -> int | None:
    """Free memory on ``device``, or None where it cannot be read."""
    if device.type == "cuda":
        return int(torch.cuda.mem_get_info(device)[0])
    try:
        return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


# ---------------------------------------------------------------------------- timing
def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _stats(per_call_s: list[float], inner: int = 1, warmup_s: float = 0.0) -> Repeats:
    """Repeats, median, best, worst and spread (interquartile range / median) of samples."""
    xs = sorted(per_call_s)
    median = statistics.median(xs)
    q1, _, q3 = statistics.quantiles(xs, n=4) if len(xs) > 1 else (xs[0], xs[0], xs[0])
    spread = (q3 - q1) / median
    return Repeats(repeats=len(xs), median_s=median, best_s=xs[0], worst_s=xs[-1],
                   spread=spread, inner=inner, warmup_s=warmup_s, p25_s=q1, p75_s=q3)


def _repeat(
    fn: Callable[[], object], clock: Clock, plan: BenchPlan, deadline: float
) -> Repeats:
    """Warm ``fn`` up, then time samples of ``inner`` calls (enough for a sample to last
    ``plan.min_sample_s``) under the repeat budget: enough repeats and time, or the
    deadline (the engine's one timer and its RepeatBudget rule)."""
    warmup_s = clock.time(fn)[0]  # first call: page faults, library and kernel selection
    inner = 1
    if warmup_s < plan.min_sample_s:
        one_s = max(clock.time(fn)[0], _MIN_TIMED_S)
        inner = min(_MAX_INNER, math.ceil(plan.min_sample_s / one_s))
    sampled, _ = sample(fn, clock, RepeatBudget(plan.min_repeats, plan.max_repeats,
                                                plan.min_time_s, deadline=deadline),
                        inner, floor_s=_MIN_TIMED_S)
    return _stats(list(sampled.samples_s), inner, warmup_s)


@contextlib.contextmanager
def _fp32_matmul_precision(device_type: str, tf32: bool) -> Iterator[None]:
    """Pin fp32 matmul to IEEE fp32 (or TF32 tensor cores on CUDA), restoring it after.

    Uses the ``fp32_precision`` flags of torch >= 2.9 where present (mixing them with the
    legacy ``allow_tf32`` can raise), else ``torch.backends.cuda.matmul.allow_tf32``.
    """
    cuda_matmul = torch.backends.cuda.matmul
    backend = (
        cuda_matmul if device_type == "cuda" else getattr(torch.backends.mkldnn, "matmul", None)
    )
    value: str | bool
    if backend is not None and hasattr(backend, "fp32_precision"):
        attr, value = "fp32_precision", ("tf32" if tf32 else "ieee")
    elif device_type == "cuda":
        attr, value = "allow_tf32", tf32
    else:
        yield
        return
    try:
        saved: object = getattr(backend, attr)
        setattr(backend, attr, value)
    except RuntimeError:  # flags in a state torch refuses to read or set: measure as they are
        saved = _UNSET
    try:
        yield
    finally:
        if saved is not _UNSET:
            setattr(backend, attr, saved)


# ---------------------------------------------------------------------------- benchmarks
# A peak whose repeats spread more than this (interquartile range / median) is measured
# once more and the steadier of the two kept: issue 14 saw fp32 best 215 and median 114
# GFLOP/s (0.63) on a VM another tenant was using.
REMEASURE_SPREAD = 0.25


def _matmul_row(n: int, device: torch.device, dtype: torch.dtype, clock: Clock, plan: BenchPlan,
                end: float) -> MatmulSize:
    """The figures of one square ``torch.mm`` size."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    c = torch.empty(n, n, device=device, dtype=dtype)
    timing = _repeat(functools.partial(torch.mm, a, b, out=c), clock, plan, end)
    flops = 2 * n**3  # n×n @ n×n: n² outputs, n multiplies and n adds each
    return MatmulSize(n=n, flops_per_call=flops, **dataclasses.asdict(timing),
                      best_flops_per_s=flops / timing.best_s,
                      median_flops_per_s=flops / timing.median_s)


def _remeasure_spread_peak(rows: list[MatmulSize], device: torch.device,
                           dtype: torch.dtype, clock: Clock, plan: BenchPlan) -> None:
    """Measure the peak size again when its repeats spread past :data:`REMEASURE_SPREAD`,
    keeping the steadier row (its first spread recorded as ``first_spread``)."""
    i = max(range(len(rows)), key=lambda k: rows[k].best_flops_per_s)
    if rows[i].spread <= REMEASURE_SPREAD:
        return
    budget_s = (1 + plan.min_repeats) * rows[i].median_s * 2
    try:
        again = _matmul_row(rows[i].n, device, dtype, clock, plan,
                            time.perf_counter() + budget_s)
    except (RuntimeError, NotImplementedError):
        return
    if again.spread < rows[i].spread:
        rows[i] = dataclasses.replace(again, first_spread=rows[i].spread)
    else:
        rows[i] = dataclasses.replace(rows[i], remeasured_spread=again.spread)


def measure_matmul(
    device: torch.device, dtype: torch.dtype, plan: BenchPlan, *, tf32: bool = False
) -> MatmulFigures:
    """Peak ``torch.mm`` FLOP/s of one dtype over ascending square sizes, within a budget;
    ``error`` instead of a peak where the dtype cannot run."""
    clock = device_clock(device)
    started = time.perf_counter()
    end = started + plan.matmul_budget_s
    rows: list[MatmulSize] = []
    skipped: list[int] = []
    error: str | None = None
    previous: tuple[int, float] | None = None  # (n, median seconds per call)
    with (_fp32_matmul_precision(device.type, tf32) if dtype == torch.float32
          else contextlib.nullcontext()):
        for n in plan.matmul_sizes:
            if previous is not None:
                # warm-up plus the minimum repeats, scaled by the n³ growth of the work
                projected_s = (1 + plan.min_repeats) * previous[1] * (n / previous[0]) ** 3
                if time.perf_counter() + projected_s > end:
                    skipped = [m for m in plan.matmul_sizes if m >= n]
                    break
            try:
                row = _matmul_row(n, device, dtype, clock, plan, end)
            except (RuntimeError, NotImplementedError) as exc:  # dtype unsupported, or OOM
                error = f"n={n}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
                break
            rows.append(row)
            previous = (n, row.median_s)
        if rows:
            _remeasure_spread_peak(rows, device, dtype, clock, plan)
    if device.type == "cuda":
        torch.cuda.empty_cache()
    best = max(rows, key=lambda r: r.best_flops_per_s) if rows else None
    return MatmulFigures(sizes=rows, skipped_sizes=skipped,
                         wall_s=time.perf_counter() - started,
                         peak_flops_per_s=best.best_flops_per_s if best else None,
                         peak_size=best.n if best else None, error=error)


# Convolution of the paths models use: a ResNet-style 3x3, 64 to 64 channels on 56x56, at
# growing batch sizes while the budget allows (bf16 on a CPU without native bf16 runs it at
# ~3 GFLOP/s, fp32 oneDNN at ~100: one size cannot fit both).
_CONV_CHANNELS, _CONV_HW, _CONV_KERNEL = 64, 56, 3
_CONV_BATCHES = (1, 4, 16)
# Share of the matmul budget each extra path (linear, convolution) may take.
_PATH_BUDGET_SHARE = 0.5


@contextlib.contextmanager
def _cudnn_tf32(device_type: str, tf32: bool) -> Iterator[None]:
    """Pin cuDNN convolutions' TF32 use for an fp32 measurement (on by default in torch)."""
    if device_type != "cuda":
        yield
        return
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = tf32
    try:
        yield
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def _linear_rows(device: torch.device, dtype: torch.dtype, plan: BenchPlan,
                 n: int) -> PathFigures:
    """F.linear of an n×n input by an n×n weight: MKL's (cuBLAS's) path of a model's matmul."""
    x = torch.randn(n, n, device=device, dtype=dtype)
    w = torch.randn(n, n, device=device, dtype=dtype)
    return _path_rows(device, plan, [
        (n, functools.partial(torch.nn.functional.linear, x, w), 2.0 * n**3)])


def _conv_rows(device: torch.device, dtype: torch.dtype, plan: BenchPlan,
               n: int) -> PathFigures:
    """A 3x3 convolution at each of _CONV_BATCHES: oneDNN's (cuDNN's) path."""
    weight = torch.randn(_CONV_CHANNELS, _CONV_CHANNELS, _CONV_KERNEL, _CONV_KERNEL,
                         device=device, dtype=dtype)
    inputs = {b: torch.randn(b, _CONV_CHANNELS, _CONV_HW, _CONV_HW, device=device,
                             dtype=dtype) for b in _CONV_BATCHES}
    per_image = 2.0 * _CONV_CHANNELS * _CONV_HW**2 * _CONV_CHANNELS * _CONV_KERNEL**2
    return _path_rows(device, plan, [
        (b, functools.partial(torch.nn.functional.conv2d, inputs[b], weight, padding=1),
         per_image * b) for b in _CONV_BATCHES])


def _path_rows(device: torch.device, plan: BenchPlan, calls: list[tuple[int, Callable[[], Any],
               float]]) -> PathFigures:
    """Time each (size, call, FLOPs) in order while the budget lasts; the best FLOP/s."""
    clock = device_clock(device)
    end = time.perf_counter() + plan.matmul_budget_s * _PATH_BUDGET_SHARE
    rows: list[PathSize] = []
    error: str | None = None
    previous: tuple[float, float] | None = None  # (FLOPs, median seconds per call)
    for size, call, flops in calls:
        if previous is not None:
            projected_s = (1 + plan.min_repeats) * previous[1] * flops / previous[0]
            if time.perf_counter() + projected_s > end:
                break
        try:
            timing = _repeat(call, clock, plan, end)
        except (RuntimeError, NotImplementedError) as exc:
            error = f"{size}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}"
            break
        rows.append(PathSize(size=size, flops_per_call=flops, **dataclasses.asdict(timing),
                             best_flops_per_s=flops / timing.best_s,
                             median_flops_per_s=flops / timing.median_s))
        previous = (flops, timing.median_s)
    return PathFigures(sizes=rows, error=error,
                       peak_flops_per_s=max((r.best_flops_per_s for r in rows), default=None))


def measure_paths(device: torch.device, dtype: torch.dtype, plan: BenchPlan, n: int, *,
                  tf32: bool = False) -> dict[str, PathFigures]:
    """Peak FLOP/s of the other paths models take: ``F.linear`` (oneDNN where ``torch.mm``
    takes MKL: 10x faster in bf16 on an EPYC) at the matmul's largest size ``n``, and a
    3x3 convolution (oneDNN/cuDNN, faster than ``torch.mm`` in fp32 on CPUs).

    Returns ``{"linear": {...}, "conv2d": {...}}``, each with its ``peak_flops_per_s``
    where it ran.
    """
    paths: dict[str, PathFigures] = {}
    fp32 = dtype == torch.float32
    with (_fp32_matmul_precision(device.type, tf32) if fp32 else contextlib.nullcontext()), \
            (_cudnn_tf32(device.type, tf32) if fp32 else contextlib.nullcontext()):
        for name, rows in (("linear", _linear_rows), ("conv2d", _conv_rows)):
            try:  # the tensors are freed when the function returns
                paths[name] = rows(device, dtype, plan, n)
            except (RuntimeError, NotImplementedError) as exc:
                paths[name] = PathFigures(error=f"{type(exc).__name__}: "
                                                f"{str(exc).splitlines()[0][:200]}")
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return paths


def copy_buffer_bytes(device: torch.device, plan: BenchPlan) -> int:
    """Size of each of the two copy buffers: well past the caches, within free memory."""
    size = plan.copy_min_bytes
    llc = _llc_bytes() if device.type == "cpu" else None
    if llc is not None:  # each buffer >= the cache, so source plus destination are twice it
        size = max(size, llc)
    size = min(size, plan.copy_max_bytes)
    free = _available_memory_bytes(device)
    if free is not None:
        size = min(size, int(free * _COPY_MEMORY_SHARE / 2))
    return max(MIB, size // MIB * MIB)


def measure_copy(device: torch.device, plan: BenchPlan) -> CopyFigures:
    """Sustained streaming bandwidth, bytes read plus written per second, through two paths
    models take: ``dst.copy_(src)`` and an in-place update ``src.add_(1)``.

    Bytes are counted as the counting pass counts an op's (a copy reads one tensor and
    writes another; an in-place op reads and writes one, counted twice). On a CPU a write
    to a separate destination first reads its cache lines (write-allocate), so a copy moves
    a third more than it counts and an in-place update reaches more of what the memory
    does: 17 against 30 GB/s on this project's EPYC VM, where AdamW's in-place updates ran
    at up to 2.2x a copy-only roof (issue 13). The bandwidth ceiling is the better path.
    """
    started = time.perf_counter()
    buffer_bytes = copy_buffer_bytes(device, plan)
    src = torch.ones(buffer_bytes // 4, device=device, dtype=torch.float32)
    dst = torch.empty_like(src)
    deadline = time.perf_counter() + plan.copy_budget_s
    copy_fn = functools.partial(dst.copy_, src)
    timing = _repeat(copy_fn, device_clock(device), plan, deadline)
    moved = 2 * src.numel() * src.element_size()  # one read of src plus one write of dst
    del copy_fn, dst
    add_fn = functools.partial(src.add_, 1.0)
    in_place = _repeat(add_fn, device_clock(device), plan,
                       time.perf_counter() + plan.copy_budget_s)
    del add_fn, src
    if device.type == "cuda":
        torch.cuda.empty_cache()
    paths = {"copy": moved / timing.best_s, "in_place": moved / in_place.best_s}
    best = max(paths, key=paths.__getitem__)
    return CopyFigures(
        buffer_bytes=buffer_bytes,
        bytes_per_copy=moved,
        llc_bytes_reported=_llc_bytes() if device.type == "cpu" else None,
        **dataclasses.asdict(timing),
        best_bytes_per_s=moved / timing.best_s,
        median_bytes_per_s=moved / timing.median_s,
        wall_s=time.perf_counter() - started,
        in_place=InPlaceFigures(**dataclasses.asdict(in_place),
                                best_bytes_per_s=paths["in_place"],
                                median_bytes_per_s=moved / in_place.median_s),
        paths=paths,
        peak_path=best,
        bandwidth_bytes_per_s=paths[best],
    )


def _tiny_ops(device: torch.device) -> dict[str, Callable[[], Any]]:
    """One-element ops of the kinds a model calls most: pointwise, matmul, norm, softmax."""
    x = torch.ones(1, device=device)
    y = torch.ones(1, device=device)
    m = torch.ones(1, 1, device=device)
    return {
        "add": lambda: torch.add(x, y),
        "mul": lambda: torch.mul(x, y),
        "relu": lambda: torch.relu(x),
        "softmax": lambda: torch.softmax(m, -1),
        "addmm": lambda: torch.addmm(x, m, m),
        "linear": lambda: torch.nn.functional.linear(m, m, x),
        "layer_norm": lambda: torch.nn.functional.layer_norm(m, (1,)),
    }


def measure_overhead(device: torch.device, plan: BenchPlan) -> OverheadFigures:
    """Per-call cost of one-element ops in a tight Python loop, and their median.

    A single op kind would misstate the floor: a one-element ``add`` costs ~0.9 µs here
    while ``linear`` or ``layer_norm`` cost ~2 µs (argument checks, BLAS set-up). The
    floor is the median over :func:`_tiny_ops`. Timed with the host clock over chunks of
    back-to-back calls, the device drained at both ends of each chunk: on a GPU this is the
    rate at which tiny kernels can be issued.
    """
    calls = plan.overhead_calls
    costs: dict[str, OpCost] = {}

    def sync() -> None:
        _sync(device)

    for name, op in _tiny_ops(device).items():
        for _ in range(calls):  # warm-up
            op()
        # Chunks of back-to-back calls on the host's clock, the device drained at both ends.
        sampled, _ = sample(op, HostClock(sync), FixedCount(plan.overhead_chunks),
                            block_steps=calls, floor_s=_MIN_TIMED_S, prepare=sync)
        stats = _stats(list(sampled.samples_s))
        costs[name] = OpCost(calls_per_chunk=calls, repeats=stats.repeats,
                             median_s=stats.median_s, best_s=stats.best_s,
                             worst_s=stats.worst_s, spread=stats.spread)
    return OverheadFigures(ops=costs,
                           floor_s=statistics.median(c.median_s for c in costs.values()))


def _resolve(device: str | torch.device) -> torch.device:
    dev = torch.device(device)
    if dev.type not in ("cpu", "cuda"):
        raise ValueError(f"batchscope measures 'cpu' or 'cuda' devices, not {str(dev)!r}")
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("CUDA was asked for but torch.cuda.is_available() is False")
        if dev.index is None:
            dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def best_path(matmul: MatmulFigures) -> tuple[str, float] | None:
    """The dtype's peak: the best of ``torch.mm`` and the other paths models use, and which
    one it was ("mm", "linear" or "conv2d"); None where none ran."""
    candidates = {"mm": matmul.peak_flops_per_s}
    for path, figures in matmul.paths.items():
        candidates[path] = figures.peak_flops_per_s
    measured = {k: v for k, v in candidates.items() if v is not None and v > 0}
    if not measured:
        return None
    path = max(measured, key=lambda k: measured[k])
    return path, measured[path]


def family_roofs(matmul: dict[str, MatmulFigures]) -> dict[str, dict[str, FamilyPeak]]:
    """Each kernel family's roof per dtype: the best of that family's own probes, naming
    the probe; a family none of whose probes ran in a dtype has no roof there.

    Example:
        >>> figures = MatmulFigures(peak_flops_per_s=173e9, paths={
        ...     "linear": PathFigures(peak_flops_per_s=160e9),
        ...     "conv2d": PathFigures(peak_flops_per_s=380e9)})
        >>> roofs = family_roofs({"float32": figures})
        >>> roofs["matmul"]["float32"].path, roofs["conv"]["float32"].flops_per_s / 1e9
        ('mm', 380.0)
    """
    roofs: dict[str, dict[str, FamilyPeak]] = {}
    for dtype, figures in matmul.items():
        rates = {"mm": figures.peak_flops_per_s,
                 **{path: f.peak_flops_per_s for path, f in figures.paths.items()}}
        for path, rate in rates.items():
            family = PATH_FAMILY.get(path)
            if family is None or rate is None or rate <= 0:
                continue
            best = roofs.setdefault(family.value, {}).get(dtype)
            if best is None or rate > best.flops_per_s:
                roofs[family.value][dtype] = FamilyPeak(flops_per_s=rate, path=path)
    return roofs


def _dtypes(device: torch.device) -> tuple[tuple[str, torch.dtype, bool], ...]:
    if device.type == "cpu":
        return _CPU_DTYPES
    if torch.cuda.get_device_capability(device) >= _CUDA_TENSOR_CORE_BF16_CC:
        return _CUDA_DTYPES
    return tuple(d for d in _CUDA_DTYPES if d[0] not in (TF32, BF16))


def measure(device: str | torch.device = "cpu", *, quick: bool = False) -> Ceilings:
    """Measure the ceilings of ``device`` with the caller's ``torch.get_num_threads()``.

    Args:
        device: "cpu", "cuda" or "cuda:N".
        quick: smaller sizes and budgets (well under a second on a CPU), for tests; the
            figures are rougher and small buffers may overstate bandwidth.

    Returns:
        Ceilings with ``source="measured"`` and an empty ``key`` (the cache fills it in).

    Raises:
        ValueError: for a device type other than cpu or cuda.
        RuntimeError: where CUDA is asked for but absent, or fp32 matmul cannot run.

    Example:
        >>> c = measure("cpu")                       # a few seconds
        >>> round(c.ridge_for("float32"), 1)         # doctest: +SKIP
        6.2
    """
    dev = _resolve(device)
    plan = _PLANS[(dev.type, quick)]
    started = time.perf_counter()
    device_scope = torch.cuda.device(dev) if dev.type == "cuda" else contextlib.nullcontext()
    with torch.inference_mode(), device_scope:
        matmul = {
            name: measure_matmul(dev, dtype, plan, tf32=tf32) for name, dtype, tf32 in _dtypes(dev)
        }
        for name, dtype, tf32 in _dtypes(dev):
            sizes = [r.n for r in matmul[name].sizes]
            if sizes:
                matmul[name] = dataclasses.replace(
                    matmul[name], paths=measure_paths(dev, dtype, plan, max(sizes), tf32=tf32))
        copy = measure_copy(dev, plan)
        overhead = measure_overhead(dev, plan)
    peaks: dict[str, float] = {}
    for name, figures in list(matmul.items()):
        best = best_path(figures)
        if best is not None:
            matmul[name] = dataclasses.replace(figures, peak_path=best[0])
            peaks[name] = best[1]
    if FP32 not in peaks:
        raise RuntimeError(f"fp32 matmul could not be measured: {matmul[FP32].error}")
    identity: GpuIdentity | None = None
    if dev.type == "cuda":
        identity = gpu_identity(dev)
        memory_bytes = int(torch.cuda.get_device_properties(dev).total_memory)
        name, spec = identity.name, gpu_specs.lookup(identity.name, memory_bytes)
        cache_bytes = gpu_l2_bytes(dev)
        theoretical = gpu_theoretical(spec)
    else:
        name, spec, cache_bytes = cpu_model_name(), None, _llc_bytes()
        theoretical = cpu_theoretical(torch.get_num_threads(), cpu_count=os.cpu_count())
    details = CeilingDetails(
        quick=quick,
        wall_s=time.perf_counter() - started,
        plan=BenchPlanInfo(list(plan.matmul_sizes), plan.matmul_budget_s),
        host=HostInfo(cpu=cpu_model_name(),
                      cpu_capability=torch.backends.cpu.get_cpu_capability(),
                      native_bf16=cpu_has_native_bf16(),
                      interop_threads=torch.get_num_interop_threads(), gpu=identity),
        matmul=matmul,
        copy=copy,
        overhead=overhead,
    )
    return Ceilings(
        device=dev.type,
        name=name,
        peak_flops_per_s=peaks,
        bandwidth_bytes_per_s=copy.bandwidth_bytes_per_s or copy.best_bytes_per_s,
        overhead_s=overhead.floor_s,
        threads=torch.get_num_threads(),
        torch_version=torch.__version__,
        source="measured",
        measured_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        details=details,
        spec=spec,
        cache_bytes=cache_bytes,
        family_peaks=family_roofs(matmul),
        theoretical=theoretical,
    )
