"""The serving what-if rendered: the explanation in the user's numbers, charts of latency
and throughput against request rate for both policies, serving.html, serving.md, serving.json
and the console summary. Pure functions of the typed what-if
(:class:`~batchscope.records.serving.WhatIf`, made by :mod:`batchscope.serving.whatif`).

Example:
    >>> page = render_html(what_if(load_report("report.json")))  # doctest: +SKIP
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table
from rich.text import Text

from batchscope.records.codec import to_builtins
from batchscope.records.engine import CalibrationPoint, EngineCalibration, PrefillSource
from batchscope.records.serving import (
    KvBytesSource,
    KvMemorySource,
    Policy,
    ServingRun,
    StepTimeSource,
    WhatIf,
)
from batchscope.reports import chart_style as st
from batchscope.reports import fmt
from batchscope.reports.escape import chart_text, json_for_script, md_text
from batchscope.reports.flag_text import serving_pick_text
from batchscope.reports.page import environment, page_csp, plotly_js, static_text

POLICY_COLORS = {Policy.CONTINUOUS: st.ACCENT, Policy.STATIC: "#b45309"}
TEMPLATE = "serving.html.j2"
# serving.json's shape: 2 since the sources are kinds (KvMemorySource, KvBytesSource) and the
# pick's sentence is written here (``recommendation.sentence``) rather than stored.
SERVING_SCHEMA = 2
# A step at this many times the sweep's context shows what context costs (512 tokens when the
# sweep ran at none).
LONGER_CONTEXT = 4
LONGER_CONTEXT_FLOOR = 512
# The policies in the order every chart and table draws them.
POLICIES = (Policy.CONTINUOUS, Policy.STATIC)

# At the largest calibrated cap of a policy, the share of the engine's measured time outside
# the model's simulated steps from which the engine, not the model, limits throughput; below
# SMALL_ENGINE_SHARE the model's steps are nearly all of it.
ENGINE_LIMITS_SHARE = 0.5
SMALL_ENGINE_SHARE = 0.1
POLICY_WORDS: dict[Policy, str] = {Policy.STATIC: "static-batching",
                                   Policy.CONTINUOUS: "continuous-batching"}
ENGINE_TITLE = "Engine calibration: measured beside simulated"

KV_BYTES_SOURCES: dict[KvBytesSource, str] = {
    KvBytesSource.NONE: "",
    KvBytesSource.GRID_INPUTS: "the inputs' bytes at two contexts",
    KvBytesSource.STATE_BYTES: "state bytes the ops read",
}


def kv_memory_text(result: WhatIf) -> str:
    """Where the KV cache's memory budget came from, in words."""
    source = result.kv_memory_source
    if source == KvMemorySource.NO_KV_SIZE:
        return "the report does not say how large the KV cache is"
    if source == KvMemorySource.NO_FREE_MEMORY:
        return "the report does not say how much memory was free"
    if source == KvMemorySource.OPTION:
        return "--kv-memory"
    where = (f"the {result.predicted_on}'s memory (its datasheet, less the reserve)"
             if result.predicted_on is not None else "the memory the sweep found free")
    return f"{result.kv_share_of_free:.0%} of {where} beside the weights"


def kv_bytes_text(source: KvBytesSource) -> str:
    """Where the KV cache's bytes per token came from, in words."""
    return KV_BYTES_SOURCES[source]


def recommendation_sentence(result: WhatIf) -> str:
    """The policy and cap the what-if picks, and why (reports/flag_text.serving_pick_text)."""
    return serving_pick_text(result)


def _runs(result: WhatIf, policy: Policy, cap: int) -> list[ServingRun]:
    return sorted((r for r in result.runs if r.policy == policy and r.cap == cap),
                  key=lambda r: r.rate_per_s)


def _best_caps(result: WhatIf) -> dict[Policy, int]:
    """Each policy's cap to draw: its cap under the SLO where one was asked, else its best."""
    out: dict[Policy, int] = {}
    for policy in POLICIES:
        mine = [r for r in result.max_rate_within_slo
                if r.policy == policy and r.max_rate_per_s]
        best = result.best.get(policy)
        if mine:
            out[policy] = max(mine, key=lambda r: r.max_rate_per_s or 0.0).cap
        elif best is not None:
            out[policy] = best.cap
    return out


def _both_keep_up(result: WhatIf, cont_cap: int, stat_cap: int
                  ) -> tuple[ServingRun, ServingRun] | None:
    """Continuous and static runs at the highest rate both kept up with, each at its cap."""
    cont = {r.rate_per_s: r for r in _runs(result, Policy.CONTINUOUS, cont_cap)}
    stat = {r.rate_per_s: r for r in _runs(result, Policy.STATIC, stat_cap)}
    rates = [rate for rate in cont if rate in stat and cont[rate].keeps_up and stat[rate].keeps_up]
    return (cont[max(rates)], stat[max(rates)]) if rates else None


def _step_paragraph(result: WhatIf) -> str | None:
    """The fitted step at the smallest and largest batch, and what context costs."""
    model = result.step_time
    if not model.curve:
        return None
    unit = result.unit or "token"
    c0 = model.base_context
    first, last = model.curve[0], model.curve[-1]
    step1 = first.shared_s + first.per_token_s * c0
    stepn = last.shared_s + last.per_token_s * c0
    source = (f"the prediction for the {result.predicted_on}"
              if result.predicted_on is not None else "the sweep")
    tokens = "token" if c0 == 1 else "tokens"
    text = (f"From {source} at {c0} {tokens} of context: a decode step takes "
            f"{fmt.seconds(step1)} at batch {first.batch_size} and "
            f"{fmt.seconds(stepn)} at batch {last.batch_size}, so a full batch of "
            f"{last.batch_size} makes {fmt.rate(last.batch_size / stepn, unit)} "
            f"against {fmt.rate(first.batch_size / step1, unit)}.")
    if model.source != StepTimeSource.NONE and last.per_token_s > 0:
        longer = LONGER_CONTEXT * c0 or LONGER_CONTEXT_FLOOR
        slower = last.shared_s + last.per_token_s * longer
        text += (f" Each row's KV cache is read at every step, so context costs time: at "
                 f"batch {last.batch_size} a step at {longer} tokens would take "
                 f"{fmt.seconds(slower)} ({model.source.value}).")
    return text


def _policies_paragraph(result: WhatIf) -> str | None:
    """Static's held slots against continuous's refilled ones, past saturation, and the
    wait for a whole static batch where both keep up."""
    cont, stat = result.best.get(Policy.CONTINUOUS), result.best.get(Policy.STATIC)
    if cont is None or stat is None:
        return None
    text = (f"At {cont.rate_per_s:.3g} requests/s, past what either policy can serve, "
            f"static batching's steps averaged {fmt.number(stat.mean_batch)} rows")
    if stat.idle_slot_share is not None:
        text += (f", {fmt.pct(stat.idle_slot_share)} of them slots whose request had "
                 "already finished, held until the longest one of the batch was done")
    text += (f"; continuous batching refilled each freed slot at the next step and "
             f"averaged {fmt.number(cont.mean_batch)} rows.")
    calm = _both_keep_up(result, cont.cap, stat.cap)
    if calm is not None:
        c, s = calm
        text += (f" At {c.rate_per_s:.3g} requests/s, which both keep up with, an "
                 "arrival also waits for a whole static batch to end: p99 time to first "
                 f"token {fmt.seconds(s.ttft_p99_s)} against "
                 f"{fmt.seconds(c.ttft_p99_s)}.")
    return text


def _kv_paragraph(result: WhatIf) -> str | None:
    """How many tokens (and requests of the mean length) the KV budget holds."""
    kv_tokens = result.kv_capacity_tokens
    per_token = result.step_time.kv_bytes_per_token
    if not kv_tokens or not per_token:
        return None
    need = result.stream.mean_prompt_tokens + result.stream.mean_output_tokens
    fits = int(kv_tokens // need) if need else None
    text = (f"The KV cache takes {fmt.nbytes(per_token)} per token per row "
            f"({kv_bytes_text(result.step_time.kv_bytes_source)}); "
            f"{fmt.nbytes(result.kv_memory_bytes)} ({kv_memory_text(result)}) holds "
            f"{kv_tokens:,} tokens")
    if fits is not None:
        largest = max(result.caps or [0])
        text += (f", {fits:,} requests of the mean length at once: "
                 + ("KV memory, not the cap, limits the largest caps here."
                    if fits < largest else
                    f"above the largest cap tried ({largest}), so memory does not limit "
                    "these caps."))
    text = text if text.endswith(".") else text + "."
    preempted = [r for r in result.runs if r.preemptions]
    if preempted:
        most = max(preempted, key=lambda r: (r.preemptions, -r.cap))
        text += (f" Paged, continuous batching ran out of KV room and preempted rows (to "
                 f"prefill them again) in {len(preempted)} of its runs, at most "
                 f"{most.preemptions:,} at cap {most.cap} and {most.rate_per_s:.3g} "
                 "requests/s.")
    return text


def _and(items: list[str]) -> str:
    """``["4", "8", "16"]`` -> ``"4, 8 and 16"``."""
    return items[0] if len(items) == 1 else ", ".join(items[:-1]) + " and " + items[-1]


def _engine_name(engine: EngineCalibration) -> str:
    return f"{engine.engine.value} {engine.engine_version}".strip()


def _by_policy(engine: EngineCalibration) -> dict[Policy, list[CalibrationPoint]]:
    """Each policy's calibration points, by cap, in the order the record holds them."""
    out: dict[Policy, list[CalibrationPoint]] = {}
    for point in engine.points:
        out.setdefault(point.policy, []).append(point)
    return {policy: sorted(points, key=lambda p: p.cap) for policy, points in out.items()}


def _possessive(name: str) -> str:
    return f"{name}'" if name.endswith("s") else f"{name}'s"


def _share_sentences(engine: EngineCalibration, points: list[CalibrationPoint]) -> list[str]:
    """What share of the engine's time at each policy's largest calibrated cap the model's
    steps leave unexplained, in words: one sentence per kind of answer."""
    owner = _possessive(engine.engine.value)

    def times(group: list[CalibrationPoint], share: bool) -> str:
        parts = [(f"{fmt.pct(p.engine_share)} of " if share else "")
                 + f"{owner if i == 0 else 'its'} {POLICY_WORDS[p.policy]} time at cap {p.cap}"
                 for i, p in enumerate(group)]
        return _and(parts)

    limits = [p for p in points if p.engine_share >= ENGINE_LIMITS_SHARE]
    small = [p for p in points if p.engine_share < SMALL_ENGINE_SHARE]
    middle = [p for p in points if p not in limits and p not in small]
    out = []
    if limits:
        verb = "is" if len(limits) == 1 else "are"
        out.append(f"The engine, not the model, limits throughput: {times(limits, True)} "
                   f"{verb} outside what the model's forward steps take.")
    if middle:
        verb = "is" if len(middle) == 1 else "are"
        text = times(middle, True)
        out.append(f"{text[0].upper()}{text[1:]} {verb} outside what the model's forward "
                   "steps take; the rest is the model's.")
    if small:
        left = _and([fmt.pct(p.engine_share, 1) for p in small])
        out.append(f"The model's forward steps account for nearly all of {times(small, False)} "
                   f"(all but {left}).")
    return out


def _engine_paragraph(result: WhatIf) -> str | None:
    """The real engine measured beside simulated at its calibration caps, and how much of
    its time at the largest cap is its own rather than the model's."""
    engine = result.engine
    if engine is None or not engine.points:
        return None
    unit = result.unit or "token"
    by_policy = _by_policy(engine)
    measured = [f"{policy.value} {'/'.join(str(p.cap) for p in points)} measured "
                f"{'/'.join(fmt.number(p.measured_tokens_per_s) for p in points)} {unit}s/s"
                for policy, points in by_policy.items()]
    largest = [points[-1] for points in by_policy.values()]
    text = (f"{_engine_name(engine)} at the calibration caps, all requests arriving at once: "
            f"{_and(measured)}; simulated with its fitted cost per step added to the "
            f"sweep's step times, within ±{fmt.pct(engine.worst_error(), 1)}.")
    own = [p for p in largest if p.engine_step_only_s is not None]
    if own:
        calls = sum(p.forwards for step in engine.steps for p in step.points)
        said = [f"{fmt.number(_tokens_per_s(p.output_tokens, p.engine_step_only_s or 0.0))} "
                f"{unit}s/s for {p.policy.value} batching at cap {p.cap}" for p in own]
        sweep = [fmt.number(_model_only_tokens_per_s(p)) for p in own]
        text += (f" On its own decode calls alone ({calls:,} timed) the same runs would give "
                 f"{_and(said)}; on the sweep's step times alone, {_and(sweep)}.")
    return " ".join([text, *_share_sentences(engine, largest)])


def explain(result: WhatIf) -> list[str]:
    """Paragraphs that say what the what-if found, each from the numbers beside it."""
    paras = [recommendation_sentence(result), _step_paragraph(result),
             _engine_paragraph(result), _policies_paragraph(result), _kv_paragraph(result)]
    return [p for p in paras if p]


def _option_prefill_sentence(per_token_s: float) -> str:
    return (f"Prefill costs {per_token_s * 1e3:g} ms per prompt token "
            "(--prefill-ms-per-token), paid before the next step, blocking the batch.")


def _prefill_sentence(result: WhatIf) -> str:
    """What prefill is charged at admission, and where it came from."""
    fit = result.prefill
    if fit is None:  # a record from before the fit was kept: only the option was charged
        if result.prefill_s_per_token > 0:
            return _option_prefill_sentence(result.prefill_s_per_token)
        return ("Prefill is not measured: a request's prompt is taken as already in its KV "
                "cache when it is admitted, and its first token comes with its first decode "
                "step (give --prefill-ms-per-token to charge it).")
    if fit.source == PrefillSource.OPTION and fit.charged:
        return _option_prefill_sentence(fit.per_token_s)
    if fit.source in (PrefillSource.MODEL, PrefillSource.PREDICTED) and fit.charged:
        per_token = f"{fmt.seconds(fit.per_token_s)} per prompt token"
        if fit.fixed_s > 0:
            cost = f"{fmt.seconds(fit.fixed_s)} + {per_token}"
        elif fit.fixed_s < 0:
            cost = f"{per_token} less {fmt.seconds(-fit.fixed_s)}"
        else:
            cost = per_token
        prompt = round(result.stream.mean_prompt_tokens)
        detail = [f"a prompt of {prompt:,} tokens: {fmt.seconds(fit.prefill_s(prompt))}"]
        if fit.points:
            lengths = _and([f"{p.prompt_tokens:,}" for p in fit.points])
            predicted = fit.source == PrefillSource.PREDICTED
            measured = f"{'predicted' if predicted else 'measured'} at {lengths} tokens"
            if fit.worst_error is not None:
                measured += f", fit within {fmt.pct(fit.worst_error, 1)}"
            detail.append(measured)
        how = (f"predicted on the {result.predicted_on or 'target GPU'}"
               if fit.source == PrefillSource.PREDICTED else "timed on the model")
        return (f"Prefill is {how}: {cost} ({'; '.join(detail)}), paid at "
                "admission, blocking the batch.")
    if fit.source == PrefillSource.NOT_TIMED:
        return ("Prefill is not charged in this first look: a request's prompt is taken as "
                "already in its KV cache when it is admitted, and its first token comes with "
                "its first decode step; `diagnose serve` times it on the model where the "
                "model file defines build_engine_model().")
    return ("Prefill is not measured: the report's model file is not here or defines no "
            "build_engine_model() to time it on, so a request's prompt is taken as already "
            "in its KV cache when it is admitted, and its first token comes with its first "
            "decode step (give "
            "--prefill-ms-per-token to charge it, or sweep hf:MODEL to time it).")


def _engine_assumption(engine: EngineCalibration) -> str:
    """How the engine's cost per step was measured, and what of it is not simulated."""
    caps = sorted({p.cap for p in engine.points})
    where = (f"cap {caps[0]}" if len(caps) == 1
             else f"caps {_and([str(c) for c in caps])}") if caps else "no cap"
    startup = max((p.startup_s for p in engine.points), default=0.0)
    started = f"its start-up ({fmt.seconds(startup)})" if startup > 0 else "its start-up"
    return (f"The engine's own cost per step ({_engine_name(engine)}) was measured at {where} "
            f"on requests that all arrived at once (outputs cut to "
            f"{engine.max_output_tokens:,} tokens; fastest of {engine.repeats} "
            f"run{'s' if engine.repeats != 1 else ''}) and is interpolated in the step's rows "
            f"between them, held flat beyond; {started} is not simulated: a running "
            "server's steps are.")


def assumptions(result: WhatIf) -> list[str]:
    attention = ("Attention is paged (--paged): each row of a step reads its own KV cache "
                 "once, at the GPU's bandwidth and the GEMMs' memory-side efficiency, as vLLM "
                 "and SGLang do; a step takes its rows' mean context."
                 if result.paged else
                 "Attention is padded: every row of a step pays for the longest context in the "
                 "batch, as a plain PyTorch batch does (paged attention would read each row's "
                 "own).")
    steps = (f"Step times are predicted on the {result.predicted_on} (--target-gpu), nothing "
             f"timed; between the batch sizes predicted they are interpolated, above the "
             "largest not extrapolated."
             if result.predicted_on is not None else
             f"Step times are this machine's, from {result.target or 'the report'}'s sweep; "
             "between measured batch sizes they are interpolated, above the largest not "
             "extrapolated.")
    out = [_prefill_sentence(result), attention,
           ("Under continuous batching each request takes KV as it makes tokens, admitted "
            "when its prompt fits; where the next step's tokens do not, the latest admitted "
            "are preempted and prefilled again when readmitted (vLLM's recompute); static "
            "batches reserve their prompts and all their output tokens when admitted; "
            "waiting requests are admitted first come, first served."
            if result.paged else
            "Each request reserves KV for its prompt and all its output tokens when admitted; "
            "nothing is preempted; waiting requests are admitted first come, first served."),
           steps]
    if result.engine is not None:
        out.append(_engine_assumption(result.engine))
    return out


# Each latency a chart draws, by (measure, quantile).
_LATENCY: dict[tuple[str, str], Callable[[ServingRun], float | None]] = {
    ("tpot", "p99"): lambda r: r.tpot_p99_s,
    ("tpot", "p50"): lambda r: r.tpot_p50_s,
    ("ttft", "p99"): lambda r: r.ttft_p99_s,
    ("ttft", "p50"): lambda r: r.ttft_p50_s,
}


def figures(result: WhatIf) -> dict[str, st.Figure]:
    caps = _best_caps(result)
    targets = {"tpot": result.slo.tpot_s, "ttft": result.slo.ttft_s}
    out: dict[str, st.Figure] = {}
    for key, title in (("tpot", "time per output token"), ("ttft", "time to first token")):
        data: list[dict[str, Any]] = []
        for policy, cap in caps.items():
            runs = _runs(result, policy, cap)
            for q, dash in (("p99", "solid"), ("p50", "dot")):
                latency = _LATENCY[key, q]
                data.append({"type": "scatter", "mode": "lines+markers",
                             "name": chart_text(f"{policy.value}, cap {cap}, {q}"),
                             "x": [r.rate_per_s for r in runs],
                             "y": [(latency(r) or 0) * 1e3 for r in runs],
                             "line": {"color": POLICY_COLORS[policy], "dash": dash}})
        shapes = []
        target = targets[key]
        if target:
            shapes.append(st.hline(target * 1e3, st.LIMIT))
        values = [y for d in data for y in d["y"] if y > 0]
        out[key] = st.figure(data, st.layout(
            xaxis=st.axis("offered requests/s"),
            yaxis=st.axis(f"{title} (ms)", log=st.wants_log(values) if values else False),
            shapes=shapes))
    data = []
    unit = result.unit or "token"
    for policy, cap in caps.items():
        runs = _runs(result, policy, cap)
        data.append({"type": "scatter", "mode": "lines+markers",
                     "name": chart_text(f"{policy.value}, cap {cap}"),
                     "x": [r.rate_per_s for r in runs],
                     "y": [r.throughput_tokens_per_s for r in runs],
                     "line": {"color": POLICY_COLORS[policy]}})
    out["throughput"] = st.figure(data, st.layout(
        xaxis=st.axis("offered requests/s"), yaxis=st.axis(chart_text(f"{unit}s/s served"))))
    return out


@dataclass(frozen=True)
class RunRow:
    """One simulated run as the tables show it."""

    policy: Policy
    cap: int
    rate: str
    throughput: str
    batch: str
    ttft50: str
    ttft99: str
    tpot50: str
    tpot99: str
    e2e99: str
    keeps_up: str
    slo: str


SLO_WORDS: dict[bool | None, str] = {True: "met", False: "missed", None: "–"}


def _banded(point: str, band: tuple[float, float] | None, show: Callable[[float], str]
            ) -> str:
    """``point`` with a prediction's band after it ("2.29 k (1.96 k–2.62 k)")."""
    return point if band is None else f"{point} ({show(band[0])}–{show(band[1])})"


def table_rows(result: WhatIf) -> list[RunRow]:
    return [RunRow(policy=r.policy, cap=r.cap, rate=f"{r.rate_per_s:.3g}"[:5],
                   throughput=_banded(fmt.si(r.throughput_tokens_per_s),
                                      r.throughput_band_tokens_per_s, fmt.si),
                   batch=fmt.number(r.mean_batch),
                   ttft50=fmt.seconds(r.ttft_p50_s), ttft99=fmt.seconds(r.ttft_p99_s),
                   tpot50=_banded(fmt.seconds(r.tpot_p50_s), r.tpot_p50_band_s, fmt.seconds),
                   tpot99=fmt.seconds(r.tpot_p99_s),
                   e2e99=fmt.seconds(r.e2e_p99_s),
                   keeps_up="yes" if r.keeps_up else "no", slo=SLO_WORDS[r.slo_met])
            for r in result.runs]


@dataclass(frozen=True)
class FitRow:
    """One context-grid point: the step measured against the fitted one."""

    batch: int
    context: int
    measured: str
    predicted: str
    error: str
    split: str


def fit_rows(result: WhatIf) -> list[FitRow]:
    return [FitRow(batch=p.batch_size, context=p.context, measured=fmt.seconds(p.measured_s),
                   predicted=fmt.seconds(p.predicted_s), error=f"{p.error:+.0%}",
                   split=f"{p.split_error:+.0%}" if p.split_error is not None else "–")
            for p in result.step_time.points]


@dataclass(frozen=True)
class CalibrationRow:
    """One engine calibration run as the tables show it: measured beside simulated."""

    policy: Policy
    cap: int
    requests: int
    measured: str  # tokens/s
    simulated: str  # tokens/s, the engine's fitted cost added
    error: str
    model_only: str  # tokens/s on the sweep's step times alone
    share: str
    repeats: str  # how far the run's two fastest repeats differed, and its runs where more
    forward_calls: str
    startup: str


def _tokens_per_s(tokens: int, span_s: float) -> float | None:
    return tokens / span_s if 0 < span_s < float("inf") else None


def _model_only_tokens_per_s(point: CalibrationPoint) -> float | None:
    return _tokens_per_s(point.output_tokens, point.model_only_s)


def _repeats_apart(point: CalibrationPoint, repeats: int) -> str:
    """How far the run's two fastest repeats were apart, and how many runs it took where
    more than the calibration's usual number."""
    if point.repeat_spread is None:
        return fmt.MISSING
    text = fmt.pct(point.repeat_spread, 1)
    if point.runs is not None and point.runs > repeats:
        text += f" ({point.runs} runs)"
    return text


def calibration_rows(result: WhatIf) -> list[CalibrationRow]:
    """The engine's calibration runs, by policy and cap (none without --engine)."""
    if result.engine is None:
        return []
    return [CalibrationRow(policy=p.policy, cap=p.cap, requests=p.requests,
                           measured=fmt.number(p.measured_tokens_per_s),
                           simulated=fmt.number(p.simulated_tokens_per_s),
                           error=fmt.signed_pct(p.error),
                           model_only=fmt.number(_model_only_tokens_per_s(p)),
                           share=fmt.pct(p.engine_share),
                           repeats=_repeats_apart(p, result.engine.repeats),
                           forward_calls=f"{p.engine_forward_calls:,}",
                           startup=fmt.seconds(p.startup_s) if p.startup_s > 0 else fmt.MISSING)
            for points in _by_policy(result.engine).values() for p in points]


def calibration_caption(result: WhatIf) -> str:
    """Under the calibration table: what ran, and how far its own repeats moved."""
    engine = result.engine
    if engine is None:
        return ""
    more = any(p.runs is not None and p.runs > engine.repeats for p in engine.points)
    text = (f"{_engine_name(engine)} on requests that all arrived at once, outputs cut to "
            f"{engine.max_output_tokens:,} tokens, the fastest of {engine.repeats} "
            f"run{'s' if engine.repeats != 1 else ''}"
            f"{' (more where the first were far apart)' if more else ''} kept "
            f"({fmt.seconds(engine.wall_s)} in all); simulated with the engine's fitted cost "
            "per step, and with the sweep's step times alone (model only). ")
    noisiest = engine.noise()
    if noisiest is None or noisiest.repeat_spread is None:
        return text + ("Each measured figure is one timed run with no interval: on a shared "
                       "machine a run minutes later can differ by 10-30%, so an error or a "
                       "policy's lead within that is within noise.")
    return text + (f"Repeats apart: a run's second-fastest repeat over its fastest. Up to "
                   f"{fmt.pct(noisiest.repeat_spread, 1)} here ({noisiest.policy.value} at cap "
                   f"{noisiest.cap}): every simulated figure carries at least that much "
                   "uncertainty, and a run minutes later can differ by more (10-30% on a "
                   "shared machine), so an error or a policy's lead within it is within "
                   "noise.")


def document(result: WhatIf) -> dict[str, Any]:
    """serving.json: the what-if's numbers, and the pick's sentence beside them
    (``recommendation.sentence``) for a reader without batchscope."""
    doc: dict[str, Any] = {"schema": SERVING_SCHEMA, **to_builtins(result)}
    doc["recommendation"]["sentence"] = recommendation_sentence(result)
    return doc


def render_html(result: WhatIf) -> str:
    """serving.html: self-contained and offline, like report.html."""
    page_js = static_text("report.js")
    figs = figures(result)
    stream = result.stream
    return environment().get_template(TEMPLATE).render(
        target=result.target or "report", stream_kind=stream.kind.value,
        stream=stream, step_source=result.step_time.source.value,
        paragraphs=explain(result), assumptions=assumptions(result),
        rows=table_rows(result), fit_rows=fit_rows(result),
        engine_rows=calibration_rows(result), engine_title=ENGINE_TITLE,
        engine_caption=calibration_caption(result),
        charts={"tpot": "Time per output token", "ttft": "Time to first token",
                "throughput": "Throughput served"},
        css=static_text("report.css"), page_js=page_js, plotly_js=plotly_js(),
        figures_json=json_for_script(figs),
        csp=page_csp(page_js))


def _best_cap_rows(result: WhatIf) -> list[RunRow]:
    """The runs of each policy at the cap its charts draw."""
    caps = _best_caps(result)
    return [row for row in table_rows(result) if caps.get(row.policy) == row.cap]


def render_markdown(result: WhatIf) -> str:
    lines = [f"## Serving what-if: {md_text(str(result.target or 'report'))}", ""]
    lines += [md_text(p, limit=4000) + "\n" for p in explain(result)]
    lines += [("| policy | cap | requests/s | tokens/s | mean batch | p99 TTFT | p50 TPOT | "
               "p99 TPOT | keeps up | SLO |"), "|---|---:|---:|---:|---:|---:|---:|---:|---|---|"]
    for row in _best_cap_rows(result):
        lines.append(f"| {row.policy.value} | {row.cap} | {row.rate} | "
                     f"{row.throughput} | {row.batch} | {row.ttft99} | "
                     f"{row.tpot50} | {row.tpot99} | {row.keeps_up} | "
                     f"{row.slo} |")
    engine_rows = calibration_rows(result)
    if engine_rows:
        lines += ["", f"### {ENGINE_TITLE}", "", md_text(calibration_caption(result)), "",
                  ("| policy | cap | requests | measured tokens/s | simulated tokens/s | error | "
                   "model-only tokens/s | engine share | repeats apart | forward calls | "
                   "start-up |"),
                  "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        lines += [f"| {r.policy.value} | {r.cap} | {r.requests} | {r.measured} | "
                  f"{r.simulated} | {r.error} | {r.model_only} | {r.share} | {r.repeats} | "
                  f"{r.forward_calls} | {r.startup} |" for r in engine_rows]
    lines += ["", "Assumptions: " + " ".join(md_text(a, limit=4000) for a in assumptions(result)),
              ""]
    return "\n".join(lines)


def print_serving(console: Console, result: WhatIf) -> None:
    for para in explain(result):
        console.print(para, markup=False, highlight=False)
        console.print()
    table = Table(title="Each policy at its best cap (every run: serving.html)",
                  title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("policy", "cap", "req/s", "tok/s", "TTFT p99", "TPOT p50", "TPOT p99",
                "SLO"):
        table.add_column(col, justify="left" if col in ("policy", "SLO") else "right",
                         no_wrap=True)
    for row in _best_cap_rows(result):
        slo = row.slo if row.slo != "–" else ("" if row.keeps_up == "yes" else "behind")
        table.add_row(row.policy.value, str(row.cap), row.rate, row.throughput,
                      row.ttft99, row.tpot50, row.tpot99, slo)
    console.print(table)
    engine_rows = calibration_rows(result)
    if not engine_rows or result.engine is None:
        return
    console.print()
    engine = Table(title=Text(f"{ENGINE_TITLE} ({_engine_name(result.engine)})"),
                   title_justify="left", box=box.SIMPLE_HEAD, pad_edge=False)
    for col in ("policy", "cap", "requests", "measured tok/s", "simulated tok/s", "error",
                "model-only tok/s", "engine share", "repeats apart", "forward calls",
                "start-up"):
        engine.add_column(col, justify="left" if col == "policy" else "right", no_wrap=True)
    for r in engine_rows:
        engine.add_row(*(Text(cell) for cell in (
            r.policy.value, str(r.cap), str(r.requests), r.measured, r.simulated, r.error,
            r.model_only, r.share, r.repeats, r.forward_calls, r.startup)))
    console.print(engine)
