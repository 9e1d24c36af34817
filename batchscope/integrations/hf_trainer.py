"""``BatchscopeTrainerCallback``: :class:`batchscope.watch` for ``transformers.Trainer``.

Example:
    >>> from batchscope.integrations.hf_trainer import BatchscopeTrainerCallback  # doctest: +SKIP
    >>> cb = BatchscopeTrainerCallback(out_dir="report", unit="sequence")  # doctest: +SKIP
    >>> Trainer(model, args, train_dataset=data, callbacks=[cb]).train()  # doctest: +SKIP
    >>> cb.report.batches[0].throughput_per_s  # doctest: +SKIP

It works through the Trainer's own callback events only. The watch opens at the first
``on_step_begin``, after the Trainer fetched that step's micro-batches, so the first
watched step is exactly one optimizer step; each ``on_step_end`` ends one. A watched step
is then the loop as it runs from the end of one optimizer step to the end of the next: the
Trainer's logging, evaluation and saving after a step, fetching the next micro-batches,
their forward and backward passes, gradient clipping, the optimizer and the scheduler. What
runs before ``on_step_begin`` (the logging and fetching) is the step's data loading: in its
time and throughput, outside its op breakdown and roofline.
Once the watch has its steps it removes its hooks, and the report is written
(``callback.report``; report.json, report.html and summary.md in ``out_dir``) while
training goes on untouched. ``on_train_end`` closes a watch that is still open (a run
shorter than the watched steps gets a partial report). Only the main process
(``state.is_world_process_zero``) watches and writes.
"""

from __future__ import annotations

from typing import Any

from batchscope.errors import UsageError
from batchscope.find_function import current_trial
from batchscope.integrations.watched_run import WatchedCallback
from batchscope.records import Flag
from batchscope.records.flag_payloads import TrainerAccumulates
from batchscope.records.report import IntegrationInfo, WatchedStep

try:
    import transformers
    from transformers import TrainerCallback
except ImportError:
    raise ImportError("batchscope's Trainer callback needs transformers: "
                      "pip install 'batchscope[hf]'.") from None

INTEGRATION = "transformers_trainer"


class BatchscopeTrainerCallback(WatchedCallback, TrainerCallback):
    """Profile a few optimizer steps of ``Trainer.train`` and report on their batch size.

    A watched step is one optimizer step, and ``on_step_end`` fires once per optimizer
    step: with ``gradient_accumulation_steps=N`` it holds N micro-batches, so the report's
    batch size is the rows of all N, ``per_device_train_batch_size`` (the Trainer's actual
    per-process micro-batch, which ``auto_find_batch_size`` may have lowered) times N, and
    its throughput counts all of them. Its ops run at a micro-batch's shapes (an op's
    calls add up over the N micro-batches), so each op sits on the roofline where a
    micro-batch puts it, and the report says so in a flag. The last optimizer step of an
    epoch may hold fewer micro-batches; where it falls within the watched steps its rows
    are fewer than the batch size said.

    The Trainer has no event for an exception: if ``train()`` may raise and the program
    goes on, call :meth:`close` (e.g. in a ``finally``) so the watch's hooks come off and
    the partial report is written. The first report on a machine measures its ceilings
    first (seconds, then cached). The callback watches the first ``train()`` it is used in;
    ``report`` then stays.

    Args:
        out_dir: where to write report.json, report.html and summary.md; None writes
            nothing (``report`` is still set).
        unit: what one row yields ("sample", "sequence"; a row's tokens are not counted).
        batch_size: rows per optimizer step; None takes the micro-batch times
            ``gradient_accumulation_steps``.
        warmup_steps, timed_steps, profiled_steps: how many optimizer steps each phase of
            :class:`batchscope.watch` takes (fast steps are timed in blocks: see there).

    Raises:
        UsageError: a step count, batch size or unit ``watch`` cannot use.
    """

    # -- the Trainer's events ------------------------------------------------------------
    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if self._run.can_open and state.is_world_process_zero:
            self._open(args, state, kwargs["model"], kwargs.get("optimizer"))
        # The step's micro-batches are fetched: what ran since the last step is data loading.
        self._run.batch_ready()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._run.step()

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.close()

    def _open(self, args: Any, state: Any, model: Any, optimizer: Any) -> None:
        micro_rows = int(getattr(state, "train_batch_size", None) or args.train_batch_size)
        accumulate = max(1, int(args.gradient_accumulation_steps))
        about = IntegrationInfo(name=INTEGRATION, version=transformers.__version__,
                                step=WatchedStep.OPTIMIZER_STEP, accumulation_steps=accumulate,
                                micro_batch_rows=micro_rows,
                                global_step_at_start=int(state.global_step))
        flags = ([Flag.of(TrainerAccumulates(steps=accumulate, micro_batch=micro_rows))]
                 if accumulate > 1 else [])
        self._run.open(model, optimizer, micro_rows * accumulate, about, flags)


class BatchscopeFinderCallback(TrainerCallback):
    """The Trainer's side of :func:`batchscope.find_batch_size`: inside a decorated training
    function, each optimizer step ends one step of the batch-size trial (the Trainer's
    fetching, forward and backward passes, clipping, optimizer and scheduler, as
    ``BatchscopeTrainerCallback`` times them), and the trial's first ``on_train_begin``
    attaches the Trainer's model and optimizer, whose state the trials then leave as they
    found it. Outside a trial (the run proper at the pick) it does nothing.

    Example::

        args = TrainingArguments("out", max_steps=1000, report_to=[])

        @batchscope.find_batch_size(starting_batch_size=128, unit="sequence")
        def train(batch_size):
            args.per_device_train_batch_size = batch_size
            trainer = Trainer(model, args, train_dataset=data,
                              callbacks=[BatchscopeFinderCallback()])
            return trainer.train()

        output = train()  # trials at 1, 2, 4, ... then the run at train.batch_size

    Raises:
        UsageError: at a trial's ``on_train_begin``, the Trainer trains another batch size
            than the trial's (a Trainer built before the function, or one that ignores
            ``per_device_train_batch_size``).
    """

    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trial = current_trial()
        if trial is None:
            return
        micro = int(getattr(state, "train_batch_size", None) or args.train_batch_size)
        if micro != trial.batch_size:
            raise UsageError(
                f"the Trainer trains batch {micro} per device where the finder's trial asked "
                f"for {trial.batch_size}: build the Trainer inside the decorated function, "
                "with per_device_train_batch_size set to its batch_size argument.")
        trial.attach(kwargs["model"], kwargs.get("optimizer"))

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        trial = current_trial()
        if trial is not None:
            trial.step()


__all__ = ["BatchscopeFinderCallback", "BatchscopeTrainerCallback"]
