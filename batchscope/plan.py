"""Which batch size to measure next, and when to stop going up.

Pure logic over the results so far, so every stop rule is testable without a model.
"""

from __future__ import annotations

from dataclasses import dataclass

from batchscope.errors import UsageError
from batchscope.page_faults import fault_share
from batchscope.records import BatchResult, Flag, FlagKind, Interval, Status, Stop, StopKind
from batchscope.records.flag_payloads import (
    CapStop,
    FailedStop,
    ListDoneStop,
    OverLatencyLimitStop,
    OverMemoryBudgetStop,
    PlateauStop,
    PredictedNotToFit,
    RepeatedErrorsStop,
    SkippedStop,
)
from batchscope.records.noise import DRIFT_FLOOR, throughput_interval
from batchscope.records.report import LimitKind, OverLimit
from batchscope.records.run import DEFAULT_MAX_BATCH

# The sweep stops once the last PLATEAU_PATIENCE doublings together lifted the best
# throughput by less than this: they doubled the latency twice for a gain inside the 10%
# the recommendation rule forgives anyway. Judged over the doublings together, not each:
# a CNN on a CPU gains 4-9% per doubling for several doublings (37.3, 39.0, 42.4 img/s at
# 1, 2, 4), which a 10% bar on each doubling stopped at batch 4, short of the best.
PLATEAU_GAIN = 0.10
# One doubling is not enough either: MKL runs 2-8 fp32 rows on a slow path, so batch 2 is
# barely faster than batch 1 on CPUs (CPU-TRIALS.md).
PLATEAU_PATIENCE = 2
# The rule reads the recent sizes' intervals, not their medians: it stops only where even
# the top of their throughput intervals stays under the bar set from the best median before
# them, so one noisy low point (a slow sample, a drift) never stops the sweep. (The bottom
# of the best's interval would never let a flat curve stop: two intervals of ±5% overlap.) A
# recent size whose step pays page faults counts at what it would run without them (its top
# at least that): the allocator slows it, not the batch, and the sweep's own re-timing tells
# them apart later. These are sequential timings, with noise.DRIFT_FLOOR of drift: what the
# rule says is a proposal the sweep checks on paired rounds before it stops
# (rounds.plateau_verdict; with --no-rounds it stands as it is).
# Statuses after which larger batch sizes would fail the same way (or worse); a failed rank
# also leaves its process group unusable.
_STOP_GOING_UP = {Status.OOM, Status.KILLED, Status.TIMEOUT, Status.SKIPPED, Status.RANK_FAILED}
# Share of the free memory a batch size may be predicted to need before it is skipped: the
# extrapolation is linear and allocators round up, so leave a margin.
MEMORY_HEADROOM = 0.9
# The sweep stops going up after this many batch sizes in a row failed in a way a fresh
# worker did not cure: larger ones would almost surely fail the same way, each after a
# fresh worker's start and model build.
REPEATED_ERROR_LIMIT = 2
# Failures after which the plan goes on to the next batch size (the others stop it at once).
_RETRIED = (Status.MODEL_ERROR, Status.DEVICE_ERROR)


@dataclass
class Limits:
    """User limits on the sweep; None means no limit."""

    max_batch: int = DEFAULT_MAX_BATCH
    latency_limit_s: float | None = None
    memory_budget_bytes: int | None = None
    # --predict-to: the step-time model predicts (never measures) the powers of two up to
    # this one too; None: only up to max_batch.
    predict_to: int | None = None


def parse_batch_sizes(text: str) -> list[int]:
    """Parse ``"1,2,4"`` into sorted positive integers, or raise :class:`UsageError`."""
    sizes = parse_ordered_batch_sizes(text)
    if len(set(sizes)) != len(sizes):
        raise UsageError(f"--batch-sizes {text!r} lists a batch size twice.")
    return sorted(sizes)


def parse_ordered_batch_sizes(text: str) -> list[int]:
    """Parse ``"8,4,4"`` into positive integers in the order given (one per trace, say)."""
    parts = [p.strip() for p in text.split(",")]
    sizes: list[int] = []
    for part in parts:
        if not part:
            raise UsageError(f"--batch-sizes {text!r} has an empty entry; write e.g. 1,2,4.")
        try:
            value = int(part)
        except ValueError:
            raise UsageError(
                f"--batch-sizes {text!r}: {part!r} is not a whole number."
            ) from None
        if value <= 0:
            raise UsageError(f"--batch-sizes {text!r}: {value} is not a positive batch size.")
        sizes.append(value)
    return sizes


def default_batch_sizes(max_batch: int) -> list[int]:
    """Powers of two from 1 up to ``max_batch`` (and ``max_batch`` itself)."""
    sizes = []
    b = 1
    while b <= max_batch:
        sizes.append(b)
        b *= 2
    if sizes[-1] != max_batch:
        sizes.append(max_batch)
    return sizes


def over_limits(result: BatchResult, limits: Limits) -> OverLimit | None:
    """The user limit ``result`` breaks (latency first), or None when it breaks none."""
    latency, budget = limits.latency_limit_s, limits.memory_budget_bytes
    if (result.latency_s is not None and latency is not None
            and result.latency_s.median > latency):
        return OverLimit(result.batch_size, LimitKind.LATENCY, result.latency_s.median, latency)
    if (result.peak_memory_bytes is not None and budget is not None
            and result.peak_memory_bytes > budget):
        return OverLimit(result.batch_size, LimitKind.MEMORY, result.peak_memory_bytes, budget)
    return None


class Plan:
    """Yields batch sizes in ascending order until a stop rule fires.

    Example:
        >>> plan = Plan(None, Limits(max_batch=8))
        >>> plan.candidates
        [1, 2, 4, 8]
    """

    def __init__(self, explicit: list[int] | None, limits: Limits,
                 measure_all: bool = False) -> None:
        self.explicit = explicit is not None
        self.limits = limits
        self.measure_all = measure_all
        if explicit is not None:
            self.candidates = sorted(b for b in explicit if b <= limits.max_batch)
        else:
            self.candidates = default_batch_sizes(limits.max_batch)
        self.stop: Stop | None = None
        self.overruled_at = 0  # results judged when the plateau stop was last overruled

    @property
    def stopped_at_cap(self) -> bool:
        """True when the default sweep ran out of batch sizes (--max-batch ended it)."""
        return self.stop is not None and self.stop.kind == StopKind.CAP

    @property
    def may_stop_early(self) -> bool:
        """Whether the predicted stop applies: not to an explicit list, nor --measure-all."""
        return not (self.explicit or self.measure_all)

    def remaining(self, results: list[BatchResult]) -> list[int]:
        """The candidates above the largest batch size tried that are still to measure."""
        done = {r.batch_size for r in results}
        top = max(done, default=0)
        return [b for b in self.candidates if b > top and b not in done]

    def overrule(self, results: list[BatchResult]) -> None:
        """Take back the plateau stop just made (the step-time model overruled it): the plan
        goes on, and judges the plateau again from the next result on."""
        self.stop = None
        self.overruled_at = len(results)

    def stop_early(self, stop: Stop) -> None:
        """End the plan before :meth:`next_batch` runs out: the sweep's predicted stop."""
        self.stop = stop

    def next_batch(self, results: list[BatchResult]) -> int | None:
        """The next batch size to run, or None (then :attr:`stop` says why)."""
        if self.stop is not None:
            return None
        done = {r.batch_size for r in results}
        if results:
            stop = self._stop_rule(results)
            if stop is not None:
                self.stop = stop
                return None
        for b in self.candidates:
            if b not in done:
                self.stop = repeated_errors(results)
                return None if self.stop else b
        self.stop = (Stop.of(ListDoneStop()) if self.explicit
                     else Stop.of(CapStop(largest=self.candidates[-1])))
        return None

    def _stop_rule(self, results: list[BatchResult]) -> Stop | None:
        last = results[-1]
        if last.status == Status.SKIPPED:
            why = next((f for f in last.flags if f.kind == FlagKind.PREDICTED_NOT_TO_FIT), None)
            return Stop.of(SkippedStop.because(why), last.batch_size)
        if last.status in _STOP_GOING_UP:
            return Stop.of(FailedStop(status=last.status.value), last.batch_size)
        limit = over_limits(last, self.limits)
        if limit is not None:
            over = (OverLatencyLimitStop if limit.kind == LimitKind.LATENCY
                    else OverMemoryBudgetStop)
            return Stop.of(over(measured=limit.measured, limit=limit.limit), last.batch_size)
        if self.may_stop_early and len(results) > self.overruled_at and plateaued(results):
            return Stop.of(PlateauStop(doublings=PLATEAU_PATIENCE, gain=PLATEAU_GAIN,
                                       bar_per_s=plateau_bar(results)))
        return None


def repeated_errors(results: list[BatchResult]) -> Stop | None:
    """The stop when the last REPEATED_ERROR_LIMIT batch sizes all failed with an error a
    fresh worker did not cure; None when they did not.

    Example:
        >>> repeated_errors([BatchResult(b, Status.MODEL_ERROR) for b in (4, 8)]).values
        {'batch_sizes': [4, 8], 'statuses': ['model_error']}
    """
    last = results[-REPEATED_ERROR_LIMIT:]
    if len(last) < REPEATED_ERROR_LIMIT or any(r.status not in _RETRIED for r in last):
        return None
    return Stop.of(RepeatedErrorsStop(
        batch_sizes=[r.batch_size for r in last],
        statuses=list(dict.fromkeys(r.status.value for r in last))))


def plateaued(results: list[BatchResult], allowance: float = DRIFT_FLOOR) -> bool:
    """Whether the last PLATEAU_PATIENCE measured sizes, at the top of their intervals,
    failed to lift the best median before them by PLATEAU_GAIN.

    Example:
        >>> from batchscope.records import LatencyStats
        >>> def ok(b, s):
        ...     return BatchResult(b, Status.OK, latency_s=LatencyStats(s, s, s, 50, median_low=s,
        ...                        median_high=s), throughput_per_s=b / s)
        >>> plateaued([ok(1, 0.010), ok(2, 0.020), ok(4, 0.040)])  # flat: stop
        True
        >>> plateaued([ok(1, 0.010), ok(2, 0.020), ok(4, 0.034)])  # +18% at 4: go on
        False
    """
    ok = _timed(results, allowance)
    if len(ok) <= PLATEAU_PATIENCE:
        return False
    recent_high = max(max(iv.high, _without_page_faults(r)) for r, iv in ok[-PLATEAU_PATIENCE:])
    return recent_high < plateau_bar(results, allowance)


def plateau_bar(results: list[BatchResult], allowance: float = DRIFT_FLOOR) -> float:
    """The plateau rule's bar: the best throughput before the recent sizes, lifted by
    PLATEAU_GAIN (0 with too few sizes)."""
    ok = _timed(results, allowance)
    if len(ok) <= PLATEAU_PATIENCE:
        return 0.0
    return max(r.throughput_per_s or 0.0 for r, _ in ok[:-PLATEAU_PATIENCE]) * (1 + PLATEAU_GAIN)


def _timed(results: list[BatchResult], allowance: float) -> list[tuple[BatchResult, Interval]]:
    """The measured results in order, each with its throughput interval."""
    return [(r, iv) for r in results if r.status == Status.OK
            and (iv := throughput_interval(r, allowance)) is not None]


def _without_page_faults(result: BatchResult) -> float:
    """The throughput ``result`` would have without its page faults (its own without any)."""
    share = fault_share(result.page_faults_per_step,
                        result.latency_s.median if result.latency_s is not None else None)
    return (result.throughput_per_s or 0.0) / (1 - min(share or 0.0, 0.9))


def predicted_not_to_fit(results: list[BatchResult], batch_size: int,
                         budget_bytes: int | None = None) -> Flag | None:
    """Why ``batch_size`` would not fit, extrapolated linearly from the last two measured
    batch sizes: over the free memory of the device, or over ``budget_bytes`` (the
    --memory-budget), as a PREDICTED_NOT_TO_FIT flag of that batch size; None when it
    should fit or there is too little to extrapolate from."""
    ok = [r for r in results if r.status == Status.OK and r.peak_memory_bytes is not None]
    if len(ok) < 2:
        return None
    a, b = ok[-2], ok[-1]
    peak_a, peak_b = a.peak_memory_bytes or 0, b.peak_memory_bytes or 0
    slope = max((peak_b - peak_a) / (b.batch_size - a.batch_size), 0.0)
    predicted = peak_b + slope * (batch_size - b.batch_size)
    from_batches = [a.batch_size, b.batch_size]
    if budget_bytes is not None and predicted > budget_bytes:
        return Flag.of(PredictedNotToFit(predicted_bytes=predicted, from_batches=from_batches,
                                         budget_bytes=budget_bytes), batch_size)
    available = b.available_memory_bytes
    if available is not None and predicted - peak_b > MEMORY_HEADROOM * available:
        return Flag.of(PredictedNotToFit(
            predicted_bytes=predicted, from_batches=from_batches,
            more_bytes=predicted - peak_b, free_bytes=available), batch_size)
    return None


# The context grid (CONTEXTS) times at most this many batch sizes at each context: enough
# to see how the KV cost grows with the batch, few enough to cost seconds, not a second sweep.
GRID_MAX_SIZES = 4
# A grid point whose step is predicted longer than this is left out: the timing pass needs
# several steps, and a longer one is a sweep of its own.
GRID_MAX_STEP_S = 1.0


def grid_batch_sizes(results: list[BatchResult], base_context: int, context: int,
                     budget_bytes: int | None = None, axis: str = "context",
                     parameter_bytes: int | None = None) -> list[int]:
    """Which measured batch sizes to time at ``context``: spread evenly (in log scale) over
    those predicted to fit in memory and to step within :data:`GRID_MAX_STEP_S`.

    On a context grid the KV cache is taken as the state bytes the ops read at the sweep's
    context, scaled with the context (without an op breakdown: not at all). On a
    sequence-length grid everything but the weights is scaled with the length (attention
    that grows with its square outgrows this: its point runs out of memory, which ends its
    length's row)."""
    ok = [r for r in results if r.status == Status.OK and r.latency_s is not None]
    scale = ((context + 1) / (base_context + 1) if axis == "context"
             else context / max(base_context, 1))
    fits = []
    for r in ok:
        peak = r.peak_memory_bytes or 0
        if axis == "context":
            grows = (r.bytes.state if r.bytes is not None else 0) or 0
        else:
            grows = max(peak - (parameter_bytes or 0), 0)
        predicted = peak + grows * max(scale - 1, 0.0)
        free = r.available_memory_bytes
        if budget_bytes is not None and predicted > budget_bytes:
            continue
        if free is not None and predicted - peak > MEMORY_HEADROOM * free:
            continue
        if r.latency_s is None or r.latency_s.median * max(scale, 1.0) > GRID_MAX_STEP_S:
            continue
        fits.append(r.batch_size)
    if len(fits) <= GRID_MAX_SIZES:
        return fits
    picks = {fits[round(i * (len(fits) - 1) / (GRID_MAX_SIZES - 1))] for i in range(GRID_MAX_SIZES)}
    return sorted(picks)
