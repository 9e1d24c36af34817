"""A kernel probe's spec: which op, on which shapes, the classifiers ask the worker to time.

The plan builds specs (:mod:`batchscope.probe_plan`), the sweep sends them
(:class:`batchscope.profiler.protocol.RunProbes`) and the worker times them
(:mod:`batchscope.profiler.probe`, where the module docstring says how); the times come back
under each spec's :attr:`ProbeSpec.key`. How long the worker times a probe is here too
(:data:`PROBE_TIME_S`, ...): the worker times by it, and the plan
(:mod:`batchscope.probe_plan`) estimates a probe's cost by it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from batchscope.records.measurement import ArgValue

# Each probe runs until this much time or MAX_REPEATS calls (at least MIN_REPEATS).
PROBE_TIME_S = 0.05
MIN_REPEATS = 2
MAX_REPEATS = 25
# A warm-up call at least this long is followed by one timed call, not MIN_REPEATS (the
# decode sample's LM head at batch 1024 takes 1.2 s a call).
LONG_CALL_S = 0.2


def probe_key(name: str, shapes: list[list[int]], args: list[Any] | None = None,
              dtype: str = "") -> str:
    """The one name of a probe: its op, its arguments' shapes, for a convolution or a
    replayed op its other arguments, and the dtype it ran in where given (under ``--amp``
    one shape may run in two).

    Example:
        >>> probe_key("mm", [[8, 16], [16, 4]])
        'mm[[8,16],[16,4]]'
        >>> probe_key("mm", [[8, 16], [16, 4]], dtype="bfloat16")
        'mm[[8,16],[16,4]]@bfloat16'
        >>> probe_key("convolution", [[8, 3, 32, 32], [16, 3, 3, 3]],
        ...           [[2, 2], [1, 1], [1, 1], False, [0, 0], 1])
        'convolution[[8,3,32,32],[16,3,3,3]][[2,2],[1,1],[1,1],false,[0,0],1]'
    """
    key = name + json.dumps(shapes, separators=(",", ":"))
    if args is not None:
        key += json.dumps(args, separators=(",", ":"))
    return f"{key}@{dtype}" if dtype else key


@dataclass(frozen=True)
class ProbeSpec:
    """One kernel probe: an op called alone on its own shapes
    (:mod:`batchscope.profiler.probe` times it).

    Attributes:
        key: its one name (:func:`probe_key`), by which its time comes back.
        name: the aten op, one of ``batchscope.op_families.PROBED_OPS``.
        shapes: its tensor arguments' shapes, in aten order.
        args: its other arguments in schema order (``CountedOp.call_args``): a
            convolution's or a replayed op's; None for a matmul.
        dtype: the dtype the op ran in ("" for the model's).
        op_id: the op of the model whose shapes these are (``OpStat.op_id``): its probes at
            several sizes, smallest first, let a long one skip its warm-up.
        batch: the batch size these shapes are at, with ``op_id``.
        budget_s: for a cost-bounded probe, the seconds such probes may take in all: it is
            skipped once they have (``batchscope.profiler.probe.run_probes``); None: always
            timed.
    """

    key: str
    name: str
    shapes: list[list[int]]
    args: list[ArgValue] | None = None
    dtype: str = ""
    op_id: str | None = None
    batch: int | None = None
    budget_s: float | None = None

    @classmethod
    def of(cls, name: str, shapes: list[list[int]], args: list[ArgValue] | None = None,
           dtype: str = "", **more: Any) -> ProbeSpec:
        """The spec of ``name`` on ``shapes``, keyed by :func:`probe_key`.

        Example:
            >>> ProbeSpec.of("mm", [[8, 16], [16, 4]]).key
            'mm[[8,16],[16,4]]'
        """
        return cls(probe_key(name, shapes, args, dtype), name, shapes, args, dtype, **more)
