"""Flags and stop reasons as data: a kind from a closed set and the numbers behind it.

A classifier (or the worker, or a trace reader) says *what* it noticed: a
:class:`FlagKind`, the batch size and op it concerns, and the values a sentence needs. The
sentence itself is written by the reports layer (``reports/flag_text.py``), once for every
format, so a renderer never parses prose to learn what a flag is about, and a unit is
attached where the number is shown, not where it is computed.

Example:
    >>> flag = Flag(FlagKind.NOISY_TIMING, batch_size=8, values={"spread": 0.31})
    >>> flag.values["spread"]
    0.31
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

# What a flag's or a stop's values may hold: JSON scalars, and lists of them (kernel names,
# batch sizes). Nothing nests deeper, so every renderer can read them without type tests.
Scalar = str | int | float | bool | None
Value = Scalar | list[str | int | float]


class FlagKind(str, Enum):
    """Every kind of flag a report may carry. Each has one sentence in reports/flag_text.py."""

    # -- measuring one batch size (worker, supervisor, watch) ----------------------------
    NO_BREAKDOWN = "no_breakdown"  # reason
    # The plateau rule would have stopped the sweep after this batch size; the step-time
    # model overruled it (highest, projected_per_s, bar_per_s, gain, fitted_on).
    PLATEAU_OVERRULED = "plateau_overruled"
    # The plan's sequential medians looked flat after this batch size, but paired rounds
    # (rounds.plateau_verdict) showed a gain past the bar or could not tell: the sweep went
    # on (verdict, best_before, recent, gain, low, high, rounds, bar).
    PLATEAU_UNCONFIRMED = "plateau_unconfirmed"
    # The step-time model's predicted stop did not hold once the sizes it rested on were
    # timed in paired rounds: the sweep went on (batch_sizes, rounds).
    PREDICTED_STOP_UNCONFIRMED = "predicted_stop_unconfirmed"
    # --budget ran out before these phases (phases: "probes", "grid", "allocator").
    BUDGET_SKIPPED = "budget_skipped"
    BREAKDOWN_FAILED = "breakdown_failed"  # phase, error
    BREAKDOWN_LOST = "breakdown_lost"  # reason
    BREAKDOWN_INTERRUPTED = "breakdown_interrupted"
    TIMED_BEFORE_DEATH = "timed_before_death"
    PROFILE_RETAKEN = "profile_retaken"  # tries, first_gap, profiled_s, timed_s
    PROFILE_DISAGREES = "profile_disagrees"  # profiled_s, timed_s, gap, cost_per_op_s, captures
    GPU_THROTTLED = "gpu_throttled"  # reasons
    RANKS_OUTPUT = "ranks_output"  # path
    NON_DETERMINISTIC = "non_deterministic"
    # -- one op ---------------------------------------------------------------------------
    UNMATCHED_CALLS = "unmatched_calls"
    FUSED_BY_INDUCTOR = "fused_by_inductor"  # kernels
    SERVED_FROM_CACHE = "served_from_cache"  # time_s, roof_s, footprint_bytes, cache_bytes
    PARTLY_FROM_CACHE = "partly_from_cache"  # time_s, roof_s, footprint_bytes, cache_bytes
    ACCOUNTING_ERROR = "accounting_error"  # time_s, roof_s
    # -- the run (classifiers) ------------------------------------------------------------
    NOISY_TIMING = "noisy_timing"  # spread
    CEILINGS_FAILED = "ceilings_failed"  # error
    CEILINGS_ON_BUSY_MACHINE = "ceilings_on_busy_machine"  # share
    ROOF_RAISED = "roof_raised"  # roof, before, after, op, source, measured_at (+ op_id, batch)
    # A roof's probe spread between repeats (dtype, family, path, size, spread, best,
    # median, and fast, slow: the quartile rates whose span over the median is spread).
    CEILING_SPREAD = "ceiling_spread"
    # A measured rate (a probe's, or a run's op's) above the theoretical peak, or a kernel
    # family's roof far below it (dtype, family, path, flops_per_s, share,
    # theoretical_flops_per_s, and how it was worked out: source, cores, clock_hz,
    # clock_source, flops_per_cycle, isa, fma_units, matrix_unit; below: native).
    ABOVE_THEORETICAL_PEAK = "above_theoretical_peak"
    BELOW_THEORETICAL_PEAK = "below_theoretical_peak"
    STAND_IN_TRAINING_STEP = "stand_in_training_step"  # optimizer_from_file, loss_from_file,
    #                                                    default_lr
    COMPILED = "compiled"  # compiles_at, compile_s; at_batch, fused_s, fused_share, kernels,
    #                        kernel_s
    AMP_SLOWER = "amp_slower"  # amp, dtype, peak, fp32_peak, compute_share, native
    AMP_CASTS = "amp_casts"  # amp, dtype, cast_s, share (of the profiled step), calls
    # --amp timed against itself: the fastest size again without autocast ran faster beyond
    # noise (run.amp_off). amp, amp_s, fp32_s, fp32_high_s, amp_low_s, ratio
    AMP_SLOWER_MEASURED = "amp_slower_measured"
    AMP_FASTER = "amp_faster"  # dtype, ratio, compute_share
    GLOBAL_BATCH_IN_INFERENCE = "global_batch_in_inference"  # global_batch
    WORK_VARIES = "work_varies"  # batch_sizes, weight_bytes
    PAGE_FAULTS = "page_faults"  # batch_sizes, faults, shares, page_bytes, cost_s
    # A batch size skipped: its peak memory, extrapolated from two measured sizes, would be
    # over the budget or the free memory (predicted_bytes, from_batches; budget_bytes, or
    # more_bytes and free_bytes).
    PREDICTED_NOT_TO_FIT = "predicted_not_to_fit"
    BATCH_FAILED = "batch_failed"  # status, error
    # -- recorded traces ------------------------------------------------------------------
    TRACE_NOT_READ = "trace_not_read"  # error
    TRACES_ON_DIFFERENT_GPUS = "traces_on_different_gpus"  # gpus, roofs_of
    GPU_NOT_IN_DATASHEETS = "gpu_not_in_datasheets"  # gpu
    SLOWEST_RANK = "slowest_rank"  # rank, ranks, trace
    TRACE_INCOMPLETE = "trace_incomplete"  # missing (traces.analysis.MISSING_*), events
    # diagnose trace --ncu: an op's measured intensity (its kernels' Nsight Compute
    # counters) is on the other side of its roof's ridge from the modelled one (op, bound,
    # modelled_bound, dram_bytes, modelled_bytes, flops, modelled_flops, matched, launches).
    COUNTERS_DISAGREE = "counters_disagree"
    # --ncu: this batch size has no counters (failure: profiler.ncu_run.NcuFailure, detail).
    NCU_FAILED = "ncu_failed"
    # -- integrations ---------------------------------------------------------------------
    LIGHTNING_ACCUMULATES = "lightning_accumulates"  # batches, rows
    LIGHTNING_PROCESSES = "lightning_processes"  # world, strategy
    TRAINER_ACCUMULATES = "trainer_accumulates"  # steps, micro_batch
    WATCH_DATA_LOADING = "watch_data_loading"  # seconds, share (of the median step)
    # A batch-size finder inside a trainer (finding.py) set the trainer's batch size: mode
    # ("fastest", "largest"), batch_size (what it set), where (the attribute), largest (the
    # largest that ran), margin (largest mode), world (processes that took rank 0's answer),
    # step ("training_batch", "optimizer_step": what one timed step of the loop is).
    FINDER_SET = "finder_set"
    # -- a report.json of schema 1, whose flags were sentences ----------------------------
    NOTE = "note"  # text


@dataclass(frozen=True)
class Flag:
    """Something a reader of the report should know, as data.

    Attributes:
        kind: what was noticed.
        batch_size: the batch size it concerns; None for the run as a whole.
        op_id: the op it concerns (``join.op_ids``); None for a batch size or the run.
        values: the numbers and names its sentence quotes (keys per kind, in FlagKind).
    """

    kind: FlagKind
    batch_size: int | None = None
    op_id: str | None = None
    values: dict[str, Value] = field(default_factory=dict)



class TraceGap(str, Enum):
    """What a recorded trace lacks (FlagKind.TRACE_INCOMPLETE's ``missing``)."""

    TRUNCATED = "truncated"  # the file ends early; ``events``: how many were read
    NO_KERNELS = "no_kernels"  # no device events: a CPU-only profile
    NO_LAUNCHES = "no_launches"  # kernels without the CUDA runtime calls that launched them
    NO_SHAPES = "no_shapes"  # recorded without record_shapes=True
    NO_STEPS = "no_steps"  # no ProfilerStep#N annotations
    NO_DEVICE = "no_device"  # no deviceProperties: the GPU is unknown


class StopKind(str, Enum):
    """Why the sweep stopped going up (or why a watch or trace report ends where it does)."""

    LIST_DONE = "list_done"  # every requested batch size was measured
    CAP = "cap"  # the default sweep reached its largest size (largest)
    SKIPPED = "skipped"  # predicted not to fit: PREDICTED_NOT_TO_FIT's values
    FAILED = "failed"  # batch_size ended as status
    OVER_LATENCY_LIMIT = "over_latency_limit"  # measured, limit (seconds)
    OVER_MEMORY_BUDGET = "over_memory_budget"  # measured, limit (bytes)
    PLATEAU = "plateau"  # doublings, gain
    PREDICTED = "predicted"  # remaining, fitted_on, projected_per_s, margin, highest, gain,
    #                          last, bar_per_s, miss (throughputs in units a second)
    REPEATED_ERRORS = "repeated_errors"  # batch_sizes, statuses
    BUDGET = "budget"  # --budget: budget_s, spent_s, estimated_s (the next size's), unmeasured
    INTERRUPTED = "interrupted"  # by the user
    IN_PROGRESS = "in_progress"  # a report written while the sweep runs
    WATCH_DONE = "watch_done"  # the watched steps are done
    WATCH_CUT_SHORT = "watch_cut_short"  # the loop ended before they were
    # A finder's trial drew fewer rows than its batch size from the training data: rows
    DATA_ROWS = "data_rows"
    TRACES = "traces"  # a report of recorded traces: nothing was swept
    NOTE = "note"  # a report.json of schema 1: text


@dataclass(frozen=True)
class Stop:
    """Why the sweep ended where it did: a kind and the values its sentence quotes."""

    kind: StopKind
    batch_size: int | None = None
    values: dict[str, Value] = field(default_factory=dict)
