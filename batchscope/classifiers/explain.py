"""The explanation paragraph: why batching helps (or not), in plain words, with the numbers."""

from __future__ import annotations

from batchscope.classifiers.critical_batch import ComputeBoundPrediction, KneePrediction
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


def fmt_seconds(s: float) -> str:
    if s >= 1:
        return f"{s:,.2f} s"
    if s >= 1e-3:
        return f"{s * 1e3:,.2f} ms"
    return f"{s * 1e6:,.1f} µs"


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


def describe_critical_batch(knee: KneePrediction, layers: ComputeBoundPrediction | None) -> str:
    """What sets the predicted B*, and where (or whether) the layers turn compute-bound."""
    text = (
        f"On this machine's roofline a step costs about {fmt_seconds(knee.shared_s)} that the "
        f"whole batch shares (reading the weights once, fixed per-op costs) plus "
        f"{fmt_seconds(knee.per_row_s)} per row (its FLOPs, its activations and its state), "
        f"so batching pays until about B* = {knee.batch:,.1f} rows, where the per-row time "
        "catches up with the shared time."
    )
    if layers is None:
        return text
    ridge = layers.peak_flops_per_s / layers.bandwidth_bytes_per_s
    state = (
        f"{fmt_bytes(layers.state_bytes_per_row)} of inputs and state built by make_inputs "
        "(a KV cache, for one), which each row owns and no batch can share"
    )
    if layers.batch is None:
        return text + (
            f" The layers that read weights or state never turn compute-bound: each row adds "
            f"{fmt_flops(layers.flops.slope)} against {fmt_bytes(layers.per_row_bytes)} of "
            f"its own bytes, of which {state}, which keeps a row below the ridge point of "
            f"{ridge:.1f} FLOP/byte whatever the batch."
        )
    if layers.batch <= 1.0:
        return text + (
            " The layers are compute-bound already at batch 1: moving what they read "
            f"whatever the batch ({fmt_bytes(layers.fixed_bytes)}) takes less time than "
            f"their FLOPs at the ridge point of {ridge:.1f} FLOP/byte, so a larger batch has "
            "little to share."
        )
    return text + (
        f" The layers that read weights or state (moving {fmt_bytes(layers.fixed_bytes)} "
        f"per step whatever the batch) turn compute-bound from about {layers.batch:,.1f} rows (ridge point "
        f"{ridge:.1f} FLOP/byte); each row adds {fmt_flops(layers.flops.slope)} and "
        f"{fmt_bytes(layers.per_row_bytes)}, of which {state}."
    )


def describe_knee(results: list[BatchResult], knee: float, knee_inside: bool,
                  predicted: float | None) -> str:
    """The measured knee against the predicted B*, and why they differ."""
    if not knee_inside:
        return (
            "The measured latency was still flat at the largest batch measured, so the "
            f"throughput knee lies beyond it (the fit puts it near {knee:,.0f})."
        )
    text = f"The measured throughput curve bends at a knee of about {knee:,.1f} rows"
    ok = [r for r in results if r.predicted_step_s and r.profiled_step_s]
    if predicted is None or len(ok) < 2:
        return text + "."
    first, last = ok[0], ok[-1]
    e1 = first.predicted_step_s / first.profiled_step_s  # type: ignore[operator]
    en = last.predicted_step_s / last.profiled_step_s  # type: ignore[operator]
    return text + (
        f". The prediction assumes every op runs at its roof; measured, batch "
        f"{first.batch_size} ran at {_pct(e1)} of its roofline speed and batch "
        f"{last.batch_size} at {_pct(en)}, which by itself moves the knee {en / e1:,.1f}x "
        f"from the predicted {predicted:,.1f} (to about {predicted * en / e1:,.1f})."
    )


def explain(results: list[BatchResult], choice: Choice | None,
            predicted: KneePrediction | None, layers: ComputeBoundPrediction | None,
            measured: tuple[float | None, bool], unit: str, stopped_at_cap: bool) -> str:
    """One paragraph, in plain words, with the user's numbers.

    ``measured`` is (measured knee, whether it lies inside the sweep).
    """
    knee, knee_inside = measured
    ok = [r for r in results if r.status == Status.OK]
    if not ok or choice is None:
        return "No batch size was measured, so there is nothing to explain."
    first = min(ok, key=lambda r: r.batch_size)
    text = [describe_first_batch(first)]
    if predicted is not None:
        text.append(describe_critical_batch(predicted, layers))
    if knee is not None:
        text.append(describe_knee(ok, knee, knee_inside,
                                  predicted.batch if predicted else None))
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
