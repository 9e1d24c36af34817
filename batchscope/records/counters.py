"""Measured per-kernel counters read from Nsight Compute (ncu) CSV exports.

``profiler/ncu_export.py`` fills these from one or more ``ncu --csv`` exports: one
:class:`KernelCounters` per kernel launch, every figure in SI base units (bytes, seconds,
Hz, bytes/s, FLOPs) or None where the exports did not record it, and an :class:`NcuNote` for
every figure that was recorded but could not be used (an unknown unit, NaN, a negative count)
and for whatever else the reader had to decide (a truncated file, runs kept apart). Measured
counters sit beside the modelled ones of a sweep; nothing here classifies or renders them.

Example:
    >>> k = KernelCounters(launch_id="0", process_id="7", kernel_name="gemv",
    ...                    normalised_name="gemv", flops=4.0e6, dram_bytes=2.0e6)
    >>> k.intensity_flops_per_byte
    2.0
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum


class NcuLayout(str, Enum):
    """How an export lays out its numbers."""

    DETAILS = "details"  # one row per metric: --page details, a section export, --metrics
    RAW = "raw"  # --page raw: one row per launch, one column per metric, a units row


class FlopSource(str, Enum):
    """Which counters a share of a kernel's FLOPs was counted from.

    The CUDA-core shares (SASS, flop_count, roofline) and the tensor share are disjoint pipes
    and add up; within the CUDA cores each precision is counted from one source only, SASS
    first, then ``flop_count_*``, then the roofline's rates."""

    SASS_FP16 = "sass_fp16"  # hadd + hmul + 2 x hfma thread instructions (predicated on)
    SASS_FP32 = "sass_fp32"  # fadd + fmul + 2 x ffma
    SASS_FP64 = "sass_fp64"  # dadd + dmul + 2 x dfma
    FLOP_COUNT_HP = "flop_count_hp"  # flop_count_hp.sum, nvprof's metric as ncu maps it
    FLOP_COUNT_SP = "flop_count_sp"
    FLOP_COUNT_DP = "flop_count_dp"
    ROOFLINE_FP32 = "roofline_fp32"  # the roofline's achieved rate x SM clock x duration
    ROOFLINE_FP64 = "roofline_fp64"
    TENSOR_OPS = "tensor_ops"  # sm__ops_path_tensor_*.sum, math operations on the tensor path


@dataclass(frozen=True)
class FlopTerm:
    """One share of a kernel's FLOPs: its source, the counters it was computed from (metric
    names or the roofline's labels, as the export wrote them) and its FLOPs."""

    source: FlopSource
    metrics: list[str]
    flops: float


class NcuNoteKind(str, Enum):
    """Why a figure was left None, or what else the reader decided."""

    UNKNOWN_UNIT = "unknown_unit"  # a unit the reader has no scale for: never guessed
    UNEXPECTED_UNIT = "unexpected_unit"  # a known unit of the wrong kind (a time in bytes)
    NO_UNITS = "no_units"  # a file with no unit column (details) or units row (raw)
    NOT_A_NUMBER = "not_a_number"  # a value that does not parse as a number
    NOT_FINITE = "not_finite"  # NaN or infinity
    NEGATIVE = "negative"  # a negative byte, time, FLOP, clock or percentage figure
    TRUNCATED = "truncated"  # the file ends inside a row: read up to its last whole row
    MALFORMED_ROWS = "malformed_rows"  # rows with too few fields, skipped (text: how many)
    SEPARATE_RUNS = "separate_runs"  # one launch key whose files disagree: kept apart
    TENSOR_INSTRUCTIONS_ONLY = "tensor_instructions_only"  # tensor work counted in instructions
    NO_TENSOR_COUNTER = "no_tensor_counter"  # no tensor-pipe counter: FLOPs miss any tensor work
    NO_CUDA_CORE_COUNTER = "no_cuda_core_counter"  # no fp32 CUDA-core source: FLOPs miss it
    PARTIAL_SASS = "partial_sass"  # some of add/mul/fma of one precision were not collected
    PACKED_HALF = "packed_half"  # fp16 SASS counts: a packed HFMA2/HADD2 does twice the FLOPs
    NO_FLOP_COUNTER = "no_flop_counter"  # nothing to count FLOPs from: flops is None
    # no gpu__time_duration nor Duration: the duration is SM cycles over the SM clock
    DURATION_FROM_CYCLES = "duration_from_cycles"


@dataclass(frozen=True)
class NcuNote:
    """Something the reader decided about one file, launch or metric.

    ``path`` is the file it concerns; ``launch`` names the launch (``ID 3 in process 7``)
    where it concerns one, ``metric`` the metric (or roofline label), and ``text`` the
    offending text as written (a unit, a value, a count), so the note renders without
    re-reading anything (reports/flag_text.ncu_note_text words it)."""

    kind: NcuNoteKind
    path: str
    launch: str | None = None
    metric: str | None = None
    text: str | None = None


@dataclass(frozen=True)
class NcuFile:
    """One export as read: its layout, where its header was, what it held."""

    path: str
    layout: NcuLayout
    header_line: int  # 1-based line of the header row (lines before it: ncu's and the program's)
    metric_rows: int  # whole rows read (details: metric rows; raw: launch rows)
    launches: int  # distinct launch keys in the file
    skipped_rows: int = 0  # rows with too few fields, or that the csv module could not read
    truncated: bool = False  # the file ended inside a row


@dataclass(frozen=True)
class KernelCounters:
    """One kernel launch as its exports record it; None where nothing usable was recorded.

    The launch is ncu's ``(Process ID, ID, Kernel Name)``; ``normalised_name`` is
    :func:`batchscope.profiler.ncu_export.normalise_kernel_name` of the name, for joining to a
    Kineto trace's kernels. ``flops`` is the sum of ``flops_by_source``; ``flops_complete`` is
    False where the FLOPs are known to be a lower bound (tensor work counted only in
    instructions, no tensor or no fp32 CUDA-core counter, partly collected or packed-half SASS
    counters): the notes say which. Roofs (``peak_*``) are the GPU's own, from the RooflineChart
    section at the clocks ncu measured for this launch. Percentages are in percent."""

    launch_id: str
    process_id: str
    kernel_name: str
    normalised_name: str
    process_name: str | None = None
    device: str | None = None  # the "Device" column: the GPU's index
    device_name: str | None = None  # device__attribute_display_name, where a raw page has it
    compute_capability: str | None = None
    block_size: tuple[int, int, int] | None = None
    grid_size: tuple[int, int, int] | None = None
    context: str | None = None
    stream: str | None = None
    duration_s: float | None = None
    dram_read_bytes: float | None = None
    dram_write_bytes: float | None = None
    dram_bytes: float | None = None
    l2_bytes: float | None = None
    l1_bytes: float | None = None
    flops: float | None = None
    flops_by_source: list[FlopTerm] = field(default_factory=list)
    flops_complete: bool = False
    tensor_instructions: float | None = None  # recorded, never turned into FLOPs
    sm_frequency_hz: float | None = None
    dram_frequency_hz: float | None = None
    sm_throughput_pct: float | None = None  # SpeedOfLight "Compute (SM) Throughput"
    dram_throughput_pct: float | None = None
    memory_throughput_pct: float | None = None
    peak_dram_bytes_per_s: float | None = None
    peak_fp32_flops_per_s: float | None = None
    peak_fp64_flops_per_s: float | None = None
    files: list[str] = field(default_factory=list)

    @property
    def intensity_flops_per_byte(self) -> float | None:
        """FLOPs per DRAM byte (None: either is unknown, or no DRAM byte moved)."""
        if self.flops is None or not self.dram_bytes:
            return None
        intensity = self.flops / self.dram_bytes
        return intensity if intensity < float("inf") else None


@dataclass(frozen=True)
class NcuExport:
    """Every launch of the exports read together, the files, and the notes."""

    kernels: list[KernelCounters]
    files: list[NcuFile]
    notes: list[NcuNote] = field(default_factory=list)
