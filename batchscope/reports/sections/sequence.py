"""The batch size x sequence length grid: where the tokens a step processes meet the memory."""

from __future__ import annotations

from batchscope.records import (
    Report,
)
from batchscope.records.report import (
    SequencePoint,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.words import Section

# Two ways of filling the same tokens per step whose tokens/s differ by at most this
# share are "the same": the tokens per step set the throughput, not their split into rows.
SAME_TOKENS_SHARE = 0.10

def _tokens_per_s(point: SequencePoint) -> float:
    """Tokens a second at one point (0 for a point without a latency: none is passed)."""
    return point.tokens_per_step / point.latency_s if point.latency_s else 0.0

def _same_tokens_sentence(points: list[SequencePoint], allowance: float = 0.0) -> str | None:
    """Two ways of filling one number of tokens per step, compared: the shortest rows
    against the longest, at the tokens per step that the most lengths share."""
    by_tokens: dict[int, list[SequencePoint]] = {}
    for p in points:
        by_tokens.setdefault(p.tokens_per_step, []).append(p)
    counted = [(len({p.seq_len for p in ps}), tokens, ps) for tokens, ps in by_tokens.items()]
    shared = [item for item in counted if item[0] >= 2]
    if not shared:
        return None
    _, tokens, ps = max(shared, key=lambda item: (item[0], item[1]))
    short, long_ = min(ps, key=lambda p: p.seq_len), max(ps, key=lambda p: p.seq_len)
    ratio = _tokens_per_s(long_) / _tokens_per_s(short)
    both = (f"at {tokens:,} tokens a step, batch {long_.batch_size} × {long_.seq_len} "
            f"ran at {fmt.rate(_tokens_per_s(long_), 'token')} and batch "
            f"{short.batch_size} × {short.seq_len} at "
            f"{fmt.rate(_tokens_per_s(short), 'token')}")
    # Two points each off by the run's drift allowance a either way: a ratio within
    # (1 + a)² of 1 is noise, never said to differ.
    noise = (1 + allowance) ** 2
    if abs(ratio - 1) <= SAME_TOKENS_SHARE or 1 / noise <= ratio <= noise:
        return (f"The tokens per step set the throughput, not how they are split into rows: "
                f"{both}.")
    if ratio < 1:
        return (f"Longer rows cost more per token: {both} ({fmt.ratio(ratio)}). Attention's "
                "work grows with the square of the length, the rest with the length; where "
                "the task allows, more rows buy more than longer ones.")
    return (f"Longer rows cost less per token here: {both} ({fmt.ratio(ratio)}). At these "
            "lengths the attention a longer row adds is a small part of its step, and its "
            "products run as fewer, larger matrices.")

def sequence(report: Report) -> Section | None:
    """Batch size × sequence length (SEQ_LENS): the best point, what the tokens per step
    explain, and how large a batch fits at each length."""
    grid = report.sequence_grid
    if grid is None or grid.best is None:
        return None
    points = [p for p in grid.points if p.throughput_per_s and p.latency_s]
    best = grid.best
    if not points:
        return None
    unit = v.unit(report)
    base = grid.base_seq_len
    others = [str(n) for n in grid.seq_lens if n != base]
    timed = sum(1 for p in grid.points if p.source == "grid")
    sec = Section("sequence", "Batch size × sequence length")
    text = f"The sweep ran at {base} tokens a row"
    if others:
        text += (f"; {timed} more batch size{'s were' if timed != 1 else ' was'} timed at "
                 f"{', '.join(others)} tokens a row (timing and peak memory only)")
    sec.paragraphs.append(
        text + f". The most work a second: batch {best.batch_size} × {best.seq_len} "
        f"({best.tokens_per_step:,} tokens a step), {fmt.rate(best.throughput_per_s, unit)}.")
    same = _same_tokens_sentence(points, report.run.drift_allowance or 0.0)
    if same:
        sec.paragraphs.append(same)
    fits = []
    for row in grid.lengths:
        if row.memory_limit is not None:
            fits.append(f"at {row.seq_len} tokens a row about batch "
                        f"{row.memory_limit.batch_size:,} "
                        f"({fmt.nbytes(row.memory_limit.bytes_per_row)} a row)")
        if row.out_of_memory_at:
            fits.append(f"at {row.seq_len} tokens batch {row.out_of_memory_at} ran out "
                        "of memory")
    if fits:
        capacity = next((r.memory_limit.capacity_bytes for r in grid.lengths
                         if r.memory_limit is not None), None)
        sec.paragraphs.append(
            "Predicted from the peak memory measured at each length (a line per length, "
            f"within {fmt.nbytes(capacity) if capacity else 'what was free'}): "
            + "; ".join(fits) + ".")
    return sec
