"""What a server's users ask of one simulated (or real) run: throughput, TTFT, TPOT, end-to-
end latency at p50 and p99, and goodput under an SLO (requests per second that met it)."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

from batchscope.records.serving import ServingMetrics, SloTargets
from batchscope.serving.simulator import Served, Simulation

# A server whose requests finish at a lower rate than this share of the rate they arrive at
# is falling behind: its queue grows for as long as the stream lasts, so no latency target
# holds in steady state, whatever a finite run's percentiles say.
KEEP_UP_SHARE = 0.9


@dataclass(frozen=True)
class Slo:
    """Latency targets; None: no target on that measure (the what-if records them as
    :class:`~batchscope.records.serving.SloTargets`)."""

    ttft_s: float | None = None
    tpot_s: float | None = None

    @property
    def given(self) -> bool:
        return self.ttft_s is not None or self.tpot_s is not None

    def met_by(self, served: Served) -> bool:
        """One request's own latencies within the targets (goodput counts these)."""
        if served.finished_s is None:
            return False
        ttft, tpot = served.ttft_s, served.tpot_s
        return ((self.ttft_s is None or (ttft is not None and ttft <= self.ttft_s))
                and (self.tpot_s is None or tpot is None or tpot <= self.tpot_s))

    def describe(self) -> str:
        parts = []
        if self.ttft_s is not None:
            parts.append(f"p99 TTFT ≤ {self.ttft_s * 1e3:g} ms")
        if self.tpot_s is not None:
            parts.append(f"p99 TPOT ≤ {self.tpot_s * 1e3:g} ms")
        return " and ".join(parts)

    def targets(self) -> SloTargets:
        """The targets as report.json ``serving.what_if.slo`` holds them."""
        return SloTargets(ttft_s=self.ttft_s, tpot_s=self.tpot_s)


def percentile(values: Sequence[float], q: float) -> float | None:
    """The q-th percentile (0-100) with linear interpolation between ranks; None if empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = (len(xs) - 1) * q / 100
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def keeps_up(served: Sequence[Served]) -> bool | None:
    """Requests left (finished) at no less than :data:`KEEP_UP_SHARE` of the rate they
    arrived at, each rate over its own span. In a stable server both spans are about the
    same; in one loaded past its capacity the finishes run at its service rate and trail
    further behind with every request. None: too few requests to tell."""
    done = [s.finished_s for s in served if s.finished_s is not None]
    arrivals = [s.request.arrival_s for s in served]
    if len(done) < 2 or len(done) < len(served):
        return None if len(served) < 2 else False
    arrival_span, finish_span = max(arrivals) - min(arrivals), max(done) - min(done)
    if arrival_span <= 0:
        return None
    return finish_span <= arrival_span / KEEP_UP_SHARE


def summarize(served: Sequence[Served], slo: Slo | None = None,
              mean_batch: float | None = None) -> ServingMetrics:
    """Metrics over every request of a run. Throughput counts output tokens from the first
    arrival to the last finish; p99 of a measure is over the requests that have it. The SLO
    is met when every request completed, the server kept up (:func:`keeps_up`) and the p99s
    are within the targets."""
    done = [s for s in served if s.finished_s is not None]
    start = min((s.request.arrival_s for s in served), default=0.0)
    end = max((s.finished_s for s in served if s.finished_s is not None), default=start)
    duration = max(end - start, 0.0)
    tokens = sum(s.request.output_tokens for s in done)
    ttft = [s.ttft_s for s in done if s.ttft_s is not None]
    tpot = [s.tpot_s for s in done if s.tpot_s is not None]
    e2e = [s.e2e_s for s in done if s.e2e_s is not None]
    rejected = sum(1 for s in served if s.rejected)
    served_rate = len(done) / duration if duration > 0 else 0.0
    kept_up = keeps_up(served)
    slo = slo or Slo()
    met: bool | None = None
    goodput: float | None = None
    if slo.given:
        p99_ttft, p99_tpot = percentile(ttft, 99), percentile(tpot, 99)
        met = bool(done) and rejected == 0 and len(done) == len(served) \
            and kept_up is not False \
            and (slo.ttft_s is None or (p99_ttft is not None and p99_ttft <= slo.ttft_s)) \
            and (slo.tpot_s is None or p99_tpot is None or p99_tpot <= slo.tpot_s)
        good = sum(1 for s in done if slo.met_by(s))
        goodput = good / duration if duration > 0 else None
    return ServingMetrics(
        requests=len(served), completed=len(done), rejected=rejected, duration_s=duration,
        throughput_tokens_per_s=tokens / duration if duration > 0 else 0.0,
        throughput_requests_per_s=served_rate,
        ttft_p50_s=percentile(ttft, 50), ttft_p99_s=percentile(ttft, 99),
        tpot_p50_s=percentile(tpot, 50), tpot_p99_s=percentile(tpot, 99),
        e2e_p50_s=percentile(e2e, 50), e2e_p99_s=percentile(e2e, 99),
        mean_batch=mean_batch, goodput_requests_per_s=goodput, slo_met=met,
        keeps_up=kept_up)


def summarize_simulation(sim: Simulation, slo: Slo | None = None) -> ServingMetrics:
    """:func:`summarize` of a simulated run, with the share of stepped rows that generated
    nothing (a static batch's finished rows, held until its longest request is done)."""
    metrics = summarize(sim.served, slo, sim.mean_batch)
    generated = sum(s.request.output_tokens for s in sim.served if s.finished_s is not None)
    if sim.row_steps:
        metrics = replace(metrics, idle_slot_share=max(1 - generated / sim.row_steps, 0.0))
    return replace(metrics, preemptions=sim.preemptions)
