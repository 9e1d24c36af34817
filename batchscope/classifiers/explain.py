"""The explanation paragraph: why batching helps (or not), in plain words, with the numbers."""

from __future__ import annotations

from batchscope.classifiers.critical_batch import Prediction
from batchscope.classifiers.recommend import Choice
from batchscope.records import BatchResult, Status


def _mb(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


def _pct(x: float) -> str:
    return f"{x:.0%}"


def describe_first_batch(result: BatchResult) -> str:
    """Where the model sits at its smallest batch size: time by bound and its bytes."""
    share = result.time_share
    if share is None or result.bytes is None:
        return ""
    overhead = share.overhead + share.framework
    parts = [
        f"At batch {result.batch_size}, {_pct(share.memory)} of the profiled step is in "
        f"memory-bound ops, {_pct(share.compute)} in compute-bound ops and {_pct(overhead)} "
        f"is fixed overhead (ops too small to reach either roof, and the Python between ops)"
    ]
    if share.uncounted > 0.005:
        parts.append(f", {_pct(share.uncounted)} in ops without a FLOP formula")
    b = result.bytes
    parts.append(
        f". A step moves {_mb(b.total)}: {_mb(b.weights)} of weights, {_mb(b.state)} of "
        f"inputs and state built by make_inputs, {_mb(b.activations)} of activations."
    )
    return "".join(parts)


def explain(results: list[BatchResult], choice: Choice | None, prediction: Prediction | None,
            knee: float | None, knee_inside: bool, unit: str) -> str:
    """One paragraph, in plain words, with the user's numbers."""
    ok = [r for r in results if r.status == Status.OK]
    if not ok or choice is None:
        return "No batch size was measured, so there is nothing to explain."
    first = min(ok, key=lambda r: r.batch_size)
    text = [describe_first_batch(first)]
    if prediction is not None:
        p = prediction
        ridge = p.peak_flops_per_s / p.bandwidth_bytes_per_s
        if p.critical_batch is None:
            text.append(
                f"Each extra row adds {_mb(p.per_row_bytes)} of bytes (of which "
                f"{_mb(p.state_bytes_per_row)} is state such as a KV cache, which every row "
                f"owns and no batch can share) for {p.flops.slope / 1e9:,.2f} GFLOP: the row "
                f"itself is below the ridge point of {ridge:.1f} FLOP/byte, so the step never "
                "becomes compute-bound and the predicted critical batch size B* is infinite; "
                "batching only amortizes the weights."
            )
        elif p.critical_batch <= 1.0:
            text.append(
                f"The step is compute-bound already at batch 1 (its weights, "
                f"{_mb(p.weight_bytes)}, take less time to read than its FLOPs take to "
                f"compute at this machine's ridge point of {ridge:.1f} FLOP/byte), so the "
                "predicted critical batch size B* is 1: a larger batch cannot share much."
            )
        else:
            text.append(
                f"The weights ({_mb(p.weight_bytes)}) are read once per step whatever the "
                f"batch, while each row adds {p.flops.slope / 1e9:,.2f} GFLOP and "
                f"{_mb(p.per_row_bytes)} (of which {_mb(p.state_bytes_per_row)} is state "
                "that does not amortize); the step leaves the memory roof where its compute "
                f"time catches up with reading the weights, at a predicted B* of "
                f"{p.critical_batch:,.1f} rows (ridge point {ridge:.1f} FLOP/byte)."
            )
    if knee is not None:
        where = "measured" if knee_inside else "beyond the largest batch measured"
        text.append(
            f"The measured throughput curve bends at a knee of about {knee:,.1f} ({where})."
        )
    if choice.speedup_from_batching is not None:
        text.append(
            f"Batching lifts throughput {choice.speedup_from_batching:,.1f}x over batch "
            f"{choice.speedup_baseline_batch}; batch {choice.batch_size} is recommended, the "
            f"smallest within 90% of the best ({choice.best_throughput_per_s:,.1f} {unit}s/s)."
        )
    return " ".join(t for t in text if t)
