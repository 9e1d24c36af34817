"""Why state such as a KV cache does not amortize with the batch."""

from __future__ import annotations

from batchscope.records import (
    BatchResult,
    OpStat,
    Report,
    Source,
)
from batchscope.reports import fmt
from batchscope.reports import view as v
from batchscope.reports.words import Section, bound_words, module_of

# State under this share of a step's bytes at the largest batch is the inputs themselves
# rather than a cache that competes with the weights: a sentence, not a warning.
STATE_NEGLIGIBLE_SHARE = 0.10

# An op whose bytes are mostly state is "state-bound": it cannot amortize with the batch.
STATE_OP_SHARE = 0.5

# Ops named in the state paragraph, at most.
MAX_STATE_OPS = 3

def _state_ops(batch: BatchResult) -> list[OpStat]:
    out = []
    for op in v.ops_by_time(batch):
        total = op.bytes.total
        if total and op.bytes.state / total >= STATE_OP_SHARE:
            out.append(op)
    return out[:MAX_STATE_OPS]

def _state_ops_sentence(lo: BatchResult, hi: BatchResult) -> str:
    """The ops that read state, where they sit on the roofline at both ends of the sweep."""
    ops = _state_ops(hi)
    if not ops:
        return ""
    first = {o.op_id: o for o in lo.ops}
    names = []
    for op in ops:
        before = first.get(op.op_id)
        names.append(f"{op.name}{' in ' + module_of(op) if op.module else ''} "
                     f"(intensity {fmt.number(before.intensity if before else None)} FLOP/byte "
                     f"at batch {lo.batch_size}, {fmt.number(op.intensity)} at batch "
                     f"{hi.batch_size}, {bound_words(op.bound)})")
    return ("The ops that read it stay where they were on the roofline as the batch grows: "
            + "; ".join(names) + ". A longer context or a larger cache makes state a bigger "
            "share of every step, and batching stops paying sooner.")

def state(report: Report) -> Section | None:
    """Weights amortize, state does not: per-row bytes at the smallest and largest batch."""
    pts = [(b, b.bytes) for b in v.measured(report) if b.bytes is not None]
    if not pts:
        return None
    (lo, lo_bytes), (hi, hi_bytes) = pts[0], pts[-1]
    n0, n1 = lo.batch_size, hi.batch_size
    w0, s0 = lo_bytes.weights, lo_bytes.state
    s1 = hi_bytes.state
    total1, total0 = v.step_bytes(hi) or 1.0, v.step_bytes(lo) or 1.0
    negligible = s1 / total1 < STATE_NEGLIGIBLE_SHARE
    title = ("Weights amortize; nothing here that does not" if negligible
             else "Why state such as a KV cache does not amortize")
    sec = Section("state", title)
    if n1 > n0:
        sec.paragraphs.append(
            f"Weights are {fmt.nbytes(w0)} per step at every batch size, read once and shared "
            f"by every row: per row they fall from {fmt.nbytes(w0 / n0)} at batch {n0} to "
            f"{fmt.nbytes(hi_bytes.weights / n1)} at batch {n1}.")
    else:
        sec.paragraphs.append(f"Weights are {fmt.nbytes(w0)} per step, read once and shared by "
                              "every row of a batch; only one batch size was measured.")
    # A watched loop has no make_inputs: its state is what its model was called with.
    watched = report.run.source == Source.WATCH
    if negligible:
        given = "the step was given" if watched else "built by make_inputs"
        sec.paragraphs.append(
            f"Inputs and state {given} take {fmt.nbytes(s1 / n1)} per row "
            f"({fmt.pct(s1 / total1)} of the step's bytes at batch {n1}): each row brings its "
            "own, so they never amortize, but at this size they do not hold the weights back. "
            "Activations grow with the batch, as they must "
            f"({fmt.nbytes(hi_bytes.activations / n1)} per row at batch {n1}).")
        return sec
    sec.paragraphs.append(
        f"State (tensors {'the step was given' if watched else 'make_inputs built'} that "
        "every step reads again, such as a KV cache) is "
        f"{fmt.nbytes(s0 / n0)} per row at batch {n0} and {fmt.nbytes(s1 / n1)} per row at "
        f"batch {n1}: every row owns its own, so no batch can share it. It is "
        f"{fmt.pct(s1 / total1)} of the step's bytes at batch {n1}, up from "
        f"{fmt.pct(s0 / total0)} at batch {n0}.")
    ops = _state_ops_sentence(lo, hi)
    if ops:
        sec.paragraphs.append(ops)
    return sec
