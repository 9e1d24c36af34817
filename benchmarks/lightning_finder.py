"""PyTorch Lightning's BatchSizeFinder (power mode) on a batchscope model file.

The model file becomes a LightningModule (``validation_step`` running the forward pass for
inference files, the file's loss and optimizer for training files) with a DataLoader whose
``collate_fn`` builds the batch with the file's ``make_inputs`` (once per batch size, as
batchscope and the plain sweep do). ``Tuner.scale_batch_size(mode="power")`` then doubles the
batch size, running ``steps_per_trial`` steps at each, until an out-of-memory error or
``max_val``; its pick is the largest batch size that did not fail.

Lightning's defaults are kept (init_val 2, steps_per_trial 3, max_trials 25) except
``max_val``, set to batchscope's default ``--max-batch`` (1024): without it the finder keeps
doubling on a CPU until the host kills it. Lightning stops as soon as the next size would
reach ``max_val`` and returns ``max_val`` itself, untried. Inference files are tuned with
``method="validate"``: with ``method="predict"`` Lightning 2.6 does not apply
``steps_per_trial`` (it limits evaluation loops only) and runs the whole predict set at
every trial.

    python benchmarks/lightning_finder.py samples/cnn.py --json
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import tempfile
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import lightning as L
import torch
from lightning.pytorch.tuner import Tuner
from torch.utils.data import DataLoader

from benchmarks.plain_sweep import load_module, make_step

MAX_VAL = 1024  # batchscope's default --max-batch


class _Collate:
    """Build a batch of ``len(indices)`` rows with the file's make_inputs, once per size."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.size = -1
        self.batch: Any = None

    def __call__(self, indices: list[int]) -> Any:
        if len(indices) != self.size:
            self.batch = None  # free the previous size first
            self.batch = self.module.make_inputs(len(indices))
            self.size = len(indices)
        return self.batch


class FileModule(L.LightningModule):
    """A model file as a LightningModule with a ``batch_size`` the finder scales."""

    def __init__(self, path: str, dataset_len: int) -> None:
        super().__init__()
        self.file = load_module(path)
        self.model = self.file.build_model()
        self.batch_size = 2  # Lightning's init_val
        self.dataset_len = dataset_len
        self.collate = _Collate(self.file)

    def _loader(self) -> DataLoader:
        return DataLoader(range(self.dataset_len), batch_size=self.batch_size,
                          collate_fn=self.collate, num_workers=0)


class InferenceModule(FileModule):
    """Inference files: the forward pass as the validation step (no metrics)."""

    def val_dataloader(self) -> DataLoader:
        return self._loader()

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        make_step(self.file, self.model, batch, None)()


class TrainModule(FileModule):
    """Training files: their loss; Lightning runs backward and their optimizer."""

    def train_dataloader(self) -> DataLoader:
        return self._loader()

    def training_step(self, batch: Any, batch_idx: int) -> torch.Tensor:
        return self.file.loss(make_step(self.file, self.model, batch, None)(), batch)

    def configure_optimizers(self) -> torch.optim.Optimizer:
        return self.file.make_optimizer(self.model)


def find(path: str, max_val: int = MAX_VAL) -> int:
    """Run the finder on the model file; its pick."""
    train = getattr(load_module(path), "MODE", "inference") == "train"
    module = (TrainModule if train else InferenceModule)(path, dataset_len=3 * 2 * max_val)
    with tempfile.TemporaryDirectory() as root:
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=1, logger=False,
                            enable_checkpointing=False, enable_progress_bar=False,
                            enable_model_summary=False, default_root_dir=root)
        pick = Tuner(trainer).scale_batch_size(module, method="fit" if train else "validate",
                                               mode="power", max_val=max_val)
    return int(pick)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--max-val", type=int, default=MAX_VAL)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    if args.json:
        warnings.filterwarnings("ignore")
        logging.getLogger("lightning").setLevel(logging.ERROR)
        os.environ.setdefault("PL_DISABLE_FORK", "1")
    pick = find(args.model, args.max_val)
    print(json.dumps({"pick": pick}) if args.json else f"pick: batch {pick}")


if __name__ == "__main__":
    main()
