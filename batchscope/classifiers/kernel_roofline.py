"""Measured kernels on the roofline: Nsight Compute's counters per launch, placed under the
GPU's roofs (report.json ``counters``).

A kernel's FLOPs and DRAM bytes are measured here (ncu's counters), not modelled: its
intensity is FLOPs per DRAM byte, and its roof time the larger of FLOPs / the compute roof
and bytes / the DRAM roof. The compute roof is the tensor cores' (at the precision its
tensor-path counters name, ``sm__ops_path_tensor_src_bf16_dst_fp32`` -> bf16) where any of
its FLOPs or instructions ran on the tensor pipe, the plain FP32 rate otherwise. The bound
follows the op classifier's rule (classifiers/roofline.py) for one kernel: ``overhead``
where the roofs' time is under the GPU's shortest kernel and that floor is at least half
the kernel's duration (a launch too small for either roof to matter), else ``memory`` below
the ridge and ``compute`` at or above it; ``uncounted`` without DRAM bytes or duration.

Roofs come from the datasheet of the GPU named with ``--gpu`` (dense figures at boost
clock), else from the export's own roofline section (ncu's DRAM and FP32 FMA peaks at the
clocks it measured), which has no tensor roof: tensor kernels are then placed under the
FP32 rate, and the report says so.
"""

from __future__ import annotations

import dataclasses
import re
import statistics
from collections.abc import Sequence

from batchscope.classifiers.roofline import Roof
from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.gpu_specs import FP8
from batchscope.hardware.types import BF16, FP16, FP32, TF32, Ceilings
from batchscope.records import BatchResult, Flag
from batchscope.records.counter_report import (
    DEFAULT_KERNEL_FLOOR_S,
    ComputeRoof,
    CounterKernel,
    CounterRoofs,
    CountersSection,
    OpCounters,
    RoofSource,
)
from batchscope.records.counters import FlopSource, KernelCounters, NcuExport
from batchscope.records.flag_payloads import CountersDisagree
from batchscope.records.measurement import Bound

# With at least this many launches, the floor is their shortest duration: ncu times one
# launch at a time, so the shortest is the nearest to an empty kernel the exports show.
FLOOR_FROM_LAUNCHES = 10
# A kernel is held by the floor where the floor makes at least this share of its duration
# (classifiers/roofline.DEVICE_FLOOR_SHARE, for one launch).
FLOOR_SHARE = 0.5

# The source precision a tensor-path counter names -> the datasheet's dtype key.
_TENSOR_PRECISIONS = (("bf16", BF16), ("fp16", FP16), ("f16", FP16), ("tf32", TF32),
                      ("fp8", FP8), ("e4m3", FP8), ("e5m2", FP8))
_TENSOR_SOURCE = re.compile(r"tensor_src_([a-z0-9]+)")


def tensor_dtype(kernel: KernelCounters) -> str | None:
    """The precision a kernel's tensor-path FLOPs ran in, from its counters' names
    (``sm__ops_path_tensor_src_bf16_dst_fp32.sum`` -> ``bfloat16``); the one with most
    FLOPs where several; None without tensor FLOPs.

    Example:
        >>> from batchscope.records.counters import FlopTerm
        >>> k = KernelCounters("0", "1", "gemm", "gemm", flops_by_source=[FlopTerm(
        ...     FlopSource.TENSOR_OPS, ["sm__ops_path_tensor_src_bf16_dst_fp32.sum"], 4e9)])
        >>> tensor_dtype(k)
        'bfloat16'
    """
    best: tuple[float, str] | None = None
    for term in kernel.flops_by_source:
        if term.source != FlopSource.TENSOR_OPS or term.flops <= 0:
            continue
        for metric in term.metrics:
            match = _TENSOR_SOURCE.search(metric)
            if match is None:
                continue
            dtype = next((d for key, d in _TENSOR_PRECISIONS if match.group(1).startswith(key)),
                         None)
            if dtype is not None and (best is None or term.flops > best[0]):
                best = (term.flops, dtype)
    return best[1] if best else None


def tensor_flops(kernel: KernelCounters) -> float:
    """The FLOPs a kernel ran on the tensor pipe (0 without)."""
    return sum(t.flops for t in kernel.flops_by_source if t.source == FlopSource.TENSOR_OPS)


def kernel_floor_s(kernels: Sequence[KernelCounters]) -> float:
    """The shortest a kernel runs on this GPU: the shortest launch profiled where there are
    :data:`FLOOR_FROM_LAUNCHES` or more, else :data:`DEFAULT_KERNEL_FLOOR_S`."""
    durations = [k.duration_s for k in kernels if k.duration_s]
    if len(durations) < FLOOR_FROM_LAUNCHES:
        return DEFAULT_KERNEL_FLOOR_S
    return min(durations)


def counter_roofs(export: NcuExport, spec: DatasheetSpec | None) -> CounterRoofs | None:
    """The roofs the launches are placed under: ``spec``'s (a datasheet, ``--gpu``), at the
    precision most tensor FLOPs ran in, else the export's own roofline section (the median
    over the launches that have it); None where neither gives a DRAM roof."""
    floor_s = kernel_floor_s(export.kernels)
    by_dtype: dict[str, float] = {}
    for k in export.kernels:
        dtype = tensor_dtype(k)
        if dtype is not None:
            by_dtype[dtype] = by_dtype.get(dtype, 0.0) + tensor_flops(k)
    dtype = max(by_dtype, key=lambda d: by_dtype[d]) if by_dtype else None
    if spec is not None:
        return CounterRoofs(
            source=RoofSource.DATASHEET, dram_bytes_per_s=spec.bandwidth_bytes_per_s,
            fp32_flops_per_s=spec.peak_flops_per_s.get(FP32),
            tensor_flops_per_s=spec.peak_flops_per_s.get(dtype) if dtype else None,
            tensor_dtype=dtype, product=spec.product, floor_s=floor_s)
    dram = [k.peak_dram_bytes_per_s for k in export.kernels if k.peak_dram_bytes_per_s]
    fp32 = [k.peak_fp32_flops_per_s for k in export.kernels if k.peak_fp32_flops_per_s]
    if not dram:
        return None
    return CounterRoofs(source=RoofSource.NCU_ROOFLINE,
                        dram_bytes_per_s=statistics.median(dram),
                        fp32_flops_per_s=statistics.median(fp32) if fp32 else None,
                        tensor_dtype=dtype, floor_s=floor_s)


def _ratio(numerator: float | None, denominator: float | None) -> float | None:
    if numerator is None or not denominator:
        return None
    return numerator / denominator


def classify_kernel(kernel: KernelCounters, roofs: CounterRoofs | None) -> CounterKernel:
    """One launch's intensities, achieved rates, roof time, efficiency and bound.

    Example:
        >>> roofs = CounterRoofs(RoofSource.DATASHEET, 1.0e12, 1.0e14)
        >>> k = KernelCounters("0", "1", "copy", "copy", duration_s=20e-6, dram_bytes=1.6e7,
        ...                    flops=0.0, flops_complete=True)
        >>> c = classify_kernel(k, roofs)
        >>> c.bound.value, round(c.efficiency, 2)
        ('memory', 0.8)
    """
    tensor = tensor_flops(kernel)
    on_tensor = tensor > 0 or bool(kernel.tensor_instructions)
    compute_roof = ComputeRoof.TENSOR if on_tensor else ComputeRoof.FP32
    flops_roof = None
    if roofs is not None:
        flops_roof = (roofs.tensor_flops_per_s or roofs.fp32_flops_per_s) if on_tensor \
            else roofs.fp32_flops_per_s
    bytes_ = kernel.dram_bytes
    duration = kernel.duration_s
    roof_time = None
    bound = Bound.UNCOUNTED
    if roofs is not None and roofs.dram_bytes_per_s and bytes_ is not None and duration:
        memory_s = bytes_ / roofs.dram_bytes_per_s
        compute_s = (kernel.flops or 0.0) / flops_roof if flops_roof else 0.0
        roof_time = max(memory_s, compute_s)
        if roof_time < roofs.floor_s and roofs.floor_s >= FLOOR_SHARE * duration:
            bound = Bound.OVERHEAD
        elif compute_s > 0 and compute_s >= memory_s:  # at or above the ridge
            bound = Bound.COMPUTE
        else:
            bound = Bound.MEMORY
    return CounterKernel(
        launch_id=kernel.launch_id,
        process_id=kernel.process_id,
        name=kernel.kernel_name,
        duration_s=duration,
        dram_bytes=bytes_,
        flops=kernel.flops,
        flops_complete=kernel.flops_complete,
        tensor_flops=tensor if tensor > 0 else None,
        l2_bytes=kernel.l2_bytes,
        l1_bytes=kernel.l1_bytes,
        intensity=_ratio(kernel.flops, bytes_),
        l2_intensity=_ratio(kernel.flops, kernel.l2_bytes),
        l1_intensity=_ratio(kernel.flops, kernel.l1_bytes),
        achieved_flops_per_s=_ratio(kernel.flops, duration),
        achieved_dram_bytes_per_s=_ratio(bytes_, duration),
        compute_roof=compute_roof,
        roof_time_s=roof_time,
        efficiency=_ratio(roof_time, duration),
        bound=bound,
        sm_throughput_share=(kernel.sm_throughput_pct / 100
                             if kernel.sm_throughput_pct is not None else None),
        dram_throughput_share=(kernel.dram_throughput_pct / 100
                               if kernel.dram_throughput_pct is not None else None),
        block_size=_dims(kernel.block_size),
        grid_size=_dims(kernel.grid_size),
        files=list(kernel.files),
    )


def _dims(dims: tuple[int, int, int] | None) -> str | None:
    return f"({dims[0]}, {dims[1]}, {dims[2]})" if dims else None


def counters_section(export: NcuExport, spec: DatasheetSpec | None = None,
                     batch_size: int | None = None) -> CountersSection:
    """report.json ``counters`` from an export read by :mod:`batchscope.profiler.ncu_export`,
    with ``spec``'s roofs where a GPU was named; ``batch_size``: the sweep's, for --ncu."""
    roofs = counter_roofs(export, spec)
    first = export.kernels[0] if export.kernels else None
    return CountersSection(
        files=[f.path for f in export.files],
        kernels=[dataclasses.replace(classify_kernel(k, roofs), batch_size=batch_size)
                 for k in export.kernels],
        roofs=roofs,
        device=(first.device_name if first else None) or (spec.product if spec else None),
        compute_capability=first.compute_capability if first else None,
        notes=list(export.notes),
    )


def _side(intensity: float | None, ridge: float) -> Bound:
    if intensity is None:
        return Bound.UNCOUNTED
    return Bound.MEMORY if intensity < ridge else Bound.COMPUTE


def judge_ops(ops: Sequence[OpCounters], batch: BatchResult | None,
              ceilings: Ceilings | None) -> list[OpCounters]:
    """The trace's ops joined to their measured kernels (traces/ncu_join.py), with the
    modelled bytes and FLOPs of ``batch`` (the trace's result at that batch size, per step)
    beside the measured ones, and both intensities placed against the op's own roof: memory
    below its ridge, compute at or above it. An op whose two sides differ is what
    :func:`counter_flags` reports."""
    by_id = {op.op_id: op for op in batch.ops} if batch is not None else {}
    out = []
    for oc in ops:
        op = by_id.get(oc.op_id)
        modelled_bytes = float(op.bytes.total) if op is not None else None
        modelled_flops = float(op.flops) if op is not None and op.flops is not None else None
        intensity = _ratio(oc.flops, oc.dram_bytes)
        modelled = _ratio(modelled_flops, modelled_bytes)
        bound = modelled_bound = Bound.UNCOUNTED
        if ceilings is not None and op is not None and ceilings.bandwidth_bytes_per_s:
            ridge = Roof.of_op(ceilings, op).ridge_flops_per_byte
            bound, modelled_bound = _side(intensity, ridge), _side(modelled, ridge)
        out.append(dataclasses.replace(
            oc, name=op.name if op is not None else oc.name, modelled_bytes=modelled_bytes,
            modelled_flops=modelled_flops, intensity=intensity, modelled_intensity=modelled,
            bound=bound, modelled_bound=modelled_bound))
    return out


def counter_flags(ops: Sequence[OpCounters], batch_size: int) -> list[Flag]:
    """One ``counters_disagree`` flag per op whose measured intensity puts it under another
    bound than the modelled one (the figures the sentence quotes in its values)."""
    return [Flag.of(CountersDisagree(
        op=oc.name, bound=oc.bound.value, modelled_bound=oc.modelled_bound.value,
        dram_bytes=oc.dram_bytes or 0.0, modelled_bytes=oc.modelled_bytes or 0.0,
        flops=oc.flops or 0.0, modelled_flops=oc.modelled_flops or 0.0,
        matched=oc.matched, launches=oc.launches), batch_size, oc.op_id)
        for oc in ops if oc.disagrees]
