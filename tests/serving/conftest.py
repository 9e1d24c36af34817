from __future__ import annotations

from typing import Any

# T(b, c) = SHARED_S + PER_ROW_S b + KV_S b c: weights read once per step, a little work per
# row, and every row's KV cache read at every step.
SHARED_S, PER_ROW_S, KV_S = 0.050, 0.002, 2e-5
KV_BYTES = 1000  # per token per row


def step_s(b: int, c: int) -> float:
    return SHARED_S + PER_ROW_S * b + KV_S * b * c


def decode_doc(sizes=(1, 2, 4, 8, 16), c0: int = 128, grid_contexts=(128, 512),
               grid_sizes=(1, 4, 16), ops: bool = True, contexts: bool = True,
               target: str = "decode.py") -> dict[str, Any]:
    """A report of a decode model whose step times follow step_s exactly."""
    batches = []
    for b in sizes:
        batch: dict[str, Any] = {"batch_size": b, "status": "ok",
                                 "latency_s": {"median": step_s(b, c0), "p25": step_s(b, c0),
                                               "p75": step_s(b, c0), "n": 5},
                                 "throughput_per_s": b / step_s(b, c0),
                                 "bytes": {"weights": 1e8, "state": b * (c0 + 1) * KV_BYTES,
                                           "activations": 0, "unsplit": 0}}
        if ops:
            batch["ops"] = [
                {"op_id": "linear", "name": "addmm", "time_s": SHARED_S + PER_ROW_S * b,
                 "bytes": {"weights": 1e8, "state": 0, "activations": 0, "unsplit": 0}},
                {"op_id": "sdpa", "name": "sdpa", "time_s": KV_S * b * c0,
                 "bytes": {"weights": 0, "state": b * (c0 + 1) * KV_BYTES, "activations": 0,
                           "unsplit": 0}}]
            batch["op_time_s"] = step_s(b, c0)
        batches.append(batch)
    grid = [{"batch_size": b, "context": c, "status": "ok",
             "latency_s": {"median": step_s(b, c), "p25": step_s(b, c), "p75": step_s(b, c),
                           "n": 3},
             "input_bytes": b * (c + 1) * KV_BYTES}
            for c in grid_contexts for b in grid_sizes]
    model: dict[str, Any] = {"target": target, "unit": "token", "mode": "inference",
                             "parameter_bytes": 10**8, "available_memory_bytes": 10**9}
    if contexts:
        model["contexts"] = list(dict.fromkeys([c0, *grid_contexts]))
    return {"schema": "batchscope.report/1", "model": model, "batches": batches,
            "serving": {"contexts": model.get("contexts"), "context_grid": grid}}
