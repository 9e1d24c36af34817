"""What is measured at one batch size: the records the worker sends and the classifiers read.

Plain dataclasses with units in the field names. They cross the worker pipe as themselves,
pickled inside the typed messages of :mod:`batchscope.profiler.protocol`, and land in
report.json through :func:`batchscope.records.codec.encode` (read back by
:func:`batchscope.records.codec.decode_report`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import Enum

from batchscope.engine.policies import StoppedBy as StoppedBy
from batchscope.hardware.nvml_window import NvmlWindow
from batchscope.records.flags import Flag
from batchscope.records.interval import Interval

# StoppedBy (LatencyStats.stopped_by: what ended a timing pass) is the engine's stop
# policies' word, so it lives with them (engine/policies.py); records re-exports it as is.


class Status(str, Enum):
    """How one batch size ended."""

    OK = "ok"
    OOM = "oom"
    KILLED = "killed"
    TIMEOUT = "timeout"
    MODEL_ERROR = "model_error"
    DEVICE_ERROR = "device_error"
    INTERRUPTED = "interrupted"
    SKIPPED = "skipped"
    RANK_FAILED = "rank_failed"  # distributed: a rank raised, died or hung; all ranks stopped


class Bound(str, Enum):
    """What limits an op (DESIGN.md, Definitions)."""

    MEMORY = "memory"
    COMPUTE = "compute"
    OVERHEAD = "overhead"
    UNCOUNTED = "uncounted"
    # Device work that is neither: NCCL collectives, and copies between host and device.
    # Only a GPU trace tells them apart (an op whose kernels are all of that kind).
    COMMUNICATION = "communication"
    TRANSFER = "transfer"


class TimeBasis(str, Enum):
    """What op times are: profiled CPU time (the gaps are framework time), or kernel time on
    a GPU (``profiled_step_s`` is then the device's step and the gaps are its idle time)."""

    CPU = "cpu"
    DEVICE = "device"


class PeakMemoryMethod(str, Enum):
    """How ``peak_memory_bytes`` was measured (profiler/memory.py); the reports say in words
    what each one counts."""

    NONE = ""
    CUDA_MAX_ALLOCATED = "cuda_max_memory_allocated"  # torch.cuda.max_memory_allocated
    WORKER_PEAK_RSS = "worker_peak_rss"  # VmHWM, reset per batch size
    LIFETIME_PEAK_RSS = "lifetime_peak_rss"  # VmHWM, not reset (clear_refs not allowed)
    LIFETIME_MAXRSS = "lifetime_maxrss"  # getrusage's ru_maxrss


class ByteKind(str, Enum):
    """Where the bytes an op touches come from."""

    WEIGHTS = "weights"
    STATE = "state"
    ACTIVATIONS = "activations"
    UNSPLIT = "unsplit"


# BatchResult.unmatched_ops_s's entry for the kernels inductor fused inside a torch.compile'd
# graph: time the CPU profiler records only as the graph call's own (profiler/capture.py).
FUSED_KERNELS = "fused kernels of torch.compile'd graphs"
# ...and each fused kernel the profiler saw by name (inductor's kernel profiling on the CPU,
# its names listing the aten ops it fused): "fused kernel: cpp_fused_gelu_native_layer_norm_0".
FUSED_KERNEL_PREFIX = "fused kernel: "

@dataclass
class ByteSplit:
    """Bytes of distinct tensors an op touches, split by where they come from."""

    weights: int = 0
    state: int = 0
    activations: int = 0
    # Bytes whose origin is not known: a recorded trace gives shapes, not which tensors are
    # weights, so its bytes are counted whole and left unsplit.
    unsplit: int = 0

    @property
    def total(self) -> int:
        return self.weights + self.state + self.activations + self.unsplit

    def __add__(self, other: ByteSplit) -> ByteSplit:
        return ByteSplit(
            self.weights + other.weights,
            self.state + other.state,
            self.activations + other.activations,
            self.unsplit + other.unsplit,
        )

    def scaled(self, factor: float) -> ByteSplit:
        return ByteSplit(
            round(self.weights * factor),
            round(self.state * factor),
            round(self.activations * factor),
            round(self.unsplit * factor),
        )


# A non-tensor argument of a recorded call (CountedOp.call_args), as JSON holds it: a list
# holds what the counting pass records (counting._plain), e.g. batch norm backward's
# output_mask [true, true, true], which a list of ints refused on reading report.json back.
ArgScalar = int | float | bool | str | None
ArgValue = int | float | bool | str | list[ArgScalar] | None


@dataclass
class CountedOp:
    """One aten op call seen by the counting pass, in execution order.

    ``flops`` is None when no formula covers the op (it is then *uncounted*, never 0).
    """

    name: str  # aten overload packet name without namespace, e.g. "addmm"
    input_shapes: list[list[int]]  # shapes of the tensor arguments, in order
    dtype: str  # dtype of the first floating-point tensor involved, e.g. "float32"
    flops: int | None
    bytes: ByteSplit
    module: str = ""  # nn.Module path the op ran under, "" at top level
    # The op's non-tensor arguments in schema order, JSON-safe (ints, floats, bools,
    # strings, lists of ints), for the ops a kernel probe (profiler/probe.py) needs more
    # than the shapes to call again: ``convolution``'s [stride, padding, dilation,
    # transposed, output_padding, groups] (its bias is there when ``input_shapes`` has a
    # third shape). None for others.
    call_args: list[ArgValue] | None = None


@dataclass
class TimedOp:
    """One aten op event from the capture pass (torch.profiler), in execution order."""

    name: str
    input_shapes: list[list[int]]
    start_s: float  # CPU start, relative to the step start
    end_s: float  # CPU end, relative to the step start
    duration_s: float  # CPU time including children (or device time on a GPU)
    depth: int  # 0 for ops called directly from Python


@dataclass(frozen=True)
class KernelStat:
    """One GPU kernel an op launched: calls and time per step."""

    name: str
    calls: float
    time_s: float


@dataclass
class OpStat:
    """One op group at one batch size: all calls of one op name on one set of shapes."""

    op_id: str  # stable across batch sizes: "<module path>:<name>#<call under that path>"
    name: str
    input_shapes: list[list[int]]
    dtype: str
    module: str
    calls: int
    time_s: float  # profiled time per step, all calls together
    flops: int | None  # per step, all calls together
    bytes: ByteSplit  # per step, all calls together
    intensity: float | None = None  # FLOP per byte
    bound: Bound = Bound.UNCOUNTED
    efficiency: float | None = None  # roofline time / measured time
    roof_time_s: float | None = None
    flags: list[Flag] = field(default_factory=list)
    # The roof's dtype when it is not ``dtype``: "tfloat32" for an fp32 matmul or
    # convolution that ran on TF32 tensor cores (allowed by torch, or seen in a trace's
    # kernel names).
    roof_dtype: str | None = None
    # On a GPU: the kernels this op launched, the longest first, from a recorded trace.
    kernels: list[KernelStat] = field(default_factory=list)
    # The calls' non-tensor arguments (CountedOp.call_args), for a convolution's kernel
    # probe; None for the other ops.
    call_args: list[ArgValue] | None = None


@dataclass
class LatencyStats:
    """Step latency over the timing pass, in seconds.

    Each sample is the mean step of a block of ``block_steps`` steps timed together (1: each
    step timed alone); the quantiles are over those samples and ``n`` counts steps.
    """

    median: float
    p25: float
    p75: float
    n: int
    min: float = 0.0
    max: float = 0.0
    block_steps: int = 1
    # Wall time the timed steps spanned, and what ended them.
    measured_s: float | None = None
    stopped_by: StoppedBy = StoppedBy.NONE
    # The first warm-up step at this batch size: for a torch.compile'd model, the compile
    # (or recompile) for the new shape plus one step.
    first_step_s: float | None = None
    # The median's distribution-free 95% interval from the samples' order statistics
    # (stats.median_interval): the noise inside this timing pass alone. None: read from a
    # report that predates it.
    median_low: float | None = None
    median_high: float | None = None


@dataclass
class TimeShare:
    """Shares of the profiled step time, summing to 1.

    On the CPU the time between ops is ``framework`` (Python, module calls, dispatch). On a
    GPU, where op times are kernel times, the time the device runs nothing is ``idle``
    (waiting on the host: launches, Python, synchronisation): a launch-bound step has a
    large idle share, and ``framework`` is 0.
    """

    memory: float = 0.0
    compute: float = 0.0
    overhead: float = 0.0
    uncounted: float = 0.0
    framework: float = 0.0  # CPU: time between ops: Python, module calls, dispatch
    communication: float = 0.0  # GPU: NCCL time not hidden behind other kernels
    transfer: float = 0.0  # GPU: copies between host and device
    idle: float = 0.0  # GPU: the device waiting on the host


@dataclass
class RankResult:
    """One rank's own figures at one per-rank batch size (distributed sweeps)."""

    rank: int
    status: Status
    latency_s: float | None = None  # median step, gradient sync included
    # The median step under DDP's no_sync() (no all-reduce): no longer filled, as the
    # communication hook measures the all-reduce in the timed steps themselves
    # (docs/distributed.md); kept so reports written before the hook still load.
    no_sync_latency_s: float | None = None
    peak_memory_bytes: int | None = None
    host: str = ""
    error: str = ""


@dataclass(frozen=True)
class BatchResult:
    """Everything measured at one batch size."""

    batch_size: int
    status: Status
    latency_s: LatencyStats | None = None
    throughput_per_s: float | None = None
    # 95% intervals of the median step and the throughput: the timing pass's own interval
    # widened by the drift the run showed (classifiers/uncertainty.py); what every decision
    # between batch sizes reads.
    latency_interval_s: Interval | None = None
    throughput_interval_per_s: Interval | None = None
    peak_memory_bytes: int | None = None
    peak_memory_method: PeakMemoryMethod = PeakMemoryMethod.NONE
    baseline_memory_bytes: int | None = None
    available_memory_bytes: int | None = None  # free on the device after this batch size
    worker_pid: int | None = None
    error: str = ""
    flags: list[Flag] = field(default_factory=list)
    profiled_step_s: float | None = None
    op_time_s: float | None = None  # profiled time inside matched aten ops per step
    coverage: float | None = None  # share of op time attributed to counted ops
    flops: int | None = None  # counted FLOPs per step
    bytes: ByteSplit | None = None  # counted bytes per step
    time_share: TimeShare | None = None
    # The step time the roofline predicts: per counted op max(its roof, calls x the per-op
    # floor), summed. Ops without a formula and the time between ops are not in it.
    predicted_step_s: float | None = None
    ops: list[OpStat] = field(default_factory=list)
    unmatched_ops_s: dict[str, float] = field(default_factory=dict)  # profiled, not counted
    nvml: NvmlWindow | None = None  # what NVML saw over the timed steps
    energy_per_unit_j: float | None = None  # J per token/image/sample, from nvml
    # Minor page faults per timed step on the CPU (memory mapped afresh and touched each step).
    page_faults_per_step: float | None = None
    # The share of the step those faults take at page_faults.PAGE_FAULT_COST_S each:
    # memory the allocator hands back to the OS and faults in again every step.
    page_fault_share: float | None = None
    trace_path: str = ""
    wall_s: float = 0.0  # wall time the tool spent on this batch size
    time_basis: TimeBasis = TimeBasis.CPU
    device_idle_s: float | None = None
    communication_overlapped_s: float | None = None  # NCCL time hidden behind other kernels
    # The two batch sizes this one's FLOPs and bytes were extrapolated from, op by op
    # (profiler/count_extrapolation.py); [] when its counting pass ran.
    counts_extrapolated_from: list[int] = field(default_factory=list)
    # Distributed sweeps (profiler/ranks.py): ``batch_size`` is per rank; every rank's own
    # figures, the step's exposed all-reduce time (the median over rank 0's timed steps of
    # the samples below), and the gradient bytes all-reduced per step.
    world_size: int | None = None
    ranks: list[RankResult] = field(default_factory=list)
    communication_exposed_s: float | None = None
    allreduce_bytes_per_step: int | None = None
    # Per timed step on rank 0, from DDP's communication hook: the all-reduce's exposed time
    # (its last completion past the last bucket's hook call), the time any bucket's
    # all-reduce was in flight, and the step itself; [] when not measured (a single process,
    # a file's DDP with a hook of its own, a report that predates them). The intervals come
    # from these (classifiers/data_parallel.communication_figures).
    communication_exposed_samples_s: list[float] = field(default_factory=list)
    communication_in_flight_samples_s: list[float] = field(default_factory=list)
    communication_step_samples_s: list[float] = field(default_factory=list)

    @property
    def framework_s(self) -> float | None:
        """Profiled step time outside aten ops: Python, module calls, dispatch, the loader.

        None on a GPU (``time_basis == "device"``), where that time is the device's idle
        time instead (``device_idle_s``)."""
        if self.profiled_step_s is None or self.time_basis == TimeBasis.DEVICE:
            return None
        return max(self.profiled_step_s - (self.op_time_s or 0.0), 0.0)


@dataclass
class GridPoint:
    """One step of the second axis's grid: a decode model timed at a context other than the
    sweep's (``report.json`` ``serving.context_grid``, for the serving what-if), or a model
    timed at another sequence length (``sequence_grid.points``)."""

    batch_size: int
    context: int | None  # CONTEXTS; None on a sequence-length grid
    status: Status
    latency_s: LatencyStats | None = None
    input_bytes: int | None = None  # every tensor make_inputs returned: the KV cache's size
    error: str = ""
    seq_len: int | None = None  # SEQ_LENS
    units_per_row: int | None = None  # at this length (UNITS_PER_ROW = "seq_len": seq_len)
    throughput_per_s: float | None = None  # units a second
    peak_memory_bytes: int | None = None
