"""Flags and stop reasons as data: a kind from a closed set and the numbers behind it.

A classifier (or the worker, or a trace reader) says *what* it noticed: a
:class:`FlagKind`, the batch size and op it concerns, and the values a sentence needs, built
from the kind's typed payload (records/flag_payloads.py) so that a missing key fails type
checking; in report.json the values stay a plain dict of JSON scalars. The sentence itself
is written by the reports layer (``reports/flag_text.py``), once for every format, so a
renderer never parses prose to learn what a flag is about, and a unit is attached where the
number is shown, not where it is computed.

Example:
    >>> from batchscope.records.flag_payloads import NoisyTiming
    >>> flag = Flag.of(NoisyTiming(spread=0.31), batch_size=8)
    >>> flag.kind.value, flag.values
    ('noisy_timing', {'spread': 0.31})
    >>> NoisyTiming.of(flag).spread
    0.31
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum
from typing import Protocol, TypeVar

# What a flag's or a stop's values may hold: JSON scalars, and lists of them (kernel names,
# batch sizes). Nothing nests deeper, so every renderer can read them without type tests.
Scalar = str | int | float | bool | None
Value = Scalar | list[str | int | float]


K_co = TypeVar("K_co", covariant=True)


class KindPayload(Protocol[K_co]):
    """What :meth:`Flag.of`, :meth:`Stop.of` and ``Assumption.of`` take: a typed payload of
    one kind (records/flag_payloads.py; named by its shape, so that the records here need
    not import the payloads that import them)."""

    @property
    def kind(self) -> K_co: ...

    def values(self) -> dict[str, Value]: ...


class FlagKind(str, Enum):
    """Every kind of flag a report may carry. Each has one payload class in
    records/flag_payloads.py, named beside it, whose fields are its values' keys, and one
    sentence in reports/flag_text.py."""

    # -- measuring one batch size (worker, supervisor, watch) ----------------------------
    NO_BREAKDOWN = "no_breakdown"  # NoBreakdown
    # The plateau rule would have stopped the sweep after this batch size; the step-time
    # model overruled it.
    PLATEAU_OVERRULED = "plateau_overruled"  # PlateauOverruled
    # The plan's sequential medians looked flat after this batch size, but paired rounds
    # (rounds.plateau_verdict) showed a gain past the bar or could not tell: the sweep went
    # on.
    PLATEAU_UNCONFIRMED = "plateau_unconfirmed"  # PlateauUnconfirmed
    # The step-time model's predicted stop did not hold once the sizes it rested on were
    # timed in paired rounds: the sweep went on.
    PREDICTED_STOP_UNCONFIRMED = "predicted_stop_unconfirmed"  # PredictedStopUnconfirmed
    # --budget ran out before these phases.
    BUDGET_SKIPPED = "budget_skipped"  # BudgetSkipped
    BREAKDOWN_FAILED = "breakdown_failed"  # BreakdownFailed
    BREAKDOWN_LOST = "breakdown_lost"  # BreakdownLost
    BREAKDOWN_INTERRUPTED = "breakdown_interrupted"  # BreakdownInterrupted
    TIMED_BEFORE_DEATH = "timed_before_death"  # TimedBeforeDeath
    PROFILE_RETAKEN = "profile_retaken"  # ProfileRetaken
    PROFILE_DISAGREES = "profile_disagrees"  # ProfileDisagrees
    GPU_THROTTLED = "gpu_throttled"  # GpuThrottled
    RANKS_OUTPUT = "ranks_output"  # RanksOutput
    NON_DETERMINISTIC = "non_deterministic"  # NonDeterministic
    # -- one op ---------------------------------------------------------------------------
    UNMATCHED_CALLS = "unmatched_calls"  # UnmatchedCalls
    FUSED_BY_INDUCTOR = "fused_by_inductor"  # FusedByInductor
    SERVED_FROM_CACHE = "served_from_cache"  # ServedFromCache
    PARTLY_FROM_CACHE = "partly_from_cache"  # PartlyFromCache
    ACCOUNTING_ERROR = "accounting_error"  # AccountingError
    # -- the run (classifiers) ------------------------------------------------------------
    NOISY_TIMING = "noisy_timing"  # NoisyTiming
    CEILINGS_FAILED = "ceilings_failed"  # CeilingsFailed
    CEILINGS_ON_BUSY_MACHINE = "ceilings_on_busy_machine"  # CeilingsOnBusyMachine
    ROOF_RAISED = "roof_raised"  # RoofRaised (and the flag's op_id and batch)
    # A roof's probe spread between repeats.
    CEILING_SPREAD = "ceiling_spread"  # CeilingSpread
    # A measured rate (a probe's, or a run's op's) above the theoretical peak, or a kernel
    # family's roof far below it, with how that peak was worked out.
    ABOVE_THEORETICAL_PEAK = "above_theoretical_peak"  # AboveTheoreticalPeak
    BELOW_THEORETICAL_PEAK = "below_theoretical_peak"  # BelowTheoreticalPeak
    STAND_IN_TRAINING_STEP = "stand_in_training_step"  # StandInTrainingStep
    COMPILED = "compiled"  # Compiled
    AMP_SLOWER = "amp_slower"  # AmpSlower
    AMP_CASTS = "amp_casts"  # AmpCasts
    # --amp timed against itself: the fastest size again without autocast ran faster beyond
    # noise (run.amp_off).
    AMP_SLOWER_MEASURED = "amp_slower_measured"  # AmpSlowerMeasured
    AMP_FASTER = "amp_faster"  # AmpFaster
    GLOBAL_BATCH_IN_INFERENCE = "global_batch_in_inference"  # GlobalBatchInInference
    WORK_VARIES = "work_varies"  # WorkVaries
    PAGE_FAULTS = "page_faults"  # PageFaults
    # A batch size skipped: its peak memory, extrapolated from two measured sizes, would be
    # over the budget or the free memory.
    PREDICTED_NOT_TO_FIT = "predicted_not_to_fit"  # PredictedNotToFit
    BATCH_FAILED = "batch_failed"  # BatchFailed
    # -- recorded traces ------------------------------------------------------------------
    TRACE_NOT_READ = "trace_not_read"  # TraceNotRead
    TRACES_ON_DIFFERENT_GPUS = "traces_on_different_gpus"  # TracesOnDifferentGpus
    GPU_NOT_IN_DATASHEETS = "gpu_not_in_datasheets"  # GpuNotInDatasheets
    SLOWEST_RANK = "slowest_rank"  # SlowestRank
    TRACE_INCOMPLETE = "trace_incomplete"  # TraceIncomplete (missing: a TraceGap)
    # diagnose trace --ncu: an op's measured intensity (its kernels' Nsight Compute
    # counters) is on the other side of its roof's ridge from the modelled one.
    COUNTERS_DISAGREE = "counters_disagree"  # CountersDisagree
    # --ncu: this batch size has no counters.
    NCU_FAILED = "ncu_failed"  # NcuFailed
    # -- integrations ---------------------------------------------------------------------
    LIGHTNING_ACCUMULATES = "lightning_accumulates"  # LightningAccumulates
    LIGHTNING_PROCESSES = "lightning_processes"  # LightningProcesses
    TRAINER_ACCUMULATES = "trainer_accumulates"  # TrainerAccumulates
    WATCH_DATA_LOADING = "watch_data_loading"  # WatchDataLoading
    # A batch-size finder inside a trainer (finding.py) set the trainer's batch size.
    FINDER_SET = "finder_set"  # FinderSet
    # -- a report.json of schema 1, whose flags were sentences ----------------------------
    NOTE = "note"  # Note


@dataclass(frozen=True)
class Flag:
    """Something a reader of the report should know, as data.

    Attributes:
        kind: what was noticed.
        batch_size: the batch size it concerns; None for the run as a whole.
        op_id: the op it concerns (``join.op_ids``); None for a batch size or the run.
        values: the numbers and names its sentence quotes: its kind's payload's fields
            (records/flag_payloads.py). Build a flag with :meth:`Flag.of` and read it back
            with the payload class's ``of`` (``NoisyTiming.of(flag)``), which names a
            missing key where a plain lookup would not.
    """

    kind: FlagKind
    batch_size: int | None = None
    op_id: str | None = None
    values: dict[str, Value] = field(default_factory=dict)

    @classmethod
    def of(cls, payload: KindPayload[FlagKind], batch_size: int | None = None,
           op_id: str | None = None) -> Flag:
        """The flag of ``payload``'s kind, its values ``payload``'s fields
        (records/flag_payloads.py: one payload class per kind)."""
        return cls(payload.kind, batch_size, op_id, payload.values())


class TraceGap(str, Enum):
    """What a recorded trace lacks (TraceIncomplete's ``missing``)."""

    TRUNCATED = "truncated"  # the file ends early; ``events``: how many were read
    NO_KERNELS = "no_kernels"  # no device events: a CPU-only profile
    NO_LAUNCHES = "no_launches"  # kernels without the CUDA runtime calls that launched them
    NO_SHAPES = "no_shapes"  # recorded without record_shapes=True
    NO_STEPS = "no_steps"  # no ProfilerStep#N annotations
    NO_DEVICE = "no_device"  # no deviceProperties: the GPU is unknown


class StopKind(str, Enum):
    """Why the sweep stopped going up (or why a watch or trace report ends where it does).
    Each has one payload class in records/flag_payloads.py, named beside it."""

    LIST_DONE = "list_done"  # ListDoneStop: every requested batch size was measured
    CAP = "cap"  # CapStop: the default sweep reached its largest size
    SKIPPED = "skipped"  # SkippedStop: predicted not to fit (PredictedNotToFit's values)
    FAILED = "failed"  # FailedStop: batch_size ended as its status
    OVER_LATENCY_LIMIT = "over_latency_limit"  # OverLatencyLimitStop (seconds)
    OVER_MEMORY_BUDGET = "over_memory_budget"  # OverMemoryBudgetStop (bytes)
    PLATEAU = "plateau"  # PlateauStop
    PREDICTED = "predicted"  # PredictedStop (throughputs in units a second)
    REPEATED_ERRORS = "repeated_errors"  # RepeatedErrorsStop
    BUDGET = "budget"  # BudgetStop: --budget would have run out before the next size
    INTERRUPTED = "interrupted"  # InterruptedStop: by the user
    IN_PROGRESS = "in_progress"  # InProgressStop: a report written while the sweep runs
    WATCH_DONE = "watch_done"  # WatchDoneStop: the watched steps are done
    WATCH_CUT_SHORT = "watch_cut_short"  # WatchCutShortStop: the loop ended before they were
    # A finder's trial drew fewer rows than its batch size from the training data.
    DATA_ROWS = "data_rows"  # DataRowsStop
    TRACES = "traces"  # TracesStop: a report of recorded traces: nothing was swept
    NOTE = "note"  # NoteStop: a report.json of schema 1's stop reason


@dataclass(frozen=True)
class Stop:
    """Why the sweep ended where it did: a kind and the values its sentence quotes, its
    kind's payload's fields (records/flag_payloads.py: ``Stop.of(CapStop(largest=64))``,
    ``CapStop.of(stop).largest``)."""

    kind: StopKind
    batch_size: int | None = None
    values: dict[str, Value] = field(default_factory=dict)

    @classmethod
    def of(cls, payload: KindPayload[StopKind], batch_size: int | None = None) -> Stop:
        """The stop of ``payload``'s kind, its values ``payload``'s fields
        (records/flag_payloads.py: one payload class per kind, ``CapStop``, ...)."""
        return cls(payload.kind, batch_size, payload.values())
