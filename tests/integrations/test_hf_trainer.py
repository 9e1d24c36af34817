"""``BatchscopeTrainerCallback``: batchscope.watch inside a real ``transformers.Trainer``
training a tiny GPT-2 built from a config (random weights, nothing downloaded)."""

from __future__ import annotations

import importlib
import json
import sys

import pytest
import torch

from batchscope.errors import UsageError
from batchscope.records import FlagKind
from batchscope.reports.flag_text import flag_text
from tests.integrations.conftest import watched_batch

transformers = pytest.importorskip("transformers")
pytest.importorskip("accelerate")
from batchscope.integrations.hf_trainer import BatchscopeTrainerCallback  # noqa: E402

pytestmark = pytest.mark.usefixtures("use_quick_ceilings")

MICRO = 4  # per_device_train_batch_size
SEQ = 16
VOCAB = 100
# Few phase steps, so that a short run finishes the watch even where the steps are fast
# enough to be timed in blocks of several.
FEW = {"warmup_steps": 1, "timed_steps": 3, "profiled_steps": 1}


class Sequences(torch.utils.data.Dataset):
    """Random token sequences, each its own next-token labels."""

    def __init__(self, rows: int = 256) -> None:
        g = torch.Generator().manual_seed(0)
        self.ids = torch.randint(0, VOCAB, (rows, SEQ), generator=g)

    def __len__(self) -> int:
        return len(self.ids)

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def tiny_gpt2() -> transformers.GPT2LMHeadModel:
    torch.manual_seed(0)
    config = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB,
                                     n_positions=64, bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(config)


def train(tmp_path, cb: BatchscopeTrainerCallback, max_steps: int, model=None, **args):
    model = model or tiny_gpt2()
    training = transformers.TrainingArguments(
        output_dir=str(tmp_path / "trainer"), max_steps=max_steps,
        per_device_train_batch_size=MICRO, learning_rate=1e-2, report_to=[],
        save_strategy="no", logging_strategy="no", use_cpu=True, disable_tqdm=True,
        dataloader_num_workers=0, **args)
    trainer = transformers.Trainer(model=model, args=training, train_dataset=Sequences(),
                                   callbacks=[cb])
    output = trainer.train()
    assert output.global_step == max_steps  # the run ended normally
    return model, output


@pytest.mark.slow
def test_callback_reports_the_batch_size_the_trainer_steps(tmp_path):
    cb = BatchscopeTrainerCallback(out_dir=tmp_path / "report", unit="sequence", **FEW)
    model, output = train(tmp_path, cb, max_steps=30)
    assert not cb.active and cb.report is not None and not cb.report.partial
    assert not model._forward_pre_hooks  # the watch removed its hooks
    doc, batch = watched_batch(tmp_path / "report", "sequence", MICRO)
    matmuls = [op for op in batch["ops"] if op["name"] in ("addmm", "mm", "bmm", "matmul")]
    assert matmuls and any(op["flops"] > 0 for op in matmuls)
    assert batch["flops"] > 0 and batch["bytes"]["state"] > 0  # input_ids and labels
    run = doc["run"]["integration"]
    assert run["name"] == "transformers_trainer" and run["micro_batch_rows"] == MICRO
    assert run["step"] == "optimizer_step" and run["accumulation_steps"] == 1
    assert output.training_loss < torch.log(torch.tensor(float(VOCAB))).item() + 0.5


def test_accumulation_makes_a_watched_step_all_its_micro_batches(tmp_path):
    cb = BatchscopeTrainerCallback(out_dir=None, **FEW)
    train(tmp_path, cb, max_steps=20, gradient_accumulation_steps=2)
    assert not cb.report.partial
    (batch,) = cb.report.batches
    assert batch.batch_size == 2 * MICRO  # the rows of one optimizer step
    assert any("accumulates gradients over 2 micro-batches of 4 rows" in flag_text(f)
               for f in cb.report.flags)
    (said,) = [f for f in cb.report.flags if f.kind == FlagKind.TRAINER_ACCUMULATES]
    assert flag_text(said) == (
        "The Trainer accumulates gradients over 2 micro-batches of 4 rows: each watched step "
        "is one optimizer step of 8 rows, and its ops run at a micro-batch's shapes (an op's "
        "calls add up over the 2 micro-batches).")
    assert cb.report.run.integration.accumulation_steps == 2
    # the ops run at a micro-batch's shapes, once per micro-batch: the LM head's matmul
    (head,) = [op for op in batch.ops if op.op_id == "lm_head:mm#0"]
    assert [list(s) for s in head.input_shapes] == [[MICRO * SEQ, 32], [32, VOCAB]]
    assert head.calls == 2


def test_a_run_shorter_than_the_watch_writes_a_partial_report(tmp_path):
    cb = BatchscopeTrainerCallback(out_dir=tmp_path / "report")  # default phases: 15 steps
    train(tmp_path, cb, max_steps=4)
    assert not cb.active and cb.report.partial
    doc = json.loads((tmp_path / "report" / "report.json").read_text())
    assert doc["partial"] and "ended before" in doc["stop_reason"]
    assert doc["run"]["watch"]["steps"] == 4


def test_close_after_a_failed_run_removes_the_hooks_and_writes_a_partial_report(tmp_path):
    # The Trainer has no event for an exception: the user's finally calls close().
    model = tiny_gpt2()
    calls = []

    def fail_on_the_sixth_step(module, args, kwargs):
        calls.append(1)
        if len(calls) == 6:
            raise RuntimeError("the user's own error")

    model.register_forward_pre_hook(fail_on_the_sixth_step, with_kwargs=True)
    cb = BatchscopeTrainerCallback(out_dir=tmp_path / "report")
    with pytest.raises(RuntimeError, match="the user's own error"):
        try:
            train(tmp_path, cb, max_steps=30, model=model)
        finally:
            cb.close()
    assert not cb.active and cb.report.partial
    assert json.loads((tmp_path / "report" / "report.json").read_text())["partial"]
    assert len(model._forward_pre_hooks) == 1  # only the test's own hook is left
    assert not torch._C._len_torch_dispatch_stack()  # no counting mode left behind


def test_only_the_main_process_watches(tmp_path):
    cb = BatchscopeTrainerCallback(out_dir=None)
    args = transformers.TrainingArguments(output_dir=str(tmp_path), use_cpu=True, report_to=[])
    state = transformers.TrainerState(is_world_process_zero=False)
    control = transformers.TrainerControl()
    model = tiny_gpt2()
    cb.on_step_begin(args, state, control, model=model, optimizer=None)
    cb.on_step_end(args, state, control, model=model, optimizer=None)
    cb.on_train_end(args, state, control, model=model, optimizer=None)
    assert not cb.active and cb.report is None and not model._forward_pre_hooks


def test_bad_arguments_get_one_sentence():
    with pytest.raises(UsageError, match="warmup_steps must be a whole number of at least 0"):
        BatchscopeTrainerCallback(warmup_steps=-1)
    with pytest.raises(UsageError, match="unit must name"):
        BatchscopeTrainerCallback(unit="")


def test_without_the_library_the_import_says_what_to_install(monkeypatch):
    for missing in ("transformers",):
        monkeypatch.setitem(sys.modules, missing, None)  # import raises ImportError
    monkeypatch.delitem(sys.modules, "batchscope.integrations.hf_trainer")
    with pytest.raises(ImportError, match=r"pip install 'batchscope\[hf\]'"):
        importlib.import_module("batchscope.integrations.hf_trainer")
