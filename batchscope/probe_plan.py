"""Which kernel probes to time next, and how long they may take (pure, no I/O, no torch).

The step-time model (:mod:`batchscope.classifiers.step_model`) reads each matmul's,
convolution's and replayed op's time at a batch size from a probe of its own shapes there
(:mod:`batchscope.profiler.probe` times them in the worker). This is its plan: which ops
are probed (:func:`probe_shapes`: the shapes of the two largest measured sizes, scaled),
at which sizes, and within what cost: a cost-bounded op's probe is skipped where one call
is estimated over :data:`PROBE_MAX_CALL_S`, and such probes together stop at
:func:`probe_budget_s` (a share of the sweep's own time), cheapest first. Three callers
ask: the predicted stop (:func:`stop_probe_specs`, through
``classifiers.early_stop.EarlyStop.probes``), the report's prediction
(:func:`final_probe_specs`) and the benchmark (``benchmarks/prediction.py``); the model
reads the times back by each spec's key (:class:`ProbeScaling`).

Example:
    >>> probe_budget_s([])
    3.0
    >>> stop_probe_specs([], [64])
    []
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

from batchscope.batch_shapes import scaled_shapes
from batchscope.op_families import ARGS_PROBED, PROBED_OPS, REPLAYED_OPS
from batchscope.records import ArgValue, BatchResult, Status
from batchscope.records.probe import (
    LONG_CALL_S,
    MAX_REPEATS,
    MIN_REPEATS,
    PROBE_TIME_S,
    ProbeSpec,
    probe_key,
)

# The model is fitted on the largest this many measured batch sizes: the nearest to the
# sizes it predicts, past the small-batch kernel steps (MKL's 2-8 row path).
FIT_WINDOW = 3
# Probes of these ops have a cost bound: their work is all per row (a convolution's weights
# are a sliver of its activations), so one call's time at b is estimated as its measured
# time per call at the largest fitted size times b / that size. A matmul is not bounded: at
# small b its time is its weight read, which that estimate multiplies by b. Decode's LM head
# (154 MB of weights, ~8-10 ms a call at batch 1-8) would be estimated at 1-10 s a call at
# 1024 from the sizes the early stop first sees; it takes 1.2 s, and its probe there takes
# decode's prediction at 1024 from -18% to -10% (docs/benchmarks.md, table 9).
COST_BOUNDED_PROBES = ARGS_PROBED
# A replayed op (batch norm, pooling, a backward convolution, ...;
# op_families.REPLAYED_OPS) is probed only where it took at least this share of the
# profiled step at the larger of the two sizes its shapes scale from: the probes share one
# budget, cheapest first, and a CNN's many small additions would spend it before its
# pooling and batch norms.
MIN_REPLAYED_SHARE = 0.02
# A probe of a bounded op is skipped where one call is estimated over this long. A
# ResNet-18 convolution takes ~1-2 s a call at batch 1024 on a quiet 2-core CPU, several
# times that on a shared one (here the stem took 3.4 s at batch 256): unbounded, its 11
# shapes at every power of two to 1024 take minutes, past the worker's 120 s for a round
# (supervisor.PROBE_TIMEOUT_S; a round over it is lost, its matmul probes too). Under 1 s
# a shape's probes at every power of two take ~4 s at most (two calls a probe, the sizes'
# calls summing to under twice the largest): a ResNet-18's largest convolutions are probed
# up to 64-512, by how fast the machine runs them. Past its largest probe, an op's time
# grows in proportion to the rows (step_model.OpCurve.scaled_from).
PROBE_MAX_CALL_S = 1.0
# ...and the bounded ops' probes, cheapest first, stop at this many seconds estimated
# (:func:`_probe_cost_s`), leaving the rest of the round's 120 s to filling their inputs
# (~1.5 ns a byte) and to the matmuls' probes (decode: 12 s). At ~4 s a shape at most, a
# ResNet-18's 11 shapes fit; a model with more shapes at the bound loses its most costly
# probes first.
PROBE_ROUND_S = 45.0
# Within that, the probes may take at most this share of what the sweep has spent
# measuring so far (the batch sizes' wall time), and at least PROBE_BUDGET_MIN_S: a CNN
# that plateaued after 6 s of sweep had spent 60 s probing its 11 convolutions at every
# size to 1024 for the report's predicted curve. Probes already timed count against it,
# so the budget grows with the sweep across rounds.
PROBE_BUDGET_SHARE = 0.5
PROBE_BUDGET_MIN_S = 3.0


def usable_results(results: list[BatchResult]) -> list[BatchResult]:
    """The results the step-time model reads: measured, with an op breakdown, a timed
    latency and a profiled step, smallest batch first."""
    return sorted((r for r in results if r.status == Status.OK and r.ops and r.latency_s
                   and r.profiled_step_s), key=lambda r: r.batch_size)


@dataclass
class ProbeScaling:
    """How a probed op's arguments follow the batch: its shapes at two measured sizes
    (:func:`~batchscope.batch_shapes.scaled_shapes`), its other arguments (a convolution's
    stride, ...: ``OpStat.call_args``), one call's measured seconds at the larger size and
    the dtype it ran in (under ``--amp`` an fp32 model's matmuls run in bfloat16), which
    its probe runs in and its key names."""

    name: str
    small: list[list[int]]
    b_small: int
    large: list[list[int]]
    b_large: int
    args: list[ArgValue] | None = None
    call_s: float = 0.0
    dtype: str = ""

    def shapes(self, b: int) -> list[list[int]] | None:
        return scaled_shapes(self.small, self.b_small, self.large, self.b_large, b)

    def key(self, b: int) -> str | None:
        """The spec key of its probe at batch ``b``; None where its shapes do not scale."""
        shapes = self.shapes(b)
        return (probe_key(self.name, shapes, self.args, self.dtype) if shapes is not None
                else None)

    def estimated_call_s(self, b: int) -> float:
        """One call's seconds at ``b``, in proportion to the rows from the larger size."""
        return self.call_s * b / self.b_large

    def too_costly(self, b: int, bound_all: bool = False) -> bool:
        """Whether its probe at ``b`` is skipped for cost (:data:`PROBE_MAX_CALL_S`): a
        cost-bounded op's, or with ``bound_all`` a matmul's too."""
        return ((bound_all or self.name in COST_BOUNDED_PROBES)
                and self.estimated_call_s(b) > PROBE_MAX_CALL_S)


def probe_shapes(results: list[BatchResult]) -> dict[str, ProbeScaling]:
    """Per probed op id: how its arguments scale, from the two largest usable sizes (a
    convolution or a replayed op only with its call args recorded, the same at both; a
    replayed op only from :data:`MIN_REPLAYED_SHARE` of the step)."""
    usable = usable_results(results)
    if len(usable) < 2:
        return {}
    small, large = usable[-2], usable[-1]
    before = {op.op_id: op for op in small.ops if op.name in PROBED_OPS}
    out = {}
    for op in large.ops:
        prior = before.get(op.op_id)
        if prior is None or prior.call_args != op.call_args:
            continue
        if op.name in COST_BOUNDED_PROBES and op.call_args is None:
            continue  # recorded before call args were: it cannot be called again
        if op.name in REPLAYED_OPS and op.time_s < MIN_REPLAYED_SHARE * (
                large.profiled_step_s or float("inf")):
            continue
        out[op.op_id] = ProbeScaling(op.name, prior.input_shapes, small.batch_size,
                                     op.input_shapes, large.batch_size, op.call_args,
                                     op.time_s / max(op.calls, 1), op.dtype)
    return out


def probe_budget_s(results: list[BatchResult]) -> float:
    """Seconds the cost-bounded probes may take: :data:`PROBE_BUDGET_SHARE` of the wall
    time the sweep spent on its batch sizes, within [PROBE_BUDGET_MIN_S, PROBE_ROUND_S]."""
    spent = sum(r.wall_s or 0.0 for r in results)
    return min(max(PROBE_BUDGET_SHARE * spent, PROBE_BUDGET_MIN_S), PROBE_ROUND_S)


def probe_specs(results: list[BatchResult], sizes: list[int],
                budget_s: float | None = None,
                bound_above: int | None = None) -> list[ProbeSpec]:
    """The kernel probes that give each matmul and convolution of the model its time at
    ``sizes`` (and at the measured ones, the reference), one per distinct shape.

    A convolution's probe is left out where one call is estimated over
    :data:`PROBE_MAX_CALL_S`, and past ``budget_s`` of them all (default
    :func:`probe_budget_s`; the most costly left out first); its time there is scaled from
    its largest probe below. The estimate runs short of what a probe costs (its input
    filled with random numbers, the output's page faults: 10.6 s spent against ~4 s
    estimated for the CNN sample on a 2-core EPYC), so the convolutions' specs come last,
    cheapest first, each carrying ``budget_s``: the worker stops timing them once they
    have taken that long, measured (:func:`batchscope.profiler.probe.run_probes`).

    Past ``bound_above`` (``--predict-to``'s sizes past ``--max-batch``: a round that
    runs past the worker's 120 s loses every probe in it) a matmul's probe is skipped
    over :data:`PROBE_MAX_CALL_S` a call too, and its fit stands there.

    The matmuls come first, each op's sizes in ascending order with its op id as
    ``op_id`` and the batch size as ``batch``: the worker skips the warm-up call of a
    probe its family's smaller one says is long
    (:data:`~batchscope.records.probe.LONG_CALL_S`).
    """
    budget_s = probe_budget_s(results) if budget_s is None else budget_s
    specs: dict[str, ProbeSpec] = {}
    bounded: dict[str, float] = {}  # key -> estimated seconds of one call
    for op_id, scaling in probe_shapes(results).items():
        for b in sorted(set(sizes)):
            shapes = scaling.shapes(b)
            if shapes is None or scaling.too_costly(
                    b, bound_all=bound_above is not None and b > bound_above):
                continue
            spec = ProbeSpec.of(scaling.name, shapes, scaling.args, scaling.dtype,
                                op_id=op_id, batch=b)
            if spec.key in specs:
                continue
            specs[spec.key] = spec
            if scaling.name in COST_BOUNDED_PROBES:
                bounded[spec.key] = scaling.estimated_call_s(b)
    spent = 0.0
    kept = []
    for key, call_s in sorted(bounded.items(), key=lambda kv: kv[1]):
        spent += _probe_cost_s(call_s)
        if spent <= budget_s:
            kept.append(dataclasses.replace(specs[key], budget_s=budget_s))
    return [s for key, s in specs.items() if key not in bounded] + kept


def _probe_cost_s(call_s: float) -> float:
    """Seconds a probe of ``call_s`` a call takes in the worker
    (:func:`batchscope.profiler.probe.time_probe`): a warm-up call, then one timed call
    after a long warm-up, else timed calls until PROBE_TIME_S has passed (at least
    MIN_REPEATS, at most MAX_REPEATS).

    Example:
        >>> _probe_cost_s(0.5), _probe_cost_s(0.125), round(_probe_cost_s(0.001), 6)
        (1.0, 0.375, 0.026)
    """
    if call_s >= LONG_CALL_S:
        return 2 * call_s
    timed = min(max(MIN_REPEATS, math.ceil(PROBE_TIME_S / call_s) if call_s > 0 else 1),
                MAX_REPEATS)
    return call_s * (1 + timed)


def stop_probe_specs(results: list[BatchResult], remaining: list[int]) -> list[ProbeSpec]:
    """The kernel probes the predicted stop reads
    (:func:`batchscope.classifiers.step_model.predicted_stop`): every probed op at the
    remaining sizes and the measured ones ([] while too few sizes are measured to
    judge)."""
    usable = usable_results(results)
    if not remaining or len(usable) < FIT_WINDOW + 1:
        return []
    return probe_specs(results, [*remaining, *(r.batch_size for r in usable)])


def final_probe_specs(results: list[BatchResult], unmeasured: list[int], max_batch: int,
                      predict_to: int | None = None) -> list[ProbeSpec]:
    """The kernel probes the report's prediction uses: every matmul and convolution of the
    model (a convolution within its cost bound: :func:`probe_specs`) at every measured
    batch size and every ``unmeasured`` one it predicts
    (``classifiers.analyze.unmeasured_sizes``). Under ``--predict-to`` (``predict_to``)
    the predicted curve is what the user asked for, not a by-product of a sweep, and the
    bounded probes may take a round's whole :data:`PROBE_ROUND_S`, not half the sweep's
    time; past ``--max-batch`` (``max_batch``) a matmul's probe is bounded too."""
    sizes = [r.batch_size for r in results if r.status == Status.OK]
    return probe_specs(results, sizes + unmeasured,
                       budget_s=PROBE_ROUND_S if predict_to else None,
                       bound_above=max_batch if predict_to else None)
