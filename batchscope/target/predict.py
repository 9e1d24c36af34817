"""``diagnose MODEL --target-gpu NAME``: predict, never time, the model's step on a named GPU
at every batch size asked.

The model is built on the meta device (no weights in memory: a 7B model costs nothing) and
one step is run at each batch size under the counting mode: every op's FLOPs and bytes are
exact, from shapes. A second meta run follows the step's live tensors for its peak memory.
The step time comes from :mod:`.kernel_time` with the terms read off real GPUs' traces
(:mod:`.calibrated`); the pick from the predicted curve, among the sizes that fit.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from batchscope.assemble import Measured, assemble
from batchscope.classifiers.critical_batch import fit_knee
from batchscope.classifiers.recommend import predicted_pick_of
from batchscope.contract import ModelSpec, load_model_file
from batchscope.errors import UsageError
from batchscope.hardware import gpu_specs
from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.types import BF16, FP16, FP32
from batchscope.profiler.counting import count_model_step
from batchscope.profiler.training import default_optimizer, training_step
from batchscope.records import CountedOp, ModelInfo, Report, RunInfo
from batchscope.records.measurement import ByteSplit
from batchscope.records.report import Mode, Source
from batchscope.records.target import (
    ModelTerms,
    PickRule,
    TargetBatch,
    TargetGridPoint,
    TargetSection,
)
from batchscope.reports import write_all
from batchscope.target.calibrated import TERMS
from batchscope.target.kernel_time import band, step_time
from batchscope.target.memory import step_peak_bytes
from batchscope.tensors import iter_tensors, map_tensors
from batchscope.version import __version__

DEFAULT_BATCH_SIZES = (1, 2, 4, 8, 16, 32, 64, 128, 256)
# What a GPU holds besides the step's tensors: the CUDA context and the cuBLAS/cuDNN
# workspaces (0.3-0.6 GiB on recent parts); an assumption, said in the docs.
RESERVED_BYTES = 512 * 2**20
DTYPE_NAMES = {"fp32": FP32, "float32": FP32, "fp16": FP16, "float16": FP16,
               "bf16": BF16, "bfloat16": BF16}
TORCH_DTYPES = {FP32: torch.float32, FP16: torch.float16, BF16: torch.bfloat16}


class TargetUnsupported(UsageError):
    """The model cannot be run on meta tensors, or the GPU lacks the dtype (exit 4)."""


def gpu_spec(name: str) -> DatasheetSpec:
    """The datasheet of ``name`` (a device name, or any words that name one product: "A100
    SXM4 80GB", "L40S"), or one sentence listing the GPUs it could be, or those known."""
    return gpu_specs.resolve(name)


def _build(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    with torch.device("meta"):
        model = spec.build_model()
    model = model.to(device="meta")
    if dtype != torch.float32:
        model = model.to(dtype=dtype)
    return model.train(spec.mode == "train")


def _inputs(spec: ModelSpec, batch_size: int, dtype: torch.dtype,
            context: int | None = None) -> Any:
    with torch.device("meta"):
        inputs = spec.call_make_inputs(batch_size, context)

    def cast(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point():
            return t.to(device="meta", dtype=dtype)
        return t.to(device="meta")

    return map_tensors(inputs, cast)


def _optimizer(spec: ModelSpec, model: torch.nn.Module) -> torch.optim.Optimizer | None:
    """The training step's optimizer, as the sweep's worker makes it (None in inference)."""
    if spec.mode != "train":
        return None
    return (spec.make_optimizer or default_optimizer)(model)


def _step(spec: ModelSpec, model: torch.nn.Module, inputs: Any,
          optimizer: torch.optim.Optimizer | None) -> Any:
    if optimizer is not None:
        return training_step(spec, model, inputs, optimizer)
    forward = spec.step_fn(model, inputs)

    def step() -> Any:
        with torch.inference_mode():
            return forward()

    return step


def _storage_bytes(tensors: list[torch.Tensor]) -> int:
    """Bytes of the distinct storages behind ``tensors``."""
    return sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                for t in tensors}.values())


@dataclass(frozen=True)
class MetaStep:
    """One step counted on meta tensors."""

    ops: list[CountedOp]
    peak_bytes: int  # what the step's own tensors hold at their peak
    weight_bytes: int  # the weights and buffers
    input_bytes: int  # the inputs (a decode step's KV cache among them)


def count_on_meta(spec: ModelSpec, batch_size: int, dtype: torch.dtype,
                  context: int | None = None, peak: bool = True) -> MetaStep:
    """One step at ``batch_size`` (and ``context``: a decode model's, None for its first)
    on meta tensors; ``peak=False`` leaves out the second run that follows the step's
    tensors for their peak (``peak_bytes`` 0)."""
    model = _build(spec, dtype)
    inputs = _inputs(spec, batch_size, dtype, context)
    optimizer = _optimizer(spec, model)
    step = _step(spec, model, inputs, optimizer)
    weights = [*model.parameters(), *model.buffers()]
    resident = [*weights, *iter_tensors(inputs)]
    # The same model and inputs for both runs: what the step writes in place (a KV cache,
    # an optimizer's update of the weights) is resident, not a new allocation. The first
    # run is the sweep's warm-up too: the step counted finds the gradients and the
    # optimizer's state there, and counts them as weights, as the sweep does.
    if peak:
        peak_bytes = step_peak_bytes(step, resident)
    else:
        peak_bytes = 0
        if optimizer is not None:
            step()
    ops = count_model_step(step, model, optimizer, inputs)
    weight_bytes = _storage_bytes(weights)
    return MetaStep(ops=ops, peak_bytes=peak_bytes, weight_bytes=weight_bytes,
                    input_bytes=_storage_bytes(resident) - weight_bytes)


def _line(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """(intercept, slope) of the least-squares line."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    slope = sum((x - mx) * (y - my) for x, y in zip(xs, ys, strict=True)) / sxx if sxx else 0.0
    return my - slope * mx, slope


def critical_batch(batches: Sequence[TargetBatch], peak_flops_per_s: float,
                   bandwidth_bytes_per_s: float) -> float | None:
    """B*: where FLOPs(b) / peak reaches bytes(b) / bandwidth, both lines in b through the
    counted sizes; None where the FLOPs never catch up (a step whose bytes grow as fast)."""
    if len(batches) < 2:
        return None
    sizes = [float(b.batch_size) for b in batches]
    f0, f1 = _line(sizes, [b.flops / peak_flops_per_s for b in batches])
    m0, m1 = _line(sizes, [b.bytes.total / bandwidth_bytes_per_s for b in batches])
    if f1 <= m1:
        return None
    crossing = (m0 - f0) / (f1 - m1)
    return max(crossing, 0.0)


def _count(spec: ModelSpec, b: int, dtype: torch.dtype, context: int | None,
           peak: bool = True) -> MetaStep:
    try:
        return count_on_meta(spec, b, dtype, context, peak)
    except Exception as exc:
        at = f"batch {b}" + (f", context {context}" if context is not None else "")
        raise TargetUnsupported(
            f"{spec.path} cannot run on meta tensors at {at}, which --target-gpu "
            f"needs (no weights or data, shapes only): {type(exc).__name__}: {exc}"
        ) from exc


def predict(spec: ModelSpec, gpu: str, dtype_name: str = "fp32",
            batch_sizes: Sequence[int] | None = None, terms: ModelTerms = TERMS,
            cuda_graphs: bool = False, fused: bool = False) -> TargetSection:
    """The model of ``spec`` predicted on ``gpu`` at ``batch_sizes`` (``cuda_graphs``: each
    step replayed as one CUDA graph, no host cost per op; ``fused``: each run of non-GEMM
    ops between GEMMs one kernel); a decode model's at each of its CONTEXTS too, for
    ``diagnose serve``."""
    sheet = gpu_spec(gpu)
    dtype = DTYPE_NAMES.get(dtype_name.lower())
    if dtype is None:
        raise UsageError(f"--dtype {dtype_name!r}: give fp32, fp16 or bf16.")
    if dtype not in sheet.peak_flops_per_s:
        raise TargetUnsupported(f"the {sheet.product} has no {dtype} peak in its datasheet "
                                f"(it runs {', '.join(sorted(sheet.peak_flops_per_s))}); "
                                "pick another --dtype.")
    host_s_per_op = 0.0 if cuda_graphs else None
    sizes = list(batch_sizes or spec.batch_sizes or DEFAULT_BATCH_SIZES)
    batches: list[TargetBatch] = []
    grid: list[TargetGridPoint] = []
    contexts = list(spec.contexts or [])
    weight_bytes = None
    for b in sizes:
        counted = _count(spec, b, TORCH_DTYPES[dtype], None)
        ops, weight_bytes = counted.ops, counted.weight_bytes
        t = step_time(ops, sheet, terms, host_s_per_op, fused=fused)
        if t.launched_ops == 0:
            raise TargetUnsupported(f"{spec.path}'s step at batch {b} moves no bytes and does "
                                    "no FLOPs: there is no kernel to predict.")
        low_s, high_s = band(ops, sheet, terms, cuda_graphs, fused)
        if len(contexts) > 1:
            grid.append(TargetGridPoint(b, contexts[0], t.step_s, low_s, high_s,
                                        counted.input_bytes))
        memory = counted.peak_bytes + counted.weight_bytes + counted.input_bytes \
            + RESERVED_BYTES
        total = ByteSplit()
        for op in ops:
            total = total + op.bytes
        units = b * spec.units_per_row_at(None)
        batches.append(TargetBatch(
            batch_size=b, predicted_step_s=t.step_s, low_s=low_s, high_s=high_s,
            predicted_throughput_per_s=units / t.step_s,
            predicted_peak_memory_bytes=memory, fits=memory <= sheet.memory_bytes,
            host_s=t.host_s, device_s=t.device_s, memory_s=t.memory_s,
            compute_s=t.compute_s, latency_s=t.latency_s, launched_ops=t.launched_ops,
            flops=sum(op.flops or 0 for op in ops), bytes=total))
    for c in contexts[1:]:  # the grid's steps only: their peak memory is not asked
        for b in sizes:
            counted = _count(spec, b, TORCH_DTYPES[dtype], c, peak=False)
            step_s = step_time(counted.ops, sheet, terms, host_s_per_op, fused=fused).step_s
            grid.append(TargetGridPoint(b, c, step_s,
                                        *band(counted.ops, sheet, terms, cuda_graphs, fused),
                                        counted.input_bytes))
    picked = predicted_pick_of({b.batch_size: b.predicted_throughput_per_s
                                for b in batches if b.fits})  # the one rule
    pick, best_size = picked if picked is not None else (None, None)
    gemm_peak = sheet.peak_flops_per_s[dtype]
    knee, within = fit_knee([float(b.batch_size) for b in batches],
                            [b.predicted_step_s for b in batches])
    return TargetSection(
        gpu=sheet.product, dtype=dtype, peak_flops_per_s=gemm_peak,
        bandwidth_bytes_per_s=sheet.bandwidth_bytes_per_s, memory_bytes=sheet.memory_bytes,
        terms=terms, batches=batches, pick=pick,
        pick_rule=PickRule.NEAR_BEST if pick is not None else PickRule.NONE_FITS,
        best_batch_size=best_size,
        critical_batch=critical_batch(batches, gemm_peak, sheet.bandwidth_bytes_per_s),
        knee_batch=knee, knee_within=within, reserved_bytes=RESERVED_BYTES, unit=spec.unit,
        cuda_graphs=cuda_graphs, fused=fused, context_grid=grid, weight_bytes=weight_bytes)


def diagnose_target(path: str | Path, gpu: str, dtype: str = "fp32",
                    batch_sizes: Sequence[int] | None = None,
                    out_dir: str | None = None, cuda_graphs: bool = False,
                    contexts: list[int] | None = None, fused: bool = False) -> Report:
    """Predict the model file at ``path`` on ``gpu`` and write the report into ``out_dir``
    (None: write nothing); ``contexts`` replaces a decode model's CONTEXTS.

    Raises:
        UsageError: an unknown GPU or dtype, or a model that cannot run on meta tensors
            (one sentence; exit 4).
    """
    started = time.time()
    spec = load_model_file(path, contexts=contexts)
    section = predict(spec, gpu, dtype, batch_sizes, cuda_graphs=cuda_graphs, fused=fused)
    report = assemble(Measured(
        model=ModelInfo(target=str(path), device=f"{section.gpu} (predicted)",
                        dtype=section.dtype, unit=spec.unit, mode=Mode(spec.mode),
                        contexts=list(spec.contexts or []),
                        # What diagnose serve gives the KV cache by default: the GPU's
                        # memory beside the weights and the reserve.
                        parameter_bytes=section.weight_bytes,
                        available_memory_bytes=section.memory_bytes - RESERVED_BYTES),
        run=RunInfo(source=Source.TARGET, tool_version=__version__,
                    torch_version=torch.__version__,
                    started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    wall_s=time.time() - started),
        ceilings=None, results=[], target=section))
    if out_dir is not None:
        write_all(report, out_dir)
    return report

