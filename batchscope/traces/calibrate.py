"""The GPU performance model's terms, measured on recorded traces of real GPUs.

``diagnose MODEL --target-gpu NAME`` predicts a step on a GPU this machine does not have
(:mod:`batchscope.target`). Each term of its model is read off torch.profiler traces that
real GPUs recorded (``tests/data/gpu-traces``: H100, B200, A100), never fitted to the
published measurements the prediction is checked against (docs/benchmarks.md):

- **kernel efficiency by family**: a kernel takes ``fixed_s + roof_s / efficiency``, its
  roof being ``max(FLOPs / datasheet peak, bytes / datasheet bandwidth)``; one pair for
  GEMMs (matmuls, convolutions, attention) on the tensor cores, one for GEMMs on the plain
  FP32 units (an fp32 matmul not allowed TF32), one for every other op. Fitted by
  least absolute log error over every counted op of every trace, weighted by its calls:
  the fixed cost is what makes a small kernel run far below its roof.
- **host cost per op**: eager PyTorch issues one op after another from Python; where a
  trace's GPU sat idle most of the step, the host was the limit, and the time between one
  kernel launch and the next is the host's cost per op (the mean gap, waits of more than
  :data:`WAIT_GAPS` median gaps left out: a sync, a pageable copy). The median over such
  traces is the term; their fastest and slowest are its band.

- **a GEMM's memory side**: a tensor-core GEMM or fused attention whose bytes over the
  bandwidth clearly outlast its FLOPs over the peak (a decode step's GEMVs: every weight read
  once per step) runs its memory side at its own efficiency, read off Nsight Compute exports
  (``tests/data/ncu``), whose DRAM bytes are measured rather than modelled, against the
  GPU's own DRAM roof at the clocks ncu measured; the fixed cost stays the GEMM family's.
  The traces' GEMMs on that side are too small to tell (roofs under 3 us).

Run ``python -m batchscope.traces.calibrate tests/data/gpu-traces/*.json.gz --ncu
'tests/data/ncu/deepseek-ocr-rtx5090/kernel_*/ncu.*.csv' --ncu-gpu 'RTX 5090'`` to print
the terms; ``batchscope/target/calibrated.py`` holds what it printed, and a test recomputes
it.
"""

from __future__ import annotations

import argparse
import dataclasses
import glob
import itertools
import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from batchscope.hardware.gpu_specs import lookup
from batchscope.hardware.types import BF16, FP16, FP32
from batchscope.op_families import family, is_collective, is_gemm, is_gemm_kernel
from batchscope.records import OpStat
from batchscope.records.target import KernelTerm, ModelTerms
from batchscope.traces.analysis import trace_result
from batchscope.traces.diagnose import datasheet_ceilings
from batchscope.traces.kineto import load_trace
from batchscope.traces.ncu_diagnose import read_exports
from batchscope.traces.timeline import build_timeline

# A trace whose device sat idle this share of its step or more was host-bound: its CPU
# span over its launches is the host's own cost per op.
HOST_BOUND_IDLE_SHARE = 0.5
# A gap between two launches this many times the median gap is a wait, not issuing.
WAIT_GAPS = 10
# The fit's grid: fixed costs 0-10 us in quarter microseconds, efficiencies 5-100%.
_FIXED_GRID_S = [i * 0.25e-6 for i in range(41)]
_EFFICIENCY_GRID = [i / 100 for i in range(5, 101)]
# A kernel is on the memory side where its DRAM roof is at least this many times its FLOP
# roof: nearer the ridge its time says as much about its compute.
MEMORY_SIDE_MARGIN = 1.5


@dataclass(frozen=True)
class KernelPoint:
    """One op group of a trace: per call, its roof on the trace's GPU and its kernel time."""

    trace: str
    name: str
    gemm: bool
    fp32_units: bool  # a GEMM on the plain FP32 units, not the tensor cores
    roof_s: float
    time_s: float
    calls: int


def _host_transfer(op: OpStat) -> bool:
    return any(k.name.lower().startswith("memcpy") or k.name.lower().startswith("memset")
               for k in op.kernels)


def kernel_points(path: str | Path) -> tuple[list[KernelPoint], float | None]:
    """The counted op groups of one trace, and the host's cost per launching op where the
    trace was host-bound (None where its GPU was busy: the CPU then also waited)."""
    trace = load_trace(path)
    timeline = build_timeline(trace)
    result = trace_result(trace, timeline, 1, False)
    ceilings = datasheet_ceilings(trace)
    points: list[KernelPoint] = []
    if ceilings is not None:
        for op in result.ops:
            if (not op.flops and not op.bytes.total) or op.time_s <= 0 or op.calls <= 0 \
                    or is_collective(op.name) or _host_transfer(op):
                continue
            fam = family(op.name)
            dtype = op.roof_dtype or op.dtype or FP32
            peak = ceilings.peak_for(dtype, fam.value if fam else None)
            roof_s = max((op.flops or 0) / peak, op.bytes.total / ceilings.bandwidth_bytes_per_s)
            if roof_s <= 0:
                continue
            points.append(KernelPoint(Path(path).name, op.name, is_gemm(op.name),
                                      dtype == FP32, roof_s / op.calls,
                                      op.time_s / op.calls, op.calls))
    host = None
    span = sum(s.span_s for s in timeline.steps)
    if span > 0 and sum(s.idle_s for s in timeline.steps) / span >= HOST_BOUND_IDLE_SHARE:
        starts = sorted(float(e["ts"]) for e in trace.launches
                        if "launch" in str(e.get("name", "")).lower())
        gaps = sorted(b - a for a, b in itertools.pairwise(starts) if b > a)
        if gaps:
            issuing = [g for g in gaps if g <= WAIT_GAPS * gaps[len(gaps) // 2]]
            host = sum(issuing) / len(issuing) * 1e-6
    return points, host


def fit_kernel_term(points: Sequence[KernelPoint],
                    fixed_grid_s: Sequence[float] = _FIXED_GRID_S) -> KernelTerm:
    """``fixed_s`` (one of ``fixed_grid_s``: give one to keep it) and ``efficiency``
    minimising the mean absolute log error of ``fixed_s + roof_s / efficiency`` against the
    kernels' times, calls weighting."""
    best: tuple[float, float, float] | None = None
    weight = sum(p.calls for p in points)
    logs = [(math.log(p.time_s), p.roof_s, p.calls) for p in points]
    for fixed_s in fixed_grid_s:
        for eff in _EFFICIENCY_GRID:
            err = sum(n * abs(math.log(fixed_s + roof / eff) - lt) for lt, roof, n in logs)
            if best is None or err < best[0]:
                best = (err, fixed_s, eff)
    assert best is not None
    err, fixed_s, eff = best
    errors = sorted(abs(math.log(fixed_s + p.roof_s / eff) - math.log(p.time_s))
                    for p in points)
    return KernelTerm(fixed_s=fixed_s, efficiency=eff, ops=len(points), calls=weight,
                      median_abs_log_error=errors[len(errors) // 2])


def _kernel_dtype(name: str) -> str:
    low = name.lower()
    if "bfloat16" in low or "bf16" in low:
        return BF16
    if "half" in low or "fp16" in low or "f16" in low:
        return FP16
    return FP32


def memory_side_points(paths: Sequence[str | Path], gpu: str, fixed_s: float
                       ) -> list[KernelPoint]:
    """The GEMM-family launches of Nsight Compute exports that run on the memory side:
    each one's DRAM roof (its measured DRAM bytes over the GPU's DRAM peak at the clocks
    ncu measured) at least :data:`MEMORY_SIDE_MARGIN` times its FLOP roof (at the
    datasheet's dense peak of ``gpu`` in the kernel's dtype) and at least ``fixed_s`` (a
    roof under the fixed cost says nothing of the efficiency).

    Raises:
        ValueError: ``gpu`` is not in the datasheet table.
    """
    sheet = lookup(gpu)
    if sheet is None:
        raise ValueError(f"{gpu!r} is not a GPU in the datasheet table")
    points = []
    for k in read_exports([Path(p) for p in paths]).kernels:
        if not is_gemm_kernel(k.kernel_name) or not k.duration_s or not k.dram_bytes:
            continue
        bandwidth = k.peak_dram_bytes_per_s or sheet.bandwidth_bytes_per_s
        peak = sheet.peak_flops_per_s.get(_kernel_dtype(k.kernel_name),
                                          sheet.peak_flops_per_s[FP32])
        memory_s, compute_s = k.dram_bytes / bandwidth, (k.flops or 0) / peak
        if memory_s >= MEMORY_SIDE_MARGIN * compute_s and memory_s >= fixed_s \
                and k.duration_s > fixed_s:
            points.append(KernelPoint(Path(k.files[0]).parent.name if k.files else "ncu",
                                      k.normalised_name, True, False, memory_s,
                                      k.duration_s, 1))
    return points


def calibrate(paths: Sequence[str | Path], ncu_paths: Sequence[str | Path] = (),
              ncu_gpu: str | None = None) -> ModelTerms:
    """The model's terms from ``paths`` (torch.profiler traces of real GPUs), and the
    GEMMs' memory side from ``ncu_paths`` (Nsight Compute exports of ``ncu_gpu``) where
    given."""
    points: list[KernelPoint] = []
    hosts: list[float] = []
    for path in paths:
        found, host = kernel_points(path)
        points += found
        if host is not None:
            hosts.append(host)
    gemm = [p for p in points if p.gemm and not p.fp32_units]
    gemm_fp32 = [p for p in points if p.gemm and p.fp32_units]
    other = [p for p in points if not p.gemm]
    if not gemm or not gemm_fp32 or not other or not hosts:
        raise ValueError("the traces give too little to calibrate from: they need GEMMs on "
                         "the tensor cores and on the FP32 units, other ops and one "
                         "host-bound step")
    hosts.sort()
    middle = len(hosts) // 2
    central = hosts[middle] if len(hosts) % 2 else (hosts[middle - 1] + hosts[middle]) / 2
    terms = ModelTerms(gemm=fit_kernel_term(gemm), gemm_fp32=fit_kernel_term(gemm_fp32),
                       other=fit_kernel_term(other),
                       host_s_per_op=central, host_low_s_per_op=min(hosts),
                       host_high_s_per_op=max(hosts),
                       traces=sorted({Path(p).name for p in paths}))
    if not ncu_paths or ncu_gpu is None:
        return terms
    memory = memory_side_points(ncu_paths, ncu_gpu, terms.gemm.fixed_s)
    if not memory:
        raise ValueError("the Nsight Compute exports hold no GEMM on the memory side")
    folders = sorted({Path(p).parent.parent.name for p in ncu_paths})
    return dataclasses.replace(terms, gemm_memory=fit_kernel_term(memory, [terms.gemm.fixed_s]),
                               ncu_exports=folders)


def main(argv: Sequence[str]) -> None:
    parser = argparse.ArgumentParser(prog="python -m batchscope.traces.calibrate")
    parser.add_argument("traces", nargs="+", help="torch.profiler traces of real GPUs")
    parser.add_argument("--ncu", help="a glob of Nsight Compute CSV exports")
    parser.add_argument("--ncu-gpu", help="the GPU the exports ran on, e.g. 'RTX 5090'")
    args = parser.parse_args(list(argv))
    ncu = sorted(glob.glob(args.ncu)) if args.ncu else []
    print(repr(calibrate(args.traces, ncu, args.ncu_gpu)))


if __name__ == "__main__":  # pragma: no cover - a maintainer's tool
    main(sys.argv[1:])
