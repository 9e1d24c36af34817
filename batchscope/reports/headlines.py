"""The banners above the explanation: page faults, uncounted ops, a predicted pick, a trace's
verdict, data parallelism and accumulation."""

from __future__ import annotations

import math

from batchscope.classifiers.step_model import MIN_MARGIN, band_margin
from batchscope.records import (
    Report,
    Status,
    TimeBasis,
)
from batchscope.records.report import (
    AllocatorCheck,
    KeptBatch,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.words import MAJORITY_SHARE, accumulation_steps_text, sizes_text

# Page faults taking this share of a step are said at the top of every report (the
# classifiers flag them from 5%, PAGE_FAULT_FLAG_SHARE).
PAGE_FAULT_SHARE = 0.05

def allocator_headline(report: Report) -> str | None:
    """A sentence for the top of every report when memory mapped afresh each step (page
    faults) costs a notable share of a step: both allocators side by side where the sweep
    timed them (``allocator``), and whether keeping the buffers changes the pick. The share
    is the flag's (view.fault_share: at the measured cost of a fault where the side-by-side
    check measured one, else the estimate), so both say one figure."""
    hit = [(b, share) for b in v.measured(report)
           if (share := v.fault_share(report, b) or 0.0) >= PAGE_FAULT_SHARE]
    section = report.allocator
    rows = _timed_again(section) if section is not None else []
    if not hit and not rows:
        return None
    rec = report.recommendation
    picked = rec.batch_size if rec is not None else None
    other = rec.batch_size_without_page_faults if rec is not None else None
    mapped = ("the allocator hands large buffers back to the OS and maps them afresh every "
              "step, as a long-running process with the same allocator does")
    cost, measured = v.fault_cost(report)
    at = (f"at ~{cost * 1e6:.2g} µs a fault, measured side by side on this machine" if measured
          else f"at ~{cost * 1e6:g} µs a fault, an estimate")
    if hit:
        worst, worst_share = max(hit, key=lambda h: h[1])
        text = (f"Page faults take ~{fmt.pct(worst_share)} of the step at batch "
                f"{worst.batch_size} ({at}): {mapped}")
    else:
        text = f"Page faults were counted ({at}): {mapped}"
    side = _allocator_side_by_side(report)
    if side is None:
        text += (". A process whose allocator keeps them (jemalloc, tcmalloc, or glibc's "
                 "MALLOC_MMAP_THRESHOLD_ and MALLOC_TRIM_THRESHOLD_ above the largest buffer) "
                 "runs faster")
        if other is not None and picked is not None and other != picked:
            text += (f", and would be recommended batch {other} instead of {picked}: a "
                     "prediction from the estimated cost of a fault, with no interval "
                     "(measure with the allocator your job runs with)")
        return text + "."
    text += ". " + side
    if other is not None and picked is not None and other != picked and section is not None:
        text += (f". With the buffers kept the pick would be batch {other} "
                 f"({fmt.rate(section.throughput_per_s, v.unit(report))}) instead of {picked}. "
                 + _which_to_run(section, picked, other))
        return text
    if picked is not None and other is not None:
        text += f". The pick stays batch {picked} either way"
    return text + "."

def _which_to_run(section: AllocatorCheck, picked: int, other: int) -> str:
    """Which of the two picks to run, and how: the one with the buffers kept needs the
    allocator told so in the environment of the process that trains or serves (glibc reads
    its MALLOC_* variables once, at start-up; the sweep set them the same way, or through
    mallopt in its own worker). Only where the side-by-side timing showed a gain beyond
    noise is the setting worth asking for."""
    gain = next((r for r, _ in _timed_again(section) if r.batch_size == other), None)
    if gain is None or v.reading(gain.speedup_interval) != v.Reading.LIFT:
        return (f"Run batch {picked} as the process is: keeping the buffers gained nothing "
                f"beyond noise at batch {other}, so the setting buys no measured speed here.")
    env = " ".join(f"{k}={val}" for k, val in section.env.items())
    return (f"Run batch {other} with the buffers kept: start the process that runs it with "
            f"{env} in its environment, e.g. `env {env} python train.py` (glibc reads them "
            "at start-up: setting them from inside Python is too late), or with jemalloc or "
            f"tcmalloc through LD_PRELOAD. Without that setting run batch {picked}.")

def _finite(value: float) -> bool:
    return math.isfinite(value) and value >= 0

def uncounted_text(report: Report) -> str | None:
    """What the counts leave out, where ops nobody counted took a share of a step
    (``report.uncounted``): the op names and their shares; None where nothing did."""
    hole = report.uncounted
    if hole is None:
        return None
    named = ", ".join(f"{name} {fmt.pct(share)}"
                      for name, share in zip(hole.ops, hole.op_shares, strict=False))
    return (f"{fmt.pct(hole.share)} of the step at batch {hole.batch_size} ran in ops "
            f"batchscope could not count ({named})")

def uncounted_headline(report: Report) -> str | None:
    """A sentence for the top of every report where ops nobody counted took
    :data:`~batchscope.classifiers.coverage.HOLE_SHARE` of a step or more."""
    text = uncounted_text(report)
    if text is None:
        return None
    return (f"Uncounted: {text}. The FLOPs, bytes, roofline shares and B* leave them out, "
            "and the step-time model sees their time but not their work: it predicts no "
            "pick. An issue with the op's name helps batchscope count it.")

def predicted_pick_headline(report: Report) -> str | None:
    """A sentence for the top of every report where batch sizes the sweep did not measure,
    as the step-time model predicts them (each at the low end of its band), would move the
    pick (``prediction.pick``): labelled a prediction, with how to measure it."""
    pick = report.prediction.pick if report.prediction is not None else None
    if pick is None:
        return None
    chosen, best, instead = pick.batch_size, pick.best_batch_size, pick.instead_of
    chosen_t, best_t = pick.throughput_per_s, pick.best_throughput_per_s
    instead_t, margin = pick.instead_of_throughput_per_s, pick.margin
    if not all(b > 0 for b in (chosen, best, instead)) or \
            not all(_finite(r) for r in (chosen_t, best_t, instead_t, margin)):
        return None
    unit = v.unit(report)
    shown, shown_t = (best, best_t) if pick.measured else (chosen, chosen_t)
    # The band: its step within the model's largest miss (at least MIN_MARGIN) either way,
    # the one band of every predicted figure (view.predicted_band).
    margin = band_margin(margin)
    band = v.predicted_band(shown_t, margin)
    text = (f"Not measured, predicted: batch {shown} at {fmt.rate_band(shown_t, band, unit)}, "
            f"its step within ±{fmt.pct(margin)} (the step-time model's largest miss on the "
            f"sizes it forecast, at least {fmt.pct(MIN_MARGIN)}); the rule counts it at the "
            "low end. ")

    def measured_rate(size: int, throughput: float) -> str:
        batch = v.batch_of(report, size)
        return (f"{v.throughput_text(batch)} {unit}s/s" if batch is not None
                else fmt.rate(throughput, unit))
    if pick.measured:
        text += (f"If the prediction holds, the pick would be batch {chosen} "
                 f"({measured_rate(chosen, chosen_t)} measured) instead of {instead} "
                 f"({measured_rate(instead, instead_t)})")
    else:
        text += (f"If the prediction holds, it would be recommended instead of batch {instead} "
                 f"({measured_rate(instead, instead_t)} measured)")
    measure = sorted({best} | (set() if pick.measured else {chosen}))
    return text + f". Measure to be sure: --batch-sizes {','.join(map(str, measure))}."

# Kept buffers that ran less than this much faster at every batch size gained nothing the
# timing's noise could not explain.
NO_GAIN_SPEEDUP = 1.03

def _timed_again(section: AllocatorCheck) -> list[tuple[KeptBatch, float]]:
    """The batch sizes timed again with the buffers kept, each with its speedup."""
    return [(r, r.speedup) for r in section.batches
            if r.status == Status.OK and r.speedup is not None and r.speedup > 0]

def _allocator_side_by_side(report: Report) -> str | None:
    """The measured side-by-side sentence: each re-timed size's gain with its interval,
    "within noise" where it holds 1.0, "slower" where all of it lies below 1.0; None when
    the sweep did not re-time."""
    section = report.allocator
    rows = _timed_again(section) if section is not None else []
    if section is None or not rows:
        return None
    env = " ".join(f"{k}={val}" for k, val in section.env.items())
    if not section.taken:
        return (f"Timed again with {env}, the worker faulted as much: this machine's "
                "allocator ignores those settings (jemalloc or tcmalloc through LD_PRELOAD "
                "keep buffers too)")
    best, speedup = max(rows, key=lambda r: r[1])
    unit = v.unit(report)
    read = {r.batch_size: v.reading(r.speedup_interval) for r, _ in rows}
    noisy = [b for b, r in read.items() if r == v.Reading.NOISE]
    slower = [b for b, r in read.items() if r == v.Reading.LOSS]
    clear = [b for b, r in read.items() if r not in (v.Reading.NOISE, v.Reading.LOSS)]
    gain = fmt.ratio_band(speedup, best.speedup_interval)
    if not clear or (best.speedup_interval is None and speedup < NO_GAIN_SPEEDUP):
        text = (f"Timed again side by side with glibc keeping its buffers ({env}), no batch "
                f"size ran faster beyond noise (at best {gain}, batch {best.batch_size})")
        if slower:
            text += (f"; batch{'es' if len(slower) > 1 else ''} {sizes_text(slower)} ran slower "
                     "beyond noise with them kept")
        return text + ": on this machine they cost little"
    text = (f"Timed again side by side with glibc keeping its buffers ({env}), batch "
            f"{best.batch_size} ran {fmt.rate(best.kept_throughput_per_s, unit)} against "
            f"{fmt.rate(best.throughput_per_s, unit)}: {gain}")
    if best.batch_size in noisy:
        text += ", within noise"
    if len(rows) > 1 and best.speedup_interval is not None:
        text += (f"; the gain is beyond noise at batch{'es' if len(clear) > 1 else ''} "
                 f"{sizes_text(clear)}" if clear else "")
        if noisy:
            plural = "es" if len(noisy) > 1 else ""
            text += f" and within noise at batch{plural} {sizes_text(noisy)}"
        if slower:
            plural = "es" if len(slower) > 1 else ""
            text += (f", and batch{plural} {sizes_text(slower)} ran slower beyond noise with "
                     "the buffers kept")
    return text

# A trace's verdict, by the share holding the largest part of its step: said only where
# that share is a majority (MAJORITY_SHARE); below it, where the largest share went
# (_LARGEST_SHARE_WORDS), with no verdict.
_TRACE_VERDICTS = {
    "idle": "launch-bound, the GPU waiting on the host",
    "communication": "communication-bound", "transfer": "bound by host-device copies",
    "memory": "memory-bound", "compute": "compute-bound",
    "overhead": "bound by kernels too small to reach a roof",
    "uncounted": "mostly in ops without a FLOP formula",
}

_LARGEST_SHARE_WORDS = {
    "idle": "with the GPU idle, waiting on the host",
    "communication": "in communication not hidden behind other kernels",
    "transfer": "in copies between host and device",
    "memory": "in memory-bound kernels", "compute": "in compute-bound kernels",
    "overhead": "in kernels too small to reach a roof",
    "uncounted": "in ops without a FLOP formula",
    "framework": "between ops (Python and dispatch)",
}

def trace_headline(report: Report) -> str | None:
    """One sentence for a trace report without a recommendation: the step and its verdict."""
    measured = v.analysed(report)
    if not v.from_trace(report) or not measured:
        return None
    b0 = measured[0]
    median = b0.latency_s.median if b0.latency_s is not None else None
    dominant = v.dominant_bound(b0)
    where = "on the GPU" if b0.time_basis == TimeBasis.DEVICE else "on the CPU"
    label = v.batch_label(report, b0)
    text = f"{label[0].upper()}{label[1:]}: a step takes {fmt.seconds(median)} {where}"
    if dominant is None:
        return text + "."
    share = v.share_of(b0.time_share, dominant)
    if share >= MAJORITY_SHARE and dominant in _TRACE_VERDICTS:
        return text + f", {_TRACE_VERDICTS[dominant]} ({fmt.pct(share)} of the step)."
    # No kind of time holds most of the step: a verdict would overstate its largest part.
    words = _LARGEST_SHARE_WORDS.get(dominant)
    if words:
        text += (f", its largest share {words} ({fmt.pct(share)} of the step, "
                 "less than half)")
    return text + "."

def accumulation_headline(report: Report) -> str | None:
    """One sentence for a training run with --global-batch (one process): the accumulation
    steps that reach it at the recommended batch, and what a global batch costs."""
    acc = report.recommendation.accumulation if report.recommendation is not None else None
    if acc is None or not acc.accumulation_steps:
        return None
    return (f"{accumulation_steps_text(acc.accumulation_steps)} of the recommended batch "
            f"{acc.micro_batch} reach the global batch of {acc.global_batch_target} "
            f"({acc.global_batch_reached}): at most "
            f"{fmt.seconds(acc.time_per_global_batch_s)} per optimizer step (the "
            f"measured step, {fmt.seconds(acc.step_s)}, ran the optimizer every time; "
            "an accumulated step skips it).")

def data_parallel_headline(report: Report) -> str | None:
    """One sentence for the top of a data-parallel report: per-rank and global batch."""
    dp = report.distributed
    rec = dp.recommendation if dp is not None else None
    if dp is None or rec is None:
        return None
    row = next((r for r in dp.batches if r.batch_size == rec.per_rank_batch), None)
    throughput = row.global_throughput_per_s if row is not None else None
    text = (f"Data parallel over {dp.world_size} ranks: batch {rec.per_rank_batch} "
            f"per rank is a global batch of {rec.global_batch} "
            f"({fmt.rate(throughput, v.unit(report))} across ranks).")
    if rec.accumulation_steps:
        text += (f" {accumulation_steps_text(rec.accumulation_steps)} reach the global batch of "
                 f"{rec.global_batch_target} ({rec.global_batch_reached}).")
    return text
