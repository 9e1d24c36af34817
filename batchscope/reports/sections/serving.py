"""What the throughput curve means for serving: the pick, the drift and the rounds behind it,
static against continuous batching."""

from __future__ import annotations

from batchscope.classifiers.data_parallel import share_allowance
from batchscope.records import (
    BatchResult,
    ControlTiming,
    DriftControl,
    Recommendation,
    Report,
    Source,
)
from batchscope.records.interval import MEANINGFUL_SPAN
from batchscope.records.noise import DRIFT_FLOOR
from batchscope.records.report import (
    Mode,
)
from batchscope.records.rounds import RoundsStop
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.flag_text import rule_text, serving_pick_text
from batchscope.reports.words import Section, dp_pct, equivalence_text, share_text, speedup_text


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
               ", and the rounds ended early: the rounds their time allowed would not have "
               "separated the sizes near the rule's bar nor moved the pick (projected from "
               "their spread so far), so those sizes are a tie the equivalent set states."
               if rounds.stopped_by == RoundsStop.UNSEPARABLE else
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
    parts = [f"at batch {t.batch_size} was {dp_pct(t.first_communication_share or 0.0)} in "
             f"the first launch of the ranks and {dp_pct(t.control_communication_share or 0.0)}"
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
