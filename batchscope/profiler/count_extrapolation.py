"""Count at a few batch sizes, carry the counts to the larger ones.

Every op's FLOPs and bytes are linear in the batch size on the models batchscope targets
(weights a fixed part, activations and state a part per row), and the op sequence is the
same at every size. So the counting pass, a full step under a dispatch mode (slower than a
step), need not run at every batch size: counted at three, the counts at the third must be
exactly what the two before it extrapolate to (names, shapes, a convolution's stride and the
like, FLOPs, each kind of bytes, within :data:`TOLERANCE`); from then on each larger size
gets the counts of its two predecessors carried to it, op by op. Where the check fails the
next size is counted and checked again against its two predecessors: batch 1 often runs a
few ops fewer than batch 2 (a dimension of 1 needs no copy; a GPT-2 training step: 702
ops, then 708 from batch 2 on), and judged on batches 1, 2 and 4 alone such a model was
counted at every size, each count costing about a step. A model whose counts are not
linear (an early exit, routing, a kernel chosen by size) keeps failing the check and is
counted at every size.

The worker also re-counts when an extrapolated size joins worse than the size before it
(its op sequence changed), and from then on counts every size: see :meth:`CountPlan.reject`.
"""

from __future__ import annotations

from collections.abc import Callable

from batchscope.batch_shapes import scaled_shapes
from batchscope.records import ByteSplit, CountedOp

# Relative difference allowed between extrapolated and counted FLOPs or bytes of an op.
TOLERANCE = 0.01
# Counted sizes before extrapolation is trusted: two to extrapolate from, one to check.
CHECKED_SIZES = 3


def _line(a: int, b: int, b_a: int, b_b: int, target: int) -> float:
    return a + (b - a) * (target - b_a) / (b_b - b_a)


def extrapolate(ops_a: list[CountedOp], b_a: int, ops_b: list[CountedOp], b_b: int,
                target: int) -> list[CountedOp] | None:
    """The counts at ``target`` carried from those at ``b_a`` and ``b_b``, op by op; None
    when the two sequences differ or an op's shapes or work would not extrapolate."""
    if len(ops_a) != len(ops_b) or b_a == b_b:
        return None
    out = []
    for a, b in zip(ops_a, ops_b, strict=True):
        if (a.name != b.name or a.module != b.module or (a.flops is None) != (b.flops is None)
                or a.call_args != b.call_args):
            return None
        shapes = scaled_shapes(a.input_shapes, b_a, b.input_shapes, b_b, target)
        if shapes is None:
            return None
        flops = None if a.flops is None or b.flops is None else round(
            _line(a.flops, b.flops, b_a, b_b, target))
        split = [round(_line(x, y, b_a, b_b, target)) for x, y in
                 zip((a.bytes.weights, a.bytes.state, a.bytes.activations, a.bytes.unsplit),
                     (b.bytes.weights, b.bytes.state, b.bytes.activations, b.bytes.unsplit),
                     strict=True)]
        if (flops is not None and flops < 0) or min(split) < 0:
            return None
        out.append(CountedOp(b.name, shapes, b.dtype, flops, ByteSplit(*split), b.module,
                             b.call_args))
    return out


def _close(x: int | None, y: int | None) -> bool:
    if x is None or y is None:
        return x is y
    return abs(x - y) <= TOLERANCE * max(abs(x), abs(y), 1)


def agrees(predicted: list[CountedOp], counted: list[CountedOp]) -> bool:
    """Whether ``predicted`` is ``counted``, op by op, within :data:`TOLERANCE`."""
    if len(predicted) != len(counted):
        return False
    for p, c in zip(predicted, counted, strict=True):
        if (p.name != c.name or p.input_shapes != c.input_shapes or p.call_args != c.call_args
                or not _close(p.flops, c.flops)):
            return False
        for kind in ("weights", "state", "activations", "unsplit"):
            if not _close(getattr(p.bytes, kind), getattr(c.bytes, kind)):
                return False
    return True


class CountPlan:
    """Which batch sizes are counted and which get extrapolated counts, in ascending order.

    Example:
        >>> plan = CountPlan()
        >>> ops, source = plan.counts(1, lambda: [])
        >>> source
        []
    """

    def __init__(self) -> None:
        self.counted: dict[int, list[CountedOp]] = {}
        self.linear: bool | None = None  # the last check's verdict; None: none made yet
        self.rejected = False  # an extrapolated size did not fit its profile: no more checks

    def counts(self, batch_size: int, count: Callable[[], list[CountedOp]]
               ) -> tuple[list[CountedOp], list[int]]:
        """The counts at ``batch_size`` and the two sizes they were extrapolated from ([]
        when ``count`` ran)."""
        sizes = sorted(b for b in self.counted if b < batch_size)
        if self.linear and len(sizes) >= 2:
            a, b = sizes[-2], sizes[-1]
            carried = extrapolate(self.counted[a], a, self.counted[b], b, batch_size)
            if carried is not None:
                return carried, [a, b]
        return self.record(batch_size, count()), []

    def record(self, batch_size: int, counted: list[CountedOp]) -> list[CountedOp]:
        """Keep a counted size; with :data:`CHECKED_SIZES` counted, judge linearity again
        on it and the two counted before it (unless rejected)."""
        sizes = sorted(b for b in self.counted if b < batch_size)
        if not self.rejected and len(sizes) >= CHECKED_SIZES - 1:
            a, b = sizes[-2], sizes[-1]
            carried = extrapolate(self.counted[a], a, self.counted[b], b, batch_size)
            self.linear = carried is not None and agrees(carried, counted)
        self.counted[batch_size] = counted
        for old in sorted(self.counted)[:-2]:  # two suffice to extrapolate from
            del self.counted[old]
        return counted

    def reject(self) -> None:
        """An extrapolated size did not fit its profile: count every size from now on."""
        self.linear = False
        self.rejected = True
