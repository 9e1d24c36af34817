"""What the run as a whole should tell its reader: the run-level flags (pure, no I/O).

Each function returns :class:`~batchscope.records.Flag` records: a kind and the numbers its
sentence quotes; the sentences are the reports layer's (reports/flag_text.py). Also here:
which batch sizes the step-time model predicts (:func:`unmeasured_sizes`; their kernel
probes are planned in :mod:`batchscope.probe_plan`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from batchscope.classifiers.data_parallel import accumulation_steps
from batchscope.classifiers.roofline import roof_flags
from batchscope.hardware.busy import BUSY_SHARE
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits, default_batch_sizes, predicted_not_to_fit
from batchscope.records import (
    FUSED_KERNEL_PREFIX,
    FUSED_KERNELS,
    Accumulation,
    BatchResult,
    ControlTiming,
    Flag,
    Interval,
    ModelInfo,
    Status,
)
from batchscope.records.flag_payloads import (
    AmpCasts,
    AmpFaster,
    AmpSlower,
    AmpSlowerMeasured,
    BatchFailed,
    CeilingsOnBusyMachine,
    Compiled,
    NoisyTiming,
    RoofRaised,
    StandInTrainingStep,
    WorkVaries,
)
from batchscope.records.report import Mode

# A batch size whose interquartile range of step latency exceeds this share of its median
# was measured on a busy machine (or has bimodal steps): flagged, its numbers are doubtful.
NOISY_SPREAD = 0.25


def noise_flags(results: list[BatchResult]) -> list[Flag]:
    """One flag per batch size whose latency spread says the measurement is unreliable."""
    flags = []
    for r in results:
        lat = r.latency_s
        if lat is not None and lat.median > 0 and (lat.p75 - lat.p25) / lat.median > NOISY_SPREAD:
            flags.append(Flag.of(NoisyTiming(spread=(lat.p75 - lat.p25) / lat.median),
                                 r.batch_size))
    return flags


# A roof raised by what an op reached is flagged from this ratio on (smaller is noise).
RAISED_FLAG_RATIO = 1.1


def ceiling_flags(ceilings: Ceilings | None, dtype: str = "float32",
                  families: Collection[str] | None = None) -> list[Flag]:
    """Flags for ceilings that are likely wrong: measured on a busy machine, a roof of the
    model's dtype (of the kernel ``families`` its ops ran, all where None) whose repeats
    spread widely, or a rate set against the machine's theoretical peak that is above it
    or far below it (roofline.roof_flags)."""
    if ceilings is None:
        return []
    flags = []
    share = ceilings.details.other_cpu_share
    if share is not None and share >= BUSY_SHARE:
        flags.append(Flag.of(CeilingsOnBusyMachine(share=share)))
    for key, raised in ceilings.details.achieved_by_ops.items():
        before, after = raised.measured_peak_flops_per_s, raised.flops_per_s
        if after < RAISED_FLAG_RATIO * before:
            continue
        flags.append(Flag.of(RoofRaised(
            roof=key, before=before, after=after, op=raised.name,
            source=ceilings.source, measured_at=ceilings.measured_at),
            raised.batch_size, raised.op_id))
    return flags + roof_flags(ceilings, dtype, families)


def run_flags(model: ModelInfo) -> list[Flag]:
    """What the run measured differently from the user's own loop: batchscope's stand-in
    training step."""
    step = model.training_step
    if step is None or not step.defaults_used:
        return []
    return [Flag.of(StandInTrainingStep(
        optimizer_from_file=step.optimizer_from_file,
        loss_from_file=step.loss_from_file, default_lr=step.default_lr))]


# A lower precision whose matmul peak is this many times fp32's is worth a sentence: --amp
# would speed the compute-bound ops up.
AMP_HINT_RATIO = 2.0
# Run with --amp, a matmul roof this many times below fp32's is said: beyond the ±10% the
# roofs themselves move between calibrations (roofline.ROOF_TOLERANCE's reason).
AMP_SLOWER_RATIO = 1.15
# Under --amp, casts (``_to_copy``: autocast's, the fp32 weights to the lower precision on
# every step and back for the ops it keeps in fp32) taking this share of the profiled step
# are said: work an fp32 step does not do, measured in the run itself at the model's own
# shapes (issue 32: a small MLP ran 42% slower under --amp bf16 on a CPU with native bf16,
# whose bf16 matmul roof is above fp32's, and nothing said so).
AMP_CAST_SHARE = 0.1
# ... when compute-bound ops take at least this share of the step.
AMP_HINT_COMPUTE_SHARE = 0.2
_AMP_FLAGS = {"bfloat16": "bf16", "float16": "fp16"}


def dtype_hints(model: ModelInfo, ceilings: Ceilings | None,
                batches: list[BatchResult]) -> list[Flag]:
    """A hint when another dtype's matmuls are much faster on this machine than the ones
    the step ran (--amp), or when --amp chose a slower one (a CPU without native bf16):
    the matmul roofs compared, what autocast moves to the lower precision; and under
    --amp, what its casts cost the step (:func:`amp_cast_flags`)."""
    return _roof_hints(model, ceilings, batches) + amp_cast_flags(model, batches)


def amp_cast_flags(model: ModelInfo, batches: list[BatchResult]) -> list[Flag]:
    """Under --amp, the casts' time at the batch size where it is the largest share of the
    profiled step, when that share reaches :data:`AMP_CAST_SHARE`."""
    if not model.amp:
        return []
    seen = []
    for r in batches:
        casts = [op for op in r.ops if op.name == "_to_copy"]
        if r.status == Status.OK and r.profiled_step_s and casts:
            cast_s = sum(op.time_s for op in casts)
            seen.append((cast_s / r.profiled_step_s, r.batch_size, cast_s,
                         sum(op.calls for op in casts)))
    share, batch_size, cast_s, calls = max(seen, default=(0.0, 0, 0.0, 0))
    if share < AMP_CAST_SHARE:
        return []
    return [Flag.of(AmpCasts(
        amp=_AMP_FLAGS.get(model.amp, model.amp), dtype=model.amp, cast_s=cast_s,
        share=share, calls=calls), batch_size)]


def amp_measured_flags(model: ModelInfo, amp_off: ControlTiming | None,
                       batches: list[BatchResult], allowance: float) -> list[Flag]:
    """Under --amp, where the fastest batch size timed again with autocast off
    (``run.amp_off``, a fresh worker) ran faster beyond noise: the top of its median's
    interval, widened by the run's drift ``allowance`` (process to process, as the
    control measured it), under the bottom of the autocast timing's interval (its own,
    widened alike). Within noise, nothing is said: the record is in report.json."""
    if not model.amp or amp_off is None:
        return []
    amp = next((r.latency_interval_s for r in batches if r.batch_size == amp_off.batch_size
                and r.latency_interval_s is not None), None)
    fp32 = Interval(amp_off.control_low_s, amp_off.control_high_s).widened(allowance)
    if amp is None or fp32.high >= amp.low or amp_off.control_latency_s <= 0:
        return []
    return [Flag.of(AmpSlowerMeasured(
        amp=_AMP_FLAGS.get(model.amp, model.amp), amp_s=amp_off.first_latency_s,
        fp32_s=amp_off.control_latency_s, fp32_high_s=fp32.high, amp_low_s=amp.low,
        ratio=amp_off.first_latency_s / amp_off.control_latency_s), amp_off.batch_size)]


def _roof_hints(model: ModelInfo, ceilings: Ceilings | None,
                batches: list[BatchResult]) -> list[Flag]:
    """The matmul roofs of the dtypes compared (:func:`dtype_hints`)."""
    fp32 = ceilings.peak_for("float32", "matmul") if ceilings else None
    shared = [(r, r.time_share) for r in batches if r.status == Status.OK and r.time_share]
    if ceilings is None or not fp32 or not shared or (model.dtype or "float32") != "float32":
        return []
    most, share = max(shared, key=lambda rs: rs[1].compute)  # where the dtype matters most
    compute = share.compute
    if compute < AMP_HINT_COMPUTE_SHARE:
        return []
    amp = model.amp
    if amp:
        peak = ceilings.peak_for(amp, "matmul") if amp in ceilings.peak_flops_per_s else None
        if not peak or peak * AMP_SLOWER_RATIO > fp32:
            return []
        host = ceilings.details.host
        native = (host.native_bf16 if host is not None and ceilings.device == "cpu"
                  and amp == "bfloat16" else None)
        return [Flag.of(AmpSlower(
            amp=_AMP_FLAGS.get(amp, amp), dtype=amp, peak=peak, fp32_peak=fp32,
            compute_share=compute, native=native), most.batch_size)]
    roofs = {name: ceilings.peak_for(name, "matmul") for name in ceilings.peak_flops_per_s
             if name in _AMP_FLAGS}
    faster = [(roof / fp32, name) for name, roof in roofs.items()
              if roof >= AMP_HINT_RATIO * fp32]
    if not faster:
        return []
    ratio, name = max(faster)
    return [Flag.of(AmpFaster(dtype=name, amp=_AMP_FLAGS[name], ratio=ratio,
                              compute_share=compute), most.batch_size)]


def accumulation(model: ModelInfo, batches: list[BatchResult], micro_batch: int,
                 global_batch: int | None) -> Accumulation | None:
    """--global-batch in one training process: the gradient-accumulation steps of the
    recommended micro-batch that reach it, and the time a global batch takes at the
    measured step (an upper bound: each measured step also ran the optimizer, which an
    accumulated step skips). None without --global-batch, for inference, or data parallel
    (``distributed`` has its own)."""
    if global_batch is None or model.mode != Mode.TRAIN or model.distributed is not None:
        return None
    picked = next((r.latency_s for r in batches
                   if r.batch_size == micro_batch and r.latency_s), None)
    if picked is None:
        return None
    steps = accumulation_steps(global_batch, micro_batch)
    return Accumulation(global_batch_target=global_batch, micro_batch=micro_batch,
                        accumulation_steps=steps, global_batch_reached=steps * micro_batch,
                        step_s=picked.median, time_per_global_batch_s=steps * picked.median)


# Fused kernels a compiled model's flag names, at most (the largest).
COMPILED_KERNELS_NAMED = 3


def compiled_flags(model: ModelInfo, batches: list[BatchResult]) -> list[Flag]:
    """What a torch.compile'd model's report can and cannot show, with its own numbers:
    each shape's compile (its first warm-up step less one step) and, at the first profiled
    batch size, the fused kernels' time and the largest of them."""
    if not model.compiled:
        return []
    compiles = [(r.batch_size, max(r.latency_s.first_step_s - r.latency_s.median, 0.0))
                for r in batches if r.status == Status.OK and r.latency_s is not None
                and r.latency_s.first_step_s is not None]
    payload = Compiled(compiles_at=[b for b, _ in compiles],
                       compile_s=[s for _, s in compiles])
    first = next((r for r in batches if r.status == Status.OK and r.profiled_step_s), None)
    fused = {k: v for k, v in (first.unmatched_ops_s or {}).items()
             if k == FUSED_KERNELS or k.startswith(FUSED_KERNEL_PREFIX)} if first else {}
    if first is not None and first.profiled_step_s and fused:
        kernels = sorted(((v, k[len(FUSED_KERNEL_PREFIX):]) for k, v in fused.items()
                          if k.startswith(FUSED_KERNEL_PREFIX)), reverse=True)
        payload = dataclasses.replace(
            payload, at_batch=first.batch_size, fused_s=sum(fused.values()),
            fused_share=sum(fused.values()) / first.profiled_step_s,
            kernels=[k for _, k in kernels[:COMPILED_KERNELS_NAMED]],
            kernel_s=[v for v, _ in kernels[:COMPILED_KERNELS_NAMED]])
    return [Flag.of(payload)]


# The weights read per step are the same at every batch size unless the inputs decide what
# runs: beyond this spread (largest over smallest) the work varies with the inputs.
WORK_VARIES_RATIO = 1.25


def weights_per_step(results: list[BatchResult]) -> list[tuple[int, int]]:
    """(batch size, weight bytes read per step) of the batch sizes that counted any."""
    return [(r.batch_size, r.bytes.weights) for r in results
            if r.status == Status.OK and r.bytes is not None and r.bytes.weights > 0]


def _weight_readers(result: BatchResult) -> frozenset[tuple[str, int]]:
    """The op groups (by identity) that read weights in a step, with their calls."""
    return frozenset((op.op_id, op.calls) for op in result.ops if op.bytes.weights > 0)


def work_varies_with_inputs(results: list[BatchResult]) -> bool:
    """True when the weights a step reads differ between batch sizes by more than
    :data:`WORK_VARIES_RATIO` and other ops read them: which layers run depends on the
    data, not on the batch. The same ops reading more of their weights at a larger batch
    (an embedding gathering more rows of its table) is the batch's work, not the data's;
    where no op breakdown ran, the weights alone decide."""
    read = [w for _, w in weights_per_step(results)]
    if len(read) < 2 or max(read) <= WORK_VARIES_RATIO * min(read):
        return False
    readers = {_weight_readers(r) for r in results
               if r.status == Status.OK and r.bytes is not None and r.bytes.weights > 0
               and r.ops}
    return len(readers) != 1


def work_flags(results: list[BatchResult]) -> list[Flag]:
    if not work_varies_with_inputs(results):
        return []
    read = weights_per_step(results)
    return [Flag.of(WorkVaries(batch_sizes=[b for b, _ in read],
                               weight_bytes=[w for _, w in read]))]


def failed_flags(results: list[BatchResult]) -> list[Flag]:
    """One flag per batch size that failed for a reason other than memory (or a skip)."""
    return [Flag.of(BatchFailed(
                status=r.status.value, error=r.error.splitlines()[0] if r.error else ""),
                r.batch_size)
            for r in results if r.status not in (Status.OK, Status.OOM, Status.SKIPPED)]


# Statuses at and beyond which a batch size would not fit, or is not known to run at all
# (the model raised there, its step timed out, the device or a rank failed): nothing is
# predicted there. Only an interrupted size says nothing about the model.
_DOES_NOT_FIT = (Status.OOM, Status.KILLED, Status.SKIPPED, Status.MODEL_ERROR,
                 Status.TIMEOUT, Status.DEVICE_ERROR, Status.RANK_FAILED)


def unmeasured_sizes(results: list[BatchResult], limits: Limits) -> list[int]:
    """The batch sizes of the default sweep up to ``limits.max_batch`` (or
    ``limits.predict_to``, the larger) that were not measured, below the smallest one that
    did not fit in memory or failed otherwise (an error, a timeout) or that the measured
    peaks, extrapolated, say would not fit (plan.predicted_not_to_fit)."""
    measured = {r.batch_size for r in results if r.status == Status.OK}
    too_big = min((r.batch_size for r in results if r.status in _DOES_NOT_FIT), default=None)
    sizes = []
    grid = sorted({*default_batch_sizes(limits.max_batch),
                   *(default_batch_sizes(limits.predict_to) if limits.predict_to else [])})
    for b in grid:
        if too_big is not None and b >= too_big:
            break
        if b in measured:
            continue
        if b > max(measured, default=0) and predicted_not_to_fit(
                results, b, limits.memory_budget_bytes) is not None:
            break
        sizes.append(b)
    return sizes

