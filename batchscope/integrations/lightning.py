"""``BatchscopeCallback``: :class:`batchscope.watch` for a Lightning ``Trainer``, as a callback.

Example:
    >>> from batchscope.integrations.lightning import BatchscopeCallback  # doctest: +SKIP
    >>> cb = BatchscopeCallback(out_dir="report", unit="image")  # doctest: +SKIP
    >>> lightning.Trainer(max_steps=1000, callbacks=[cb]).fit(model, loader)  # doctest: +SKIP
    >>> cb.report.batches[0].throughput_per_s  # doctest: +SKIP

It works through Lightning's own hooks only. The watch opens at the start of the first
training batch (``on_train_batch_start``, after the batch was fetched and moved to the
device), so the first watched step is exactly that batch's training step: the dataloader's
start-up, the sanity check and ``on_train_start`` are not part of it. Each
``on_train_batch_end`` ends one watched step, so every later step is the loop as it runs
from the end of one batch to the end of the next: fetching the batch included, and any
validation or checkpointing Lightning runs in between. What runs before
``on_train_batch_start`` (fetching the batch and moving it to the device, Lightning's own
work between batches) is the step's data loading: in its time and throughput, outside its
op breakdown and roofline, which are the batch's training step. Once the watch has its
steps it removes its hooks, and the report is written (``callback.report``; report.json,
report.html and summary.md in ``out_dir``) while training goes on untouched.
``on_train_end``, ``on_exception`` and ``teardown`` close a watch that is still open: a
run that ended early still gets a partial report, as ``watch``'s ``__exit__`` gives one.
Only global rank 0 watches and writes; the other ranks do nothing. Under a DDP strategy
the report is rank 0's steps, each with its all-reduce, at the batch size per process.
"""

from __future__ import annotations

import warnings
from typing import Any

from batchscope.errors import UsageError
from batchscope.integrations.watched_run import WatchedCallback
from batchscope.records import Flag
from batchscope.records.flag_payloads import LightningAccumulates, LightningProcesses
from batchscope.records.report import IntegrationInfo, WatchedStep
from batchscope.tensors import iter_tensors

try:
    import lightning.pytorch as pl
except ImportError:
    try:
        import pytorch_lightning as pl  # type: ignore[no-redef]
    except ImportError:
        raise ImportError("batchscope's Lightning callback needs Lightning: "
                          "pip install 'batchscope[lightning]'.") from None

INTEGRATION = "lightning"


def batch_rows(batch: Any) -> int | None:
    """Rows in a batch as the dataloader yields it: the first tensor's first dimension (the
    rule ``watch`` applies to the model's inputs); None when the batch holds no tensor."""
    return next((int(t.shape[0]) for t in iter_tensors(batch) if t.dim() > 0), None)


class BatchscopeCallback(WatchedCallback, pl.Callback):
    """Profile a few training batches of ``Trainer.fit`` and report on their batch size.

    A watched step is one training batch (one ``on_train_batch_end`` to the next), and the
    report's batch size is the rows of the batches the dataloader yields (per device; the
    first tensor's first dimension) unless ``batch_size`` is given. With gradient
    accumulation (``Trainer(accumulate_grad_batches=N)``) it is still one batch: the report
    is then the roofline of that batch's forward and backward, the batch size you set; the
    optimizer steps only after every N-th batch, so only some watched steps hold its update
    (the counted one may not), and the report says so in a flag. The first optimizer of the
    trainer (``trainer.optimizers[0]``) is the one whose state counts with the weights.

    The model's inputs count as inputs (state) only where ``training_step`` calls the
    LightningModule itself (``self(x)``); a call of a submodule (``self.net(x)``) leaves
    them with the activations. The first report on a machine measures its ceilings first
    (seconds, then cached). The callback watches the first ``fit`` it is used in;
    ``report`` then stays.

    Args:
        out_dir: where to write report.json, report.html and summary.md; None writes
            nothing (``report`` is still set).
        unit: what one row yields ("sample", "token", "image").
        batch_size: rows per batch; None takes it from the first training batch.
        warmup_steps, timed_steps, profiled_steps: how many batches each phase of
            :class:`batchscope.watch` takes (fast steps are timed in blocks: see there).

    Raises:
        UsageError: a step count, batch size or unit ``watch`` cannot use.
    """

    # -- Lightning's hooks ---------------------------------------------------------------
    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any,
                             batch_idx: int) -> None:
        if self._run.can_open and trainer.is_global_zero:
            self._open(trainer, pl_module, batch)
        # The batch is fetched and on the device: the step's own work begins. Marked here,
        # not at the module's call, since training_step may call submodules only.
        self._run.batch_ready()

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any,
                           batch_idx: int) -> None:
        self._run.step()

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        self.close()

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        self.close()

    def on_exception(self, trainer: Any, pl_module: Any, exception: BaseException) -> None:
        # The run's own exception is the one to see: a report that cannot be written is
        # only a warning here.
        try:
            self.close()
        except Exception as exc:  # noqa: BLE001 - never mask the training run's error
            warnings.warn(f"batchscope could not write its partial report: {exc}",
                          RuntimeWarning, stacklevel=2)

    def _open(self, trainer: Any, pl_module: Any, batch: Any) -> None:
        optimizers = list(getattr(trainer, "optimizers", None) or [])
        rows = self._run.batch_size or batch_rows(batch)
        accumulate = int(getattr(trainer, "accumulate_grad_batches", 1) or 1)
        world = int(getattr(trainer, "world_size", 1) or 1)
        strategy = type(trainer.strategy).__name__
        version = str(getattr(pl, "__version__", ""))  # not re-exported in its stubs
        about = IntegrationInfo(name=INTEGRATION, version=version,
                                step=WatchedStep.TRAINING_BATCH, accumulation_steps=accumulate,
                                world_size=world, strategy=strategy,
                                global_step_at_start=int(trainer.global_step))
        flags = []
        if accumulate > 1:
            flags.append(Flag.of(LightningAccumulates(batches=accumulate, rows=rows)))
        if world > 1:
            flags.append(Flag.of(LightningProcesses(world=world, strategy=strategy)))
        self._run.open(pl_module, optimizers[0] if optimizers else None, rows, about, flags)


class LightningTask:
    """The model-file contract for a ``LightningModule`` and its data, so ``diagnose`` sweeps
    its training step (``training_step``, ``configure_optimizers``) at every batch size:
    the full sweep beside Lightning's ``BatchSizeFinder``, on the same module.

    In a model file (run it with ``diagnose lit_model.py``)::

        from batchscope.integrations.lightning import LightningTask
        from my_project import LitClassifier, MNISTDataModule

        task = LightningTask(LitClassifier, MNISTDataModule)
        build_model, make_inputs, run, loss, make_optimizer = task.contract()
        MODE = "train"

    ``make_inputs(batch_size)`` draws ``batch_size`` rows from the training set (the
    datamodule's ``train_dataloader()`` after ``prepare_data()`` and ``setup("fit")``, or
    ``dataloader()``) through the loader's own ``collate_fn``, cycling when the set is
    smaller; ``run`` calls ``training_step(batch, 0)`` and ``loss`` takes its loss (the
    tensor, or ``["loss"]`` of a dict); ``make_optimizer`` takes the first optimizer
    ``configure_optimizers()`` returns (a scheduler is not stepped). Outside a Trainer,
    ``self.log`` in ``training_step`` only warns. The module is built in the sweep's worker,
    so the factories must be importable (classes or top-level functions).

    Args:
        module: the LightningModule class, or a function building one.
        datamodule: the LightningDataModule class, or a function building one.
        dataloader: instead of a datamodule, a function returning the training DataLoader.
    """

    def __init__(self, module: Any, datamodule: Any = None, *, dataloader: Any = None) -> None:
        if (datamodule is None) == (dataloader is None):
            raise UsageError("LightningTask takes a datamodule or a dataloader function "
                             "(one of them).")
        self.module, self.datamodule, self.dataloader = module, datamodule, dataloader
        self._loader: Any = None

    def contract(self) -> tuple[Any, Any, Any, Any, Any]:
        """(build_model, make_inputs, run, loss, make_optimizer), for a model file."""
        return self.build_model, self.make_inputs, self.run, self.loss, self.make_optimizer

    def build_model(self) -> Any:
        return self.module()

    def _train_loader(self) -> Any:
        if self._loader is None:
            if self.dataloader is not None:
                self._loader = self.dataloader()
            else:
                dm = self.datamodule()
                dm.prepare_data()
                dm.setup("fit")
                self._loader = dm.train_dataloader()
        return self._loader

    def make_inputs(self, batch_size: int) -> Any:
        loader = self._train_loader()
        dataset = getattr(loader, "dataset", None)
        if dataset is None or not hasattr(dataset, "__getitem__") or not hasattr(
                dataset, "__len__") or len(dataset) == 0:
            raise TypeError("LightningTask draws rows by index: its training loader needs a "
                            "non-empty map-style dataset (with __getitem__ and __len__)")
        from torch.utils.data import default_collate

        collate = getattr(loader, "collate_fn", None) or default_collate
        return collate([dataset[i % len(dataset)] for i in range(batch_size)])

    def run(self, model: Any, inputs: Any) -> Any:
        return model.training_step(inputs, 0)

    def loss(self, outputs: Any, inputs: Any) -> Any:
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        if loss is None:
            raise TypeError("training_step returned no loss (a tensor, or a dict with "
                            "'loss'); batchscope needs one to run the backward")
        return loss

    def make_optimizer(self, model: Any) -> Any:
        config = model.configure_optimizers()
        return _first_optimizer(config)


def _first_optimizer(config: Any) -> Any:
    """The first optimizer in what ``configure_optimizers`` returns: an optimizer, a list
    or tuple (of optimizers, or of lists with schedulers), or a dict with "optimizer"."""
    import torch

    if isinstance(config, torch.optim.Optimizer):
        return config
    if isinstance(config, dict) and "optimizer" in config:
        return _first_optimizer(config["optimizer"])
    if isinstance(config, (list, tuple)) and config:
        return _first_optimizer(config[0])
    raise TypeError(f"configure_optimizers() returned {type(config).__name__}, with no "
                    "optimizer batchscope can step")


__all__ = ["BatchscopeCallback", "LightningTask"]
