"""Where the model sits at its smallest batch: the step's time by bound, its bytes by kind, its
intensity against the ridge."""

from __future__ import annotations

from batchscope.records import (
    BatchResult,
    Report,
    Source,
    TimeBasis,
    TimeShare,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.words import (
    MAJORITY_SHARE,
    NOTABLE_SPEEDUP,
    Section,
    bound_words,
    module_of,
    peak_ridge_words,
    speedup_band,
)

# A step whose bytes are mostly weights is the textbook case for batching.
WEIGHT_DOMINATED_SHARE = 0.5

# A time share under this is left out of the share sentence (it would read "0%").
SMALL_SHARE = 0.005

def _device_share_sentence(share: TimeShare) -> str:
    parts = [
        f"{fmt.pct(share.memory)} is in memory-bound kernels",
        f"{fmt.pct(share.compute)} in compute-bound kernels",
        f"{fmt.pct(share.overhead)} in kernels too small to reach either roof",
    ]
    for key, words in (("uncounted", "in kernels of ops without a FLOP formula"),
                       ("communication", "in communication not hidden behind other kernels"),
                       ("transfer", "in copies between host and device")):
        if v.share_of(share, key) >= SMALL_SHARE:
            parts.append(f"{fmt.pct(v.share_of(share, key))} {words}")
    parts.append(f"{fmt.pct(share.idle)} with the GPU idle, waiting on the host "
                 "(kernel launches, Python, synchronisation)")
    return ", ".join(parts[:-1]) + " and " + parts[-1]

def _share_sentence(batch: BatchResult, share: TimeShare) -> str:
    if batch.time_basis == TimeBasis.DEVICE:
        return _device_share_sentence(share)
    parts = [
        f"{fmt.pct(share.memory)} is in memory-bound ops",
        f"{fmt.pct(share.compute)} in compute-bound ops",
        f"{fmt.pct(share.overhead)} in ops too small to reach either roof (overhead)",
        f"{fmt.pct(share.framework)} between ops (Python and dispatch)",
    ]
    if share.uncounted >= SMALL_SHARE:
        parts.append(f"{fmt.pct(share.uncounted)} in ops without a FLOP formula")
    return ", ".join(parts[:-1]) + " and " + parts[-1]

def _amortized_remainder(report: Report) -> str:
    """What batching can still amortize when the large ops are compute-bound, agreeing with
    the measured speedup: little when it is small, the fixed costs when it is large."""
    rec = report.recommendation
    speedup = rec.speedup_from_batching if rec is not None else None
    if rec is not None and v.speedup_within_noise(rec):
        return (" Batching can only amortize the small remainder (overhead and memory-bound "
                f"ops), and here its gain, {speedup_band(rec)}, was within noise.")
    if rec is not None and speedup is not None and speedup >= NOTABLE_SPEEDUP:
        return (f" Batching still lifted throughput {speedup_band(rec)}: what it shares is "
                "the fixed cost of every op and the time between ops, which a small batch "
                "pays per row and a large one spreads.")
    return (" Batching can only amortize the small remainder (overhead and memory-bound "
            "ops).")

def _noise_note(report: Report) -> str:
    """A sentence after a reading that says batching lifts throughput, where the measured
    speedup could not be told from noise; "" otherwise."""
    rec = report.recommendation
    if rec is not None and v.speedup_is_loss(rec):
        return (f" Here, though, the best throughput over batch {rec.speedup_baseline_batch}'s "
                f"was {speedup_band(rec)}: lower beyond noise, so this run shows a loss.")
    if rec is None or not v.speedup_within_noise(rec):
        return ""
    return (f" Here, though, the best throughput over batch {rec.speedup_baseline_batch}'s "
            f"was {speedup_band(rec)}: within noise, so this run shows no gain.")

def _bound_reading(report: Report, batch: BatchResult) -> str:
    dominant = v.dominant_bound(batch)
    total = v.step_bytes(batch) or 0.0
    weights = batch.bytes.weights if batch.bytes is not None else 0
    weight_share = weights / total if total else 0.0
    hw = v.hardware(report)
    # "Most" only where the largest share is a majority; else the share itself, as the
    # largest one (a step 28% in one kind of op is not mostly in it).
    share = v.share_of(batch.time_share, dominant) if dominant is not None else 0.0
    most = share >= MAJORITY_SHARE
    largest = f"The largest share of the step ({fmt.pct(share)}, less than half)"
    if dominant == "memory":
        return _memory_reading(report, batch, share, weight_share)
    if dominant == "compute":
        text = (("Most of the step's time" if most else largest)
                + " is in compute-bound ops: its large ops do enough FLOPs "
                "per byte to keep the arithmetic units busy, and a larger batch brings more "
                "FLOPs in proportion.")
        intensity, ridge = v.step_intensity(batch), v.ridge(report)
        if intensity is not None and ridge and intensity < ridge:
            text += (" The step as a whole is below the ridge only because many cheap "
                     "memory-bound ops move most of its bytes in a small part of its time.")
        return text + _amortized_remainder(report)
    if dominant in ("overhead", "framework"):
        return ("The step is dominated by fixed costs: its ops are too small to reach a roof "
                f"(this machine's measured cost of one small op is "
                f"{fmt.seconds(hw.overhead_s if hw is not None else None)}), and the Python "
                "between ops adds more. Batching spreads fixed costs over more rows, which "
                "lifts throughput through amortized overhead rather than weight reuse."
                + _noise_note(report))
    if dominant == "uncounted":
        return (("Most of the step" if most else largest)
                + " is in ops without a FLOP formula, which the roofline cannot "
                "place; the flags below list them.")
    if dominant == "idle":
        remedy = ("a larger batch (the same launches do more work), CUDA graphs or "
                  "torch.compile.")
        if not most:
            return (f"{largest} is the GPU sitting idle, waiting for the host to launch the "
                    "next kernel; fewer, larger kernels would shorten it: " + remedy
                    + _noise_note(report))
        return ("The step is launch-bound: the GPU sits idle most of the time, waiting for the "
                "host to launch the next kernel. Faster kernels would not help; fewer, larger "
                "ones would: " + remedy + _noise_note(report))
    if dominant == "communication":
        return (("The step waits mostly on communication" if most else
                 f"{largest} is communication")
                + " (collectives, NCCL's on a GPU or gloo's on a CPU, that no other work "
                "hides). A larger per-rank batch does more compute per collective, which "
                "amortizes it; overlapping it with backward (bucketing) hides it.")
    if dominant == "transfer":
        return (("The step waits mostly on copies between host and device" if most else
                 f"{largest} is copies between host and device")
                + ": pinned memory, non_blocking copies and keeping tensors on the GPU "
                "shorten them.")
    return ""

def _memory_reading(report: Report, batch: BatchResult, share: float,
                    weight_share: float) -> str:
    """The reading of a step whose largest share is in memory-bound ops. "So the step waits
    on memory" only where it follows from the numbers before it: a majority of the time in
    memory-bound ops and the step's intensity below the ridge. Above the ridge (a training
    CNN: its convolutions do the FLOPs, batch norm and the elementwise ops move the bytes)
    the sentence says why the two disagree."""
    intensity, ridge = v.step_intensity(batch), v.ridge(report)
    below = intensity is None or not ridge or intensity < ridge
    weights = weight_share >= WEIGHT_DOMINATED_SHARE
    if share >= MAJORITY_SHARE and below:
        if weights:
            return ("So the step waits on memory, and mostly on weights. Weights are read "
                    "once per step whatever the batch, so every extra row gets them for "
                    "free: this is the case batching is made for." + _noise_note(report))
        return ("So the step waits on memory, but mostly not on weights: bytes that grow "
                "with every row cannot be shared by a batch, so batching helps less than "
                "the memory-bound label suggests.")
    if share >= MAJORITY_SHARE:
        lead = (f"Yet most of the step's time ({fmt.pct(share)}) is in memory-bound ops: the "
                "step as a whole is above the ridge only because its compute-bound ops do "
                "most of its FLOPs in a small part of its time, and the many cheaper ops "
                "that move its bytes take the rest.")
    else:
        lead = (f"The largest share of the step ({fmt.pct(share)}, less than half) is in "
                "memory-bound ops.")
    if weights:
        return (lead + " Its bytes are mostly weights, read once per step whatever the "
                "batch, so every extra row gets them for free: this is the case batching is "
                "made for." + _noise_note(report))
    return (lead + " Its bytes are mostly not weights: bytes that grow with every row "
            "cannot be shared by a batch, so batching helps less than the memory-bound "
            "label suggests.")

def _first_paragraph(report: Report, b0: BatchResult, label: str) -> str:
    """How long a step takes at the smallest batch, and where its time goes."""
    lat = b0.latency_s
    median = lat.median if lat is not None else None
    steps = lat.n if lat is not None else "?"
    if v.from_trace(report):
        on_device = b0.time_basis == TimeBasis.DEVICE
        where = "on the GPU" if on_device else "on the CPU"
        span = ("from the step's start to its last kernel" if on_device
                else "its span on the host")
        first = (f"At {label} a step takes {fmt.seconds(median)} {where} "
                 f"(median of {steps} profiled steps in the trace, {span}; the "
                 "profiler was attached).")
    else:
        first = (f"At {label} a step takes {fmt.seconds(median)} (median of "
                 f"{steps} timed steps).")
    if b0.time_share is not None:
        first += f" Of the profiled step, {_share_sentence(b0, b0.time_share)}."
    return first

def _bytes_paragraph(report: Report, b0: BatchResult) -> str:
    """What one step moves, split by kind, and its intensity against the ridge point."""
    split, total = b0.bytes, v.step_bytes(b0)
    if split is None or not total:
        return ""
    if split.unsplit:
        text = (f"One step moves {fmt.nbytes(total)} for {fmt.flops(b0.flops)}, "
                "counted from the recorded shapes (a trace does not say which tensors "
                "are weights, so the bytes are not split).")
    else:
        # A watched loop has no make_inputs: its state is what its model was called with.
        given = ("the step was given" if report.run.source == Source.WATCH
                 else "built by make_inputs")
        text = (f"One step moves {fmt.nbytes(total)}: {fmt.nbytes(split.weights)} "
                f"of weights ({fmt.pct(split.weights / total)}), "
                f"{fmt.nbytes(split.state)} of inputs and state {given} "
                f"({fmt.pct(split.state / total)}) and "
                f"{fmt.nbytes(split.activations)} of activations, for "
                f"{fmt.flops(b0.flops)}.")
    intensity, ridge, hw = v.step_intensity(b0), v.ridge(report), v.hardware(report)
    if intensity is not None and ridge and hw is not None:
        side = "below" if intensity < ridge else "above"
        # The ridge is that of the dtype the matmuls ran in (autocast's under --amp), and of
        # its peak: named, since the layers' crossing below may quote a kernel family's.
        text += (f" That is {fmt.number(intensity)} FLOP per byte, {side} "
                 f"{peak_ridge_words(report, ridge)}.")
    return text

def where_it_sits(report: Report) -> Section | None:
    """Time share by bound and the bytes of the smallest measured batch."""
    measured = v.analysed(report)
    if not measured:
        return None
    b0 = measured[0]
    label = v.batch_label(report, b0)
    sec = Section("start", f"Where the model sits at {label}")
    sec.paragraphs.append(_first_paragraph(report, b0, label))
    moved = _bytes_paragraph(report, b0)
    if moved:
        sec.paragraphs.append(moved)
    reading = _bound_reading(report, b0)
    top = v.ops_by_time(b0)
    if top and top[0].time_s:
        op = top[0]
        where = f" in {module_of(op)}" if op.module else ""
        shapes = f" on {fmt.shapes(op.input_shapes)}" if op.input_shapes else ""
        reading += (f" The largest op is {op.name}{shapes}"
                    f"{where}, {fmt.pct(v.op_share(op, b0))} of the step, "
                    f"{bound_words(op.bound)}.")
    if reading:
        sec.paragraphs.append(reading.strip())
    return sec
