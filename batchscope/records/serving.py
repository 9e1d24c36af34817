"""report.json ``serving``: the context grid a decode sweep timed and the serving what-if
(static against continuous batching) simulated from it (``serving/``)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from enum import Enum

from batchscope.records.engine import EngineCalibration, PrefillFit
from batchscope.records.measurement import GridPoint
from batchscope.records.policy import Policy as Policy  # re-exported: its home


class StepTimeSource(str, Enum):
    """What the decode step time over context was fitted from (serving/step_time.py)."""

    CONTEXT_GRID = "context grid"
    PER_OP_SPLIT = "per-op split"
    NONE = "none"  # context-independent: the report gives no way to tell
    # --paged on a --target-gpu report: each row's own KV cache read once a step, at the
    # GPU's bandwidth and the GEMMs' memory-side efficiency (a paged-attention kernel)
    PAGED_KV = "paged KV read"


class KvBytesSource(str, Enum):
    """Where the KV cache's bytes per token came from."""

    NONE = ""
    GRID_INPUTS = "grid_inputs"  # make_inputs' tensors at two contexts of the grid
    STATE_BYTES = "state_bytes"  # the ops' state bytes at the sweep's context


class KvMemorySource(str, Enum):
    """Where the KV cache's memory budget came from (the reports say it in words)."""

    NO_KV_SIZE = "no_kv_size"  # the report does not say how large the KV cache is
    NO_FREE_MEMORY = "no_free_memory"  # ... nor how much memory was free
    OPTION = "option"  # --kv-memory
    FREE_MEMORY = "free_memory"  # a share of what the sweep found free beside the weights


@dataclass(frozen=True)
class CurveTerm:
    """The fitted decode step at one batch size: ``shared_s + per_token_s × context``."""

    batch_size: int
    shared_s: float
    per_token_s: float


@dataclass(frozen=True)
class GridFit:
    """One context-grid point: measured against the fitted step (and the per-op split's)."""

    batch_size: int
    context: int
    measured_s: float
    predicted_s: float
    error: float  # predicted / measured - 1
    split_predicted_s: float | None = None
    split_error: float | None = None


@dataclass(frozen=True)
class StepTimeFit:
    """The step-time model the what-if simulates with (serving/step_time.StepTimeModel)."""

    base_context: int
    source: StepTimeSource
    kv_bytes_per_token: float | None
    kv_bytes_source: KvBytesSource
    curve: list[CurveTerm]
    points: list[GridFit] = field(default_factory=list)
    worst_error: float | None = None


class StreamKind(str, Enum):
    """Where the simulated requests came from."""

    POISSON = "poisson"  # seeded Poisson arrivals, lengths drawn from the token ranges
    TRACE = "trace"  # a request trace (--trace), its arrivals rescaled to each rate


@dataclass(frozen=True)
class Stream:
    """The requests simulated."""

    kind: StreamKind
    requests: int
    prompt_tokens: str | None  # "LOW:HIGH" of a Poisson stream; None for a trace
    output_tokens: str | None
    mean_prompt_tokens: float
    mean_output_tokens: float
    trace_rate_per_s: float | None = None
    seed: int = 0


@dataclass(frozen=True)
class SloTargets:
    """Latency targets on a request's p99 (``diagnose serve --slo-*-ms``); None: no target on
    that measure."""

    ttft_s: float | None = None
    tpot_s: float | None = None


@dataclass(frozen=True)
class ServingMetrics:
    """One run of one policy at one batch cap and one request rate, measured or simulated
    (serving/metrics.summarize)."""

    requests: int
    completed: int
    rejected: int
    duration_s: float
    throughput_tokens_per_s: float
    throughput_requests_per_s: float
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    tpot_p50_s: float | None
    tpot_p99_s: float | None
    e2e_p50_s: float | None
    e2e_p99_s: float | None
    mean_batch: float | None
    goodput_requests_per_s: float | None
    slo_met: bool | None
    keeps_up: bool | None  # requests finished at KEEP_UP_SHARE of the rate they arrived
    idle_slot_share: float | None = None  # rows stepped that generated nothing (static's waste)
    preemptions: int = 0  # rows preempted for KV room (--paged continuous batching)

    def row(self, policy: Policy, cap: int, rate_per_s: float) -> ServingRun:
        """This run as one row of the what-if (report.json ``serving.what_if.runs``)."""
        return ServingRun(policy=policy, cap=cap, rate_per_s=rate_per_s,
                          **{f.name: getattr(self, f.name) for f in fields(ServingMetrics)})


@dataclass(frozen=True, kw_only=True)
class ServingRun(ServingMetrics):
    """One simulation: one policy at one batch cap and one request rate, and its metrics."""

    policy: Policy
    cap: int
    rate_per_s: float
    # A --target-gpu prediction's band: the same run on its low and its high steps (the KV
    # read under --paged and the prefill at their points); None for a sweep.
    throughput_band_tokens_per_s: tuple[float, float] | None = None
    tpot_p50_band_s: tuple[float, float] | None = None


@dataclass(frozen=True)
class SloRate:
    """The highest offered rate a policy and cap serve within the SLO (None: not even the
    lowest tried)."""

    policy: Policy
    cap: int
    max_rate_per_s: float | None


@dataclass(frozen=True)
class ServingPick:
    """The policy and cap to serve with (None: no cap meets the SLO)."""

    policy: Policy | None
    cap: int | None
    max_rate_per_s: float | None = None


@dataclass(frozen=True)
class WhatIf:
    """Both policies at every cap and rate (serving/whatif.py); ``diagnose serve`` renders it."""

    target: str
    unit: str
    step_time: StepTimeFit
    stream: Stream
    kv_capacity_tokens: int | None
    kv_memory_bytes: int | None
    kv_memory_source: KvMemorySource
    kv_share_of_free: float  # the share of free memory FREE_MEMORY gives the KV cache
    prefill_s_per_token: float
    slo: SloTargets
    saturated_rate_per_s: float
    rates_per_s: list[float]
    caps: list[int]
    runs: list[ServingRun]
    best: dict[Policy, ServingRun | None]
    max_rate_within_slo: list[SloRate]
    recommendation: ServingPick
    # The prefill charged at admission, and what it was measured on (None: a report from
    # before it was recorded; prefill_s_per_token then says what was charged).
    prefill: PrefillFit | None = None
    # diagnose serve --engine: the real engine's own cost per step, measured (None: the
    # model's forward step alone).
    engine: EngineCalibration | None = None
    # --paged: a paged-attention engine's steps (each row reads its own KV cache)
    paged: bool = False
    # The GPU the steps were predicted on (a --target-gpu report), None: timed here
    predicted_on: str | None = None


@dataclass(frozen=True)
class ServingSection:
    """report.json ``serving`` of a decode model (its file sets CONTEXTS)."""

    contexts: list[int]
    base_context: int | None
    context_grid: list[GridPoint] = field(default_factory=list)
    what_if: WhatIf | None = None
    # Why no what-if could be simulated from this report (one sentence), where none was.
    what_if_error: str | None = None
