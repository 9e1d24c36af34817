"""report.json ``target``: a model's batch curve predicted on a GPU this machine does not
have (``diagnose MODEL --target-gpu NAME``). Nothing in it was timed: every figure is a
prediction from the model's exact per-op FLOPs and bytes (counted on meta tensors), the
named GPU's datasheet and the performance model's terms (:class:`ModelTerms`), which were
read off real GPUs' traces. Filled by :mod:`batchscope.target`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from batchscope.records.measurement import ByteSplit


@dataclass(frozen=True)
class KernelTerm:
    """A kernel of one family takes ``fixed_s + roof_s / efficiency`` on the GPU, its roof
    being ``max(FLOPs / peak, bytes / bandwidth)`` under the datasheet; fitted on ``ops``
    op groups (``calls`` calls) of the traces, each off by ``median_abs_log_error`` (a
    log ratio: 0.3 is ±35%) at the median."""

    fixed_s: float
    efficiency: float
    ops: int
    calls: int
    median_abs_log_error: float


@dataclass(frozen=True)
class ModelTerms:
    """The performance model's terms and where they come from (docs/method.md)."""

    gemm: KernelTerm  # matmuls, convolutions, fused attention on the tensor cores
    gemm_fp32: KernelTerm  # the same on the plain FP32 units (fp32 without TF32)
    other: KernelTerm  # every other op that launches a kernel
    host_s_per_op: float  # eager PyTorch's host time per launching op (median of traces)
    host_low_s_per_op: float  # the fastest host among the traces
    host_high_s_per_op: float  # the slowest
    traces: list[str] = field(default_factory=list)
    # Tensor-core GEMMs and fused attention whose bytes over the bandwidth outlast their
    # FLOPs over the peak: their memory side at this efficiency (the fixed cost stays the
    # GEMM family's). Read off Nsight Compute exports, whose DRAM bytes are measured (a
    # trace's GEMMs on that side are too small to tell: roofs under 3 us). None: the
    # family's one efficiency on both sides.
    gemm_memory: KernelTerm | None = None
    ncu_exports: list[str] = field(default_factory=list)


class PickRule(str, Enum):
    """How the target's pick was made."""

    NEAR_BEST = "near_best"  # the smallest fitting size within 90% of the best predicted
    NONE_FITS = "none_fits"  # no size fits in the GPU's memory: no pick


@dataclass(frozen=True)
class TargetBatch:
    """One batch size on the target GPU, predicted.

    ``low_s``–``high_s`` is the band of the step: the host's cost at the fastest and
    slowest host of the calibration traces, the kernels' at their median error either way.
    ``host_s`` is the host's time issuing the step's ops, ``device_s`` the kernels' time;
    the step is what the two give together (a kernel cannot start before it is issued).
    ``memory_s``/``compute_s``/``latency_s`` split ``device_s`` by what bounds each kernel.
    """

    batch_size: int
    predicted_step_s: float
    low_s: float
    high_s: float
    predicted_throughput_per_s: float
    predicted_peak_memory_bytes: int
    fits: bool
    host_s: float
    device_s: float
    memory_s: float
    compute_s: float
    latency_s: float
    launched_ops: int
    flops: int
    bytes: ByteSplit


@dataclass(frozen=True)
class TargetGridPoint:
    """The step at one batch size and context, predicted; ``input_bytes`` is what the
    step's inputs hold (the KV cache grows it with the context)."""

    batch_size: int
    context: int
    predicted_step_s: float
    low_s: float
    high_s: float
    input_bytes: int


@dataclass(frozen=True)
class TargetSection:
    """The prediction on the named GPU at every batch size asked."""

    gpu: str  # the datasheet's product name
    dtype: str
    peak_flops_per_s: float  # the datasheet's dense peak in ``dtype`` (GEMM family)
    bandwidth_bytes_per_s: float
    memory_bytes: int
    terms: ModelTerms
    batches: list[TargetBatch]
    pick: int | None
    pick_rule: PickRule
    best_batch_size: int | None
    # B*: where the step's FLOPs over the peak meet its bytes over the bandwidth (the
    # counted work is exact: a line in the batch size through the sizes counted); None
    # where the step never turns compute-bound.
    critical_batch: float | None
    # The knee of the predicted step times (critical_batch.fit_knee), None where flat.
    knee_batch: float | None
    knee_within: bool
    # Bytes the GPU holds besides the step's tensors: CUDA context and library workspaces.
    reserved_bytes: int
    unit: str = "sample"
    # --cuda-graphs: the step replayed as one CUDA graph (as vLLM and SGLang decode, or
    # torch.compile's "reduce-overhead"): no host cost per op, the kernels back to back.
    cuda_graphs: bool = False
    # --fused: an engine that fuses each run of non-GEMM ops between two GEMMs into one
    # kernel (vLLM's fused norms and activations, torch.compile): one launch for the run.
    fused: bool = False
    # A decode model's step predicted at every batch size and each of its CONTEXTS (the
    # first as in ``batches``), where it has two or more: what ``diagnose serve`` fits its
    # step time over context from.
    context_grid: list[TargetGridPoint] = field(default_factory=list)
    # The model's weights and buffers, in the dtype predicted (the KV cache's room beside
    # them is what ``diagnose serve`` takes by default); None in older reports.
    weight_bytes: int | None = None
