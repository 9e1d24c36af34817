"""What the ceilings' micro-benchmarks measured, as records (``Ceilings.details``).

Every figure a ceiling came from: each matmul size and its repeats, the other paths a model
takes (``F.linear``, a 3x3 convolution), the copy and in-place bandwidths, the per-op
floor, the host, and later the peaks a run's own dense ops reached. The report shows them
beside the roofs (how each was measured, how much it spread); the classifiers read the
spread of a peak and the path that reached it. A recorded trace's datasheet roofs have
none of these (``DatasheetSpec`` says where they come from).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Repeats:
    """Repeated timings of one call: each sample ``inner`` back-to-back calls."""

    repeats: int
    median_s: float
    best_s: float
    worst_s: float
    spread: float  # interquartile range / median
    inner: int = 1
    warmup_s: float = 0.0


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
    """A dtype's peak raised to what a dense op of the run reached (roofline.achieved_ceilings)."""

    measured_peak_flops_per_s: float
    flops_per_s: float
    name: str
    op_id: str
    batch_size: int


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
