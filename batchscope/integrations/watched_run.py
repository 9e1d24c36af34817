"""One :class:`batchscope.watch` over a trainer's steps: what the Lightning and the Hugging
Face callbacks share (the trainer's own hooks open, step and close it).

The callback opens the watch at a trainer's first step with the model, its optimizer, the
rows a step holds, what the trainer says about itself (``run.integration`` in the report)
and the flags its settings call for; the watch hands them to the assembler with what it
measured. Each step-begin event, its batch fetched, calls :meth:`WatchedRun.batch_ready`
(what ran since the step before is data loading, outside the op breakdown), and each
step-end event :meth:`WatchedRun.step`; once the watch has its steps
the report is taken and report.json, report.html and summary.md written.
:meth:`WatchedRun.close` ends a watch still open with a partial report.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from batchscope.records import Flag, Report
from batchscope.records.report import IntegrationInfo
from batchscope.watching import (
    PROFILED_STEPS,
    TIMED_STEPS,
    WARMUP_STEPS,
    check_watch_args,
    watch,
)


class WatchedRun:
    """The watch of one training run, opened once; ``report`` once it is done.

    Args:
        out_dir: where to write report.json, report.html and summary.md; None writes
            nothing (``report`` is still set).
        unit: what one row yields ("sample", "token", "image").
        batch_size: rows per step; None: what the callback measures from the trainer.
        warmup_steps, timed_steps, profiled_steps: the watch's phases, in trainer steps.

    Raises:
        UsageError: a step count, batch size or unit ``watch`` cannot use.
    """

    def __init__(self, *, out_dir: str | Path | None, unit: str, batch_size: int | None,
                 warmup_steps: int = WARMUP_STEPS, timed_steps: int = TIMED_STEPS,
                 profiled_steps: int = PROFILED_STEPS) -> None:
        check_watch_args(batch_size=batch_size, unit=unit, warmup_steps=warmup_steps,
                         timed_steps=timed_steps, profiled_steps=profiled_steps)
        self.out_dir = None if out_dir is None else str(out_dir)
        self.unit, self.batch_size = unit, batch_size
        self.warmup_steps, self.timed_steps = warmup_steps, timed_steps
        self.profiled_steps = profiled_steps
        self.report: Report | None = None
        self._watch: watch | None = None

    @property
    def active(self) -> bool:
        """True while the watch is open."""
        return self._watch is not None

    @property
    def can_open(self) -> bool:
        """True before the run's first watch: a run is watched once."""
        return self._watch is None and self.report is None

    def open(self, model: Any, optimizer: Any, rows: int | None,
             integration: IntegrationInfo, flags: Sequence[Flag] = ()) -> None:
        """Open the watch on ``model``; ``integration`` becomes the report's
        ``run.integration`` and ``flags`` are among its flags."""
        w = watch(model, optimizer=optimizer, batch_size=self.batch_size or rows,
                  unit=self.unit, out_dir=None, warmup_steps=self.warmup_steps,
                  timed_steps=self.timed_steps, profiled_steps=self.profiled_steps,
                  integration=integration, flags=flags)
        self._watch = w.__enter__()

    def batch_ready(self) -> None:
        """A trainer step begins, its batch fetched: what ran since the last step is data
        loading (:meth:`batchscope.watch.batch_ready`)."""
        if self._watch is not None:
            self._watch.batch_ready()

    def step(self) -> None:
        """One trainer step ended."""
        if self._watch is None:
            return
        self._watch.step()
        if not self._watch.active:
            self._done()

    def close(self) -> None:
        """End a watch that is still open: hooks off, the partial report written."""
        if self._watch is not None:
            self._watch.__exit__(None, None, None)
            self._done()

    def _done(self) -> None:
        w, self._watch = self._watch, None
        if w is None or w.report is None:
            return
        self.report = w.report
        if self.out_dir is not None:
            from batchscope.reports import write_all

            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            write_all(self.report, self.out_dir)


class WatchedCallback:
    """What a trainer's callback built on a :class:`WatchedRun` (``self._run``) takes and
    exposes; listed first among its bases, its constructor runs the trainer's callback's."""

    def __init__(self, *, out_dir: str | Path | None = "batchscope-report",
                 unit: str = "sample", batch_size: int | None = None,
                 warmup_steps: int = WARMUP_STEPS, timed_steps: int = TIMED_STEPS,
                 profiled_steps: int = PROFILED_STEPS) -> None:
        super().__init__()
        self._run = WatchedRun(out_dir=out_dir, unit=unit, batch_size=batch_size,
                               warmup_steps=warmup_steps, timed_steps=timed_steps,
                               profiled_steps=profiled_steps)

    @property
    def report(self) -> Report | None:
        """The report, once the watched steps are done (or the run ended first)."""
        return self._run.report

    @property
    def active(self) -> bool:
        """True while the watch is open (from the first watched step until it is done)."""
        return self._run.active

    def close(self) -> None:
        """End a watch that is still open: hooks off, the partial report written."""
        self._run.close()
