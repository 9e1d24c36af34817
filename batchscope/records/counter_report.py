"""report.json ``counters``: measured hardware counters per kernel launch (Nsight Compute),
placed on a roofline.

The op breakdown's bytes and FLOPs are modelled (formulas on shapes, every byte moved once);
these are measured, so where the two differ the model is wrong for that kernel: cache
reuse, recomputation, split-K, Winograd, padding. Filled by
:mod:`batchscope.classifiers.kernel_roofline` from what :mod:`batchscope.profiler.ncu_export` read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from batchscope.records.counters import NcuNote
from batchscope.records.measurement import Bound

# The floor under every kernel where nothing measured it: a near-empty kernel's time on
# recent NVIDIA GPUs (the shared traces' 5th percentiles of kernel durations: 2-5 µs).
DEFAULT_KERNEL_FLOOR_S = 2e-6


class RoofSource(str, Enum):
    """Where the roofs a kernel is placed under come from."""

    DATASHEET = "datasheet"  # --gpu NAME: the part's datasheet (dense, boost clock)
    NCU_ROOFLINE = "ncu_roofline"  # the export's own SpeedOfLight_RooflineChart section


class ComputeRoof(str, Enum):
    """Which compute roof a kernel sits under: the tensor cores' where its FLOPs (or any of
    its instructions) ran on the tensor pipe, the plain FP32 rate otherwise."""

    TENSOR = "tensor"
    FP32 = "fp32"


@dataclass(frozen=True)
class CounterRoofs:
    """The roofs of the GPU the counters were recorded on, each None where unknown.

    ``tensor_flops_per_s`` is the dense rate of the precision the tensor kernels ran in
    (``tensor_dtype``); ``floor_s`` the shortest a kernel runs on this GPU, under which a
    kernel's work is latency, not bandwidth or math (``Bound.OVERHEAD``)."""

    source: RoofSource
    dram_bytes_per_s: float | None
    fp32_flops_per_s: float | None
    tensor_flops_per_s: float | None = None
    tensor_dtype: str | None = None
    product: str | None = None  # the datasheet's part, with --gpu
    floor_s: float = DEFAULT_KERNEL_FLOOR_S


@dataclass(frozen=True)
class CounterKernel:
    """One kernel launch as Nsight Compute measured it, and where it sits on the roofline.

    The figures are for this one launch, in SI units. ``flops`` is None where no counter
    of floating-point work was recorded, and a lower bound where ``flops_complete`` is
    false (tensor instructions counted without a FLOPs-per-instruction factor). The
    intensities are FLOPs per byte at each memory level recorded (a hierarchical
    roofline); ``bound`` is from the DRAM intensity against the ridge of ``compute_roof``
    and the DRAM roof, or ``overhead`` where the roofs' time is under the GPU's kernel
    floor and the floor is at least half the kernel's duration."""

    launch_id: str  # ncu's ID, within its process
    process_id: str
    name: str
    duration_s: float | None
    dram_bytes: float | None
    flops: float | None
    flops_complete: bool = True
    tensor_flops: float | None = None
    l2_bytes: float | None = None
    l1_bytes: float | None = None
    intensity: float | None = None  # FLOPs per DRAM byte
    l2_intensity: float | None = None
    l1_intensity: float | None = None
    achieved_flops_per_s: float | None = None
    achieved_dram_bytes_per_s: float | None = None
    compute_roof: ComputeRoof = ComputeRoof.FP32
    roof_time_s: float | None = None  # the larger of the compute and DRAM roofs' times
    efficiency: float | None = None  # roof_time_s / duration_s
    bound: Bound = Bound.UNCOUNTED
    sm_throughput_share: float | None = None  # ncu's SpeedOfLight "Compute (SM) Throughput"
    dram_throughput_share: float | None = None  # ncu's SpeedOfLight "DRAM Throughput"
    block_size: str | None = None
    grid_size: str | None = None
    files: list[str] = field(default_factory=list)
    batch_size: int | None = None  # --ncu: the sweep's batch size this step ran at


@dataclass(frozen=True)
class OpCounters:
    """One op of a trace joined to the profiled launches of its kernels (``diagnose trace
    --ncu``): measured against modelled, per step.

    ``launches`` is how many kernels the op launched in the trace's steps and ``matched``
    how many of them were paired with a profiled launch (same normalised name, same place
    in launch order); the measured figures are the matched launches' sums scaled to all of
    the op's launches, per step. The bounds place the measured and the modelled intensity
    against the op's own roof (classifiers/roofline.Roof)."""

    op_id: str
    name: str
    launches: int
    matched: int
    dram_bytes: float | None  # measured, per step
    flops: float | None
    flops_complete: bool = True
    modelled_bytes: float | None = None
    modelled_flops: float | None = None
    intensity: float | None = None
    modelled_intensity: float | None = None
    bound: Bound = Bound.UNCOUNTED
    modelled_bound: Bound = Bound.UNCOUNTED

    @property
    def bytes_ratio(self) -> float | None:
        """Measured / modelled DRAM bytes (None: either unknown or 0)."""
        if self.dram_bytes is None or not self.modelled_bytes:
            return None
        return self.dram_bytes / self.modelled_bytes

    @property
    def disagrees(self) -> bool:
        """The measured intensity puts the op under another bound than the modelled one."""
        placed = {Bound.MEMORY, Bound.COMPUTE}
        return self.bound in placed and self.modelled_bound in placed \
            and self.bound != self.modelled_bound


@dataclass(frozen=True)
class CountersSection:
    """report.json ``counters``: every kernel launch profiled, in the exports' order, and
    the roofs they were placed under. ``cache_control`` and ``clock_control`` are ncu's
    settings where known (its defaults flush every cache before each kernel and lock the
    clocks to base: a kernel then reads its inputs from DRAM even where a real step would
    find them in L2, and runs at base clock); None where the export does not say."""

    files: list[str]
    kernels: list[CounterKernel]
    roofs: CounterRoofs | None
    device: str | None = None
    compute_capability: str | None = None
    cache_control: str | None = None
    clock_control: str | None = None
    notes: list[NcuNote] = field(default_factory=list)  # what the reader left out, and why
    # diagnose trace --ncu: the trace's ops with their kernels' measured counters, at the
    # trace's (first) batch size.
    ops: list[OpCounters] = field(default_factory=list)
    batch_size: int | None = None
