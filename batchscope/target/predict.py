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
from pathlib import Path
from typing import Any

import torch

from batchscope.classifiers.critical_batch import fit_knee
from batchscope.contract import ModelSpec, load_model_file
from batchscope.errors import UsageError
from batchscope.hardware.figures import DatasheetSpec
from batchscope.hardware.gpu_specs import SPECS, lookup
from batchscope.hardware.types import BF16, FP16, FP32
from batchscope.profiler.counting import count_step
from batchscope.profiler.training import training_step
from batchscope.records import CountedOp, ModelInfo, Report, RunInfo
from batchscope.records.measurement import ByteSplit
from batchscope.records.report import Mode, Source
from batchscope.records.target import ModelTerms, PickRule, TargetBatch, TargetSection
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
NEAR_BEST_SHARE = 0.9
DTYPE_NAMES = {"fp32": FP32, "float32": FP32, "fp16": FP16, "float16": FP16,
               "bf16": BF16, "bfloat16": BF16}
TORCH_DTYPES = {FP32: torch.float32, FP16: torch.float16, BF16: torch.bfloat16}


class TargetUnsupported(UsageError):
    """The model cannot be run on meta tensors, or the GPU lacks the dtype (exit 4)."""


def gpu_spec(name: str) -> DatasheetSpec:
    """The datasheet of ``name``, or one sentence naming the GPUs known."""
    spec = lookup(name)
    if spec is None:
        known = ", ".join(s.product for s in SPECS)
        raise UsageError(f"--target-gpu {name!r} is not a GPU in batchscope's datasheet table "
                         f"({known}); `diagnose hardware --list-gpus` lists them.")
    return spec


def _build(spec: ModelSpec, dtype: torch.dtype) -> torch.nn.Module:
    with torch.device("meta"):
        model = spec.build_model()
    model = model.to(device="meta")
    if dtype != torch.float32:
        model = model.to(dtype=dtype)
    return model.train(spec.mode == "train")


def _inputs(spec: ModelSpec, batch_size: int, dtype: torch.dtype) -> Any:
    with torch.device("meta"):
        inputs = spec.call_make_inputs(batch_size)

    def cast(t: torch.Tensor) -> torch.Tensor:
        if t.is_floating_point():
            return t.to(device="meta", dtype=dtype)
        return t.to(device="meta")

    return map_tensors(inputs, cast)


def _step(spec: ModelSpec, model: torch.nn.Module, inputs: Any) -> Any:
    if spec.mode == "train":
        optimizer = (spec.make_optimizer(model) if spec.make_optimizer is not None
                     else torch.optim.AdamW(model.parameters(), foreach=False))
        return training_step(spec, model, inputs, optimizer)
    forward = spec.step_fn(model, inputs)

    def step() -> Any:
        with torch.inference_mode():
            return forward()

    return step


def count_on_meta(spec: ModelSpec, batch_size: int, dtype: torch.dtype
                  ) -> tuple[list[CountedOp], int, int]:
    """One step at ``batch_size`` on meta tensors: its counted ops, the bytes its tensors
    hold at their peak, and the weights' and inputs' bytes."""
    model = _build(spec, dtype)
    inputs = _inputs(spec, batch_size, dtype)
    resident = [*model.parameters(), *model.buffers(), *iter_tensors(inputs)]
    # The same model and inputs for both runs: what the step writes in place (a KV cache,
    # an optimizer's update of the weights) is resident, not a new allocation.
    peak = step_peak_bytes(_step(spec, model, inputs), resident)
    ops = count_step(_step(spec, model, inputs), weights=[*model.parameters(),
                                                          *model.buffers()],
                     state=iter_tensors(inputs), root=model)
    resident_bytes = sum({t.untyped_storage()._cdata: t.untyped_storage().nbytes()
                          for t in resident}.values())
    return ops, peak, resident_bytes


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


def predict(spec: ModelSpec, gpu: str, dtype_name: str = "fp32",
            batch_sizes: Sequence[int] | None = None, terms: ModelTerms = TERMS
            ) -> TargetSection:
    """The model of ``spec`` predicted on ``gpu`` at ``batch_sizes``."""
    sheet = gpu_spec(gpu)
    dtype = DTYPE_NAMES.get(dtype_name.lower())
    if dtype is None:
        raise UsageError(f"--dtype {dtype_name!r}: give fp32, fp16 or bf16.")
    if dtype not in sheet.peak_flops_per_s:
        raise TargetUnsupported(f"the {sheet.product} has no {dtype} peak in its datasheet "
                                f"(it runs {', '.join(sorted(sheet.peak_flops_per_s))}); "
                                "pick another --dtype.")
    batches: list[TargetBatch] = []
    for b in batch_sizes or spec.batch_sizes or DEFAULT_BATCH_SIZES:
        try:
            ops, peak, resident = count_on_meta(spec, b, TORCH_DTYPES[dtype])
        except Exception as exc:
            raise TargetUnsupported(
                f"{spec.path} cannot run on meta tensors at batch {b}, which --target-gpu "
                f"needs (no weights or data, shapes only): {type(exc).__name__}: {exc}"
            ) from exc
        t = step_time(ops, sheet, terms)
        if t.launched_ops == 0:
            raise TargetUnsupported(f"{spec.path}'s step at batch {b} moves no bytes and does "
                                    "no FLOPs: there is no kernel to predict.")
        low_s, high_s = band(ops, sheet, terms)
        memory = peak + resident + RESERVED_BYTES
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
    fitting = [b for b in batches if b.fits]
    best = max(fitting, key=lambda b: b.predicted_throughput_per_s) if fitting else None
    pick = None
    if best is not None:
        bar = NEAR_BEST_SHARE * best.predicted_throughput_per_s
        pick = min(b.batch_size for b in fitting if b.predicted_throughput_per_s >= bar)
    gemm_peak = sheet.peak_flops_per_s[dtype]
    knee, within = fit_knee([float(b.batch_size) for b in batches],
                            [b.predicted_step_s for b in batches])
    return TargetSection(
        gpu=sheet.product, dtype=dtype, peak_flops_per_s=gemm_peak,
        bandwidth_bytes_per_s=sheet.bandwidth_bytes_per_s, memory_bytes=sheet.memory_bytes,
        terms=terms, batches=batches, pick=pick,
        pick_rule=PickRule.NEAR_BEST if pick is not None else PickRule.NONE_FITS,
        best_batch_size=best.batch_size if best is not None else None,
        critical_batch=critical_batch(batches, gemm_peak, sheet.bandwidth_bytes_per_s),
        knee_batch=knee, knee_within=within, reserved_bytes=RESERVED_BYTES, unit=spec.unit)


def diagnose_target(path: str | Path, gpu: str, dtype: str = "fp32",
                    batch_sizes: Sequence[int] | None = None,
                    out_dir: str | None = None) -> Report:
    """Predict the model file at ``path`` on ``gpu`` and write the report into ``out_dir``
    (None: write nothing).

    Raises:
        UsageError: an unknown GPU or dtype, or a model that cannot run on meta tensors
            (one sentence; exit 4).
    """
    started = time.time()
    spec = load_model_file(path)
    section = predict(spec, gpu, dtype, batch_sizes)
    report = Report(
        model=ModelInfo(target=str(path), device=f"{section.gpu} (predicted)",
                        dtype=section.dtype, unit=spec.unit, mode=Mode(spec.mode)),
        hardware=None, batches=[], recommendation=None,
        run=RunInfo(source=Source.TARGET, tool_version=__version__,
                    torch_version=torch.__version__,
                    started_at=time.strftime("%Y-%m-%dT%H:%M:%S%z", time.localtime(started)),
                    wall_s=time.time() - started),
        target=section)
    if out_dir is not None:
        write_all(report, out_dir)
    return report

