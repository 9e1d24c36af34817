"""What sets the critical batch size B*: the roofline's shared and per-row time, the layers'
ridge, the measured knee."""

from __future__ import annotations

from batchscope.records import (
    PredictionTerms,
    Recommendation,
    Report,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.headlines import uncounted_text
from batchscope.reports.words import NOTABLE_SPEEDUP, Section, peak_ridge_words, speedup_band


def _layers_ridge_words(report: Report, terms: PredictionTerms) -> str:
    """The ridge the layers' crossing was worked out against, naming its roof: the matmul
    roof's for a decoder's linears (critical_batch.predict_compute_bound_batch), the roofs
    of their families together for a mix, else (an older report) the dtype's peak."""
    peak, bandwidth = terms.peak_flops_per_s, terms.bandwidth_bytes_per_s
    if not peak or not bandwidth:
        ridge = v.ridge(report)
        return peak_ridge_words(report, ridge) if ridge else "the ridge point"
    figure = f"{fmt.number(peak / bandwidth)} FLOP/byte"
    named = v.roof_name(report, peak)
    if named is None:
        return (f"the ridge point of the roofs their kernels run at, weighted by their FLOPs "
                f"({figure})")
    return f"the ridge point of the {named} ({figure})"

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
