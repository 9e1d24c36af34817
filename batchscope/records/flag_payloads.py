"""One typed payload per flag kind: the fields its sentence quotes, checked where it is built.

A :class:`~batchscope.records.flags.Flag` carries its numbers as ``values``, a dict of JSON
scalars, so report.json has one shape for every kind. Each kind's keys are named here, once,
as a frozen dataclass: a site builds a flag from one (:meth:`Flag.of`), so a missing or
misspelt key fails type checking, and a reader takes it back (:meth:`FlagPayload.of`,
checked by msgspec against the fields' types), so a flag without a key its payload needs
raises :class:`PayloadError` instead of reading as 0.
Stops (:class:`StopPayload`, ``Stop.of``) and the step-time model's assumptions
(:class:`AssumptionPayload`, ``Assumption.of``) carry their values alike.

A field with a default is one some records lack: a key older reports did not write, or one
its site writes only sometimes (metadata ``OMITTED``: left out of ``values`` when None,
as before).

Example:
    >>> from batchscope.records.flags import Flag
    >>> flag = Flag.of(NoisyTiming(spread=0.31), batch_size=8)
    >>> flag.kind.value, flag.values
    ('noisy_timing', {'spread': 0.31})
    >>> NoisyTiming.of(flag).spread
    0.31
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar, TypeVar

import msgspec

from batchscope.errors import UsageError
from batchscope.records.flags import Flag, FlagKind, Stop, StopKind, Value
from batchscope.records.report import Assumption, AssumptionKind

A = TypeVar("A", bound="Payload")
P = TypeVar("P", bound="FlagPayload")
S = TypeVar("S", bound="StopPayload")
U = TypeVar("U", bound="AssumptionPayload")

# A field's metadata key: left out of ``values`` when None (its site omits the key). Such a
# field is declared ``= field(default=None, metadata=OMITTED)``.
_OMIT = "omit_when_none"
OMITTED: Mapping[str, bool] = {_OMIT: True}


class PayloadError(UsageError):
    """A flag's (a stop's, an assumption's) values do not hold what its kind's payload needs
    (a missing key, a wrong type), or a payload was asked of a record of another kind."""


# Every payload class, by the kind it is the payload of (filled as they are defined).
PAYLOADS: dict[FlagKind, type[FlagPayload]] = {}
STOP_PAYLOADS: dict[StopKind, type[StopPayload]] = {}
ASSUMPTION_PAYLOADS: dict[AssumptionKind, type[AssumptionPayload]] = {}


class Payload:
    """What a flag's, a stop's and an assumption's payloads share: their fields to
    ``values`` and back."""

    kind: ClassVar[FlagKind | StopKind | AssumptionKind]
    # What its values are of, for the errors' sentences: "flag", "stop" or "assumption".
    record: ClassVar[str]
    # Every payload class of that record, by its kind (PAYLOADS, STOP_PAYLOADS, ...).
    registry: ClassVar[dict[Any, Any]]

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Register a payload class under its kind (a kind with two is a mistake); the
        bases of a record's payloads (no kind of their own) register nothing."""
        super().__init_subclass__(**kwargs)
        if "kind" not in cls.__dict__:
            return
        if cls.kind in cls.registry:
            raise TypeError(f"{cls.kind} has two payloads: "
                            f"{cls.registry[cls.kind].__name__} and {cls.__name__}")
        cls.registry[cls.kind] = cls

    def values(self) -> dict[str, Value]:
        """The record's ``values``: every field by name, in the order the fields are
        declared, less an omitted one that is None."""
        out: dict[str, Value] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if value is None and f.metadata.get(_OMIT):
                continue
            out[f.name] = list(value) if isinstance(value, list) else value
        return out

    @classmethod
    def from_values(cls: type[A], values: Mapping[str, Value]) -> A:
        """The payload of a record's ``values`` (msgspec checks each against its field's
        type; a float field takes an int, as JSON writes a whole number);
        :class:`PayloadError` where a key it needs is missing or of another type. Keys it
        does not know are ignored (a newer report's)."""
        try:
            return msgspec.convert(dict(values), cls)
        except msgspec.ValidationError as exc:
            raise PayloadError(f"a {cls.kind.value} {cls.record}'s values do not fit its "
                               f"payload, {cls.__name__}: {exc}") from None

    @classmethod
    def _check_kind(cls, kind: FlagKind | StopKind | AssumptionKind) -> None:
        if kind != cls.kind:
            raise PayloadError(f"a {kind.value} {cls.record} has no {cls.__name__} payload "
                               f"(that is a {cls.kind.value} {cls.record}'s)")


class FlagPayload(Payload):
    """The typed values of one :class:`FlagKind`; each subclass is a frozen dataclass."""

    kind: ClassVar[FlagKind]
    record: ClassVar[str] = "flag"
    registry: ClassVar[dict[Any, Any]] = PAYLOADS

    @classmethod
    def of(cls: type[P], flag: Flag) -> P:
        """``flag``'s payload; :class:`PayloadError` where the flag is of another kind."""
        cls._check_kind(flag.kind)
        return cls.from_values(flag.values)


class StopPayload(Payload):
    """The typed values of one :class:`StopKind`; each subclass is a frozen dataclass."""

    kind: ClassVar[StopKind]
    record: ClassVar[str] = "stop"
    registry: ClassVar[dict[Any, Any]] = STOP_PAYLOADS

    @classmethod
    def of(cls: type[S], stop: Stop) -> S:
        """``stop``'s payload; :class:`PayloadError` where the stop is of another kind."""
        cls._check_kind(stop.kind)
        return cls.from_values(stop.values)


class AssumptionPayload(Payload):
    """The typed values of one :class:`AssumptionKind` (the step-time model's); each
    subclass is a frozen dataclass."""

    kind: ClassVar[AssumptionKind]
    record: ClassVar[str] = "assumption"
    registry: ClassVar[dict[Any, Any]] = ASSUMPTION_PAYLOADS

    @classmethod
    def of(cls: type[U], assumption: Assumption) -> U:
        """``assumption``'s payload; :class:`PayloadError` where it is of another kind."""
        cls._check_kind(assumption.kind)
        return cls.from_values(assumption.values)


def _together(payload: Payload, *names: str) -> None:
    """:class:`PayloadError` unless the fields ``names`` are all None or none is."""
    given = [n for n in names if getattr(payload, n) is not None]
    if given and len(given) != len(names):
        missing = [n for n in names if n not in given]
        raise PayloadError(f"a {payload.kind.value} {payload.record}'s values hold "
                           f"{', '.join(given)} without {', '.join(missing)}")


def payload_of(flag: Flag) -> FlagPayload:
    """``flag``'s payload, of the class its kind has."""
    return PAYLOADS[flag.kind].of(flag)


def stop_payload_of(stop: Stop) -> StopPayload:
    """``stop``'s payload, of the class its kind has."""
    return STOP_PAYLOADS[stop.kind].of(stop)


def assumption_payload_of(assumption: Assumption) -> AssumptionPayload:
    """``assumption``'s payload, of the class its kind has."""
    return ASSUMPTION_PAYLOADS[assumption.kind].of(assumption)


# -- measuring one batch size (worker, supervisor, watch) ------------------------------------
@dataclass(frozen=True, kw_only=True)
class NoBreakdown(FlagPayload):
    """The op breakdown was not taken: why."""

    kind: ClassVar[FlagKind] = FlagKind.NO_BREAKDOWN
    reason: str


@dataclass(frozen=True, kw_only=True)
class PlateauOverruled(FlagPayload):
    """The plateau rule would have stopped the sweep; the step-time model overruled it."""

    kind: ClassVar[FlagKind] = FlagKind.PLATEAU_OVERRULED
    highest: int
    projected_per_s: float
    bar_per_s: float
    gain: float
    fitted_on: list[int]


@dataclass(frozen=True, kw_only=True)
class PlateauUnconfirmed(FlagPayload):
    """Paired rounds did not confirm a plateau of the sequential medians."""

    kind: ClassVar[FlagKind] = FlagKind.PLATEAU_UNCONFIRMED
    verdict: str  # rounds.PlateauVerdict's value: "refuted" or "undecided"
    best_before: int
    recent: list[int]
    gain: float
    low: float
    high: float
    rounds: int
    bar: float


@dataclass(frozen=True, kw_only=True)
class PredictedStopUnconfirmed(FlagPayload):
    """The model's predicted stop did not hold once its sizes were timed in rounds."""

    kind: ClassVar[FlagKind] = FlagKind.PREDICTED_STOP_UNCONFIRMED
    batch_sizes: list[int]
    rounds: int


@dataclass(frozen=True, kw_only=True)
class BudgetSkipped(FlagPayload):
    """--budget ran out before these phases ("probes", "grid", "allocator")."""

    kind: ClassVar[FlagKind] = FlagKind.BUDGET_SKIPPED
    phases: list[str]


@dataclass(frozen=True, kw_only=True)
class BreakdownFailed(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.BREAKDOWN_FAILED
    phase: str
    error: str


@dataclass(frozen=True, kw_only=True)
class BreakdownLost(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.BREAKDOWN_LOST
    reason: str


@dataclass(frozen=True, kw_only=True)
class BreakdownInterrupted(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.BREAKDOWN_INTERRUPTED


@dataclass(frozen=True, kw_only=True)
class TimedBeforeDeath(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.TIMED_BEFORE_DEATH


@dataclass(frozen=True, kw_only=True)
class ProfileRetaken(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.PROFILE_RETAKEN
    tries: int
    first_gap: float
    profiled_s: float
    timed_s: float


@dataclass(frozen=True, kw_only=True)
class ProfileDisagrees(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.PROFILE_DISAGREES
    profiled_s: float
    timed_s: float
    gap: float
    cost_per_op_s: float
    captures: int


@dataclass(frozen=True, kw_only=True)
class GpuThrottled(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.GPU_THROTTLED
    reasons: list[str]


@dataclass(frozen=True, kw_only=True)
class RanksOutput(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.RANKS_OUTPUT
    path: str


@dataclass(frozen=True, kw_only=True)
class NonDeterministic(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.NON_DETERMINISTIC


# -- one op -----------------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class UnmatchedCalls(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.UNMATCHED_CALLS


@dataclass(frozen=True, kw_only=True)
class FusedByInductor(FlagPayload):
    """The fused kernels that named this op."""

    kind: ClassVar[FlagKind] = FlagKind.FUSED_BY_INDUCTOR
    kernels: list[str]


@dataclass(frozen=True, kw_only=True)
class ServedFromCache(FlagPayload):
    """An op faster than its DRAM roof whose bytes fit in the cache."""

    kind: ClassVar[FlagKind] = FlagKind.SERVED_FROM_CACHE
    time_s: float
    roof_s: float
    footprint_bytes: float
    cache_bytes: float


@dataclass(frozen=True, kw_only=True)
class PartlyFromCache(FlagPayload):
    """An op faster than its DRAM roof whose bytes are a few times the cache."""

    kind: ClassVar[FlagKind] = FlagKind.PARTLY_FROM_CACHE
    time_s: float
    roof_s: float
    footprint_bytes: float
    cache_bytes: float


@dataclass(frozen=True, kw_only=True)
class AccountingError(FlagPayload):
    """An op faster than its roof; older reports lack the footprint and the cache."""

    kind: ClassVar[FlagKind] = FlagKind.ACCOUNTING_ERROR
    time_s: float
    roof_s: float
    footprint_bytes: float | None = None
    cache_bytes: float | None = None


# -- the run (classifiers) --------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class NoisyTiming(FlagPayload):
    """The interquartile range of the step times over their median."""

    kind: ClassVar[FlagKind] = FlagKind.NOISY_TIMING
    spread: float


@dataclass(frozen=True, kw_only=True)
class CeilingsFailed(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.CEILINGS_FAILED
    error: str


@dataclass(frozen=True, kw_only=True)
class CeilingsOnBusyMachine(FlagPayload):
    """The share of the CPU other processes took while the ceilings were measured."""

    kind: ClassVar[FlagKind] = FlagKind.CEILINGS_ON_BUSY_MACHINE
    share: float


@dataclass(frozen=True, kw_only=True)
class RoofRaised(FlagPayload):
    """A roof raised to what an op of the run reached (the flag's op_id and batch)."""

    kind: ClassVar[FlagKind] = FlagKind.ROOF_RAISED
    roof: str
    before: float
    after: float
    op: str
    source: str
    measured_at: str | None = None


@dataclass(frozen=True, kw_only=True)
class CeilingSpread(FlagPayload):
    """A roof's probe spread between repeats: ``fast`` and ``slow`` are the quartile rates
    whose span over ``median`` is ``spread`` (figures kept before the quartiles were have
    neither, and their spread is of the repeats' times); reports written before families
    had roofs lack ``family``, ``path`` and ``size``."""

    kind: ClassVar[FlagKind] = FlagKind.CEILING_SPREAD
    dtype: str
    family: str | None = None
    path: str | None = None
    size: int | str | None = None
    best: float
    median: float
    fast: float | None = field(default=None, metadata=OMITTED)
    slow: float | None = field(default=None, metadata=OMITTED)
    spread: float

    def __post_init__(self) -> None:
        _together(self, "fast", "slow")


@dataclass(frozen=True, kw_only=True)
class AboveTheoreticalPeak(FlagPayload):
    """A measured rate (a probe's, or an op's: the flag's op_id) above the theoretical peak,
    and how that peak was worked out (``cores`` None: a GPU's datasheet, ``source``)."""

    kind: ClassVar[FlagKind] = FlagKind.ABOVE_THEORETICAL_PEAK
    dtype: str
    family: str | None = None
    path: str
    flops_per_s: float
    share: float
    theoretical_flops_per_s: float
    source: str
    cores: int | None = None
    clock_hz: float | None = None
    clock_source: str | None = None
    flops_per_cycle: float | None = None
    isa: str | None = None
    fma_units: int | None = None
    matrix_unit: str | None = None


@dataclass(frozen=True, kw_only=True)
class BelowTheoreticalPeak(FlagPayload):
    """A kernel family's roof far below the theoretical peak (as AboveTheoreticalPeak);
    ``native``: whether the CPU has native bfloat16 arithmetic (None: not asked)."""

    kind: ClassVar[FlagKind] = FlagKind.BELOW_THEORETICAL_PEAK
    dtype: str
    family: str | None = None
    path: str
    flops_per_s: float
    share: float
    native: bool | None = None
    theoretical_flops_per_s: float
    source: str
    cores: int | None = None
    clock_hz: float | None = None
    clock_source: str | None = None
    flops_per_cycle: float | None = None
    isa: str | None = None
    fma_units: int | None = None
    matrix_unit: str | None = None


@dataclass(frozen=True, kw_only=True)
class StandInTrainingStep(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.STAND_IN_TRAINING_STEP
    optimizer_from_file: bool
    loss_from_file: bool
    default_lr: float


@dataclass(frozen=True, kw_only=True)
class Compiled(FlagPayload):
    """Each shape's compile (``compiles_at``, ``compile_s``) and, where a batch size was
    profiled, the fused kernels' time there and the largest of them."""

    kind: ClassVar[FlagKind] = FlagKind.COMPILED
    compiles_at: list[int]
    compile_s: list[float]
    at_batch: int | None = field(default=None, metadata=OMITTED)
    fused_s: float | None = field(default=None, metadata=OMITTED)
    fused_share: float | None = field(default=None, metadata=OMITTED)
    kernels: list[str] | None = field(default=None, metadata=OMITTED)
    kernel_s: list[float] | None = field(default=None, metadata=OMITTED)

    def __post_init__(self) -> None:
        _together(self, "at_batch", "fused_s", "fused_share", "kernels", "kernel_s")


@dataclass(frozen=True, kw_only=True)
class AmpSlower(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.AMP_SLOWER
    amp: str
    dtype: str
    peak: float
    fp32_peak: float
    compute_share: float
    native: bool | None = None


@dataclass(frozen=True, kw_only=True)
class AmpCasts(FlagPayload):
    """--amp's casts: their time and share of the profiled step, and their calls."""

    kind: ClassVar[FlagKind] = FlagKind.AMP_CASTS
    amp: str
    dtype: str
    cast_s: float
    share: float
    calls: int


@dataclass(frozen=True, kw_only=True)
class AmpSlowerMeasured(FlagPayload):
    """--amp timed against itself: the fastest size again without autocast ran faster
    beyond noise (run.amp_off)."""

    kind: ClassVar[FlagKind] = FlagKind.AMP_SLOWER_MEASURED
    amp: str
    amp_s: float
    fp32_s: float
    fp32_high_s: float
    amp_low_s: float
    ratio: float


@dataclass(frozen=True, kw_only=True)
class AmpFaster(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.AMP_FASTER
    dtype: str
    amp: str
    ratio: float
    compute_share: float


@dataclass(frozen=True, kw_only=True)
class GlobalBatchInInference(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.GLOBAL_BATCH_IN_INFERENCE
    global_batch: int


@dataclass(frozen=True, kw_only=True)
class WorkVaries(FlagPayload):
    """The weights read per step at each batch size."""

    kind: ClassVar[FlagKind] = FlagKind.WORK_VARIES
    batch_sizes: list[int]
    weight_bytes: list[int]


@dataclass(frozen=True, kw_only=True)
class PageFaults(FlagPayload):
    """Page faults per step and their share of the step at ``cost_s`` a fault, by batch
    size; ``measured``: the cost was measured side by side (reports.view.shown_flag)."""

    kind: ClassVar[FlagKind] = FlagKind.PAGE_FAULTS
    batch_sizes: list[int]
    faults: list[float]
    shares: list[float]
    page_bytes: int
    cost_s: float
    measured: bool | None = field(default=None, metadata=OMITTED)


@dataclass(frozen=True, kw_only=True)
class PredictedNotToFit(FlagPayload):
    """A batch size skipped: its peak memory, extrapolated from two measured sizes, over
    the budget (``budget_bytes``) or the free memory (``more_bytes`` and ``free_bytes``).
    Also the values of a StopKind.SKIPPED stop."""

    kind: ClassVar[FlagKind] = FlagKind.PREDICTED_NOT_TO_FIT
    predicted_bytes: float
    from_batches: list[int]
    budget_bytes: int | None = field(default=None, metadata=OMITTED)
    more_bytes: float | None = field(default=None, metadata=OMITTED)
    free_bytes: int | None = field(default=None, metadata=OMITTED)

    def __post_init__(self) -> None:
        _together(self, "more_bytes", "free_bytes")
        if (self.budget_bytes is None) == (self.more_bytes is None):
            raise PayloadError("a predicted_not_to_fit flag's values hold either "
                               "'budget_bytes' or 'more_bytes' and 'free_bytes'")


@dataclass(frozen=True, kw_only=True)
class BatchFailed(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.BATCH_FAILED
    status: str
    error: str


# -- recorded traces --------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class TraceNotRead(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.TRACE_NOT_READ
    error: str


@dataclass(frozen=True, kw_only=True)
class TracesOnDifferentGpus(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.TRACES_ON_DIFFERENT_GPUS
    gpus: list[str]
    roofs_of: str


@dataclass(frozen=True, kw_only=True)
class GpuNotInDatasheets(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.GPU_NOT_IN_DATASHEETS
    gpu: str


@dataclass(frozen=True, kw_only=True)
class SlowestRank(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.SLOWEST_RANK
    rank: int | None
    ranks: int
    trace: str


@dataclass(frozen=True, kw_only=True)
class TraceIncomplete(FlagPayload):
    """What a recorded trace lacks (a flags.TraceGap value); ``events``: how many were read
    of a truncated one."""

    kind: ClassVar[FlagKind] = FlagKind.TRACE_INCOMPLETE
    missing: str
    events: int | None = field(default=None, metadata=OMITTED)


@dataclass(frozen=True, kw_only=True)
class CountersDisagree(FlagPayload):
    """diagnose trace --ncu: an op's measured intensity is on the other side of its roof's
    ridge from the modelled one."""

    kind: ClassVar[FlagKind] = FlagKind.COUNTERS_DISAGREE
    op: str
    bound: str
    modelled_bound: str
    dram_bytes: float
    modelled_bytes: float
    flops: float
    modelled_flops: float
    matched: int
    launches: int


@dataclass(frozen=True, kw_only=True)
class NcuFailed(FlagPayload):
    """--ncu: no counters (``failure``: a profiler.ncu_run.NcuFailure value)."""

    kind: ClassVar[FlagKind] = FlagKind.NCU_FAILED
    failure: str
    detail: str


# -- integrations -----------------------------------------------------------------------------
@dataclass(frozen=True, kw_only=True)
class LightningAccumulates(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.LIGHTNING_ACCUMULATES
    batches: int
    rows: int | None = None


@dataclass(frozen=True, kw_only=True)
class LightningProcesses(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.LIGHTNING_PROCESSES
    world: int
    strategy: str


@dataclass(frozen=True, kw_only=True)
class TrainerAccumulates(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.TRAINER_ACCUMULATES
    steps: int
    micro_batch: int


@dataclass(frozen=True, kw_only=True)
class WatchDataLoading(FlagPayload):
    """The time each watched step spent before the model was called, and its share of the
    median step."""

    kind: ClassVar[FlagKind] = FlagKind.WATCH_DATA_LOADING
    seconds: float
    share: float


@dataclass(frozen=True, kw_only=True)
class FinderSet(FlagPayload):
    """A batch-size finder set the trainer's batch size: ``mode`` ("fastest", "largest"),
    ``batch_size`` (what it set), ``where`` (the attribute), ``largest`` (the largest that
    ran), ``margin`` (largest mode), ``world`` (processes that took rank 0's answer),
    ``step`` (what one timed step of the loop is: a finding.TrainerStep value)."""

    kind: ClassVar[FlagKind] = FlagKind.FINDER_SET
    mode: str
    batch_size: int
    where: str
    largest: int
    margin: float
    world: int
    step: str


# -- a report.json of schema 1, whose flags were sentences ------------------------------------
@dataclass(frozen=True, kw_only=True)
class Note(FlagPayload):
    kind: ClassVar[FlagKind] = FlagKind.NOTE
    text: str


# -- stops: why the sweep ended where it did (records.flags.StopKind) -------------------------
@dataclass(frozen=True, kw_only=True)
class ListDoneStop(StopPayload):
    """Every requested batch size was measured."""

    kind: ClassVar[StopKind] = StopKind.LIST_DONE


@dataclass(frozen=True, kw_only=True)
class CapStop(StopPayload):
    """The default sweep reached its largest size."""

    kind: ClassVar[StopKind] = StopKind.CAP
    largest: int


@dataclass(frozen=True, kw_only=True)
class SkippedStop(StopPayload):
    """The stop's batch size was predicted not to fit: the PredictedNotToFit flag's values
    (none where the skipped size had no such flag)."""

    kind: ClassVar[StopKind] = StopKind.SKIPPED
    predicted_bytes: float | None = field(default=None, metadata=OMITTED)
    from_batches: list[int] | None = field(default=None, metadata=OMITTED)
    budget_bytes: int | None = field(default=None, metadata=OMITTED)
    more_bytes: float | None = field(default=None, metadata=OMITTED)
    free_bytes: int | None = field(default=None, metadata=OMITTED)

    @classmethod
    def because(cls, flag: Flag | None) -> SkippedStop:
        """The stop a PREDICTED_NOT_TO_FIT ``flag`` says why of (None: no reason known)."""
        return cls.from_values(PredictedNotToFit.of(flag).values() if flag else {})

    def not_to_fit(self) -> PredictedNotToFit | None:
        """Why the size was skipped, as its flag said; None where nothing said why."""
        values = self.values()
        return PredictedNotToFit.from_values(values) if values else None


@dataclass(frozen=True, kw_only=True)
class FailedStop(StopPayload):
    """The stop's batch size ended as ``status`` (a records.Status value)."""

    kind: ClassVar[StopKind] = StopKind.FAILED
    status: str


@dataclass(frozen=True, kw_only=True)
class OverLatencyLimitStop(StopPayload):
    """Its latency, and the limit, in seconds."""

    kind: ClassVar[StopKind] = StopKind.OVER_LATENCY_LIMIT
    measured: float
    limit: float


@dataclass(frozen=True, kw_only=True)
class OverMemoryBudgetStop(StopPayload):
    """Its peak memory, and the budget, in bytes."""

    kind: ClassVar[StopKind] = StopKind.OVER_MEMORY_BUDGET
    measured: float
    limit: float


@dataclass(frozen=True, kw_only=True)
class PlateauStop(StopPayload):
    """The last ``doublings`` together added less than ``gain``; ``bar_per_s``: the
    throughput a larger size had to beat (reports written before it lack it)."""

    kind: ClassVar[StopKind] = StopKind.PLATEAU
    doublings: int
    gain: float
    bar_per_s: float | None = None


@dataclass(frozen=True, kw_only=True)
class PredictedStop(StopPayload):
    """The step-time model predicts ``remaining`` would not change the pick (throughputs in
    units a second)."""

    kind: ClassVar[StopKind] = StopKind.PREDICTED
    remaining: list[int]
    fitted_on: list[int]
    projected_per_s: float
    margin: float
    highest: int
    gain: float
    last: int
    bar_per_s: float
    miss: float


@dataclass(frozen=True, kw_only=True)
class RepeatedErrorsStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.REPEATED_ERRORS
    batch_sizes: list[int]
    statuses: list[str]


@dataclass(frozen=True, kw_only=True)
class BudgetStop(StopPayload):
    """--budget: the budget, the time spent, the next size's estimate, and the sizes left
    unmeasured."""

    kind: ClassVar[StopKind] = StopKind.BUDGET
    budget_s: float
    spent_s: float
    estimated_s: float
    unmeasured: list[int]


@dataclass(frozen=True, kw_only=True)
class InterruptedStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.INTERRUPTED


@dataclass(frozen=True, kw_only=True)
class InProgressStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.IN_PROGRESS


@dataclass(frozen=True, kw_only=True)
class WatchDoneStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.WATCH_DONE


@dataclass(frozen=True, kw_only=True)
class WatchCutShortStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.WATCH_CUT_SHORT


@dataclass(frozen=True, kw_only=True)
class DataRowsStop(StopPayload):
    """A finder's trial drew ``rows`` rows, fewer than its batch size."""

    kind: ClassVar[StopKind] = StopKind.DATA_ROWS
    rows: int


@dataclass(frozen=True, kw_only=True)
class TracesStop(StopPayload):
    kind: ClassVar[StopKind] = StopKind.TRACES


@dataclass(frozen=True, kw_only=True)
class NoteStop(StopPayload):
    """A report.json of schema 1: its stop reason, a sentence."""

    kind: ClassVar[StopKind] = StopKind.NOTE
    text: str


# -- the step-time model's assumptions (records.report.AssumptionKind) ------------------------
@dataclass(frozen=True, kw_only=True)
class MeasuredAboveRidgeAssumption(AssumptionPayload):
    """A family's compute efficiency taken from its ops measured above the ridge."""

    kind: ClassVar[AssumptionKind] = AssumptionKind.MEASURED_ABOVE_RIDGE


@dataclass(frozen=True, kw_only=True)
class PathSpeedAssumption(AssumptionPayload):
    """Never measured compute-bound: at the speed of its path in the ceilings."""

    kind: ClassVar[AssumptionKind] = AssumptionKind.PATH_SPEED
    path: str
    flops_per_s: float


@dataclass(frozen=True, kw_only=True)
class AtRoofAssumption(AssumptionPayload):
    """Never measured compute-bound and no path measured: at the compute roof."""

    kind: ClassVar[AssumptionKind] = AssumptionKind.AT_ROOF


@dataclass(frozen=True, kw_only=True)
class NotProbedAssumption(AssumptionPayload):
    """Convolutions and per-row ops without a probe of their own at ``batch_sizes``, and
    the probes' bounds that skipped them."""

    kind: ClassVar[AssumptionKind] = AssumptionKind.NOT_PROBED
    batch_sizes: list[int]
    max_call_s: float
    budget_min_s: float
    round_s: float
