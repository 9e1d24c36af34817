"""The explanation, in plain words with the user's numbers: the one home of the prose.

Every explanation sentence batchscope writes comes from here, from the report dict alone
(what report.json holds), so report.json (``recommendation.explanation``, filled by
:meth:`~batchscope.records.Report.explain`), report.html, summary.md and the terminal say the
same thing in the same words. Four questions, each a titled section: where the model sits
at its smallest batch, what sets the critical batch size B* (and whether it is finite), why
state such as a KV cache does not amortize, and what the throughput curve means for serving.
The sections are plain strings; each renderer escapes them for its own format.

Example:
    >>> from batchscope.reports.json_report import load_report
    >>> print(explanation(load_report("batchscope-report/report.json")))  # doctest: +SKIP
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.report_shape import is_number
from batchscope.reports.view import Doc

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


@dataclass
class Section:
    """One titled part of the explanation."""

    key: str
    title: str
    paragraphs: list[str] = field(default_factory=list)


def _bound_words(bound: object) -> str:
    """``"memory"`` -> ``"memory-bound"``; an op the roofline could not place says so."""
    if bound in ("memory", "compute", "overhead"):
        return f"{bound}-bound"
    if bound == "communication":
        return "communication (NCCL)"
    if bound == "transfer":
        return "a copy between host and device"
    return "not classified (no FLOP formula or no ceilings)"


def _module(op: Doc) -> str:
    """The module path an op ran under, quoted (``*`` stands for several siblings)."""
    return f"“{op.get('module')}”"


def _device_share_sentence(share: Doc) -> str:
    parts = [
        f"{fmt.pct(share.get('memory'))} is in memory-bound kernels",
        f"{fmt.pct(share.get('compute'))} in compute-bound kernels",
        f"{fmt.pct(share.get('overhead'))} in kernels too small to reach either roof",
    ]
    for key, words in (("uncounted", "in kernels of ops without a FLOP formula"),
                       ("communication", "in communication not hidden behind other kernels"),
                       ("transfer", "in copies between host and device")):
        if (share.get(key) or 0.0) >= 0.005:
            parts.append(f"{fmt.pct(share.get(key))} {words}")
    parts.append(f"{fmt.pct(share.get('idle'))} with the GPU idle, waiting on the host "
                 "(kernel launches, Python, synchronisation)")
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _share_sentence(batch: Doc) -> str:
    share = batch.get("time_share") or {}
    if batch.get("time_basis") == "device":
        return _device_share_sentence(share)
    parts = [
        f"{fmt.pct(share.get('memory'))} is in memory-bound ops",
        f"{fmt.pct(share.get('compute'))} in compute-bound ops",
        f"{fmt.pct(share.get('overhead'))} in ops too small to reach either roof (overhead)",
        f"{fmt.pct(share.get('framework'))} between ops (Python and dispatch)",
    ]
    if (share.get("uncounted") or 0.0) >= 0.005:
        parts.append(f"{fmt.pct(share.get('uncounted'))} in ops without a FLOP formula")
    return ", ".join(parts[:-1]) + " and " + parts[-1]


def _amortized_remainder(doc: Doc) -> str:
    """What batching can still amortize when the large ops are compute-bound, agreeing with
    the measured speedup: little when it is small, the fixed costs when it is large."""
    speedup = (v.recommendation(doc) or {}).get("speedup_from_batching")
    if speedup is not None and speedup >= NOTABLE_SPEEDUP:
        return (f" Batching still lifted throughput {fmt.ratio(speedup)}: what it shares is "
                "the fixed cost of every op and the time between ops, which a small batch "
                "pays per row and a large one spreads.")
    return (" Batching can only amortize the small remainder (overhead and memory-bound "
            "ops).")


def _bound_reading(doc: Doc, batch: Doc) -> str:
    dominant = v.dominant_bound(batch)
    split = batch.get("bytes") or {}
    total = v.step_bytes(batch) or 0.0
    weight_share = (split.get("weights") or 0) / total if total else 0.0
    hw = v.hardware(doc) or {}
    if dominant == "memory" and weight_share >= WEIGHT_DOMINATED_SHARE:
        return ("So the step waits on memory, and mostly on weights. Weights are read once per "
                "step whatever the batch, so every extra row gets them for free: this is the "
                "case batching is made for.")
    if dominant == "memory":
        return ("So the step waits on memory, but mostly not on weights: bytes that grow with "
                "every row cannot be shared by a batch, so batching helps less than the "
                "memory-bound label suggests.")
    if dominant == "compute":
        text = ("Most of the step's time is in compute-bound ops: its large ops do enough FLOPs "
                "per byte to keep the arithmetic units busy, and a larger batch brings more "
                "FLOPs in proportion.")
        intensity, ridge = v.step_intensity(batch), v.ridge(doc)
        if intensity is not None and ridge and intensity < ridge:
            text += (" The step as a whole is below the ridge only because many cheap "
                     "memory-bound ops move most of its bytes in a small part of its time.")
        return text + _amortized_remainder(doc)
    if dominant in ("overhead", "framework"):
        return ("The step is dominated by fixed costs: its ops are too small to reach a roof "
                f"(this machine's measured cost of one small op is "
                f"{fmt.seconds(hw.get('overhead_s'))}), and the Python between ops adds "
                "more. Batching spreads fixed costs over more rows, which lifts throughput "
                "through amortized overhead rather than weight reuse.")
    if dominant == "uncounted":
        return ("Most of the step is in ops without a FLOP formula, which the roofline cannot "
                "place; the flags below list them.")
    if dominant == "idle":
        return ("The step is launch-bound: the GPU sits idle most of the time, waiting for the "
                "host to launch the next kernel. Faster kernels would not help; fewer, larger "
                "ones would: a larger batch (the same launches do more work), CUDA graphs or "
                "torch.compile.")
    if dominant == "communication":
        return ("The step waits mostly on communication (NCCL collectives that no other kernel "
                "hides). A larger per-rank batch does more compute per collective, which "
                "amortizes it; overlapping it with backward (bucketing) hides it.")
    if dominant == "transfer":
        return ("The step waits mostly on copies between host and device: pinned memory, "
                "non_blocking copies and keeping tensors on the GPU shorten them.")
    return ""


def where_it_sits(doc: Doc) -> Section | None:
    """Time share by bound and the bytes of the smallest measured batch."""
    measured = v.analysed(doc)
    if not measured:
        return None
    b0 = measured[0]
    n = b0["batch_size"]
    lat = b0.get("latency_s") or {}
    label = v.batch_label(doc, b0)
    sec = Section("start", f"Where the model sits at {label}")
    if v.from_trace(doc):
        where = ("on the GPU" if b0.get("time_basis") == "device" else "on the CPU")
        span = ("from the step's start to its last kernel" if b0.get("time_basis") == "device"
                else "its span on the host")
        first = (f"At {label} a step takes {fmt.seconds(lat.get('median'))} {where} "
                 f"(median of {lat.get('n', '?')} profiled steps in the trace, {span}; the "
                 "profiler was attached).")
    else:
        first = (f"At {label} a step takes {fmt.seconds(lat.get('median'))} (median of "
                 f"{lat.get('n', '?')} timed steps).")
    if b0.get("time_share"):
        first += f" Of the profiled step, {_share_sentence(b0)}."
    sec.paragraphs.append(first)
    split, total = b0.get("bytes"), v.step_bytes(b0)
    if split and total:
        if split.get("unsplit"):
            text = (f"One step moves {fmt.nbytes(total)} for {fmt.flops(b0.get('flops'))}, "
                    "counted from the recorded shapes (a trace does not say which tensors "
                    "are weights, so the bytes are not split).")
        else:
            text = (f"One step moves {fmt.nbytes(total)}: {fmt.nbytes(split.get('weights'))} "
                    f"of weights ({fmt.pct(split.get('weights', 0) / total)}), "
                    f"{fmt.nbytes(split.get('state'))} of inputs and state built by "
                    f"make_inputs ({fmt.pct(split.get('state', 0) / total)}) and "
                    f"{fmt.nbytes(split.get('activations'))} of activations, for "
                    f"{fmt.flops(b0.get('flops'))}.")
        intensity, ridge = v.step_intensity(b0), v.ridge(doc)
        if intensity is not None and ridge:
            side = "below" if intensity < ridge else "above"
            whose = ("the datasheet" if (v.hardware(doc) or {}).get("source") == "datasheet"
                     else "this machine's")
            text += (f" That is {fmt.number(intensity)} FLOP per byte, {side} {whose} "
                     f"ridge point of {fmt.number(ridge)} FLOP/byte ({v.model_dtype(doc)}).")
        sec.paragraphs.append(text)
    reading = _bound_reading(doc, b0)
    top = v.ops_by_time(b0)
    if top and top[0].get("time_s"):
        op = top[0]
        where = f" in {_module(op)}" if op.get("module") else ""
        shapes = f" on {fmt.shapes(op.get('input_shapes'))}" if op.get("input_shapes") else ""
        reading += (f" The largest op is {op.get('name')}{shapes}"
                    f"{where}, {fmt.pct(v.op_share(op, b0))} of the step, "
                    f"{_bound_words(op.get('bound'))}.")
    if reading:
        sec.paragraphs.append(reading.strip())
    return sec


def _intensity_path(doc: Doc) -> str:
    points = [(b["batch_size"], v.step_intensity(b)) for b in v.measured(doc)]
    points = [(n, i) for n, i in points if i is not None]
    if len(points) < 2:
        return ""
    first, last = points[0], points[-1]
    return (f"The step's intensity goes from {fmt.number(first[1])} FLOP/byte at batch "
            f"{first[0]} to {fmt.number(last[1])} at batch {last[0]}.")


def _rows(n: float) -> str:
    """``64.0`` -> ``"64 rows"``; ``1.0`` -> ``"1 row"``."""
    text = fmt.number(n)
    return f"{text} row" if text == "1" else f"{text} rows"


def _prediction(rec: Doc, terms: Doc) -> str:
    predicted = rec.get("predicted_critical_batch")
    if predicted is None or not terms.get("per_row_s"):
        return ("B* could not be predicted: this run has no measured ceilings or no counted "
                "FLOPs.")
    return (f"On this machine's roofline a step costs {fmt.seconds(terms.get('shared_s'))} "
            "that the whole batch shares (reading the weights once, fixed per-op costs) plus "
            f"{fmt.seconds(terms['per_row_s'])} for every row (its FLOPs, activations and "
            "state). Batching pays until the per-row time catches up with the shared time: "
            f"B* ≈ {_rows(predicted)}.")


def _layers(doc: Doc, rec: Doc, terms: Doc) -> str:
    """Where the layers that read weights or state turn compute-bound, or that they never do."""
    ridge = v.ridge(doc)
    ridge_text = f"{fmt.number(ridge)} FLOP/byte" if ridge else "the ridge point"
    flops_row, bytes_row = terms.get("layers_flops_per_row"), terms.get("layers_bytes_per_row")
    fixed = fmt.nbytes(terms.get("layers_fixed_bytes"))
    per_row = (f"each row adds {fmt.flops(flops_row)} and {fmt.nbytes(bytes_row)} of its own "
               f"bytes ({fmt.nbytes(terms.get('layers_state_bytes_per_row') or 0)} of it state)")
    crossing = rec.get("predicted_compute_bound_batch")
    if rec.get("predicted_compute_bound_infinite"):
        text = ("The layers that read weights or state never turn compute-bound, however "
                "large the batch")
        if flops_row and bytes_row:
            text += (f": {per_row}, {fmt.number(flops_row / bytes_row)} FLOP/byte, below the "
                     f"ridge of {ridge_text}; batching amortizes only the weights")
        return text + "."
    if crossing is None:
        return ""
    if crossing <= 1.0:
        speedup = rec.get("speedup_from_batching")
        shared = ("a larger batch has little weight reading to share" if speedup is None
                  or speedup < NOTABLE_SPEEDUP else
                  f"the {fmt.ratio(speedup)} that batching measured comes from fixed per-op "
                  "costs and time between ops, not from sharing weight reads")
        return ("The layers do more FLOPs per byte than the ridge point of "
                f"{ridge_text} already at batch 1 (moving the {fixed} they read whatever the "
                f"batch takes less time than their FLOPs): they are compute-bound from the start "
                f"and {shared}.")
    return (f"The layers that read weights or state move {fixed} per step whatever the batch, "
            f"and {per_row}: they reach the ridge point of {ridge_text} at about "
            f"{fmt.number(crossing)} rows and are compute-bound from there. "
            f"{_intensity_path(doc)}").strip()


def _knee(doc: Doc, rec: Doc) -> str:
    """The measured knee against the predicted B*, and how far efficiency alone moves it."""
    knee, predicted, measured = (rec.get("measured_knee_batch"),
                                 rec.get("predicted_critical_batch"), v.measured(doc))
    if knee is None or not measured:
        return ""
    if rec.get("measured_knee_within_sweep"):
        text = f"Measured, the throughput curve bends at a knee of about {_rows(knee)}"
    else:
        text = (f"Measured, the latency was still flat at the largest batch "
                f"({measured[-1]['batch_size']}): the throughput knee lies beyond the sweep "
                f"(the fit puts it near {fmt.number(knee)})")
    text += f", against the predicted {fmt.number(predicted)}." if predicted else "."
    eff = [(b["batch_size"], e) for b in measured if (e := v.step_efficiency(b))]
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


def critical_batch(doc: Doc) -> Section | None:
    """What sets B*, where the layers turn compute-bound, and why the knee differs."""
    rec = v.recommendation(doc)
    if not rec:
        return None
    terms = rec.get("prediction") or {}
    sec = Section("bstar", "What sets the critical batch size B*")
    if rec.get("work_varies_with_inputs"):
        sec.paragraphs.append(
            "The work per step changed with the inputs rather than with the batch size (the "
            "weights read per step differ between batch sizes; see the flags), so the "
            "measured curve mixes batching with different work, and B* is not predicted.")
        return sec
    parts = [_prediction(rec, terms), _layers(doc, rec, terms), _knee(doc, rec)]
    sec.paragraphs += [p for p in parts if p]
    return sec


def _state_ops(batch: Doc) -> list[Doc]:
    out = []
    for op in v.ops_by_time(batch):
        split = op.get("bytes") or {}
        total = sum(split.get(k, 0) for k in v.BYTE_KINDS)
        if total and split.get("state", 0) / total >= STATE_OP_SHARE:
            out.append(op)
    return out[:MAX_STATE_OPS]


def state(doc: Doc) -> Section | None:
    """Weights amortize, state does not: per-row bytes at the smallest and largest batch."""
    pts = [b for b in v.measured(doc) if b.get("bytes")]
    if not pts:
        return None
    lo, hi = pts[0], pts[-1]
    n0, n1 = lo["batch_size"], hi["batch_size"]
    w0, s0 = lo["bytes"].get("weights", 0), lo["bytes"].get("state", 0)
    s1 = hi["bytes"].get("state", 0)
    total1, total0 = v.step_bytes(hi) or 1.0, v.step_bytes(lo) or 1.0
    negligible = s1 / total1 < STATE_NEGLIGIBLE_SHARE
    title = ("Weights amortize; nothing here that does not" if negligible
             else "Why state such as a KV cache does not amortize")
    sec = Section("state", title)
    if n1 > n0:
        sec.paragraphs.append(
            f"Weights are {fmt.nbytes(w0)} per step at every batch size, read once and shared "
            f"by every row: per row they fall from {fmt.nbytes(w0 / n0)} at batch {n0} to "
            f"{fmt.nbytes(hi['bytes'].get('weights', 0) / n1)} at batch {n1}.")
    else:
        sec.paragraphs.append(f"Weights are {fmt.nbytes(w0)} per step, read once and shared by "
                              "every row of a batch; only one batch size was measured.")
    if negligible:
        sec.paragraphs.append(
            f"Inputs and state built by make_inputs take {fmt.nbytes(s1 / n1)} per row "
            f"({fmt.pct(s1 / total1)} of the step's bytes at batch {n1}): each row brings its "
            "own, so they never amortize, but at this size they do not hold the weights back. "
            "Activations grow with the batch, as they must "
            f"({fmt.nbytes(hi['bytes'].get('activations', 0) / n1)} per row at batch {n1}).")
        return sec
    sec.paragraphs.append(
        f"State (tensors make_inputs built that every step reads again, such as a KV cache) is "
        f"{fmt.nbytes(s0 / n0)} per row at batch {n0} and {fmt.nbytes(s1 / n1)} per row at "
        f"batch {n1}: every row owns its own, so no batch can share it. It is "
        f"{fmt.pct(s1 / total1)} of the step's bytes at batch {n1}, up from "
        f"{fmt.pct(s0 / total0)} at batch {n0}.")
    ops = _state_ops(hi)
    if ops:
        first = {o.get("op_id"): o for o in lo.get("ops") or []}
        names = []
        for op in ops:
            before = first.get(op.get("op_id")) or {}
            names.append(f"{op.get('name')}{' in ' + _module(op) if op.get('module') else ''} "
                         f"(intensity {fmt.number(before.get('intensity'))} FLOP/byte at batch "
                         f"{n0}, {fmt.number(op.get('intensity'))} at batch {n1}, "
                         f"{_bound_words(op.get('bound'))})")
        sec.paragraphs.append(
            "The ops that read it stay where they were on the roofline as the batch grows: "
            + "; ".join(names) + ". A longer context or a larger cache makes state a bigger "
            "share of every step, and batching stops paying sooner.")
    return sec


def _verdict(doc: Doc, rec: Doc) -> str:
    """The speedup from batching, the recommended batch and its rule, and the cap hint."""
    n, speedup = rec.get("batch_size"), rec.get("speedup_from_batching")
    text = f"Batch {n} is recommended"
    if speedup is not None:
        text = (f"Batching lifts throughput {fmt.ratio(speedup)} over batch "
                f"{rec.get('speedup_baseline_batch')}, and batch {n} is recommended")
    text += f": {rec['rule']}." if rec.get("rule") else "."
    limit = v.latency_limit_s(doc)
    if limit and not rec.get("excluded"):  # else the rule names the batch sizes over it
        text += (f" The run was given a latency limit of {fmt.seconds(limit)} per step, and "
                 "every batch size measured stayed within it.")
    if rec.get("still_rising_at_cap") and v.measured(doc):
        text += (" Throughput was still rising at the largest batch tried "
                 f"({v.measured(doc)[-1]['batch_size']}): raise --max-batch to see where it "
                 "levels off.")
    return text


def serving(doc: Doc) -> Section | None:
    """The recommendation, then static batches against continuous batching at its numbers."""
    rec_batch = v.recommended(doc)
    if rec_batch is None:
        return None
    unit, n = v.unit(doc), rec_batch["batch_size"]
    thr, step = rec_batch.get("throughput_per_s"), v.latency_median(rec_batch)
    if (doc.get("model") or {}).get("mode") == "train" or "watch" in (doc.get("run") or {}):
        # A training step (or a watched loop) is not served: the verdict alone.
        sec = Section("serving", "What the curve means for this run")
        sec.paragraphs.append(_verdict(doc, v.recommendation(doc)))
        return sec
    sec = Section("serving", "What the curve means for serving")
    sec.paragraphs.append(_verdict(doc, v.recommendation(doc)))
    if n == 1:
        sec.paragraphs.append(
            f"At batch 1 that is {fmt.rate(thr, unit)} with a step of {fmt.seconds(step)}: no "
            "larger batch measured gave enough throughput to be worth its latency, so serve "
            "requests one at a time; batching them would only make each one wait.")
        what_if = _what_if_paragraph(doc)
        if what_if:
            sec.paragraphs.append(what_if)
        return sec
    sec.paragraphs.append(
        f"Every throughput here is for a full batch: {n} rows in every step. At batch {n} "
        f"that is {fmt.rate(thr, unit)} with a step of {fmt.seconds(step)}, so each row gets "
        f"{fmt.rate(1 / step if step else None, unit)}.")
    if step and thr:
        half = max(n // 2, 1)
        half_batch = v.batch_of(doc, half)
        text = (f"A static batch starts {n} requests together and runs until the last one is "
                "done; slots whose requests finish early sit idle. Half full on average, it "
                f"still pays {fmt.seconds(step)} per step but yields {half} {unit}s: "
                f"{fmt.rate(half / step, unit)}")
        if half_batch:
            text += (f", no better than batch {half} kept full "
                     f"({fmt.rate(half_batch.get('throughput_per_s'), unit)} measured)")
        sec.paragraphs.append(text + ".")
        sec.paragraphs.append(
            "Continuous batching (in-flight batching, as in vLLM, TGI or TensorRT-LLM; dynamic "
            "batching with a maximum wait for one-step requests, as in Triton or TorchServe) "
            f"admits a waiting request as soon as a slot frees, so the batch stays at {n} and "
            f"the {fmt.rate(thr, unit)} holds while requests are queued. With fewer than {n} "
            "in flight the batch runs partly empty and throughput follows the measured curve "
            "down; the latency of each step follows it up.")
    what_if = _what_if_paragraph(doc)
    if what_if:
        sec.paragraphs.append(what_if)
    return sec


def _what_if_paragraph(doc: Doc) -> str | None:
    """The serving simulation the sweep ran on its own step times (decode models)."""
    serving = doc.get("serving") if isinstance(doc.get("serving"), dict) else {}
    result = serving.get("what_if")
    if not isinstance(result, dict):
        return None
    rec = result.get("recommendation") if isinstance(result.get("recommendation"), dict) else {}
    stream = result.get("stream") if isinstance(result.get("stream"), dict) else {}
    step = result.get("step_time") if isinstance(result.get("step_time"), dict) else {}
    sentence = rec.get("sentence")
    if not isinstance(sentence, str):
        return None
    text = (f"Simulated on these step times ({stream.get('requests')} Poisson requests, "
            f"prompts of {stream.get('prompt_tokens')} tokens, outputs of "
            f"{stream.get('output_tokens')}; step time over context from the "
            f"{step.get('source')}): {sentence}")
    worst = step.get("worst_error")
    if isinstance(worst, (int, float)):
        text += (f" The step-time fit is within {fmt.pct(worst)} of every step the context "
                 "grid measured.")
    return text + (" `diagnose serve report.json` asks it with your own request rates, "
                   "lengths and latency targets (--slo-tpot-ms, --slo-ttft-ms).")


def allocator_headline(doc: Doc) -> str | None:
    """A sentence for the top of every report when memory mapped afresh each step (page
    faults) costs a notable share of a step: both allocators side by side where the sweep
    timed them (``allocator``), and whether keeping the buffers changes the pick."""
    hit = [b for b in v.measured(doc) if (b.get("page_fault_share") or 0.0) >= PAGE_FAULT_SHARE]
    if not hit:
        return None
    worst = max(hit, key=lambda b: b["page_fault_share"])
    rec = v.recommendation(doc)
    picked, other = rec.get("batch_size"), rec.get("batch_size_without_page_faults")
    mapped = ("the allocator hands large buffers back to the OS and maps them afresh every "
              "step, as a long-running process with the same allocator does")
    side = _allocator_side_by_side(doc, mapped)
    if side is None:
        text = (f"Page faults take ~{fmt.pct(worst['page_fault_share'])} of the step at batch "
                f"{worst['batch_size']} (at ~1 µs a fault): {mapped}. A process whose "
                "allocator keeps them (jemalloc, tcmalloc, or glibc's MALLOC_MMAP_THRESHOLD_ "
                "and MALLOC_TRIM_THRESHOLD_ above the largest buffer) runs faster")
        if other is not None and picked is not None and other != picked:
            text += (f", and would be recommended batch {other} instead of {picked} (an "
                     "estimate: measure with the allocator your job runs with)")
        return text + "."
    text = side
    if other is not None and picked is not None and other != picked:
        kept = (doc.get("allocator") or {}).get("throughput_per_s")
        text += (f". With the buffers kept the pick would be batch {other} "
                 f"({fmt.rate(kept, v.unit(doc))}) instead of {picked}")
    elif picked is not None and other is not None:
        text += f". The pick stays batch {picked} either way"
    return text + "."


def predicted_pick_headline(doc: Doc) -> str | None:
    """A sentence for the top of every report where batch sizes the sweep did not measure,
    as the step-time model predicts them (each at the low end of its band), would move the
    pick (``prediction.pick``): labelled a prediction, with how to measure it."""
    pick = v.prediction(doc).get("pick")
    if not isinstance(pick, dict):
        return None
    sizes = [pick.get(k) for k in ("batch_size", "best_batch_size", "instead_of")]
    rates = [pick.get(k) for k in ("throughput_per_s", "best_throughput_per_s",
                                   "instead_of_throughput_per_s", "margin")]
    if not all(isinstance(b, int) and not isinstance(b, bool) and b > 0 for b in sizes) or \
            not all(is_number(r) and math.isfinite(r) and r >= 0 for r in rates):
        return None
    (chosen, best, instead), (chosen_t, best_t, instead_t, margin) = sizes, rates
    unit = v.unit(doc)
    measured = pick.get("measured") is True
    shown, shown_t = (best, best_t) if measured else (chosen, chosen_t)
    text = (f"Not measured, predicted: batch {shown} at {fmt.rate(shown_t, unit)}, at least "
            f"{fmt.rate(shown_t / (1 + margin), unit)} with its step {fmt.pct(margin)} longer "
            f"(the step-time model's largest miss on the sizes it forecast). ")
    if measured:
        text += (f"If that holds, the pick would be batch {chosen} ({fmt.rate(chosen_t, unit)} "
                 f"measured) instead of {instead} ({fmt.rate(instead_t, unit)})")
    else:
        text += (f"If that holds, it would be recommended instead of batch {instead} "
                 f"({fmt.rate(instead_t, unit)} measured)")
    measure = sorted({best} | (set() if measured else {chosen}))
    return text + f". Measure to be sure: --batch-sizes {','.join(map(str, measure))}."


# Kept buffers that ran less than this much faster at every batch size gained nothing the
# timing's noise could not explain.
NO_GAIN_SPEEDUP = 1.03


def _allocator_side_by_side(doc: Doc, mapped: str) -> str | None:
    """The measured side-by-side sentence (``mapped``: why the faults happen), or None when
    the sweep did not re-time."""
    section = doc.get("allocator") or {}
    rows = [r for r in section.get("batches") or []
            if isinstance(r, dict) and r.get("status") == "ok"
            and isinstance(r.get("speedup"), (int, float)) and r["speedup"] > 0]
    if not rows:
        return None
    env = " ".join(f"{k}={val}" for k, val in (section.get("env") or {}).items())
    if not section.get("taken"):
        return (f"Page faults take a share of the step: {mapped}. Timed again with "
                f"{env}, the worker faulted as much: this machine's allocator ignores those "
                "settings (jemalloc or tcmalloc through LD_PRELOAD keep buffers too)")
    best = max(rows, key=lambda r: r["speedup"])
    unit = v.unit(doc)
    if best["speedup"] < NO_GAIN_SPEEDUP:
        return (f"Page faults take a share of the step by their count: {mapped}. Timed again "
                f"side by side with glibc keeping its buffers ({env}), no batch size ran "
                f"faster (at best {fmt.ratio(best['speedup'])}): on this machine they cost "
                "little")
    text = (f"Page faults cost {fmt.pct(1 - 1 / best['speedup'])} of the step at batch "
            f"{best['batch_size']}, measured side by side: {mapped}. With glibc keeping its "
            f"buffers ({env}) it ran {fmt.rate(best.get('kept_throughput_per_s'), unit)} "
            f"against {fmt.rate(best.get('throughput_per_s'), unit)} "
            f"({fmt.ratio(best['speedup'])}")
    cost = section.get("cost_per_fault_s")
    if isinstance(cost, (int, float)):
        text += f"; ~{cost * 1e6:.2g} µs a page fault on this machine"
    return text + ")"


def trace_headline(doc: Doc) -> str | None:
    """One sentence for a trace report without a recommendation: the step and its verdict."""
    measured = v.analysed(doc)
    if not v.from_trace(doc) or not measured:
        return None
    b0 = measured[0]
    lat = b0.get("latency_s") or {}
    share = b0.get("time_share") or {}
    dominant = v.dominant_bound(b0)
    words = {"idle": "launch-bound, the GPU waiting on the host",
             "communication": "communication-bound", "transfer": "bound by host-device copies",
             "memory": "memory-bound", "compute": "compute-bound",
             "overhead": "bound by kernels too small to reach a roof",
             "uncounted": "mostly in ops without a FLOP formula"}.get(dominant or "", "")
    where = "on the GPU" if b0.get("time_basis") == "device" else "on the CPU"
    label = v.batch_label(doc, b0)
    text = f"{label[0].upper()}{label[1:]}: a step takes {fmt.seconds(lat.get('median'))} {where}"
    if words:
        text += f", {words} ({fmt.pct(share.get(dominant))} of the step)"
    return text + "."


def _accumulation_steps(rec: Doc) -> str:
    n = rec.get("accumulation_steps")
    return f"{n} gradient-accumulation step{'s' if n != 1 else ''}"


def accumulation_headline(doc: Doc) -> str | None:
    """One sentence for a training run with --global-batch (one process): the accumulation
    steps that reach it at the recommended batch, and what a global batch costs."""
    acc = v.recommendation(doc).get("accumulation")
    if not isinstance(acc, dict) or not acc.get("accumulation_steps"):
        return None
    return (f"{_accumulation_steps(acc)} of the recommended batch {acc.get('micro_batch')} "
            f"reach the global batch of {acc.get('global_batch_target')} "
            f"({acc.get('global_batch_reached')}): at most "
            f"{fmt.seconds(acc.get('time_per_global_batch_s'))} per optimizer step (the "
            f"measured step, {fmt.seconds(acc.get('step_s'))}, ran the optimizer every time; "
            "an accumulated step skips it).")


def _dp_rows(dp: Doc) -> list[Doc]:
    return [r for r in dp.get("batches") or [] if isinstance(r, dict)]


def data_parallel_headline(doc: Doc) -> str | None:
    """One sentence for the top of a data-parallel report: per-rank and global batch."""
    dp = doc.get("distributed") or {}
    rec = dp.get("recommendation")
    if not isinstance(rec, dict) or rec.get("per_rank_batch") is None:
        return None
    row = next((r for r in _dp_rows(dp) if r.get("batch_size") == rec.get("per_rank_batch")), {})
    text = (f"Data parallel over {dp.get('world_size')} ranks: batch {rec.get('per_rank_batch')} "
            f"per rank is a global batch of {rec.get('global_batch')} "
            f"({fmt.rate(row.get('global_throughput_per_s'), v.unit(doc))} across ranks).")
    if rec.get("accumulation_steps"):
        text += (f" {_accumulation_steps(rec)} reach the global batch of "
                 f"{rec.get('global_batch_target')} ({rec.get('global_batch_reached')}).")
    return text


def data_parallel(doc: Doc) -> Section | None:
    """A data-parallel sweep: the global batch, the all-reduce's cost per step and how the
    per-rank batch amortizes it, accumulation to a target global batch, the slowest rank."""
    dp = doc.get("distributed") or {}
    rows = _dp_rows(dp)
    if not rows:
        return None
    unit, world = v.unit(doc), dp.get("world_size")
    nodes = dp.get("nodes") or 1
    sec = Section("data_parallel", "Data parallel: communication against the per-rank batch")
    wrapped = dp.get("wrapped_by") or "batchscope"
    sec.paragraphs.append(
        f"{world} ranks on {nodes} node{'s' if nodes != 1 else ''} ({dp.get('backend')}, "
        f"DistributedDataParallel applied by {wrapped}); every batch size here is per rank, "
        f"and the global batch is {world}× it. Each step all-reduces "
        f"{fmt.nbytes(dp.get('allreduce_bytes_per_step'))} of gradients whatever the batch; "
        "the all-reduce's bus bandwidth, measured at the start, was "
        f"{fmt.si(dp.get('bus_bandwidth_bytes_per_s'), 'B/s')}.")
    first, last = rows[0], rows[-1]
    if first.get("communication_share") is not None and last is not first:
        falls = (last.get("communication_share") or 0) < (first.get("communication_share") or 0)
        sec.paragraphs.append(
            f"The all-reduce adds {fmt.seconds(first.get('communication_exposed_s'))} to a step "
            f"at batch {first.get('batch_size')} ({fmt.pct(first.get('communication_share'))} of "
            f"it) and {fmt.seconds(last.get('communication_exposed_s'))} at batch "
            f"{last.get('batch_size')} ({fmt.pct(last.get('communication_share'))}): "
            + ("the same bytes every step, shared by more rows as the batch grows, as a "
               "decode step's weight read is." if falls else
               "its share did not fall with the batch here, so communication is not what "
               "a larger per-rank batch buys back on this machine.")
            + " Measured as each rank's step with the all-reduce against the same step under "
            "DDP's no_sync(): it includes the wait for the slowest rank and, on a CPU, the "
            "cores gloo's threads take from the step.")
    rec = dp.get("recommendation")
    if isinstance(rec, dict) and rec.get("per_rank_batch") is not None:
        text = (f"At the recommended per-rank batch {rec.get('per_rank_batch')} the global batch is "
                f"{rec.get('global_batch')}, and communication costs "
                f"{fmt.seconds(rec.get('communication_per_sample_s'))} per {unit}.")
        if rec.get("accumulation_steps"):
            text += (f" To reach a global batch of {rec.get('global_batch_target')}: "
                     f"{_accumulation_steps(rec)} of "
                     f"{rec.get('global_batch')} (no_sync() on all but the last), "
                     f"{rec.get('global_batch_reached')} {unit}s per optimizer step, one all-reduce "
                     "for all of them: "
                     f"{fmt.seconds(rec.get('communication_per_sample_with_accumulation_s'))} "
                     f"per {unit}.")
        sec.paragraphs.append(text)
    lagging = max(rows, key=lambda r: r.get("straggler_lag_s") or 0.0)
    if lagging.get("straggler_lag_s") is not None and lagging.get("slowest_rank") is not None:
        sec.paragraphs.append(
            f"The largest gap between ranks: at batch {lagging.get('batch_size')}, rank "
            f"{lagging.get('slowest_rank')} took {fmt.seconds(lagging.get('straggler_lag_s'))} longer "
            "per step than the fastest; in a synchronous step every rank waits for it.")
    return sec


# Two ways of filling the same tokens per step whose tokens/s differ by at most this
# share are "the same": the tokens per step set the throughput, not their split into rows.
SAME_TOKENS_SHARE = 0.10


def _tokens_per_s(point: Doc) -> float:
    return point["tokens_per_step"] / point["latency_s"]


def _same_tokens_sentence(points: list[Doc]) -> str | None:
    """Two ways of filling one number of tokens per step, compared: the shortest rows
    against the longest, at the tokens per step that the most lengths share."""
    by_tokens: dict[int, list[Doc]] = {}
    for p in points:
        by_tokens.setdefault(p["tokens_per_step"], []).append(p)
    counted = [(len({p["seq_len"] for p in ps}), tokens, ps) for tokens, ps in by_tokens.items()]
    shared = [item for item in counted if item[0] >= 2]
    if not shared:
        return None
    _, tokens, ps = max(shared, key=lambda item: (item[0], item[1]))
    short, long_ = min(ps, key=lambda p: p["seq_len"]), max(ps, key=lambda p: p["seq_len"])
    ratio = _tokens_per_s(long_) / _tokens_per_s(short)
    both = (f"at {tokens:,} tokens a step, batch {long_['batch_size']} × {long_['seq_len']} "
            f"ran at {fmt.rate(_tokens_per_s(long_), 'token')} and batch "
            f"{short['batch_size']} × {short['seq_len']} at "
            f"{fmt.rate(_tokens_per_s(short), 'token')}")
    if abs(ratio - 1) <= SAME_TOKENS_SHARE:
        return (f"The tokens per step set the throughput, not how they are split into rows: "
                f"{both}.")
    if ratio < 1:
        return (f"Longer rows cost more per token: {both} ({fmt.ratio(ratio)}). Attention's "
                "work grows with the square of the length, the rest with the length; where "
                "the task allows, more rows buy more than longer ones.")
    return (f"Longer rows cost less per token here: {both} ({fmt.ratio(ratio)}). At these "
            "lengths the attention a longer row adds is a small part of its step, and its "
            "products run as fewer, larger matrices.")


def sequence(doc: Doc) -> Section | None:
    """Batch size × sequence length (SEQ_LENS): the best point, what the tokens per step
    explain, and how large a batch fits at each length."""
    grid = v.sequence_grid(doc)
    points = [p for p in grid.get("points") or [] if isinstance(p, dict)
              and p.get("throughput_per_s") and p.get("latency_s")]
    best = grid.get("best") if isinstance(grid.get("best"), dict) else None
    if not points or best is None:
        return None
    unit = v.unit(doc)
    base = grid.get("base_seq_len")
    others = [str(n) for n in grid.get("seq_lens") or [] if n != base]
    timed = sum(1 for p in grid.get("points") or [] if p.get("source") == "grid")
    sec = Section("sequence", "Batch size × sequence length")
    text = f"The sweep ran at {base} tokens a row"
    if others:
        text += (f"; {timed} more batch size{'s were' if timed != 1 else ' was'} timed at "
                 f"{', '.join(others)} tokens a row (timing and peak memory only)")
    sec.paragraphs.append(
        text + f". The most work a second: batch {best['batch_size']} × {best['seq_len']} "
        f"({best['tokens_per_step']:,} tokens a step), {fmt.rate(best['throughput_per_s'], unit)}.")
    same = _same_tokens_sentence(points)
    if same:
        sec.paragraphs.append(same)
    fits = []
    for row in grid.get("lengths") or []:
        limit = row.get("memory_limit") or {}
        if isinstance(limit.get("batch_size"), int):
            fits.append(f"at {row['seq_len']} tokens a row about batch {limit['batch_size']:,} "
                        f"({fmt.nbytes(limit.get('bytes_per_row'))} a row)")
        if row.get("out_of_memory_at"):
            fits.append(f"at {row['seq_len']} tokens batch {row['out_of_memory_at']} ran out "
                        "of memory")
    if fits:
        capacity = next((r["memory_limit"]["capacity_bytes"] for r in grid.get("lengths") or []
                         if r.get("memory_limit")), None)
        sec.paragraphs.append(
            "Predicted from the peak memory measured at each length (a line per length, "
            f"within {fmt.nbytes(capacity) if capacity else 'what was free'}): "
            + "; ".join(fits) + ".")
    return sec


def sections(doc: Doc) -> list[Section]:
    """The explanation, in reading order; empty when nothing was measured."""
    out = [where_it_sits(doc), critical_batch(doc), state(doc), data_parallel(doc),
           serving(doc), sequence(doc)]
    return [s for s in out if s is not None and s.paragraphs]


def explanation(doc: Doc) -> str:
    """The sections as plain text: each title on its own line, then its paragraphs, one a
    line; a blank line between sections. What report.json holds and the terminal prints."""
    text = ["\n".join([s.title, *s.paragraphs]) for s in sections(doc)]
    return "\n\n".join(text) or NOTHING_MEASURED
