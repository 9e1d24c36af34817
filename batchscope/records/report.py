"""The report: every section a frozen dataclass, from the assembler to every renderer.

``report.json`` is this object serialised (:func:`batchscope.records.codec.encode`) and read
back by one typed loader (:func:`batchscope.records.codec.decode_report`). Numbers only: the
sentences (the explanation, a flag's or the stop's words, the rule) are written by the
reports layer from these fields, for every format alike.

Example:
    >>> report = batchscope.diagnose_file("samples/mlp.py")  # doctest: +SKIP
    >>> report.recommendation.batch_size  # doctest: +SKIP
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from batchscope.hardware.types import Ceilings
from batchscope.records.counter_report import CountersSection
from batchscope.records.evidence import Evidence
from batchscope.records.flags import Flag, KindPayload, Stop, Value
from batchscope.records.interval import ControlTiming, DriftControl, Interval
from batchscope.records.measurement import BatchResult, Status
from batchscope.records.rounds import DecisionRounds
from batchscope.records.run import Options
from batchscope.records.serving import ServingSection
from batchscope.records.target import TargetSection

# report.json's schema; bump it to rename or retype a field. Schema 1 (flags, the stop and
# the rule as sentences) is still read: codec.decode_report keeps them as NOTE kinds.
SCHEMA = "batchscope.report/2"
SCHEMA_1 = "batchscope.report/1"


class Mode(str, Enum):
    INFERENCE = "inference"
    TRAIN = "train"


class Source(str, Enum):
    """How the report's measurements were made."""

    SWEEP = "sweep"  # diagnose model.py: a worker (or torchrun's ranks) per batch size
    WATCH = "watch"  # batchscope.watch around the user's own loop (and the callbacks)
    TRACE = "trace"  # diagnose trace: recorded profiler traces, nothing run here
    NCU = "ncu"  # diagnose ncu: Nsight Compute exports, nothing run here
    TARGET = "target"  # diagnose --target-gpu: predicted on a named GPU, nothing timed
    # a batch-size finder inside the user's trainer (finding.py): the trainer's own loop
    # timed at each batch size of the plan, in its process
    FINDER = "finder"


# -- model ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class TrainingStep:
    """What a training step runs: the model file's optimizer and loss, or batchscope's
    stand-ins (AdamW at ``default_lr``, foreach off; the mean square of the outputs). The
    gradients are zeroed with set_to_none=False either way (one storage each, counted with
    the weights)."""

    optimizer_from_file: bool
    loss_from_file: bool
    default_lr: float

    @property
    def defaults_used(self) -> bool:
        """Either part is batchscope's stand-in."""
        return not (self.optimizer_from_file and self.loss_from_file)


class WrappedBy(str, Enum):
    """Who wrapped a data-parallel model in DistributedDataParallel."""

    MODEL_FILE = "model_file"
    BATCHSCOPE = "batchscope"


@dataclass(frozen=True)
class RankHost:
    rank: int
    host: str
    pid: int


@dataclass(frozen=True)
class BusBandwidthSize:
    bytes: int
    time_s: float
    algbw_bytes_per_s: float
    busbw_bytes_per_s: float


@dataclass(frozen=True)
class BusBandwidth:
    """The all-reduce bus bandwidth (nccl-tests' busbw) of the ranks, measured or cached."""

    busbw_bytes_per_s: float
    sizes: list[BusBandwidthSize] = field(default_factory=list)
    source: str = "measured"  # or "cache"


@dataclass(frozen=True)
class DistributedInfo:
    """A data-parallel sweep's ranks (profiler/ranks.py)."""

    world_size: int
    backend: str
    wrapped_by: WrappedBy
    allreduce_bytes_per_step: int
    find_unused_parameters: bool = False
    parameters_without_gradient: int = 0
    nodes: int = 1
    ranks: list[RankHost] = field(default_factory=list)
    bus_bandwidth: BusBandwidth | None = None


@dataclass(frozen=True)
class ModelInfo:
    """report.json ``model``: what was measured, as the worker (or watch, or a trace) saw it.

    ``parameter_bytes`` is the bytes of the model's parameters and buffers, wherever it is
    measured (the weights a step reads whatever the batch)."""

    target: str
    mode: Mode = Mode.INFERENCE
    unit: str = "sample"
    units_per_row: int = 1  # UNITS_PER_ROW at the sweep's length
    dtype: str | None = None  # the model's dtype ("float32"); None: a trace that names none
    amp: str | None = None  # autocast's dtype under --amp ("bfloat16")
    parameters: int | None = None
    parameter_bytes: int | None = None
    device: str = ""
    threads: int | None = None
    available_memory_bytes: int | None = None
    batch_sizes: list[int] | None = None  # the model file's BATCH_SIZES
    contexts: list[int] = field(default_factory=list)  # CONTEXTS: decode models
    seq_lens: list[int] = field(default_factory=list)  # SEQ_LENS: sequence models
    units_per_row_per_token: bool = False  # UNITS_PER_ROW = "seq_len"
    compiled: bool = False
    training_step: TrainingStep | None = None
    distributed: DistributedInfo | None = None

    @property
    def compute_dtype(self) -> str:
        """The dtype the matmuls ran in: autocast's where it ran, else the model's."""
        return self.amp or self.dtype or "float32"


# -- run -------------------------------------------------------------------------------------
@dataclass(frozen=True)
class WatchInfo:
    """How many steps ``watch`` saw and timed, and how long each waited for its batch."""

    steps: int
    timed_steps: int
    block_steps: int
    # Host seconds per timed step from the end of the step before to the model's first
    # call (or watch.batch_ready()): loading the batch. In the latency, not in the op
    # breakdown; None where some timed step never reached the model.
    data_loading_s: float | None = None


class WatchedStep(str, Enum):
    """What one step a trainer's callback watched is."""

    TRAINING_BATCH = "training_batch"  # Lightning: one training batch
    OPTIMIZER_STEP = "optimizer_step"  # the HF Trainer: one optimizer step, all its micro-batches
    LOOP_STEP = "loop_step"  # find_batch_size: one step of the training function's loop


@dataclass(frozen=True)
class IntegrationInfo:
    """The trainer a callback watched (integrations/)."""

    name: str  # "lightning" or "transformers_trainer"
    version: str
    step: WatchedStep
    accumulation_steps: int = 1  # accumulate_grad_batches / gradient_accumulation_steps
    world_size: int = 1
    strategy: str | None = None
    micro_batch_rows: int | None = None
    global_step_at_start: int | None = None


@dataclass(frozen=True)
class TraceFile:
    path: str
    rank: int | None
    world_size: int | None
    device: str | None


@dataclass(frozen=True)
class TraceRank:
    """One rank's trace of a step, beside the others of the same batch size."""

    rank: int | None
    trace: str
    step_s: float | None
    device_busy_s: float
    idle_share: float | None
    communication_share: float | None
    device: str | None
    slowest: bool


@dataclass(frozen=True)
class RunInfo:
    """report.json ``run``: how the report was made."""

    source: Source = Source.SWEEP
    tool_version: str = ""
    torch_version: str = ""
    started_at: str = ""
    wall_s: float | None = None
    options: Options | None = None  # a sweep's options
    watch: WatchInfo | None = None
    integration: IntegrationInfo | None = None
    traces: list[TraceFile] = field(default_factory=list)
    # A trace analysed without --batch-sizes: its batch size is unknown (reported as 1).
    batch_size_known: bool = True
    ranks: dict[int, list[TraceRank]] = field(default_factory=dict)  # by batch size
    # The plan's timings against the decision rounds' (a sweep), or watch's first timed
    # steps against the same steps timed again at its end: how far the timings moved; it
    # widens every interval of the run. None: no rounds (or repeat) ran.
    drift: DriftControl | None = None
    # The relative drift every interval was widened by: ``drift``'s, never below
    # classifiers.uncertainty.DRIFT_FLOOR (the floor alone where nothing was timed twice).
    drift_allowance: float | None = None
    # The decision rounds (records/rounds.py): every block, and each size's paired share of
    # the fastest. None: not a sweep, --no-rounds, or fewer than two sizes measured.
    rounds: DecisionRounds | None = None
    # Share of the machine's CPU other processes took while the run measured (hardware/
    # busy.OtherLoad; None where it could not tell: a run under a second, no /proc).
    other_cpu_share: float | None = None
    # Under --amp: the fastest batch size timed again with autocast off, in a fresh worker
    # once the plan ended (first_latency_s under autocast, control_* without it); the
    # amp_slower_measured flag says where autocast ran slower beyond noise.
    amp_off: ControlTiming | None = None


# -- recommendation ------------------------------------------------------------------------
class RuleKind(str, Enum):
    """The rule that picked the recommended batch size."""

    NEAR_BEST = "near_best"  # smallest within near_best_share of the best throughput
    ENERGY = "energy"  # smallest within reach of the lowest energy per unit
    ENERGY_UNAVAILABLE = "energy_unavailable"  # asked for energy, none measured: NEAR_BEST
    ONLY_ONE = "only_one"  # one batch size measured: nothing to choose from


class LimitKind(str, Enum):
    LATENCY = "latency"  # --latency-limit-ms
    MEMORY = "memory"  # --memory-budget


@dataclass(frozen=True)
class OverLimit:
    """A batch size over a user limit: what it measured against the limit."""

    batch_size: int
    kind: LimitKind
    measured: float  # seconds (latency) or bytes (memory)
    limit: float


@dataclass(frozen=True)
class ThroughputCurve:
    """The step time fitted through every measured batch size (classifiers/throughput_curve.py):
    ``step_s(b) = shared_s + per_row_s * b``, least squares on log step time. Pooled over all
    sizes it moves far less from run to run than any one size's timing; the rule passes over a
    size the curve puts below the rule's share of its value at the largest equivalent size,
    where the size's own interval does not lie above the curve."""

    shared_s: float  # the step time the whole batch shares (weights read once, fixed costs)
    per_row_s: float  # the step time each row adds
    batch_sizes: list[int]  # the sizes fitted
    # Sizes whose interval reached the rule's bar but which the curve puts below the share of
    # its value at reference_batch_size, their interval not lying above it: not picked.
    passed_over: list[int] = field(default_factory=list)
    # Units (samples, tokens) a row yields per step: the curve's throughput is
    # units_per_row * b / step_s(b).
    units_per_row: float = 1.0
    # The size the curve's bar is read at: its highest over the equivalent sizes (the
    # largest of them: the curve rises with b); None where nothing was passed over.
    reference_batch_size: int | None = None


@dataclass(frozen=True)
class Rule:
    """Which rule picked, with its numbers."""

    kind: RuleKind
    share: float  # near the best: the share of the best throughput (or energy) allowed
    best_batch_size: int  # the best by the rule's measure
    best_value: float  # its throughput (units/s) or energy (J per unit)
    excluded: list[OverLimit] = field(default_factory=list)
    # The throughput rule read the decision rounds' paired shares (run.rounds): the rounds
    # the pick's share rests on, and whether it stood clear of the noise. None: the rule
    # read sequential timings (no rounds ran: watch, a trace, --no-rounds).
    paired_rounds: int | None = None
    paired_separated: bool = False
    # Rounds at the pick left unpaired because a block stalled (records/rounds.STALL_FACTOR).
    paired_stalled_rounds: int = 0
    # The throughput rule's fitted curve (None: fewer than four sizes, or not the throughput
    # rule).
    curve: ThroughputCurve | None = None


@dataclass(frozen=True)
class PredictionTerms:
    """The numbers B* and the compute-bound batch came from (classifiers/critical_batch.py),
    all per step."""

    shared_s: float | None = None
    per_row_s: float | None = None
    layers_fixed_bytes: float | None = None
    layers_bytes_per_row: float | None = None
    layers_state_bytes_per_row: float | None = None
    layers_flops_per_row: float | None = None
    peak_flops_per_s: float | None = None
    bandwidth_bytes_per_s: float | None = None


@dataclass(frozen=True)
class Accumulation:
    """--global-batch in one training process: the accumulation steps that reach it."""

    global_batch_target: int
    micro_batch: int
    accumulation_steps: int
    global_batch_reached: int
    step_s: float
    time_per_global_batch_s: float


@dataclass(frozen=True)
class Recommendation:
    """report.json ``recommendation`` (DESIGN.md)."""

    batch_size: int
    rule: Rule
    speedup_from_batching: float | None
    speedup_baseline_batch: int | None
    predicted_critical_batch: float | None  # the knee the roofline predicts (B* = t0 / c)
    measured_knee_batch: float | None
    measured_knee_within_sweep: bool
    # Where the layers that read weights or state turn compute-bound; None with
    # ``..._infinite`` True when they never do.
    predicted_compute_bound_batch: float | None = None
    predicted_compute_bound_infinite: bool = False
    near_best_share: float = 0.9
    prediction: PredictionTerms = field(default_factory=PredictionTerms)
    best_batch_size: int | None = None
    best_throughput_per_s: float | None = None
    # The best throughput came at the largest batch size the sweep was allowed to try: a
    # larger --max-batch may find a better one.
    still_rising_at_cap: bool = False
    # The weights read per step changed between batch sizes: the work depends on the inputs
    # (an early exit, routing), so batch-response figures do not describe batching alone.
    work_varies_with_inputs: bool = False
    # What the rule picks when no step pays its page faults: measured side by side
    # (Report.allocator) where the sweep re-timed, else estimated; None when no batch size
    # faulted enough to be flagged.
    batch_size_without_page_faults: int | None = None
    accumulation: Accumulation | None = None
    # Every allowed batch size whose throughput cannot be told from the pick's rule within
    # noise (classifiers/uncertainty.equivalent_batch_sizes), the pick among them: two runs
    # of the same code land in each other's set.
    equivalent_batch_sizes: list[int] = field(default_factory=list)
    # 95% intervals: of the speedup (best over the smallest batch), of the pick's throughput
    # as a share of the best's (the margin the rule gave up; exactly 1 when the pick is the
    # best) and of the measured knee (a seeded bootstrap that holds the fit of the medians).
    speedup_interval: Interval | None = None
    pick_share_of_best: float | None = None
    pick_share_of_best_interval: Interval | None = None
    measured_knee_interval: Interval | None = None
    # Not a 95% interval: B* under the ceilings' best repeats and under their medians (its
    # FLOPs and bytes are exact; only the roofs it divides by vary).
    predicted_critical_batch_interval: Interval | None = None


# -- the step-time model's prediction --------------------------------------------------------
class AssumptionKind(str, Enum):
    """What the step-time model assumed where the sweep did not measure it. Each has one
    payload class in records/flag_payloads.py, named beside it."""

    # A family's compute efficiency (matmul, conv) taken from the ops of it that were
    # measured above the ridge.
    MEASURED_ABOVE_RIDGE = "measured_above_ridge"  # MeasuredAboveRidgeAssumption
    # Never measured compute-bound: at the speed of its path in the ceilings.
    PATH_SPEED = "path_speed"  # PathSpeedAssumption
    # Never measured compute-bound and no path measured: at the compute roof.
    AT_ROOF = "at_roof"  # AtRoofAssumption
    # Convolutions and per-row ops without a probe of their own at these sizes: grown in
    # proportion to the rows.
    NOT_PROBED = "not_probed"  # NotProbedAssumption


@dataclass(frozen=True)
class Assumption:
    """One thing the step-time model assumed, with the numbers its sentence quotes: its
    kind's payload's fields (records/flag_payloads.py)."""

    kind: AssumptionKind
    family: str | None = None  # the kernel family (op_families) it concerns
    values: dict[str, Value] = field(default_factory=dict)

    @classmethod
    def of(cls, payload: KindPayload[AssumptionKind],
           family: str | None = None) -> Assumption:
        """The assumption of ``payload``'s kind, its values ``payload``'s fields
        (records/flag_payloads.py: ``PathSpeedAssumption``, ...)."""
        return cls(payload.kind, family, payload.values())


@dataclass(frozen=True)
class CurvePoint:
    """One batch size on the step-time model's curve (``Report.prediction.points``)."""

    batch_size: int
    predicted_latency_s: float
    predicted_throughput_per_s: float
    # The batch sizes the predicting model was fitted on: at a measured size, the ones just
    # before it (a forecast made without it); at an unmeasured one, the largest measured.
    predicted_from: list[int] = field(default_factory=list)
    measured_latency_s: float | None = None  # None: not measured, the prediction stands alone
    error: float | None = None  # predicted / measured latency - 1
    probed_ops: int = 0  # ops whose time here came from kernel probes of their own shape


@dataclass(frozen=True)
class PredictedPick:
    """report.json ``prediction.pick``: what the recommendation's rule would pick over the
    measured batch sizes and the unmeasured ones as the step-time model predicts them
    (classifiers/recommend.predicted_pick), where that is not the measured pick. Each
    unmeasured size counts at the low end of its band: a prediction, never the
    recommendation itself."""

    batch_size: int
    throughput_per_s: float  # predicted (central) unless ``measured``
    measured: bool
    best_batch_size: int  # the unmeasured size that moved the pick: the fastest predicted
    best_throughput_per_s: float
    margin: float  # the band: the forecasts' largest miss, at least step_model.MIN_MARGIN
    instead_of: int  # the measured pick
    instead_of_throughput_per_s: float


@dataclass(frozen=True)
class StepPrediction:
    """report.json ``prediction``: the step-time model (classifiers/step_model.py), each
    measured batch size forecast from the ones before it, and the unmeasured ones predicted."""

    fitted_on: list[int]
    points: list[CurvePoint]
    knee_batch: float | None
    max_abs_error: float | None  # largest |error| of the forecasts; None: none measured
    assumptions: list[Assumption] = field(default_factory=list)
    # Relative change of the predicted latency at the largest batch size if each compute
    # roof were its median repeat rather than its best; None where the ceilings record none.
    ceiling_sensitivity: float | None = None
    # The kernel probes the model used: seconds of one call by op, shapes and dtype.
    probes_s: dict[str, float] = field(default_factory=dict)
    pick: PredictedPick | None = None


# -- other sections --------------------------------------------------------------------------
@dataclass(frozen=True)
class ResponsePoint:
    """An op's time per batch row at one batch size (its batch-response curve)."""

    batch_size: int
    time_per_row_s: float


class EstimateMethod(str, Enum):
    # Every measured op scaled by the growth of its roofline time (FLOPs, state and
    # activations grow with the batch, weights do not), Python time between ops kept.
    ROOFLINE_SCALED = "roofline_scaled"


@dataclass(frozen=True)
class Estimate:
    """``watch``'s estimate of a larger batch size: never a measurement."""

    batch_size: int
    latency_s: float
    throughput_per_s: float
    method: EstimateMethod = EstimateMethod.ROOFLINE_SCALED


@dataclass(frozen=True)
class DataParallelBatch:
    """One per-rank batch size of a data-parallel sweep.

    The communication figures are rank 0's gradient all-reduce per timed step, from DDP's
    communication hook in the same steps that are timed (profiler/ranks.py): ``exposed``
    is the part backward did not hide, ``share`` that time over the step it was in (the
    median of the per-step ratios); each with its 95% interval (the median's, from the
    per-step samples' order statistics, widened by the run's drift allowance). A low end
    of 0 with a high end at the clock's resolution means "too small to see", never 0."""

    batch_size: int
    global_batch: int
    global_throughput_per_s: float
    communication_exposed_s: float | None
    communication_share: float | None
    allreduce_at_bus_bandwidth_s: float | None
    hidden_share: float | None  # 1 - exposed / in flight (or / the bus-bandwidth time)
    slowest_rank: int | None
    straggler_lag_s: float | None
    communication_exposed_interval_s: Interval | None = None
    communication_share_interval: Interval | None = None
    # Median time per step any bucket's all-reduce was running (hidden or not).
    communication_in_flight_s: float | None = None
    communication_steps: int | None = None  # timed steps the figures come from


@dataclass(frozen=True)
class DataParallelPick:
    """The recommendation's global batch, and the accumulation that reaches --global-batch."""

    per_rank_batch: int
    global_batch: int
    communication_per_sample_s: float
    global_batch_target: int | None = None
    accumulation_steps: int | None = None
    global_batch_reached: int | None = None
    communication_per_sample_with_accumulation_s: float | None = None
    communication_per_sample_interval_s: Interval | None = None
    communication_per_sample_with_accumulation_interval_s: Interval | None = None


class CommunicationTrend(str, Enum):
    """How the communication share moves from the smallest per-rank batch to the largest:
    ``falls`` or ``rises`` only where the two 95% intervals do not overlap."""

    FALLS = "falls"
    RISES = "rises"
    WITHIN_NOISE = "within_noise"


@dataclass(frozen=True)
class DataParallelPrediction:
    """A per-rank batch size the sweep did not measure (one the step-time model predicts):
    the band a measurement there falls inside, built from the measured neighbours' step
    intervals and every measured all-reduce interval (classifiers/data_parallel.py)."""

    batch_size: int
    global_batch: int
    step_interval_s: Interval
    global_throughput_interval_per_s: Interval
    from_batches: list[int] = field(default_factory=list)  # the measured sizes it rests on
    # The step-time model's own latency there (it has no term for the all-reduce), and
    # whether it lies inside the band; None where the model gave none.
    step_model_latency_s: float | None = None
    step_model_inside: bool | None = None


@dataclass(frozen=True)
class DataParallel:
    """report.json ``distributed`` (classifiers/data_parallel.py)."""

    world_size: int
    nodes: int
    backend: str
    wrapped_by: WrappedBy
    allreduce_bytes_per_step: int
    bus_bandwidth_bytes_per_s: float | None
    batches: list[DataParallelBatch]
    recommendation: DataParallelPick | None = None
    # None: fewer than two sizes with an interval (or a report that predates them).
    communication_trend: CommunicationTrend | None = None
    predictions: list[DataParallelPrediction] = field(default_factory=list)


class AllocatorSetBy(str, Enum):
    """How the re-timing's allocator was told to keep its buffers."""

    MALLOPT = "mallopt"  # glibc's mallopt in the sweep's own worker
    ENVIRONMENT = "environment"  # MALLOC_* variables in a fresh worker's environment


@dataclass(frozen=True)
class KeptBatch:
    """One batch size timed again with the allocator keeping its buffers, beside the sweep's."""

    batch_size: int
    status: Status
    error: str = ""
    latency_s: float | None = None
    kept_latency_s: float | None = None
    kept_timed_steps: int | None = None
    throughput_per_s: float | None = None
    kept_throughput_per_s: float | None = None
    page_faults_per_step: float | None = None
    kept_page_faults_per_step: float | None = None
    speedup: float | None = None
    speedup_interval: Interval | None = None  # 95%, from both timings' intervals
    taken: bool | None = None  # None: the size never faulted, so it cannot tell


@dataclass(frozen=True)
class AllocatorCheck:
    """report.json ``allocator`` (classifiers/allocator.py): both allocators side by side."""

    env: dict[str, str]  # what a user sets to keep the buffers
    set_by: AllocatorSetBy | None
    batches: list[KeptBatch]
    batch_size: int | None  # the rule's pick with the buffers kept
    throughput_per_s: float | None
    cost_per_fault_s: float | None  # step time saved per fault avoided, where any was
    taken: bool


@dataclass(frozen=True)
class MemoryLimit:
    """The largest batch predicted to fit at one length, and the line it comes from."""

    batch_size: int
    bytes_per_row: float
    fixed_bytes: float
    capacity_bytes: int
    measured_batch_sizes: list[int]


@dataclass(frozen=True)
class SequencePoint:
    """One batch size × sequence length point."""

    batch_size: int
    seq_len: int
    status: Status
    latency_s: float | None
    units_per_row: int
    tokens_per_step: int
    throughput_per_s: float | None
    peak_memory_bytes: int | None
    source: str  # "sweep" or "grid"
    error: str = ""


@dataclass(frozen=True)
class SequenceLength:
    seq_len: int
    measured: int
    best_batch_size: int | None
    best_throughput_per_s: float | None
    memory_limit: MemoryLimit | None
    out_of_memory_at: int | None


@dataclass(frozen=True)
class SequenceBest:
    batch_size: int
    seq_len: int
    throughput_per_s: float
    tokens_per_step: int


@dataclass(frozen=True)
class SequenceGrid:
    """report.json ``sequence_grid`` (classifiers/sequence_grid.py)."""

    seq_lens: list[int]
    base_seq_len: int
    units_per_row_per_token: bool
    points: list[SequencePoint]
    lengths: list[SequenceLength]
    best: SequenceBest | None


# -- the report ------------------------------------------------------------------------------
@dataclass(frozen=True)
class UncountedWork:
    """report.json ``uncounted``: where ops nobody counted (no FLOP formula, no
    decomposition; or not seen by the counting pass) took a share of a step every figure
    read from the counts leaves out (classifiers/coverage.py; absent under its threshold).

    ``share`` is the largest share of a profiled step in such ops, at ``batch_size``;
    ``ops`` the largest of them there, ``op_shares`` each one's share of that step;
    ``batch_sizes`` every size at or over the threshold."""

    share: float
    batch_size: int
    ops: list[str] = field(default_factory=list)
    op_shares: list[float] = field(default_factory=list)
    batch_sizes: list[int] = field(default_factory=list)


@dataclass(frozen=True)
class Report:
    """One diagnosis: what ``diagnose``, ``watch`` and ``diagnose trace`` return.

    Example:
        >>> report = batchscope.diagnose_file("samples/mlp.py")  # doctest: +SKIP
        >>> report.recommendation.batch_size  # doctest: +SKIP
        >>> batchscope.save(report, "out")  # doctest: +SKIP

    A record and nothing more: writing it, its explanation and a notebook's display are the
    reports layer's (``batchscope.save``, ``batchscope.explanation``, ``batchscope.show``).
    """

    model: ModelInfo
    hardware: Ceilings | None
    batches: list[BatchResult]
    recommendation: Recommendation | None
    run: RunInfo
    stop: Stop | None = None
    partial: bool = False
    batch_response: dict[str, list[ResponsePoint]] = field(default_factory=dict)
    flags: list[Flag] = field(default_factory=list)
    estimates: list[Estimate] = field(default_factory=list)  # watch only; never measured
    prediction: StepPrediction | None = None
    distributed: DataParallel | None = None  # data-parallel sweeps
    serving: ServingSection | None = None  # decode models (CONTEXTS)
    allocator: AllocatorCheck | None = None  # CPU sweeps whose page faults were flagged
    sequence_grid: SequenceGrid | None = None  # models that set SEQ_LENS
    counters: CountersSection | None = None  # diagnose ncu: Nsight Compute's counters
    target: TargetSection | None = None  # diagnose --target-gpu: predicted on a named GPU
    uncounted: UncountedWork | None = None  # ops nobody counted took a share of a step
    # How far the run's own measurements carry its decisions (classifiers/evidence.py):
    # a sweep's and a watch's; None for what was not measured here (traces, predictions).
    evidence: Evidence | None = None

    def batch(self, batch_size: int) -> BatchResult | None:
        """The result of ``batch_size`` (None when it was not tried)."""
        return next((b for b in self.batches if b.batch_size == batch_size), None)
