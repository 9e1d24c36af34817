"""report.json ``sequence_grid``: batch size × sequence length, for a model whose file sets
``SEQ_LENS`` (``make_inputs(batch_size, seq_len)``).

The sweep measures every batch size at the first length (the per-op split, the
recommendation); the grid times a few of those batch sizes again at each other length
(:func:`batchscope.plan.grid_batch_sizes`: timing and peak memory only). Together they
answer what a user training or serving a sequence model asks: at which length and batch
size does the machine do the most work per second, is it the tokens per step that matter
(more rows and longer rows worth the same) or the length itself (attention grows with its
square), and how large a batch fits at each length.

The memory limit at a length is the largest batch whose peak memory, a line through the
peaks measured at that length (a fixed part and a part per row), stays within what the
process could hold: the largest peak plus free memory any measurement saw, or
``--memory-budget`` when smaller. It is a prediction from the measured points, labelled
so; a length with fewer than two measured points has none.

Example:
    >>> points = [{"batch_size": 1, "seq_len": 8, "status": "ok", "latency_s": 0.01,
    ...            "units_per_row": 8, "peak_memory_bytes": 1100}]
    >>> memory_limit(points, capacity_bytes=2000) is None  # one point: no line
    True
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from batchscope.classifiers.critical_batch import fit_line
from batchscope.records import GridPoint, Status

Doc = dict[str, Any]
# A per-row slope under this share of the fixed part is no growth that a limit can be
# read off (the noise of a resident set size): the limit is then not predicted.
MIN_ROW_SHARE = 1e-4
# A limit this many times the largest batch measured at its length is no prediction
# anyone should act on: the line is extrapolated too far.
MAX_EXTRAPOLATION = 64


def _point(batch_size: int, seq_len: int, status: str, latency_s: float | None,
           units_per_row: int, peak_memory_bytes: int | None, source: str,
           error: str = "") -> Doc:
    ok = status == Status.OK.value and latency_s
    return {
        "batch_size": batch_size,
        "seq_len": seq_len,
        "status": status,
        "latency_s": latency_s,
        "units_per_row": units_per_row,
        "tokens_per_step": batch_size * seq_len,
        "throughput_per_s": batch_size * units_per_row / latency_s if ok else None,
        "peak_memory_bytes": peak_memory_bytes,
        "source": source,
        **({"error": error} if error else {}),
    }


def _sweep_points(doc: Doc, base: int, units_per_row: int) -> list[Doc]:
    points = []
    for b in doc.get("batches") or []:
        latency = (b.get("latency_s") or {}).get("median")
        points.append(_point(b["batch_size"], base, b.get("status", ""), latency,
                             units_per_row, b.get("peak_memory_bytes"), "sweep",
                             (b.get("error") or "").split("\n")[0]))
    return points


def capacity_bytes(doc: Doc) -> int | None:
    """What the process could hold: the largest peak plus the memory still free when it was
    measured, over every batch size; ``--memory-budget`` when smaller."""
    seen = [b["peak_memory_bytes"] + b["available_memory_bytes"]
            for b in doc.get("batches") or []
            if b.get("peak_memory_bytes") and b.get("available_memory_bytes") is not None]
    budget = ((doc.get("run") or {}).get("options") or {}).get("memory_budget_bytes")
    capacity = max(seen) if seen else None
    if budget and (capacity is None or budget < capacity):
        capacity = int(budget)
    return capacity


def memory_limit(points: list[Doc], capacity_bytes: int | None) -> Doc | None:
    """The largest batch predicted to fit at one length (``points``: that length's), with
    the line it comes from; None with fewer than two measured points, no capacity, or a
    limit beyond :data:`MAX_EXTRAPOLATION` times the largest batch measured there."""
    measured = sorted((p["batch_size"], p["peak_memory_bytes"]) for p in points
                      if p["status"] == Status.OK.value and p.get("peak_memory_bytes"))
    if capacity_bytes is None or len({b for b, _ in measured}) < 2:
        return None
    line = fit_line([float(b) for b, _ in measured], [float(m) for _, m in measured])
    if line.slope <= MIN_ROW_SHARE * max(line.intercept, 1.0):
        return None
    limit = max(int((capacity_bytes - line.intercept) // line.slope), 0)  # 0: not one row
    if limit > MAX_EXTRAPOLATION * max(b for b, _ in measured):
        return None
    return {"batch_size": limit, "bytes_per_row": line.slope,
            "fixed_bytes": line.intercept, "capacity_bytes": capacity_bytes,
            "measured_batch_sizes": sorted({b for b, _ in measured})}


def sequence_grid_section(doc: Doc, grid: list[GridPoint]) -> Doc | None:
    """The ``sequence_grid`` section from the report's document and the grid points; None
    when the model sets no SEQ_LENS."""
    model = doc.get("model") or {}
    seq_lens = model.get("seq_lens") or []
    if not seq_lens:
        return None
    base = seq_lens[0]
    per_token = bool(model.get("units_per_row_per_token"))
    base_units = int(model.get("units_per_row") or 1)
    points = _sweep_points(doc, base, base_units)
    for g in grid:
        if g.seq_len is None or g.seq_len == base:
            continue
        units = g.units_per_row or (g.seq_len if per_token else base_units)
        latency = g.latency_s.median if g.latency_s is not None else None
        points.append(_point(g.batch_size, g.seq_len, g.status.value, latency, units,
                             g.peak_memory_bytes, "grid", g.error.split("\n")[0]))
    points.sort(key=lambda p: (p["seq_len"], p["batch_size"]))
    by_length: dict[int, list[Doc]] = defaultdict(list)
    for p in points:
        by_length[p["seq_len"]].append(p)
    capacity = capacity_bytes(doc)
    lengths = []
    for length in seq_lens:
        here = by_length.get(length, [])
        ok = [p for p in here if p["throughput_per_s"]]
        best = max(ok, key=lambda p: p["throughput_per_s"], default=None)
        lengths.append({
            "seq_len": length,
            "measured": len(ok),
            "best_batch_size": best["batch_size"] if best else None,
            "best_throughput_per_s": best["throughput_per_s"] if best else None,
            "memory_limit": memory_limit(here, capacity),
            "out_of_memory_at": min((p["batch_size"] for p in here
                                     if p["status"] == Status.OOM.value), default=None),
        })
    ok = [p for p in points if p["throughput_per_s"]]
    best = max(ok, key=lambda p: p["throughput_per_s"], default=None)
    return {
        "seq_lens": list(seq_lens),
        "base_seq_len": base,
        "units_per_row_per_token": per_token,
        "points": points,
        "lengths": lengths,
        "best": ({k: best[k] for k in ("batch_size", "seq_len", "throughput_per_s",
                                       "tokens_per_step")} if best else None),
    }
