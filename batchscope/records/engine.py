"""report.json ``serving.what_if.engine`` and ``serving.what_if.prefill``: what a real
serving engine costs beyond the model's forward step, measured by running it
(``diagnose serve --engine``), and the prefill cost charged at admission.

The serving simulator charges a decode step ``T(rows, context)`` from the sweep. A real
engine adds its own work to every step (scheduling, paged-cache bookkeeping, padding its
token batch, Python between steps): :class:`EngineCost` is that, per step, fitted over the
calibration runs (:class:`CalibrationPoint`), one line in the step's rows per policy.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from enum import Enum

from batchscope.records.policy import Policy


class Engine(str, Enum):
    """A serving engine whose cost ``diagnose serve --engine`` measures."""

    TRANSFORMERS = "transformers"  # generate() (static) and generate_batch's manager
    VLLM = "vllm"
    SGLANG = "sglang"


class PrefillSource(str, Enum):
    """Where the prefill charged at admission came from."""

    NOT_TIMED = "not_timed"  # not looked for (a sweep's own first look): not charged
    NONE = "none"  # no model to time it on here: not charged, the prompt's KV taken as ready
    OPTION = "option"  # --prefill-ms-per-token
    MODEL = "model"  # timed on the report's own model at the stream's prompt lengths
    PREDICTED = "predicted"  # a --target-gpu report: predicted on its GPU, nothing timed


@dataclass(frozen=True)
class PrefillPoint:
    """One timed prefill: a batch of one prompt of ``prompt_tokens`` tokens."""

    prompt_tokens: int
    measured_s: float  # median of the repeats


@dataclass(frozen=True)
class PrefillFit:
    """Prefill of one prompt: ``fixed_s + per_token_s × prompt_tokens``, charged at
    admission, blocking the batch."""

    source: PrefillSource
    fixed_s: float = 0.0
    per_token_s: float = 0.0
    points: list[PrefillPoint] = field(default_factory=list)
    worst_error: float | None = None  # largest |fitted / measured - 1| over the points

    def prefill_s(self, prompt_tokens: int) -> float:
        return max(self.fixed_s + self.per_token_s * prompt_tokens, 0.0)

    @property
    def charged(self) -> bool:
        return self.source != PrefillSource.NONE and (self.fixed_s > 0 or self.per_token_s > 0)


@dataclass(frozen=True)
class EngineCostPoint:
    """What the engine added to each step of one calibration run, at its mean rows."""

    rows: float
    extra_s: float  # negative where the engine's step is faster than the sweep's


@dataclass(frozen=True)
class EngineCost:
    """What one policy's engine adds to every decode step, by the step's rows: linear
    between its points (one per calibration run, at its mean rows), flat beyond them."""

    policy: Policy
    points: list[EngineCostPoint]

    def step_s(self, rows: float) -> float:
        pts = self.points
        if not pts:
            return 0.0
        if rows <= pts[0].rows:
            return pts[0].extra_s
        for low, high in itertools.pairwise(pts):
            if rows <= high.rows:
                share = (rows - low.rows) / (high.rows - low.rows)
                return low.extra_s + (high.extra_s - low.extra_s) * share
        return pts[-1].extra_s


@dataclass(frozen=True)
class EngineStepPoint:
    """The engine's decode forward calls at one number of rows, in the calibration's
    fastest runs."""

    rows: int
    forwards: int  # decode calls at these rows
    fixed_s: float  # their median time beyond ``per_kv_token_s`` x the KV positions read


@dataclass(frozen=True)
class EngineStep:
    """The engine's own decode step, timed on its forward calls: at each number of rows
    its calls held, the median call (less the KV it read), linear between those rows and
    beyond the largest, flat below the smallest; plus ``per_kv_token_s`` for every KV
    position read (rows x context)."""

    policy: Policy
    per_kv_token_s: float
    points: list[EngineStepPoint]

    def step_s(self, rows: int, context: int) -> float:
        pts = self.points
        if not pts:
            raise ValueError("an engine step with no timed forward call")
        kv_s = self.per_kv_token_s * rows * context
        if rows <= pts[0].rows or len(pts) == 1:
            return pts[0].fixed_s + kv_s
        low, high = next(((a, b) for a, b in itertools.pairwise(pts) if rows <= b.rows),
                         (pts[-2], pts[-1]))
        fixed = low.fixed_s + (high.fixed_s - low.fixed_s) * (rows - low.rows) \
            / (high.rows - low.rows)
        if rows > high.rows:  # beyond the largest rows timed: never below that step
            fixed = max(fixed, high.fixed_s)
        return fixed + kv_s


@dataclass(frozen=True)
class CalibrationPoint:
    """One calibration run: the real engine on requests that all arrive at once, beside the
    simulation of the same requests without and with the engine's fitted cost."""

    policy: Policy
    cap: int
    requests: int
    output_tokens: int  # generated, all requests
    measured_s: float  # first arrival to last finish, wall clock
    engine_forward_calls: int  # the model's forward calls the engine made
    model_forward_s: float  # wall time inside those calls
    startup_s: float  # the engine's set-up before the first request, not in measured_s
    simulated_steps: int
    model_only_s: float  # simulated with the sweep's step times (and prefill) alone
    simulated_s: float  # simulated with the engine's fitted cost added
    mean_rows: float  # rows per simulated step
    measured_tokens_per_s: float
    simulated_tokens_per_s: float  # with the engine's cost
    error: float  # simulated throughput over measured, minus 1
    engine_share: float  # the share of measured_s the sweep's step times do not account for
    # The second-fastest of the run's repeats over the fastest, minus 1: how far the figure
    # kept would move with the next best run of the same requests on this machine (None: a
    # single run, no repeat to compare).
    repeat_spread: float | None = None
    runs: int | None = None  # the repeats run, more where the first two were far apart
    # (None: a record from before they were counted)
    # Simulated on the engine's own decode step (:class:`EngineStep`) and the prefill alone:
    # how much of the run its own forward calls account for (None: none was timed).
    engine_step_only_s: float | None = None


@dataclass(frozen=True)
class EngineCalibration:
    """The engine's measured cost, as ``diagnose serve --engine`` adds it to the simulation."""

    engine: Engine
    engine_version: str
    costs: list[EngineCost]
    points: list[CalibrationPoint]
    max_output_tokens: int  # each calibration request generated at most this many
    repeats: int  # runs of each policy and cap at least; the fastest is kept (noise only adds
    # time); a run whose two fastest differed by over 10% was run again (points[].runs)
    wall_s: float  # the calibration's own time, warm-up and prefill timing included
    # The engine's own decode step per policy, from its timed forward calls (empty in a
    # record from before they were kept); recorded beside the fit, not simulated on.
    steps: list[EngineStep] = field(default_factory=list)

    def step(self, policy: Policy) -> EngineStep | None:
        return next((s for s in self.steps if s.policy == policy), None)

    def cost(self, policy: Policy) -> EngineCost | None:
        return next((c for c in self.costs if c.policy == policy), None)

    def worst_error(self) -> float | None:
        return max((abs(p.error) for p in self.points), default=None)

    def noise(self) -> CalibrationPoint | None:
        """The calibration point whose repeats differed most: its ``repeat_spread`` is how
        far an identical run moved here, the least uncertainty of every simulated figure
        (None without repeats)."""
        spread = [p for p in self.points if p.repeat_spread is not None]
        return max(spread, key=lambda p: p.repeat_spread or 0.0, default=None)
