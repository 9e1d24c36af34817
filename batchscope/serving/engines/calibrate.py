"""``diagnose serve --engine``'s calibration: a short, bounded run of the real engine on the
report's own model, and the model's prefill timed at the stream's prompt lengths.

At each calibration cap each policy serves ``REQUESTS_PER_CAP × cap`` requests drawn from
the stream (their prompt lengths, outputs cut to ``max_output_tokens``), all arriving at
once, ``repeats`` times, interleaved, and again (up to ``MAX_REPEATS`` times) where its two
fastest repeats differ by more than ``STABLE_SPREAD``; :mod:`batchscope.serving.engine_cost`
keeps the fastest and fits the engine's cost from them. The calibration caps are the smallest, the
largest and the middle of the caps the what-if tries, and 1: a server under a light load
runs many steps of a row or two, where an engine's own cost weighs most (held flat below
the smallest cap calibrated, the cost of a step of 1-3 rows came out 20-30% short in the
first benchmark on Poisson streams).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

from batchscope.engine.clock import HostClock
from batchscope.engine.policies import Settled
from batchscope.engine.timer import Run
from batchscope.errors import UsageError
from batchscope.records.engine import Engine, PrefillPoint
from batchscope.records.policy import Policy
from batchscope.serving.engines.runs import EngineMeasurement, EngineRun
from batchscope.serving.requests import Request

# Each calibration run serves this many full batches at its cap.
REQUESTS_PER_CAP = 2
# A calibration request generates at most this many tokens (the run stays short; cut far
# below the stream's own, its contexts would be shorter than the stream's).
MAX_OUTPUT_TOKENS = 64
REPEATS = 2
# A run whose two fastest repeats are further apart than this is run again (interleaved with
# the others that are), up to MAX_REPEATS in all: on a shared machine a slow window can take
# both first repeats of one run, and the simulation would inherit it (in one benchmark run a
# calibration's repeats were 46% apart and every simulated figure of that stream came out
# 6-20% slow).
STABLE_SPREAD = 0.10
MAX_REPEATS = 4
# That rule, as the engine's stop policy (measure_engine sets the repeats it is given).
SETTLED = Settled(REPEATS, MAX_REPEATS, spread_rel=STABLE_SPREAD)
MAX_CALIBRATION_CAPS = 3
# Engines that need a GPU and are not run here: one sentence, not a traceback.
GPU_ENGINES = frozenset({Engine.VLLM, Engine.SGLANG})


def calibration_caps(caps: list[int]) -> list[int]:
    """1, and the smallest, the middle and the largest of ``caps`` (fewer when fewer are
    tried)."""
    ordered = sorted(set(caps))
    if len(ordered) > MAX_CALIBRATION_CAPS:
        ordered = [ordered[0], ordered[len(ordered) // 2], ordered[-1]]
    return sorted({1, *ordered})


def calibration_requests(stream: list[Request], cap: int, max_output_tokens: int
                         ) -> list[Request]:
    """``REQUESTS_PER_CAP × cap`` requests of ``stream`` (from its start, round again if it
    is shorter), all arriving at 0, outputs cut to ``max_output_tokens``."""
    count = REQUESTS_PER_CAP * cap
    return [Request(0.0, r.prompt_tokens, min(r.output_tokens, max_output_tokens))
            for r in (stream[i % len(stream)] for i in range(count))]


def prompt_lengths(stream: list[Request]) -> list[int]:
    """The stream's shortest, median and longest prompt: where prefill is timed."""
    prompts = sorted(r.prompt_tokens for r in stream)
    return sorted({prompts[0], prompts[len(prompts) // 2], prompts[-1]})


def _driver(engine: Engine) -> Any:
    if engine in GPU_ENGINES:
        raise UsageError(f"--engine {engine.value} is not supported yet: batchscope runs "
                         f"{engine.value} only where it is installed with a GPU, and "
                         "that path has not been built; --engine transformers runs on the CPU.")
    from batchscope.serving.engines import transformers_engine

    return transformers_engine


def measure_prefill(target: str, stream: list[Request]) -> list[PrefillPoint] | None:
    """The model's prefill at the stream's prompt lengths, where the report names a model
    that can be built here (``hf:``, or a file with ``build_engine_model()``); None where it
    names none."""
    from batchscope.serving.engines import transformers_engine

    try:
        model = transformers_engine.load_engine_model(target)
    except UsageError:  # no build_engine_model(), or the file is gone: prefill not charged
        return None
    return transformers_engine.time_prefill(model, prompt_lengths(stream))


def settled(runs: list[EngineRun], policy: Policy, cap: int) -> bool:
    """Whether the two fastest of the runs of ``policy`` at ``cap`` agree within
    :data:`STABLE_SPREAD` (one run alone: not settled)."""
    return SETTLED.agree([r.span_s for r in runs if r.policy == policy and r.cap == cap])


def measure_engine(engine: Engine, target: str, stream: list[Request], caps: list[int],
                   max_output_tokens: int = MAX_OUTPUT_TOKENS,
                   repeats: int = REPEATS, max_repeats: int = MAX_REPEATS,
                   after_round: Callable[[Any], None] | None = None) -> EngineMeasurement:
    """Run ``engine`` on ``target``'s model at the calibration caps: ``repeats`` rounds of
    every policy and cap, then more rounds of the runs whose two fastest repeats are not
    yet :func:`settled`, up to ``max_repeats`` runs of each.

    ``after_round(model)``, where given, runs after each round on the engine's model (the
    benchmark interleaves its own check with the calibration this way, so the machine's
    drift over minutes weighs on both alike); its time is not the calibration's
    (``wall_s``).

    Raises:
        UsageError: the engine is not available here, or the report names no model it can
            serve.
    """
    driver = _driver(engine)
    clock = HostClock()
    started = clock.now()
    model = driver.load_engine_model(target)

    def serve(policy: Policy, requests: list[Request], cap: int) -> EngineRun:
        try:
            return driver.serve(model, policy, requests, cap)  # type: ignore[no-any-return]
        except UsageError:
            raise
        except Exception as exc:  # noqa: BLE001 - the engine's own failure: one sentence
            first = (str(exc).strip().splitlines() or [""])[0][:200]
            raise UsageError(f"{engine.value} failed serving the calibration's {policy.value} "
                             f"batches at cap {cap}: {type(exc).__name__}: {first}") from None

    prefill = driver.time_prefill(model, prompt_lengths(stream))
    warm_up = calibration_requests(stream, 1, 2)
    for policy in Policy:  # one-time costs (first calls, lazy imports) out of the timings
        serve(policy, warm_up, 1)
    # Each policy and cap is a run of the engine's timer under the settling rule, its
    # samples the engine runs' spans; a round serves every one not yet over, in turn.
    rule = dataclasses.replace(SETTLED, min_repeats=max(repeats, 1),
                               max_repeats=max(max_repeats, repeats, 1))
    going = {(policy, cap): Run(rule, clock.now())
             for cap in calibration_caps(caps) for policy in Policy}
    runs: list[EngineRun] = []
    elsewhere_s = 0.0
    while going:
        for (policy, cap), timed in list(going.items()):
            run = serve(policy, calibration_requests(stream, cap, max_output_tokens), cap)
            runs.append(run)
            if timed.add(run.span_s, clock.now()):
                del going[(policy, cap)]
        if after_round is not None:
            elsewhere_s += clock.time(functools.partial(after_round, model))[0]
    return EngineMeasurement(engine=engine, engine_version=driver.engine_version(), runs=runs,
                             prefill=prefill, max_output_tokens=max_output_tokens,
                             repeats=repeats, wall_s=clock.now() - started - elsewhere_s)
