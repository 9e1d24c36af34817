"""The serving what-if behind ``diagnose serve``: both policies at every batch cap and
request rate, the highest rate each can serve within an SLO, and the pick.

Example:
    >>> from batchscope.serving.whatif import WhatIfOptions, what_if
    >>> result = what_if(json.load(open("report.json")), WhatIfOptions(rates_per_s=[1, 2]))
    >>> result["recommendation"]["sentence"]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import lru_cache
from typing import Any

from batchscope.errors import UsageError
from batchscope.serving.metrics import ServingMetrics, Slo, summarize_simulation
from batchscope.serving.requests import (
    Request,
    TokenRange,
    check_rate,
    poisson_stream,
    scaled_trace,
    trace_rate_per_s,
)
from batchscope.serving.simulator import Policy, simulate
from batchscope.serving.step_time import StepTimeModel, fit_step_time

Doc = dict[str, Any]

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
MAX_REQUESTS = 100_000
# A server taking more requests per second than this is not one a CPU or GPU step time gives.
MAX_RATE_PER_S = 1e9
# Continuous batching within this factor of static's throughput is "about the same".
SAME_THROUGHPUT = 1.05


@dataclass
class WhatIfOptions:
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

    def validate(self) -> None:
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
    def __init__(self, model: StepTimeModel, options: WhatIfOptions, kv_tokens: int | None,
                 prompt: TokenRange):
        self.model, self.options, self.kv_tokens, self.prompt = model, options, kv_tokens, prompt
        # Every simulation of one what-if asks for the same (rows, context) steps again.
        self.step_s = lru_cache(maxsize=None)(model.step_s)
        per_token = options.prefill_s_per_token
        self.prefill = (lambda p: p * per_token) if per_token > 0 else None

    def stream(self, rate_per_s: float) -> list[Request]:
        o = self.options
        if o.trace is not None:
            return scaled_trace(o.trace, rate_per_s)
        return poisson_stream(rate_per_s, o.requests, self.prompt, o.output_tokens, o.seed)

    def run(self, policy: Policy, cap: int, rate_per_s: float) -> ServingMetrics:
        try:
            sim = simulate(self.stream(rate_per_s), policy, cap, self.step_s,
                           self.kv_tokens, self.prefill)
        except ValueError as exc:  # a step time out of range: the report's numbers are not
            raise UsageError(f"the report's step times cannot be simulated: {exc}.") from None
        return summarize_simulation(sim, self.options.slo)

    def max_rate_within_slo(self, policy: Policy, cap: int, high: float) -> float | None:
        """The highest offered rate whose run meets the SLO (bisection; None: not even at
        the lowest rate tried)."""
        low = high / 64
        if not self.run(policy, cap, low).slo_met:
            return None
        while self.run(policy, cap, high).slo_met:
            low, high = high, high * 2
            if high > 1e6:
                return low
        for _ in range(SLO_SEARCH_STEPS):
            mid = (low * high) ** 0.5
            low, high = (mid, high) if self.run(policy, cap, mid).slo_met else (low, mid)
        return low


def _kv_capacity(doc: Doc, model: StepTimeModel, options: WhatIfOptions
                 ) -> tuple[int | None, int | None, str]:
    if model.kv_bytes_per_token is None or model.kv_bytes_per_token <= 0:
        return None, options.kv_memory_bytes, "the report does not say how large the KV cache is"
    if options.kv_memory_bytes is not None:
        budget, source = options.kv_memory_bytes, "--kv-memory"
    else:
        info = doc.get("model") or {}
        free, weights = info.get("available_memory_bytes"), info.get("parameter_bytes") or 0
        if not isinstance(free, (int, float)) or free <= 0:
            return None, None, "the report does not say how much memory was free"
        budget = int(max(free - weights, 0) * KV_SHARE_OF_FREE)
        source = (f"{KV_SHARE_OF_FREE:.0%} of the memory the sweep found free beside the "
                  "weights")
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


def _row(policy: Policy, cap: int, rate: float, m: ServingMetrics) -> Doc:
    return {"policy": policy.value, "cap": cap, "rate_per_s": rate, **m.to_dict()}


def _best(runs: list[Doc], policy: Policy) -> Doc | None:
    """The cap with the most throughput at the highest rate offered, fewest rows on a tie."""
    mine = [r for r in runs if r["policy"] == policy.value]
    if not mine:
        return None
    top = max(r["rate_per_s"] for r in mine)
    at_top = [r for r in mine if r["rate_per_s"] == top]
    best = max(r["throughput_tokens_per_s"] for r in at_top)
    return min((r for r in at_top if r["throughput_tokens_per_s"] >= 0.99 * best),
               key=lambda r: r["cap"])


def what_if(doc: Doc, options: WhatIfOptions | None = None) -> Doc:
    """Simulate both policies on ``doc``'s step times; everything ``diagnose serve``
    renders, as JSON-ready data."""
    options = options or WhatIfOptions()
    options.validate()
    model = fit_step_time(doc, options.context)
    prompt = options.prompt_tokens or TokenRange(model.base_context, model.base_context)
    kv_tokens, kv_bytes, kv_source = _kv_capacity(doc, model, options)
    caps = _caps(model, options)
    runner = _Runner(model, options, kv_tokens, prompt)
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
    runs = [_row(policy, cap, rate, runner.run(policy, cap, rate))
            for policy in Policy for cap in caps for rate in rates]
    best = {p.value: _best(runs, p) for p in Policy}
    slo_rates: list[Doc] = []
    if options.slo.given:
        for policy in Policy:
            for cap in caps:
                slo_rates.append({"policy": policy.value, "cap": cap, "max_rate_per_s":
                                  runner.max_rate_within_slo(policy, cap, saturated)})
    result: Doc = {
        "schema": 1,
        "target": (doc.get("model") or {}).get("target"),
        "unit": (doc.get("model") or {}).get("unit") or "token",
        "step_time": model.to_dict(),
        "stream": {
            "kind": "trace" if options.trace is not None else "poisson",
            "requests": len(options.trace) if options.trace is not None else options.requests,
            "prompt_tokens": None if options.trace is not None else str(prompt),
            "output_tokens": None if options.trace is not None else str(options.output_tokens),
            "mean_prompt_tokens": mean_prompt, "mean_output_tokens": mean_out,
            "trace_rate_per_s": trace_rate_per_s(options.trace) if options.trace else None,
            "seed": options.seed,
        },
        "kv_capacity_tokens": kv_tokens, "kv_memory_bytes": kv_bytes, "kv_memory_source": kv_source,
        "prefill_s_per_token": options.prefill_s_per_token,
        "slo": {"ttft_s": options.slo.ttft_s, "tpot_s": options.slo.tpot_s},
        "saturated_rate_per_s": saturated,
        "rates_per_s": rates, "caps": caps,
        "runs": runs, "best": best, "max_rate_within_slo": slo_rates,
    }
    result["recommendation"] = recommend(result, options.slo)
    if not _finite(result):  # a hostile report whose times overflow somewhere on the way
        raise UsageError("the report's step times give figures out of any real range (a "
                         "time or size that overflows).")
    return result


def _finite(value: Any) -> bool:
    """Every number in ``value`` finite (JSON can hold it)."""
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


def _rows(n: int) -> str:
    return f"{n} row" if n == 1 else f"{n} rows"


def recommend(result: Doc, slo: Slo) -> Doc:
    """The policy and cap to serve with, and the sentence saying why."""
    if slo.given:
        feasible = [r for r in result["max_rate_within_slo"] if r["max_rate_per_s"]]
        if not feasible:
            return {"policy": None, "cap": None, "max_rate_per_s": None,
                    "sentence": f"No batch cap meets {slo.describe()} under either policy, "
                                "even at a light load: every step is slower than the target."}
        top = max(r["max_rate_per_s"] for r in feasible)
        pick = min((r for r in feasible if r["max_rate_per_s"] >= 0.99 * top),
                   key=lambda r: (r["policy"] != "continuous", r["cap"]))
        other = [r for r in feasible if r["policy"] != pick["policy"]]
        other_best = max((r["max_rate_per_s"] for r in other), default=None)
        sentence = (f"The highest rate with {slo.describe()} is {pick['max_rate_per_s']:.3g} "
                    f"requests/s, with {pick['policy']} batching capped at {_rows(pick['cap'])}")
        if other_best:
            sentence += (f"; {other[0]['policy']} batching reaches at most "
                         f"{other_best:.3g} requests/s ({pick['max_rate_per_s'] / other_best:.2g}x "
                         "less)" if pick['max_rate_per_s'] > other_best else "")
        return {"policy": pick["policy"], "cap": pick["cap"],
                "max_rate_per_s": pick["max_rate_per_s"], "sentence": sentence + "."}
    cont, stat = result["best"]["continuous"], result["best"]["static"]
    ratio = (cont["throughput_tokens_per_s"] / stat["throughput_tokens_per_s"]
             if stat and stat["throughput_tokens_per_s"] else None)
    sentence = (f"At the highest rate offered ({cont['rate_per_s']:.3g} requests/s), continuous "
                f"batching capped at {_rows(cont['cap'])} serves "
                f"{cont['throughput_tokens_per_s']:.3g} tokens/s")
    if ratio is not None and ratio < SAME_THROUGHPUT:
        sentence += (f", about what static batching serves at its best cap ({stat['cap']}: "
                     f"{stat['throughput_tokens_per_s']:.3g}): with these step times the policy "
                     "changes little")
    elif ratio is not None:
        sentence += (f", {ratio:.2f}x the {stat['throughput_tokens_per_s']:.3g} of static "
                     f"batching at its best cap ({stat['cap']})")
    return {"policy": "continuous", "cap": cont["cap"], "max_rate_per_s": None,
            "sentence": sentence + "."}
