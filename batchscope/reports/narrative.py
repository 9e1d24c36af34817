"""The explanation, in plain words with the user's numbers: the one home of the prose.

Every explanation sentence batchscope writes comes from here, from the typed
:class:`~batchscope.records.Report` alone (what report.json holds), so report.json
(``recommendation.explanation``, filled by :func:`batchscope.reports.json_report.document`),
report.html, summary.md and the terminal say the same thing in the same words. Four
questions, each a titled section: where the model sits at its smallest batch, what sets the
critical batch size B* (and whether it is finite), why state such as a KV cache does not
amortize, and what the throughput curve means for serving. The sections are plain strings;
each renderer escapes them for its own format.

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> print(explanation(load_report("batchscope-report/report.json")))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from batchscope.classifiers.data_parallel import share_allowance
from batchscope.classifiers.step_model import MIN_MARGIN, band_margin
from batchscope.records import (
    BatchResult,
    Bound,
    ControlTiming,
    DriftControl,
    Interval,
    OpStat,
    PredictionTerms,
    Recommendation,
    Report,
    RuleKind,
    Source,
    Status,
    TimeBasis,
    TimeShare,
)
from batchscope.records.interval import MEANINGFUL_SPAN
from batchscope.records.noise import DRIFT_FLOOR, STAMP_RESOLUTION_S
from batchscope.records.report import (
    AllocatorCheck,
    CommunicationTrend,
    DataParallelBatch,
    DataParallelPrediction,
    KeptBatch,
    Mode,
    SequencePoint,
    WrappedBy,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.flag_text import rule_text, serving_pick_text

# State under this share of a step's bytes at the largest batch is the inputs themselves
# rather than a cache that competes with the weights: a sentence, not a warning.
STATE_NEGLIGIBLE_SHARE = 0.10
# An op whose bytes are mostly state is "state-bound": it cannot amortize with the batch.
STATE_OP_SHARE = 0.5
# A step whose bytes are mostly weights is the textbook case for batching.
WEIGHT_DOMINATED_SHARE = 0.5
# Page faults taking this share of a step are said at the top of every report (the
# classifiers flag them from 5%, PAGE_FAULT_FLAG_SHARE).
PAGE_FAULT_SHARE = 0.05
# A speedup from batching this large is not "little to share": the prose says where it
# came from rather than denying it.
NOTABLE_SPEEDUP = 1.5
# Ops named in the state paragraph, at most.
MAX_STATE_OPS = 3
# What ``explanation`` says when no batch size was measured.
NOTHING_MEASURED = "No batch size was measured, so there is nothing to explain."
# A time share under this is left out of the share sentence (it would read "0%").
SMALL_SHARE = 0.005
# A share of the step from which it is "most of the step": words such as "mostly" or a
# verdict ("compute-bound", "launch-bound") need the share to hold a majority.
MAJORITY_SHARE = 0.5


@dataclass
class Section:
    """One titled part of the explanation."""

    key: str
    title: str
    paragraphs: list[str] = field(default_factory=list)


def _bound_words(bound: Bound) -> str:
    """``Bound.MEMORY`` -> ``"memory-bound"``; an op the roofline could not place says so."""
    if bound in (Bound.MEMORY, Bound.COMPUTE, Bound.OVERHEAD):
        return f"{bound.value}-bound"
    if bound == Bound.COMMUNICATION:
        return "communication (collectives: NCCL on a GPU, gloo on a CPU)"
    if bound == Bound.TRANSFER:
        return "a copy between host and device"
    return "not classified (no FLOP formula or no ceilings)"


def _module(op: OpStat) -> str:
    """The module path an op ran under, quoted (``*`` stands for several siblings)."""
    return f"“{op.module}”"


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


def speedup_band(rec: Recommendation) -> str:
    """The speedup from batching with its 95% interval: ``"82.4× (68.2–97.1×)"``."""
    return fmt.ratio_band(rec.speedup_from_batching, rec.speedup_interval)


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
                 f"{_peak_ridge_words(report, ridge)}.")
    return text


def _peak_ridge_words(report: Report, ridge: float) -> str:
    """The ridge point of the peak of the dtype the matmuls ran in, with whose it is."""
    hw = v.hardware(report)
    whose = "the datasheet's" if hw is not None and hw.source == "datasheet" \
        else "this machine's"
    return (f"the ridge point of {whose} {v.ridge_dtype(report)} peak "
            f"({fmt.number(ridge)} FLOP/byte)")


def _layers_ridge_words(report: Report, terms: PredictionTerms) -> str:
    """The ridge the layers' crossing was worked out against, naming its roof: the matmul
    roof's for a decoder's linears (critical_batch.predict_compute_bound_batch), the roofs
    of their families together for a mix, else (an older report) the dtype's peak."""
    peak, bandwidth = terms.peak_flops_per_s, terms.bandwidth_bytes_per_s
    if not peak or not bandwidth:
        ridge = v.ridge(report)
        return _peak_ridge_words(report, ridge) if ridge else "the ridge point"
    figure = f"{fmt.number(peak / bandwidth)} FLOP/byte"
    named = v.roof_name(report, peak)
    if named is None:
        return (f"the ridge point of the roofs their kernels run at, weighted by their FLOPs "
                f"({figure})")
    return f"the ridge point of the {named} ({figure})"


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
        where = f" in {_module(op)}" if op.module else ""
        shapes = f" on {fmt.shapes(op.input_shapes)}" if op.input_shapes else ""
        reading += (f" The largest op is {op.name}{shapes}"
                    f"{where}, {fmt.pct(v.op_share(op, b0))} of the step, "
                    f"{_bound_words(op.bound)}.")
    if reading:
        sec.paragraphs.append(reading.strip())
    return sec


def _intensity_path(report: Report) -> str:
    points = [(b.batch_size, i) for b in v.measured(report)
              if (i := v.step_intensity(b)) is not None]
    if len(points) < 2:
        return ""
    first, last = points[0], points[-1]
    return (f"The step's intensity goes from {fmt.number(first[1])} FLOP/byte at batch "
            f"{first[0]} to {fmt.number(last[1])} at batch {last[0]}.")


def _rows(n: float) -> str:
    """``64.0`` -> ``"64 rows"``; ``1.0`` -> ``"1 row"``."""
    text = fmt.number(n)
    return f"{text} row" if text == "1" else f"{text} rows"


def _prediction(rec: Recommendation, terms: PredictionTerms) -> str:
    predicted = rec.predicted_critical_batch
    if predicted is None or not terms.per_row_s:
        return ("B* could not be predicted: this run has no measured ceilings or no counted "
                "FLOPs.")
    return (f"On this machine's roofline a step costs {fmt.seconds(terms.shared_s)} "
            "that the whole batch shares (reading the weights once, fixed per-op costs) plus "
            f"{fmt.seconds(terms.per_row_s)} for every row (its FLOPs, activations and "
            "state). Batching pays until the per-row time catches up with the shared time: "
            f"B* ≈ {_rows(predicted)}{_bstar_band(rec)}.")


# What ``recommendation.predicted_critical_batch_interval`` is: B* under the ceilings' best
# repeats and under their medians (assemble.py), a range, not a statistical interval.
BSTAR_RANGE_WORDS = "the range under the roofs' best and median repeats"


def _bstar_band(rec: Recommendation) -> str:
    """B*'s range in words: B* under the roofs' best repeats and under their medians (its
    counts are exact; the roofs they are divided by carry the noise). A range, not a 95%
    interval."""
    band = rec.predicted_critical_batch_interval
    if band is None or band.low == band.high:
        return ""
    return f" ({fmt.number(band.low)}–{fmt.number(band.high)}: {BSTAR_RANGE_WORDS})"


def _layers(report: Report, rec: Recommendation, terms: PredictionTerms) -> str:
    """Where the layers that read weights or state turn compute-bound, or that they never do."""
    ridge_text = _layers_ridge_words(report, terms)
    flops_row, bytes_row = terms.layers_flops_per_row, terms.layers_bytes_per_row
    fixed = fmt.nbytes(terms.layers_fixed_bytes)
    per_row = (f"each row adds {fmt.flops(flops_row)} and {fmt.nbytes(bytes_row)} of its own "
               f"bytes ({fmt.nbytes(terms.layers_state_bytes_per_row or 0)} of it state)")
    crossing = rec.predicted_compute_bound_batch
    if rec.predicted_compute_bound_infinite:
        text = ("The layers that read weights or state never turn compute-bound, however "
                "large the batch")
        if flops_row and bytes_row:
            text += (f": {per_row}, {fmt.number(flops_row / bytes_row)} FLOP/byte, below "
                     f"{ridge_text}; batching amortizes only the weights")
        return text + "."
    if crossing is None:
        return ""
    if crossing <= 1.0:
        speedup = rec.speedup_from_batching
        shared = ("a larger batch has little weight reading to share" if speedup is None
                  or speedup < NOTABLE_SPEEDUP else
                  f"the {speedup_band(rec)} that batching measured comes from fixed per-op "
                  "costs and time between ops, not from sharing weight reads")
        if v.speedup_within_noise(rec):
            shared = (f"a larger batch has little weight reading to share: batching's gain, "
                      f"{speedup_band(rec)}, is within noise")
        return ("The layers do more FLOPs per byte than "
                f"{ridge_text} already at batch 1 (moving the {fixed} they read whatever the "
                f"batch takes less time than their FLOPs): they are compute-bound from the start "
                f"and {shared}.")
    return (f"The layers that read weights or state move {fixed} per step whatever the batch, "
            f"and {per_row}: they reach {ridge_text} at about "
            f"{fmt.number(crossing)} rows and are compute-bound from there. "
            f"{_intensity_path(report)}").strip()


def _knee(report: Report, rec: Recommendation) -> str:
    """The measured knee against the predicted B*, and how far efficiency alone moves it."""
    knee, predicted, measured = (rec.measured_knee_batch, rec.predicted_critical_batch,
                                 v.measured(report))
    if knee is None or not measured:
        return ""
    band = rec.measured_knee_interval
    knee_band = (f" ({fmt.number(band.low)}–{fmt.number(band.high)} at 95%)"
                 if band is not None else "")
    if rec.measured_knee_within_sweep:
        text = f"Measured, the throughput curve bends at a knee of about {_rows(knee)}{knee_band}"
    else:
        text = (f"Measured, the latency was still flat at the largest batch "
                f"({measured[-1].batch_size}): the throughput knee lies beyond the sweep "
                f"(the fit puts it near {fmt.number(knee)}{knee_band})")
    predicted_band = rec.predicted_critical_batch_interval
    if predicted and band is not None and predicted_band is not None:
        # The knee's interval is a 95% bootstrap one; B*'s is a range (best vs median roofs).
        spread = predicted_band.low != predicted_band.high
        what = "B*'s range" if spread else "B*"
        agree = (f"the knee's 95% interval reaches {what}" if band.overlaps(predicted_band)
                 else f"the knee's 95% interval lies clear of {what}")
        shown = (f" ({fmt.number(predicted_band.low)}–{fmt.number(predicted_band.high)}, "
                 f"{BSTAR_RANGE_WORDS})" if spread else "")
        text += f", against the predicted {fmt.number(predicted)}{shown}: {agree}."
    else:
        text += f", against the predicted {fmt.number(predicted)}." if predicted else "."
    eff = [(b.batch_size, e) for b in measured if (e := v.step_efficiency(b))]
    if predicted is None or len(eff) < 2:
        return text
    (n0, e0), (n1, e1) = eff[0], eff[-1]
    closer = ("Larger batches run closer to their roof (fixed per-op costs weigh less)"
              if e1 >= e0 else "Larger batches run further below their roof")
    text += (f" The prediction assumes every op runs at its roof; measured, batch {n0} ran at "
             f"{fmt.pct(e0)} of its roofline speed and batch {n1} at {fmt.pct(e1)}. {closer}, "
             f"which by itself moves the knee {fmt.ratio(e1 / e0)}, from the predicted "
             f"{fmt.number(predicted)} to about {fmt.number(predicted * e1 / e0)}.")
    if max(e0, e1) > 1:
        text += (" Over 100% means the step beat the measured ceilings: they are low for this "
                 "machine, see the flags under the method.")
    return text


def critical_batch(report: Report) -> Section | None:
    """What sets B*, where the layers turn compute-bound, and why the knee differs."""
    rec = report.recommendation
    if rec is None:
        return None
    terms = rec.prediction
    sec = Section("bstar", "What sets the critical batch size B*")
    if rec.work_varies_with_inputs:
        sec.paragraphs.append(
            "The work per step changed with the inputs rather than with the batch size (the "
            "weights read per step differ between batch sizes; see the flags), so the "
            "measured curve mixes batching with different work, and B* is not predicted.")
        return sec
    parts = [_prediction(rec, terms), _layers(report, rec, terms), _knee(report, rec)]
    sec.paragraphs += [p for p in parts if p]
    hole = uncounted_text(report)
    if hole is not None and (rec.predicted_critical_batch is not None
                             or rec.predicted_compute_bound_batch is not None):
        sec.paragraphs.append(f"These predictions read the counted ops only: {hole}, "
                              "whose work no roof can place.")
    return sec


def _state_ops(batch: BatchResult) -> list[OpStat]:
    out = []
    for op in v.ops_by_time(batch):
        total = op.bytes.total
        if total and op.bytes.state / total >= STATE_OP_SHARE:
            out.append(op)
    return out[:MAX_STATE_OPS]


def _state_ops_sentence(lo: BatchResult, hi: BatchResult) -> str:
    """The ops that read state, where they sit on the roofline at both ends of the sweep."""
    ops = _state_ops(hi)
    if not ops:
        return ""
    first = {o.op_id: o for o in lo.ops}
    names = []
    for op in ops:
        before = first.get(op.op_id)
        names.append(f"{op.name}{' in ' + _module(op) if op.module else ''} "
                     f"(intensity {fmt.number(before.intensity if before else None)} FLOP/byte "
                     f"at batch {lo.batch_size}, {fmt.number(op.intensity)} at batch "
                     f"{hi.batch_size}, {_bound_words(op.bound)})")
    return ("The ops that read it stay where they were on the roofline as the batch grows: "
            + "; ".join(names) + ". A longer context or a larger cache makes state a bigger "
            "share of every step, and batching stops paying sooner.")


def state(report: Report) -> Section | None:
    """Weights amortize, state does not: per-row bytes at the smallest and largest batch."""
    pts = [(b, b.bytes) for b in v.measured(report) if b.bytes is not None]
    if not pts:
        return None
    (lo, lo_bytes), (hi, hi_bytes) = pts[0], pts[-1]
    n0, n1 = lo.batch_size, hi.batch_size
    w0, s0 = lo_bytes.weights, lo_bytes.state
    s1 = hi_bytes.state
    total1, total0 = v.step_bytes(hi) or 1.0, v.step_bytes(lo) or 1.0
    negligible = s1 / total1 < STATE_NEGLIGIBLE_SHARE
    title = ("Weights amortize; nothing here that does not" if negligible
             else "Why state such as a KV cache does not amortize")
    sec = Section("state", title)
    if n1 > n0:
        sec.paragraphs.append(
            f"Weights are {fmt.nbytes(w0)} per step at every batch size, read once and shared "
            f"by every row: per row they fall from {fmt.nbytes(w0 / n0)} at batch {n0} to "
            f"{fmt.nbytes(hi_bytes.weights / n1)} at batch {n1}.")
    else:
        sec.paragraphs.append(f"Weights are {fmt.nbytes(w0)} per step, read once and shared by "
                              "every row of a batch; only one batch size was measured.")
    # A watched loop has no make_inputs: its state is what its model was called with.
    watched = report.run.source == Source.WATCH
    if negligible:
        given = "the step was given" if watched else "built by make_inputs"
        sec.paragraphs.append(
            f"Inputs and state {given} take {fmt.nbytes(s1 / n1)} per row "
            f"({fmt.pct(s1 / total1)} of the step's bytes at batch {n1}): each row brings its "
            "own, so they never amortize, but at this size they do not hold the weights back. "
            "Activations grow with the batch, as they must "
            f"({fmt.nbytes(hi_bytes.activations / n1)} per row at batch {n1}).")
        return sec
    sec.paragraphs.append(
        f"State (tensors {'the step was given' if watched else 'make_inputs built'} that "
        "every step reads again, such as a KV cache) is "
        f"{fmt.nbytes(s0 / n0)} per row at batch {n0} and {fmt.nbytes(s1 / n1)} per row at "
        f"batch {n1}: every row owns its own, so no batch can share it. It is "
        f"{fmt.pct(s1 / total1)} of the step's bytes at batch {n1}, up from "
        f"{fmt.pct(s0 / total0)} at batch {n0}.")
    ops = _state_ops_sentence(lo, hi)
    if ops:
        sec.paragraphs.append(ops)
    return sec


def speedup_text(rec: Recommendation) -> str:
    """What batching did to throughput, read from the speedup's interval: a lift only where
    its low end is above 1.0, a loss only where its high end is below it, else "within
    noise"; "" with one batch size.

    Example:
        >>> from batchscope.records import Rule
        >>> rec = Recommendation(8, Rule(RuleKind.NEAR_BEST, 0.9, 8, 90.0), 1.08, 1, None,
        ...                      None, False, speedup_interval=Interval(0.97, 1.2))
        >>> speedup_text(rec)  # doctest: +NORMALIZE_WHITESPACE
        "Batching's gain over batch 1 is within noise: the best throughput is 1.1×
        (0.97–1.2×) batch 1's"
        >>> import dataclasses
        >>> speedup_text(dataclasses.replace(rec, speedup_interval=Interval(1.02, 1.2)))
        'Batching lifts throughput 1.1× (1.0–1.2×) over batch 1'
        >>> speedup_text(dataclasses.replace(rec, speedup_from_batching=0.8,
        ...                                  speedup_interval=Interval(0.7, 0.9)))
        ... # doctest: +NORMALIZE_WHITESPACE
        "Batching lowers throughput beyond noise: the best throughput is 0.8× (0.7–0.9×)
        batch 1's"
    """
    speedup, base = rec.speedup_from_batching, rec.speedup_baseline_batch
    if speedup is None:
        return ""
    if v.speedup_is_loss(rec):
        return (f"Batching lowers throughput beyond noise: the best throughput is "
                f"{speedup_band(rec)} batch {base}'s")
    if v.speedup_within_noise(rec):
        return (f"Batching's gain over batch {base} is within noise: the best throughput is "
                f"{speedup_band(rec)} batch {base}'s")
    return f"Batching lifts throughput {speedup_band(rec)} over batch {base}"


def _sizes(sizes: list[int]) -> str:
    """``[256, 512, 1024]`` -> ``"256, 512 and 1024"``."""
    words = [str(b) for b in sizes]
    return words[0] if len(words) == 1 else f"{', '.join(words[:-1])} and {words[-1]}"


def equivalence_text(rec: Recommendation) -> str:
    """Which batch sizes noise cannot tell from the pick, and the rule that chose among
    them; "" where the rule is not the throughput rule (energy, one size) or the report
    predates intervals.

    Example:
        >>> from batchscope.records import Rule
        >>> rec = Recommendation(256, Rule(RuleKind.NEAR_BEST, 0.9, 512, 9.0), 3.0, 1, None,
        ...                      None, False, equivalent_batch_sizes=[256, 512, 1024])
        >>> equivalence_text(rec)  # doctest: +NORMALIZE_WHITESPACE
        'Batch sizes 256, 512 and 1024 are equivalent within noise; the rule picks the
        smallest whose throughput could be within 90% of the best.'
    """
    sizes = rec.equivalent_batch_sizes
    if not sizes or rec.rule.kind not in (RuleKind.NEAR_BEST, RuleKind.ENERGY_UNAVAILABLE):
        return ""
    share = fmt.pct(rec.near_best_share)
    if sizes == [rec.batch_size]:
        return (f"No other batch size measured is equivalent to batch {rec.batch_size} within "
                f"noise: no other's throughput interval reaches {share} of the bottom of the "
                "best's.")
    curve = rec.rule.curve
    fitted = (" and that the step time fitted through the sizes considered does not put "
              "below that share" if curve is not None and curve.passed_over else "")
    return (f"Batch sizes {_sizes(sizes)} are equivalent within noise; the rule picks the "
            f"smallest whose throughput could be within {share} of the best{fitted}.")


def share_text(rec: Recommendation, unit: str) -> str:
    """The pick's throughput as a share of the best's, with its interval: what the rule
    gave up for a smaller batch; "" where the pick is the best."""
    share = rec.pick_share_of_best
    if share is None or rec.batch_size == rec.best_batch_size:
        return ""
    return (f"Batch {rec.batch_size} gives {fmt.pct_band(share, rec.pick_share_of_best_interval)} "
            f"of the best measured throughput (batch {rec.best_batch_size}, "
            f"{fmt.rate(rec.best_throughput_per_s, unit)}).")


def drift_text(report: Report) -> str:
    """How far the run's timings drifted, in words with its numbers, and what every interval
    carries for it: a sweep's plan against its decision rounds (run.rounds), ``watch``'s
    first timed steps against their repeat; "" for a report written before intervals.

    Example:
        >>> from batchscope.records import ControlTiming, DriftControl, ModelInfo, RunInfo
        >>> timings = [ControlTiming(1, 281e-6, 364e-6, 350e-6, 370e-6),
        ...            ControlTiming(512, 8e-4, 8.4e-4, 8.3e-4, 8.5e-4)]
        >>> run = RunInfo(drift=DriftControl(1, 281e-6, 364e-6, 12.2, 0.17, timings),
        ...               drift_allowance=0.17)
        >>> drift_text(Report(ModelInfo("m.py"), None, [], None, run))
        ... # doctest: +NORMALIZE_WHITESPACE
        'Batches 1 and 512 were timed again: batch 1 timed 281 µs at first and 364 µs 12 s
        later (30%), batch 512 800 µs and 840 µs (5%). Their median change, 17%, is the
        drift every interval here includes; a size timed twice spans both timings.'
    """
    drift, allowance, rounds = report.run.drift, report.run.drift_allowance, report.run.rounds
    if drift is None and allowance is None:
        return ""
    if drift is None:
        what = ("No decision rounds ran (--no-rounds): the pick reads timings taken one after "
                "another, and" if report.run.source == Source.SWEEP else "Nothing was timed "
                "twice, so")
        return (f"{what} every interval here carries the floor of "
                f"{fmt.pct(allowance or DRIFT_FLOOR)} for the machine's drift.")
    timings = drift.timings or [ControlTiming(drift.batch_size, drift.first_latency_s,
                                              drift.control_latency_s, drift.control_latency_s,
                                              drift.control_latency_s)]
    ref, others = timings[0], timings[1:]
    if rounds is not None:
        text = (f"The decision rounds timed {_batches([t.batch_size for t in timings])} side by "
                f"side, each once a round in a shuffled order, in {rounds.rounds} rounds over "
                f"{rounds.workers} worker process{'es' if rounds.workers != 1 else ''}: batch "
                f"{ref.batch_size} timed {fmt.seconds(ref.first_latency_s)} in the sweep and "
                f"{fmt.seconds(ref.control_latency_s)} in the rounds "
                f"({_change(ref)})")
    elif report.run.source == Source.WATCH:
        text = (f"The timed steps were timed again at the end: "
                f"{fmt.seconds(ref.first_latency_s)} at first and "
                f"{fmt.seconds(ref.control_latency_s)} {drift.seconds_apart:,.0f} s later "
                f"({_change(ref)})")
    else:
        text = (f"{_batches([t.batch_size for t in timings]).capitalize()} "
                f"{'were' if others else 'was'} timed again: batch {ref.batch_size} timed "
                f"{fmt.seconds(ref.first_latency_s)} at first and "
                f"{fmt.seconds(ref.control_latency_s)} {drift.seconds_apart:,.0f} s later "
                f"({_change(ref)})")
    text += "".join(f", batch {t.batch_size} {fmt.seconds(t.first_latency_s)} and "
                    f"{fmt.seconds(t.control_latency_s)} ({_change(t)})" for t in others)
    what = "Their median change" if others else "That change"
    allocator = [t for t in timings if t.allocator_change()]
    if allocator:
        faults = ", ".join(f"batch {t.batch_size} {t.first_page_faults_per_step:,.0f} and "
                           f"{t.control_page_faults_per_step:,.0f}" for t in allocator)
        text += (f". The page faults a step of {_batches([t.batch_size for t in allocator])} "
                 f"moved with it ({faults}): the two processes' allocators differed, not "
                 "the machine's speed, so each spans both its timings and widens nothing else")
        what = ("The median change of the others" if len(allocator) < len(timings)
                else "The drift left")
    if allowance is not None and drift.drift < allowance:
        text += (f". {what}, {_moved(drift.drift)}, is under the floor of "
                 f"{fmt.pct(allowance)} that every interval here carries for drift; a "
                 "size timed twice spans both timings.")
    else:
        text += (f". {what}, {_moved(drift.drift)}, is the drift every interval here "
                 "includes; a size timed twice spans both timings.")
    if rounds is not None:
        text += " " + rounds_text(report)
    return text + communication_drift_text(drift)


def _moved(change: float) -> str:
    """A relative change as a percentage, "more than tenfold" past what one could mean."""
    return "more than tenfold" if change + 1 > MEANINGFUL_SPAN else fmt.pct(change)


def _change(timing: ControlTiming) -> str:
    """How far a size's two timings moved: a percentage, or "more than tenfold apart" where
    a percentage would mean nothing (issue 47: "18.5 µs and 16 ms (86383%)")."""
    first, again = timing.first_latency_s, timing.control_latency_s
    if first > 0 and again > 0 and max(first / again, again / first) > MEANINGFUL_SPAN:
        return "more than tenfold apart"
    return fmt.pct(timing.change)


def rounds_text(report: Report) -> str:
    """What the decision rounds show beyond the drift: how far the machine's speed moved
    from round to round, and how the pick read them; "" without rounds."""
    rounds = report.run.rounds
    if rounds is None:
        return ""
    moved = (f"From one round to the next the machine's speed moved "
             f"{fmt.pct(rounds.machine_drift)} (the quartiles of the rounds' speeds); "
             if rounds.machine_drift is not None else "")
    return (f"{moved}the pick reads each size's throughput over the fastest's (batch "
            f"{rounds.reference}) within the same round, so a change of the machine's speed "
            "common to a round cancels"
            + ("." if rounds.decided else
               f", and the rounds ended ({rounds.stopped_by.value.replace('_', ' ')}) before "
               "they separated the sizes near the rule's bar: the equivalent set says which "
               "another run may pick."))


def communication_drift_text(drift: DriftControl) -> str:
    """On data-parallel ranks, the control's communication shares in words: how far the
    share moved from the first launch of the ranks to the control's, and the allowance
    every share's interval carries; "" elsewhere.

    Example:
        >>> t = ControlTiming(2, 0.01, 0.011, 0.0105, 0.0115, 0.30, 0.44)
        >>> communication_drift_text(DriftControl(2, 0.01, 0.011, 30.0, 0.1, [t],
        ...                                       communication_drift=t.communication_change))
        ... # doctest: +NORMALIZE_WHITESPACE
        " The communication share at batch 2 was 30% in the first launch of the ranks and
        44% in the second's (1.47x): every share's interval here allows for 47%."
    """
    shared = [t for t in drift.timings if t.first_communication_share is not None
              and t.control_communication_share is not None]
    if not shared:
        return ""
    parts = [f"at batch {t.batch_size} was {_dp_pct(t.first_communication_share or 0.0)} in "
             f"the first launch of the ranks and {_dp_pct(t.control_communication_share or 0.0)}"
             " in the second's"
             + (f" ({1 + t.communication_change:.2f}x)" if t.communication_change is not None
                else "")
             for t in shared]
    allowance = share_allowance(drift)
    if drift.communication_drift is None:
        floor = " (the floor: a share of 0 has no ratio to measure a change by)"
    elif drift.communication_drift < allowance:
        floor = f" (the floor; the change measured was {fmt.pct(drift.communication_drift)})"
    else:
        floor = ""
    return (f" The communication share {'; '.join(parts)}: every share's interval here "
            f"allows for {fmt.pct(allowance)}{floor}.")


def _batches(sizes: list[int]) -> str:
    """"batch 4" or "batches 1, 8 and 16"."""
    if len(sizes) == 1:
        return f"batch {sizes[0]}"
    return "batches " + ", ".join(str(b) for b in sizes[:-1]) + f" and {sizes[-1]}"


def _verdict(report: Report, rec: Recommendation) -> str:
    """The speedup from batching, the recommended batch and its rule, the batch sizes noise
    cannot tell from it, and the cap hint."""
    n = rec.batch_size
    text = f"Batch {n} is recommended"
    if rec.speedup_from_batching is not None:
        text = f"{speedup_text(rec)}, and batch {n} is recommended"
    text += f": {rule_text(rec.rule, v.unit(report))}."
    for extra in (equivalence_text(rec), share_text(rec, v.unit(report))):
        if extra:
            text += " " + extra
    limit = v.latency_limit_s(report)
    if limit and not rec.rule.excluded:  # else the rule names the batch sizes over it
        text += (f" The run was given a latency limit of {fmt.seconds(limit)} per step, and "
                 "every batch size measured stayed within it.")
    measured = v.measured(report)
    if rec.still_rising_at_cap and measured:
        last, before = measured[-1], measured[-2] if len(measured) > 1 else None
        gain, band = v.gain_over(last, before)
        if before is not None and v.within_noise(band):
            text += (f" Throughput was highest at the largest batch tried ({last.batch_size}), "
                     f"though within noise of batch {before.batch_size} "
                     f"({fmt.ratio_band(gain, band)} its throughput): raise --max-batch to see "
                     "whether it still rises.")
        else:
            text += (" Throughput was still rising at the largest batch tried "
                     f"({last.batch_size}): raise --max-batch to see where it levels off.")
    return text


def _not_served(report: Report) -> bool:
    """A training step, or a watched loop: nothing here is served."""
    return (report.model.mode == Mode.TRAIN or report.run.watch is not None
            or report.run.source == Source.WATCH)


def serving(report: Report) -> Section | None:
    """The recommendation, then static batches against continuous batching at its numbers."""
    rec, rec_batch = report.recommendation, v.recommended(report)
    if rec is None or rec_batch is None:
        return None
    unit, n = v.unit(report), rec_batch.batch_size
    thr, step = rec_batch.throughput_per_s, v.latency_median(rec_batch)
    if _not_served(report):
        # A training step (or a watched loop) is not served: the verdict alone.
        sec = Section("serving", "What the curve means for this run")
        sec.paragraphs += [p for p in (_verdict(report, rec), drift_text(report)) if p]
        return sec
    sec = Section("serving", "What the curve means for serving")
    sec.paragraphs += [p for p in (_verdict(report, rec), drift_text(report)) if p]
    rate_text = f"{v.throughput_text(rec_batch)} {unit}s/s"
    if n == 1:
        sec.paragraphs.append(
            f"At batch 1 that is {rate_text} with a step of {v.latency_text(rec_batch)}: no "
            "larger batch measured gave enough more throughput, beyond noise, to be worth its "
            "latency, so serve requests one at a time; batching them would only make each "
            "one wait.")
        what_if = _what_if_paragraph(report)
        if what_if:
            sec.paragraphs.append(what_if)
        return sec
    sec.paragraphs.append(
        f"Every throughput here is for a full batch: {n} rows in every step. At batch {n} "
        f"that is {rate_text} with a step of {v.latency_text(rec_batch)}, so each row gets "
        f"{fmt.rate(report.model.units_per_row / step if step else None, unit)}.")
    if step and thr:
        half = max(n // 2, 1)
        half_batch = v.batch_of(report, half)
        text = (f"A static batch starts {n} requests together and runs until the last one is "
                "done; slots whose requests finish early sit idle. Half full on average, it "
                f"still pays {fmt.seconds(step)} per step but yields "
                f"{half * report.model.units_per_row} {unit}s: "
                f"{_half_yield(rec_batch, half * report.model.units_per_row, unit)}")
        if half_batch:
            text += _half_full(report, rec_batch, half_batch, half)
        sec.paragraphs.append(text + ".")
        sec.paragraphs.append(
            "Continuous batching (in-flight batching, as in vLLM, TGI or TensorRT-LLM; dynamic "
            "batching with a maximum wait for one-step requests, as in Triton or TorchServe) "
            f"admits a waiting request as soon as a slot frees, so the batch stays at {n} and "
            f"the {fmt.rate(thr, unit)} holds while requests are queued. With fewer than {n} "
            "in flight the batch runs partly empty and throughput follows the measured curve "
            "down; the latency of each step follows it up.")
    what_if = _what_if_paragraph(report)
    if what_if:
        sec.paragraphs.append(what_if)
    return sec


def _half_yield(full: BatchResult, units: int, unit: str) -> str:
    """What a half-full static batch yields a second, with the interval of its step."""
    step = v.latency_median(full)
    band = full.latency_interval_s.reciprocal(units) if full.latency_interval_s else None
    return fmt.rate_band(units / step if step else None, band, unit)


def _half_full(report: Report, full: BatchResult, half_batch: BatchResult, half: int) -> str:
    """A static batch of ``full``'s size run half full, against batch ``half`` kept full: the
    half-full yield's interval is the full step's, and the comparison is said only where the
    two intervals do not overlap."""
    unit, units = v.unit(report), half * report.model.units_per_row
    measured = f"measured at {v.throughput_text(half_batch)} {unit}s/s"
    step_band, kept = full.latency_interval_s, half_batch.throughput_interval_per_s
    if step_band is None or kept is None:  # a report written before intervals
        return (f", no better than batch {half} kept full "
                f"({fmt.rate(half_batch.throughput_per_s, unit)} measured)")
    yield_band = step_band.reciprocal(units)
    if yield_band.high < kept.low:
        return f", less than batch {half} kept full, {measured}"
    if yield_band.low > kept.high:
        return f", more than batch {half} kept full, {measured}"
    return f", within noise of batch {half} kept full, {measured}"


def _what_if_paragraph(report: Report) -> str | None:
    """The serving simulation the sweep ran on its own step times (decode models)."""
    result = report.serving.what_if if report.serving is not None else None
    if result is None:
        return None
    stream, step = result.stream, result.step_time
    sentence = serving_pick_text(result)
    if not sentence:
        return None
    text = (f"Simulated on these step times ({stream.requests} Poisson requests, "
            f"prompts of {stream.prompt_tokens} tokens, outputs of "
            f"{stream.output_tokens}; step time over context from the "
            f"{step.source.value}): {sentence}")
    if step.worst_error is not None:
        text += (f" The step-time fit is within {fmt.pct(step.worst_error)} of every step the "
                 "context grid measured.")
    return text + (" `diagnose serve report.json` asks it with your own request rates, "
                   "lengths and latency targets (--slo-tpot-ms, --slo-ttft-ms).")


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
            text += (f"; batch{'es' if len(slower) > 1 else ''} {_sizes(slower)} ran slower "
                     "beyond noise with them kept")
        return text + ": on this machine they cost little"
    text = (f"Timed again side by side with glibc keeping its buffers ({env}), batch "
            f"{best.batch_size} ran {fmt.rate(best.kept_throughput_per_s, unit)} against "
            f"{fmt.rate(best.throughput_per_s, unit)}: {gain}")
    if best.batch_size in noisy:
        text += ", within noise"
    if len(rows) > 1 and best.speedup_interval is not None:
        text += (f"; the gain is beyond noise at batch{'es' if len(clear) > 1 else ''} "
                 f"{_sizes(clear)}" if clear else "")
        if noisy:
            text += f" and within noise at batch{'es' if len(noisy) > 1 else ''} {_sizes(noisy)}"
        if slower:
            text += (f", and batch{'es' if len(slower) > 1 else ''} {_sizes(slower)} ran slower "
                     "beyond noise with the buffers kept")
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


def _per_unit(seconds_per_row: float | None, report: Report) -> float | None:
    """Seconds per row as seconds per unit (UNITS_PER_ROW units a row)."""
    return None if seconds_per_row is None else seconds_per_row / report.model.units_per_row


def _accumulation_steps(n: int | None) -> str:
    return f"{n} gradient-accumulation step{'s' if n != 1 else ''}"


def accumulation_headline(report: Report) -> str | None:
    """One sentence for a training run with --global-batch (one process): the accumulation
    steps that reach it at the recommended batch, and what a global batch costs."""
    acc = report.recommendation.accumulation if report.recommendation is not None else None
    if acc is None or not acc.accumulation_steps:
        return None
    return (f"{_accumulation_steps(acc.accumulation_steps)} of the recommended batch "
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
        text += (f" {_accumulation_steps(rec.accumulation_steps)} reach the global batch of "
                 f"{rec.global_batch_target} ({rec.global_batch_reached}).")
    return text


def dp_seconds(value: float | None, interval: Interval | None, *,
               resolution_s: float = STAMP_RESOLUTION_S) -> str:
    """A data-parallel time with its 95% interval: ``"12 ms [8.1 ms–15 ms]"``; ``"< 1 µs"``
    where the interval starts at 0 and the median is 0 (too small for the clock, never a
    bare 0), and a low end of 0 under a median above it as ``"< 1 µs"`` too
    (``resolution_s``: the hook's stamp resolution, in the figure's own unit); the point
    alone without an interval (a report that predates them).

    Example:
        >>> dp_seconds(12e-6, Interval(0.0, 30e-6))
        '12 µs [< 1 µs–30 µs]'
    """
    if interval is None or value is None:
        return fmt.seconds(value)
    if value <= 0 and interval.low <= 0:
        return f"< {fmt.seconds(interval.high)}"
    low = (f"< {fmt.seconds(resolution_s)}" if interval.low <= 0
           else fmt.seconds(interval.low))
    return f"{fmt.seconds(value)} [{low}–{fmt.seconds(interval.high)}]"


def _dp_pct(value: float) -> str:
    """A share small enough to need its digits: "0.4%", not "0%"."""
    return fmt.pct(value, 0 if value >= 0.095 else 1 if value >= 0.0095 else 2)


def dp_share(value: float | None, interval: Interval | None, *,
             step_s: float | None = None) -> str:
    """A share of the step with its 95% interval: ``"23% [18%–31%]"``, or ``"< 0.1%"``.
    A low end of 0 under a median above it is never a bare 0: with the median step
    ``step_s``, below what the hook's stamps resolve of it (``"23% [< 0.01%–31%]"``);
    without, the interval's high end alone (``"23% [up to 31%]"``).

    Example:
        >>> dp_share(0.23, Interval(0.0, 0.31), step_s=0.01)
        '23% [< 0.01%–31%]'
        >>> dp_share(0.23, Interval(0.0, 0.31))
        '23% [up to 31%]'
    """
    if interval is None or value is None:
        return fmt.pct(value)
    if value <= 0 and interval.low <= 0:
        return f"< {_dp_pct(interval.high)}"
    if interval.low <= 0:
        if not step_s or step_s <= 0:
            return f"{_dp_pct(value)} [up to {_dp_pct(interval.high)}]"
        return (f"{_dp_pct(value)} [< {_dp_pct(min(STAMP_RESOLUTION_S / step_s, 1.0))}–"
                f"{_dp_pct(interval.high)}]")
    return f"{_dp_pct(value)} [{_dp_pct(interval.low)}–{_dp_pct(interval.high)}]"


def _dp_step_s(row: DataParallelBatch, units_per_row: int) -> float | None:
    """A row's median step, back from its global throughput (global batch x units per row
    a step)."""
    if not row.global_throughput_per_s or row.global_throughput_per_s <= 0:
        return None
    return row.global_batch * units_per_row / row.global_throughput_per_s


def _communication_paragraph(first: DataParallelBatch, last: DataParallelBatch,
                             trend: CommunicationTrend | None, units_per_row: int = 1) -> str:
    """What the all-reduce adds to a step at both ends of the sweep, and whether it falls:
    said only where the two sizes' intervals do not overlap."""
    if trend is None:  # a report that predates the intervals: the points alone
        falls = (last.communication_share or 0) < (first.communication_share or 0)
        trend = CommunicationTrend.FALLS if falls else CommunicationTrend.RISES
        caveat = " (no interval recorded: a single timing each, which noise alone can move)"
    else:
        caveat = ""
    verdict = {
        CommunicationTrend.FALLS:
            "the same bytes every step, shared by more rows as the batch grows, as a "
            "decode step's weight read is" + caveat + ".",
        CommunicationTrend.RISES:
            "its share did not fall with the batch here, so communication is not what "
            "a larger per-rank batch buys back on this machine" + caveat + ".",
        CommunicationTrend.WITHIN_NOISE:
            "the two shares' 95% intervals overlap, so whether it falls with the batch is "
            "within noise here.",
    }[trend]
    first_share = dp_share(first.communication_share, first.communication_share_interval,
                           step_s=_dp_step_s(first, units_per_row))
    last_share = dp_share(last.communication_share, last.communication_share_interval,
                          step_s=_dp_step_s(last, units_per_row))
    return (
        f"The all-reduce adds "
        f"{dp_seconds(first.communication_exposed_s, first.communication_exposed_interval_s)}"
        f" to a step at batch {first.batch_size} ({first_share} of it) "
        f"and {dp_seconds(last.communication_exposed_s, last.communication_exposed_interval_s)}"
        f" at batch {last.batch_size} ({last_share}): "
        + verdict
        + " Measured in the timed steps by a DDP communication hook on rank 0: the time its "
        "last all-reduce finished after backward's last gradients were ready, the part "
        "backward did not hide (medians over the steps, 95% intervals in brackets); it "
        "includes the wait for the slowest rank and, on a CPU, the cores gloo's threads "
        "take from the step.")


def _predictions_paragraph(predictions: list[DataParallelPrediction], unit: str) -> str:
    """The bands of per-rank sizes the sweep did not measure, and the step-time model's
    figures that fall outside them."""
    parts = [f"batch {p.batch_size} per rank: "
             f"{fmt.rate(p.global_throughput_interval_per_s.low, unit)} to "
             f"{fmt.rate(p.global_throughput_interval_per_s.high, unit)} across ranks"
             for p in predictions]
    text = ("Not measured, predicted as a band a measurement falls inside: "
            + "; ".join(parts) + ". Each rests on the nearest measured sizes' step intervals "
            "(the compute taken to grow with the batch, at most in proportion to the rows) "
            "and on every measured all-reduce interval, widened by the run's drift.")
    outside = [p for p in predictions if p.step_model_inside is False]
    if outside:
        text += (" The step-time model's own figure for batch "
                 + ", ".join(str(p.batch_size) for p in outside)
                 + " lies outside its band: it has no term for the all-reduce, so it is not "
                 "a data-parallel prediction.")
    return text


def data_parallel(report: Report) -> Section | None:
    """A data-parallel sweep: the global batch, the all-reduce's cost per step and how the
    per-rank batch amortizes it, accumulation to a target global batch, the slowest rank."""
    dp = report.distributed
    rows = dp.batches if dp is not None else []
    if dp is None or not rows:
        return None
    unit, world = v.unit(report), dp.world_size
    nodes = dp.nodes or 1
    sec = Section("data_parallel", "Data parallel: communication against the per-rank batch")
    wrapped = "the model file" if dp.wrapped_by == WrappedBy.MODEL_FILE else "batchscope"
    sec.paragraphs.append(
        f"{world} ranks on {nodes} node{'s' if nodes != 1 else ''} ({dp.backend}, "
        f"DistributedDataParallel applied by {wrapped}); every batch size here is per rank, "
        f"and the global batch is {world}× it. Each step all-reduces "
        f"{fmt.nbytes(dp.allreduce_bytes_per_step)} of gradients whatever the batch; "
        "the all-reduce's bus bandwidth, measured at the start, was "
        f"{fmt.si(dp.bus_bandwidth_bytes_per_s, 'B/s')}.")
    first, last = rows[0], rows[-1]
    if first.communication_share is not None and last is not first:
        sec.paragraphs.append(_communication_paragraph(first, last, dp.communication_trend,
                                                       report.model.units_per_row))
    rec = dp.recommendation
    if rec is not None:
        per_unit = 1 / report.model.units_per_row
        band = rec.communication_per_sample_interval_s
        # The stamps resolve 1 µs of a step, shared by every unit of the global batch.
        per_sample = dp_seconds(_per_unit(rec.communication_per_sample_s, report),
                                band.scaled(per_unit) if band else None,
                                resolution_s=STAMP_RESOLUTION_S * per_unit / rec.global_batch)
        text = (f"At the recommended per-rank batch {rec.per_rank_batch} the global batch is "
                f"{rec.global_batch}, and communication costs {per_sample} per {unit}.")
        if rec.accumulation_steps:
            accumulated_s = _per_unit(rec.communication_per_sample_with_accumulation_s, report)
            band = rec.communication_per_sample_with_accumulation_interval_s
            accumulated = dp_seconds(
                accumulated_s, band.scaled(per_unit) if band else None,
                resolution_s=STAMP_RESOLUTION_S * per_unit
                / (rec.global_batch_reached or rec.global_batch))
            text += (f" To reach a global batch of {rec.global_batch_target}: "
                     f"{_accumulation_steps(rec.accumulation_steps)} of "
                     f"{rec.global_batch} (no_sync() on all but the last), "
                     f"{(rec.global_batch_reached or 0) * report.model.units_per_row} {unit}s per "
                     "optimizer step, one all-reduce for all of them: "
                     f"{accumulated} "
                     f"per {unit}.")
        sec.paragraphs.append(text)
    if dp.predictions:
        sec.paragraphs.append(_predictions_paragraph(dp.predictions, unit))
    lagging = max(rows, key=lambda r: r.straggler_lag_s or 0.0)
    if lagging.straggler_lag_s is not None and lagging.slowest_rank is not None:
        sec.paragraphs.append(
            f"The largest gap between ranks: at batch {lagging.batch_size}, rank "
            f"{lagging.slowest_rank} took {fmt.seconds(lagging.straggler_lag_s)} longer "
            "per step than the fastest; in a synchronous step every rank waits for it.")
    return sec


# Two ways of filling the same tokens per step whose tokens/s differ by at most this
# share are "the same": the tokens per step set the throughput, not their split into rows.
SAME_TOKENS_SHARE = 0.10


def _tokens_per_s(point: SequencePoint) -> float:
    """Tokens a second at one point (0 for a point without a latency: none is passed)."""
    return point.tokens_per_step / point.latency_s if point.latency_s else 0.0


def _same_tokens_sentence(points: list[SequencePoint], allowance: float = 0.0) -> str | None:
    """Two ways of filling one number of tokens per step, compared: the shortest rows
    against the longest, at the tokens per step that the most lengths share."""
    by_tokens: dict[int, list[SequencePoint]] = {}
    for p in points:
        by_tokens.setdefault(p.tokens_per_step, []).append(p)
    counted = [(len({p.seq_len for p in ps}), tokens, ps) for tokens, ps in by_tokens.items()]
    shared = [item for item in counted if item[0] >= 2]
    if not shared:
        return None
    _, tokens, ps = max(shared, key=lambda item: (item[0], item[1]))
    short, long_ = min(ps, key=lambda p: p.seq_len), max(ps, key=lambda p: p.seq_len)
    ratio = _tokens_per_s(long_) / _tokens_per_s(short)
    both = (f"at {tokens:,} tokens a step, batch {long_.batch_size} × {long_.seq_len} "
            f"ran at {fmt.rate(_tokens_per_s(long_), 'token')} and batch "
            f"{short.batch_size} × {short.seq_len} at "
            f"{fmt.rate(_tokens_per_s(short), 'token')}")
    # Two points each off by the run's drift allowance a either way: a ratio within
    # (1 + a)² of 1 is noise, never said to differ.
    noise = (1 + allowance) ** 2
    if abs(ratio - 1) <= SAME_TOKENS_SHARE or 1 / noise <= ratio <= noise:
        return (f"The tokens per step set the throughput, not how they are split into rows: "
                f"{both}.")
    if ratio < 1:
        return (f"Longer rows cost more per token: {both} ({fmt.ratio(ratio)}). Attention's "
                "work grows with the square of the length, the rest with the length; where "
                "the task allows, more rows buy more than longer ones.")
    return (f"Longer rows cost less per token here: {both} ({fmt.ratio(ratio)}). At these "
            "lengths the attention a longer row adds is a small part of its step, and its "
            "products run as fewer, larger matrices.")


def sequence(report: Report) -> Section | None:
    """Batch size × sequence length (SEQ_LENS): the best point, what the tokens per step
    explain, and how large a batch fits at each length."""
    grid = report.sequence_grid
    if grid is None or grid.best is None:
        return None
    points = [p for p in grid.points if p.throughput_per_s and p.latency_s]
    best = grid.best
    if not points:
        return None
    unit = v.unit(report)
    base = grid.base_seq_len
    others = [str(n) for n in grid.seq_lens if n != base]
    timed = sum(1 for p in grid.points if p.source == "grid")
    sec = Section("sequence", "Batch size × sequence length")
    text = f"The sweep ran at {base} tokens a row"
    if others:
        text += (f"; {timed} more batch size{'s were' if timed != 1 else ' was'} timed at "
                 f"{', '.join(others)} tokens a row (timing and peak memory only)")
    sec.paragraphs.append(
        text + f". The most work a second: batch {best.batch_size} × {best.seq_len} "
        f"({best.tokens_per_step:,} tokens a step), {fmt.rate(best.throughput_per_s, unit)}.")
    same = _same_tokens_sentence(points, report.run.drift_allowance or 0.0)
    if same:
        sec.paragraphs.append(same)
    fits = []
    for row in grid.lengths:
        if row.memory_limit is not None:
            fits.append(f"at {row.seq_len} tokens a row about batch "
                        f"{row.memory_limit.batch_size:,} "
                        f"({fmt.nbytes(row.memory_limit.bytes_per_row)} a row)")
        if row.out_of_memory_at:
            fits.append(f"at {row.seq_len} tokens batch {row.out_of_memory_at} ran out "
                        "of memory")
    if fits:
        capacity = next((r.memory_limit.capacity_bytes for r in grid.lengths
                         if r.memory_limit is not None), None)
        sec.paragraphs.append(
            "Predicted from the peak memory measured at each length (a line per length, "
            f"within {fmt.nbytes(capacity) if capacity else 'what was free'}): "
            + "; ".join(fits) + ".")
    return sec


def sections(report: Report) -> list[Section]:
    """The explanation, in reading order; empty when nothing was measured."""
    out = [where_it_sits(report), critical_batch(report), state(report),
           data_parallel(report), serving(report), sequence(report)]
    return [s for s in out if s is not None and s.paragraphs]


def explanation(report: Report) -> str:
    """The sections as plain text: each title on its own line, then its paragraphs, one a
    line; a blank line between sections. What report.json holds and the terminal prints.

    Example:
        >>> from batchscope.reports.json_report import load_report
        >>> text = explanation(load_report("report.json"))  # doctest: +SKIP
        >>> text.splitlines()[0]  # doctest: +SKIP
        'Where the model sits at batch 1'
    """
    if report.counters is not None and not report.batches:
        from batchscope.reports.counters_render import paragraphs

        return "\n".join(paragraphs(report.counters))
    if report.target is not None and not report.batches:
        from batchscope.reports import target_render

        return "\n".join(target_render.paragraphs(report.target))
    text = ["\n".join([s.title, *s.paragraphs]) for s in sections(report)]
    return "\n\n".join(text) or NOTHING_MEASURED
