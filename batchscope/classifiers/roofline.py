"""The roofline model, in one place: an op's roof time, its bound, and per-batch shares.

Every figure that compares work with this machine's ceilings goes through :class:`Roof`:
the classification of each op here, the predicted B* (:mod:`.critical_batch`) and the
estimates of ``watch`` (:mod:`.estimate`). Definitions as in DESIGN.md.

An op of a kernel family with probes of its own (a matmul, a convolution:
``op_families.family``) sits under that family's roof, what its own library path reached
on this machine; every other op under the dtype's peak, the best of all probes. The roofs
themselves are judged here too (:func:`roof_flags`): how much their repeats spread, and
where each measured rate sits against the device's theoretical peak.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection
from dataclasses import dataclass
from typing import TypedDict

from batchscope.classifiers.data_parallel import communication_share
from batchscope.hardware.figures import (
    AchievedPeak,
    FamilyPeak,
    MatmulFigures,
    TheoreticalPeak,
)
from batchscope.hardware.types import FP32, Ceilings
from batchscope.op_families import PATH_FAMILY, is_collective
from batchscope.op_families import family as kernel_family
from batchscope.records import (
    BatchResult,
    Bound,
    Flag,
    OpStat,
    Status,
    TimeBasis,
    TimeShare,
)
from batchscope.records.flag_payloads import (
    AboveTheoreticalPeak,
    AccountingError,
    BelowTheoreticalPeak,
    CeilingSpread,
    PartlyFromCache,
    ServedFromCache,
)
from batchscope.records.report import ResponsePoint

# An op may measure a little faster than its roof from timer resolution and the ±10% noise
# of the ceilings themselves; beyond this it is an accounting error, flagged.
ROOF_TOLERANCE = 1.15
# Working sets under the device's last-level cache (``Ceilings.cache_bytes``: a GPU's L2, the
# CPU's L3) may be served from it, which beats the DRAM roof: said in the flag, as the likely
# cause. This is the fallback where the ceilings do not know it (32 MB L3 on the trial CPUs).
CACHE_BYTES_HINT = 32 * 2**20
# A memory-bound op faster than its DRAM roof whose working set is under this many times the
# last-level cache may be partly served from it; beyond that, the bytes must be wrong.
PARTLY_CACHED = 4


@dataclass(frozen=True)
class Roof:
    """The roofline of one dtype on one machine.

    ``time_s`` is the roofline time ``max(FLOPs / peak, bytes / bandwidth)``; ``floored_s``
    adds the fixed cost of each call, ``max(roof, calls × per-op floor)``: what an op
    costs at best, measured ops included.
    """

    peak_flops_per_s: float
    bandwidth_bytes_per_s: float
    overhead_s: float  # the fixed cost of one small op: the floor under every call

    @classmethod
    def of(cls, ceilings: Ceilings, dtype: str | None, family: str | None = None) -> Roof:
        """The roof of ``dtype`` (fp32 when unknown) under ``ceilings``: kernel ``family``'s
        own where it has one ("matmul", "conv"), else the dtype's peak."""
        return cls(ceilings.peak_for(dtype or FP32, family), ceilings.bandwidth_bytes_per_s,
                   ceilings.overhead_s)

    @classmethod
    def of_op(cls, ceilings: Ceilings, op: OpStat) -> Roof:
        """The roof of one op: its kernel family's (a matmul under the matmul roof) in its
        ``roof_dtype`` (TF32 tensor cores for an fp32 matmul or convolution that ran on
        them) when set, else in its dtype."""
        found = kernel_family(op.name)
        return cls.of(ceilings, op.roof_dtype or op.dtype,
                      found.value if found is not None else None)

    @property
    def ridge_flops_per_byte(self) -> float:
        return self.peak_flops_per_s / self.bandwidth_bytes_per_s

    def time_s(self, flops: float, bytes_moved: float) -> float:
        return max(flops / self.peak_flops_per_s, bytes_moved / self.bandwidth_bytes_per_s)

    def floored_s(self, flops: float, bytes_moved: float, calls: int) -> float:
        return max(self.time_s(flops, bytes_moved), calls * self.overhead_s)


# When a dense kernel (a matmul or a convolution, op_families.family: exact FLOPs) ran
# faster than its family's cached roof in its dtype, the roof was measured low (a slow
# minute of a shared VM, a slower BLAS path) and this run's own figure is the machine's.
# Only ops with at least this much profiled time count: below it the timer's granularity
# dominates.
ACHIEVED_MIN_TIME_S = 1e-3


def roof_name(dtype: str, family: str | None) -> str:
    """How a roof is named in ``details.achieved_by_ops`` and in sentences:
    "float32 matmul", or the dtype alone for its peak."""
    return f"{dtype} {family}" if family else dtype


def achieved_ceilings(ceilings: Ceilings, results: list[BatchResult]) -> Ceilings:
    """``ceilings`` with each kernel family's roof of each dtype raised to the best FLOP/s
    an op of that family reached in this run where that beats it, and the dtype's peak
    with it where it beats that too (``details.achieved_by_ops`` says which op, from
    what); the same object when no op did. An op's FLOPs are exact and its profiled time
    can only be longer than its true time, so what it reached the machine can do."""
    best: dict[tuple[str, str], tuple[float, OpStat, int]] = {}
    for r in results:
        for op in r.ops if r.status == Status.OK else []:
            dtype, found = op.roof_dtype or op.dtype, kernel_family(op.name)
            if (found is None or not op.flops or op.time_s < ACHIEVED_MIN_TIME_S
                    or dtype not in ceilings.peak_flops_per_s):
                continue
            rate, key = op.flops / op.time_s, (dtype, found.value)
            if rate > ceilings.peak_for(*key) and rate > best.get(key, (0.0,))[0]:
                best[key] = (rate, op, r.batch_size)
    if not best:
        return ceilings
    peaks = dict(ceilings.peak_flops_per_s)
    families = {name: dict(by_dtype) for name, by_dtype in ceilings.family_peaks.items()}
    achieved = dict(ceilings.details.achieved_by_ops)
    for (dtype, family), (rate, op, batch_size) in sorted(best.items()):
        achieved[roof_name(dtype, family)] = AchievedPeak(
            measured_peak_flops_per_s=ceilings.peak_for(dtype, family), flops_per_s=rate,
            name=op.name, op_id=op.op_id, batch_size=batch_size, family=family, dtype=dtype)
        families.setdefault(family, {})[dtype] = FamilyPeak(rate, op.name, op.op_id)
        peaks[dtype] = max(peaks[dtype], rate)
    return dataclasses.replace(
        ceilings, peak_flops_per_s=peaks, family_peaks=families,
        details=dataclasses.replace(ceilings.details, achieved_by_ops=achieved))


_ITEM_BYTES = {"float64": 8, "float32": 4, "float16": 2, "bfloat16": 2}


def footprint_bytes(op: OpStat, bytes_per_call: float) -> float:
    """The distinct memory one call touches, for the cache test: its bytes moved, less the
    second count of the tensor an in-place op (``add_``) reads and then writes."""
    item = _ITEM_BYTES.get(op.dtype or "")
    if not op.name.endswith("_") or not op.input_shapes or item is None:
        return bytes_per_call
    elements = 1
    for d in op.input_shapes[0]:
        elements *= d
    return max(bytes_per_call - elements * item, 0.0) if op.input_shapes[0] else bytes_per_call


# On device time (GPU kernels: a trace, a CUDA run) the per-op floor is the shortest a
# kernel runs: a floor under each kernel, not a cost added to every call. An op whose roof
# is under it is held by it only where its kernels' floors make at least this share of its
# measured time; an addmm whose calls ran 13 floors each (issue 32) is slow for another
# reason (a poor kernel, a collective beside it): placed by its intensity, its efficiency
# saying how far below the roof it ran.
DEVICE_FLOOR_SHARE = 0.5


def _held_by_floor(op: OpStat, roof: Roof, calls: int, device_time: bool) -> bool:
    """Whether an op whose roof is under the per-op floor spends its time on that floor:
    always on the CPU (the fixed cost is paid on top of the work); on device time where
    its kernels' floors (per call, the launches of its kept kernels) are at least
    DEVICE_FLOOR_SHARE of its time."""
    if not device_time or op.time_s <= 0:
        return True
    launches = sum(k.calls for k in op.kernels) / calls if op.kernels else 1.0
    return max(launches, 1.0) * calls * roof.overhead_s >= DEVICE_FLOOR_SHARE * op.time_s


def classify_op(op: OpStat, ceilings: Ceilings, device_time: bool = False) -> OpStat:
    """Intensity, roofline time, bound and efficiency of one op group (a new record);
    ``device_time``: its time is its kernels' (a GPU), see :data:`DEVICE_FLOOR_SHARE`."""
    out = dataclasses.replace(op, flags=list(op.flags))
    if op.bound in (Bound.COMMUNICATION, Bound.TRANSFER):
        return out  # set from its kernels (a GPU trace): no roofline applies
    if is_collective(op.name):  # c10d's, not aten's scatter_ (op_families)
        out.bound = Bound.COMMUNICATION  # its cost: batches[].communication_exposed_s
        return out
    if op.flops is None:
        out.bound = Bound.UNCOUNTED
        return out
    calls = max(op.calls, 1)
    total_bytes = op.bytes.total
    roof = Roof.of_op(ceilings, op)
    roof_s = roof.time_s(op.flops, total_bytes)
    out.roof_time_s = roof_s
    out.intensity = op.flops / total_bytes if total_bytes else None
    if roof_s / calls < roof.overhead_s and _held_by_floor(op, roof, calls, device_time):
        out.bound = Bound.OVERHEAD
    elif out.intensity is not None and out.intensity < roof.ridge_flops_per_byte:
        out.bound = Bound.MEMORY
    else:
        out.bound = Bound.COMPUTE
    if op.time_s > 0:
        out.efficiency = roof_s / op.time_s
        if out.efficiency > ROOF_TOLERANCE and out.bound != Bound.OVERHEAD:
            cache_bytes = ceilings.cache_bytes or CACHE_BYTES_HINT
            footprint = footprint_bytes(op, total_bytes / calls)
            payload: ServedFromCache | PartlyFromCache | AccountingError
            if footprint < cache_bytes and out.bound == Bound.MEMORY:
                # Expected, not an error: the DRAM roof does not apply to a working set the
                # last-level cache holds.
                payload = ServedFromCache(time_s=op.time_s, roof_s=roof_s,
                                          footprint_bytes=footprint, cache_bytes=cache_bytes)
            elif footprint < PARTLY_CACHED * cache_bytes and out.bound == Bound.MEMORY:
                # A working set a few times the cache: what the op before it wrote may still
                # be there (a gradient summed right after it was computed).
                payload = PartlyFromCache(time_s=op.time_s, roof_s=roof_s,
                                          footprint_bytes=footprint, cache_bytes=cache_bytes)
            else:
                payload = AccountingError(time_s=op.time_s, roof_s=roof_s,
                                          footprint_bytes=footprint, cache_bytes=cache_bytes)
            out.flags.append(Flag.of(payload, op_id=op.op_id))
    return out


def time_share(result: BatchResult) -> TimeShare | None:
    """Shares of the profiled step time by bound.

    On the CPU the gaps between ops are framework time. On a GPU (``time_basis ==
    "device"``) op times are kernel times, the step is the device's, and the time it ran
    nothing is idle (launch-bound when large); communication counts only where it was not
    hidden behind other kernels, so the shares still sum to 1.
    """
    step = result.profiled_step_s
    if not step or not result.ops:
        return None
    by_bound = dict.fromkeys(Bound, 0.0)
    for op in result.ops:
        by_bound[op.bound] += op.time_s
    unmatched = sum(result.unmatched_ops_s.values())
    exposed = max(by_bound[Bound.COMMUNICATION] - (result.communication_overlapped_s or 0.0), 0.0)
    framework = result.framework_s or 0.0
    if result.communication_exposed_s and result.time_basis == "cpu":
        # A data-parallel CPU step (gloo): DDP waits for its all-reduce at the end of
        # backward in C++ with no aten op around it, so the profile shows the wait as time
        # between ops; what the timed steps say it costs moves from there to communication,
        # as the same share of the step data_parallel reports (one function computes both),
        # so the report has one communication figure, not two. Without a latency to share
        # it against, the exposed time itself.
        share = communication_share(result)
        cost_s = share * step if share is not None else result.communication_exposed_s
        moved = min(cost_s, framework)
        exposed, framework = exposed + moved, framework - moved
    return TimeShare(
        memory=by_bound[Bound.MEMORY] / step,
        compute=by_bound[Bound.COMPUTE] / step,
        overhead=by_bound[Bound.OVERHEAD] / step,
        uncounted=(by_bound[Bound.UNCOUNTED] + unmatched) / step,
        framework=framework / step,
        communication=exposed / step,
        transfer=by_bound[Bound.TRANSFER] / step,
        idle=(result.device_idle_s or 0.0) / step,
    )


def classify_batch(result: BatchResult, ceilings: Ceilings) -> BatchResult:
    """A copy of ``result`` with every op classified and the time shares filled."""
    device_time = result.time_basis == TimeBasis.DEVICE
    classified = dataclasses.replace(result, ops=[classify_op(op, ceilings, device_time)
                                                  for op in result.ops])
    predicted = [Roof.of_op(ceilings, op).floored_s(op.flops, op.bytes.total, op.calls)
                 for op in classified.ops if op.flops is not None]
    return dataclasses.replace(classified, time_share=time_share(classified),
                               predicted_step_s=sum(predicted) if predicted else None)


def batch_response(results: list[BatchResult]) -> dict[str, list[ResponsePoint]]:
    """Per op across batch sizes: time per batch row against b (the batch-response curve).

    Keyed by ``op_id``: the same op at every batch size (see ``profiler.join.op_ids``).
    """
    curves: dict[str, list[ResponsePoint]] = {}
    for r in results:
        for op in r.ops:
            curves.setdefault(op.op_id, []).append(
                ResponsePoint(r.batch_size, op.time_s / r.batch_size))
    return curves


# -- the roofs themselves --------------------------------------------------------------------
# A roof whose probe's repeats spread (the middle half of their rates, over their median)
# more than this is an uncertain roof: issue 14 saw fp32 best 215 and median 114 GFLOP/s.
CEILING_SPREAD_FLAG = 0.25
# A rate above the theoretical peak by more than a best repeat's own error (a few percent)
# did fewer multiplications than were counted, or ran at a clock above the one read.
ABOVE_THEORETICAL = 1.05
# A roof under this share of the theoretical peak came from a slow path, not a generous
# bound: the FMA units (a guess) and SMT threads counted as cores can each double the bound
# (Zen 4 reaches half of its AVX-512 figure), so only a rate under a quarter of it says
# something the user could change.
FAR_BELOW_THEORETICAL = 0.25


def families_run(results: list[BatchResult]) -> frozenset[str] | None:
    """The kernel families of the ops a run measured, whose roofs its ops were placed
    against; None where no batch size has ops (timing only): every roof then."""
    ops = [op for r in results if r.status == Status.OK for op in r.ops]
    if not ops:
        return None
    return frozenset(found.value for op in ops if (found := kernel_family(op.name)) is not None)


def _probe_roofs(ceilings: Ceilings, dtype: str,
                 families: Collection[str] | None) -> list[tuple[str | None, str]]:
    """(family, probe) of each roof of ``dtype`` a probe set, of ``families`` (all where
    None): each kernel family's, or in ceilings measured before families had roofs, the
    dtype's one peak (family None). A roof a run's op raised is the op's, not a probe's:
    left out."""
    roofs: list[tuple[str | None, str]] = [
        (family, by_dtype[dtype].path) for family, by_dtype in
        sorted(ceilings.family_peaks.items())
        if dtype in by_dtype and by_dtype[dtype].op_id is None
        and (families is None or family in families)]
    figures = ceilings.details.matmul.get(dtype)
    if not ceilings.family_peaks and figures is not None and dtype in ceilings.peak_flops_per_s:
        roofs = [(None, figures.peak_path or "mm")]
    return roofs


def _spread_flag(ceilings: Ceilings, dtype: str, family: str | None,
                 path: str) -> Flag | None:
    """A flag when the repeats of the probe that set a roof spread widely: the middle half
    of their rates over the median (the quartiles' interquartile range of times, for
    figures measured before the quartiles were kept)."""
    figures = ceilings.details.matmul.get(dtype)
    rates = figures.path_rates(path) if figures is not None else None
    if rates is None:
        return None
    fast: float | None = None  # the quartile rates, where the figures kept them
    slow: float | None = None
    span = rates.span
    if span is None:  # older figures: only the times' spread was kept
        span = _time_spread(figures, path) if figures is not None else None
    else:
        fast, slow = rates.fast_flops_per_s, rates.slow_flops_per_s
    if span is None or span <= CEILING_SPREAD_FLAG:
        return None
    return Flag.of(CeilingSpread(dtype=dtype, family=family, path=path, size=rates.size,
                                 best=rates.best_flops_per_s, median=rates.median_flops_per_s,
                                 fast=fast, slow=slow, spread=span))


def _time_spread(figures: MatmulFigures, path: str) -> float | None:
    if path == "mm":
        row = figures.peak_row()
        return row.spread if row is not None else None
    paths = figures.paths.get(path)
    best = max(paths.sizes, key=lambda r: r.best_flops_per_s, default=None) if paths else None
    return best.spread if best is not None else None


class _Basis(TypedDict):
    """The fields AboveTheoreticalPeak and BelowTheoreticalPeak share."""

    theoretical_flops_per_s: float
    source: str
    cores: int | None
    clock_hz: float | None
    clock_source: str | None
    flops_per_cycle: float | None
    isa: str | None
    fma_units: int | None
    matrix_unit: str | None


def _basis(theoretical: TheoreticalPeak, dtype: str) -> _Basis:
    """How the theoretical peak of ``dtype`` was worked out, for the sentence to show."""
    return {"theoretical_flops_per_s": theoretical.flops_per_s[dtype],
            "source": theoretical.source, "cores": theoretical.cores,
            "clock_hz": theoretical.clock_hz, "clock_source": theoretical.clock_source,
            "flops_per_cycle": theoretical.flops_per_cycle_per_core.get(dtype),
            "isa": theoretical.isa, "fma_units": theoretical.fma_units,
            "matrix_unit": theoretical.matrix_unit}


def _measured_rates(ceilings: Ceilings, dtype: str) -> list[tuple[str | None, str, float,
                                                                   AchievedPeak | None]]:
    """(family, probe or op, FLOP/s, the op) of every rate measured in ``dtype``: each
    probe's best, and each op of the run that beat its roof."""
    rates: list[tuple[str | None, str, float, AchievedPeak | None]] = []
    figures = ceilings.details.matmul.get(dtype)
    if figures is not None:
        probes = {"mm": figures.peak_flops_per_s,
                  **{path: f.peak_flops_per_s for path, f in figures.paths.items()}}
        for path, rate in probes.items():
            family = PATH_FAMILY.get(path)
            if rate:
                rates.append((family.value if family else None, path, rate, None))
    for key, op in ceilings.details.achieved_by_ops.items():
        if (op.dtype or key) == dtype:
            rates.append((op.family, op.name, op.flops_per_s, op))
    return rates


def theoretical_flags(ceilings: Ceilings, dtype: str,
                      families: Collection[str] | None = None) -> list[Flag]:
    """Every rate measured in ``dtype`` set against the device's theoretical peak: one
    above it (a probe's or an op's) is flagged, and a kernel family's roof far below it;
    of ``families`` only (the run's, :func:`families_run`; all where None), for a roof no
    op of the run was placed against says nothing about it."""
    theoretical = ceilings.theoretical
    bound = theoretical.flops_per_s.get(dtype) if theoretical is not None else None
    if theoretical is None or not bound:
        return []
    flags = []
    for family, path, rate, op in _measured_rates(ceilings, dtype):
        if families is not None and family not in families:
            continue
        if rate > ABOVE_THEORETICAL * bound:
            flags.append(Flag.of(
                AboveTheoreticalPeak(dtype=dtype, family=family, path=path, flops_per_s=rate,
                                     share=rate / bound, **_basis(theoretical, dtype)),
                op.batch_size if op else None, op.op_id if op else None))
    host = ceilings.details.host
    native = host.native_bf16 if host is not None and ceilings.device == "cpu" else None
    for family, by_dtype in sorted(ceilings.family_peaks.items()):
        roof = by_dtype.get(dtype)
        if families is not None and family not in families:
            continue
        if roof is not None and roof.flops_per_s < FAR_BELOW_THEORETICAL * bound:
            flags.append(Flag.of(BelowTheoreticalPeak(
                dtype=dtype, family=family, path=roof.path,
                flops_per_s=roof.flops_per_s, share=roof.flops_per_s / bound,
                native=native if dtype == "bfloat16" else None,
                **_basis(theoretical, dtype))))
    return flags


def roof_flags(ceilings: Ceilings, dtype: str,
               families: Collection[str] | None = None) -> list[Flag]:
    """Flags on the roofs ops of ``dtype`` and of kernel ``families`` (the run's; all where
    None) are placed against: a probe whose repeats spread widely, and every measured rate
    against the theoretical peak."""
    flags = [f for family, path in _probe_roofs(ceilings, dtype, families)
             if (f := _spread_flag(ceilings, dtype, family, path)) is not None]
    return flags + theoretical_flags(ceilings, dtype, families)
