"""``diagnose serve --engine``'s calibration and the timed prefill, as serving.html, serving.md,
serving.json and the terminal show them: built by the real what-if from synthetic engine runs
on the synthetic decode report, so every number checked follows from the input."""

from __future__ import annotations

import dataclasses
import io
import json
import re

import pytest
from rich.console import Console

from batchscope.records.codec import decode, to_builtins
from batchscope.records.engine import Engine, PrefillPoint, PrefillSource
from batchscope.records.policy import Policy
from batchscope.records.serving import WhatIf
from batchscope.reports import fmt
from batchscope.reports.flag_text import serving_pick_text
from batchscope.reports.serving_render import (
    ENGINE_TITLE,
    assumptions,
    calibration_caption,
    calibration_rows,
    document,
    explain,
    print_serving,
    render_html,
    render_markdown,
)
from batchscope.serving.engines.runs import (
    EngineMeasurement,
    EngineRun,
    ForwardTiming,
    ServedTiming,
)
from batchscope.serving.requests import Request, TokenRange
from batchscope.serving.whatif import WhatIfOptions, what_if
from tests.serving.conftest import decode_model

CAPS = (2, 4, 8)
PROMPT, OUTPUT = 128, 16  # each calibration request's tokens
STARTUP_S = 0.5  # the continuous engine's set-up
VERSION = "4.57.0"
# The model's prefill at three prompt lengths: 0.5 ms + 31.25 µs per token, exactly.
PREFILL = [PrefillPoint(48, 0.002), PrefillPoint(64, 0.0025), PrefillPoint(80, 0.003)]
HOSTILE = "<script>alert(1)</script>|x"
LIMITS = "The engine, not the model, limits throughput"


def _runs(span_s: dict[tuple[Policy, int], float]) -> list[EngineRun]:
    """One run per policy and cap: 2 × cap requests all at 0, the last done at its span."""
    return [EngineRun(policy, cap,
                      served=[ServedTiming(Request(0.0, PROMPT, OUTPUT), span_s[policy, cap],
                                           OUTPUT) for _ in range(2 * cap)],
                      forward_calls=OUTPUT + 1 + cap, forward_s=span_s[policy, cap] / 2,
                      startup_s=STARTUP_S if policy == Policy.CONTINUOUS else 0.0)
            for policy in (Policy.STATIC, Policy.CONTINUOUS) for cap in CAPS]


def _options(span_s: dict[tuple[Policy, int], float], version: str = VERSION,
             repeat: dict[tuple[Policy, int], float] | None = None) -> WhatIfOptions:
    """The engine measured at ``span_s``; with ``repeat``, each run again at that span (a
    second repeat, interleaved as the calibration runs them)."""
    runs = _runs(span_s) + (_runs(repeat) if repeat is not None else [])
    measured = EngineMeasurement(Engine.TRANSFORMERS, version, runs, PREFILL,
                                 max_output_tokens=OUTPUT, repeats=2, wall_s=12.0)
    return WhatIfOptions(requests=60, output_tokens=TokenRange(8, 32), caps=list(CAPS),
                         rates_per_s=[1.0, 50.0], engine=measured, prefill_points=PREFILL)


@pytest.fixture(scope="module")
def model_only_s() -> dict[tuple[Policy, int], float]:
    """Each calibration run simulated on the sweep's step times alone (any measured span
    gives it: it is the what-if's, not the engine's)."""
    probe = what_if(decode_model(), _options({(p, c): 1.0 for p in Policy for c in CAPS}))
    assert probe.engine is not None
    return {(p.policy, p.cap): p.model_only_s for p in probe.engine.points}


def _with_spans(model_only_s: dict[tuple[Policy, int], float], factor: float,
                target: str = "decode.py", version: str = VERSION) -> WhatIf:
    spans = {key: factor * s for key, s in model_only_s.items()}
    return what_if(decode_model(target=target), _options(spans, version))


@pytest.fixture(scope="module")
def slow_engine(model_only_s) -> WhatIf:
    """The engine takes 3× what the model's steps take: two thirds of its time is its own."""
    return _with_spans(model_only_s, 3.0)


@pytest.fixture(scope="module")
def matching_engine(model_only_s) -> WhatIf:
    """The engine takes what the model's steps take."""
    return _with_spans(model_only_s, 1.0)


def _section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def test_the_calibration_points_follow_from_the_runs(slow_engine, model_only_s):
    engine = slow_engine.engine
    assert engine is not None and engine.engine_version == VERSION
    assert {(p.policy, p.cap) for p in engine.points} == set(model_only_s)
    for p in engine.points:
        span = 3.0 * model_only_s[p.policy, p.cap]
        assert p.requests == 2 * p.cap and p.output_tokens == 2 * p.cap * OUTPUT
        assert p.measured_tokens_per_s == pytest.approx(p.output_tokens / span)
        assert p.engine_share == pytest.approx(2 / 3)


def test_html_shows_the_calibration_table(slow_engine):
    engine = slow_engine.engine
    assert engine is not None
    table = _section(render_html(slow_engine), "engine")
    assert ENGINE_TITLE in table
    body = re.findall(r"<tr><td>(.*?)</td></tr>", table)
    assert len(body) == len(engine.points)
    cells = [row.split("</td><td>") for row in body]
    for p in engine.points:
        row = next(c for c in cells if c[0] == p.policy.value and c[1] == str(p.cap))
        assert row[2] == str(p.requests)
        assert row[3] == fmt.number(p.output_tokens / (3.0 * p.model_only_s))
        assert row[4] == fmt.number(p.simulated_tokens_per_s)
        assert row[5] == fmt.signed_pct(p.error)
        assert row[6] == fmt.number(p.output_tokens / p.model_only_s)
        assert row[7] == fmt.pct(2 / 3)
        assert row[8] == fmt.MISSING  # one run each: no repeat to compare
        assert row[9] == str(OUTPUT + 1 + p.cap)
        assert row[10] == (fmt.seconds(STARTUP_S) if p.policy == Policy.CONTINUOUS
                           else fmt.MISSING)


def test_markdown_shows_the_calibration_table_after_the_runs(slow_engine):
    engine = slow_engine.engine
    assert engine is not None
    text = render_markdown(slow_engine)
    assert text.index("| policy | cap | requests/s |") < text.index(f"### {ENGINE_TITLE}")
    for p in engine.points:
        row = (f"| {p.policy.value} | {p.cap} | {p.requests} | "
               f"{fmt.number(p.measured_tokens_per_s)} | {fmt.number(p.simulated_tokens_per_s)} "
               f"| {fmt.signed_pct(p.error)} | {fmt.number(p.output_tokens / p.model_only_s)} | "
               f"{fmt.pct(p.engine_share)} | {fmt.MISSING} | {p.engine_forward_calls} |")
        assert row in text


def test_an_engine_three_times_the_model_limits_throughput(slow_engine):
    words = " ".join(explain(slow_engine))
    assert LIMITS in words
    share = fmt.pct(2 / 3)
    assert (f"{share} of transformers' static-batching time at cap {max(CAPS)} and {share} of "
            f"its continuous-batching time at cap {max(CAPS)} are outside what the model's "
            "forward steps take.") in words
    engine = slow_engine.engine
    assert engine is not None
    static = [p for p in engine.points if p.policy == Policy.STATIC]
    measured = "/".join(fmt.number(p.measured_tokens_per_s) for p in static)
    assert (f"transformers {VERSION} at the calibration caps, all requests arriving at once: "
            f"static {'/'.join(map(str, CAPS))} measured {measured} tokens/s") in words
    assert f"within ±{fmt.pct(engine.worst_error(), 1)}" in words


def test_an_engine_as_fast_as_the_model_does_not(matching_engine):
    words = " ".join(explain(matching_engine))
    assert LIMITS not in words
    assert ("The model's forward steps account for nearly all of transformers' "
            f"static-batching time at cap {max(CAPS)}") in words


def test_an_engine_a_quarter_over_the_model_says_its_share(model_only_s):
    words = " ".join(explain(_with_spans(model_only_s, 1.25)))  # 1 - 1/1.25 of it: 20%
    assert LIMITS not in words and "nearly all" not in words
    assert (f"{fmt.pct(0.2)} of transformers' static-batching time at cap {max(CAPS)}"
            in words)


def test_the_engine_assumption_names_its_caps_and_startup(slow_engine):
    said = " ".join(assumptions(slow_engine))
    caps = ", ".join(map(str, CAPS[:-1])) + f" and {CAPS[-1]}"
    assert (f"The engine's own cost per step (transformers {VERSION}) was measured at caps "
            f"{caps} on requests that all arrived at once (outputs cut to {OUTPUT} tokens; "
            "fastest of 2 runs)") in said
    assert f"its start-up ({fmt.seconds(STARTUP_S)}) is not simulated" in said


def test_runs_with_timed_calls_say_what_the_engines_own_calls_account_for(model_only_s):
    options = _options({key: 0.8 * s for key, s in model_only_s.items()})
    assert options.engine is not None
    calls = [ForwardTiming(0.004, cap, cap, cap * PROMPT) for cap in CAPS]
    timed = dataclasses.replace(options, engine=dataclasses.replace(
        options.engine, runs=[dataclasses.replace(r, forwards=calls)
                              for r in options.engine.runs]))
    result = what_if(decode_model(), timed)
    plain = what_if(decode_model(), options)
    assert result.engine is not None and plain.engine is not None
    assert len(result.engine.steps) == 2 and plain.engine.steps == []
    # The simulation is the same with or without the calls: they are recorded, not used.
    assert result.runs == plain.runs
    words = " ".join(explain(result))
    calls_timed = 2 * len(CAPS) * len(calls)  # every call of each policy's fastest runs
    own = _and_join([f"{fmt.number(p.output_tokens / p.engine_step_only_s)} tokens/s for "
                     f"{policy.value} batching at cap {max(CAPS)}"
                     for policy, p in ((policy, _point(result, policy))
                                       for policy in (Policy.STATIC, Policy.CONTINUOUS))])
    sweep = _and_join([fmt.number(p.output_tokens / p.model_only_s)
                       for p in (_point(result, Policy.STATIC),
                                 _point(result, Policy.CONTINUOUS))])
    assert (f"On its own decode calls alone ({calls_timed} timed) the same runs would give "
            f"{own}; on the sweep's step times alone, {sweep}.") in words
    assert "On its own decode calls" not in " ".join(explain(plain))


def _point(result: WhatIf, policy: Policy):
    assert result.engine is not None
    return next(p for p in result.engine.points if p.policy == policy and p.cap == max(CAPS))


def _and_join(items: list[str]) -> str:
    return ", ".join(items[:-1]) + " and " + items[-1] if len(items) > 1 else items[0]


def test_without_an_engine_nothing_of_it_is_shown():
    plain = what_if(decode_model(), WhatIfOptions(requests=60, output_tokens=TokenRange(8, 32),
                                                  caps=[2, 4], rates_per_s=[10.0]))
    assert plain.engine is None
    assert ENGINE_TITLE not in render_html(plain) and ENGINE_TITLE not in render_markdown(plain)
    assert not any("engine's own cost" in a for a in assumptions(plain))
    assert 'id="engine"' not in render_html(plain)


def test_prefill_timed_on_the_model(slow_engine):
    fit = slow_engine.prefill
    assert fit is not None and fit.source == PrefillSource.MODEL
    # The three points lie on a line: 0.5 ms + 31.25 µs per token.
    assert fit.fixed_s == pytest.approx(0.0005) and fit.per_token_s == pytest.approx(3.125e-5)
    said = assumptions(slow_engine)[0]
    assert said == (f"Prefill is timed on the model: {fmt.seconds(0.0005)} + "
                    f"{fmt.seconds(3.125e-5)} per prompt token (a prompt of {PROMPT} tokens: "
                    f"{fmt.seconds(0.0005 + 3.125e-5 * PROMPT)}; measured at 48, 64 and 80 "
                    f"tokens, fit within {fmt.pct(fit.worst_error, 1)}), paid at admission, "
                    "blocking the batch.")


def test_prefill_from_the_option_and_from_nothing():
    base = {"requests": 30, "output_tokens": TokenRange(8, 16), "caps": [2],
            "rates_per_s": [10.0]}
    option = what_if(decode_model(), WhatIfOptions(prefill_s_per_token=0.002, **base))
    assert option.prefill is not None and option.prefill.source == PrefillSource.OPTION
    assert assumptions(option)[0].startswith("Prefill costs 2 ms per prompt token")
    none = what_if(decode_model(), WhatIfOptions(prefill_points=[], **base))
    assert none.prefill is not None and none.prefill.source == PrefillSource.NONE
    said = assumptions(none)[0]
    assert said.startswith("Prefill is not measured")
    assert "build_engine_model()" in said and "--prefill-ms-per-token" in said
    assert "hf:MODEL" in said
    # Not looked for (a sweep's own first look): said so, and where it is timed.
    first_look = what_if(decode_model(), WhatIfOptions(**base))
    assert first_look.prefill is not None
    assert first_look.prefill.source == PrefillSource.NOT_TIMED
    assert assumptions(first_look)[0].startswith("Prefill is not charged in this first look")
    # A record from before the fit was kept: the per-token charge alone says what was paid.
    old = dataclasses.replace(option, prefill=None)
    assert assumptions(old)[0] == assumptions(option)[0]
    old_none = dataclasses.replace(none, prefill=None)
    assert assumptions(old_none)[0].startswith("Prefill is not measured")


def test_hostile_target_and_version_are_inert(model_only_s):
    result = _with_spans(model_only_s, 3.0, target=HOSTILE, version=HOSTILE)
    page = render_html(result)
    assert "<script>alert(1)" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;|x" in page
    assert "&lt;script&gt;" in _section(page, "engine")
    text = render_markdown(result)
    assert "<script>" not in text
    assert r"&lt;script&gt;alert(1)&lt;/script&gt;\|x" in text
    shown = io.StringIO()
    print_serving(Console(file=shown, width=200, color_system=None), result)
    assert f"transformers {HOSTILE}" in shown.getvalue()


def test_serving_json_keeps_the_engine(slow_engine):
    doc = document(slow_engine)
    text = json.dumps(doc)
    assert '"engine"' in text and '"transformers"' in text
    back = json.loads(text)
    assert back["engine"]["engine_version"] == VERSION
    assert len(back["engine"]["points"]) == len(CAPS) * 2
    assert back["prefill"]["source"] == "model"
    assert decode(to_builtins(slow_engine), WhatIf) == slow_engine


def test_the_terminal_shows_the_calibration(slow_engine):
    out = io.StringIO()
    print_serving(Console(file=out, width=200, color_system=None), slow_engine)
    shown = out.getvalue()
    assert f"{ENGINE_TITLE} (transformers {VERSION})" in shown
    engine = slow_engine.engine
    assert engine is not None
    for p in engine.points:
        assert fmt.number(p.measured_tokens_per_s) in shown


def _noisy(model_only_s: dict[tuple[Policy, int], float], static: float, continuous: float,
           spread: float) -> WhatIf:
    """Static's runs at ``static`` × the model's steps, continuous's at ``continuous`` ×;
    each run repeated once, every repeat 1 + ``spread`` times as long, except continuous at
    the middle cap whose repeat takes 1 + 2 × ``spread`` (the noisiest)."""
    factor = {Policy.STATIC: static, Policy.CONTINUOUS: continuous}
    fast = {key: factor[key[0]] * s for key, s in model_only_s.items()}
    slow = {key: s * (1 + (2 * spread if key == (Policy.CONTINUOUS, CAPS[1]) else spread))
            for key, s in fast.items()}
    options = _options(fast, repeat=slow)
    return what_if(decode_model(), options)


def test_the_repeats_apart_are_measured_and_the_fastest_is_kept(model_only_s):
    result = _noisy(model_only_s, 2.0, 2.0, 0.1)
    engine = result.engine
    assert engine is not None
    for p in engine.points:
        expected = 0.2 if (p.policy, p.cap) == (Policy.CONTINUOUS, CAPS[1]) else 0.1
        assert p.repeat_spread == pytest.approx(expected) and p.runs == 2
        # The fastest repeat is the measured figure.
        assert p.measured_s == pytest.approx(2.0 * model_only_s[p.policy, p.cap])
    noisiest = engine.noise()
    assert noisiest is not None and (noisiest.policy, noisiest.cap) == (Policy.CONTINUOUS,
                                                                          CAPS[1])
    cells = [row.split("</td><td>") for row in
             re.findall(r"<tr><td>(.*?)</td></tr>", _section(render_html(result), "engine"))]
    shown = {(c[0], c[1]): c[8] for c in cells}
    assert shown[Policy.CONTINUOUS.value, str(CAPS[1])] == fmt.pct(0.2, 1)
    assert shown[Policy.STATIC.value, str(CAPS[0])] == fmt.pct(0.1, 1)
    caption = render_markdown(result)
    assert (f"Up to {fmt.pct(0.2, 1)} here (continuous at cap {CAPS[1]}): every simulated "
            "figure carries at least that much uncertainty") in caption
    # An old record without repeats loads, and says the general caveat instead.
    old = dataclasses.replace(engine, points=[dataclasses.replace(p, repeat_spread=None,
                                                                  runs=None)
                                              for p in engine.points])
    assert old.noise() is None
    old_caption = calibration_caption(dataclasses.replace(result, engine=old))
    assert "Each measured figure is one timed run with no interval" in old_caption
    assert "Repeats apart" not in old_caption
    # A run repeated beyond the usual two says how many runs it took.
    more = dataclasses.replace(engine, points=[dataclasses.replace(p, runs=3)
                                               if p.policy == Policy.STATIC else p
                                               for p in engine.points])
    rows = calibration_rows(dataclasses.replace(result, engine=more))
    assert {r.repeats for r in rows if r.policy == Policy.STATIC} == {
        f"{fmt.pct(0.1, 1)} (3 runs)"}
    assert "(more where the first were far apart)" in calibration_caption(
        dataclasses.replace(result, engine=more))
    back = decode(to_builtins(result), WhatIf)
    assert back.engine is not None and back.engine.noise() == noisiest


def _ratio(result: WhatIf) -> float:
    cont, stat = result.best[Policy.CONTINUOUS], result.best[Policy.STATIC]
    assert cont is not None and stat is not None
    return cont.throughput_tokens_per_s / stat.throughput_tokens_per_s


def test_a_lead_within_the_engines_noise_does_not_rank_the_policies(model_only_s):
    # Continuous's engine 1.8x static's: static serves more, beyond "about the same".
    # With repeats 30% apart (60% at worst) that lead is within the noise: continuous kept.
    noisy = _noisy(model_only_s, 1.0, 1.8, 0.3)
    ratio = _ratio(noisy)
    assert 1 / 1.6 < ratio < 1 / 1.05
    assert noisy.recommendation.policy == Policy.CONTINUOUS
    sentence = serving_pick_text(noisy)
    assert "continuous batching capped at" in sentence and f"{ratio:.2f}x the" in sentence
    assert ("That is within this machine's noise: the second-fastest repeat of the engine's "
            f"own continuous run at cap {CAPS[1]} took 60% longer than its fastest, so these "
            "figures do not rank the policies.") in sentence
    # The same engine with repeats that agree: the same lead picks static.
    quiet = _noisy(model_only_s, 1.0, 1.8, 0.0)
    assert _ratio(quiet) == pytest.approx(ratio)
    assert quiet.recommendation.policy == Policy.STATIC
    assert "noise" not in serving_pick_text(quiet)


def test_a_lead_under_five_percent_is_about_the_same(model_only_s):
    # Continuous's engine 1.6x static's: static leads by about 5%; a 4% lead keeps continuous.
    result = _noisy(model_only_s, 1.0, 1.55, 0.0)
    ratio = _ratio(result)
    assert 1 / 1.05 < ratio < 1.05
    assert result.recommendation.policy == Policy.CONTINUOUS
    assert "about what static batching serves at its best cap" in serving_pick_text(result)


def test_static_is_picked_where_its_lead_is_beyond_the_noise(model_only_s):
    # Continuous's engine twice as slow as static's; the repeats 2% apart (4% at worst).
    result = _noisy(model_only_s, 1.0, 2.0, 0.02)
    ratio = _ratio(result)
    assert ratio < 1 / 1.05
    assert result.recommendation.policy == Policy.STATIC
    stat = result.best[Policy.STATIC]
    assert stat is not None and result.recommendation.cap == stat.cap
    sentence = serving_pick_text(result)
    assert sentence.startswith("At the highest rate offered")
    assert f"static batching capped at {stat.cap} rows serves" in sentence
    assert f"{1 / ratio:.2f}x the" in sentence and "of continuous batching" in sentence
    assert "noise" not in sentence


def test_under_an_slo_a_lead_within_the_noise_does_not_rank_the_policies(model_only_s):
    """Static reaches 1.10 requests/s within the SLO, continuous 1.00: a 10% lead picks
    static on quiet repeats; on repeats 30% (60% at worst) apart it is a tie, continuous
    is kept, and the sentence says the figures do not rank the policies."""
    from batchscope.records.serving import SloRate, SloTargets
    from batchscope.serving.metrics import Slo
    from batchscope.serving.whatif import recommend

    rates = [SloRate(Policy.STATIC, 8, 1.10), SloRate(Policy.CONTINUOUS, 8, 1.00),
             SloRate(Policy.CONTINUOUS, 4, 0.5)]
    slo = Slo(tpot_s=0.2)
    quiet_pick = recommend({}, rates, slo, 0.0)
    assert (quiet_pick.policy, quiet_pick.cap) == (Policy.STATIC, 8)
    noisy_pick = recommend({}, rates, slo, 0.3)
    assert (noisy_pick.policy, noisy_pick.cap, noisy_pick.max_rate_per_s) == (
        Policy.CONTINUOUS, 8, 1.00)
    noisy = _noisy(model_only_s, 1.0, 1.0, 0.3)
    under_slo = dataclasses.replace(noisy, slo=SloTargets(tpot_s=0.2),
                                    max_rate_within_slo=rates, recommendation=noisy_pick)
    sentence = serving_pick_text(under_slo)
    assert sentence.startswith("With p99 TPOT")
    assert "continuous batching capped at 8 rows serves up to 1 requests/s" in sentence
    assert "static batching reaches 1.1 requests/s" in sentence
    assert "so these figures do not rank the policies." in sentence
    quiet = dataclasses.replace(_noisy(model_only_s, 1.0, 1.0, 0.0), slo=SloTargets(tpot_s=0.2),
                                max_rate_within_slo=rates, recommendation=quiet_pick)
    assert "noise" not in serving_pick_text(quiet)
    assert "continuous batching reaches at most 1 requests/s" in serving_pick_text(quiet)
    assert "(9% less)" in serving_pick_text(quiet)  # 1.0 against 1.10


def test_a_shortfall_smaller_than_the_rate_is_not_one_times_less(model_only_s):
    # 0.051 against 0.052 requests/s printed "(1x less)".
    from batchscope.records.serving import SloRate, SloTargets
    from batchscope.serving.metrics import Slo
    from batchscope.serving.whatif import recommend

    rates = [SloRate(Policy.STATIC, 8, 0.052), SloRate(Policy.CONTINUOUS, 8, 0.051)]
    pick = recommend({}, rates, Slo(tpot_s=0.2), 0.0)
    result = dataclasses.replace(_noisy(model_only_s, 1.0, 1.0, 0.0), slo=SloTargets(tpot_s=0.2),
                                 max_rate_within_slo=rates, recommendation=pick)
    sentence = serving_pick_text(result)
    assert "reaches at most 0.051 requests/s (2% less)" in sentence
    assert "1x" not in sentence

