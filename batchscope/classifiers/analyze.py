"""Turn a sweep's raw results into a :class:`~batchscope.records.Report` (pure, no I/O)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from batchscope.classifiers.allocator import (
    allocator_summary,
    page_fault_flags,
    page_fault_share,
    pick_without_page_faults,
)
from batchscope.classifiers.critical_batch import (
    ComputeBoundPrediction,
    KneePrediction,
    measured_knee,
    predict_compute_bound_batch,
    predict_critical_batch,
)
from batchscope.classifiers.data_parallel import (
    accumulation_steps,
    data_parallel_summary,
)
from batchscope.classifiers.recommend import (
    NEAR_BEST_SHARE,
    Choice,
    predicted_pick,
    recommend,
)
from batchscope.classifiers.roofline import (
    ACHIEVED,
    achieved_ceilings,
    batch_response,
    classify_batch,
)
from batchscope.classifiers.step_model import (
    PROBE_ROUND_S,
    predict,
    predicted_stop,
    probe_specs,
)
from batchscope.hardware.busy import BUSY_SHARE, OTHER_CPU_SHARE
from batchscope.hardware.types import Ceilings
from batchscope.plan import Limits, default_batch_sizes, predicted_not_to_fit
from batchscope.records import (
    FUSED_KERNEL_PREFIX,
    FUSED_KERNELS,
    BatchResult,
    Recommendation,
    Report,
    Status,
)

# A batch size whose interquartile range of step latency exceeds this share of its median
# was measured on a busy machine (or has bimodal steps): flagged, its numbers are doubtful.
NOISY_SPREAD = 0.25


def noise_flags(results: list[BatchResult]) -> list[str]:
    """One flag per batch size whose latency spread says the measurement is unreliable."""
    flags = []
    for r in results:
        lat = r.latency_s
        if lat is not None and lat.median > 0 and (lat.p75 - lat.p25) / lat.median > NOISY_SPREAD:
            flags.append(
                f"batch {r.batch_size}: noisy timing, p25-p75 spans "
                f"{(lat.p75 - lat.p25) / lat.median:.0%} of the median (was the machine busy?)"
            )
    return flags


# A peak matmul whose repeats at its peak size spread (interquartile range / median) more
# than this is an uncertain roof: issue 14 saw fp32 best 215 and median 114 GFLOP/s (0.63).
CEILING_SPREAD_FLAG = 0.25


def _peak_spread(ceilings: Ceilings, dtype: str) -> dict[str, Any] | None:
    """The raw figures at the peak size of ``dtype``'s matmul, when they spread widely."""
    matmul = (ceilings.details.get("matmul") or {}).get(dtype) or {}
    sizes = matmul.get("sizes") if isinstance(matmul, dict) else None
    peak = next((s for s in sizes or [] if isinstance(s, dict)
                 and s.get("n") == matmul.get("peak_size")), None)
    if peak is None:
        return None
    figures = [peak.get(k) for k in ("spread", "best_flops_per_s", "median_flops_per_s")]
    if all(isinstance(f, (int, float)) for f in figures) and figures[0] > CEILING_SPREAD_FLAG:
        return peak
    return None


# A roof raised by what an op reached is flagged from this ratio on (smaller is noise).
RAISED_FLAG_RATIO = 1.1


def ceiling_flags(ceilings: Ceilings | None, dtype: str = "float32") -> list[str]:
    """Flags for ceilings that are likely wrong: measured on a busy machine, or a peak
    matmul of the model's dtype whose repeats spread widely."""
    if ceilings is None:
        return []
    flags = []
    share = ceilings.details.get(OTHER_CPU_SHARE)
    if isinstance(share, (int, float)) and share >= BUSY_SHARE:
        flags.append(
            f"the ceilings were measured while other processes took {share:.0%} of the CPU: "
            f"they are likely low, so ops may sit too close to (or beyond) their roofs; they "
            f"were not cached and will be measured again on the next run")
    for key, raised in (ceilings.details.get(ACHIEVED) or {}).items():
        before, after = raised["measured_peak_flops_per_s"], raised["flops_per_s"]
        if after < RAISED_FLAG_RATIO * before:
            continue
        when = f", measured {ceilings.measured_at}" if ceilings.measured_at else ""
        flags.append(
            f"the {key} roof was raised from {before / 1e9:,.0f} to {after / 1e9:,.0f} "
            f"GFLOP/s: {raised['name']} ({raised['op_id']}) ran that fast at batch "
            f"{raised['batch_size']} in this run, so the {ceilings.source} ceiling{when} was "
            f"low (a slower minute of the machine, or a slower path); ops are placed against "
            f"what ran. `diagnose hardware --recalibrate` measures it again")
    peak = _peak_spread(ceilings, dtype)
    if peak is not None:
        flags.append(
            f"the {dtype} matmul peak varied by {peak['spread']:.0%} between repeats (best "
            f"{peak['best_flops_per_s'] / 1e9:,.0f}, median "
            f"{peak['median_flops_per_s'] / 1e9:,.0f} GFLOP/s): compute-bound ops sit "
            f"that uncertainly against their roof; `diagnose hardware --recalibrate` on a "
            f"quiet machine measures it again")
    return flags


def run_flags(info: dict[str, Any]) -> list[str]:
    """What the run measured differently from the user's own loop: batchscope's stand-in
    training step, and a compiled model whose ops the counting pass sees only eager."""
    flags = []
    step = info.get("training_step")
    if isinstance(step, dict) and step.get("defaults_used"):
        flags.append(
            f"the training step is batchscope's, not your loop's: optimizer "
            f"{step.get('optimizer')}; loss {step.get('loss')}; zero_grad "
            f"{str(step.get('zero_grad', '')).split(' (')[0]}. Define make_optimizer(model) and "
            f"loss(outputs, inputs) in the model file to measure your own (foreach and "
            f"set_to_none change a step by a few percent)")
    return flags


# A lower precision whose matmul peak differs from fp32's by this factor or more is worth a
# sentence: --amp would speed the compute-bound ops up (or, run with --amp, slowed them).
AMP_HINT_RATIO = 2.0
# ... when compute-bound ops take at least this share of the step.
AMP_HINT_COMPUTE_SHARE = 0.2
_AMP_FLAGS = {"bfloat16": "bf16", "float16": "fp16"}


def dtype_hints(info: dict[str, Any], ceilings: Ceilings | None,
                batches: list[BatchResult]) -> list[str]:
    """A hint when another dtype's matmuls are much faster on this machine than the ones
    the step ran (--amp), or when --amp chose a slower one (a CPU without native bf16)."""
    fp32 = ceilings.peak_flops_per_s.get("float32") if ceilings else None
    shared = [r for r in batches if r.status == Status.OK and r.time_share]
    if not fp32 or not shared or info.get("dtype", "float32") != "float32":
        return []
    most = max(shared, key=lambda r: r.time_share.compute)  # where the dtype matters most
    compute = most.time_share.compute
    if compute < AMP_HINT_COMPUTE_SHARE:
        return []
    amp = info.get("amp")
    if amp:
        peak = ceilings.peak_flops_per_s.get(amp)
        if not peak or peak * AMP_HINT_RATIO > fp32:
            return []
        native = ((ceilings.details.get("host") or {}).get("native_bf16")
                  if ceilings.device == "cpu" and amp == "bfloat16" else None)
        why = f"; this CPU has no native {amp} arithmetic" if native is False else ""
        return [f"--amp {_AMP_FLAGS.get(amp, amp)} ran the matmuls in {amp}, whose peak "
                f"here is {peak / 1e9:,.0f} GFLOP/s against fp32's {fp32 / 1e9:,.0f} "
                f"({fp32 / peak:,.1f}x slower{why}): its compute-bound ops, {compute:.0%} of "
                f"the step at batch {most.batch_size}, would run faster in fp32 here"]
    faster = [(peak / fp32, name) for name, peak in ceilings.peak_flops_per_s.items()
              if name in _AMP_FLAGS and peak >= AMP_HINT_RATIO * fp32]
    if not faster:
        return []
    ratio, name = max(faster)
    return [f"{name} matmuls peak at {ratio:,.1f}x fp32's on this machine and compute-bound "
            f"ops take {compute:.0%} of the step at batch {most.batch_size}: `--amp "
            f"{_AMP_FLAGS[name]}` (torch.autocast) could run them up to that much faster; "
            f"its report counts each op in the dtype it ran in"]


def accumulation(info: dict[str, Any], batches: list[BatchResult], micro_batch: int,
                 global_batch: int | None) -> dict[str, Any] | None:
    """--global-batch in one training process: the gradient-accumulation steps of the
    recommended micro-batch that reach it, and the time a global batch takes at the
    measured step (an upper bound: each measured step also ran the optimizer, which an
    accumulated step skips). None without --global-batch, for inference, or data parallel
    (``distributed`` has its own)."""
    if global_batch is None or info.get("mode") != "train" or info.get("distributed"):
        return None
    picked = next((r for r in batches if r.batch_size == micro_batch and r.latency_s), None)
    if picked is None:
        return None
    steps = accumulation_steps(global_batch, micro_batch)
    return {
        "global_batch_target": global_batch,
        "micro_batch": micro_batch,
        "accumulation_steps": steps,
        "global_batch_reached": steps * micro_batch,
        "step_s": picked.latency_s.median,
        "time_per_global_batch_s": steps * picked.latency_s.median,
    }


def compiled_flags(info: dict[str, Any], batches: list[BatchResult]) -> list[str]:
    """What a torch.compile'd model's report can and cannot show, with its own numbers."""
    if not info.get("compiled"):
        return []
    compiles = [(r.batch_size, r.latency_s.first_step_s - r.latency_s.median)
                for r in batches if r.status == Status.OK and r.latency_s is not None
                and r.latency_s.first_step_s is not None]
    took = ", ".join(f"{max(s, 0.0):,.1f} s at batch {b}" for b, s in compiles)
    text = ("the model is torch.compile'd: step latencies are the compiled model's; the "
            "compile for each new shape is in the first warm-up step, outside them"
            + (f" (that step less one step: {took})" if took else "")
            + ". Its extern kernels (matmuls, "
            "convolutions) are profiled as aten ops and joined to the eager ops they stand "
            "for; the kernels inductor fused are listed apart by name (unmatched_ops_s, "
            f"\"{FUSED_KERNEL_PREFIX}…\": on the CPU, inductor's kernel profiling names the "
            "aten ops each fused, and those eager ops say so and show no time of their own; "
            f"the graph's time outside its named kernels is \"{FUSED_KERNELS}\")")
    first = next((r for r in batches if r.status == Status.OK and r.profiled_step_s), None)
    fused = {k: v for k, v in (first.unmatched_ops_s or {}).items()
             if k == FUSED_KERNELS or k.startswith(FUSED_KERNEL_PREFIX)} if first else {}
    if first is not None and fused:
        fused_s = sum(fused.values())
        kernels = sorted(((v, k[len(FUSED_KERNEL_PREFIX):]) for k, v in fused.items()
                          if k.startswith(FUSED_KERNEL_PREFIX)), reverse=True)
        named = ", ".join(f"{k} {v * 1e6:,.0f} µs" for v, k in kernels[:3])
        text += (f" (at batch {first.batch_size}: {fused_s * 1e6:,.0f} µs, "
                 f"{fused_s / first.profiled_step_s:.0%} of the profiled step"
                 + (f"; {named}" if named else "") + ")")
    return [text + ". FLOPs and bytes are counted on the eager module: a fused op's "
            "intermediates are counted as if they went through memory, so the compiled "
            "model's bytes are an upper bound"]


# The weights read per step are the same at every batch size unless the inputs decide what
# runs: beyond this spread (largest over smallest) the work varies with the inputs.
WORK_VARIES_RATIO = 1.25


def weights_per_step(results: list[BatchResult]) -> list[tuple[int, int]]:
    """(batch size, weight bytes read per step) of the batch sizes that counted any."""
    return [(r.batch_size, r.bytes.weights) for r in results
            if r.status == Status.OK and r.bytes is not None and r.bytes.weights > 0]


def work_varies_with_inputs(results: list[BatchResult]) -> bool:
    """True when the weights a step reads differ between batch sizes by more than
    :data:`WORK_VARIES_RATIO`: which layers run depends on the data, not on the batch."""
    read = [w for _, w in weights_per_step(results)]
    return len(read) >= 2 and max(read) > WORK_VARIES_RATIO * min(read)


def work_flags(results: list[BatchResult]) -> list[str]:
    if not work_varies_with_inputs(results):
        return []
    read = ", ".join(f"{w / 1e6:,.1f} MB at batch {b}" for b, w in weights_per_step(results))
    return [(f"the work per step changes with the inputs, not only with the batch size: the "
             f"weights read per step were {read} (weights are read once per step whatever "
             f"the batch, unless the data decides which layers run: an early exit, routing). "
             f"Throughput differences mix batching with different work; B* and the per-row "
             f"figures are not predicted")]


def _still_rising_at_cap(results: list[BatchResult], choice: Choice, stopped_at_cap: bool) -> bool:
    """True when the best throughput came at the largest batch and the plan's cap ended the
    sweep (rather than an OOM, a limit or a plateau), so a larger batch was never tried."""
    largest = max((r.batch_size for r in results if r.status == Status.OK), default=None)
    return stopped_at_cap and choice.best_batch_size == largest


def prediction_terms(knee: KneePrediction | None,
                     layers: ComputeBoundPrediction | None) -> dict[str, Any]:
    """The numbers the predictions came from, for renderers to quote (all per step)."""
    terms: dict[str, Any] = {}
    if knee is not None:
        terms.update(shared_s=knee.shared_s, per_row_s=knee.per_row_s)
    if layers is not None:
        terms.update(
            layers_fixed_bytes=layers.fixed_bytes,
            layers_bytes_per_row=layers.per_row_bytes,
            layers_state_bytes_per_row=layers.state_bytes_per_row,
            layers_flops_per_row=layers.flops.slope,
            peak_flops_per_s=layers.peak_flops_per_s,
            bandwidth_bytes_per_s=layers.bandwidth_bytes_per_s,
        )
    return terms


# Statuses at and beyond which a batch size would not fit: nothing is predicted there.
_DOES_NOT_FIT = (Status.OOM, Status.KILLED, Status.SKIPPED)


def unmeasured_sizes(results: list[BatchResult], limits: Limits) -> list[int]:
    """The batch sizes of the default sweep up to ``limits.max_batch`` (or
    ``limits.predict_to``, the larger) that were not measured, below the smallest one that
    did not fit in memory or that the measured peaks, extrapolated, say would not
    (plan.predicted_not_to_fit)."""
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
        if b > max(measured, default=0) and predicted_not_to_fit(results, b,
                                                                 limits.memory_budget_bytes):
            break
        sizes.append(b)
    return sizes


def final_probe_specs(results: list[BatchResult], limits: Limits) -> list[dict[str, Any]]:
    """The kernel probes the report's prediction uses: every matmul and convolution of the
    model (a convolution within its cost bound: step_model.probe_specs) at every measured
    batch size and every unmeasured one :func:`unmeasured_sizes` names. Under
    ``--predict-to`` the predicted curve is what the user asked for, not a by-product of a
    sweep, and the bounded probes may take a round's whole :data:`PROBE_ROUND_S`, not
    half the sweep's time; past ``--max-batch`` a matmul's probe is bounded too."""
    if work_varies_with_inputs(results):
        return []
    sizes = [r.batch_size for r in results if r.status == Status.OK]
    return probe_specs(results, sizes + unmeasured_sizes(results, limits),
                       budget_s=PROBE_ROUND_S if limits.predict_to else None,
                       bound_above=limits.max_batch if limits.predict_to else None)


def early_stop_reason(results: list[BatchResult], remaining: list[int], ceilings: Ceilings,
                      limits: Limits, unit: str, objective: str = "throughput",
                      prober: Callable[[list[dict[str, Any]]], dict[str, float]] | None = None,
                      ) -> str:
    """The sweep's predicted stop (:func:`step_model.predicted_stop`) judged against the
    batch size the rule picks from ``results`` so far; "" to go on. Throughput only: an
    energy pick has no step-time model."""
    if objective != "throughput" or work_varies_with_inputs(results):
        return ""
    ceilings = achieved_ceilings(ceilings, results)
    batches = [classify_batch(r, ceilings) for r in results]
    choice = recommend(batches, limits, unit, objective)
    picked = next((r for r in batches if choice and r.batch_size == choice.batch_size), None)
    if picked is None or not picked.throughput_per_s:
        return ""
    return predicted_stop(batches, ceilings, remaining, picked.throughput_per_s,
                          NEAR_BEST_SHARE, unit, prober)


def analyze(
    info: dict[str, Any],
    ceilings: Ceilings | None,
    results: list[BatchResult],
    limits: Limits,
    run: dict[str, Any],
    *,
    partial: bool = False,
    stop_reason: str = "",
    stopped_at_cap: bool = False,
    objective: str = "throughput",
    probes_s: dict[str, float] | None = None,
    global_batch: int | None = None,
    kept_buffers: list[BatchResult] | None = None,
    kept_buffers_set_by: str = "",
    in_progress: bool = False,
) -> Report:
    """Classify every op, predict and measure B*, recommend a batch size (numbers only).

    ``kept_buffers`` are the batch sizes timed again with the allocator keeping its buffers
    (classifiers/allocator.py), side by side with ``results``; ``kept_buffers_set_by`` says
    how the allocator was told to. ``in_progress``: a report written between batch sizes
    of a running sweep, whose unmeasured sizes it is about to measure: no pick is made
    from their predictions (``prediction.pick``)."""
    unit = info.get("unit", "sample")
    # the dtype the matmuls ran in: autocast's (--amp) where it ran, else the model's
    dtype = info.get("amp") or info.get("dtype", "float32")
    if ceilings is not None:
        ceilings = achieved_ceilings(ceilings, results)
    batches = [classify_batch(r, ceilings) if ceilings else r for r in results]
    for r in batches:  # recorded in report.json for the renderers
        r.page_fault_share = page_fault_share(r)
    choice = recommend(batches, limits, unit, objective)
    varies = work_varies_with_inputs(batches)  # then no curve describes batching alone
    predicted = predict_critical_batch(batches, ceilings) if ceilings and not varies else None
    layers = (predict_compute_bound_batch(batches, ceilings, dtype)
              if ceilings and not varies else None)
    knee, knee_inside = measured_knee(batches)
    prediction = (predict(batches, ceilings, unmeasured_sizes(batches, limits), probes_s,
                          int(info.get("units_per_row") or 1))
                  if ceilings and not varies else None)
    if prediction is not None and objective == "throughput" and not in_progress:
        prediction.pick = predicted_pick(batches, prediction, limits, choice)
    flags = [f"batch {r.batch_size}: {flag}" for r in batches for flag in r.flags]
    # Op flags stay on their ops (renderers list them with the op's id), not repeated here.
    flags += run_flags(info)
    flags += compiled_flags(info, batches)
    flags += dtype_hints(info, ceilings, batches)
    if global_batch is not None and info.get("mode") != "train":
        flags.append(f"--global-batch {global_batch} was given, but this run is inference: "
                     "gradient accumulation applies to training (--mode train)")
    flags += work_flags(batches)
    flags += noise_flags(batches)
    flags += page_fault_flags(batches)
    flags += ceiling_flags(ceilings, dtype)
    failed = [r for r in batches if r.status not in (Status.OK, Status.OOM, Status.SKIPPED)]
    for r in failed:
        first_line = r.error.splitlines()[0] if r.error else ""
        flags.append(f"batch {r.batch_size} ended as {r.status.value}: {first_line}")
    recommendation = None
    if choice is not None:
        recommendation = Recommendation(
            batch_size=choice.batch_size,
            rule=choice.rule,
            speedup_from_batching=choice.speedup_from_batching,
            speedup_baseline_batch=choice.speedup_baseline_batch,
            predicted_critical_batch=predicted.batch if predicted else None,
            measured_knee_batch=knee,
            measured_knee_within_sweep=knee_inside,
            explanation="",  # Report fills it from the document (reports.narrative)
            predicted_compute_bound_batch=layers.batch if layers else None,
            predicted_compute_bound_infinite=bool(layers and layers.batch is None),
            near_best_share=NEAR_BEST_SHARE,
            prediction=prediction_terms(predicted, layers),
            best_batch_size=choice.best_batch_size,
            best_throughput_per_s=choice.best_throughput_per_s,
            excluded=choice.excluded,
            still_rising_at_cap=_still_rising_at_cap(batches, choice, stopped_at_cap),
            work_varies_with_inputs=varies,
            batch_size_without_page_faults=pick_without_page_faults(
                batches, limits, unit, objective, kept_buffers),
            accumulation=accumulation(info, batches, choice.batch_size, global_batch),
        )
    model = {k: info.get(k) for k in ("target", "parameters", "parameter_bytes", "dtype",
                                      "mode", "unit", "units_per_row", "device", "threads",
                                      "available_memory_bytes")}
    for key in ("training_step", "compiled", "distributed", "contexts", "seq_lens",
                "units_per_row_per_token", "amp"):
        if info.get(key):
            model[key] = info[key]
    return Report(
        model=model,
        hardware=ceilings,
        batches=batches,
        recommendation=recommendation,
        run=run,
        batch_response=batch_response(batches),
        flags=flags,
        partial=partial,
        stop_reason=stop_reason,
        prediction=prediction,
        distributed=data_parallel_summary(info, batches,
                                          choice.batch_size if choice else None, global_batch),
        allocator=allocator_summary(batches, kept_buffers or [], limits, unit, objective,
                                    kept_buffers_set_by),
    )
