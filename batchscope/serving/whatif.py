"""The serving what-if behind ``diagnose serve``: both policies at every batch cap and
request rate, the highest rate each can serve within an SLO, and the pick.

Numbers only: :mod:`batchscope.reports.serving_render` says what they mean.

Example:
    >>> result = what_if(load_report("report.json"), WhatIfOptions(rates_per_s=[1, 2]))
    ... # doctest: +SKIP
    >>> result.recommendation.policy, result.recommendation.cap  # doctest: +SKIP
    (<Policy.CONTINUOUS: 'continuous'>, 8)
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from batchscope.errors import UsageError
from batchscope.records import Report
from batchscope.records.codec import to_builtins
from batchscope.records.engine import EngineCalibration, PrefillFit, PrefillPoint, PrefillSource
from batchscope.records.report import Mode
from batchscope.records.serving import (
    KvMemorySource,
    Policy,
    ServingMetrics,
    ServingPick,
    ServingRun,
    SloRate,
    Stream,
    StreamKind,
    WhatIf,
)
from batchscope.serving.engine_cost import fit_engine, fit_prefill, with_engine
from batchscope.serving.engines.runs import EngineMeasurement
from batchscope.serving.metrics import Slo, summarize_simulation
from batchscope.serving.requests import (
    Request,
    TokenRange,
    check_rate,
    poisson_stream,
    scaled_trace,
    trace_rate_per_s,
)
from batchscope.serving.simulator import simulate
from batchscope.serving.step_time import Band, StepTimeModel, fit_step_time

DEFAULT_REQUESTS = 500
DEFAULT_OUTPUT = TokenRange(16, 256)
# Offered loads tried by default, as fractions of the best saturated request rate: from a
# lightly loaded server to one past its capacity, where the queue grows without bound.
DEFAULT_LOADS = (0.1, 0.25, 0.5, 0.75, 0.9, 1.1)
# Without --kv-memory the KV cache may take this share of what the sweep saw free beside the
# weights (the rest: activations, the allocator's slack).
KV_SHARE_OF_FREE = 0.9
# Bisection steps for the highest rate within the SLO: a bracket of 2x narrowed 2^-8.
SLO_SEARCH_STEPS = 8
# The lowest rate the SLO search tries, as a fraction of the saturated rate.
SLO_SEARCH_FLOOR = 1 / 64
# The SLO search stops doubling past this many requests per second: met there, met anywhere.
SLO_SEARCH_CEILING = 1e6
MAX_REQUESTS = 100_000
# A server taking more requests per second than this is not one a CPU or GPU step time gives.
MAX_RATE_PER_S = 1e9
# One policy within this factor of the other's throughput is "about the same" (the pick's
# sentence says so: reports/flag_text.serving_pick_text); static batching is picked over
# continuous only beyond it, and beyond the engine's own measured noise.
SAME_THROUGHPUT = 1.05
# Caps (or SLO rates) within this share of the best count as tied: the fewer rows wins.
TIE_SHARE = 0.99
# What a decode step's rows yield: tokens, or "sample", the contract's UNIT where a file sets
# none (its report may still be a decode model's; --context then says what its steps held).
DECODE_UNITS = frozenset({"token", "tokens", "sample", ""})


@dataclass
class WhatIfOptions:
    """What ``diagnose serve`` asks of the what-if (its defaults are the command's)."""

    rates_per_s: list[float] | None = None
    requests: int = DEFAULT_REQUESTS
    prompt_tokens: TokenRange | None = None  # None: the sweep's context
    output_tokens: TokenRange = DEFAULT_OUTPUT
    trace: list[Request] | None = None
    seed: int = 0
    caps: list[int] | None = None
    kv_memory_bytes: int | None = None
    slo: Slo = field(default_factory=Slo)
    prefill_s_per_token: float = 0.0
    context: int | None = None  # the sweep's context when the report does not record it
    loads: tuple[float, ...] = DEFAULT_LOADS  # default rates, as shares of saturation
    # The model's prefill timed at the stream's prompt lengths (serving/engines/calibrate.py):
    # None, not looked for; empty, no model here to time it on. --prefill-ms-per-token, where
    # given, is charged instead.
    prefill_points: list[PrefillPoint] | None = None
    # What prefill_points are: timed on this machine, or predicted on a --target-gpu's GPU.
    prefill_source: PrefillSource = PrefillSource.MODEL
    # diagnose serve --engine: the real engine's calibration runs, whose cost is added.
    engine: EngineMeasurement | None = None
    # --paged (a --target-gpu prediction): a paged-attention engine such as vLLM or SGLang,
    # each row reading its own KV cache (serving/step_time.paged_per_token_s).
    paged: bool = False

    def validate(self) -> None:
        """Raises:
            UsageError: one sentence naming the option that is out of range.
        """
        for rate in self.rates_per_s or []:
            check_rate(rate)
        if not 1 <= self.requests <= MAX_REQUESTS:
            raise UsageError(f"--requests must be from 1 to {MAX_REQUESTS:,}, "
                             f"not {self.requests}.")
        for cap in self.caps or []:
            if cap < 1:
                raise UsageError(f"--caps must be positive batch sizes, not {cap}.")
        for name, value in (("--slo-ttft-ms", self.slo.ttft_s), ("--slo-tpot-ms", self.slo.tpot_s)):
            if value is not None and not (value > 0 and value < float("inf")):
                raise UsageError(f"{name} must be a positive number of milliseconds.")
        if not 0 <= self.prefill_s_per_token < float("inf"):
            raise UsageError("--prefill-ms-per-token must be 0 or more.")
        if self.kv_memory_bytes is not None and self.kv_memory_bytes <= 0:
            raise UsageError("--kv-memory must be a positive size such as 8GiB.")


class _Runner:
    """Runs one policy at one cap and rate on the fitted step times."""

    def __init__(self, model: StepTimeModel, options: WhatIfOptions, kv_tokens: int | None,
                 prompt: TokenRange, prefill: PrefillFit,
                 engine: EngineCalibration | None) -> None:
        self.model, self.options, self.kv_tokens, self.prompt = model, options, kv_tokens, prompt
        # Every simulation of one what-if asks for the same (rows, context) steps again.
        self.step_s = {policy: lru_cache(maxsize=None)(
            with_engine(model.step_s, engine.cost(policy) if engine is not None else None))
            for policy in Policy}
        self.prefill = prefill.prefill_s if prefill.charged else None

    def stream(self, rate_per_s: float) -> list[Request]:
        o = self.options
        if o.trace is not None:
            return scaled_trace(o.trace, rate_per_s)
        return poisson_stream(rate_per_s, o.requests, self.prompt, o.output_tokens, o.seed)

    def run(self, policy: Policy, cap: int, rate_per_s: float) -> ServingMetrics:
        try:
            sim = simulate(self.stream(rate_per_s), policy, cap, self.step_s[policy],
                           self.kv_tokens, self.prefill, self.options.paged)
        except ValueError as exc:  # a step time out of range: the report's numbers are not
            raise UsageError(f"the report's step times cannot be simulated: {exc}.") from None
        return summarize_simulation(sim, self.options.slo)

    def max_rate_within_slo(self, policy: Policy, cap: int, high: float) -> float | None:
        """The highest offered rate whose run meets the SLO (bisection; None: not even at
        the lowest rate tried)."""
        low = high * SLO_SEARCH_FLOOR
        if not self.run(policy, cap, low).slo_met:
            return None
        while self.run(policy, cap, high).slo_met:
            low, high = high, high * 2
            if high > SLO_SEARCH_CEILING:
                return low
        for _ in range(SLO_SEARCH_STEPS):
            mid = (low * high) ** 0.5
            low, high = (mid, high) if self.run(policy, cap, mid).slo_met else (low, mid)
        return low


def _kv_capacity(report: Report, model: StepTimeModel, options: WhatIfOptions
                 ) -> tuple[int | None, int | None, KvMemorySource]:
    """KV tokens the server holds, the bytes behind them, and where that budget came from."""
    if model.kv_bytes_per_token is None or model.kv_bytes_per_token <= 0:
        return None, options.kv_memory_bytes, KvMemorySource.NO_KV_SIZE
    if options.kv_memory_bytes is not None:
        budget, source = options.kv_memory_bytes, KvMemorySource.OPTION
    else:
        free, weights = report.model.available_memory_bytes, report.model.parameter_bytes or 0
        if free is None or free <= 0:
            return None, None, KvMemorySource.NO_FREE_MEMORY
        budget = int(max(free - weights, 0) * KV_SHARE_OF_FREE)
        source = KvMemorySource.FREE_MEMORY
    return int(budget // model.kv_bytes_per_token), budget, source


def _caps(model: StepTimeModel, options: WhatIfOptions) -> list[int]:
    if options.caps:
        over = [c for c in options.caps if c > model.max_batch]
        if over:
            raise UsageError(f"--caps {over[0]} is above the largest batch size the sweep "
                             f"measured ({model.max_batch}); the what-if does not extrapolate.")
        return sorted(set(options.caps))
    return list(model.batch_sizes)


def _saturated_rate(model: StepTimeModel, caps: list[int], prompt: float, output: float
                    ) -> float:
    """Requests per second a full batch would serve at the largest cap: the scale of the
    default rates."""
    context = int(prompt + output / 2)
    return max(cap / model.step_s(cap, context) for cap in caps) / output


def _best(runs: list[ServingRun], policy: Policy) -> ServingRun | None:
    """The cap with the most throughput at the highest rate offered, fewest rows on a tie."""
    mine = [r for r in runs if r.policy == policy]
    if not mine:
        return None
    top = max(r.rate_per_s for r in mine)
    at_top = [r for r in mine if r.rate_per_s == top]
    best = max(r.throughput_tokens_per_s for r in at_top)
    return min((r for r in at_top if r.throughput_tokens_per_s >= TIE_SHARE * best),
               key=lambda r: r.cap)


def _stream(options: WhatIfOptions, prompt: TokenRange, mean_prompt: float,
            mean_out: float) -> Stream:
    trace = options.trace
    if trace is not None:
        return Stream(kind=StreamKind.TRACE, requests=len(trace), prompt_tokens=None,
                      output_tokens=None, mean_prompt_tokens=mean_prompt,
                      mean_output_tokens=mean_out,
                      trace_rate_per_s=trace_rate_per_s(trace) if trace else None,
                      seed=options.seed)
    return Stream(kind=StreamKind.POISSON, requests=options.requests,
                  prompt_tokens=str(prompt), output_tokens=str(options.output_tokens),
                  mean_prompt_tokens=mean_prompt, mean_output_tokens=mean_out,
                  trace_rate_per_s=None, seed=options.seed)


def what_if(report: Report, options: WhatIfOptions | None = None) -> WhatIf:
    """Simulate both policies on ``report``'s step times: everything ``diagnose serve``
    renders.

    Raises:
        UsageError: one sentence: an option out of range, or step times that cannot be
            simulated (none measured, the context unknown, figures out of any real range).
    """
    options = options or WhatIfOptions()
    options.validate()
    check_decode_step(report)
    model = fit_step_time(report, options.context, options.paged)
    prompt = options.prompt_tokens or TokenRange(model.base_context, model.base_context)
    kv_tokens, kv_bytes, kv_source = _kv_capacity(report, model, options)
    caps = _caps(model, options)
    prefill = _prefill(options)
    engine = fit_engine(model.step_s, prefill, options.engine) \
        if options.engine is not None else None
    runner = _Runner(model, options, kv_tokens, prompt, prefill, engine)
    if options.trace is not None:
        mean_out = sum(r.output_tokens for r in options.trace) / len(options.trace)
        mean_prompt = sum(r.prompt_tokens for r in options.trace) / len(options.trace)
    else:
        mean_out, mean_prompt = options.output_tokens.mean, prompt.mean
    saturated = _saturated_rate(model, caps, mean_prompt, mean_out)
    if not 0 < saturated < MAX_RATE_PER_S:
        raise UsageError(f"the report's step times give a full batch {saturated:.3g} requests "
                         "per second: out of any real range.")
    # Six significant digits: readable in a table, never rounded to 0 for a slow model.
    rates = sorted(set(options.rates_per_s
                       or [float(f"{saturated * f:.6g}") for f in options.loads]))
    # A prediction's band: every run again on its low and on its high steps.
    bands = {band: _Runner(fit_step_time(report, options.context, options.paged, band),
                           options, kv_tokens, prompt, prefill, engine)
             for band in (Band.LOW, Band.HIGH)} if report.target is not None else {}
    runs = [_with_band(runner.run(policy, cap, rate).row(policy, cap, rate), bands)
            for policy in Policy for cap in caps for rate in rates]
    best = {p: _best(runs, p) for p in Policy}
    slo_rates = [SloRate(policy, cap, runner.max_rate_within_slo(policy, cap, saturated))
                 for policy in Policy for cap in caps] if options.slo.given else []
    result = WhatIf(
        target=report.model.target,
        unit=report.model.unit or "token",
        step_time=model.record(),
        stream=_stream(options, prompt, mean_prompt, mean_out),
        kv_capacity_tokens=kv_tokens, kv_memory_bytes=kv_bytes, kv_memory_source=kv_source,
        kv_share_of_free=KV_SHARE_OF_FREE,
        prefill_s_per_token=options.prefill_s_per_token,
        slo=options.slo.targets(),
        saturated_rate_per_s=saturated,
        rates_per_s=rates, caps=caps,
        runs=runs, best=best, max_rate_within_slo=slo_rates,
        recommendation=recommend(best, slo_rates, options.slo, _noise(engine)),
        prefill=prefill, engine=engine, paged=options.paged,
        predicted_on=report.target.gpu if report.target is not None else None,
    )
    if not _finite(to_builtins(result)):  # a hostile report whose times overflow somewhere
        raise UsageError("the report's step times give figures out of any real range (a "
                         "time or size that overflows).")
    return result


def _with_band(run: ServingRun, bands: dict[Band, _Runner]) -> ServingRun:
    """``run`` with its throughput and median TPOT on the prediction's slow (high) and fast
    (low) steps, where there is a band."""
    if not bands:
        return run
    slow = bands[Band.HIGH].run(run.policy, run.cap, run.rate_per_s)
    fast = bands[Band.LOW].run(run.policy, run.cap, run.rate_per_s)
    return dataclasses.replace(
        run, throughput_band_tokens_per_s=(slow.throughput_tokens_per_s,
                                           fast.throughput_tokens_per_s),
        tpot_p50_band_s=None if fast.tpot_p50_s is None or slow.tpot_p50_s is None
        else (fast.tpot_p50_s, slow.tpot_p50_s))


def _noise(engine: EngineCalibration | None) -> float | None:
    """How far the engine's own calibration repeats differed at most (None without)."""
    noisiest = engine.noise() if engine is not None else None
    return noisiest.repeat_spread if noisiest is not None else None


def _prefill(options: WhatIfOptions) -> PrefillFit:
    """--prefill-ms-per-token where given, else the model's timed prefill, else none."""
    if options.prefill_s_per_token > 0:
        return PrefillFit(PrefillSource.OPTION, per_token_s=options.prefill_s_per_token)
    points = options.prefill_points or (options.engine.prefill if options.engine else None)
    if points:
        return fit_prefill(points, options.prefill_source if options.prefill_points
                           else PrefillSource.MODEL)
    return PrefillFit(PrefillSource.NONE if options.prefill_points is not None
                      else PrefillSource.NOT_TIMED)


def serving_plan(report: Report, options: WhatIfOptions) -> tuple[list[Request], list[int]]:
    """The stream's requests (their lengths; arrivals at one request per second) and the
    caps the what-if tries: what an engine's calibration and the prefill timing need first.

    Raises:
        UsageError: as :func:`what_if`.
    """
    options.validate()
    check_decode_step(report)
    model = fit_step_time(report, options.context, options.paged)
    prompt = options.prompt_tokens or TokenRange(model.base_context, model.base_context)
    runner = _Runner(model, options, None, prompt, PrefillFit(PrefillSource.NONE), None)
    return runner.stream(1.0), _caps(model, options)


def check_decode_step(report: Report) -> None:
    """Refuse a report whose step is not one decode step (one new token per row over a KV
    cache), before its step times are taken for one.

    A model file that sets CONTEXTS says it is a decode model; one that does not may still
    be (``--context`` says what its steps held) unless the report says otherwise: a
    training step, rows of several tokens (SEQ_LENS, UNITS_PER_ROW: a prefill or a whole
    sequence), or rows that yield something other than tokens.

    Raises:
        UsageError: one sentence naming what the report's step is instead.
    """
    m = report.model
    unit = (m.unit or "").strip().lower()
    if m.mode == Mode.TRAIN:
        what = "a training step (mode train)"
    elif m.contexts:
        return
    elif m.seq_lens:
        what = "a step over whole sequences (SEQ_LENS)"
    elif m.units_per_row_per_token or m.units_per_row != 1:
        what = (f"a step whose rows each yield {m.units_per_row} units (UNITS_PER_ROW: a "
                "prefill or whole sequences)")
    elif unit not in DECODE_UNITS:
        what = f"a step whose rows yield {m.unit!r}, not tokens (UNIT)"
    else:
        return
    raise UsageError(f"the report's step is {what}, not one decode step, so serving cannot be "
                     "simulated from it; sweep a decode model (a model file with CONTEXTS, or "
                     "hf:MODEL --task causal-lm-decode).")


def _finite(value: Any) -> bool:
    """Every number in ``value`` (JSON-safe values) finite: JSON can hold it."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, float) and not math.isfinite(item):
            return False
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
    return True


def recommend(best: dict[Policy, ServingRun | None], slo_rates: list[SloRate],
              slo: Slo, noise: float | None = None) -> ServingPick:
    """The policy and cap to serve with: under an SLO, the highest rate within it
    (continuous, then the fewest rows, among those within :data:`TIE_SHARE` of it, or
    within ``noise`` where that is wider; no cap when none meets it); without one,
    continuous batching at its best cap, unless static batching's best serves more by a
    margin the evidence carries: beyond :data:`SAME_THROUGHPUT` and beyond ``noise`` (how
    far the engine's own repeats differed, :meth:`EngineCalibration.noise`)."""
    if slo.given:
        feasible = [r for r in slo_rates if r.max_rate_per_s]
        if not feasible:
            return ServingPick(policy=None, cap=None, max_rate_per_s=None)
        top = max(r.max_rate_per_s or 0.0 for r in feasible)
        tied = min(TIE_SHARE, 1 / (1 + (noise or 0.0)))
        pick = min((r for r in feasible if (r.max_rate_per_s or 0.0) >= tied * top),
                   key=lambda r: (r.policy != Policy.CONTINUOUS, r.cap))
        return ServingPick(policy=pick.policy, cap=pick.cap, max_rate_per_s=pick.max_rate_per_s)
    cont, stat = best.get(Policy.CONTINUOUS), best.get(Policy.STATIC)
    margin = max(SAME_THROUGHPUT, 1 + (noise or 0.0))
    if stat is not None and (cont is None or stat.throughput_tokens_per_s
                             > margin * cont.throughput_tokens_per_s):
        return ServingPick(policy=Policy.STATIC, cap=stat.cap, max_rate_per_s=None)
    return ServingPick(policy=Policy.CONTINUOUS, cap=cont.cap if cont is not None else None,
                       max_rate_per_s=None)
