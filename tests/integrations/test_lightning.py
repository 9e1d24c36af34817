"""``BatchscopeCallback``: batchscope.watch inside a real ``lightning.Trainer.fit``."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from batchscope.errors import UsageError
from batchscope.records import FlagKind
from batchscope.reports.flag_text import flag_text
from tests.integrations.conftest import watched_batch

L = pytest.importorskip("lightning")
from batchscope.integrations.lightning import BatchscopeCallback  # noqa: E402
from tests.tools.lightning_spawn import DDPSpawnThatLeavesCleanly  # noqa: E402

# Lightning's own use of torch's pytree API, not this test's.
pytestmark = [pytest.mark.filterwarnings(r"ignore:`isinstance\(treespec, LeafSpec\)`"),
              pytest.mark.usefixtures("use_quick_ceilings")]

BATCH = 16
# Few phase steps, so that a fit of 40 batches finishes the watch even where the steps
# are fast enough to be timed in blocks of several.
FEW = {"warmup_steps": 1, "timed_steps": 3, "profiled_steps": 1}


class TinyMLP(L.LightningModule):
    """A 32 -> 64 -> 8 MLP classifier; records its training losses."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 8))
        self.losses: list[float] = []

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = nn.functional.cross_entropy(self(x), y)
        self.losses.append(loss.item())
        return loss

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.5)


def loader(rows: int = 20 * BATCH) -> DataLoader:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(rows, 32, generator=g)
    y = x[:, :8].argmax(dim=1)  # learnable: the largest of the first 8 features
    return DataLoader(TensorDataset(x, y), batch_size=BATCH, shuffle=True, generator=g)


def fit(cb: BatchscopeCallback, max_steps: int, **trainer_args) -> TinyMLP:
    torch.manual_seed(0)
    model = TinyMLP()
    trainer = L.Trainer(max_steps=max_steps, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb], **trainer_args)
    trainer.fit(model, loader())
    assert trainer.state.finished  # fit ended normally
    return model


def test_callback_reports_the_batch_size_lightning_trains(tmp_path):
    cb = BatchscopeCallback(out_dir=tmp_path / "report", **FEW)
    model = fit(cb, max_steps=40)
    assert len(model.losses) == 40  # the fit went on after the watch was done
    first, last = sum(model.losses[:5]) / 5, sum(model.losses[-5:]) / 5
    assert last < first  # training still trains
    assert not cb.active and cb.report is not None and not cb.report.partial
    doc, batch = watched_batch(tmp_path / "report", "sample", BATCH)
    matmuls = [op for op in batch["ops"] if op["name"] in ("addmm", "mm")]
    assert matmuls and all(op["flops"] > 0 for op in matmuls)
    # forward and weight grad of both linears, the input grad of the second only (x needs
    # no gradient): 2 FLOPs per multiply-add
    assert sum(op["flops"] for op in matmuls) == 2 * BATCH * (2 * 32 * 64 + 3 * 64 * 8)
    assert batch["bytes"]["state"] > 0  # the batch, seen through self(x)
    run = doc["run"]["integration"]
    assert run["name"] == "lightning" and run["version"] == L.__version__
    assert run["step"] == "training_batch" and run["accumulation_steps"] == 1
    assert all(f["kind"] != "lightning_accumulates" for f in doc["flags"])


class SubmoduleMLP(L.LightningModule):
    """A 256 -> 1024 -> 256 MLP trained with AdamW whose training_step calls its submodule,
    never the LightningModule itself: the module's own hook sees no step begin."""

    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 256))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.mse_loss(self.net(x), y)

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters())


def test_the_batchs_step_is_reported_apart_from_fetching_it(tmp_path):
    # issue 32: the dataloader's fetch of a TensorDataset batch (a select per row and
    # tensor, then stack) was in every watched step: 3-12% coverage, the matmuls at 0 s
    cb = BatchscopeCallback(out_dir=None, **FEW)
    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    data = TensorDataset(torch.randn(8192, 256, generator=g), torch.randn(8192, 256, generator=g))
    trainer = L.Trainer(max_steps=40, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb])
    trainer.fit(SubmoduleMLP(), DataLoader(data, batch_size=64, shuffle=True, generator=g))
    assert not cb.report.partial
    (batch,) = cb.report.batches
    names = {op.name for op in batch.ops}
    assert not names & {"select", "stack"} and "select" not in batch.unmatched_ops_s
    matmuls = [op for op in batch.ops if op.name in ("addmm", "mm")]
    assert matmuls and all(op.time_s > 0 for op in matmuls)
    assert batch.coverage is not None and batch.coverage >= 0.9, batch.coverage
    assert cb.report.run.watch.data_loading_s > 0  # on_train_batch_start marked each batch


def test_a_fit_shorter_than_the_watch_writes_a_partial_report(tmp_path):
    cb = BatchscopeCallback(out_dir=tmp_path)  # the default phases: more than 4 steps
    fit(cb, max_steps=4)
    assert not cb.active and cb.report.partial
    doc = json.loads((tmp_path / "report.json").read_text())
    assert doc["partial"] and "ended before" in doc["stop_reason"]
    assert doc["run"]["watch"]["steps"] == 4


def test_accumulation_keeps_one_batch_per_watched_step_and_says_so(tmp_path):
    cb = BatchscopeCallback(out_dir=None, batch_size=None, **FEW)
    fit(cb, max_steps=20, accumulate_grad_batches=2)  # 40 batches
    assert not cb.report.partial
    (batch,) = cb.report.batches
    assert batch.batch_size == BATCH
    assert cb.report.run.integration.accumulation_steps == 2
    assert any("accumulates gradients over 2 batches" in flag_text(f) for f in cb.report.flags)
    (said,) = [f for f in cb.report.flags if f.kind == FlagKind.LIGHTNING_ACCUMULATES]
    assert flag_text(said) == (
        "Lightning accumulates gradients over 2 batches: each watched step is one batch of "
        f"{BATCH} rows, and the optimizer steps once every 2 batches, so only some watched "
        "steps hold its update (the counted step may not).")


class FailsAtBatch5(TinyMLP):
    def training_step(self, batch, batch_idx):
        if batch_idx == 5:
            raise RuntimeError("the user's own error")
        return super().training_step(batch, batch_idx)


def test_an_exception_in_the_fit_closes_the_watch_and_writes_a_partial_report(tmp_path):
    cb = BatchscopeCallback(out_dir=tmp_path)
    model = FailsAtBatch5()
    trainer = L.Trainer(max_steps=40, accelerator="cpu", devices=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb])
    with pytest.raises(RuntimeError, match="the user's own error"):
        trainer.fit(model, loader())
    assert not cb.active and cb.report.partial
    assert json.loads((tmp_path / "report.json").read_text())["partial"]
    assert not model._forward_pre_hooks  # watch's hooks came off
    assert not torch._C._len_torch_dispatch_stack()  # no counting mode left behind


def test_bad_arguments_get_one_sentence():
    with pytest.raises(UsageError, match="timed_steps must be a whole number of at least 1"):
        BatchscopeCallback(timed_steps=0)
    with pytest.raises(UsageError, match="batch_size must be"):
        BatchscopeCallback(batch_size=-2)


def test_without_the_library_the_import_says_what_to_install(monkeypatch):
    for missing in ("lightning", "lightning.pytorch", "pytorch_lightning"):
        monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, "batchscope.integrations.lightning")
    with pytest.raises(ImportError, match=r"pip install 'batchscope\[lightning\]'"):
        importlib.import_module("batchscope.integrations.lightning")


@pytest.mark.slow
def test_under_ddp_rank_0_reports_its_steps_with_the_all_reduce(tmp_path, quick_ceilings,
                                                                 monkeypatch):
    # Two CPU processes under Lightning's own DDP strategy (ddp_spawn: the test cannot be
    # re-run as a script). The ranks read the ceilings from the cache the environment
    # names, where the quick ones are put first, for every thread count (the cache's key
    # holds it, and Lightning gives each rank its share of the cores): the spawned
    # processes measure nothing (a full calibration in rank 0 took this test 36 s).
    import os

    from batchscope.hardware.cache import cache_path, machine_key, write_json_atomically

    monkeypatch.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path / "ceilings"))
    threads = torch.get_num_threads()
    try:
        for n in range(1, (os.cpu_count() or 1) + 1):
            torch.set_num_threads(n)
            quick_ceilings.key = machine_key("cpu")
            write_json_atomically(cache_path("cpu"), quick_ceilings.to_dict(), "ceilings")
    finally:
        torch.set_num_threads(threads)
    out = tmp_path / "report"
    cb = BatchscopeCallback(out_dir=out, **FEW)
    trainer = L.Trainer(max_steps=12, accelerator="cpu", devices=2,
                        strategy=DDPSpawnThatLeavesCleanly(),
                        logger=False, enable_checkpointing=False, enable_progress_bar=False,
                        enable_model_summary=False, callbacks=[cb])
    # A loader without loader()'s shuffling torch.Generator: with it, the spawned ranks
    # failed to unpickle the loader ("unable to resize file" of a shared storage).
    data = loader().dataset
    trainer.fit(TinyMLP(), DataLoader(data, batch_size=BATCH))
    assert trainer.state.finished
    doc = json.loads((out / "report.json").read_text())  # rank 0 wrote it, in its process
    (batch,) = doc["batches"]
    assert batch["batch_size"] == BATCH and batch["status"] == "ok"
    assert doc["run"]["integration"]["world_size"] == 2
    assert "c10d::allreduce_" in {op["name"] for op in batch["ops"]}
    assert any("Lightning ran 2 processes" in f["text"] for f in doc["flags"])


@pytest.mark.slow
def test_lightning_task_sweeps_the_training_step_at_every_batch_size(tmp_path):
    from batchscope.api import Options, diagnose_file
    from batchscope.records import Status
    from batchscope.records.report import Mode
    from tests.conftest import MODELS

    report = diagnose_file(MODELS / "lightning_task.py",
                           Options(out_dir=str(tmp_path), min_time_s=0.02,
                                   measure_ceilings=False))
    assert [(b.batch_size, b.status) for b in report.batches] == [
        (2, Status.OK), (8, Status.OK), (64, Status.OK)]
    assert report.model.mode == Mode.TRAIN
    step = report.model.training_step
    assert step is not None
    assert step.optimizer_from_file and step.loss_from_file and not step.defaults_used
    for batch in report.batches:
        b = batch.batch_size
        # The first layer's forward product, 32 -> 64 features for every row drawn.
        forward = [op for op in batch.ops if op.name == "addmm"
                   and op.input_shapes == [[64], [b, 32], [32, 64]]]
        assert forward and forward[0].flops == 2 * b * 32 * 64
    # SGD with momentum: one buffer a parameter, read and written with the weights.
    assert (tmp_path / "report.json").exists()


def test_lightning_task_takes_the_first_optimizer_and_refuses_an_iterable_set():
    from torch.utils.data import IterableDataset

    from batchscope.integrations.lightning import LightningTask

    model = TinyMLP()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    task = LightningTask(TinyMLP, dataloader=lambda: DataLoader(list(range(4))))
    for config in (opt, [opt], ([opt], []), {"optimizer": opt, "lr_scheduler": None}):
        model.configure_optimizers = lambda config=config: config
        assert task.make_optimizer(model) is opt

    class Stream(IterableDataset):
        def __iter__(self):
            yield torch.zeros(2)

    streaming = LightningTask(TinyMLP, dataloader=lambda: DataLoader(Stream()))
    with pytest.raises(TypeError, match="map-style dataset"):
        streaming.make_inputs(4)
    with pytest.raises(UsageError, match="a datamodule or a dataloader"):
        LightningTask(TinyMLP)


@pytest.mark.slow
def test_importing_the_watch_module_first_leaves_batchscope_watch_the_class():
    # A submodule named watch was bound to the package's name by the first import of it
    # (the callbacks' import did): batchscope.watch(...) then called a module. A fresh
    # interpreter, the module imported before the package's name is looked up.
    import subprocess

    code = ("import batchscope.watching, batchscope, inspect; "
            "assert inspect.isclass(batchscope.watch), batchscope.watch")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
