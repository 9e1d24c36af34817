"""A step's time on a named GPU from its counted ops: each kernel's time, and the host that
issues them.

- A kernel takes ``fixed_s + max(FLOPs / peak, bytes / bandwidth) / efficiency`` with the
  terms of its family (:class:`~batchscope.records.target.ModelTerms`: GEMMs on the tensor
  cores, GEMMs on the plain FP32 units, every other op): the datasheet's
  dense peak in the op's dtype (an fp32 convolution on the TF32 tensor cores where the GPU
  has them, as cuDNN runs it by default; an fp32 matmul on the plain FP32 rate, torch's
  default) and its bandwidth. A tensor-core GEMM's bytes run at the memory side's own
  efficiency where the terms have one (``gemm_memory``: a decode step's GEMVs).
- Eager PyTorch issues the ops one after another: op ``i`` is issued ``host_s_per_op``
  after op ``i - 1``, and its kernel starts once it is issued and the kernel before it is
  done. The step ends with the last kernel or the last issue, whichever is later. Small
  batches on a big GPU are launch-bound this way: the GPU waits for the host. A step
  replayed as a CUDA graph has no host cost per op (``host_s_per_op=0``).
- An engine that fuses (``fused``) runs each stretch of non-GEMM ops between two GEMMs as
  one kernel: one fixed cost and one launch for the stretch.

Only ops that move bytes or do FLOPs launch a kernel; views and allocations do not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.types import FP32, TF32
from batchscope.op_families import Family, family, is_gemm
from batchscope.records import CountedOp
from batchscope.records.target import KernelTerm, ModelTerms


@dataclass(frozen=True)
class KernelTime:
    """One op's kernel on the target: its time and what bounds it."""

    time_s: float
    compute_s: float  # FLOPs over the effective peak
    memory_s: float  # bytes over the effective bandwidth
    fixed_s: float

    @property
    def bound(self) -> str:
        """"latency" where the fixed cost is the larger part, else "compute" or "memory"."""
        if self.fixed_s >= max(self.compute_s, self.memory_s):
            return "latency"
        return "compute" if self.compute_s >= self.memory_s else "memory"


@dataclass(frozen=True)
class StepTime:
    """A step on the target: its time, the host's and the kernels', kernels by bound."""

    step_s: float
    host_s: float
    device_s: float
    memory_s: float
    compute_s: float
    latency_s: float
    launched_ops: int


def launches(op: CountedOp) -> bool:
    """Whether the op runs a kernel: it moves bytes or does FLOPs (views do neither)."""
    return bool(op.flops) or op.bytes.total > 0


def peak_for(spec: DatasheetSpec, dtype: str, name: str) -> float:
    """The datasheet's dense peak for ``name`` in ``dtype`` (see the module's doc)."""
    peaks = spec.peak_flops_per_s
    if dtype == FP32 and family(name) == Family.CONV and TF32 in peaks:
        return peaks[TF32]
    if dtype in peaks and (is_gemm(name) or dtype == FP32):
        return peaks[dtype]
    # Elementwise ops in a half dtype run on the plain FP32 units, not the tensor cores.
    return peaks.get(FP32, max(peaks.values()))


def kernel_time(op: CountedOp, spec: DatasheetSpec, terms: ModelTerms,
                scale: float = 1.0) -> KernelTime:
    """The op's kernel on the GPU of ``spec``; ``scale`` multiplies the variable part (the
    band: the kernels' median error either way)."""
    peak = peak_for(spec, op.dtype, op.name)
    term: KernelTerm = terms.other
    memory_efficiency = term.efficiency
    if is_gemm(op.name):
        on_fp32_units = op.dtype == FP32 and peak == spec.peak_flops_per_s.get(FP32)
        term = terms.gemm_fp32 if on_fp32_units else terms.gemm
        memory_efficiency = (terms.gemm_memory.efficiency
                             if terms.gemm_memory is not None and not on_fp32_units
                             else term.efficiency)
    compute_s = (op.flops or 0) / peak / term.efficiency * scale
    memory_s = op.bytes.total / spec.bandwidth_bytes_per_s / memory_efficiency * scale
    return KernelTime(time_s=term.fixed_s + max(compute_s, memory_s), compute_s=compute_s,
                      memory_s=memory_s, fixed_s=term.fixed_s)


def kernel_groups(ops: Sequence[CountedOp], fused: bool = False) -> list[list[CountedOp]]:
    """The step's kernels, in order: each launching op its own, or with ``fused`` each run
    of consecutive non-GEMM ops between two GEMMs as one (an engine's fused norms and
    activations: vLLM's, torch.compile's)."""
    groups: list[list[CountedOp]] = []
    for op in ops:
        if not launches(op):
            continue
        if fused and not is_gemm(op.name) and groups and not is_gemm(groups[-1][-1].name):
            groups[-1].append(op)
        else:
            groups.append([op])
    return groups


def group_time(group: Sequence[CountedOp], spec: DatasheetSpec, terms: ModelTerms,
               scale: float = 1.0) -> KernelTime:
    """One kernel of one op, or of a fused run of ops: each op's variable part, one fixed
    cost (a fused kernel still moves every op's bytes: fusion is taken to save launches,
    not traffic, so the prediction stays an upper bound of the fused kernel's time)."""
    if len(group) == 1:
        return kernel_time(group[0], spec, terms, scale)
    parts = [kernel_time(op, spec, terms, scale) for op in group]
    fixed = terms.other.fixed_s
    return KernelTime(time_s=fixed + sum(max(k.compute_s, k.memory_s) for k in parts),
                      compute_s=sum(k.compute_s for k in parts),
                      memory_s=sum(k.memory_s for k in parts), fixed_s=fixed)


def step_time(ops: Sequence[CountedOp], spec: DatasheetSpec, terms: ModelTerms,
              host_s_per_op: float | None = None, scale: float = 1.0,
              fused: bool = False) -> StepTime:
    """The step of ``ops`` (one step's counted ops, in order) on the GPU of ``spec``
    (``fused``: see :func:`kernel_groups`)."""
    per_op = terms.host_s_per_op if host_s_per_op is None else host_s_per_op
    issued = done = 0.0
    device = memory = compute = latency = 0.0
    n = 0
    for group in kernel_groups(ops, fused):
        k = group_time(group, spec, terms, scale)
        n += 1
        issued += per_op
        done = max(done, issued) + k.time_s
        device += k.time_s
        bound = k.bound
        if bound == "latency":
            latency += k.time_s
        elif bound == "compute":
            compute += k.time_s
        else:
            memory += k.time_s
    return StepTime(step_s=max(done, issued), host_s=issued, device_s=device,
                    memory_s=memory, compute_s=compute, latency_s=latency, launched_ops=n)


def band(ops: Sequence[CountedOp], spec: DatasheetSpec, terms: ModelTerms,
         cuda_graphs: bool = False, fused: bool = False) -> tuple[float, float]:
    """(low, high) step: the fastest host and kernels at their median error below the
    model, the slowest host and kernels at their median error above it (no host under a
    CUDA graph)."""
    spread = max(terms.gemm.median_abs_log_error, terms.gemm_fp32.median_abs_log_error,
                 terms.other.median_abs_log_error)
    low = step_time(ops, spec, terms, 0.0 if cuda_graphs else terms.host_low_s_per_op,
                    math.exp(-spread), fused)
    high = step_time(ops, spec, terms, 0.0 if cuda_graphs else terms.host_high_s_per_op,
                     math.exp(spread), fused)
    return low.step_s, high.step_s
