"""``BatchscopeFinder``: a drop-in for Lightning's ``BatchSizeFinder`` that sets the fastest
batch size (or, ``mode="largest"``, the largest that runs), from batchscope's plan, timer,
intervals and pick.

Example:
    >>> from batchscope.integrations.lightning_finder import BatchscopeFinder  # doctest: +SKIP
    >>> finder = BatchscopeFinder(out_dir="finder-report")  # doctest: +SKIP
    >>> trainer = lightning.Trainer(max_epochs=10, callbacks=[finder])  # doctest: +SKIP
    >>> trainer.fit(model, datamodule)  # doctest: +SKIP
    >>> finder.batch_size, finder.report.recommendation.equivalent_batch_sizes  # doctest: +SKIP

At the start of the fit (``on_fit_start``, where ``BatchSizeFinder`` works too) it runs
trials of the fit itself: for each batch size the plan asks for, the ``batch_size``
attribute is set where Lightning's own lookup finds it (the module, its ``hparams``, the
datamodule), the training dataloader is built again, and Lightning's fit loop runs the
module's ``training_step`` with the trainer's optimizer, precision and strategy until the
trial's timer has its samples (:mod:`batchscope.finding`); a step is one training batch, its
data loading included. It is Lightning's own machinery for this
(``lightning.pytorch.tuner.batch_size_scaling``, what ``BatchSizeFinder`` runs): the
trainer's state is checkpointed before the trials and restored after them (the weights,
the optimizer's and schedulers' state, the loops, the precision plugin's scaler), the
callbacks and loggers are set aside while they run, and validation is off. The random number
generators are put back too, so the fit draws what it would have drawn without the finder.
Then the attribute is set to the pick, the dataloaders are built again, and the fit goes on.

An out-of-memory error in a trial is caught (the plan stops going up, as after a worker's
OOM in a sweep) and the memory freed; any other error of the training step is the fit's
own, raised after the trainer is restored. Under DDP every process runs every trial (the
steps hold their all-reduces); rank 0 times them and decides (``torch.distributed``'s
``broadcast_object_list``, through the strategy), and every process takes rank 0's answer.
An OOM must then strike every rank alike, as it does where the ranks run the same batch
size on the same GPUs; one rank alone out of memory leaves the others waiting in their
collective, as in any DDP run.

The report (``finder.report``; report.json, report.html and summary.md in ``out_dir``) is a
sweep's report of the trials: throughput with its interval at each size, the pick and the
sizes equivalent to it within noise, why the plan stopped. It has no op breakdown:
``BatchscopeCallback`` beside the finder reports the roofline of the batch size the fit then
runs.
"""

from __future__ import annotations

import os
import uuid
import warnings
from importlib import import_module
from pathlib import Path
from typing import Any, TypeVar

from batchscope.errors import UsageError
from batchscope.finding import (
    DEFAULT_MAX_VAL,
    FASTEST,
    TRIAL_WARMUP_STEPS,
    Finder,
    FinderOptions,
    TooFewRows,
    TrialTimer,
    is_oom,
    model_info,
)
from batchscope.integrations.lightning import INTEGRATION, batch_rows
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.trial_state import RngState, free_memory
from batchscope.records import BatchResult, Report
from batchscope.records.report import IntegrationInfo, WatchedStep

try:
    import lightning.pytorch as pl
except ImportError:  # pytorch_lightning, the package's older name (integrations/lightning.py)
    import pytorch_lightning as pl  # type: ignore[no-redef]

scaling = import_module(f"{pl.__name__}.tuner.batch_size_scaling")
_parsing = import_module(f"{pl.__name__}.utilities.parsing")
_strategies = import_module(f"{pl.__name__}.strategies")
lightning_getattr = _parsing.lightning_getattr
lightning_hasattr = _parsing.lightning_hasattr
lightning_setattr = _parsing.lightning_setattr
# The strategies whose ranks all run each trial in lockstep (one device; DDP, spawned too).
SUPPORTED_STRATEGIES = (_strategies.SingleDeviceStrategy, _strategies.DDPStrategy)
# Lightning's own helpers of BatchSizeFinder: save the trainer's loop settings and state,
# set them for trials, put them back (module-level names with two underscores: not mangled).
_dump_params = getattr(scaling, "__scale_batch_dump_params")
_reset_params = getattr(scaling, "__scale_batch_reset_params")
_restore_params = getattr(scaling, "__scale_batch_restore_params")
# A trial's loop runs until its timer says stop; this many steps at most (far past the
# timing policy's step cap, which ends every trial first).
MAX_TRIAL_STEPS = 1_000_000
T = TypeVar("T")


class _StrategyCoordinator:
    """The processes of a Lightning run agree through its strategy: rank 0 leads, and a
    value is broadcast from it (DDP: ``torch.distributed.broadcast_object_list``)."""

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer

    @property
    def leader(self) -> bool:
        return bool(self.trainer.is_global_zero)

    def share(self, value: T) -> T:
        if int(getattr(self.trainer, "world_size", 1) or 1) <= 1:
            return value
        shared: T = self.trainer.strategy.broadcast(value, src=0)
        return shared


class _TrialSteps(pl.Callback):
    """The only callback while trials run: each training batch ends one step of the trial's
    timer, and the trial ends (``trainer.should_stop``) when rank 0's timer says so."""

    def __init__(self, coordinator: _StrategyCoordinator) -> None:
        self.coordinator = coordinator
        self.timer: TrialTimer | None = None
        self.batch_size = 0
        self.rows: int | None = None  # the trial's first batch's rows, short of its size
        self.first = True

    def begin(self, batch_size: int, timer: TrialTimer | None) -> None:
        self.batch_size, self.timer, self.rows, self.first = batch_size, timer, None, True

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        # Only the first: an epoch's last batch may be short where the rows do not divide.
        rows = batch_rows(batch) if self.first else None
        self.first = False
        if rows is not None and rows < self.batch_size:
            self.rows = rows

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        done = None
        if self.coordinator.leader:
            done = self.rows is not None or (self.timer is not None and self.timer.step())
        if self.coordinator.share(done):
            trainer.should_stop = True


class BatchscopeFinder(pl.Callback):
    """Find the fastest batch size (or the largest that runs) at the start of ``fit``, set
    it where Lightning's ``BatchSizeFinder`` sets its own, and let the fit go on.

    Args:
        mode: "fastest" (batchscope's recommendation: the smallest batch within noise of the
            best throughput) or "largest" (the largest that ran, less ``margin``).
        batch_arg_name: the attribute holding the batch size (on the module, its
            ``hparams`` or the datamodule: Lightning's lookup).
        max_val: the largest batch size to try.
        margin: ``mode="largest"``: the share taken off the largest that ran (0.05: 5%).
        batch_sizes: the sizes to try, in place of the plan's powers of two up to max_val.
        unit, units_per_row: what one row yields, and how many (a sequence of 128 tokens:
            unit "token", units_per_row 128).
        out_dir: where rank 0 writes report.json, report.html and summary.md; None writes
            nothing (``report`` is still set).
        latency_limit_ms, memory_budget_bytes: a step time and a peak memory no pick may
            pass; the plan stops going up there.
        timing: each trial's timing pass (the sweep's adaptive one by default).
        warmup_steps: steps of each trial before its timed ones, at least.
        rounds: decide from the sweep's decision rounds once the plan ends (the sizes near
            the bar timed in short interleaved trials, the pick read from within-round
            ratios; one process, so no fresh worker).

    Attributes:
        batch_size: the batch size set (None before the fit, or where no size ran and the
            attribute was left as it was).
        report: the trials' report (rank 0; None elsewhere and before the fit).

    Raises:
        UsageError: an option it cannot use; at ``setup``, no such attribute, dataloaders
            passed to ``fit()`` directly, or a strategy other than one device or DDP.
    """

    def __init__(self, mode: str = FASTEST, *, batch_arg_name: str = "batch_size",
                 max_val: int = DEFAULT_MAX_VAL, margin: float = 0.0,
                 batch_sizes: list[int] | None = None, unit: str = "sample",
                 units_per_row: int = 1, out_dir: str | Path | None = "batchscope-report",
                 latency_limit_ms: float | None = None,
                 memory_budget_bytes: int | None = None, timing: TimingConfig | None = None,
                 warmup_steps: int = TRIAL_WARMUP_STEPS, rounds: bool = True) -> None:
        super().__init__()
        self.options = FinderOptions(
            mode=mode, max_batch=max_val, batch_sizes=sorted(batch_sizes) if batch_sizes
            else None, margin=margin,
            latency_limit_s=latency_limit_ms / 1e3 if latency_limit_ms is not None else None,
            memory_budget_bytes=memory_budget_bytes, timing=timing or TimingConfig(),
            warmup_steps=warmup_steps, rounds=rounds, unit=unit, units_per_row=units_per_row)
        self.options.check()
        self.batch_arg_name = batch_arg_name
        self.out_dir = None if out_dir is None else str(out_dir)
        self.batch_size: int | None = None
        self.report: Report | None = None

    # -- Lightning's hooks ---------------------------------------------------------------
    def setup(self, trainer: Any, pl_module: Any, stage: str | None = None) -> None:
        if stage not in (None, "fit"):
            return
        if not trainer.fit_loop._data_source.is_module():
            raise UsageError("BatchscopeFinder sets the batch size of the dataloader a module "
                             "or datamodule builds: pass the datamodule to fit(), or define "
                             "train_dataloader() on the module, not dataloaders to fit().")
        if not lightning_hasattr(pl_module, self.batch_arg_name):
            raise UsageError(f"BatchscopeFinder found no {self.batch_arg_name!r} on the "
                             "module, its hparams or the datamodule (Lightning's lookup): "
                             "give it the attribute the dataloader reads, or name another "
                             "with batch_arg_name.")
        if not isinstance(trainer.strategy, SUPPORTED_STRATEGIES):
            raise UsageError(f"BatchscopeFinder runs under one device or DDP, not "
                             f"{type(trainer.strategy).__name__}.")

    def on_fit_start(self, trainer: Any, pl_module: Any) -> None:
        self.find(trainer, pl_module)

    # -- the search ------------------------------------------------------------------------
    def find(self, trainer: Any, pl_module: Any) -> int | None:
        """Run the trials, set the pick on the batch attribute, restore the trainer; the
        pick (None where no size ran: the attribute keeps its value)."""
        if trainer.fast_dev_run:
            warnings.warn("BatchscopeFinder does nothing under fast_dev_run.", RuntimeWarning,
                          stacklevel=2)
            return None
        coordinator = _StrategyCoordinator(trainer)
        finder = Finder(self.options, pl_module.device, coordinator)
        original = lightning_getattr(pl_module, self.batch_arg_name)
        path = coordinator.share(os.path.join(
            trainer.default_root_dir, f".batchscope_finder_{uuid.uuid4().hex}.ckpt"))
        trainer.save_checkpoint(path)
        rng = RngState()
        params = _dump_params(trainer)
        fit_loop = trainer.fit_loop
        kept = (fit_loop.max_epochs, fit_loop.min_epochs, fit_loop.epoch_loop.min_steps,
                trainer.limit_val_batches)
        steps = _TrialSteps(coordinator)
        _reset_params(trainer, MAX_TRIAL_STEPS)
        trainer.callbacks = [steps]
        trainer.limit_val_batches = 0
        fit_loop.max_epochs, fit_loop.min_epochs, fit_loop.epoch_loop.min_steps = -1, 0, 0
        if trainer.progress_bar_callback:
            trainer.progress_bar_callback.disable()
        pick = None
        try:
            outcome = finder.run(self._trial(trainer, pl_module, finder, steps, params),
                                 lambda: self._model_info(pl_module),
                                 self._integration(trainer), self._where(trainer, pl_module))
            pick = outcome.batch_size
            self.report = outcome.report
        finally:
            lightning_setattr(pl_module, self.batch_arg_name,
                              pick if pick is not None else original)
            (fit_loop.max_epochs, fit_loop.min_epochs, fit_loop.epoch_loop.min_steps,
             trainer.limit_val_batches) = kept
            trainer.should_stop = False
            # The generators first: building the dataloaders again (at the pick) draws from
            # them as the fit's own first build would have.
            rng.restore()
            _restore_params(trainer, params)
            if trainer.progress_bar_callback:
                trainer.progress_bar_callback.enable()
            trainer._checkpoint_connector.restore(path)
            trainer.strategy.remove_checkpoint(path)
        self.batch_size = pick
        if self.report is not None and self.out_dir is not None and coordinator.leader:
            from batchscope.reports import write_all

            Path(self.out_dir).mkdir(parents=True, exist_ok=True)
            write_all(self.report, self.out_dir)
        return pick

    def _trial(self, trainer: Any, pl_module: Any, finder: Finder, steps: _TrialSteps,
               params: dict[str, Any]) -> Any:
        attr, device = self.batch_arg_name, pl_module.device

        def trial(batch_size: int) -> BatchResult | None:
            lightning_setattr(pl_module, attr, batch_size)
            scaling._reset_dataloaders(trainer)
            scaling._reset_progress(trainer)
            free_memory(device)
            timer = finder.timer(batch_size)
            steps.begin(batch_size, timer)
            failed: BatchResult | None = None
            try:
                scaling._try_loop_run(trainer, params)
            except Exception as exc:
                if not is_oom(exc):  # the step's own error: the fit's, raised as it is
                    if timer is not None:
                        timer.close()
                    raise
                failed = timer.failed(exc) if timer is not None else None
            finally:
                trainer.should_stop = False
            if failed is not None or timer is None:
                free_memory(device)
                return failed
            if steps.rows is not None:
                timer.close()
                raise TooFewRows(batch_size, steps.rows)
            return timer.result(self.options.units_per_row)

        return trial

    def _model_info(self, pl_module: Any) -> Any:
        return model_info(pl_module, f"lightning({type(pl_module).__name__})", self.options)

    def _integration(self, trainer: Any) -> IntegrationInfo:
        return IntegrationInfo(
            name=INTEGRATION, version=str(getattr(pl, "__version__", "")),
            step=WatchedStep.TRAINING_BATCH,
            accumulation_steps=int(getattr(trainer, "accumulate_grad_batches", 1) or 1),
            world_size=int(getattr(trainer, "world_size", 1) or 1),
            strategy=type(trainer.strategy).__name__,
            global_step_at_start=int(trainer.global_step))

    def _where(self, trainer: Any, pl_module: Any) -> str:
        """Where Lightning's lookup sets the attribute, in words."""
        name = self.batch_arg_name
        holders = []
        hparams = getattr(pl_module, "hparams", None)
        if hasattr(pl_module, name):
            holders.append(f"the module's {name}")
        elif hparams is not None and name in hparams:
            holders.append(f"the module's hparams.{name}")
        datamodule = getattr(trainer, "datamodule", None)
        if datamodule is not None and hasattr(datamodule, name):
            holders.append(f"the datamodule's {name}")
        return " and ".join(holders) or name


__all__ = ["BatchscopeFinder"]
