"""Every sentence a flag, a stop or a rule says: one function per kind, from its values.

The classifiers, the worker and the trace reader record *what* they noticed
(:class:`~batchscope.records.Flag`, :class:`~batchscope.records.Stop`,
:class:`~batchscope.records.Rule`); the words are written here, once, for report.json, the
HTML, the Markdown and the terminal alike, each unit attached to its own number (a
throughput in ``unit``s a second, a latency in ms). Plain strings: each renderer escapes
them for its format.

Example:
    >>> from batchscope.records.flag_payloads import NoisyTiming
    >>> flag_text(Flag.of(NoisyTiming(spread=0.31), 8))
    'batch 8: noisy timing, p25-p75 spans 31% of the median (was the machine busy?)'
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from batchscope.classifiers.throughput_curve import curve_throughput
from batchscope.op_families import PATH_WORDS
from batchscope.records import (
    FUSED_KERNEL_PREFIX,
    FUSED_KERNELS,
    Assumption,
    AssumptionKind,
    Flag,
    FlagKind,
    Rule,
    RuleKind,
    Stop,
    StopKind,
    ThroughputCurve,
)
from batchscope.records.counters import NcuNote, NcuNoteKind
from batchscope.records.evidence import Evidence, EvidenceKind, EvidenceReason, Grade
from batchscope.records.flag_payloads import (
    AboveTheoreticalPeak,
    AccountingError,
    AmpCasts,
    AmpFaster,
    AmpSlower,
    AmpSlowerMeasured,
    BatchFailed,
    BelowTheoreticalPeak,
    BreakdownFailed,
    BreakdownLost,
    BudgetSkipped,
    BudgetStop,
    CapStop,
    CeilingsFailed,
    CeilingsOnBusyMachine,
    CeilingSpread,
    Compiled,
    CountersDisagree,
    DataRowsStop,
    FailedStop,
    FinderSet,
    FusedByInductor,
    GlobalBatchInInference,
    GpuNotInDatasheets,
    GpuThrottled,
    LightningAccumulates,
    LightningProcesses,
    NcuFailed,
    NoBreakdown,
    NoisyTiming,
    Note,
    NoteStop,
    NotProbedAssumption,
    OverLatencyLimitStop,
    OverMemoryBudgetStop,
    PageFaults,
    PartlyFromCache,
    PathSpeedAssumption,
    PlateauOverruled,
    PlateauStop,
    PlateauUnconfirmed,
    PredictedNotToFit,
    PredictedStop,
    PredictedStopUnconfirmed,
    ProfileDisagrees,
    ProfileRetaken,
    RanksOutput,
    RepeatedErrorsStop,
    RoofRaised,
    ServedFromCache,
    SkippedStop,
    SlowestRank,
    StandInTrainingStep,
    TraceIncomplete,
    TraceNotRead,
    TracesOnDifferentGpus,
    TrainerAccumulates,
    WatchDataLoading,
    WorkVaries,
)
from batchscope.records.flags import TraceGap
from batchscope.records.interval import MEANINGFUL_SPAN
from batchscope.records.report import EstimateMethod, LimitKind, OverLimit
from batchscope.records.rounds import DISTURBED_FACTOR, STALL_FACTOR
from batchscope.records.serving import Policy, WhatIf
from batchscope.reports import fmt
from batchscope.serving.metrics import Slo
from batchscope.serving.whatif import SAME_THROUGHPUT

MIB = 2**20


def _sizes(sizes: Sequence[str | int | float]) -> str:
    """``[4, 8]`` -> ``"4 and 8"``; ``[2, 4, 8]`` -> ``"2, 4 and 8"``."""
    words = [str(s) for s in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


# -- flags ----------------------------------------------------------------------------------
def _noisy(f: Flag) -> str:
    return (f"noisy timing, p25-p75 spans {NoisyTiming.of(f).spread:.0%} of the median (was "
            "the machine busy?)")


def _roof_raised(f: Flag) -> str:
    p = RoofRaised.of(f)
    when = f", measured {p.measured_at}" if p.measured_at else ""
    return (f"the {p.roof} roof was raised from {p.before / 1e9:,.0f} to "
            f"{p.after / 1e9:,.0f} GFLOP/s: {p.op} ({f.op_id}) ran that fast at "
            f"batch {f.batch_size} in this run, so the {p.source} ceiling{when} was low "
            "(a slower minute of the machine, or a slower path); ops are placed against what "
            "ran. `diagnose hardware --recalibrate` measures it again")


def _roof(dtype: str, family: str | None) -> str:
    """The roof a flag is about ("the float32 matmul roof"), or the dtype's one peak where
    the flag names no kernel family (flags of reports written before families had roofs)."""
    return f"the {dtype} {family} roof" if family else f"the {dtype} peak"


def _gflops(rate: float) -> str:
    """A FLOP/s figure in GFLOP/s to three significant digits (173, 12.5, 1.96), so that a
    ratio quoted beside figures can be read off the figures shown, however slow the path."""
    value = rate / 1e9
    if value <= 0:
        return "0"
    return f"{value:,.{max(0, 2 - math.floor(math.log10(value)))}f}"


def _ceiling_spread(f: Flag) -> str:
    p = CeilingSpread.of(f)
    path = p.path or ""
    probe = f"{PATH_WORDS.get(path, path or 'torch.mm')}"
    probe += f" at {p.size}" if p.size is not None and str(p.size) else ""
    roof = _roof(p.dtype, p.family)
    tail = (f"the roof is their best, {_gflops(p.best)} GFLOP/s: compute-bound ops sit that "
            "uncertainly against it; `diagnose hardware --recalibrate` on a quiet machine "
            "measures it again")
    # The span of the rates quoted, over the median quoted:
    if p.fast is not None and p.slow is not None:
        return (f"{roof} ({probe}) varied between repeats: the middle half of them ran at "
                f"{_gflops(p.slow)}-{_gflops(p.fast)} GFLOP/s, a span of "
                f"{p.spread:.0%} of their median {_gflops(p.median)} GFLOP/s; {tail}")
    # Figures kept before the quartiles were: the spread is of the repeats' times.
    return (f"the repeats of {roof} ({probe}) spread: their times' interquartile range "
            f"is {p.spread:.0%} of their median (median {_gflops(p.median)} "
            f"GFLOP/s); {tail}")


def _theoretical(p: AboveTheoreticalPeak | BelowTheoreticalPeak) -> str:
    """How the theoretical peak quoted was worked out: a CPU's product, or a datasheet."""
    bound = f"{_gflops(p.theoretical_flops_per_s)} GFLOP/s"
    if p.cores is None:
        return f"{bound} ({p.source})"
    matrix = f", {p.matrix_unit.upper()}" if p.matrix_unit else ""
    return (f"{bound} ({p.cores} core{'s' if p.cores != 1 else ''} × "
            f"{(p.clock_hz or 0.0) / 1e9:.2f} GHz × "
            f"{p.flops_per_cycle or 0.0:,.0f} FLOP a cycle: {p.isa or ''}{matrix}, "
            f"{p.fma_units or 0} FMA units a core assumed; a bound, not a prediction)")


def _clock_words(p: AboveTheoreticalPeak) -> str:
    """The other reason a rate can pass the bound: a clock above the one read (a CPU), or a
    faster variant of the GPU than the datasheet row."""
    if p.cores is None:
        return ", or this GPU is a faster variant than the datasheet row it was matched to"
    source = p.clock_source
    if not source or source == "cpuinfo_max_freq":
        return ""
    where = "/proc/cpuinfo reports" if source == "cpu MHz" else "the CPU's model name says"
    return (f", or the cores ran faster than the {(p.clock_hz or 0.0) / 1e9:.2f} GHz {where} "
            "(turbo)")


def _above_theoretical(f: Flag) -> str:
    p = AboveTheoreticalPeak.of(f)
    what = (f"{p.path} ({f.op_id}) ran at batch {f.batch_size} at" if f.op_id else
            f"{PATH_WORDS.get(p.path, p.path)}, a probe of {_roof(p.dtype, p.family)}, reached")
    return (f"{what} {_gflops(p.flops_per_s)} GFLOP/s in {p.dtype}, "
            f"{p.share:.0%} of this machine's theoretical peak of {_theoretical(p)}: "
            "it did fewer multiplications than the FLOPs counted (a Winograd or FFT "
            f"convolution, a Strassen-like matmul){_clock_words(p)}. Ops are placed against "
            "what was measured, so their efficiency is against what ran, not the silicon")


def _below_theoretical(f: Flag) -> str:
    p = BelowTheoreticalPeak.of(f)
    dtype = p.dtype
    how = PATH_WORDS.get(p.path, p.path)
    if p.native is False:
        why = (f"this CPU has no native {dtype} arithmetic, so torch converts to fp32 and "
               "back: run fp32, or on a CPU with native bf16 (AMX or AVX512-BF16)")
    elif dtype in ("bfloat16", "float16") and p.cores is not None:
        why = (f"{dtype} takes a slow library path on this CPU: run fp32 (run both and "
               "`diagnose compare` the two reports)")
    else:
        why = ("a slow library path (a BLAS built without this CPU's widest vectors: "
               "`python -c \"import torch; print(torch.__config__.show())\"` names it), or a "
               "machine busy while the roof was measured (`diagnose hardware --recalibrate` "
               "on a quiet one)")
    return (f"{_roof(dtype, p.family)}, {_gflops(p.flops_per_s)} GFLOP/s ({how}), is "
            f"{p.share:.0%} of this machine's theoretical peak of {_theoretical(p)}: "
            f"{why}. Its ops are placed against the roof measured")


def _compiled(f: Flag) -> str:
    p = Compiled.of(f)
    compiles = ", ".join(f"{s:,.1f} s at batch {b}" for b, s in zip(p.compiles_at, p.compile_s))
    text = ("the model is torch.compile'd: step latencies are the compiled model's; the "
            "compile for each new shape is in the first warm-up step, outside them"
            + (f" (that step less one step: {compiles})" if compiles else "")
            + ". Its extern kernels (matmuls, convolutions) are profiled as aten ops and "
            "joined to the eager ops they stand for; the kernels inductor fused are listed "
            f"apart by name (unmatched_ops_s, \"{FUSED_KERNEL_PREFIX}…\": on the CPU, inductor's "
            "kernel profiling names the aten ops each fused, and those eager ops say so and "
            "show no time of their own; the graph's time outside its named kernels is "
            f"\"{FUSED_KERNELS}\")")
    if p.fused_s is not None:
        named = ", ".join(f"{k} {s * 1e6:,.0f} µs"
                          for k, s in zip(p.kernels or [], p.kernel_s or []))
        text += (f" (at batch {p.at_batch}: {p.fused_s * 1e6:,.0f} µs, "
                 f"{p.fused_share or 0.0:.0%} of the profiled step"
                 + (f"; {named}" if named else "") + ")")
    return (text + ". FLOPs and bytes are counted on the eager module: a fused op's "
            "intermediates are counted as if they went through memory, so the compiled "
            "model's bytes are an upper bound")


def _stand_in_step(f: Flag) -> str:
    p = StandInTrainingStep.of(f)
    optimizer = ("make_optimizer from the model file" if p.optimizer_from_file
                 else f"batchscope's default: AdamW(lr={p.default_lr:g}, foreach=False)")
    loss = ("loss from the model file" if p.loss_from_file
            else "batchscope's stand-in: the mean square of the outputs")
    return (f"the training step is batchscope's, not your loop's: optimizer {optimizer}; "
            f"loss {loss}; zero_grad set_to_none=False. Define make_optimizer(model) and "
            "loss(outputs, inputs) in the model file to measure your own (foreach and "
            "set_to_none change a step by a few percent)")


def _amp_slower(f: Flag) -> str:
    p = AmpSlower.of(f)
    dtype = p.dtype
    native = p.native is False
    why = f"; this CPU has no native {dtype} arithmetic" if native else ""
    peak, fp32 = p.peak, p.fp32_peak
    return (f"--amp {p.amp} ran the matmuls in {dtype}, whose matmul roof here is "
            f"{_gflops(peak)} GFLOP/s against fp32's {_gflops(fp32)} "
            f"({fp32 / peak if peak else float('inf'):,.1f}x "
            f"slower{why}): its compute-bound ops, {p.compute_share:.0%} of the step at "
            f"batch {f.batch_size}, would run faster in fp32 here; run without --amp"
            + (", or on a CPU with native bf16 (AMX or AVX512-BF16)" if native else ""))


def _amp_casts(f: Flag) -> str:
    p = AmpCasts.of(f)
    dtype = p.dtype
    return (f"--amp {p.amp} spent {p.cast_s * 1e6:,.0f} µs of the profiled step "
            f"at batch {f.batch_size} ({p.share:.0%}, {p.calls} calls) "
            f"casting tensors (_to_copy: autocast casts the fp32 weights to {dtype} on every "
            "step, and back for the ops it keeps in fp32): work an fp32 step does not do, so "
            f"unless {dtype} saves more than that on the matmuls, the step is slower than in "
            "fp32. A run without --amp measures fp32 here; `diagnose compare` the two reports")


def _amp_slower_measured(f: Flag) -> str:
    p = AmpSlowerMeasured.of(f)
    return (f"--amp {p.amp} ran batch {f.batch_size} at {p.amp_s * 1e3:,.3g} ms a "
            f"step; timed again without autocast in a fresh worker, the same batch ran at "
            f"{p.fp32_s * 1e3:,.3g} ms ({p.ratio:.2f}x faster, beyond the run's "
            f"noise: at most {p.fp32_high_s * 1e3:,.3g} ms against at least "
            f"{p.amp_low_s * 1e3:,.3g} ms): on this machine fp32 is the faster; run "
            "without --amp")


def _amp_faster(f: Flag) -> str:
    p = AmpFaster.of(f)
    return (f"{p.dtype} matmuls peak at {p.ratio:,.1f}x fp32's on this machine "
            f"and compute-bound ops take {p.compute_share:.0%} of the step at batch "
            f"{f.batch_size}: `--amp {p.amp}` (torch.autocast) could run them up to that "
            "much faster; its report counts each op in the dtype it ran in")


def _work_varies(f: Flag) -> str:
    p = WorkVaries.of(f)
    read = ", ".join(f"{w / 1e6:,.1f} MB at batch {b}"
                     for b, w in zip(p.batch_sizes, p.weight_bytes))
    return (f"the work per step changes with the inputs, not only with the batch size: the "
            f"weights read per step were {read} (weights are read once per step whatever the "
            "batch, unless the data decides which layers run: an early exit, routing). "
            "Throughput differences mix batching with different work; B* and the per-row "
            "figures are not predicted")


def _page_faults(f: Flag) -> str:
    p = PageFaults.of(f)
    page = p.page_bytes
    parts = ", ".join(f"batch {b}: {n:,.0f} ({n * page / MIB:,.0f} MiB, ~{s:.0%})"
                      for b, n, s in zip(p.batch_sizes, p.faults, p.shares))
    # The cost of a fault: measured side by side on this machine where the allocator check
    # ran (view.shown_flag restates the shares at it), else the estimate.
    cost = (f"~{p.cost_s * 1e6:.2g} µs a fault, measured side by side on this machine"
            if p.measured else
            f"~{p.cost_s * 1e6:g} µs a fault, an estimate")
    return (f"page faults per step, with the memory mapped afresh every step and the share of "
            f"the step they take at {cost}: {parts}. The "
            "allocator returns large buffers to the OS and faults them in again each step; "
            "jemalloc or tcmalloc (LD_PRELOAD), or glibc's MALLOC_MMAP_THRESHOLD_ and "
            "MALLOC_TRIM_THRESHOLD_ set above the largest buffer, keep them mapped")


def _cache(f: Flag, partly: bool) -> str:
    p = PartlyFromCache.of(f) if partly else ServedFromCache.of(f)
    measured, roof = p.time_s * 1e6, p.roof_s * 1e6
    footprint, cache = p.footprint_bytes / MIB, p.cache_bytes / MIB
    if partly:
        return (f"measured {measured:.1f} µs, faster than its DRAM roof of {roof:.1f} µs; of "
                f"its {footprint:,.1f} MiB a call, up to the cache's {cache:,.0f} MiB may still "
                "be there from the ops before it")
    return (f"measured {measured:.1f} µs, faster than its DRAM roof of {roof:.1f} µs; its "
            f"bytes fit in cache ({footprint:,.1f} MiB a call, cache {cache:,.0f} MiB), which "
            "beats the DRAM bandwidth")


def _accounting_error(f: Flag) -> str:
    p = AccountingError.of(f)
    return (f"measured {p.time_s * 1e6:.1f} µs is faster than its roof of "
            f"{p.roof_s * 1e6:.1f} µs")


def _fused(f: Flag) -> str:
    kernels = FusedByInductor.of(f).kernels
    more = f" and {len(kernels) - 3} more" if len(kernels) > 3 else ""
    return (f"{', '.join(kernels[:3])}{more}: its time is the kernel's, listed apart "
            "(unmatched_ops_s), with the ops fused with it")


_MISSING = {
    TraceGap.TRUNCATED.value: (
        "the file ends early (truncated): the {events:,} events before the cut are analysed, "
        "later ones are lost"),
    TraceGap.NO_KERNELS.value: (
        "no GPU kernels in this trace (a CPU-only profile, or CUDA activity was not "
        "recorded): ops are shown with their CPU time, shapes, FLOPs and bytes, and no GPU "
        "roofline"),
    TraceGap.NO_LAUNCHES.value: (
        "no CUDA runtime launches recorded: kernels cannot be tied to the ops that launched "
        "them, so their time is shown unattributed"),
    TraceGap.NO_SHAPES.value: (
        "no input shapes recorded (profile with record_shapes=True): ops are uncounted (no "
        "FLOPs or bytes), their device time is shown"),
    TraceGap.NO_STEPS.value: (
        "no ProfilerStep#N annotations (profile with a schedule and call prof.step()): the "
        "whole trace is analysed as one step"),
    TraceGap.NO_DEVICE.value: (
        "no deviceProperties: the GPU is unknown, so no datasheet roofline; times, FLOPs and "
        "bytes are still shown"),
}


def _incomplete(f: Flag) -> str:
    p = TraceIncomplete.of(f)
    template = _MISSING.get(p.missing)
    if template is None:  # a kind this version does not know (a newer report): as it is
        return f"the trace lacks: {p.missing}"
    return template.format(events=p.events or 0)


def _not_to_fit(p: PredictedNotToFit) -> str:
    """Why a batch size was skipped, without "batch N": its predicted peak against what it
    would not fit in (a PREDICTED_NOT_TO_FIT flag's, or a SKIPPED stop's)."""
    sizes = p.from_batches
    basis = f"extrapolated from batches {_sizes(sizes)}" if sizes else "extrapolated"
    text = f"skipped: its peak memory, {basis}, would be {p.predicted_bytes / MIB:,.0f} MiB"
    if p.budget_bytes is not None:
        return text + f", over the budget of {p.budget_bytes / MIB:,.0f} MiB"
    return (text + f", {(p.more_bytes or 0.0) / MIB:,.0f} MiB more than batch "
            f"{sizes[-1] if sizes else '?'} needed, and only "
            f"{(p.free_bytes or 0) / MIB:,.0f} MiB was free")


def _lightning_accumulates(f: Flag) -> str:
    p = LightningAccumulates.of(f)
    rows, batches = p.rows or 0, p.batches
    return (f"Lightning accumulates gradients over {batches} batches: each watched step is one "
            f"batch{f' of {rows} rows' if rows else ''}, and the optimizer steps once every "
            f"{batches} batches, so only some watched steps hold its update (the counted step "
            "may not).")


def _trainer_accumulates(f: Flag) -> str:
    p = TrainerAccumulates.of(f)
    steps, rows = p.steps, p.micro_batch
    return (f"The Trainer accumulates gradients over {steps} micro-batches of {rows} rows: each "
            f"watched step is one optimizer step of {steps * rows} rows, and its ops run at a "
            f"micro-batch's shapes (an op's calls add up over the {steps} micro-batches).")


def _watch_data_loading(f: Flag) -> str:
    p = WatchDataLoading.of(f)
    return (f"each watched step spent {p.seconds * 1e3:,.3g} ms "
            f"({p.share:.0%} of the median step) before the model was called: loading "
            "its batch, and whatever else the loop runs first. It is in the step time and the "
            "throughput, not in the op breakdown and the roofline, which start at the model's "
            "first call.")


# What one timed step of a finder's trial is, by the trainer's step (WatchedStep's values).
_FINDER_STEPS = {
    "training_batch": "one training batch of Lightning's fit loop",
    "optimizer_step": "one optimizer step of the Trainer",
    "loop_step": "one step of the training function",
}


def _finder_set(f: Flag) -> str:
    p = FinderSet.of(f)
    size, where = p.batch_size, p.where
    if p.mode == "largest":
        largest, margin = p.largest, p.margin
        why = (f"the largest batch that ran ({largest}) less a {margin:.0%} margin"
               if margin else "the largest batch that ran")
    else:
        why = "the recommended batch size"
    text = f"the finder set {where} to {size}: {why}"
    world = p.world
    if world > 1:
        text += f"; all {world} processes took rank 0's answer"
    step = _FINDER_STEPS.get(p.step, "one step of the loop")
    return (text + f". Each size was timed on the trainer's own loop, a step being {step} "
            "(its data loading included), with the model's weights, the optimizer's state and "
            "the random number generators restored after.")


# --ncu's failures (profiler/ncu_run.NcuFailure), in words.
_NCU_FAILURES = {
    "not_started": "ncu could not be started ({detail})",
    "permission": ("Nsight Compute may not read this GPU's performance counters "
                   "(ERR_NVGPUCTRPERM: the driver allows them to admins only; run as root, or "
                   "see NVIDIA's ERR_NVGPUCTRPERM page): no counters, the sweep went on"),
    "timeout": "ncu did not finish within {detail} s (it replays each kernel once per pass)",
    "exited": "ncu failed ({detail})",
    "nothing_written": "ncu wrote no CSV",
    "unreadable": "ncu's CSV could not be read: {detail}",
    "interrupted": "interrupted while ncu ran; the sweep's measurements stand",
    "error": "the ncu phase failed ({detail}); the sweep's measurements stand",
}


def _ncu_failed(f: Flag) -> str:
    p = NcuFailed.of(f)
    words = _NCU_FAILURES.get(p.failure, "ncu failed ({detail})")
    where = f" at batch {f.batch_size}" if f.batch_size is not None else ""
    return f"no counters{where}: " + words.format(detail=p.detail)

# What the ncu reader set aside (records/counters.NcuNoteKind), after the note's subject.
_NCU_NOTES: dict[NcuNoteKind, str] = {
    NcuNoteKind.UNKNOWN_UNIT: "has the unit {text!r}, which has no known scale: left out",
    NcuNoteKind.UNEXPECTED_UNIT: "has the unit {text!r}, not a unit of its kind: left out",
    NcuNoteKind.NO_UNITS: "records no units, so no value's scale is known: its figures are "
                          "left out",
    NcuNoteKind.NOT_A_NUMBER: "has the value {text!r}, which is not a number: left out",
    NcuNoteKind.NOT_FINITE: "has the value {text!r}, not a finite number: left out",
    NcuNoteKind.NEGATIVE: "has the negative value {text!r}: left out",
    NcuNoteKind.TRUNCATED: "ends inside a row: read up to its last whole row",
    NcuNoteKind.MALFORMED_ROWS: "has {text} rows with too few fields, skipped",
    NcuNoteKind.SEPARATE_RUNS: "records this launch with values more than 1% apart from "
                               "another file's ({text}): kept as a separate launch",
    NcuNoteKind.TENSOR_INSTRUCTIONS_ONLY: "counts tensor work only in instructions ({text}), "
                                          "whose FLOPs per instruction depend on the GPU and "
                                          "kernel: its FLOPs are a lower bound",
    NcuNoteKind.NO_TENSOR_COUNTER: "records no tensor-pipe counter: its FLOPs leave out any "
                                   "tensor-core work",
    NcuNoteKind.NO_CUDA_CORE_COUNTER: "records no fp32 CUDA-core counter (SASS, flop_count "
                                      "or roofline rates): its FLOPs leave that work out",
    NcuNoteKind.PARTIAL_SASS: "collected only some of the {text} SASS counters: its FLOPs "
                              "are a lower bound",
    NcuNoteKind.PACKED_HALF: "executed fp16 SASS instructions ({text}), counted as scalar "
                             "though a packed one does twice the FLOPs: a lower bound",
    NcuNoteKind.NO_FLOP_COUNTER: "records no counter to count FLOPs from",
    NcuNoteKind.DURATION_FROM_CYCLES: "records no gpu__time_duration: its duration is "
                                      "sm__cycles_elapsed.avg over "
                                      "sm__cycles_elapsed.avg.per_second",
}


def ncu_note_text(note: NcuNote) -> str:
    """An ncu reader's note as one sentence.

    Example:
        >>> ncu_note_text(NcuNote(NcuNoteKind.NEGATIVE, "a.csv", None, "dram__bytes.sum", "-5"))
        "a.csv, dram__bytes.sum has the negative value '-5': left out."
    """
    subject = ", ".join(p for p in (note.path, note.launch, note.metric) if p)
    return f"{subject} {_NCU_NOTES[note.kind].format(text=note.text or '')}."


def _plateau_overruled(f: Flag) -> str:
    p = PlateauOverruled.of(f)
    return (f"the measured throughput levelled off by batch {f.batch_size}, but the step-time "
            f"model, fitted on batches {_sizes(p.fitted_on)} from their exact FLOPs and "
            f"bytes, predicts {p.gain:.3g}× the throughput at batch "
            f"{p.highest} ({p.projected_per_s:,.4g}/s at the low end of its "
            f"band, against the plateau's bar of {p.bar_per_s:,.4g}/s): the sweep went on")


def _plateau_unconfirmed(f: Flag) -> str:
    p = PlateauUnconfirmed.of(f)
    return (f"the sequential timings looked flat by batch {f.batch_size}, but timed against "
            f"batch {p.best_before} in {p.rounds} interleaved rounds, batches "
            f"{_sizes(p.recent)} gave up to {p.gain:.2f}× its throughput "
            f"({p.low:.2f}–{p.high:.2f}× at 95%): "
            + ("a gain past the plateau's bar of " if p.verdict == "refuted" else
               "the rounds could not tell a gain under the plateau's bar of ")
            + f"{p.bar:.2f}× from one over it, so the sweep went on")


def _predicted_stop_unconfirmed(f: Flag) -> str:
    p = PredictedStopUnconfirmed.of(f)
    return (f"the step-time model would have stopped the sweep after batch {f.batch_size}, "
            f"but once batches {_sizes(p.batch_sizes)} were timed against each other in "
            f"{p.rounds} interleaved rounds its stop no longer held: the sweep went on")


def _breakdown_failed(f: Flag) -> str:
    p = BreakdownFailed.of(f)
    return f"op breakdown failed in {p.phase}: {p.error}"


def _profile_retaken(f: Flag) -> str:
    p = ProfileRetaken.of(f)
    return (f"profile retaken {p.tries}x: the first profiled step was "
            f"{p.first_gap:.1f}x the timed one (the profiler warming up); the kept profile "
            f"({p.profiled_s * 1e3:,.3g} ms) agrees with the timed "
            f"{p.timed_s * 1e3:,.3g} ms")


def _profile_disagrees(f: Flag) -> str:
    p = ProfileDisagrees.of(f)
    return (f"the profile disagrees with the timing: profiled steps took "
            f"{p.profiled_s * 1e3:,.3g} ms against {p.timed_s * 1e3:,.3g} ms timed "
            f"({p.gap:.1f}x after the profiler's ~{p.cost_per_op_s * 1e6:g} µs an op, "
            f"{p.captures} captures): the time shares and per-op times are those of "
            "the profiled steps and may not hold for the timed ones")


def _batch_failed(f: Flag) -> str:
    p = BatchFailed.of(f)
    return f"batch {f.batch_size} ended as {p.status}: {p.error}"


def _traces_on_different_gpus(f: Flag) -> str:
    p = TracesOnDifferentGpus.of(f)
    return (f"the traces ran on different GPUs ({', '.join(p.gpus)}): roofs are those of "
            f"{p.roofs_of}")


def _slowest_rank(f: Flag) -> str:
    p = SlowestRank.of(f)
    rank = "" if p.rank is None else p.rank
    return f"rank {rank} is the slowest of {p.ranks} ranks ({p.trace}); the report shows it"


def _counters_disagree(f: Flag) -> str:
    p = CountersDisagree.of(f)
    return (f"{p.op} is {p.bound}-bound by its kernels' measured counters "
            f"({fmt.si(p.flops, 'FLOP')} over {fmt.si(p.dram_bytes, 'B')} of DRAM "
            f"per step) but {p.modelled_bound}-bound as modelled "
            f"({fmt.si(p.modelled_flops, 'FLOP')} over "
            f"{fmt.si(p.modelled_bytes, 'B')}; {p.matched} of its "
            f"{p.launches} launches profiled): the model's bytes or FLOPs are wrong "
            "for its kernels (cache reuse, recomputation, split-K, padding)")


def _lightning_processes(f: Flag) -> str:
    p = LightningProcesses.of(f)
    return (f"Lightning ran {p.world} processes ({p.strategy}): this report is "
            "rank 0's, its batch size per process, and each of its steps holds the gradients' "
            "all-reduce (counted as c10d::allreduce_, not against the memory roof).")


_FLAGS: dict[FlagKind, Callable[[Flag], str]] = {
    FlagKind.NO_BREAKDOWN: lambda f: f"no op breakdown: {NoBreakdown.of(f).reason}",
    FlagKind.PLATEAU_OVERRULED: _plateau_overruled,
    FlagKind.PLATEAU_UNCONFIRMED: _plateau_unconfirmed,
    FlagKind.PREDICTED_STOP_UNCONFIRMED: _predicted_stop_unconfirmed,
    FlagKind.BUDGET_SKIPPED: lambda f: (
        f"--budget was spent before {_sizes(BudgetSkipped.of(f).phases)}: not done"),
    FlagKind.BREAKDOWN_FAILED: _breakdown_failed,
    FlagKind.BREAKDOWN_LOST: lambda f: f"op breakdown lost: {BreakdownLost.of(f).reason}",
    FlagKind.BREAKDOWN_INTERRUPTED: lambda f: "interrupted during the op breakdown",
    FlagKind.TIMED_BEFORE_DEATH: lambda f: "the timing pass had finished before the worker died",
    FlagKind.PROFILE_RETAKEN: _profile_retaken,
    FlagKind.PROFILE_DISAGREES: _profile_disagrees,
    FlagKind.GPU_THROTTLED: lambda f: (
        f"the GPU was throttled ({', '.join(GpuThrottled.of(f).reasons)}): its "
        "clocks were below what it can sustain"),
    FlagKind.RANKS_OUTPUT: lambda f: f"the ranks' own output: {RanksOutput.of(f).path}",
    FlagKind.NON_DETERMINISTIC: lambda f: ("non-deterministic: the op sequence differed "
                                           "between profiled steps"),
    FlagKind.NOISY_TIMING: _noisy,
    FlagKind.CEILINGS_FAILED: lambda f: (
        f"measuring the ceilings failed ({CeilingsFailed.of(f).error}); ops are not "
        "classified"),
    FlagKind.CEILINGS_ON_BUSY_MACHINE: lambda f: (
        f"the ceilings were measured while other processes took "
        f"{CeilingsOnBusyMachine.of(f).share:.0%} of the CPU: they are likely low, so ops may "
        "sit too close to (or beyond) their roofs; they were not cached and will be measured "
        "again on the next run"),
    FlagKind.ROOF_RAISED: _roof_raised,
    FlagKind.CEILING_SPREAD: _ceiling_spread,
    FlagKind.ABOVE_THEORETICAL_PEAK: _above_theoretical,
    FlagKind.BELOW_THEORETICAL_PEAK: _below_theoretical,
    FlagKind.STAND_IN_TRAINING_STEP: _stand_in_step,
    FlagKind.COMPILED: _compiled,
    FlagKind.AMP_SLOWER: _amp_slower,
    FlagKind.AMP_CASTS: _amp_casts,
    FlagKind.AMP_SLOWER_MEASURED: _amp_slower_measured,
    FlagKind.AMP_FASTER: _amp_faster,
    FlagKind.GLOBAL_BATCH_IN_INFERENCE: lambda f: (
        f"--global-batch {GlobalBatchInInference.of(f).global_batch} was given, but this run "
        "is inference: gradient accumulation applies to training (--mode train)"),
    FlagKind.WORK_VARIES: _work_varies,
    FlagKind.PAGE_FAULTS: _page_faults,
    FlagKind.PREDICTED_NOT_TO_FIT: lambda f: _not_to_fit(PredictedNotToFit.of(f)),
    FlagKind.BATCH_FAILED: _batch_failed,
    FlagKind.TRACE_NOT_READ: lambda f: f"not read: {TraceNotRead.of(f).error}",
    FlagKind.TRACES_ON_DIFFERENT_GPUS: _traces_on_different_gpus,
    FlagKind.GPU_NOT_IN_DATASHEETS: lambda f: (
        f"{GpuNotInDatasheets.of(f).gpu} is not in the datasheet table: ops are not placed "
        "on a roofline; times, FLOPs and bytes are shown"),
    FlagKind.SLOWEST_RANK: _slowest_rank,
    FlagKind.TRACE_INCOMPLETE: _incomplete,
    FlagKind.NCU_FAILED: _ncu_failed,
    FlagKind.COUNTERS_DISAGREE: _counters_disagree,
    FlagKind.LIGHTNING_ACCUMULATES: _lightning_accumulates,
    FlagKind.LIGHTNING_PROCESSES: _lightning_processes,
    FlagKind.TRAINER_ACCUMULATES: _trainer_accumulates,
    FlagKind.WATCH_DATA_LOADING: _watch_data_loading,
    FlagKind.FINDER_SET: _finder_set,
    FlagKind.NOTE: lambda f: Note.of(f).text,
}


# An op's flags: a label (what kind of thing it is, the same for every op it is on), then
# the detail with that op's numbers. Renderers group op flags by label and op.
OP_FLAG_LABELS: dict[FlagKind, str] = {
    FlagKind.UNMATCHED_CALLS: "unmatched",
    FlagKind.FUSED_BY_INDUCTOR: "fused by inductor into",
    FlagKind.SERVED_FROM_CACHE: "served from cache",
    FlagKind.PARTLY_FROM_CACHE: "partly served from cache",
    FlagKind.ACCOUNTING_ERROR: "accounting error",
}
_OP_DETAILS: dict[FlagKind, Callable[[Flag], str]] = {
    FlagKind.UNMATCHED_CALLS: lambda f: "some calls had no profiled twin, their time is missing",
    FlagKind.FUSED_BY_INDUCTOR: _fused,
    FlagKind.SERVED_FROM_CACHE: lambda f: _cache(f, partly=False),
    FlagKind.PARTLY_FROM_CACHE: lambda f: _cache(f, partly=True),
    FlagKind.ACCOUNTING_ERROR: _accounting_error,
}


def flag_label(flag: Flag) -> str:
    """What kind of thing a flag says, in a few words (an op flag's label, else its kind)."""
    return OP_FLAG_LABELS.get(flag.kind, flag.kind.value.replace("_", " "))


def flag_detail(flag: Flag) -> str:
    """An op flag's sentence after its label (the whole sentence for other flags)."""
    detail = _OP_DETAILS.get(flag.kind)
    return detail(flag) if detail is not None else _FLAGS[flag.kind](flag)


def flag_body(flag: Flag) -> str:
    """What the flag says, without the batch size it concerns."""
    if flag.kind in _OP_DETAILS:
        separator = " " if flag.kind == FlagKind.FUSED_BY_INDUCTOR else ": "
        return f"{OP_FLAG_LABELS[flag.kind]}{separator}{flag_detail(flag)}"
    return _FLAGS[flag.kind](flag)


def flag_text(flag: Flag) -> str:
    """The flag's sentence; a batch size's own flag starts with it ("batch 8: ...")."""
    body = flag_body(flag)
    if flag.batch_size is None or flag.kind == FlagKind.NOTE or flag.op_id is not None \
            or flag.kind in _RUN_WIDE:
        return body
    return f"batch {flag.batch_size}: {body}"


# Kinds whose batch size is part of their own sentence, not a prefix.
_RUN_WIDE = frozenset({FlagKind.ROOF_RAISED, FlagKind.AMP_SLOWER, FlagKind.AMP_FASTER,
                       FlagKind.AMP_CASTS, FlagKind.AMP_SLOWER_MEASURED,
                       FlagKind.BATCH_FAILED})


# -- the stop ---------------------------------------------------------------------------------
def _predicted(s: Stop, unit: str) -> str:
    p = PredictedStop.of(s)
    remaining = p.remaining
    sizes = (f"batch {remaining[0]}" if len(remaining) == 1
             else f"batches {', '.join(str(b) for b in remaining)}")
    fitted = ", ".join(str(b) for b in p.fitted_on)
    return (f"{sizes} not measured: the step-time model, fitted on batches {fitted}, predicts "
            f"at most {p.projected_per_s:,.4g} ± {p.margin:.0%} {unit}s/s there "
            f"(batch {p.highest}: {p.gain:.2f}× batch {p.last}), "
            f"under the {p.bar_per_s:,.4g} {unit}s/s that would change the pick; it had "
            f"predicted batch {p.last} within {p.miss:.0%} before measuring it")


def _budget(stop: Stop) -> str:
    p, b = BudgetStop.of(stop), stop.batch_size
    unmeasured = p.unmeasured
    return (f"--budget of {fmt.seconds(p.budget_s)} would have run out: batch "
            f"{b} was reckoned at {fmt.seconds(p.estimated_s)} after "
            f"{fmt.seconds(p.spent_s)} spent, so "
            + (f"batches {_sizes(unmeasured)} were" if len(unmeasured) > 1
               else f"batch {b} was")
            + " left unmeasured (a larger --budget measures them)")


def stop_text(stop: Stop | None, unit: str = "sample") -> str:
    """Why the sweep ended where it did, in words; "" for no stop. Throughputs in ``unit``s
    a second (the report's own unit: a stop compares units with units)."""
    if stop is None:
        return ""
    b = stop.batch_size
    kind = stop.kind
    if kind == StopKind.LIST_DONE:
        return "every requested batch size was measured"
    if kind == StopKind.CAP:
        return f"reached the largest batch size ({CapStop.of(stop).largest})"
    if kind == StopKind.SKIPPED:
        why = SkippedStop.of(stop).not_to_fit()
        return f"batch {b} {_not_to_fit(why)}" if why else f"batch {b} skipped"
    if kind == StopKind.FAILED:
        return f"batch {b} ended as {FailedStop.of(stop).status}"
    if kind in (StopKind.OVER_LATENCY_LIMIT, StopKind.OVER_MEMORY_BUDGET):
        latency = kind == StopKind.OVER_LATENCY_LIMIT
        limit = LimitKind.LATENCY if latency else LimitKind.MEMORY
        over_stop = (OverLatencyLimitStop.of(stop) if latency
                     else OverMemoryBudgetStop.of(stop))
        over = OverLimit(b or 0, limit, over_stop.measured, over_stop.limit)
        return f"batch {b}: {limit_text(over)}"
    if kind == StopKind.PLATEAU:
        plateau = PlateauStop.of(stop)
        return (f"throughput plateaued: the last {plateau.doublings} doublings "
                f"together added less than {plateau.gain:.0%} over the best before them")
    if kind == StopKind.PREDICTED:
        return _predicted(stop, unit)
    if kind == StopKind.REPEATED_ERRORS:
        errors = RepeatedErrorsStop.of(stop)
        return (f"batches {_sizes(errors.batch_sizes)} in a row ended as "
                f"{' and '.join(errors.statuses)}; larger batch sizes "
                "were not tried")
    if kind == StopKind.BUDGET:
        return _budget(stop)
    if kind == StopKind.INTERRUPTED:
        return "interrupted by the user"
    if kind == StopKind.IN_PROGRESS:
        return "sweep in progress"
    if kind == StopKind.WATCH_DONE:
        return "watched steps done"
    if kind == StopKind.WATCH_CUT_SHORT:
        return "the loop ended before the watched steps were done"
    if kind == StopKind.DATA_ROWS:
        return (f"the training data gave {DataRowsStop.of(stop).rows} rows where batch {b} "
                "was asked for: larger batches cannot be drawn from it")
    if kind == StopKind.TRACES:
        return "recorded traces: nothing was swept"
    return NoteStop.of(stop).text


# -- the evidence --------------------------------------------------------------------------------
def _evidence_reason(r: EvidenceReason) -> str:
    """One reason in words, with its figure."""
    value = r.value if r.value is not None else 0.0
    if r.kind == EvidenceKind.DRIFT:
        moved = "more than tenfold" if value + 1 > MEANINGFUL_SPAN else fmt.pct(value)
        return f"the machine's speed drifted {moved} while it measured"
    if r.kind == EvidenceKind.OTHER_CPU:
        return f"other processes took {fmt.pct(value)} of the CPU"
    if r.kind == EvidenceKind.UNCOUNTED:
        return f"{fmt.pct(value)} of the pick's step ran in ops nobody counted"
    if r.kind == EvidenceKind.ROUNDS:
        return (f"the pick rests on {value:.0f} paired rounds"
                + (f" ({r.limit:.0f} wanted)" if r.grade != Grade.GOOD and r.limit else ""))
    if r.kind == EvidenceKind.STEPS:
        return (f"the figures rest on {value:.0f} timed steps"
                + (f" ({r.limit:.0f} wanted)" if r.grade != Grade.GOOD and r.limit else ""))
    if r.kind == EvidenceKind.NOT_SEPARATED:
        return "the rounds could not separate the sizes near the rule's bar"
    if r.kind == EvidenceKind.NO_ROUNDS:
        return ("no paired rounds ran (--no-rounds): the pick reads timings taken one after "
                "another, which a drift of the machine confounds")
    if r.kind == EvidenceKind.BUDGET:
        return f"--budget left {value:.0f} batch size{'s' if value != 1 else ''} unmeasured"
    return f"the pick's throughput interval spans {value:.3g}×"


_ADVICE: dict[EvidenceKind, str] = {
    EvidenceKind.DRIFT: "rerun when the machine is quieter (or on a dedicated runner)",
    EvidenceKind.OTHER_CPU: "rerun when the machine is quieter (or with --threads set to the "
                            "cores left free)",
    EvidenceKind.WIDE: "rerun when the machine is quieter (or with a larger --budget)",
}


def evidence_headline(evidence: Evidence | None) -> str:
    """The evidence's grade and what sets it, for the first line of every rendering:
    ``"evidence: noisy (the machine's speed drifted 27% while it measured)"``; an unreliable
    one says to rerun and how. "" without evidence (a trace, a prediction).

    Example:
        >>> from batchscope.records.evidence import Evidence, EvidenceReason
        >>> evidence_headline(Evidence(Grade.GOOD, [EvidenceReason(EvidenceKind.DRIFT,
        ...                                                        Grade.GOOD, 0.03, 0.2)]))
        "evidence: good (the machine's speed drifted 3% while it measured)"
    """
    if evidence is None:
        return ""
    shown = evidence.worst() or evidence.reasons
    why = "; ".join(_evidence_reason(r) for r in shown)
    text = f"evidence: {evidence.grade.value}" + (f" ({why})" if why else "")
    if evidence.grade == Grade.UNRELIABLE:
        advice = [_ADVICE[r.kind] for r in evidence.worst() if r.kind in _ADVICE]
        text += ": do not act on these numbers; " + (advice[0] if advice else "rerun")
    elif evidence.grade == Grade.NOISY:
        text += ": the pick holds within the intervals shown"
    return text


def evidence_reasons(evidence: Evidence | None) -> list[str]:
    """Every reason the grade rests on, graded, in words (the full list a report shows)."""
    if evidence is None:
        return []
    return [f"{r.grade.value}: {_evidence_reason(r)}" for r in evidence.reasons]


# -- the rule ----------------------------------------------------------------------------------
def limit_text(over: OverLimit) -> str:
    """Why a batch size is over a limit: "latency 12.0 ms is over the limit of 10.0 ms"."""
    if over.kind == LimitKind.LATENCY:
        return (f"latency {over.measured * 1e3:.1f} ms is over the limit of "
                f"{over.limit * 1e3:.1f} ms")
    return (f"peak memory {over.measured / MIB:.0f} MiB is over the budget of "
            f"{over.limit / MIB:.0f} MiB")


def _stalled(rule: Rule) -> str:
    n = rule.paired_stalled_rounds
    return (f"; {n} more left out, where a block ran over {STALL_FACTOR:g}x its size's "
            f"median step or the whole round over {DISTURBED_FACTOR:g}x the worker's typical "
            "one: a stall of the machine, not a speed of the size") if n else ""


def rule_text(rule: Rule, unit: str) -> str:
    """The rule that picked the recommended batch size, with its numbers, in ``unit``s."""
    if rule.paired_rounds is not None:
        near = (f"smallest batch size whose throughput is at least {rule.share:.0%} of the "
                f"fastest's (batch {rule.best_batch_size}) within noise, each size paired "
                f"with the fastest in the same round of interleaved timings "
                f"({rule.paired_rounds} rounds at the pick{_stalled(rule)}), so that the "
                "machine's drift cancels: the top of its 95% interval reaches that")
        if not rule.paired_separated:
            near += ("; the rounds did not separate the sizes near the bar, so another run "
                     "may pick another size of the equivalent set")
    else:
        near = (f"smallest batch size whose throughput is at least {rule.share:.0%} of the "
                f"best measured ({rule.best_value:,.1f} {unit}s/s at batch "
                f"{rule.best_batch_size}) within noise: the top of its 95% interval reaches "
                "that")
    if rule.kind == RuleKind.ENERGY:
        text = (f"smallest batch size whose energy per {unit} is within "
                f"{1 / rule.share - 1:.0%} of the lowest measured ({rule.best_value:.4g} "
                f"J/{unit} at batch {rule.best_batch_size})")
    elif rule.kind == RuleKind.ENERGY_UNAVAILABLE:
        text = ("energy objective unavailable (no energy readings: NVML needs an NVIDIA GPU); "
                "by throughput: " + near)
    elif rule.kind == RuleKind.ONLY_ONE:
        text = (f"the only batch size measured ({rule.best_value:,.1f} {unit}s/s); with one "
                "point there is no curve to choose from")
    else:
        text = near
    if rule.curve is not None and rule.curve.passed_over and rule.kind in (
            RuleKind.NEAR_BEST, RuleKind.ENERGY_UNAVAILABLE):
        text += "; " + passed_over_text(rule.curve, rule, unit)
    if rule.excluded:
        text += "; batch sizes over a limit were not considered (" + "; ".join(
            f"{e.batch_size}: {limit_text(e)}"
            for e in sorted(rule.excluded, key=lambda e: e.batch_size)) + ")"
    return text


def passed_over_text(curve: ThroughputCurve, rule: Rule, unit: str) -> str:
    """Why the rule passed over sizes whose interval reached its bar, with the fitted
    curve's numbers (classifiers/throughput_curve.py)."""
    sizes = curve.passed_over
    one = len(sizes) == 1
    reference = curve.reference_batch_size or rule.best_batch_size
    which = f"batch {sizes[0]}" if one else f"batches {_sizes(list(sizes))}"
    gives = _sizes([f"{curve_throughput(curve, b):,.1f}" for b in sizes])
    return (f"{which} also reached that bar but {'was' if one else 'were'} passed over: the "
            f"step time fitted through the {len(curve.batch_sizes)} sizes considered "
            f"({fmt.seconds(curve.shared_s)} a step shared by the batch plus "
            f"{fmt.seconds(curve.per_row_s)} a row) gives {'it' if one else 'them'} {gives} "
            f"{unit}s/s, under {rule.share:.0%} of its {curve_throughput(curve, reference):,.1f} "
            f"at batch {reference}, and {'its' if one else 'no'} interval "
            f"{'does not lie' if one else 'lies'} above the curve")


# -- watch's estimates ---------------------------------------------------------------------------
ESTIMATE_METHODS: dict[EstimateMethod, str] = {
    EstimateMethod.ROOFLINE_SCALED: (
        "estimate: every measured op scaled by the growth of its roofline time (FLOPs, state "
        "and activations grow with the batch, weights do not), Python time between ops kept; "
        "not a measurement"),
}


def estimate_text(method: EstimateMethod) -> str:
    """How ``watch`` estimated a batch size it did not measure, in words."""
    return ESTIMATE_METHODS[method]


# -- the serving what-if's pick ------------------------------------------------------------------
def _rows(n: int | None) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def serving_pick_text(what_if: WhatIf) -> str:
    """The policy and cap the serving what-if picks, and why: within the SLO where one was
    given, else at the highest rate offered, the picked policy's best cap against the other
    policy's, and whether the engine's own noise (its calibration repeats) ranks them."""
    slo = Slo(what_if.slo.ttft_s, what_if.slo.tpot_s)
    pick = what_if.recommendation
    if slo.given:
        if pick.policy is None or pick.max_rate_per_s is None:
            return (f"No batch cap meets {slo.describe()} under either policy, even at a light "
                    "load: every step is slower than the target.")
        rate = pick.max_rate_per_s
        other = [r for r in what_if.max_rate_within_slo
                 if r.policy != pick.policy and r.max_rate_per_s]
        other_best = max((r.max_rate_per_s or 0.0 for r in other), default=None)
        if other_best and other_best > rate:  # ahead, but within the noise: a tie
            text = (f"With {slo.describe()}, {pick.policy.value} batching capped at "
                    f"{_rows(pick.cap)} serves up to {rate:.3g} requests/s; "
                    f"{other[0].policy.value} batching reaches {other_best:.3g} requests/s")
        else:
            text = (f"The highest rate with {slo.describe()} is {rate:.3g} requests/s, with "
                    f"{pick.policy.value} batching capped at {_rows(pick.cap)}")
            if other_best:
                text += (f"; {other[0].policy.value} batching reaches at most "
                         f"{other_best:.3g} requests/s ({_less(rate, other_best)})")
        return text + _within_noise(what_if, rate / other_best if other_best else None) + "."
    policy = pick.policy or Policy.CONTINUOUS
    mine = what_if.best.get(policy)
    rival_policy = Policy.STATIC if policy == Policy.CONTINUOUS else Policy.CONTINUOUS
    rival = what_if.best.get(rival_policy)
    if mine is None:
        return ""
    text = (f"At the highest rate offered ({mine.rate_per_s:.3g} requests/s), {policy.value} "
            f"batching capped at {_rows(mine.cap)} serves {mine.throughput_tokens_per_s:.3g} "
            "tokens/s")
    if mine.throughput_band_tokens_per_s is not None:
        low, high = mine.throughput_band_tokens_per_s
        text += f" ({low:.3g}–{high:.3g} on the prediction's band)"
    if rival is None or not rival.throughput_tokens_per_s:
        return text + "."
    ratio = mine.throughput_tokens_per_s / rival.throughput_tokens_per_s
    if 1 / SAME_THROUGHPUT < ratio < SAME_THROUGHPUT:
        return text + (f", about what {rival_policy.value} batching serves at its best cap "
                       f"({rival.cap}: {rival.throughput_tokens_per_s:.3g}): with these step "
                       "times the policy changes little.")
    text += (f", {ratio:.2f}x the {rival.throughput_tokens_per_s:.3g} of {rival_policy.value} "
             f"batching at its best cap ({rival.cap})")
    return text + _within_noise(what_if, ratio) + "."


# Under this share short of the pick a shortfall reads as a percentage ("9% less"); from it,
# as a factor ("2.5x lower"): a ratio printed to two figures said "1x less" for 0.051 against
# 0.052 requests/s.
SHORTFALL_AS_PERCENT = 0.5


def _less(rate: float, other: float) -> str:
    """How far ``other`` falls short of ``rate`` (both positive, ``other`` the lower).

    Example:
        >>> _less(0.052, 0.051), _less(1.1, 1.0), _less(2.5, 1.0), _less(1.0, 1.0)
        ('2% less', '9% less', '2.5x lower', 'the same to 3 figures')
    """
    if f"{other:.3g}" == f"{rate:.3g}":
        return "the same to 3 figures"
    short = 1 - other / rate
    if short < SHORTFALL_AS_PERCENT:
        return f"{short:.0%} less" if short >= 0.005 else "under 1% less"
    return f"{rate / other:.2g}x lower"


def _within_noise(what_if: WhatIf, ratio: float | None) -> str:
    """". That is within this machine's noise ..." where one policy's lead over the other
    (``ratio``) is within the engine's own calibration repeats; "" otherwise."""
    noisiest = what_if.engine.noise() if what_if.engine is not None else None
    spread = noisiest.repeat_spread if noisiest is not None else None
    if noisiest is None or spread is None or ratio is None \
            or not 1 / (1 + spread) < ratio < 1 + spread:
        return ""
    return (f". That is within this machine's noise: the second-fastest repeat of the "
            f"engine's own {noisiest.policy.value} run at cap {noisiest.cap} took "
            f"{spread:.0%} longer than its fastest, so these figures do not rank the "
            "policies")


# -- what the step-time model assumed ---------------------------------------------------------
def assumption_text(assumption: Assumption) -> str:
    """One thing the step-time model assumed, in words."""
    a, family = assumption, assumption.family or "ops"
    if a.kind == AssumptionKind.MEASURED_ABOVE_RIDGE:
        return f"{family}: compute efficiency of the {family} ops measured above the ridge"
    if a.kind == AssumptionKind.PATH_SPEED:
        path = PathSpeedAssumption.of(a)
        return (f"{family}: never measured compute-bound; at the speed of its path in the "
                f"ceilings ({path.path} measured at "
                f"{path.flops_per_s / 1e9:,.0f} GFLOP/s)")
    if a.kind == AssumptionKind.AT_ROOF:
        return f"{family}: never measured compute-bound; assumed at the compute roof"
    p = NotProbedAssumption.of(a)
    sizes = p.batch_sizes
    where = (f"batch {sizes[0]}" if len(sizes) == 1
             else f"batches {', '.join(str(b) for b in sizes)}")
    return (f"convolutions and other per-row ops: not probed at {where} (skipped for cost: a "
            f"call estimated over {p.max_call_s:g} s, or past the probes' budget, half "
            f"the sweep's time within {p.budget_min_s:g}-{p.round_s:g} s, "
            f"{p.round_s:g} s under --predict-to); its time grows in proportion to the "
            f"rows from the largest size it was probed at")
