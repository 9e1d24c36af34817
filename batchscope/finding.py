"""A batch-size finder inside the user's own process: the sweep's plan, timer, assembler and
pick, driven through a trainer that owns the model.

A trainer (Lightning's fit loop, the Hugging Face Trainer, a decorated training function)
owns the model, its optimizer, its precision and its strategy, so the finder cannot measure
in the sweep's worker processes. It runs *trials* instead: the trainer's own loop at one
batch size, the loop's steps pushed into a :class:`TrialTimer` (a warm-up, each step timed
alone to size the blocks, then the engine's :class:`~batchscope.engine.timer.PushTimer`
under the sweep's stop policy, with peak memory from the first step and the device's
monitors over the timed ones, as ``watch`` does), until the policy has its samples and the
trainer is told to end the trial. :class:`Finder` drives the trials:

- which batch size next and when to stop is :class:`batchscope.plan.Plan` (OOM, limits,
  the plateau, the cap, repeated errors), a size predicted not to fit in memory skipped
  as the sweep skips it (:func:`batchscope.plan.predicted_not_to_fit`);
- once the plan ends, the sweep's decision rounds (:class:`batchscope.profiler.rounds_run.
  RoundsRun`: the candidates near the bar, one short trial each a round in a shuffled order,
  the pick read from within-round ratios) run in this process, one trial a block (no fresh
  worker: the trainer's process is the only one); their timings against the plan's are the
  drift that widens every interval;
- the report is the one assembler's (:func:`batchscope.assemble.assemble`), and the pick is
  its recommendation (``mode="fastest"``) or the largest size that ran, less a margin
  (``mode="largest"``: what Lightning's ``BatchSizeFinder`` returns).

A trial that runs out of memory is caught in this process (``torch.OutOfMemoryError``, a
RuntimeError saying so, a host ``MemoryError``); the trainer's adapter frees what it can
(:func:`batchscope.profiler.trial_state.free_memory`) and the plan stops going up, as after
a worker's OOM. Under a data-parallel strategy every process runs every trial (the steps
hold their collectives); rank 0 times them and decides, and a :class:`Coordinator` hands
each decision (the next size, the end of a trial, the pick) to the other ranks.

Example:
    >>> finder = Finder(FinderOptions(batch_sizes=[1, 2, 4]), torch.device("cpu"))  # doctest: +SKIP
    >>> outcome = finder.run(trial, describe, integration, "the batch_size")  # doctest: +SKIP
    >>> outcome.batch_size, outcome.report.recommendation  # doctest: +SKIP
"""

from __future__ import annotations

import dataclasses
import random
import time
from collections.abc import Callable
from contextlib import suppress
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

import torch

from batchscope.assemble import Measured, assemble
from batchscope.engine.timer import Warmup
from batchscope.errors import UsageError
from batchscope.plan import Limits, Plan, over_limits, predicted_not_to_fit
from batchscope.profiler.device import DeviceBackend, PushedSteps, backend
from batchscope.profiler.measurement import TimedSteps, record_timing
from batchscope.profiler.memory import PeakMemory, available_bytes
from batchscope.profiler.model_info import parameter_bytes, parameter_count
from batchscope.profiler.outcome import classify_exception
from batchscope.profiler.protocol import MeasureBatch
from batchscope.profiler.rounds_run import RoundsRun, rounds_drift
from batchscope.profiler.timing import TimingConfig
from batchscope.records import (
    BatchResult,
    DriftControl,
    Flag,
    ModelInfo,
    Report,
    RunInfo,
    Source,
    Status,
    Stop,
)
from batchscope.records.flag_payloads import DataRowsStop, FinderSet
from batchscope.records.report import IntegrationInfo, Mode
from batchscope.records.rounds import DecisionRounds
from batchscope.rounds import measured
from batchscope.tracebacks import describe_exception
from batchscope.version import __version__

FASTEST, LARGEST = "fastest", "largest"
MODES = (FASTEST, LARGEST)
# Lightning's BatchSizeFinder's max_val: the largest batch size a trial may try.
DEFAULT_MAX_VAL = 8192
# Steps of a trial before its timed ones, at least: the first step at a new batch size
# allocates (the optimizer's state at the very first) and autotunes; the second sizes the
# blocks of fast steps. The timing pass's WARMUP_MIN_S holds too.
TRIAL_WARMUP_STEPS = 2
T = TypeVar("T")


@dataclass(frozen=True)
class FinderOptions:
    """What a finder tries and how it picks.

    Attributes:
        mode: "fastest" (the recommendation: the smallest batch within noise of the best
            throughput, with its equivalent set) or "largest" (the largest batch that ran,
            less ``margin``: Lightning's ``BatchSizeFinder``'s answer).
        max_batch: the largest batch size a trial may try (``max_val``).
        batch_sizes: the sizes to try, in place of the plan's powers of two.
        margin: ``mode="largest"``: the share taken off the largest batch that ran.
        latency_limit_s, memory_budget_bytes: the sweep's limits; a size over one is
            never picked, and the plan stops going up there.
        timing: the timing pass's options (its stop policy; ``TimingConfig.fixed`` for a
            fixed time per size).
        warmup_steps: steps of each trial before its timed ones, at least.
        rounds: decide from the sweep's decision rounds once the plan ends
            (``mode="fastest"``): the sizes near the bar timed in short interleaved trials,
            the pick read from within-round ratios.
        unit: what one row yields ("sample", "token", "image").
        units_per_row: units one row yields (a sequence of 128 tokens: 128).
    """

    mode: str = FASTEST
    max_batch: int = DEFAULT_MAX_VAL
    batch_sizes: list[int] | None = None
    margin: float = 0.0
    latency_limit_s: float | None = None
    memory_budget_bytes: int | None = None
    timing: TimingConfig = field(default_factory=TimingConfig)
    warmup_steps: int = TRIAL_WARMUP_STEPS
    rounds: bool = True
    unit: str = "sample"
    units_per_row: int = 1

    def check(self) -> None:
        """One sentence for an option the finder cannot use.

        Raises:
            UsageError: an unknown mode, a margin outside [0, 1), a size below 1, an empty
                unit or a warm-up of no step.
        """
        if self.mode not in MODES:
            raise UsageError(f"mode must be one of {', '.join(MODES)}, not {self.mode!r}.")
        if not 0.0 <= self.margin < 1.0:
            raise UsageError(f"margin must be at least 0 and under 1, not {self.margin!r}.")
        sizes = [self.max_batch, *(self.batch_sizes or [])]
        if any(isinstance(b, bool) or not isinstance(b, int) or b < 1 for b in sizes):
            raise UsageError(f"batch sizes must be whole numbers of at least 1: {sizes!r}.")
        if self.warmup_steps < 1:
            raise UsageError(f"warmup_steps must be at least 1, not {self.warmup_steps!r}.")
        if not isinstance(self.unit, str) or not self.unit.strip():
            raise UsageError(f"unit must name what one row yields, not {self.unit!r}.")

    @property
    def limits(self) -> Limits:
        return Limits(max_batch=self.max_batch, latency_limit_s=self.latency_limit_s,
                      memory_budget_bytes=self.memory_budget_bytes)


class TooFewRows(Exception):
    """A trial's batch from the training data held fewer rows than its batch size (the data
    has fewer rows): larger sizes cannot be drawn either."""

    def __init__(self, batch_size: int, rows: int) -> None:
        super().__init__(f"batch {batch_size} drew {rows} rows")
        self.batch_size, self.rows = batch_size, rows


class Coordinator(Protocol):
    """How the processes of a data-parallel run agree: rank 0 (the leader) decides, and
    :meth:`share` hands its value to every process (the leader gets its own back)."""

    @property
    def leader(self) -> bool: ...

    def share(self, value: T) -> T: ...


class Alone:
    """One process: it leads, and shares with nobody."""

    leader = True

    def share(self, value: T) -> T:
        return value


class TrialTimer:
    """The timed steps of one trial, pushed by a loop that is not ours.

    Each :meth:`step` is the end of one step of the loop (the first from the trial's start).
    The first ``warmup_steps`` steps, and as many more as the warm-up's least time asks, are
    timed one by one (they size the blocks of fast steps); then the device's
    :class:`~batchscope.profiler.device.PushedSteps` times blocks under the timing's stop
    policy. Peak memory spans the trial from its first step.
    """

    def __init__(self, batch_size: int, device: DeviceBackend, options: FinderOptions,
                 timing: TimingConfig | None = None) -> None:
        self.batch_size = batch_size
        self._device, self._options = device, options
        self._timing = timing or options.timing  # a round's block, else the timing pass
        self._warmup = Warmup(options.warmup_steps, self._timing.warmup_min_s)
        self._clock = device.host_clock
        self._memory: PeakMemory | None = device.peak_memory()
        self._memory.start()
        self._started = self._last = self._clock.now()
        self._warmup_s: list[float] = []
        self._pushed: PushedSteps | None = None
        self._block_began = 0.0
        self._timed: TimedSteps | None = None
        self.steps = 0
        self.done = False

    def step(self) -> bool:
        """One step of the loop ended; True once the trial has its samples (the loop should
        stop: further steps are not timed)."""
        if self.done:
            return True
        self.steps += 1
        pushed = self._pushed
        if pushed is None:
            self._device.sync()
            now = self._clock.now()
            self._warmup_s.append(now - self._last)
            self._last = now
            if (len(self._warmup_s) >= self._warmup.min_steps
                    and now - self._started >= self._warmup.min_s):
                policy = self._device.timing(self._timing).policy()
                self._pushed = self._device.push(policy, self._warmup_s, self._memory)
                self._memory = None  # the pushed steps stop it
                self._block_began = self._clock.now()
            return False
        if not pushed.timer.closes_sample():
            return False
        self._device.sync()
        now = self._clock.now()
        self.done = pushed.timer.add(self._block_began, now)
        self._block_began = now
        return self.done

    def close(self) -> TimedSteps | None:
        """Stop the monitors and the memory reading; what was timed (None: no block)."""
        if self._pushed is not None:
            self._timed, self._pushed = self._pushed.stop(), None
        if self._memory is not None:
            self._memory.stop()
            self._memory = None
        return self._timed

    def result(self, units_per_row: int = 1) -> BatchResult:
        """The trial's result: its timing, or a model error where the loop ended before
        one timed sample (too few steps in it)."""
        timed = self.close()
        if timed is None:
            return BatchResult(
                self.batch_size, Status.MODEL_ERROR,
                error=(f"the training loop ran {self.steps} steps at batch "
                       f"{self.batch_size}, too few to warm up and time one sample"),
                available_memory_bytes=available_bytes(self._device.device))
        result = record_timing(BatchResult(self.batch_size, Status.OK), timed, units_per_row)
        return dataclasses.replace(result,
                                   available_memory_bytes=available_bytes(self._device.device))

    def failed(self, exc: BaseException) -> BatchResult:
        """The trial's result where ``exc`` ended it: an OOM (the plan stops going up), or
        another failure of the step."""
        self.close()
        status, label = classify_exception(exc)
        return BatchResult(self.batch_size, status, error=f"{label}{describe_exception(exc)}",
                           available_memory_bytes=available_bytes(self._device.device))


def is_oom(exc: BaseException) -> bool:
    """Whether a trial's exception is the memory running out (the sweep's rule)."""
    return classify_exception(exc)[0] == Status.OOM


@dataclass(frozen=True)
class FinderOutcome:
    """What a finder found: the batch size it picked (None where nothing ran), the report
    (None on a rank other than 0), and every result of the plan in order."""

    batch_size: int | None
    report: Report | None
    results: list[BatchResult] = field(default_factory=list)


def model_info(model: torch.nn.Module, target: str, options: FinderOptions) -> ModelInfo:
    """The trainer's model as the report describes it (a training step)."""
    dtype = next((p.dtype for p in model.parameters()), torch.float32)
    device = next((p.device for p in model.parameters()), torch.device("cpu"))
    return ModelInfo(target=target, mode=Mode.TRAIN, unit=options.unit,
                     units_per_row=options.units_per_row,
                     dtype=str(dtype).replace("torch.", ""), parameters=parameter_count(model),
                     parameter_bytes=parameter_bytes(model), device=str(device),
                     threads=torch.get_num_threads(),
                     available_memory_bytes=available_bytes(device))


Trial = Callable[[int], BatchResult | None]


class Finder:
    """The plan over trials, the control, the report and the pick.

    Args:
        options: what to try and how to pick (:class:`FinderOptions`, checked here).
        device: the device the trainer's model is on (its backend times the trials).
        coordinator: how the processes of a data-parallel run agree (:class:`Alone` if
            None).

    Raises:
        UsageError: an option it cannot use.
    """

    def __init__(self, options: FinderOptions, device: torch.device,
                 coordinator: Coordinator | None = None) -> None:
        options.check()
        self.options = options
        self.device = device
        self.coordinator: Coordinator = coordinator or Alone()
        self.backend = backend(device)
        self.block: TimingConfig | None = None  # while a round's trial runs: its block

    @property
    def leader(self) -> bool:
        return self.coordinator.leader

    def timer(self, batch_size: int) -> TrialTimer | None:
        """A trial's timer on the leader; None on the other ranks (they follow its
        decisions, :meth:`Coordinator.share`)."""
        if not self.leader:
            return None
        return TrialTimer(batch_size, self.backend, self.options, self.block)

    def run(self, trial: Trial, describe: Callable[[], ModelInfo],
            integration: IntegrationInfo, where: str) -> FinderOutcome:
        """Run the plan's trials, the rounds', and pick; every rank calls it.

        Args:
            trial: runs the trainer's loop at a batch size until told to stop; the leader's
                returns the size's result (never raises for an OOM), the others' None. It
                may raise :class:`TooFewRows`.
            describe: the model, for the report (asked once the trials ran).
            integration: the trainer, for the report.
            where: the attribute the pick is set on, for the report ("the datamodule's
                batch_size").
        """
        started = time.monotonic()
        try:
            if not self.leader:
                self._follow(trial)
                self._follow(trial)
                return FinderOutcome(self.coordinator.share(None), None)
            plan, results, measured_at = self._plan(trial)
            rounds, drift = self._rounds(trial, results, measured_at)
            outcome = self._outcome(plan, results, rounds, drift, describe(), integration,
                                    where, time.monotonic() - started)
            self.coordinator.share(outcome.batch_size)
            return outcome
        finally:
            self.backend.close()

    # -- the phases ------------------------------------------------------------------------
    def _follow(self, trial: Trial) -> None:
        """A rank other than 0: run the trials rank 0 asks for until it says no more."""
        while (size := self.coordinator.share(None)) is not None:
            with suppress(TooFewRows):
                trial(size)

    def _plan(self, trial: Trial) -> tuple[Plan, list[BatchResult], dict[int, float]]:
        options = self.options
        plan = Plan(options.batch_sizes, options.limits, measure_all=options.mode == LARGEST)
        results: list[BatchResult] = []
        measured_at: dict[int, float] = {}
        while (size := plan.next_batch(results)) is not None:
            skip = predicted_not_to_fit(results, size, options.memory_budget_bytes)
            if skip is not None:
                results.append(BatchResult(size, Status.SKIPPED, flags=[skip]))
                continue
            self.coordinator.share(size)
            try:
                result = trial(size)
            except TooFewRows as few:
                plan.stop_early(Stop.of(DataRowsStop(rows=few.rows), size))
                break
            if result is not None:
                results.append(result)
                measured_at[size] = time.monotonic()
        self.coordinator.share(None)
        return plan, results, measured_at

    def _rounds(self, trial: Trial, results: list[BatchResult],
                measured_at: dict[int, float]
                ) -> tuple[DecisionRounds | None, DriftControl | None]:
        """The sweep's decision rounds in this process (one trial a block); the rounds and
        the plan's timings against theirs (the drift)."""
        if not self.options.rounds or self.options.mode != FASTEST:
            return None, None
        excluded = {r.batch_size for r in measured(results)
                    if over_limits(r, self.options.limits) is not None}
        rounds = RoundsRun(_TrialBlocks(self, trial), random.SystemRandom().randrange(2**31),
                           workers=1).decide(results, excluded, deadline=None)
        self.coordinator.share(None)
        if rounds is None or not rounds.blocks:
            return rounds, None
        first = measured(results)[0].batch_size
        began = measured_at.get(first, time.monotonic())
        return rounds, rounds_drift(results, rounds.blocks, time.monotonic() - began)

    def _outcome(self, plan: Plan, results: list[BatchResult], rounds: DecisionRounds | None,
                 drift: DriftControl | None, info: ModelInfo,
                 integration: IntegrationInfo, where: str, wall_s: float) -> FinderOutcome:
        run = RunInfo(source=Source.FINDER, tool_version=__version__,
                      torch_version=torch.__version__, wall_s=wall_s, integration=integration,
                      drift=drift, rounds=rounds)
        measured = Measured(model=info, run=run, ceilings=None, results=results,
                            limits=self.options.limits, stop=plan.stop)
        report = assemble(measured)
        size = self.pick(report, results)
        if size is None:
            return FinderOutcome(None, report, results)
        largest = max((r.batch_size for r in results if r.status == Status.OK), default=0)
        flag = Flag.of(FinderSet(
            mode=self.options.mode, batch_size=size, where=where, largest=largest,
            margin=self.options.margin, world=integration.world_size,
            step=integration.step.value))
        return FinderOutcome(size, assemble(dataclasses.replace(measured, flags=[flag])),
                             results)

    def pick(self, report: Report, results: list[BatchResult]) -> int | None:
        """The batch size the mode picks: the recommendation, or the largest that ran less
        the margin; None where no size ran."""
        if self.options.mode == FASTEST:
            rec = report.recommendation
            return rec.batch_size if rec is not None else None
        ran = [r.batch_size for r in results if r.status == Status.OK]
        if not ran:
            return None
        return max(1, int(max(ran) * (1 - self.options.margin)))


class _TrialBlocks:
    """The rounds' host (profiler/rounds_run.RoundsHost) in the trainer's process: a block
    is one short trial at the block's timing; no fresh worker can start here."""

    worker_serial = 1

    def __init__(self, finder: Finder, trial: Trial) -> None:
        self.finder, self.trial = finder, trial

    def request_block(self, request: MeasureBatch) -> BatchResult:
        size = request.batch_size
        self.finder.block = TimingConfig(
            warmup_min_steps=max(request.warmup_steps, 1), warmup_min_s=0.0,
            measure_min_steps=max(request.block_samples, 1),
            measure_min_s=request.block_s or 0.0, measure_max_s=request.block_s or 0.0)
        self.finder.coordinator.share(size)
        try:
            result = self.trial(size)
        except TooFewRows as few:
            return BatchResult(size, Status.MODEL_ERROR,
                               error=f"the training data holds {few.rows} rows")
        finally:
            self.finder.block = None
        return result if result is not None else BatchResult(size, Status.MODEL_ERROR)

    def fresh_worker(self) -> bool:
        return False
