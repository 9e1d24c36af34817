"""``batchscope.find_batch_size``: accelerate's decorator shape, the fastest batch size;
around a plain training loop, and around a real ``transformers.Trainer`` with
``BatchscopeFinderCallback`` (a tiny GPT-2 built from a config)."""

from __future__ import annotations

import pytest
import torch
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import batchscope
from batchscope.errors import UsageError
from batchscope.find_function import FindBatchSize
from batchscope.profiler.timing import TimingConfig
from batchscope.records import FlagKind, Source, Status, StopKind
from batchscope.reports.flag_text import flag_text

# Short trials: the decorator's logic is under test, not the timing pass.
QUICK = TimingConfig(warmup_min_s=0.0, measure_min_steps=3, measure_min_s=0.0,
                     measure_max_s=0.05)


def data() -> TensorDataset:
    g = torch.Generator().manual_seed(0)
    x = torch.randn(256, 32, generator=g)
    return TensorDataset(x, x[:, :8].argmax(dim=1))


def make_model() -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Dropout(0.2), nn.Linear(64, 8))
    return model, torch.optim.Adam(model.parameters(), lr=1e-2)


def loop(batch_size: int, model: nn.Module, optimizer: torch.optim.Optimizer,
         rows: list[int], step=None, oom_from: int | None = None, steps: int = 10) -> float:
    """A plain loop of ``steps`` steps (epochs as needed); the last loss."""
    loss = torch.tensor(0.0)
    done = 0
    while done < steps:
        for x, y in DataLoader(data(), batch_size=batch_size, shuffle=True):
            rows.append(len(x))
            if oom_from is not None and len(x) >= oom_from:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            loss = nn.functional.cross_entropy(model(x), y)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            done += 1
            if step is not None:
                step()
            if done == steps:
                break
    return float(loss.detach())


def test_a_decorated_loop_runs_at_the_pick_as_if_no_trial_had_run(tmp_path):
    model, optimizer = make_model()
    rows: list[int] = []

    @batchscope.find_batch_size(batch_sizes=[2, 8, 32], timing=QUICK,
                                out_dir=tmp_path / "report")
    def train(batch_size, model, optimizer):
        return loop(batch_size, model, optimizer, rows, step=train.step)

    assert isinstance(train, FindBatchSize)
    train.attach(model, optimizer)
    torch.manual_seed(1)
    last = train(model, optimizer)
    pick = train.batch_size
    report = train.report
    assert report is not None and report.recommendation is not None
    assert pick == report.recommendation.batch_size and pick in (2, 8, 32)
    assert rows[-10:] == [pick] * 10  # the run proper: all its steps at the pick
    assert report.run.source == Source.FINDER
    assert [b.batch_size for b in report.batches] == [2, 8, 32]
    assert all(b.status == Status.OK for b in report.batches)
    (set_flag,) = [f for f in report.flags if f.kind == FlagKind.FINDER_SET]
    assert "a step being one step of the training function" in flag_text(set_flag)
    assert (tmp_path / "report" / "report.json").exists()
    # Nothing the trials did is left: the same run at the pick by hand ends the same.
    plain, plain_optimizer = make_model()
    torch.manual_seed(1)
    assert loop(pick, plain, plain_optimizer, []) == last
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))


@pytest.mark.slow
def test_an_out_of_memory_error_ends_its_trial_and_the_plan_goes_no_higher():
    model, optimizer = make_model()
    rows: list[int] = []

    @batchscope.find_batch_size(starting_batch_size=64, mode="largest", timing=QUICK)
    def train(batch_size):
        # The run proper would not run out of memory at its pick (8).
        return loop(batch_size, model, optimizer, rows, step=train.step, oom_from=16)

    train()
    assert train.batch_size == 8 and rows[-10:] == [8] * 10
    report = train.report
    assert report is not None and report.stop is not None
    assert report.stop.kind == StopKind.FAILED and report.batches[-1].status == Status.OOM


def test_the_decorator_takes_no_batch_size_from_its_caller():
    @batchscope.find_batch_size(batch_sizes=[1], timing=QUICK)
    def train(batch_size):
        return batch_size

    with pytest.raises(UsageError, match="call it without the first argument"):
        train(4)
    with pytest.raises(UsageError, match="mode must be one of"):
        batchscope.find_batch_size(mode="quickest")


transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from batchscope.integrations.hf_trainer import BatchscopeFinderCallback  # noqa: E402

# The tiny GPT-2 and its data of the Trainer callback's own tests.
from tests.integrations.test_hf_trainer import SEQ, Sequences, tiny_gpt2  # noqa: E402


def training_args(tmp_path, batch_size: int):
    return transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=8, per_device_train_batch_size=batch_size,
        learning_rate=1e-2, report_to=[], save_strategy="no", logging_strategy="no",
        use_cpu=True, disable_tqdm=True, dataloader_num_workers=0)


@pytest.mark.slow
def test_a_trainer_with_the_finder_callback_finds_sets_and_trains(tmp_path):
    model = tiny_gpt2()
    seen: list[int] = []

    class Rows(transformers.TrainerCallback):
        def on_step_begin(self, args, state, control, **kwargs):
            seen.append(args.per_device_train_batch_size)

    @batchscope.find_batch_size(batch_sizes=[1, 4, 16], unit="sequence", units_per_row=SEQ,
                                timing=QUICK)
    def train(batch_size):
        trainer = transformers.Trainer(model=model, args=training_args(tmp_path, batch_size),
                                       train_dataset=Sequences(),
                                       callbacks=[BatchscopeFinderCallback(), Rows()])
        return trainer.train()

    output = train()
    pick = train.batch_size
    assert pick in (1, 4, 16) and output.global_step == 8  # the run went on to its end
    assert seen[-8:] == [pick] * 8
    report = train.report
    assert report is not None and [b.batch_size for b in report.batches] == [1, 4, 16]
    assert report.model.unit == "sequence" and report.model.units_per_row == SEQ
    assert report.model.parameters > 0  # the model the callback attached
    # The trials left the model as they found it: a plain run at the pick ends the same.
    plain = tiny_gpt2()
    transformers.Trainer(model=plain, args=training_args(tmp_path, pick),
                         train_dataset=Sequences()).train()
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(),
                                                 plain.state_dict().values()))


@pytest.mark.slow
def test_a_trainer_built_outside_the_function_is_one_sentence(tmp_path):
    model = tiny_gpt2()
    trainer = transformers.Trainer(model=model, args=training_args(tmp_path, 2),
                                   train_dataset=Sequences(),
                                   callbacks=[BatchscopeFinderCallback()])

    @batchscope.find_batch_size(batch_sizes=[4], timing=QUICK)
    def train(batch_size):
        return trainer.train()

    with pytest.raises(UsageError, match="build the Trainer inside the decorated function"):
        train()


def _ddp_rank(rank: int, world: int, port: int, out: str) -> None:
    """One rank of a decorated DDP loop (gloo, CPU): writes its rows and its pick."""
    import json
    import os

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.distributed.init_process_group("gloo", rank=rank, world_size=world)
    try:
        model, optimizer = make_model()
        ddp = nn.parallel.DistributedDataParallel(model)
        rows: list[int] = []

        @batchscope.find_batch_size(batch_sizes=[2, 8], timing=QUICK)
        def train(batch_size):
            return loop(batch_size, ddp, optimizer, rows, step=train.step, steps=6)

        train.attach(model, optimizer)
        train()
        with open(f"{out}/rank{rank}.json", "w") as f:
            json.dump({"rows": rows, "pick": train.batch_size,
                       "report": train.report is not None,
                       "weights": float(model[0].weight.sum())}, f)
        # Both ranks leave together: a rank tearing down gloo while its peer still talks
        # to it aborted the peer at exit ("terminate called without an active exception",
        # SIGABRT) once in a full CI-like run of the suite.
        torch.distributed.barrier()
    finally:
        torch.distributed.destroy_process_group()


@pytest.mark.slow
def test_under_torch_distributed_every_rank_takes_rank_0s_answer(tmp_path):
    import json
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.multiprocessing.spawn(_ddp_rank, args=(2, port, str(tmp_path)), nprocs=2)
    ranks = [json.loads((tmp_path / f"rank{r}.json").read_text()) for r in (0, 1)]
    assert ranks[0]["rows"] == ranks[1]["rows"]  # the same trials, step for step
    assert ranks[0]["pick"] == ranks[1]["pick"] and ranks[0]["pick"] in (2, 8)
    assert ranks[0]["rows"][-6:] == [ranks[0]["pick"]] * 6
    assert [r["report"] for r in ranks] == [True, False]  # rank 0's report only
    assert ranks[0]["weights"] == ranks[1]["weights"]
