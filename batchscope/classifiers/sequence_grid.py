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
    >>> points = [SequencePoint(1, 8, Status.OK, 0.01, 8, 8, 800.0, 1100, "sweep")]
    >>> memory_limit(points, capacity_bytes=2000) is None  # one point: no line
    True
"""

from __future__ import annotations

from collections import defaultdict

from batchscope.classifiers.critical_batch import fit_line
from batchscope.records import BatchResult, GridPoint, ModelInfo, Status
from batchscope.records.report import (
    MemoryLimit,
    SequenceBest,
    SequenceGrid,
    SequenceLength,
    SequencePoint,
)

# A per-row slope under this share of the fixed part is no growth that a limit can be
# read off (the noise of a resident set size): the limit is then not predicted.
MIN_ROW_SHARE = 1e-4
# A limit this many times the largest batch measured at its length is no prediction
# anyone should act on: the line is extrapolated too far.
MAX_EXTRAPOLATION = 64


def _point(batch_size: int, seq_len: int, status: Status, latency_s: float | None,
           units_per_row: int, peak_memory_bytes: int | None, source: str,
           error: str = "") -> SequencePoint:
    ok = status == Status.OK and latency_s
    return SequencePoint(
        batch_size=batch_size, seq_len=seq_len, status=status, latency_s=latency_s,
        units_per_row=units_per_row, tokens_per_step=batch_size * seq_len,
        throughput_per_s=batch_size * units_per_row / latency_s if ok and latency_s else None,
        peak_memory_bytes=peak_memory_bytes, source=source, error=error)


def _sweep_points(batches: list[BatchResult], base: int, units_per_row: int
                  ) -> list[SequencePoint]:
    return [_point(b.batch_size, base, b.status, b.latency_s.median if b.latency_s else None,
                   units_per_row, b.peak_memory_bytes, "sweep", b.error.split("\n")[0])
            for b in batches]


def capacity_bytes(batches: list[BatchResult], budget_bytes: int | None) -> int | None:
    """What the process could hold: the largest peak plus the memory still free when it was
    measured, over every batch size; ``--memory-budget`` when smaller."""
    seen = [b.peak_memory_bytes + b.available_memory_bytes for b in batches
            if b.peak_memory_bytes and b.available_memory_bytes is not None]
    capacity = max(seen) if seen else None
    if budget_bytes and (capacity is None or budget_bytes < capacity):
        capacity = int(budget_bytes)
    return capacity


def memory_limit(points: list[SequencePoint], capacity_bytes: int | None) -> MemoryLimit | None:
    """The largest batch predicted to fit at one length (``points``: that length's), with
    the line it comes from; None with fewer than two measured points, no capacity, or a
    limit beyond :data:`MAX_EXTRAPOLATION` times the largest batch measured there."""
    measured = sorted((p.batch_size, p.peak_memory_bytes) for p in points
                      if p.status == Status.OK and p.peak_memory_bytes)
    if capacity_bytes is None or len({b for b, _ in measured}) < 2:
        return None
    line = fit_line([float(b) for b, _ in measured], [float(m or 0) for _, m in measured])
    if line.slope <= MIN_ROW_SHARE * max(line.intercept, 1.0):
        return None
    limit = max(int((capacity_bytes - line.intercept) // line.slope), 0)  # 0: not one row
    if limit > MAX_EXTRAPOLATION * max(b for b, _ in measured):
        return None
    return MemoryLimit(batch_size=limit, bytes_per_row=line.slope, fixed_bytes=line.intercept,
                       capacity_bytes=capacity_bytes,
                       measured_batch_sizes=sorted({b for b, _ in measured}))


def sequence_grid_section(model: ModelInfo, batches: list[BatchResult], grid: list[GridPoint],
                          budget_bytes: int | None) -> SequenceGrid | None:
    """The ``sequence_grid`` section from the sweep's batches and the grid points; None
    when the model sets no SEQ_LENS."""
    seq_lens = model.seq_lens
    if not seq_lens:
        return None
    base = seq_lens[0]
    per_token = model.units_per_row_per_token
    base_units = model.units_per_row
    points = _sweep_points(batches, base, base_units)
    for g in grid:
        if g.seq_len is None or g.seq_len == base:
            continue
        units = g.units_per_row or (g.seq_len if per_token else base_units)
        latency = g.latency_s.median if g.latency_s is not None else None
        points.append(_point(g.batch_size, g.seq_len, g.status, latency, units,
                             g.peak_memory_bytes, "grid", g.error.split("\n")[0]))
    points.sort(key=lambda p: (p.seq_len, p.batch_size))
    by_length: dict[int, list[SequencePoint]] = defaultdict(list)
    for p in points:
        by_length[p.seq_len].append(p)
    capacity = capacity_bytes(batches, budget_bytes)
    lengths = []
    for length in seq_lens:
        here = by_length.get(length, [])
        ok = [p for p in here if p.throughput_per_s]
        best = max(ok, key=lambda p: p.throughput_per_s or 0.0, default=None)
        lengths.append(SequenceLength(
            seq_len=length, measured=len(ok),
            best_batch_size=best.batch_size if best else None,
            best_throughput_per_s=best.throughput_per_s if best else None,
            memory_limit=memory_limit(here, capacity),
            out_of_memory_at=min((p.batch_size for p in here if p.status == Status.OOM),
                                 default=None)))
    ok = [p for p in points if p.throughput_per_s]
    top = max(ok, key=lambda p: p.throughput_per_s or 0.0, default=None)
    return SequenceGrid(
        seq_lens=list(seq_lens), base_seq_len=base, units_per_row_per_token=per_token,
        points=points, lengths=lengths,
        best=(SequenceBest(top.batch_size, top.seq_len, top.throughput_per_s or 0.0,
                           top.tokens_per_step) if top else None))
