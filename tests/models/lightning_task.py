"""A LightningModule and LightningDataModule swept by ``diagnose`` through LightningTask."""

import lightning.pytorch as pl
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from batchscope.integrations.lightning import LightningTask

MODE = "train"
BATCH_SIZES = [2, 8, 64]  # 64 rows from a set of 40: drawn cycling
ROWS, FEATURES, HIDDEN, CLASSES = 40, 32, 64, 4


class LitMLP(pl.LightningModule):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(),
                                 nn.Linear(HIDDEN, CLASSES))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.log("train_loss", loss)  # outside a Trainer: a warning, nothing logged
        return {"loss": loss}

    def configure_optimizers(self):
        optimizer = torch.optim.SGD(self.parameters(), lr=0.1, momentum=0.9)
        return [optimizer], [torch.optim.lr_scheduler.StepLR(optimizer, 10)]


class RandomData(pl.LightningDataModule):
    def setup(self, stage: str) -> None:
        g = torch.Generator().manual_seed(0)
        self.data = TensorDataset(torch.randn(ROWS, FEATURES, generator=g),
                                  torch.randint(0, CLASSES, (ROWS,), generator=g))

    def train_dataloader(self) -> DataLoader:
        return DataLoader(self.data, batch_size=8)


task = LightningTask(LitMLP, RandomData)
build_model, make_inputs, run, loss, make_optimizer = task.contract()
