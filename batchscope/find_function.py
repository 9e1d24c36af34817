"""``batchscope.find_batch_size``: accelerate's ``find_executable_batch_size`` decorator,
picking the fastest batch size rather than the largest that fits.

(This module is ``batchscope.find_function``; the package exports its decorator as
``find_batch_size``.)

Example:
    >>> @batchscope.find_batch_size(starting_batch_size=256)  # doctest: +SKIP
    ... def train(batch_size, model, optimizer):
    ...     for x, y in DataLoader(data, batch_size=batch_size, shuffle=True):
    ...         loss_fn(model(x), y).backward(); optimizer.step(); optimizer.zero_grad()
    ...         train.step()
    >>> train.attach(model, optimizer)  # doctest: +SKIP
    >>> train(model, optimizer)  # doctest: +SKIP
    >>> train.batch_size, train.report.recommendation.equivalent_batch_sizes  # doctest: +SKIP

As with accelerate's decorator, the function is the whole training run and takes the batch
size first; the caller leaves it out. Before the run proper, the decorator calls the
function once per batch size of batchscope's plan (a *trial*), and the training loop says
where each step ends: ``train.step()`` (the decorated function's own), or the Hugging Face
Trainer's callback (:class:`batchscope.integrations.hf_trainer.BatchscopeFinderCallback`).
Once the trial's timer has its samples, ``step()`` ends the trial by raising
:class:`TrialDone` out of the function (a ``BaseException``, so an ``except Exception`` in
the loop lets it pass), and the decorator takes the next size, as accelerate takes a smaller
one after an out-of-memory error. An OOM ends its trial too, and the plan stops going up.
Then the function runs once more, at the pick, to its end, and its value is returned.

Everything a trial changes in a model and its optimizers is put back before the next trial
and before the run proper (:class:`batchscope.profiler.trial_state.TrainingState`), where
they are known: ``train.attach(model, optimizer)`` before the call (the Trainer's callback
attaches the Trainer's model and optimizer at its first trial), and the random number
generators always. A loop that builds a fresh model inside the function needs none of it.

Under ``torch.distributed`` (``torchrun``) every process calls the decorated function; the
process group must be up before the call (``torch.distributed.init_process_group()``, or
accelerate's ``PartialState()``): rank 0 times the trials and decides, and every rank takes
its answer (``broadcast_object_list``).
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from contextvars import ContextVar
from pathlib import Path
from typing import Any, TypeVar

import torch

from batchscope.errors import UsageError
from batchscope.finding import (
    DEFAULT_MAX_VAL,
    FASTEST,
    TRIAL_WARMUP_STEPS,
    Finder,
    FinderOptions,
    TrialTimer,
    is_oom,
    model_info,
)
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.trial_state import RngState, TrainingState, free_memory
from batchscope.records import BatchResult, ModelInfo, Report
from batchscope.records.report import IntegrationInfo, WatchedStep
from batchscope.version import __version__

T = TypeVar("T")
INTEGRATION = "find_batch_size"


class TrialDone(BaseException):
    """Raised by a trial's step once its timer has its samples: it ends the decorated
    function's run at that batch size (the decorator catches it)."""


class _DistributedCoordinator:
    """The processes of a ``torch.distributed`` group: rank 0 leads, values are broadcast
    from it (``broadcast_object_list``); one process alone leads and shares nothing."""

    def __init__(self) -> None:
        dist = torch.distributed
        self.world = (dist.get_world_size() if dist.is_available() and dist.is_initialized()
                      else 1)
        self.rank = dist.get_rank() if self.world > 1 else 0

    @property
    def leader(self) -> bool:
        return self.rank == 0

    def share(self, value: T) -> T:
        if self.world <= 1:
            return value
        box = [value]
        torch.distributed.broadcast_object_list(box, src=0)
        shared: T = box[0]
        return shared


class Trial:
    """One batch size's run of the decorated function: its timer (rank 0's; None on the
    other ranks), ended by :meth:`step` once rank 0 says so."""

    def __init__(self, finder: FindBatchSize, batch_size: int, timer: TrialTimer | None,
                 coordinator: _DistributedCoordinator) -> None:
        self.finder, self.batch_size = finder, batch_size
        self.timer, self.coordinator = timer, coordinator

    def step(self) -> None:
        """One step of the loop ended: raise :class:`TrialDone` once rank 0's timer has its
        samples (every rank at the same step)."""
        done = self.timer.step() if self.timer is not None else None
        if self.coordinator.share(done):
            raise TrialDone

    def attach(self, model: torch.nn.Module, optimizer: Any = None) -> None:
        """The run's model and optimizer, kept from the first trial on (their state is put
        back before each later run)."""
        self.finder.attach(model, optimizer)


_current: ContextVar[Trial | None] = ContextVar("batchscope_trial", default=None)


def current_trial() -> Trial | None:
    """The trial the decorated function runs now (None outside one, and in the run proper)."""
    return _current.get()


class FindBatchSize:
    """A training function decorated by :func:`find_batch_size` (see the module).

    Attributes:
        batch_size: the pick of the last call (None before it, or where no size ran: the
            run proper then gets the smallest size of the plan, and fails as its trial did).
        report: its trials' report (rank 0's; None elsewhere).
    """

    def __init__(self, function: Callable[..., Any], options: FinderOptions,
                 out_dir: str | None, device: str) -> None:
        options.check()
        functools.update_wrapper(self, function)
        self.function, self.options, self.out_dir = function, options, out_dir
        self.device = torch.device("cuda" if device == "auto" and torch.cuda.is_available()
                                   else "cpu" if device == "auto" else device)
        self.batch_size: int | None = None
        self.report: Report | None = None
        self._model: torch.nn.Module | None = None
        self._state: TrainingState | None = None

    def attach(self, model: torch.nn.Module, optimizer: Any = None) -> None:
        """The model (and optimizer) the function trains, whose state the trials must leave
        as they found it: taken at the first attach, put back before each later run. A
        model or optimizer attached later is a fresh one each run (a Trainer built in the
        function makes its own optimizer), with nothing to put back."""
        if self._state is None:
            self._model = model
            self._state = TrainingState(model, [optimizer] if optimizer is not None else [])

    def step(self) -> None:
        """Mark the end of one step of the training loop (nothing outside a trial)."""
        trial = current_trial()
        if trial is not None:
            trial.step()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        self._check_call(args)
        coordinator = _DistributedCoordinator()
        finder = Finder(self.options, self.device, coordinator)
        rng = RngState()
        target = getattr(self.function, "__qualname__", "function")
        integration = IntegrationInfo(name=INTEGRATION, version=__version__,
                                      step=WatchedStep.LOOP_STEP, world_size=coordinator.world,
                                      strategy="torch.distributed" if coordinator.world > 1
                                      else None)
        def describe() -> ModelInfo:
            model = self._model if self._model is not None else torch.nn.Module()
            return model_info(model, f"find_batch_size({target})", self.options)

        try:
            outcome = finder.run(self._trial(finder, coordinator, rng, args, kwargs),
                                 describe, integration, "the function's batch_size")
        finally:
            self._put_back(rng)  # a trial's error too leaves the model as it was
        self.batch_size, self.report = outcome.batch_size, outcome.report
        if self.report is not None and self.out_dir is not None:
            from batchscope.reports import write_all

            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            write_all(self.report, self.out_dir)
        size = outcome.batch_size if outcome.batch_size is not None else self._fallback()
        return self.function(size, *args, **kwargs)

    # -- the trials ------------------------------------------------------------------------
    def _trial(self, finder: Finder, coordinator: _DistributedCoordinator, rng: RngState,
               args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        def trial(batch_size: int) -> BatchResult | None:
            self._put_back(rng)
            timer = finder.timer(batch_size)
            token = _current.set(Trial(self, batch_size, timer, coordinator))
            failed: BatchResult | None = None
            try:
                self.function(batch_size, *args, **kwargs)
            except TrialDone:
                pass
            except Exception as exc:
                if not is_oom(exc):  # the function's own error, raised as it is
                    if timer is not None:
                        timer.close()
                    raise
                failed = timer.failed(exc) if timer is not None else None
            finally:
                _current.reset(token)
            # What the run left (a Trainer and its optimizer, an autograd graph) goes now.
            free_memory(self.device)
            if failed is not None or timer is None:
                return failed
            return timer.result(self.options.units_per_row)

        return trial

    def _put_back(self, rng: RngState) -> None:
        if self._state is not None:
            self._state.restore()
        rng.restore()

    def _fallback(self) -> int:
        """The run proper's batch size where no size ran: the smallest the plan tries (it
        fails again in the run, with the function's own error)."""
        return (self.options.batch_sizes or [1])[0]

    def _check_call(self, args: tuple[Any, ...]) -> None:
        """accelerate's guard: the batch size is the decorator's to pass."""
        name = getattr(self.function, "__name__", "the decorated function")
        params = list(inspect.signature(self.function).parameters)
        if not params:
            raise UsageError(f"{name} must take the batch size as its first argument.")
        if len(params) < len(args) + 1:
            raise UsageError(f"{name} got the batch size from its caller: the decorator "
                             "passes it; call it without the first argument.")


def find_batch_size(function: Callable[..., Any] | None = None,
                    starting_batch_size: int = DEFAULT_MAX_VAL, *, mode: str = FASTEST,
                    batch_sizes: list[int] | None = None, margin: float = 0.0,
                    unit: str = "sample", units_per_row: int = 1,
                    out_dir: str | Path | None = None, timing: TimingConfig | None = None,
                    warmup_steps: int = TRIAL_WARMUP_STEPS, rounds: bool = True,
                    device: str = "auto") -> Any:
    """Decorate a training function ``fn(batch_size, *args)`` so that calling it without the
    batch size runs it at the fastest batch size (see the module).

    Args:
        function: the training function (None: used as ``@find_batch_size(...)``).
        starting_batch_size: the largest batch size to try (accelerate's name; the plan
            goes up in powers of two to it).
        mode: "fastest" (batchscope's recommendation) or "largest" (the largest that ran,
            less ``margin``).
        batch_sizes: the sizes to try, in place of the powers of two.
        unit, units_per_row: what one row yields, and how many.
        out_dir: where to write report.json, report.html and summary.md (None: nothing).
        timing: each trial's timing pass.
        warmup_steps: steps of each trial before its timed ones, at least.
        rounds: decide from the sweep's decision rounds (the sizes near the bar timed in
            short interleaved trials, the pick read from within-round ratios).
        device: the device the loop runs on ("auto": CUDA where present, else the CPU).

    Raises:
        UsageError: an option it cannot use.
    """
    options = FinderOptions(mode=mode, max_batch=starting_batch_size,
                            batch_sizes=sorted(batch_sizes) if batch_sizes else None,
                            margin=margin, timing=timing or TimingConfig(),
                            warmup_steps=warmup_steps, rounds=rounds, unit=unit,
                            units_per_row=units_per_row)
    options.check()
    out = None if out_dir is None else str(out_dir)
    if function is None:
        return lambda fn: FindBatchSize(fn, options, out, device)
    return FindBatchSize(function, options, out, device)


__all__ = ["FindBatchSize", "TrialDone", "current_trial", "find_batch_size"]
