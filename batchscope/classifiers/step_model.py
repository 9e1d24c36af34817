"""The fitted step-time model: T(b) at every batch size, from a few measured ones.

Every op (the same ``op_id`` at every batch size) gets its own batch response, fitted to its
measured times at the largest few measured batch sizes
(:data:`~batchscope.probe_plan.FIT_WINDOW`), the nearest to the ones predicted:

    T_op(b) = fixed + max(memory_factor · bytes(b) / BW, compute_factor · FLOPs(b) / P)

- ``FLOPs(b)`` and ``bytes(b)`` are linear fits of the op's counted work (exact: an op's work
  is linear in the batch size, its weights the shared part), so the roofline times grow as
  the op's own work grows: weights stay, activations and KV state grow with every row.
- ``fixed`` is what the op's calls cost whatever their work: dispatch, a BLAS call's setup.
- The factors are how far from each roof the op runs, measured: a least-squares line of the
  measured time against the roof time. An op measured only on one side of the ridge has one
  factor measured. The other is taken from the ops of the same kind that were measured on
  that side, and otherwise from the path the op takes in the ceilings' own measurement
  (``F.linear`` for matmuls, the 3x3 convolution for convolutions), said in ``assumptions``.
- **Kernel steps**: the BLAS libraries pick another kernel once a matmul has enough rows (on
  the CPU, MKL runs 2-8 rows on a slow path; cuBLAS switches tiles). A memory factor fitted
  where the kernel was slow would carry that kernel into sizes where it no longer runs, so
  once an op's compute roof overtakes its memory roof, its memory factor falls back to the
  fastest its kind reached (at least 1: the roof).
- **Kernel probes** (:mod:`batchscope.probe_plan` plans them, :mod:`batchscope.profiler.probe`
  times them): each matmul and convolution of the model, and each per-row op of
  :data:`~batchscope.op_families.REPLAYED_OPS` that takes
  :data:`~batchscope.probe_plan.MIN_REPLAYED_SHARE` of the step (batch norm, pooling, the
  backward convolution, ...), at its own shapes (and a convolution's stride, padding, ...)
  scaled to the sizes predicted, is timed alone in the worker; where the largest fitted
  size and b both have one, the op's measured time there times the probes' ratio is its
  time at b (or, where alone it ran over twice as fast as in the step there, the larger of
  its fit and its probe at b: :data:`ALONE_SHARE`). This sees the kernel a larger b runs,
  and for a CPU convolution the page faults of its fresh output, which grow per image with
  the batch. A convolution's (or replayed op's) probe is skipped where one call is
  estimated over :data:`~batchscope.probe_plan.PROBE_MAX_CALL_S`, or once such probes have
  taken :func:`~batchscope.probe_plan.probe_budget_s` (a share of the sweep's own time,
  measured by the worker as they run, cheapest first); past its largest probe its time
  grows in proportion to the rows, said in ``assumptions``.
- Ops without a FLOP formula, the framework time between ops (on a GPU, the device's idle
  time), the ops the profiler saw but the counting did not are fitted as powers of b
  (exponent 0 to 1), flat unless they clearly grew.

The sum over ops is the predicted profiled step; the profiler's own cost (profiled step
minus timed latency, the median over the fitted sizes) taken off it gives the predicted
latency. The same curve gives the knee (``fit_knee`` on predicted points), so B*
and the knee come out of one model.

The report forecasts every measured batch size from the sizes before it (the test the
sweep's early stop relies on, :func:`predicted_stop`) and predicts the unmeasured ones
from the largest measured. How far it holds from
batch sizes <= 8 alone, per sample and machine, is in docs/benchmarks.md (a benchmark: it
depends on the machine's BLAS paths).
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, field

from batchscope.classifiers.critical_batch import LinearFit, fit_knee, fit_line
from batchscope.classifiers.roofline import Roof
from batchscope.classifiers.throughput_curve import projects_past
from batchscope.classifiers.uncertainty import throughput_interval
from batchscope.hardware.types import Ceilings
from batchscope.op_families import FAMILY_PATH, Family, family
from batchscope.plan import PLATEAU_PATIENCE
from batchscope.probe_plan import (
    COST_BOUNDED_PROBES,
    FIT_WINDOW,
    PROBE_BUDGET_MIN_S,
    PROBE_MAX_CALL_S,
    PROBE_ROUND_S,
    ProbeScaling,
    probe_shapes,
    usable_results,
)
from batchscope.records import (
    Assumption,
    BatchResult,
    Bound,
    CurvePoint,
    Flag,
    OpStat,
    StepPrediction,
    Stop,
)
from batchscope.records.flag_payloads import (
    AtRoofAssumption,
    MeasuredAboveRidgeAssumption,
    NotProbedAssumption,
    PathSpeedAssumption,
    PlateauOverruled,
    PredictedStop,
)

# An op whose roof time is under this share of its measured time at the largest fitted size
# is all per-call cost there: how far from its roof it runs cannot be read off its times.
IDENTIFIABLE_SHARE = 0.25
# ...unless its work grew at least this many times across the fitted sizes and its time
# kept this share of that pace (log ratio): then it is a slow kernel (a CPU max-pool or
# batch norm at 10% of its roof, train_cnn's at b <= 8 off by up to +169% as per-call
# cost), and its factor is fitted like any other op's.
WORK_GROWTH = 4.0
PACE = 0.7
# A probe under this long is mostly the call's own cost and its timer's noise (and its
# ratio would scale the profiler's cost in the reference time): the op's fitted formula is
# used where either end of the ratio is under it.
PROBE_MIN_S = 50e-6
# The profiler's cost (profiled step minus timed latency, a cost per op call) is taken off
# the predicted profiled step as the median over the fitted sizes, a fixed amount: it is
# noisy (a profiled step may even run faster than the timed median), so no trend is read
# into it. The latency is never below this share of the profiled step.
MIN_LATENCY_SHARE = 0.2
# A probe scales the op's measured time by the probes' ratio only where, at the reference
# size, the op alone took at least this share of its time in the step. Below it the two
# ran in other regimes, and the ratio multiplies the difference: a training CNN's ReLU
# backward at batch 8 took 0.28 ms alone (its 8 MB of inputs just written, in cache; its
# output's pages reused call after call) against 2.1 ms in the step (inputs evicted by the
# ops between, the output faulted in afresh), and the ratio to 128 (38 ms alone) predicted
# 287 ms against 32 ms measured (2-core EPYC). There the probe is a floor under the op's
# time, and the fit, in proportion to its work, gives the rest.
ALONE_SHARE = 0.5
# Times that grew less than this across the fitted sizes are noise, not a trend
# (fit_power)...
NOISE_GROWTH = 1.5
# ...and so are times that fell below this share of the size before at any fitted size: a
# trend in b does not turn back. A smaller dip is noise on a rise (an op with no FLOP
# formula growing 1.0, 2.1, 2.05 ms at 4, 8, 16 still grows).
DIP = 0.9


def _kind(name: str) -> str:
    """An op's kind for the factors it shares: its kernel family (op_families), else itself."""
    found = family(name)
    return found.value if found is not None else name


def _nonneg_line(xs: list[float], ys: list[float]) -> LinearFit:
    """A least-squares line with a non-negative intercept and slope (costs never go below 0)."""
    fit = fit_line(xs, ys)
    if fit.slope < 0:
        return LinearFit(max(sum(ys) / len(ys), 0.0), 0.0)
    if fit.intercept < 0:
        sxx = sum(x * x for x in xs)
        return LinearFit(0.0, sum(x * y for x, y in zip(xs, ys)) / sxx if sxx else 0.0)
    return fit


def _through(xs: list[float], ys: list[float]) -> tuple[float, float]:
    """``y = fixed + factor·x`` by least squares on relative error, fixed >= 0, factor > 0."""
    timed = [(x, y) for x, y in zip(xs, ys) if y > 0]
    if timed and len(timed) < len(xs):  # a profile that timed the op at 0 s says nothing
        xs, ys = [x for x, _ in timed], [y for _, y in timed]
    elif not timed:
        return 0.0, 0.0
    if len(xs) == 1 or max(xs) - min(xs) <= 1e-12 * max(xs):
        return 0.0, sum(ys) / sum(xs)
    # Each point's relative error counts alike, weighted by its batch size's place in the
    # sweep: the largest fitted sizes are nearest to the ones the model predicts.
    weights = [(i + 1) / y**2 for i, y in enumerate(ys)]
    sw = sum(weights)
    mx = sum(w * x for w, x in zip(weights, xs)) / sw
    my = sum(w * y for w, y in zip(weights, ys)) / sw
    sxx = sum(w * (x - mx) ** 2 for w, x in zip(weights, xs))
    sxy = sum(w * (x - mx) * (y - my) for w, x, y in zip(weights, xs, ys))
    factor = sxy / sxx if sxx else 0.0
    fixed = my - factor * mx
    if factor <= 0 or fixed < 0:  # no trend, or more than proportional: through the origin
        return 0.0, (sum(w * x * y for w, x, y in zip(weights, xs, ys))
                     / sum(w * x * x for w, x in zip(weights, xs)))
    return fixed, factor


@dataclass
class PowerFit:
    """y = scale·b^exponent, the exponent within [0, 1]: costs that are not the op's counted
    work (time between ops, an op without a formula) grow at most in proportion to b."""

    scale: float
    exponent: float

    def __call__(self, b: float) -> float:
        return self.scale * float(b ** self.exponent)


def fit_power(xs: list[float], ys: list[float]) -> PowerFit:
    """Least squares on log y over log b; flat (their median) unless the points grew more
    than noise does (:data:`NOISE_GROWTH`) and never fell by more than :data:`DIP` from one
    fitted size to the next.

    A time that is not an op's counted work (time between ops, a call's cost) that went up
    and down across the fitted sizes is noise or a change of regime, not a trend in b: the
    MLP sample's time between ops was 78, 75, 168 and 142 µs at batches 1-8 (its threads
    woken from batch 4 on) and 123 µs at 1024; read as a power of b it was 977 µs there.
    """
    positive = [(x, y) for x, y in zip(xs, ys) if y > 0]
    if not positive:
        return PowerFit(0.0, 0.0)
    values = [y for _, y in positive]
    if (len(values) == 1 or max(values) < NOISE_GROWTH * min(values)
            or any(later < DIP * earlier for earlier, later in itertools.pairwise(values))):
        return PowerFit(statistics.median(values), 0.0)
    lx = [math.log(x) for x, _ in positive]
    ly = [math.log(y) for _, y in positive]
    line = fit_line(lx, ly)
    exponent = min(max(line.slope, 0.0), 1.0)
    # The scale by least squares at that exponent, not through one point: a point is one
    # size's profiled steps, and on a ~100 µs step its noise is tens of percent.
    return PowerFit(math.exp(statistics.fmean(y - exponent * x for x, y in zip(lx, ly))),
                    exponent)


@dataclass
class OpCurve:
    """One op's fitted batch response."""

    op_id: str
    name: str
    roof: Roof | None  # None: no FLOP formula, ``time_line`` is used
    dtype: str = ""  # the dtype whose roof applies
    flops: LinearFit | None = None
    bytes_moved: LinearFit | None = None
    fixed_s: float = 0.0
    memory_factor: float = 1.0
    compute_factor: float = 1.0
    fast_memory_factor: float = 1.0  # the memory factor once the compute roof overtakes
    measured_sides: tuple[str, ...] = ()  # empty: all per-call cost, no factor measured
    fitted_on: tuple[float, ...] = ()
    time_line: PowerFit | None = None
    calls: int = 1
    # Kernel probes (profiler/probe.py): seconds of one call of this op's own shape timed
    # alone, by spec key, and how its shapes scale with b. Where the largest fitted size and
    # b both have one, the op's measured time there scaled by the probes' ratio is its time
    # at b (in the step it runs a little slower than alone, by a share that carries over).
    # A convolution not probed at b (skipped for cost) grows in proportion to the rows from
    # its largest probe below b.
    probes_s: dict[str, float] = field(default_factory=dict)
    scaling: ProbeScaling | None = None
    ref_batch: int = 0
    ref_time_s: float = 0.0

    def probe_s(self, b: float) -> float | None:
        """The probe's seconds for one call at batch ``b``, None where none ran."""
        if self.scaling is None or int(b) != b:
            return None
        key = self.scaling.key(int(b))
        return self.probes_s.get(key) if key is not None else None

    def memory_s(self, b: float) -> float:
        assert self.roof is not None and self.bytes_moved is not None
        return max(self.bytes_moved(b), 0.0) / self.roof.bandwidth_bytes_per_s

    def compute_s(self, b: float) -> float:
        assert self.roof is not None and self.flops is not None
        return max(self.flops(b), 0.0) / self.roof.peak_flops_per_s

    def can_turn_compute_bound(self) -> bool:
        """Whether the FLOPs each row adds take longer than its bytes at the roofs, so that
        a large enough batch is compute-bound."""
        if self.roof is None or self.flops is None or self.bytes_moved is None:
            return False
        return (self.flops.slope / self.roof.peak_flops_per_s
                > self.bytes_moved.slope / self.roof.bandwidth_bytes_per_s)

    def probe_keys(self, sizes: list[int]) -> list[str]:
        """The spec keys of this op's probes at ``sizes`` (and its reference size)."""
        if self.scaling is None:
            return []
        keys = [self.scaling.key(b) for b in [*sizes, self.ref_batch]]
        return [k for k in keys if k is not None]

    def probed(self, b: float) -> bool:
        """Whether its time at ``b`` comes from kernel probes rather than the formula."""
        at_b, at_ref = self.probe_s(b), self.probe_s(self.ref_batch)
        return at_b is not None and at_ref is not None and min(at_b, at_ref) >= PROBE_MIN_S

    def scaled_from(self, b: float) -> int | None:
        """For an op whose probes have a cost bound
        (:data:`~batchscope.probe_plan.COST_BOUNDED_PROBES`) and none
        at ``b``: the largest of b/2, b/4, ... down to its reference size (the sweep's
        sizes are powers of two) that it was probed at, whose time scaled by the rows is
        its time at ``b``; None where ``b`` has a probe or no such size does."""
        if (self.scaling is None or self.scaling.name not in COST_BOUNDED_PROBES
                or int(b) != b or b <= self.ref_batch or self.probe_s(b) is not None):
            return None
        size = int(b)
        while size % 2 == 0 and size // 2 >= self.ref_batch:
            size //= 2
            if self.probed(size):
                return size
        return None

    def time_s(self, b: float) -> float:
        if self.probed(b):
            at_b, at_ref = self.probe_s(b), self.probe_s(self.ref_batch)
            assert at_b is not None and at_ref is not None
            if at_ref * self.calls >= ALONE_SHARE * self.ref_time_s:
                return self.ref_time_s * at_b / at_ref
            # Alone it ran far faster than in the step at the reference size: a floor under
            # its time, not a ratio to scale the step's by.
            return max(self._fitted_time_s(b), at_b * self.calls)
        below = self.scaled_from(b)
        if below is not None:
            return self.time_s(below) * b / below
        return self._fitted_time_s(b)

    def _fitted_time_s(self, b: float) -> float:
        """Its time at ``b`` from the fit alone, no probe."""
        if self.time_line is not None:
            return self.time_line(b)
        memory, compute = self.memory_s(b), self.compute_s(b)
        memory_factor = (self.memory_factor if memory >= compute or "compute" in
                         self.measured_sides else self.fast_memory_factor)
        return self.fixed_s + max(memory_factor * memory, self.compute_factor * compute)


@dataclass
class StepModel:
    """The whole step: every op's curve plus the lines for the rest."""

    ops: list[OpCurve]
    framework: PowerFit  # CPU: time between ops
    unmatched: PowerFit
    idle: PowerFit  # GPU: the device waiting on the host
    profiler_gap_s: float  # profiled step minus timed latency: the profiler's own cost
    fitted_on: list[int]
    assumptions: list[Assumption] = field(default_factory=list)

    def profiled_s(self, b: float) -> float:
        return (sum(op.time_s(b) for op in self.ops) + self.framework(b) + self.unmatched(b)
                + self.idle(b))

    def latency_s(self, b: float) -> float:
        profiled = self.profiled_s(b)
        return max(profiled - self.profiler_gap_s, MIN_LATENCY_SHARE * profiled)

    def throughput_per_s(self, b: float) -> float:
        return b / self.latency_s(b)

    def probed_ops(self, b: float) -> int:
        return sum(op.probed(b) for op in self.ops)

    def knee(self, batch_sizes: list[int]) -> tuple[float | None, bool]:
        """The knee of the predicted latency curve over ``batch_sizes`` (see fit_knee)."""
        return fit_knee([float(b) for b in batch_sizes],
                        [self.latency_s(b) for b in batch_sizes])


def fit_sizes(results: list[BatchResult], window: int = FIT_WINDOW) -> list[int]:
    """The batch sizes the model is fitted on: the largest ``window`` measured ones."""
    return [r.batch_size for r in usable_results(results)][-window:]


def _roof_times(op: OpStat, roof: Roof) -> tuple[float, float]:
    return op.bytes.total / roof.bandwidth_bytes_per_s, (op.flops or 0) / roof.peak_flops_per_s


def _path_factor(ceilings: Ceilings, dtype: str, kind: str
                 ) -> tuple[float, str, float] | None:
    """Peak over the ceilings' own measurement of the path an op of ``kind`` takes: (that
    factor, the path, its FLOP/s)."""
    path = FAMILY_PATH.get(Family(kind)) if kind in {f.value for f in Family} else None
    matmul = ceilings.details.matmul.get(dtype)
    figures = matmul.paths.get(path) if matmul is not None and path else None
    flops = figures.peak_flops_per_s if figures is not None else None
    peak = ceilings.peak_for(dtype, kind)  # the roof its ops are placed against (Roof.of_op)
    if path is not None and flops is not None and flops > 0 and peak > 0:
        return max(peak / flops, 1.0), path, flops
    return None


def fit_step_model(results: list[BatchResult], ceilings: Ceilings,
                   sizes: list[int] | None = None,
                   probes_s: dict[str, float] | None = None) -> StepModel | None:
    """Fit the model on the measured ``sizes`` (default :func:`fit_sizes`), with the kernel
    probes timed so far (by spec key); None with fewer than two usable batch sizes."""
    usable = usable_results(results)
    sizes = sizes if sizes is not None else fit_sizes(results)
    fitted = [r for r in usable if r.batch_size in sizes]
    if len(fitted) < 2:
        return None
    by_op: dict[str, list[tuple[float, OpStat]]] = defaultdict(list)
    for r in fitted:
        for op in r.ops:
            if op.bound not in (Bound.COMMUNICATION, Bound.TRANSFER):
                by_op[op.op_id].append((float(r.batch_size), op))
    curves: list[OpCurve] = []
    for op_id, points in by_op.items():
        curves.append(_fit_op(op_id, points, ceilings))
    if probes_s:
        _attach_probes(curves, by_op, fitted, probes_s)
    assumptions = _fill_unmeasured_factors(curves, ceilings)
    bs = [float(r.batch_size) for r in fitted]
    gap = max(statistics.median((r.profiled_step_s or 0.0) - r.latency_s.median  # type: ignore[union-attr]
                                for r in fitted), 0.0)
    return StepModel(
        ops=curves,
        framework=fit_power(bs, [r.framework_s or 0.0 for r in fitted]),
        unmatched=fit_power(bs, [sum(r.unmatched_ops_s.values()) for r in fitted]),
        idle=fit_power(bs, [r.device_idle_s or 0.0 for r in fitted]),
        profiler_gap_s=gap,
        fitted_on=[r.batch_size for r in fitted],
        assumptions=assumptions,
    )


def _attach_probes(curves: list[OpCurve], by_op: dict[str, list[tuple[float, OpStat]]],
                   fitted: list[BatchResult], probes_s: dict[str, float]) -> None:
    shapes = probe_shapes(fitted)
    for curve in curves:
        if curve.op_id in shapes:
            ref_b, ref_op = by_op[curve.op_id][-1]
            curve.ref_batch, curve.ref_time_s = int(ref_b), ref_op.time_s
            curve.calls = ref_op.calls
            curve.scaling = shapes[curve.op_id]
            curve.probes_s = probes_s


def _fit_op(op_id: str, points: list[tuple[float, OpStat]], ceilings: Ceilings) -> OpCurve:
    op = points[-1][1]
    bs = [b for b, _ in points]
    times = [o.time_s for _, o in points]
    if any(o.flops is None or (not o.flops and not o.bytes.total) for _, o in points):
        # No formula, or no work (a view): its time as it grew with b, if it did.
        return OpCurve(op_id, op.name, None, time_line=fit_power(bs, times))
    roof = Roof.of_op(ceilings, op)
    roofs = [_roof_times(o, roof) for _, o in points]
    curve = OpCurve(op_id, op.name, roof, op.roof_dtype or op.dtype, fitted_on=tuple(bs),
                    flops=_nonneg_line(bs, [float(o.flops or 0) for _, o in points]),
                    bytes_moved=_nonneg_line(bs, [float(o.bytes.total) for _, o in points]))
    memory_sided = [m >= c for m, c in roofs]
    roof_s = [max(m, c) for m, c in roofs]
    if roof_s[-1] < IDENTIFIABLE_SHARE * times[-1] and not _grows_with_work(roof_s, times):
        # Its work is a sliver of its time at every fitted size, and its time did not grow
        # with that work: per-call cost, and no factor can be read off it. Filled from its
        # kind (_fill_unmeasured_factors). One whose time grew with its work is a slow
        # kernel, not overhead (a CPU max-pool at 10% of its roof): fitted below.
        # Its time at the largest fitted size read off all of them (fit_power), not that
        # size's alone: the MLP's addmm took 41, 61, 40 and 71 µs at batches 1-8.
        curve.fixed_s = fit_power(bs, times)(bs[-1])
        return curve
    curve.measured_sides = tuple(sorted({"memory" if s else "compute" for s in memory_sided}))
    memory = [(r, t) for r, t, s in zip(roof_s, times, memory_sided) if s]
    compute = [(r, t) for r, t, s in zip(roof_s, times, memory_sided) if not s]
    if memory:
        curve.fixed_s, curve.memory_factor = _through(*map(list, zip(*memory)))
    if compute:
        if memory:  # the fixed cost as under the memory roof; the factor from what is left
            curve.compute_factor = statistics.median(
                max(t - curve.fixed_s, 0.0) / r for r, t in compute) or 1.0
        else:
            curve.fixed_s, curve.compute_factor = _through(*map(list, zip(*compute)))
            curve.memory_factor = curve.compute_factor
    return curve


def _grows_with_work(roof_s: list[float], times: list[float]) -> bool:
    """True when an op's work grew in proportion to the batch across the fitted sizes (its
    roof time grew :data:`WORK_GROWTH` times or more: activations, not a weight read) and
    its time kept pace (at least :data:`PACE` of that growth, in log ratio).

    Example:
        >>> _grows_with_work([0.05, 0.1, 0.2, 0.4], [0.5, 1.0, 1.9, 3.7])  # a slow kernel
        True
        >>> _grows_with_work([0.05, 0.1, 0.2, 0.4], [0.5, 0.5, 0.52, 0.55])  # per-call cost
        False
        >>> _grows_with_work([0.14, 0.16, 0.19, 0.25], [15, 19, 18, 30])  # a weight read
        False
    """
    if len(times) < 2 or roof_s[0] <= 0 or times[0] <= 0 or roof_s[-1] < WORK_GROWTH * roof_s[0]:
        return False
    return math.log(times[-1] / times[0]) >= PACE * math.log(roof_s[-1] / roof_s[0])


def _fill_unmeasured_factors(curves: list[OpCurve], ceilings: Ceilings) -> list[Assumption]:
    """Compute factors of ops measured only under the memory roof, and the memory factor
    past the kernel step; returns what was assumed."""
    measured: dict[str, list[float]] = defaultdict(list)
    memory: dict[str, list[float]] = defaultdict(list)
    for c in curves:
        if c.roof is None:
            continue
        if "compute" in c.measured_sides:
            measured[_kind(c.name)].append(c.compute_factor)
        if c.measured_sides:
            memory[_kind(c.name)].append(c.memory_factor)
    everything = [f for factors in memory.values() for f in factors]
    assumptions: dict[str, Assumption] = {}
    for c in curves:
        if c.roof is None:
            continue
        kind = _kind(c.name)
        if not c.measured_sides:  # per-call cost at every fitted size
            c.memory_factor = statistics.median(memory[kind] or everything or [1.0])
            c.fixed_s = max(c.fixed_s - c.memory_factor * c.memory_s(max(c.fitted_on)), 0.0)
        c.fast_memory_factor = max(min(memory[kind] or [c.memory_factor]), 1.0)
        if "compute" in c.measured_sides:
            continue
        if not c.can_turn_compute_bound():
            continue  # its intensity does not grow with b: the compute roof never binds
        if measured[kind]:
            c.compute_factor = statistics.median(measured[kind])
            assumptions.setdefault(kind, Assumption.of(MeasuredAboveRidgeAssumption(), kind))
            continue
        path = _path_factor(ceilings, c.dtype, kind)
        if path is not None:
            c.compute_factor = path[0]
            assumptions.setdefault(kind, Assumption.of(PathSpeedAssumption(
                path=path[1], flops_per_s=path[2]), kind))
        else:
            c.compute_factor = 1.0
            assumptions.setdefault(kind, Assumption.of(AtRoofAssumption(), kind))
    return [assumptions[k] for k in sorted(assumptions)]


def median_peaks(ceilings: Ceilings) -> Ceilings | None:
    """``ceilings`` with each compute roof lowered by its matmul's median/best repeat ratio
    at the peak size; None when no dtype records a spread."""
    peaks = dict(ceilings.peak_flops_per_s)
    changed = False
    for dtype, figures in ceilings.details.matmul.items():
        peak = figures.peak_row()
        if dtype not in peaks or peak is None:
            continue
        if 0 < peak.median_flops_per_s < peak.best_flops_per_s:
            peaks[dtype] *= peak.median_flops_per_s / peak.best_flops_per_s
            changed = True
    return ceilings.with_peaks(peaks) if changed else None


def predict(results: list[BatchResult], ceilings: Ceilings, unmeasured: list[int],
            probes_s: dict[str, float] | None = None,
            units_per_row: int = 1) -> StepPrediction | None:
    """Each measured batch size forecast by the model fitted on the :data:`FIT_WINDOW`
    sizes before it (the test the sweep's early stop relies on), and the ``unmeasured``
    ones predicted from the largest measured; None when fewer than two can be fitted.
    Throughputs are in units a second, ``units_per_row`` per row (UNITS_PER_ROW)."""
    model = fit_step_model(results, ceilings, probes_s=probes_s)
    if model is None:
        return None
    usable = usable_results(results)
    sizes = [r.batch_size for r in usable]
    points = []
    for k, r in enumerate(usable):
        before = sizes[max(k - FIT_WINDOW, 0):k]
        forecast = (fit_step_model(results, ceilings, before, probes_s)
                    if len(before) == FIT_WINDOW else None)
        if forecast is not None:
            latency = forecast.latency_s(r.batch_size)
            measured = r.latency_s.median  # type: ignore[union-attr]
            points.append(CurvePoint(r.batch_size, latency,
                                     r.batch_size * units_per_row / latency, before,
                                     measured, latency / measured - 1,
                                     forecast.probed_ops(r.batch_size)))
    for b in unmeasured:
        latency = model.latency_s(b)
        points.append(CurvePoint(b, latency, b * units_per_row / latency, model.fitted_on,
                                 probed_ops=model.probed_ops(b)))
    points.sort(key=lambda p: p.batch_size)
    errors = [abs(p.error) for p in points if p.error is not None]
    sensitivity = None
    lowered = median_peaks(ceilings)
    if points and lowered is not None and (
            refit := fit_step_model(results, lowered, model.fitted_on, probes_s)):
        largest = points[-1].batch_size
        sensitivity = refit.latency_s(largest) / model.latency_s(largest) - 1
    overall = fit_step_model(results, ceilings, sizes, probes_s)
    knee = overall.knee(sorted({*sizes, *unmeasured}))[0] if overall else None
    grid = sorted({*sizes, *unmeasured})
    used = {k for c in [*model.ops, *(overall.ops if overall else [])]
            for k in c.probe_keys(grid)}
    return StepPrediction(
        fitted_on=model.fitted_on,
        points=points,
        knee_batch=knee,
        max_abs_error=max(errors) if errors else None,
        assumptions=model.assumptions + _unprobed(model, unmeasured),
        ceiling_sensitivity=sensitivity,
        probes_s={k: v for k, v in sorted((probes_s or {}).items()) if k in used},
    )


def _unprobed(model: StepModel, sizes: list[int]) -> list[Assumption]:
    """Where ``model``'s convolutions or replayed ops had no probe of their own (skipped
    for cost)."""
    skipped = [b for b in sizes if any(c.scaled_from(b) is not None for c in model.ops)]
    if not skipped:
        return []
    return [Assumption.of(NotProbedAssumption(
        batch_sizes=skipped, max_call_s=PROBE_MAX_CALL_S,
        budget_min_s=PROBE_BUDGET_MIN_S, round_s=PROBE_ROUND_S))]


# The early stop trusts the model only after it predicted the last measured batch size
# (fitted on the ones before) this closely, and widens every prediction by what it missed
# by there, at least by this much.
STOP_TOLERANCE = 0.25
MIN_MARGIN = 0.10


def band_margin(miss: float) -> float:
    """The relative band a predicted step is given: the model's largest miss, at least
    :data:`MIN_MARGIN` (the predicted pick, the predicted stop and every band shown).

    Example:
        >>> band_margin(0.04), band_margin(0.43)
        (0.1, 0.43)
    """
    return max(miss, MIN_MARGIN)


def plateau_overruled(results: list[BatchResult], ceilings: Ceilings, remaining: list[int],
                      bar_per_s: float, probes_s: dict[str, float] | None = None
                      ) -> Flag | None:
    """Why the plateau rule must not stop the sweep, or None when it may.

    The plateau rule reads only the measured throughputs, which a busy machine can bend
    (GPT-2 decode on a 2-core VM: 169, 96.8, 132 tokens/s at 1, 2, 4, then 649 at 32). The
    step-time model reads the exact FLOPs and bytes of each op: fitted on every measured
    size, the gain it predicts over the last for the size as many doublings ahead as the
    plateau rule looked back (plan.PLATEAU_PATIENCE), applied to the top of the last's
    throughput interval and shrunk by the model's band (:data:`MIN_MARGIN`), must reach
    ``bar_per_s`` (the plateau rule's bar: the best before the recent sizes lifted by
    PLATEAU_GAIN). No further: the model's throughput never falls with b, so a gain at the
    largest remaining size would overrule almost any plateau. The report keeps a
    PLATEAU_OVERRULED flag.
    """
    usable = usable_results(results)
    if not remaining or len(usable) < 2:
        return None
    last = usable[-1]
    model = fit_step_model(results, ceilings, probes_s=probes_s)
    if model is None or not last.throughput_per_s:
        return None
    ahead = sorted(remaining)[:PLATEAU_PATIENCE]
    following = ahead[-1]
    gain = model.throughput_per_s(following) / model.throughput_per_s(last.batch_size)
    last_interval = throughput_interval(last)
    last_high = last_interval.high if last_interval is not None else last.throughput_per_s
    projected = last_high * gain / (1 + MIN_MARGIN)
    if projected < bar_per_s:
        return None
    return Flag.of(PlateauOverruled(
        highest=following, projected_per_s=projected, bar_per_s=bar_per_s,
        gain=gain, fitted_on=list(model.fitted_on)), last.batch_size)


def predicted_stop(results: list[BatchResult], ceilings: Ceilings, remaining: list[int],
                   pick_throughput_per_s: float, near_best_share: float,
                   probes_s: dict[str, float] | None = None) -> Stop | None:
    """Why the sweep may stop before ``remaining``, or None when it must go on.

    The pick (the smallest batch whose interval reaches ``near_best_share`` of the best) only
    moves if a larger batch beats ``pick_throughput_per_s / near_best_share`` (the top of the
    pick's interval, units a second, as every throughput of a result). The model fitted on the
    measured sizes before the last must have predicted the last within :data:`STOP_TOLERANCE`;
    refitted with it, the gain it predicts for each remaining size over the last, applied to the
    last's measured throughput and widened by that miss (at least :data:`MIN_MARGIN`), must stay
    under the bar, from the top of the last size's throughput interval: one noisy low point does
    not stop the sweep. This stops a sweep whose measured curve has levelled off or turned
    down; nor does it stop where the step time fitted through every measured size
    (throughput_curve.projects_past) still projects a remaining size past the bar from there.
    ``probes_s``: the times of :func:`~batchscope.probe_plan.stop_probe_specs`' probes that
    ran.
    """
    usable = usable_results(results)
    if not remaining or len(usable) < FIT_WINDOW + 1:
        return None
    last = usable[-1]
    if last.latency_s is None or not last.throughput_per_s:
        return None
    before = fit_step_model(results, ceilings,
                            [r.batch_size for r in usable[-FIT_WINDOW - 1:-1]], probes_s)
    if before is None:
        return None
    miss = abs(before.latency_s(last.batch_size) / last.latency_s.median - 1)
    if miss > STOP_TOLERANCE:
        return None
    model = fit_step_model(results, ceilings, probes_s=probes_s)
    if model is None:
        return None
    margin = band_margin(miss)
    bar = pick_throughput_per_s / near_best_share
    # The model's gain over the last measured size, applied to what that size measured
    # (units a second, as the bar is): its errors at neighbouring sizes largely cancel in
    # the ratio.
    gain = {b: model.throughput_per_s(b) / model.throughput_per_s(last.batch_size)
            for b in remaining}
    highest = max(remaining, key=gain.__getitem__)
    last_interval = throughput_interval(last)
    last_high = last_interval.high if last_interval is not None else last.throughput_per_s
    projected = last_high * gain[highest]
    # The per-op model reads the last few sizes, and one of them timed slow can level it
    # off where the step time fitted through all of them still rises.
    steps = {r.batch_size: r.latency_s.median for r in usable if r.latency_s is not None}
    if projected * (1 + margin) >= bar or projects_past(steps, remaining, last_high, bar):
        return None
    return Stop.of(PredictedStop(
        remaining=list(remaining), fitted_on=list(model.fitted_on),
        projected_per_s=projected, margin=margin, highest=highest,
        gain=gain[highest], last=last.batch_size, bar_per_s=bar, miss=miss))
