"""The request stream a simulated server is offered: seeded Poisson arrivals or a trace file.

A request arrives at ``arrival_s``, brings ``prompt_tokens`` already in its KV cache when it
is admitted (prefill; see :mod:`batchscope.serving.simulator`) and generates
``output_tokens`` tokens, one per decode step. Bad input raises :class:`UsageError` with one
sentence (exit 4).
"""

from __future__ import annotations

import csv
import json
import math
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchscope.errors import UsageError

# A trace longer than this is not a what-if anyone waits for (each request is simulated at
# every rate and cap); cut it to the first requests.
MAX_TRACE_REQUESTS = 100_000
# One request cannot sensibly ask for more tokens than this (far beyond any context window).
MAX_TOKENS = 10_000_000
_RANGE = re.compile(r"^\s*(\d+)\s*(?:[:\-]\s*(\d+))?\s*$")


@dataclass(frozen=True)
class Request:
    """One request of the stream."""

    arrival_s: float
    prompt_tokens: int
    output_tokens: int


@dataclass(frozen=True)
class TokenRange:
    """Token counts drawn uniformly from ``low`` to ``high`` inclusive (equal: fixed)."""

    low: int
    high: int

    @property
    def mean(self) -> float:
        return (self.low + self.high) / 2

    def draw(self, rng: random.Random) -> int:
        return self.low if self.low == self.high else rng.randint(self.low, self.high)

    def __str__(self) -> str:
        return str(self.low) if self.low == self.high else f"{self.low}:{self.high}"


def parse_token_range(text: str, option: str, minimum: int) -> TokenRange:
    """``"128"`` or ``"16:256"`` -> :class:`TokenRange`, or one sentence naming the option."""
    match = _RANGE.match(text)
    if match is None:
        raise UsageError(f"{option} {text!r} is not a token count such as 128 or a range "
                         "such as 16:256.")
    low = int(match.group(1))
    high = int(match.group(2)) if match.group(2) is not None else low
    if not minimum <= low <= high <= MAX_TOKENS:
        raise UsageError(f"{option} {text!r} must be a range from {minimum} to {MAX_TOKENS:,} "
                         "tokens with the low end first.")
    return TokenRange(low, high)


def check_rate(rate_per_s: float, option: str = "--rate") -> float:
    if not (isinstance(rate_per_s, (int, float)) and math.isfinite(rate_per_s)
            and rate_per_s > 0):
        raise UsageError(f"{option} must be a positive number of requests per second, not "
                         f"{rate_per_s!r}.")
    return float(rate_per_s)


def unit_gaps(count: int, seed: int) -> list[float]:
    """Exponential inter-arrival gaps of a rate-1 Poisson stream. Divided by a rate they give
    that rate's arrivals, so every rate of one what-if sees the same pattern, only faster."""
    rng = random.Random(seed)
    return [rng.expovariate(1.0) for _ in range(count)]


def poisson_stream(rate_per_s: float, count: int, prompt: TokenRange, output: TokenRange,
                   seed: int) -> list[Request]:
    """``count`` requests arriving as a Poisson process of ``rate_per_s``, lengths drawn
    from the ranges; the same seed gives the same stream."""
    check_rate(rate_per_s)
    lengths = random.Random(seed + 1)
    t = 0.0
    stream = []
    for gap in unit_gaps(count, seed):
        t += gap / rate_per_s
        stream.append(Request(t, prompt.draw(lengths), output.draw(lengths)))
    return stream


def _number(row: dict[str, Any], key: str, where: str, integer: bool) -> float:
    value = row.get(key)
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        number = math.nan
    if not math.isfinite(number) or number < 0 or (integer and number != int(number)):
        kind = "a whole number of tokens" if integer else "a time in seconds, 0 or more"
        raise UsageError(f"{where}: {key} must be {kind}, not {value!r}.")
    return number


def _rows(path: Path) -> list[dict[str, Any]]:
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix.lower() == ".csv":
        return list(csv.DictReader(text.splitlines()))
    stripped = text.lstrip()
    if stripped.startswith("["):
        rows = json.loads(text)
    else:  # JSON lines
        rows = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise ValueError("not a list of objects")
    return rows


def load_trace(path: Path) -> list[Request]:
    """A request trace: CSV with a header, a JSON list, or JSON lines, each request with
    ``arrival_s``, ``prompt_tokens`` and ``output_tokens``; sorted by arrival.

    Raises:
        UsageError: unreadable, empty, or a request whose fields are not valid numbers.
    """
    try:
        rows = _rows(path)
    except OSError as exc:
        raise UsageError(f"cannot read the trace {path}: {exc.strerror or exc}.") from None
    except (ValueError, csv.Error) as exc:
        raise UsageError(f"the trace {path} is not CSV, a JSON list or JSON lines of "
                         f"requests ({str(exc)[:80]}).") from None
    if not rows:
        raise UsageError(f"the trace {path} holds no requests.")
    stream = []
    for i, row in enumerate(rows[:MAX_TRACE_REQUESTS]):
        where = f"{path}, request {i + 1}"
        output = int(_number(row, "output_tokens", where, integer=True))
        if not 1 <= output <= MAX_TOKENS:
            raise UsageError(f"{where}: output_tokens must be from 1 to {MAX_TOKENS:,}, "
                             f"not {output}.")
        prompt = int(_number(row, "prompt_tokens", where, integer=True))
        if prompt > MAX_TOKENS:
            raise UsageError(f"{where}: prompt_tokens must be at most {MAX_TOKENS:,}.")
        stream.append(Request(_number(row, "arrival_s", where, integer=False), prompt, output))
    return sorted(stream, key=lambda r: r.arrival_s)


def scaled_trace(trace: list[Request], rate_per_s: float) -> list[Request]:
    """The trace replayed at ``rate_per_s`` requests per second: its arrival gaps stretched
    or squeezed by one factor, its lengths as recorded."""
    check_rate(rate_per_s)
    span = trace[-1].arrival_s - trace[0].arrival_s
    if len(trace) < 2 or span <= 0:
        return list(trace)
    factor = (len(trace) - 1) / span / rate_per_s
    t0 = trace[0].arrival_s
    return [Request((r.arrival_s - t0) * factor, r.prompt_tokens, r.output_tokens)
            for r in trace]


def trace_rate_per_s(trace: list[Request]) -> float | None:
    span = trace[-1].arrival_s - trace[0].arrival_s
    return (len(trace) - 1) / span if len(trace) > 1 and span > 0 else None
