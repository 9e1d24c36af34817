"""The work a step does, as counted: the regression gate's first, noise-free evidence.

A timing moves with the machine (a shared 2-core VM drifts 10-30% over minutes); the work a
step does does not. The counting pass gives each batch size's FLOPs and bytes per step
(``BatchResult.flops``, ``BatchResult.bytes``) and its ops (``OpStat.calls``); a GPU trace
adds the kernels each op launched (``OpStat.kernels[].calls``). Two runs of the same code
count the same numbers exactly, so a head that does more of any of them did change, whatever
its clock said: like instruction counts in CI benchmarking. ``compare`` reads these first
(reports/compare.py), and so does its A/B mode (reports/ab_compare.py).

Example:
    >>> from batchscope.records import ByteSplit, Status
    >>> base = WorkCount(flops=1000, bytes=400, op_calls=10)
    >>> head = WorkCount(flops=1300, bytes=400, op_calls=10)
    >>> delta = work_delta(8, base, head, threshold=0.10)
    >>> [(c.measure.value, round(c.change, 2)) for c in delta.more_work]
    [('flops', 0.3)]
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from batchscope.records.measurement import BatchResult, Status


class WorkMeasure(str, Enum):
    """What is counted per step."""

    FLOPS = "flops"  # counted FLOPs (multiply and add count one each)
    BYTES = "bytes"  # compulsory bytes of every tensor the ops touch (ByteSplit.total)
    OP_CALLS = "op_calls"  # aten op calls (sum of OpStat.calls)
    KERNEL_CALLS = "kernel_calls"  # GPU kernel launches (OpStat.kernels[].calls), where known


@dataclass(frozen=True)
class WorkCount:
    """One batch size's counted work per step; None: not counted (a timing-only run, a
    trace without shapes, a CPU run for kernels)."""

    flops: int | None = None
    bytes: int | None = None
    op_calls: int | None = None
    kernel_calls: float | None = None

    def get(self, measure: WorkMeasure) -> float | None:
        """The count of ``measure`` (None: not counted)."""
        value: float | None = getattr(self, measure.value)
        return value

    @property
    def counted(self) -> bool:
        """True when anything was counted."""
        return any(self.get(m) is not None for m in WorkMeasure)


@dataclass(frozen=True)
class WorkChange:
    """One measure counted on both sides at one batch size.

    ``change`` is head over base minus one (None where the base counted 0 and the head did
    not: new work, with no ratio); ``more`` and ``less`` say whether it moved past the
    comparison's threshold either way."""

    measure: WorkMeasure
    base: float
    head: float
    change: float | None
    more: bool
    less: bool


@dataclass(frozen=True)
class WorkDelta:
    """The work of one batch size both sides counted, measure by measure."""

    batch_size: int
    changes: list[WorkChange]

    @property
    def more_work(self) -> list[WorkChange]:
        """The measures the head does more of than the threshold allows."""
        return [c for c in self.changes if c.more]

    @property
    def less_work(self) -> list[WorkChange]:
        """The measures the head does less of, by more than the threshold."""
        return [c for c in self.changes if c.less]

    @property
    def same(self) -> bool:
        """True when every measure is counted exactly the same on both sides."""
        return all(c.base == c.head for c in self.changes)


CALL_MEASURES = (WorkMeasure.OP_CALLS, WorkMeasure.KERNEL_CALLS)
"""What is counted of a step whatever its ops' formulas: how many ops and kernels ran."""


def calls_only(delta: WorkDelta) -> WorkDelta:
    """``delta``'s op and kernel calls only: all of the work that can be judged where ops
    nobody counted leave a hole in a step's FLOPs and bytes."""
    return WorkDelta(delta.batch_size, [c for c in delta.changes if c.measure in CALL_MEASURES])


def work_count(batch: BatchResult | None) -> WorkCount | None:
    """The counted work of a finished batch size (None: not finished, or nothing counted).

    Op calls are counted only where the op breakdown ran (``ops`` non-empty); kernel calls
    only where some op lists kernels (a GPU trace)."""
    if batch is None or batch.status != Status.OK:
        return None
    op_calls = sum(op.calls for op in batch.ops) if batch.ops else None
    kernels = [k.calls for op in batch.ops for k in op.kernels]
    count = WorkCount(
        flops=batch.flops,
        bytes=batch.bytes.total if batch.bytes is not None else None,
        op_calls=op_calls,
        kernel_calls=sum(kernels) if kernels else None,
    )
    return count if count.counted else None


def relative_change(base: float, head: float) -> float | None:
    """``head / base - 1``; 0 when both are 0; None when only the base is 0 (or the quotient
    is past a float)."""
    if base == 0:
        return 0.0 if head == 0 else None
    try:
        return head / base - 1.0
    except OverflowError:
        return None


def _as_float(value: float) -> float:
    """A count as a float (a record's JSON reads the same back), the largest float for an
    integer past float64's range."""
    try:
        return float(value)
    except OverflowError:
        return 1.7976931348623157e308


def work_delta(batch_size: int, base: WorkCount, head: WorkCount,
               threshold: float) -> WorkDelta:
    """Every measure both counts hold, with whether it moved past ``threshold`` (a share:
    0.10 for 10%). New work where the base counted none is more work."""
    changes = []
    for measure in WorkMeasure:
        b, h = base.get(measure), head.get(measure)
        if b is None or h is None:
            continue
        change = relative_change(b, h)
        more = h > b if change is None else change > threshold
        less = change is not None and change < -threshold
        changes.append(WorkChange(measure, _as_float(b), _as_float(h), change, more, less))
    return WorkDelta(batch_size, changes)
