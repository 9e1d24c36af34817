"""The explanation paragraph: why batching helps (or not), in plain words, with the numbers."""

from __future__ import annotations

from batchscope.classifiers.critical_batch import Prediction
from batchscope.classifiers.recommend import Choice
from batchscope.records import BatchResult, Status


def fmt_bytes(n: float) -> str:
    """Decimal byte units, as bandwidths are quoted (1 MB = 1e6 bytes)."""
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.1f} {unit}"
    return f"{n:,.0f} B"


def fmt_flops(n: float) -> str:
    for unit, size in (("GFLOP", 1e9), ("MFLOP", 1e6), ("kFLOP", 1e3)):
        if abs(n) >= size:
            return f"{n / size:,.2f} {unit}"
    return f"{n:,.0f} FLOP"


def _pct(x: float) -> str:
    return f"{x:.0%}"


def describe_first_batch(result: BatchResult) -> str:
    """Where the model sits at its smallest batch size: time by bound and its bytes."""
    share = result.time_share
    if share is None or result.bytes is None:
        return ""
    overhead = share.overhead + share.framework
    text = (
        f"At batch {result.batch_size}, {_pct(share.memory)} of the profiled step is in "
        f"memory-bound ops, {_pct(share.compute)} in compute-bound ops and {_pct(overhead)} "
        "is fixed overhead (ops too small to reach either roof, and the Python between ops)"
    )
    if share.uncounted > 0.005:
        text += f", {_pct(share.uncounted)} in ops without a FLOP formula"
    b = result.bytes
    return text + (
        f". A step moves {fmt_bytes(b.total)}: {fmt_bytes(b.weights)} of weights, "
        f"{fmt_bytes(b.state)} of inputs and state built by make_inputs, "
        f"{fmt_bytes(b.activations)} of activations."
    )


def describe_prediction(p: Prediction) -> str:
    """What sets the predicted B* and whether it is finite."""
    ridge = p.peak_flops_per_s / p.bandwidth_bytes_per_s
    per_row = (
        f"each row adds {fmt_flops(p.flops.slope)} and {fmt_bytes(p.per_row_bytes)} "
        f"(of which {fmt_bytes(p.state_bytes_per_row)} is inputs and state built by "
        "make_inputs, such as a KV cache, which each row owns and no batch can share)"
    )
    if p.critical_batch is None:
        return (
            f"In the layers that read weights or state, {per_row}: a row on its own sits "
            f"below the ridge point of {ridge:.1f} FLOP/byte, so these layers never become "
            "compute-bound and the predicted critical batch size B* is infinite; batching "
            "amortizes only the weights, and throughput flattens as the per-row bytes take over."
        )
    if p.critical_batch <= 1.0:
        return (
            f"The layers are compute-bound already at batch 1: reading their weights "
            f"({fmt_bytes(p.weight_bytes)}) takes less time than their FLOPs at this "
            f"machine's ridge point of {ridge:.1f} FLOP/byte, so the predicted critical batch "
            "size B* is 1 and a larger batch has little to share."
        )
    return (
        f"The layers' weights ({fmt_bytes(p.weight_bytes)}) are read once per step whatever "
        f"the batch, while {per_row}; they leave the memory roof where their compute time "
        f"catches up with reading the weights, at a predicted B* of {p.critical_batch:,.1f} "
        f"rows (ridge point {ridge:.1f} FLOP/byte)."
    )


def describe_knee(results: list[BatchResult], knee: float, knee_inside: bool,
                  pred_knee: float | None) -> str:
    """The measured knee against the roofline-predicted one, and why they differ."""
    if not knee_inside:
        return (
            "The measured latency was still flat at the largest batch measured, so the "
            f"throughput knee lies beyond it (the fit puts it near {knee:,.0f})."
        )
    text = f"The measured throughput curve bends at a knee of about {knee:,.1f}"
    ok = [r for r in results if r.predicted_step_s and r.profiled_step_s]
    if pred_knee is None or len(ok) < 2:
        return text + "."
    text += (
        f"; the roofline predicts {pred_knee:,.1f} once the per-row time of every op is "
        "counted (in eager mode ops run one after another, so the time of ops whose bytes "
        "grow with each row, such as attention over a KV cache or elementwise ops, adds up)"
    )
    first, last = ok[0], ok[-1]
    e1 = first.predicted_step_s / first.profiled_step_s  # type: ignore[operator]
    en = last.predicted_step_s / last.profiled_step_s  # type: ignore[operator]
    return text + (
        f". The prediction assumes every op runs at its roof; measured, batch "
        f"{first.batch_size} ran at {_pct(e1)} of its roofline speed and batch "
        f"{last.batch_size} at {_pct(en)}, which by itself moves the knee {en / e1:,.1f}x "
        f"(to about {pred_knee * en / e1:,.1f})."
    )


def explain(results: list[BatchResult], choice: Choice | None, prediction: Prediction | None,
            knees: tuple[float | None, bool, float | None], unit: str,
            stopped_at_cap: bool) -> str:
    """One paragraph, in plain words, with the user's numbers.

    ``knees`` is (measured knee, whether it lies inside the sweep, predicted knee).
    """
    knee, knee_inside, pred_knee = knees
    ok = [r for r in results if r.status == Status.OK]
    if not ok or choice is None:
        return "No batch size was measured, so there is nothing to explain."
    first = min(ok, key=lambda r: r.batch_size)
    text = [describe_first_batch(first)]
    if prediction is not None:
        text.append(describe_prediction(prediction))
    if knee is not None:
        text.append(describe_knee(ok, knee, knee_inside, pred_knee))
    if choice.speedup_from_batching is not None:
        text.append(
            f"Batching lifts throughput {choice.speedup_from_batching:,.1f}x over batch "
            f"{choice.speedup_baseline_batch}; batch {choice.batch_size} is recommended, the "
            f"smallest within 90% of the best ({choice.best_throughput_per_s:,.1f} {unit}s/s)."
        )
    largest = max(r.batch_size for r in ok)
    if stopped_at_cap and choice.best_batch_size == largest:
        text.append(
            f"Throughput was still rising at the largest batch tried ({largest}): raise "
            "--max-batch to see where it levels off."
        )
    return " ".join(t for t in text if t)
