from __future__ import annotations

from typing import Any

from batchscope.records import Report
from batchscope.records.codec import decode_report

# T(b, c) = SHARED_S + PER_ROW_S b + KV_S b c: weights read once per step, a little work per
# row, and every row's KV cache read at every step.
SHARED_S, PER_ROW_S, KV_S = 0.050, 0.002, 2e-5
KV_BYTES = 1000  # per token per row
WEIGHT_BYTES = 10**8


def step_s(b: int, c: int) -> float:
    return SHARED_S + PER_ROW_S * b + KV_S * b * c


def _op(op_id: str, name: str, time_s: float, weights: int, state: int) -> dict[str, Any]:
    return {"op_id": op_id, "name": name, "input_shapes": [], "dtype": "float32", "module": "",
            "calls": 1, "time_s": time_s, "flops": None,
            "bytes": {"weights": weights, "state": state, "activations": 0, "unsplit": 0}}


def decode_doc(sizes=(1, 2, 4, 8, 16), c0: int = 128, grid_contexts=(128, 512),
               grid_sizes=(1, 4, 16), ops: bool = True, contexts: bool = True,
               target: str = "decode.py") -> dict[str, Any]:
    """report.json of a decode model whose step times follow step_s exactly."""
    batches = []
    for b in sizes:
        batch: dict[str, Any] = {"batch_size": b, "status": "ok",
                                 "latency_s": {"median": step_s(b, c0), "p25": step_s(b, c0),
                                               "p75": step_s(b, c0), "n": 5},
                                 "throughput_per_s": b / step_s(b, c0),
                                 "bytes": {"weights": WEIGHT_BYTES,
                                           "state": b * (c0 + 1) * KV_BYTES,
                                           "activations": 0, "unsplit": 0}}
        if ops:
            batch["ops"] = [
                _op("linear", "addmm", SHARED_S + PER_ROW_S * b, WEIGHT_BYTES, 0),
                _op("sdpa", "sdpa", KV_S * b * c0, 0, b * (c0 + 1) * KV_BYTES)]
            batch["op_time_s"] = step_s(b, c0)
        batches.append(batch)
    grid = [{"batch_size": b, "context": c, "status": "ok",
             "latency_s": {"median": step_s(b, c), "p25": step_s(b, c), "p75": step_s(b, c),
                           "n": 3},
             "input_bytes": b * (c + 1) * KV_BYTES}
            for c in grid_contexts for b in grid_sizes]
    model: dict[str, Any] = {"target": target, "unit": "token", "mode": "inference",
                             "parameter_bytes": WEIGHT_BYTES, "available_memory_bytes": 10**9,
                             "contexts": list(dict.fromkeys([c0, *grid_contexts]))
                             if contexts else []}
    return {"schema": "batchscope.report/2", "model": model, "hardware": None,
            "batches": batches, "recommendation": None, "run": {},
            "serving": {"contexts": model["contexts"],
                        "base_context": model["contexts"][0] if contexts else None,
                        "context_grid": grid}}


def decode_report_of(doc: dict[str, Any]) -> Report:
    """``doc`` (as :func:`decode_doc` gives it, perhaps edited) as the typed report."""
    return decode_report(doc, "r")


def decode_model(**kw: Any) -> Report:
    """:func:`decode_doc` as the typed report."""
    return decode_report_of(decode_doc(**kw))
