"""What the ceilings' micro-benchmarks measured, as records (``Ceilings.details``).

Every figure a ceiling came from: each matmul size and its repeats, the other paths a model
takes (``F.linear``, a 3x3 convolution), the roof of each kernel family and the path that
reached it, the machine's theoretical peak, the copy and in-place bandwidths, the per-op
floor, the host, and later the peaks a run's own dense ops reached. The report shows them
beside the roofs (how each was measured, how much it spread); the classifiers read the
spread of a peak and the path that reached it. A recorded trace's datasheet roofs have
none of these (``DatasheetSpec`` says where they come from).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Repeats:
    """Repeated timings of one call: each sample ``inner`` back-to-back calls.

    ``p25_s`` and ``p75_s`` are the quartiles ``spread`` is read from (None in figures
    measured before calibration format 7), so that a sentence quoting the spread can quote
    the numbers it is made of.
    """

    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float  # interquartile range / median
    inner: int = 1
    warmup_s: float = 0.0
    p25_s: float | None = None
    p75_s: float | None = None


@dataclass(frozen=True)
class RepeatRates:
    """One probe size's repeats as FLOP/s: the figures a roof's uncertainty is quoted in.

    Attributes:
        size: the probe's size in words ("n=2048", "batch 16").
        best_flops_per_s: the fastest repeat: the roof.
        median_flops_per_s: the median repeat.
        fast_flops_per_s: the faster quartile (the 25th percentile of the times); None in
            figures measured before calibration format 7.
        slow_flops_per_s: the slower quartile (the 75th percentile of the times).
    """

    size: str
    best_flops_per_s: float
    median_flops_per_s: float
    fast_flops_per_s: float | None = None
    slow_flops_per_s: float | None = None

    @classmethod
    def of(cls, flops: float, best_s: float, median_s: float, p25_s: float | None,
           p75_s: float | None, size: str) -> RepeatRates:
        return cls(size, flops / best_s, flops / median_s,
                   flops / p25_s if p25_s else None, flops / p75_s if p75_s else None)

    @property
    def span(self) -> float | None:
        """The middle half of the repeats' rates, fast quartile less slow, over their median:
        the share a sentence quotes beside those three numbers (None without quartiles).

        Example:
            >>> round(RepeatRates("n=2048", 173e9, 162e9, 192e9, 150e9).span, 3)
            0.259
        """
        if self.fast_flops_per_s is None or self.slow_flops_per_s is None:
            return None
        return (self.fast_flops_per_s - self.slow_flops_per_s) / self.median_flops_per_s


@dataclass(frozen=True)
class MatmulSize:
    """One square ``torch.mm`` size: n×n by n×n."""

    n: int
    flops_per_call: int
    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float
    inner: int
    warmup_s: float
    best_flops_per_s: float
    median_flops_per_s: float
    # The peak size measured again when its repeats spread widely: the first spread, or
    # the second's when the first run was kept.
    first_spread: float | None = None
    remeasured_spread: float | None = None
    p25_s: float | None = None
    p75_s: float | None = None

    def repeat_rates(self) -> RepeatRates:
        """Its repeats as FLOP/s."""
        return RepeatRates.of(self.flops_per_call, self.best_s, self.median_s,
                              self.p25_s, self.p75_s, f"n={self.n}")


@dataclass(frozen=True)
class PathSize:
    """One size of another path (``F.linear``'s n, a convolution's batch)."""

    size: int
    flops_per_call: float
    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float
    inner: int
    warmup_s: float
    best_flops_per_s: float
    median_flops_per_s: float
    p25_s: float | None = None
    p75_s: float | None = None

    def repeat_rates(self, path: str) -> RepeatRates:
        """Its repeats as FLOP/s (``path``: "linear" sizes are n, "conv2d" sizes a batch)."""
        size = f"n={self.size}" if path == "linear" else f"batch {self.size}"
        return RepeatRates.of(self.flops_per_call, self.best_s, self.median_s,
                              self.p25_s, self.p75_s, size)


@dataclass(frozen=True)
class PathFigures:
    """One path's sizes and its best FLOP/s (None where it could not run: ``error``)."""

    sizes: list[PathSize] = field(default_factory=list)
    peak_flops_per_s: float | None = None
    error: str | None = None


@dataclass(frozen=True)
class MatmulFigures:
    """One dtype's matmuls: ``torch.mm`` at ascending sizes within a budget, the other
    paths, and which reached the dtype's peak."""

    sizes: list[MatmulSize] = field(default_factory=list)
    skipped_sizes: list[int] = field(default_factory=list)
    wall_s: float = 0.0
    peak_flops_per_s: float | None = None  # torch.mm's best
    peak_size: int | None = None
    error: str | None = None  # where the dtype cannot run
    paths: dict[str, PathFigures] = field(default_factory=dict)  # "linear", "conv2d"
    peak_path: str | None = None  # "mm", "linear" or "conv2d": the dtype's peak

    def peak_row(self) -> MatmulSize | None:
        """The ``torch.mm`` size of the peak."""
        return next((s for s in self.sizes if s.n == self.peak_size), None)

    def path_rates(self, path: str) -> RepeatRates | None:
        """The repeats, as FLOP/s, of the size where ``path`` ("mm", "linear", "conv2d")
        reached its best; None where it did not run."""
        if path == "mm":
            row = self.peak_row()
            return row.repeat_rates() if row is not None else None
        figures = self.paths.get(path)
        best = max(figures.sizes, key=lambda r: r.best_flops_per_s, default=None) \
            if figures is not None else None
        return best.repeat_rates(path) if best is not None else None


@dataclass(frozen=True)
class FamilyPeak:
    """One kernel family's roof in one dtype: the best its own probes reached.

    Attributes:
        flops_per_s: the roof.
        path: the probe that reached it ("mm" or "linear" for matmuls, "conv2d" for
            convolutions), or the name of the op of a run that beat it (``op_id`` then set).
        op_id: the op that raised it (roofline.achieved_ceilings); None for a probe's.
    """

    flops_per_s: float
    path: str
    op_id: str | None = None


@dataclass(frozen=True)
class TheoreticalPeak:
    """What the device could do at most per dtype, from what it is rather than what it ran.

    On a CPU: ``cores × clock_hz × flops_per_cycle_per_core``, where a core's FLOP a cycle
    are vector lanes × 2 (a fused multiply-add) × FMA units, or a matrix unit's own rate
    (AMX). Its assumptions, each one making it a bound rather than a prediction:

    * ``cores`` are the intra-op threads: SMT siblings share one core's vector units, so
      where threads outnumber physical cores the bound is that much too high.
    * ``fma_units`` is a guess per ISA family, not read from the machine (nothing exposes
      it): two on x86 (Intel's server cores and AMD Zen 5 have two 512-bit FMA units; Zen 4
      runs AVX-512 on 256-bit halves, so it reaches half), four on Arm (Neoverse's 128-bit
      pipes). A measured rate at half of the bound can be all the core has.
    * ``clock_hz`` is the highest the machine reports (sysfs' maximum frequency, else
      /proc/cpuinfo's current "cpu MHz", else the model name's); a VM often reports its
      nominal clock, and turbo may run above it (``clock_source`` says which).

    On a GPU: the datasheet's dense figures (``source`` names the row).

    Attributes:
        flops_per_s: dtype -> the bound, FLOP/s.
        source: how it was found ("cpu flags" or "datasheet: ...").
        flops_per_cycle_per_core: dtype -> FLOP one core can do per cycle (CPU).
        cores: the cores counted (CPU).
        clock_hz: the clock counted (CPU).
        clock_source: "cpuinfo_max_freq", "cpu MHz" or "model name" (CPU).
        isa: the widest vector ISA the flags name ("avx512f", "avx2", "asimd", ...) (CPU).
        fma_units: FMA units per core assumed (a guess, above) (CPU).
        matrix_unit: the matrix unit counted for bf16/fp16 ("amx"), if any (CPU).
    """

    flops_per_s: dict[str, float]
    source: str
    flops_per_cycle_per_core: dict[str, float] = field(default_factory=dict)
    cores: int | None = None
    clock_hz: float | None = None
    clock_source: str | None = None
    isa: str | None = None
    fma_units: int | None = None
    matrix_unit: str | None = None


@dataclass(frozen=True)
class InPlaceFigures:
    """The in-place update's bandwidth (``src.add_(1)``)."""

    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float
    inner: int
    warmup_s: float
    best_bytes_per_s: float
    median_bytes_per_s: float
    p25_s: float | None = None
    p75_s: float | None = None


@dataclass(frozen=True)
class CopyFigures:
    """Streaming bandwidth: a copy and an in-place update of buffers past the caches.

    Ceilings measured before the in-place path (calibration format 5) have the copy only:
    ``in_place`` None, no ``paths``."""

    buffer_bytes: int
    bytes_per_copy: int
    llc_bytes_reported: int | None
    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float
    inner: int
    warmup_s: float
    best_bytes_per_s: float
    median_bytes_per_s: float
    wall_s: float
    in_place: InPlaceFigures | None = None
    paths: dict[str, float] = field(default_factory=dict)  # bytes a second: copy, in_place
    peak_path: str = "copy"  # the better one: the bandwidth ceiling
    bandwidth_bytes_per_s: float | None = None
    p25_s: float | None = None
    p75_s: float | None = None


@dataclass(frozen=True)
class OpCost:
    """A one-element op's cost per call, over chunks of back-to-back calls."""

    calls_per_chunk: int
    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float


@dataclass(frozen=True)
class OverheadFigures:
    """The per-op floor: the median of one-element ops of the kinds models call most."""

    ops: dict[str, OpCost]
    floor_s: float


@dataclass(frozen=True)
class GpuIdentity:
    index: int
    name: str
    uuid: str
    driver: str | None


@dataclass(frozen=True)
class HostInfo:
    cpu: str
    cpu_capability: str
    native_bf16: bool | None
    interop_threads: int
    gpu: GpuIdentity | None = None


@dataclass(frozen=True)
class BenchPlanInfo:
    matmul_sizes: list[int]
    matmul_budget_s: float


@dataclass(frozen=True)
class AchievedPeak:
    """A roof raised to what a dense op of the run reached (roofline.achieved_ceilings):
    its kernel family's roof of its dtype (``family``; None in reports written before
    families had roofs of their own, where the dtype's one peak was raised)."""

    measured_peak_flops_per_s: float
    flops_per_s: float
    name: str
    op_id: str
    batch_size: int
    family: str | None = None
    dtype: str | None = None


@dataclass(frozen=True)
class DatasheetSpec:
    """A GPU's datasheet row (hardware/gpu_specs.py): a cross-check of measured roofs, and
    the roofs of a recorded trace."""

    product: str
    peak_flops_per_s: dict[str, float]
    bandwidth_bytes_per_s: float
    memory_bytes: int
    source: str
    sparse_flops_per_s: dict[str, float] = field(default_factory=dict)
    l2_bytes: int | None = None


@dataclass(frozen=True)
class CeilingDetails:
    """Everything the ceilings were measured from (empty for a datasheet's roofs).

    Attributes:
        quick: measured with the tests' small sizes and budgets.
        other_cpu_share: the share of the CPU other processes took while measuring
            (hardware/busy.py); figures measured on a busy machine are not cached.
        achieved_by_ops: dtype -> the op of this run that beat the measured peak.
        kernel_floor_from_trace: a datasheet's roofs whose per-op floor is the 5th
            percentile of the trace's kernel durations (else a near-empty kernel's).
    """

    quick: bool = False
    wall_s: float | None = None
    plan: BenchPlanInfo | None = None
    host: HostInfo | None = None
    matmul: dict[str, MatmulFigures] = field(default_factory=dict)
    copy: CopyFigures | None = None
    overhead: OverheadFigures | None = None
    other_cpu_share: float | None = None
    achieved_by_ops: dict[str, AchievedPeak] = field(default_factory=dict)
    kernel_floor_from_trace: bool | None = None
