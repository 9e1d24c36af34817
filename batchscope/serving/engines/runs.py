"""What a real engine's run measured: the typed records between an engine's driver and the
calibration that fits its cost (:mod:`batchscope.serving.engine_cost`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from batchscope.records.engine import Engine, PrefillPoint
from batchscope.records.policy import Policy
from batchscope.serving.requests import Request


@dataclass(frozen=True)
class ServedTiming:
    """One request as the real engine served it; times in seconds from the stream's start."""

    request: Request
    finished_s: float
    output_tokens: int  # generated for it (its own output_tokens, unless the engine stopped)


@dataclass(frozen=True)
class ForwardTiming:
    """One forward call of the model inside the engine: its wall time and what it held."""

    duration_s: float
    rows: int  # sequences in the call (a static batch's finished rows included)
    query_tokens: int  # tokens it computed: ``rows`` in a decode step, more with prefill
    kv_tokens: int  # KV positions its attention read, all rows (padded ones included)

    @property
    def decode(self) -> bool:
        """One new token per row: a decode step, no prompt in it."""
        return self.query_tokens == self.rows


@dataclass(frozen=True)
class EngineRun:
    """One real run of the engine on a stream under one policy and cap."""

    policy: Policy
    cap: int
    served: list[ServedTiming]
    forward_calls: int
    forward_s: float
    startup_s: float = 0.0  # the engine's set-up before its first request (continuous)
    # Every forward call, in order (empty in a record from before they were kept).
    forwards: list[ForwardTiming] = field(default_factory=list)

    @property
    def output_tokens(self) -> int:
        return sum(s.output_tokens for s in self.served)

    @property
    def span_s(self) -> float:
        """First arrival to last finish."""
        first = min(s.request.arrival_s for s in self.served)
        return max(s.finished_s for s in self.served) - first

    @property
    def tokens_per_s(self) -> float:
        return self.output_tokens / self.span_s


@dataclass(frozen=True)
class EngineMeasurement:
    """Everything ``diagnose serve --engine`` measured: each calibration run with the requests
    it served, and the model's prefill at the stream's prompt lengths."""

    engine: Engine
    engine_version: str
    runs: list[EngineRun]
    prefill: list[PrefillPoint]
    max_output_tokens: int
    repeats: int
    wall_s: float

