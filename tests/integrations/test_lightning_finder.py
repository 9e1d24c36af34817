"""``BatchscopeFinder``: batchscope's plan and pick inside a real ``lightning.Trainer.fit``,
on a small MLP (CPU): it sets the batch size, the fit goes on, and the trials leave nothing
behind (weights, optimizer state, random numbers)."""

from __future__ import annotations

import json

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from batchscope.errors import UsageError
from batchscope.profiler.timing import TimingConfig
from batchscope.records import FlagKind, Source, Status, StopKind
from batchscope.reports.flag_text import flag_text, stop_text

L = pytest.importorskip("lightning")
from batchscope.integrations.lightning_finder import BatchscopeFinder  # noqa: E402
from tests.tools.lightning_spawn import DDPSpawnThatLeavesCleanly  # noqa: E402

pytestmark = pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)`")

# Short trials: the finder's logic is under test, not the timing pass (3 samples, 50 ms).
QUICK = TimingConfig(warmup_min_s=0.0, measure_min_steps=3, measure_min_s=0.0,
                     measure_max_s=0.05)
ROWS = 256


def data(rows: int = ROWS) -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 32, generator=g)
    return TensorDataset(x, x[:, :8].argmax(dim=1))


class Classifier(L.LightningModule):
    """A 32 -> 64 -> 8 MLP with dropout (it draws random numbers), Adam (it has state), and
    ``self.log`` in its step; its dataloader reads ``self.batch_size``. It records the rows
    of every training batch, and runs out of memory (as CUDA would say it) from
    ``oom_from`` rows on."""

    def __init__(self, batch_size: int = 4, oom_from: int | None = None) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(64, 8))
        self.batch_size, self.oom_from = batch_size, oom_from
        self.rows: list[int] = []

    def training_step(self, batch, batch_idx):
        x, y = batch
        self.rows.append(len(x))
        if self.oom_from is not None and len(x) >= self.oom_from:
            hidden = self.net[0](x)  # something allocated before it runs out
            raise torch.OutOfMemoryError(f"CUDA out of memory. Tried to allocate "
                                         f"{hidden.numel() * 1024} bytes")
        loss = nn.functional.cross_entropy(self.net(x), y)
        self.log("loss", loss)
        return loss

    def train_dataloader(self):
        return DataLoader(data(), batch_size=self.batch_size, shuffle=True)

    def configure_optimizers(self):
        return torch.optim.Adam(self.parameters(), lr=1e-2)


def trainer(tmp_path, callbacks, max_steps: int = 12, **kwargs):
    return L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
                     enable_checkpointing=False, enable_progress_bar=False,
                     enable_model_summary=False, callbacks=callbacks,
                     default_root_dir=str(tmp_path / "root"), **kwargs)


def fit(tmp_path, callbacks, make=Classifier, max_steps: int = 12):
    torch.manual_seed(0)
    module = make()
    t = trainer(tmp_path, callbacks, max_steps)
    t.fit(module)
    assert t.state.finished and t.global_step == max_steps  # the fit went on to its end
    return module


def test_the_finder_sets_its_pick_and_the_fit_goes_on_as_if_untouched(tmp_path):
    finder = BatchscopeFinder(batch_sizes=[2, 8, 32], timing=QUICK,
                              out_dir=tmp_path / "report")
    module = fit(tmp_path, [finder])
    pick = finder.batch_size
    report = finder.report
    assert report is not None and report.recommendation is not None
    assert pick == report.recommendation.batch_size and pick in (2, 8, 32)
    assert module.batch_size == pick
    assert module.rows[-12:] == [pick] * 12  # every step of the fit at the pick
    assert report.run.source == Source.FINDER and report.run.integration is not None
    assert report.run.integration.name == "lightning"
    sizes = [b.batch_size for b in report.batches]
    assert sizes == [2, 8, 32] and all(b.status == Status.OK for b in report.batches)
    assert all(b.latency_s is not None and b.latency_s.n >= 3 for b in report.batches)
    # The decision rounds ran in this process: the candidates as short trials, each once a
    # round in one worker (the trainer's), and the pick read their paired shares.
    rounds = report.run.rounds
    assert rounds is not None and rounds.workers == 1 and rounds.rounds >= 5
    assert pick in rounds.candidates and report.run.drift is not None
    assert report.recommendation.rule.paired_rounds is not None
    (set_flag,) = [f for f in report.flags if f.kind == FlagKind.FINDER_SET]
    assert f"the finder set the module's batch_size to {pick}: the recommended batch " \
           "size" in flag_text(set_flag)
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["run"]["source"] == "finder"
    assert (tmp_path / "report" / "summary.md").exists()
    assert not list((tmp_path / "root").glob(".batchscope_finder_*"))  # checkpoint removed
    # The trials left nothing behind: the same fit with the pick set by hand ends with the
    # same weights, bit for bit (weights, Adam's state, the dropout's and the shuffle's
    # random numbers all restored).
    plain = fit(tmp_path, [], make=lambda: Classifier(batch_size=pick))
    assert all(torch.equal(module.state_dict()[k], plain.state_dict()[k])
               for k in plain.state_dict())


def test_largest_mode_steps_down_from_an_out_of_memory_error(tmp_path):
    # BatchSizeFinder's answer: the largest that ran (8; 16 ran out of memory), here less a
    # 25% margin: 6. The OOM is caught in the trial and the fit goes on.
    finder = BatchscopeFinder("largest", max_val=64, margin=0.25, timing=QUICK, out_dir=None)
    module = fit(tmp_path, [finder], make=lambda: Classifier(oom_from=16))
    assert finder.batch_size == 6 and module.batch_size == 6
    assert module.rows[-12:] == [6] * 12
    report = finder.report
    assert report is not None
    statuses = {b.batch_size: b.status for b in report.batches}
    assert statuses == {1: Status.OK, 2: Status.OK, 4: Status.OK, 8: Status.OK,
                        16: Status.OOM}
    assert report.stop is not None and report.stop.kind == StopKind.FAILED
    assert "CUDA out of memory" in (report.batches[-1].error or "")
    (set_flag,) = [f for f in report.flags if f.kind == FlagKind.FINDER_SET]
    assert "the largest batch that ran (8) less a 25% margin" in flag_text(set_flag)


class Broken(Classifier):
    def training_step(self, batch, batch_idx):
        if len(batch[0]) >= 8:
            raise ValueError("shapes do not match at 8 rows")
        return super().training_step(batch, batch_idx)


def test_an_error_other_than_memory_is_the_fits_own(tmp_path):
    # Lightning's finder re-raises it too: only running out of memory is a trial's answer.
    finder = BatchscopeFinder(batch_sizes=[2, 8], timing=QUICK, out_dir=None)
    with pytest.raises(ValueError, match="shapes do not match at 8 rows"):
        fit(tmp_path, [finder], make=Broken)
    assert finder.batch_size is None
    assert not list((tmp_path / "root").glob(".batchscope_finder_*"))  # cleaned up


class Rows(L.LightningDataModule):
    """A datamodule of 40 rows whose loader reads its own batch_size."""

    def __init__(self) -> None:
        super().__init__()
        self.batch_size = 4

    def train_dataloader(self):
        return DataLoader(data(40), batch_size=self.batch_size)


class Bare(Classifier):
    def train_dataloader(self):
        raise AssertionError("the datamodule's loader is the one used")


@pytest.mark.slow
def test_a_datamodule_holds_the_batch_size_and_its_rows_end_the_plan(tmp_path):
    finder = BatchscopeFinder("largest", max_val=1024, timing=QUICK, out_dir=None)
    rows = Rows()
    torch.manual_seed(0)
    module = Bare()
    del module.batch_size  # Lightning's lookup finds the datamodule's
    t = trainer(tmp_path, [finder], max_steps=3)
    t.fit(module, datamodule=rows)
    report = finder.report
    assert report is not None and report.stop is not None
    # 64 rows asked of 40: the plan ends there, the largest that ran is 32.
    assert report.stop.kind == StopKind.DATA_ROWS and report.stop.batch_size == 64
    assert "the training data gave 40 rows where batch 64 was asked for" in stop_text(
        report.stop)
    assert finder.batch_size == 32 and rows.batch_size == 32
    (set_flag,) = [f for f in report.flags if f.kind == FlagKind.FINDER_SET]
    assert "the datamodule's batch_size to 32" in flag_text(set_flag)


def test_what_the_finder_cannot_use_is_one_sentence(tmp_path):
    with pytest.raises(UsageError, match="mode must be one of fastest, largest"):
        BatchscopeFinder("biggest")
    with pytest.raises(UsageError, match="margin"):
        BatchscopeFinder("largest", margin=1.5)
    module = Classifier()
    del module.batch_size
    with pytest.raises(UsageError, match="found no 'batch_size' on the module"):
        trainer(tmp_path, [BatchscopeFinder(timing=QUICK, out_dir=None)]).fit(module)
    loader = DataLoader(data(), batch_size=4)
    with pytest.raises(UsageError, match="not dataloaders to fit"):
        trainer(tmp_path, [BatchscopeFinder(timing=QUICK, out_dir=None)]).fit(
            Classifier(), train_dataloaders=loader)


class RankRecord(Classifier):
    """Writes the rows of its training batches, its batch size and a weight sum per rank."""

    def __init__(self, out: str) -> None:
        super().__init__()
        self.out = out

    def on_fit_end(self) -> None:
        record = {"rows": self.rows, "batch_size": self.batch_size,
                  "weights": float(self.net[0].weight.sum())}
        with open(f"{self.out}/rank{self.global_rank}.json", "w") as f:
            json.dump(record, f)


@pytest.mark.slow
def test_under_ddp_every_rank_runs_the_trials_and_takes_rank_0s_answer(tmp_path):
    # Two processes on the CPU (gloo), spawned: each trial runs on both in lockstep (their
    # all-reduces), rank 0 times it and decides, and both set its pick.
    finder = BatchscopeFinder(batch_sizes=[2, 8], timing=QUICK, out_dir=tmp_path / "report")
    t = L.Trainer(max_steps=4, accelerator="cpu", devices=2, strategy=DDPSpawnThatLeavesCleanly(),
                  logger=False, enable_checkpointing=False, enable_progress_bar=False,
                  enable_model_summary=False, callbacks=[finder],
                  default_root_dir=str(tmp_path / "root"))
    t.fit(RankRecord(str(tmp_path)))
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["rows"] == ranks[1]["rows"]  # the same trials, step for step
    pick = ranks[0]["batch_size"]
    assert pick in (2, 8) and ranks[1]["batch_size"] == pick
    assert ranks[0]["rows"][-4:] == [pick] * 4
    assert ranks[0]["weights"] == ranks[1]["weights"]  # DDP kept them in step
    doc = json.loads((tmp_path / "report" / "report.json").read_text())  # rank 0's
    assert doc["run"]["integration"]["world_size"] == 2
    assert doc["recommendation"]["batch_size"] == pick
    assert any(f["kind"] == "finder_set" and "all 2 processes took rank 0's answer" in f["text"]
               for f in doc["flags"])
