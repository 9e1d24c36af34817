"""``batchscope.watch``: diagnose the batch size a real training loop already uses, in-process.

(This module is ``batchscope.watching``; the package exports its class as ``watch``.)

Example:
    >>> with batchscope.watch(model, optimizer=opt, out_dir="report") as w:  # doctest: +SKIP
    ...     for x, y in loader:
    ...         loss = loss_fn(model(x), y)
    ...         loss.backward(); opt.step(); opt.zero_grad()
    ...         w.step()

Between consecutive ``w.step()`` calls lies one step of the user's loop. ``watch`` lets the
first steps warm up, times the next ones (wall clock between ``step()`` calls, the device
synchronised: the loop as it runs, data loading included; steps under a millisecond in
blocks, with NVML on a GPU and page faults on the CPU, as the sweep's timing pass does),
profiles a few with the sweep's own profiler session, counts one under the counting mode,
times as many steps again at the end (how far the loop's speed drifted across the watched
steps: the latency's interval spans both timings, and the report's evidence reads the
change), then removes every hook and writes the same report as ``diagnose`` for that one
batch size (built by the one assembler, :func:`batchscope.assemble.assemble`), plus
labelled estimates of larger batch sizes. Nothing it does changes the loop's numerics: the profiler
only observes, and the counting mode runs every op exactly as it would run anyway.

A step of the loop begins with fetching its batch (``for x, y in loader``), which is not
the model's work: from a ``TensorDataset``, a ``select`` of the whole table per row and
tensor, then a ``stack`` per tensor. The model's step begins where the loop first calls it
(or calls :meth:`watch.batch_ready`, as the trainer callbacks do); the time before that is
measured in the timed steps as data loading (``run.watch.data_loading_s``), and the
profiled and counted steps start there, so the op breakdown and the roofline are the
model's step alone. The latency and throughput stay the loop's, data loading included.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import torch

from batchscope.assemble import Measured, assemble
from batchscope.engine.policies import FixedCount
from batchscope.errors import UsageError
from batchscope.hardware.busy import OtherLoad
from batchscope.profiler.capture import (
    ProfilerSession,
    ProfilerUnavailable,
    StepCapture,
)
from batchscope.profiler.counting import CountingSession, counting_model
from batchscope.profiler.device import PushedSteps, backend
from batchscope.profiler.device_time import apply_device_time
from batchscope.profiler.join import fill_breakdown
from batchscope.profiler.measurement import TimedSteps, record_timing
from batchscope.profiler.memory import available_bytes
from batchscope.profiler.model_info import parameter_bytes, parameter_count
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
from batchscope.records.flag_payloads import (
    NoBreakdown,
    WatchCutShortStop,
    WatchDataLoading,
    WatchDoneStop,
)
from batchscope.records.noise import control_timing, drift_control
from batchscope.records.report import IntegrationInfo, Mode, WatchInfo
from batchscope.tensors import iter_tensors
from batchscope.version import __version__

WARMUP_STEPS = 2  # first steps allocate gradients and optimizer state, autotune kernels
TIMED_STEPS = 8  # timed samples: single steps, or blocks of fast steps
PROFILED_STEPS = 3  # plus one dropped: the first step under a fresh profiler runs slow
ESTIMATE_FACTORS = (2, 4, 8)  # larger batch sizes to estimate, as multiples of the measured
# Data loading under this share of the step changes no reading of it: only above it does the
# report say, in a flag, that the step holds time the op breakdown leaves out.
DATA_LOADING_NOTABLE_SHARE = 0.05
WARMUP, TIMED, PROFILED, COUNTED, RETIMED = "warmup", "timed", "profiled", "counted", "retimed"


def check_watch_args(*, batch_size: int | None, unit: str, warmup_steps: int,
                     timed_steps: int, profiled_steps: int, retimed_steps: int = 0) -> None:
    """One sentence for an argument ``watch`` cannot use.

    Raises:
        UsageError: a step count that is not a whole number (at least 1 for timed_steps),
            a batch size below 1, or an empty unit.
    """
    counts = {"warmup_steps": (warmup_steps, 0), "timed_steps": (timed_steps, 1),
              "profiled_steps": (profiled_steps, 0), "retimed_steps": (retimed_steps, 0)}
    for name, (value, least) in counts.items():
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise UsageError(f"{name} must be a whole number of at least {least}, "
                             f"not {value!r}.")
    if batch_size is not None and (isinstance(batch_size, bool)
                                   or not isinstance(batch_size, int) or batch_size < 1):
        raise UsageError(f"batch_size must be a whole number of at least 1, not {batch_size!r}.")
    if not isinstance(unit, str) or not unit.strip():
        raise UsageError(f"unit must name what one row yields (e.g. 'sample'), not {unit!r}.")


def model_device(model: torch.nn.Module) -> torch.device:
    """The device the model's parameters are on (the CPU for a model without any)."""
    return next((p.device for p in model.parameters()), torch.device("cpu"))


class watch:  # noqa: N801 - used as a context manager, named like one
    """Profile a few steps of the user's own loop and report on its batch size.

    Args:
        model: the module the loop trains or runs.
        optimizer: its optimizer, so its state counts with the weights.
        batch_size: rows per step; found from the first tensor given to ``model`` if None.
        unit: what one row yields ("sample", "token", "image").
        out_dir: where to write report.json (and the other formats); None writes nothing.
        warmup_steps, timed_steps, profiled_steps: how many loop steps each phase takes
            (the timed steps are timed again at the end, ``retimed_steps`` samples: a
            disturbed window then shows as drift, never as a precise figure; 0 skips it)
            (``timed_steps`` counts samples: a step under a millisecond is timed in blocks
            of steps lasting about one, and on a GPU, while NVML samples, the timed steps
            last at least a second so that it sees them; ``latency_s.stopped_by`` then says
            "nvml_window").
        integration: for the trainer callbacks (integrations/): the trainer watched, in
            the report's ``run.integration``.
        flags: for the trainer callbacks: what the trainer's settings mean for the report,
            among its flags.

    A step's data loading is the time from ``step()`` to the model's first call in the next
    step (or to :meth:`batch_ready`): measured in the timed steps, and left out of the
    profiled and counted ones, whose ops are the model's step alone.

    Raises:
        UsageError: a step count, batch size or unit it cannot use (:func:`check_watch_args`).
    """

    def __init__(self, model: torch.nn.Module, *, optimizer: torch.optim.Optimizer | None = None,
                 batch_size: int | None = None, unit: str = "sample",
                 out_dir: str | None = "batchscope-report", warmup_steps: int = WARMUP_STEPS,
                 timed_steps: int = TIMED_STEPS, profiled_steps: int = PROFILED_STEPS,
                 integration: IntegrationInfo | None = None,
                 flags: Sequence[Flag] = (), retimed_steps: int | None = None) -> None:
        retimed_steps = timed_steps if retimed_steps is None else retimed_steps
        check_watch_args(batch_size=batch_size, unit=unit, warmup_steps=warmup_steps,
                         timed_steps=timed_steps, profiled_steps=profiled_steps,
                         retimed_steps=retimed_steps)
        self.model, self.optimizer = model, optimizer
        self.batch_size, self.unit, self.out_dir = batch_size, unit, out_dir
        self._integration, self._flags = integration, list(flags)
        phases = [(WARMUP, warmup_steps), (TIMED, timed_steps),
                  (PROFILED, 1 + profiled_steps), (COUNTED, 1), (RETIMED, retimed_steps)]
        self._phases = [(name, n) for name, n in phases if n > 0]
        self._phase = 0  # index into _phases
        self._left = self._phases[0][1]  # steps (timed: samples) left in the phase
        self.index = 0  # loop steps seen
        self.report: Report | None = None
        self._stack = ExitStack()
        self._step_stack = ExitStack()  # what wraps the current step (profiler tag, counting)
        self._inputs: list[torch.Tensor] = []
        self._last = 0.0
        self._device = model_device(model)
        # Timing, as the sweep's timing pass, through the device's backend and the engine's
        # push mode: blocks of fast steps, NVML and its window, page faults, peak memory.
        self._backend = backend(self._device)
        self._clock = self._backend.host_clock
        self._timed_samples = timed_steps
        self._retimed_samples = retimed_steps
        self._warmup_s: list[float] = []
        self._pushed: PushedSteps | None = None  # while the timed (or retimed) steps run
        self._timed: TimedSteps | None = None  # what they measured
        self._retimed: TimedSteps | None = None  # the same, timed again at the end
        self._timed_at = self._retimed_at = 0.0  # host clock when each timing ended
        self._load = OtherLoad()  # other processes' CPU while the loop was watched
        self._block, self._timed_steps = 1, 0
        # Profiling and counting.
        self._profiling = ProfilerSession(self._device)
        self._profiling_on = False
        self._captured: list[StepCapture] = []
        self._no_breakdown: Flag | None = None  # why the profiler could not run
        self._session: CountingSession | None = None
        # Where the model's step begins: its first call, or batch_ready(). Host clock, read
        # at every step() (no device sync): the time before it is data loading.
        self._began_at = 0.0  # when the current step of the loop began
        self._model_began = False  # the current step reached the model
        self._loading_s = 0.0  # data loading summed over the timed steps
        self._timed_loop_steps = 0  # timed steps that ended
        self._marked_steps = 0  # of those, steps that reached the model
        # Profiled and counted steps start at the model's first call, when every timed step
        # reached it (else, as for a model the loop never calls, at step()).
        self._from_model = False
        self._tagged = False  # the current profiled step has its profiler tag
        self._first_tagged: bool | None = None  # whether the first profiled step had one

    # -- the context manager -------------------------------------------------------------
    def __enter__(self) -> watch:
        hook = self.model.register_forward_pre_hook(self._see_inputs, with_kwargs=True)
        self._stack.callback(hook.remove)
        self._stack.callback(self._backend.close)
        self._backend.sync()  # work queued before the first watched step is not part of it
        self._load.__enter__()
        self._begin_phase(self._current)
        self._begin_step(self._current)
        self._last = self._began_at = self._clock.now()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.report is None:
            self._finish(partial=True)

    @property
    def active(self) -> bool:
        """False once the watched steps are over: ``step()`` then does nothing."""
        return self.report is None

    @property
    def _current(self) -> str:
        return self._phases[self._phase][0]

    def step(self) -> None:
        """Mark the end of one step of the user's loop."""
        if self.report is not None:
            return
        self.index += 1
        phase = self._current
        if phase == TIMED:
            self._timed_loop_steps += 1
            self._marked_steps += self._model_began
        self._model_began = False
        if self._pushed is not None and not self._pushed.timer.closes_sample():
            # within a block of fast steps: no sync; only the host clock, for data loading
            self._began_at = self._clock.now()
            return
        self._backend.sync()
        now = self._clock.now()
        self._end_step(phase, now)
        self._left -= 1
        if self._pushed is not None:
            # the engine's rule: the count of samples, then NVML's window if it samples
            self._left = 0 if self._pushed.timer.add(self._last, now) else 1
        if self._left <= 0:
            self._end_phase(phase)
            self._phase += 1
            if self._phase >= len(self._phases):
                self._finish(partial=False)
                return
            self._left = self._phases[self._phase][1]
            self._begin_phase(self._current)
        self._begin_step(self._current)
        self._last = self._began_at = self._clock.now()

    def batch_ready(self) -> None:
        """Mark where the model's step begins in the current step of the loop: its batch is
        fetched. What ran since the last ``step()`` is data loading.

        The model's first call in a step marks it too, so a loop that calls the model
        needs no ``batch_ready()``; a trainer whose module runs submodules only (Lightning's
        ``self.net(x)`` in ``training_step``) gets it from its callback's hook.
        """
        if self.report is not None or self._model_began:
            return
        self._model_began = True
        phase = self._current
        if phase == TIMED:
            self._loading_s += self._clock.now() - self._began_at
        elif phase == PROFILED and self._from_model:
            self._tag_step()
        elif phase == COUNTED and self._from_model:
            self._start_counting()

    # -- phases --------------------------------------------------------------------------
    def _see_inputs(self, module: torch.nn.Module, args: Any, kwargs: dict[str, Any]) -> None:
        """The model's inputs, positional or keyword (``model(input_ids=..., labels=...)``,
        as Hugging Face loops call it): the first tensor's first dimension is the batch.
        Its first call in a step begins the model's step (:meth:`batch_ready`)."""
        self.batch_ready()
        tensors = [t for t in iter_tensors((args, kwargs)) if t.dim() > 0]
        if self.batch_size is None and tensors:
            self.batch_size = int(tensors[0].shape[0])
        if self._session is not None:
            self._session.add_state(tensors)
            self._inputs.extend(tensors)

    def _begin_phase(self, phase: str) -> None:
        if phase in (TIMED, RETIMED):
            samples = self._timed_samples if phase == TIMED else self._retimed_samples
            count = FixedCount(samples, window_min_s=self._backend.window_min_s)
            self._pushed = self._backend.push(count, self._warmup_s)
            if phase == TIMED:
                self._block = self._pushed.timer.block_steps
        elif phase == PROFILED:
            # Every timed step reached the model: the profiled and counted steps start there.
            self._from_model = 0 < self._timed_loop_steps == self._marked_steps
            try:
                self._profiling.start()
                self._profiling_on = True
            except ProfilerUnavailable as exc:
                self._no_breakdown = Flag.of(NoBreakdown(reason=str(exc)))

    def _begin_step(self, phase: str) -> None:
        if self._from_model and phase in (PROFILED, COUNTED):
            return  # from the model's first call on (batch_ready)
        if phase == PROFILED:
            self._tag_step()
        elif phase == COUNTED:
            self._start_counting()

    def _tag_step(self) -> None:
        """The profiler's step tag, from here to the step's end."""
        if self._profiling_on:
            self._step_stack.enter_context(self._profiling.step())
            self._tagged = True

    def _start_counting(self) -> None:
        """The counting mode, from here to the step's end."""
        self._session = self._step_stack.enter_context(
            counting_model(self.model, self.optimizer, inputs=[]))

    def _end_step(self, phase: str, now: float) -> None:
        if phase == WARMUP:
            self._warmup_s.append(now - self._last)
        elif phase == PROFILED and self._profiling_on:
            if self._first_tagged is None:
                self._first_tagged = self._tagged
            self._tagged = False
        self._step_stack.close()

    def _end_phase(self, phase: str) -> None:
        if phase == TIMED and self._pushed is not None:
            self._timed_steps = self._pushed.timer.steps
            self._timed, self._pushed = self._pushed.stop(), None
            self._timed_at = self._clock.now()
        elif phase == RETIMED and self._pushed is not None:
            self._retimed, self._pushed = self._pushed.stop(), None
            self._retimed_at = self._clock.now()
        elif phase == PROFILED and self._profiling_on:
            self._profiling_on = False
            # The first step under a fresh profiler runs slow: dropped (where the loop did
            # reach the model in it, so that it has a tag).
            first_tagged = self._tagged if self._first_tagged is None else self._first_tagged
            self._captured = self._profiling.stop()[1 if first_tagged else 0:]

    # -- the report ----------------------------------------------------------------------
    def _result(self) -> BatchResult:
        result = BatchResult(self.batch_size or 1, Status.OK)
        if self._timed is not None:
            result = record_timing(result, self._timed)
        no_breakdown = [self._no_breakdown] if self._no_breakdown is not None else []
        result = dataclasses.replace(result, available_memory_bytes=available_bytes(self._device),
                                     flags=[*result.flags, *no_breakdown])
        if self._captured and self._session is not None:
            result = fill_breakdown(result, self._session.ops, self._captured)
            if self._device.type == "cuda":  # kernel times: the sweep's device terms
                result = apply_device_time(
                    result, result.latency_s.median if result.latency_s else None)
        return result

    def _model_info(self) -> ModelInfo:
        """The watched model as the sweep's worker describes its own."""
        model = self.model
        return ModelInfo(
            target=f"watch({type(model).__name__})",
            mode=Mode.TRAIN if model.training else Mode.INFERENCE,
            unit=self.unit,
            dtype=str(next((p.dtype for p in model.parameters()),
                           torch.float32)).replace("torch.", ""),
            parameters=parameter_count(model),
            parameter_bytes=parameter_bytes(model),
            device=str(self._device),
            threads=torch.get_num_threads(),
        )

    def _data_loading_s(self) -> float | None:
        """Data loading per timed step (seconds), where every timed step reached the model."""
        if not self._timed_loop_steps or self._marked_steps < self._timed_loop_steps:
            return None
        return self._loading_s / self._timed_loop_steps

    def _data_loading_flags(self, result: BatchResult, loading_s: float | None) -> list[Flag]:
        """A flag where data loading is a notable share of the median step."""
        median = result.latency_s.median if result.latency_s is not None else 0.0
        if loading_s is None or median <= 0 or loading_s / median < DATA_LOADING_NOTABLE_SHARE:
            return []
        return [Flag.of(WatchDataLoading(seconds=loading_s,
                                         share=min(loading_s / median, 1.0)),
                        result.batch_size)]

    def _drift(self) -> DriftControl | None:
        """The timed steps against the same timed again at the end: how far the loop's
        speed moved across the watched steps (None: the retiming did not finish)."""
        first, again = self._timed, self._retimed
        if first is None or again is None or self.batch_size is None:
            return None
        return drift_control([control_timing(self.batch_size, first.latency, again.latency)],
                             self._retimed_at - self._timed_at)

    def _finish(self, partial: bool) -> None:
        self._step_stack.close()
        if partial:  # the loop ended mid-phase: keep what that phase measured
            self._end_phase(self._current)
        self._load.__exit__(None, None, None)
        self._stack.close()  # hooks off, sampler closed: the loop runs untouched from here
        from batchscope.hardware import load_or_measure

        ceilings = load_or_measure(self._device)
        result = self._result()
        loading_s = self._data_loading_s()
        run = RunInfo(
            source=Source.WATCH, tool_version=__version__, torch_version=torch.__version__,
            watch=WatchInfo(steps=self.index, timed_steps=self._timed_steps,
                            block_steps=self._block, data_loading_s=loading_s),
            integration=self._integration, drift=self._drift(),
            other_cpu_share=self._load.share if math.isfinite(self._load.share) else None)
        report = assemble(Measured(
            model=self._model_info(), run=run, ceilings=ceilings,
            results=[result] if result.latency_s else [], partial=partial,
            stop=Stop.of(WatchCutShortStop() if partial else WatchDoneStop()),
            flags=list(self._flags) + self._data_loading_flags(result, loading_s),
            estimate_factors=ESTIMATE_FACTORS))
        self.report = report
        if self.out_dir is not None:
            from batchscope.reports import write_all

            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            write_all(report, self.out_dir)
