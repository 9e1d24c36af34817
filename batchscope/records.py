"""Typed records that flow one way: profiler -> classifiers -> reports.

Every stage hands the next one plain dataclasses with units in the field names. They are
built from and turned into JSON-safe dicts with :func:`dataclasses.asdict` and the
``from_dict`` constructors below, so a record can cross the worker pipe and land in
``report.json`` unchanged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

from batchscope.hardware.types import Ceilings


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
    # The op's non-tensor arguments in schema order, JSON-safe (ints, bools, lists of
    # ints), for the ops a kernel probe (profiler/probe.py) needs more than the shapes to
    # call again: ``convolution``'s [stride, padding, dilation, transposed, output_padding,
    # groups] (its bias is there when ``input_shapes`` has a third shape). None for others.
    call_args: list[Any] | None = None


@dataclass
class TimedOp:
    """One aten op event from the capture pass (torch.profiler), in execution order."""

    name: str
    input_shapes: list[list[int]]
    start_s: float  # CPU start, relative to the step start
    end_s: float  # CPU end, relative to the step start
    duration_s: float  # CPU time including children (or device time on a GPU)
    depth: int  # 0 for ops called directly from Python


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
    flags: list[str] = field(default_factory=list)
    # The roof's dtype when it is not ``dtype``: "tfloat32" for an fp32 matmul or
    # convolution that ran on TF32 tensor cores (allowed by torch, or seen in a trace's
    # kernel names).
    roof_dtype: str | None = None
    # On a GPU: the kernels this op launched, the longest first ({name, calls, time_s} per
    # step), from a recorded trace.
    kernels: list[dict[str, Any]] = field(default_factory=list)
    # The calls' non-tensor arguments (CountedOp.call_args), for a convolution's kernel
    # probe; None for the other ops.
    call_args: list[Any] | None = None


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
    # Wall time the timed steps spanned, and what ended them (timing.STOPPED_BY): "nvml_window"
    # when the stop rule was met earlier and the steps ran on to cover the NVML power window.
    measured_s: float | None = None
    stopped_by: str = ""
    # The first warm-up step at this batch size: for a torch.compile'd model, the compile
    # (or recompile) for the new shape plus one step.
    first_step_s: float | None = None


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
    no_sync_latency_s: float | None = None  # median step under DDP's no_sync(): no all-reduce
    peak_memory_bytes: int | None = None
    host: str = ""
    error: str = ""

    @property
    def communication_exposed_s(self) -> float | None:
        """What the gradient all-reduce adds to a step: the part backward did not hide."""
        if self.latency_s is None or self.no_sync_latency_s is None:
            return None
        return max(self.latency_s - self.no_sync_latency_s, 0.0)


@dataclass
class BatchResult:
    """Everything measured at one batch size."""

    batch_size: int
    status: Status
    latency_s: LatencyStats | None = None
    throughput_per_s: float | None = None
    peak_memory_bytes: int | None = None
    peak_memory_method: str = ""
    baseline_memory_bytes: int | None = None
    available_memory_bytes: int | None = None  # free on the device after this batch size
    worker_pid: int | None = None
    error: str = ""
    flags: list[str] = field(default_factory=list)
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
    nvml: dict[str, Any] | None = None  # NvmlWindow.to_dict() over the timed steps
    energy_per_unit_j: float | None = None  # J per token/image/sample, from nvml
    # Minor page faults per timed step on the CPU (memory mapped afresh and touched each step).
    page_faults_per_step: float | None = None
    # The share of the step those faults take at classifiers.allocator.PAGE_FAULT_COST_S each:
    # memory the allocator hands back to the OS and faults in again every step.
    page_fault_share: float | None = None
    trace_path: str = ""
    wall_s: float = 0.0  # wall time the tool spent on this batch size
    # What op times are: "cpu" (profiled CPU time; gaps are framework time) or "device"
    # (kernel time on a GPU; ``profiled_step_s`` is then the device's step and the time it
    # ran nothing is ``device_idle_s``).
    time_basis: str = "cpu"
    device_idle_s: float | None = None
    communication_overlapped_s: float | None = None  # NCCL time hidden behind other kernels
    # The two batch sizes this one's FLOPs and bytes were extrapolated from, op by op
    # (profiler/count_extrapolation.py); [] when its counting pass ran.
    counts_extrapolated_from: list[int] = field(default_factory=list)
    # Distributed sweeps (profiler/ranks.py): ``batch_size`` is per rank; every rank's own
    # figures, the step's exposed all-reduce time (rank 0's latency minus its latency under
    # DDP's no_sync()), and the gradient bytes all-reduced per step.
    world_size: int | None = None
    ranks: list[RankResult] = field(default_factory=list)
    communication_exposed_s: float | None = None
    allreduce_bytes_per_step: int | None = None

    @property
    def framework_s(self) -> float | None:
        """Profiled step time outside aten ops: Python, module calls, dispatch, the loader.

        None on a GPU (``time_basis == "device"``), where that time is the device's idle
        time instead (``device_idle_s``)."""
        if self.profiled_step_s is None or self.time_basis == "device":
            return None
        return max(self.profiled_step_s - (self.op_time_s or 0.0), 0.0)


def to_jsonable(obj: Any) -> Any:
    """Turn records (dataclasses, enums, nested containers) into JSON-safe values."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_jsonable(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, Enum):
        return obj.value
    if isinstance(obj, dict):
        return {str(k): to_jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [to_jsonable(v) for v in obj]
    return obj


def byte_split_from_dict(d: dict[str, Any] | None) -> ByteSplit | None:
    if d is None:
        return None
    return ByteSplit(int(d["weights"]), int(d["state"]), int(d["activations"]),
                     int(d.get("unsplit", 0)))


def op_stat_from_dict(d: dict[str, Any]) -> OpStat:
    d = dict(d)
    d["bytes"] = byte_split_from_dict(d["bytes"])
    d["bound"] = Bound(d["bound"])
    return OpStat(**d)


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


def grid_point_from_dict(d: dict[str, Any]) -> GridPoint:
    d = dict(d)
    d["status"] = Status(d["status"])
    if d.get("latency_s") is not None:
        d["latency_s"] = LatencyStats(**d["latency_s"])
    known = {f.name for f in dataclasses.fields(GridPoint)}
    return GridPoint(**{k: v for k, v in d.items() if k in known})


def batch_result_from_dict(d: dict[str, Any]) -> BatchResult:
    """Rebuild a :class:`BatchResult` from :func:`to_jsonable` output."""
    d = dict(d)
    d["status"] = Status(d["status"])
    if d.get("latency_s") is not None:
        d["latency_s"] = LatencyStats(**d["latency_s"])
    d["bytes"] = byte_split_from_dict(d.get("bytes"))
    if d.get("time_share") is not None:
        d["time_share"] = TimeShare(**d["time_share"])
    d["ops"] = [op_stat_from_dict(o) for o in d.get("ops", [])]
    d["ranks"] = [RankResult(**{**r, "status": Status(r["status"])}) for r in d.get("ranks", [])]
    known = {f.name for f in dataclasses.fields(BatchResult)}
    return BatchResult(**{k: v for k, v in d.items() if k in known})


# -- the whole run: what classifiers hand to reports --------------------------------------
SCHEMA = "batchscope.report/1"  # report.json's schema; bump it to rename a field


@dataclass
class Recommendation:
    """report.json ``recommendation`` (DESIGN.md)."""

    batch_size: int | None
    rule: str
    speedup_from_batching: float | None
    speedup_baseline_batch: int | None
    predicted_critical_batch: float | None  # the knee the roofline predicts (B* = t0 / c)
    measured_knee_batch: float | None
    measured_knee_within_sweep: bool
    # The explanation in plain words; :class:`Report` fills it from the report document
    # (:func:`batchscope.reports.narrative.explanation`), whatever is passed here.
    explanation: str
    # Where the layers that read weights or state turn compute-bound; None with
    # ``..._infinite`` True when they never do.
    predicted_compute_bound_batch: float | None = None
    predicted_compute_bound_infinite: bool = False
    near_best_share: float = 0.9  # the rule's share of the best throughput
    # The terms B* and the compute-bound batch came from (classifiers/critical_batch.py).
    prediction: dict[str, Any] = field(default_factory=dict)
    best_batch_size: int | None = None
    best_throughput_per_s: float | None = None
    excluded: dict[int, str] = field(default_factory=dict)
    # The best throughput came at the largest batch size the sweep was allowed to try: a
    # larger --max-batch may find a better one.
    still_rising_at_cap: bool = False
    # The weights read per step changed between batch sizes: the work depends on the inputs
    # (an early exit, routing), so batch-response figures do not describe batching alone.
    work_varies_with_inputs: bool = False
    # What the rule picks when no step pays its page faults (the allocator keeping its
    # buffers): measured side by side (Report.allocator) where the sweep re-timed, else
    # estimated; None when no batch size faulted enough to be flagged.
    batch_size_without_page_faults: int | None = None
    # --global-batch in one process (training): the accumulation steps at this batch size
    # that reach it (classifiers.analyze.accumulation); data-parallel runs: ``distributed``.
    accumulation: dict[str, Any] | None = None


@dataclass
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


@dataclass
class PredictedPick:
    """report.json ``prediction.pick``: what the recommendation's rule would pick over the
    measured batch sizes and the unmeasured ones as the step-time model predicts them
    (classifiers/recommend.predicted_pick), where that is not the measured pick. Each
    unmeasured size counts at the low end of its band (its predicted step ``margin``
    longer): a prediction, labelled as one, never the recommendation itself."""

    batch_size: int  # the pick if the predictions hold
    throughput_per_s: float  # its throughput: predicted (central) unless ``measured``
    measured: bool  # whether ``batch_size`` was measured (a predicted best moved the pick)
    best_batch_size: int  # the unmeasured size that moved the pick: the fastest predicted
    best_throughput_per_s: float  # its predicted throughput (central)
    margin: float  # the band: the forecasts' largest miss, at least step_model.MIN_MARGIN
    instead_of: int  # the measured pick
    instead_of_throughput_per_s: float


@dataclass
class StepPrediction:
    """report.json ``prediction``: the step-time model (classifiers/step_model.py), each
    measured batch size forecast from the ones before it, and the unmeasured ones predicted."""

    fitted_on: list[int]  # the model that predicts the unmeasured sizes
    points: list[CurvePoint]
    knee_batch: float | None  # the knee of the model fitted on every measured size
    max_abs_error: float | None  # largest |error| of the forecasts; None: none measured
    assumptions: list[str] = field(default_factory=list)
    # Relative change of the predicted latency at the largest batch size if each compute
    # roof were its median repeat rather than its best: how much the ceiling's spread moves
    # the prediction. None where the ceilings record no spread.
    ceiling_sensitivity: float | None = None
    # The kernel probes the model used: seconds of one call by op and shapes (e.g.
    # 'addmm[[2304],[64,768],[768,2304]]@float32'), timed alone in the worker.
    probes_s: dict[str, float] = field(default_factory=dict)
    # Where unmeasured sizes, as predicted, would move the pick: the pick they give.
    pick: PredictedPick | None = None


@dataclass
class Report:
    """One diagnosis. ``to_dict()`` is the report.json document.

    Example:
        >>> report = batchscope.diagnose_file("samples/mlp.py")  # doctest: +SKIP
        >>> report.recommendation.batch_size  # doctest: +SKIP
    """

    model: dict[str, Any]
    hardware: Ceilings | None
    batches: list[BatchResult]
    recommendation: Recommendation | None
    run: dict[str, Any]
    batch_response: dict[str, list[dict[str, float]]] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)
    partial: bool = False
    stop_reason: str = ""
    # Labelled estimates of larger batch sizes (``watch`` only); never measurements.
    estimates: list[Any] = field(default_factory=list)
    prediction: StepPrediction | None = None
    # Data-parallel sweeps: classifiers.data_parallel.data_parallel_summary; None otherwise.
    distributed: dict[str, Any] | None = None
    # Decode models (CONTEXTS): the context grid and the serving what-if; None otherwise.
    serving: dict[str, Any] | None = None
    # CPU sweeps whose page faults were flagged: both allocators side by side
    # (classifiers.allocator.allocator_summary); None otherwise.
    allocator: dict[str, Any] | None = None
    # Models that set SEQ_LENS: batch size × sequence length
    # (classifiers.sequence_grid.sequence_grid_section); None otherwise.
    sequence_grid: dict[str, Any] | None = None

    def __post_init__(self) -> None:
        self.explain()

    def explain(self) -> None:
        """Fill ``recommendation.explanation`` from this report's document.

        The prose lives in the reports layer (one module for report.json, the HTML, the
        Markdown and the terminal), imported here lazily as :meth:`_repr_html_` does, so the
        classifiers that build a Report produce numbers only. Called on construction; call it
        again after changing a report by hand.
        """
        if self.recommendation is None:
            return
        from batchscope.reports.narrative import explanation

        self.recommendation.explanation = explanation(self.to_dict())

    def to_dict(self) -> dict[str, Any]:
        hardware = self.hardware.to_dict() if self.hardware else None
        return {
            "schema": SCHEMA,
            "partial": self.partial,
            "stop_reason": self.stop_reason,
            "model": to_jsonable(self.model),
            "hardware": hardware,
            "run": to_jsonable(self.run),
            "batches": to_jsonable(self.batches),
            "recommendation": to_jsonable(self.recommendation),
            "batch_response": to_jsonable(self.batch_response),
            "flags": list(self.flags),
            "estimates": to_jsonable(self.estimates),
            "prediction": to_jsonable(self.prediction),
            "distributed": to_jsonable(self.distributed),
            "serving": to_jsonable(self.serving),
            "allocator": to_jsonable(self.allocator),
            "sequence_grid": to_jsonable(self.sequence_grid),
        }

    def _repr_html_(self) -> str:
        """Notebook display: the full report.html in a sandboxed iframe."""
        import html

        from batchscope.reports.html import render_html

        page = render_html(self.to_dict())
        return (f'<iframe srcdoc="{html.escape(page, quote=True)}" sandbox="allow-scripts" '
                'style="width: 100%; height: 900px; border: 0"></iframe>')

    def save(self, out_dir: str) -> dict[str, str]:
        """Write report.json (and the other formats that exist) into ``out_dir``."""
        from batchscope.reports import write_all

        return write_all(self, out_dir)
