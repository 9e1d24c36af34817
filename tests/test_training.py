"""Training mode, the Python API and ``watch`` on real models."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

import batchscope
from batchscope.api import Options, diagnose_file, validate_options
from batchscope.errors import UsageError
from batchscope.profiler.training import default_loss, default_optimizer
from batchscope.records import FlagKind, Status
from batchscope.records.report import Mode
from batchscope.reports.flag_text import flag_text
from tests.conftest import ROOT, SAMPLES
from tests.models import tiny

# The ops FlopCounterMode has formulas for in a conv net's training step.
FLOP_COUNTER_OPS = {"convolution", "convolution_backward", "addmm", "mm"}


def load_sample(name: str):
    spec = importlib.util.spec_from_file_location(name, SAMPLES / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def cnn_runs(tmp_path_factory):
    runs = {}
    for mode in ("inference", "train"):
        out = tmp_path_factory.mktemp(f"cnn_{mode}")
        runs[mode] = diagnose_file(SAMPLES / "cnn.py", Options(
            out_dir=str(out), batch_sizes=[1], min_time_s=0.2, mode=mode, device="cpu"))
    return runs


@pytest.mark.slow
def test_training_flops_are_about_three_times_inference(cnn_runs):
    train, infer = cnn_runs["train"].batches[0], cnn_runs["inference"].batches[0]
    assert train.status == infer.status == Status.OK
    ratio = train.flops / infer.flops  # forward 1x + backward 2x (input and weight grads)
    assert 2.8 <= ratio <= 3.2, ratio


def test_training_flops_match_flop_counter_mode(cnn_runs):
    cnn = load_sample("cnn")
    model = cnn.build_model().train()
    optimizer = default_optimizer(model)
    x = cnn.make_inputs(1)
    with FlopCounterMode(display=False) as counter:
        default_loss(model(x), x).backward()
        optimizer.step()
    ours = sum(op.flops for op in cnn_runs["train"].batches[0].ops
               if op.name in FLOP_COUNTER_OPS)
    assert ours == counter.get_total_flops()


def test_training_peak_memory_holds_gradients_and_optimizer_state(cnn_runs):
    train, infer = cnn_runs["train"], cnn_runs["inference"]
    params = train.model.parameter_bytes
    # gradients (1x) and AdamW's two moments (2x) on top of inference, at least
    extra = train.batches[0].peak_memory_bytes - infer.batches[0].peak_memory_bytes
    assert extra >= 3 * params, (extra, params)
    assert train.model.mode == Mode.TRAIN


@pytest.mark.slow
def test_train_cnn_sample_loss_is_unchanged_by_watch(tmp_path):
    sample = load_sample("train_cnn")
    out = tmp_path / "report"
    watched = sample.train(steps=16, batch_size=8, use_watch=True, out_dir=str(out))
    plain = sample.train(steps=16, batch_size=8, use_watch=False, out_dir=str(out))
    assert watched == plain  # bit for bit: watching changes nothing
    data = json.loads((out / "report.json").read_text())
    (batch,) = data["batches"]
    assert batch["batch_size"] == 8 and batch["status"] == "ok" and batch["coverage"] > 0.95
    assert data["model"]["mode"] == "train"
    assert [e["batch_size"] for e in data["estimates"]] == [16, 32, 64]
    from batchscope.records.report import EstimateMethod
    from batchscope.reports.flag_text import estimate_text

    assert all(estimate_text(EstimateMethod(e["method"])).startswith("estimate")
               for e in data["estimates"])


@pytest.mark.slow
def test_watch_estimates_larger_batches_from_the_measured_one():
    # What holds on any machine: each estimate scales the measured ops by the growth of
    # their roofline time, which is at most the growth of the batch (weights do not grow),
    # so per-row throughput can only rise, and by at most the factor. How close an estimate
    # comes to a sweep of that batch size is a benchmark: benchmarks/watch_estimate.py.
    from batchscope.reports.flag_text import estimate_text

    sample = load_sample("train_cnn")
    model = sample.build_model().train()
    optimizer = sample.make_optimizer(model)
    with batchscope.watch(model, optimizer=optimizer, out_dir=None) as w:
        for step in range(20):
            batch = sample.make_inputs(8, seed=step)
            sample.loss(sample.run(model, batch), batch).backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step()
    assert not w.active
    measured = w.report.batches[0]
    assert [e.batch_size for e in w.report.estimates] == [16, 32, 64]
    rows_per_s = measured.throughput_per_s
    for e in w.report.estimates:
        factor = e.batch_size / measured.batch_size
        # 1% slack: the op times and the step's top-level op time are summed apart.
        assert 0.99 * rows_per_s <= e.throughput_per_s <= 1.01 * factor * rows_per_s
        assert "not a measurement" in estimate_text(e.method)


@pytest.mark.slow
def test_python_api_runs_functions_in_the_worker(tmp_path):
    report = batchscope.diagnose(tiny.build_model, tiny.make_inputs, batch_sizes=[1, 2],
                                 min_time_s=0.05, measure_ceilings=False, op_breakdown=False,
                                 unit="row")
    assert [b.status for b in report.batches] == [Status.OK, Status.OK]
    assert report.model.unit == "row" and report.model.target.endswith("build_model")
    paths = batchscope.save(report, str(tmp_path))
    with open(paths["json"]) as f:
        assert json.load(f)["batches"][1]["batch_size"] == 2
    shown = batchscope.show(report)._repr_html_()  # the whole HTML report, escaped inline
    assert shown.startswith("<iframe srcdoc=") and "&lt;script" in shown and "<script" not in shown


def test_python_api_refuses_what_the_worker_cannot_import():
    with pytest.raises(UsageError, match="local function or lambda"):
        batchscope.diagnose(lambda: torch.nn.Linear(2, 2), tiny.make_inputs)
    with pytest.raises(UsageError, match="unknown option"):
        batchscope.diagnose(tiny.build_model, tiny.make_inputs, max_batches=3)


def test_watch_times_fast_steps_in_blocks_as_the_sweep_does():
    # A 16-wide linear step takes microseconds: the timed samples are blocks of steps
    # lasting about a millisecond, with the NVML window (empty on the CPU, saying why) and
    # page faults recorded as by the sweep's timing pass.
    model = torch.nn.Linear(16, 16)
    x = torch.randn(4, 16)
    with torch.inference_mode(), batchscope.watch(model.eval(), out_dir=None) as w:
        for _ in range(20_000):
            if not w.active:
                break
            model(x)
            w.step()
    assert not w.active
    batch = w.report.batches[0]
    assert batch.batch_size == 4 and batch.latency_s.block_steps > 1
    assert batch.latency_s.n == watch_timed_steps(w)
    assert batch.nvml is not None and batch.nvml.unsupported["all"].startswith("no GPU")
    assert batch.page_faults_per_step is not None
    assert batch.ops and batch.coverage is not None


def watch_timed_steps(w) -> int:
    assert w.report.run.watch is not None
    return w.report.run.watch.timed_steps


def test_the_stand_in_training_step_is_said(cnn_runs):
    # issue 13, finding 11: samples/cnn.py defines no make_optimizer or loss
    report = cnn_runs["train"]
    step = report.model.training_step
    assert step.defaults_used and not step.optimizer_from_file and not step.loss_from_file
    (flag,) = [f for f in report.flags if f.kind == FlagKind.STAND_IN_TRAINING_STEP]
    assert "the training step is batchscope's" in flag_text(flag)
    assert "make_optimizer" in flag_text(flag) and "AdamW(lr=0.0001" in flag_text(flag)
    assert not any(f.kind == FlagKind.STAND_IN_TRAINING_STEP
                   for f in cnn_runs["inference"].flags)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # torch.compile's own imports
def test_a_compiled_model_is_detected():
    from batchscope.profiler.training import is_compiled

    model = torch.nn.Linear(4, 4)
    assert not is_compiled(model)
    assert is_compiled(torch.compile(model))  # wrapping compiles nothing until called


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="inductor compiles C++ kernels for the CPU")
@pytest.mark.slow
def test_a_compiled_model_stays_compiled_and_its_kernels_are_attributed(tmp_path):
    # issue 13, finding 12: 0% coverage at batch 1, and (found here) every batch size after
    # the first counting pass ran eager, since the counting mode went through the compiled
    # module and dynamo recompiled it so
    from batchscope.records import FUSED_KERNEL_PREFIX

    report = diagnose_file(ROOT / "tests" / "models" / "compiled_mlp.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[1, 4],
                                   measure_ceilings=False, min_time_s=0.05, device="cpu"))
    assert report.model.compiled
    for r in report.batches:
        assert r.status == Status.OK
        addmms = [op for op in r.ops if op.name == "addmm"]
        (gelu,) = [op for op in r.ops if op.name == "gelu"]
        # counted on the eager module: no "_orig_mod." in the op ids
        assert [op.op_id for op in addmms] == ["0:addmm#0", "2:addmm#0"]
        # the extern addmms (out= variants) joined to the eager ones: they have the time
        # (coverage was 0 before; how high depends on this CPU: fused kernels against addmm)
        assert all(op.time_s > 0 for op in addmms) and r.coverage > 0
        # still compiled at batch 4: gelu ran fused, not as an aten op of its own; the
        # kernel inductor fused it into has its own entry, named after it, and gelu says so
        assert gelu.time_s == 0
        kernels = [k for k in r.unmatched_ops_s if k.startswith(FUSED_KERNEL_PREFIX)]
        assert kernels and all(r.unmatched_ops_s[k] > 0 for k in kernels)
        assert any("gelu" in k for k in kernels)
        assert any(flag_text(f).startswith("fused by inductor into cpp_fused_")
                   and "gelu" in flag_text(f) for f in gelu.flags)
    (flag,) = [flag_text(f) for f in report.flags if f.kind == FlagKind.COMPILED]
    assert FUSED_KERNEL_PREFIX in flag and "at batch 1:" in flag and "cpp_fused_" in flag


class _KeywordModel(torch.nn.Module):
    """Called as Hugging Face loops call a model: model(input_ids=..., labels=...)."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(100, 32)
        self.head = torch.nn.Linear(32, 100)

    def forward(self, input_ids=None, labels=None):
        logits = self.head(self.embed(input_ids))
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.flatten())


def test_watch_sees_keyword_inputs_and_says_estimates(tmp_path):
    # issue 13, finding 10: keyword inputs were missed (batch 1, inputs 0 B), and the
    # estimates were only in report.json
    model = _KeywordModel()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    with batchscope.watch(model, optimizer=optimizer, out_dir=str(tmp_path)) as w:
        # fast steps are timed in blocks of ~1 ms: how many steps the phases take depends on
        # the machine, so the loop runs until watch is done (as a real loop would go on)
        for step in range(2000):
            ids = torch.randint(0, 100, (12, 16), generator=torch.Generator().manual_seed(step))
            model(input_ids=ids, labels=ids).backward()
            optimizer.step()
            optimizer.zero_grad()
            w.step()
            if not w.active:
                break
    assert not w.active
    measured = w.report.batches[0]
    assert w.batch_size == measured.batch_size == 12
    assert measured.bytes.state > 0  # the ids read by the embedding count as inputs
    rec = w.report.recommendation
    from batchscope.reports.flag_text import rule_text

    assert rec.speedup_from_batching is None
    assert "only batch size measured" in rule_text(rec.rule, w.report.model.unit)
    summary = (tmp_path / "summary.md").read_text()
    assert "estimated (not measured)" in summary and "| 24 |" in summary


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="inductor compiles C++ kernels for the CPU")
@pytest.mark.slow
def test_compile_option_compiles_and_separates_compile_time(tmp_path):
    # issue 18: --compile runs the model under torch.compile; compile time is the first
    # warm-up step's, apart from the step time
    from typer.testing import CliRunner

    from batchscope.cli import diagnose_app

    out = tmp_path / "out"
    result = CliRunner().invoke(diagnose_app, [str(ROOT / "tests" / "models" / "tiny.py"),
                                               "--compile", "--batch-sizes", "1,4", "--no-ops",
                                               "--min-time", "0.05", "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads((out / "report.json").read_text())
    assert doc["model"]["compiled"] and doc["run"]["options"]["compile_mode"] == "default"
    first = doc["batches"][0]["latency_s"]
    assert first["first_step_s"] > 10 * first["median"]  # the compile is in it, not in the step
    (flag,) = [f["text"] for f in doc["flags"] if f["kind"] == "compiled"]
    assert "at batch 1" in flag and "first warm-up step" in flag


def test_an_unknown_compile_mode_is_refused():
    with pytest.raises(UsageError, match="--compile-mode"):
        validate_options(Options(compile_mode="fastest"))


@pytest.mark.slow
def test_global_batch_in_one_process_gives_the_accumulation_steps(tmp_path):
    # issue 18: gradient-accumulation advice without data parallelism
    from batchscope.reports import narrative

    report = diagnose_file(ROOT / "tests" / "models" / "tiny.py",
                           Options(out_dir=str(tmp_path), batch_sizes=[2, 8], mode="train",
                                   global_batch=100, measure_ceilings=False, min_time_s=0.05,
                                   op_breakdown=False, device="cpu"))
    rec = report.recommendation
    acc = rec.accumulation
    steps = -(-100 // rec.batch_size)  # ceil
    assert acc.micro_batch == rec.batch_size and acc.accumulation_steps == steps
    assert acc.global_batch_reached == steps * rec.batch_size >= 100
    assert acc.time_per_global_batch_s == pytest.approx(steps * acc.step_s)
    sentence = narrative.accumulation_headline(report)
    assert f"reach the global batch of 100 ({steps * rec.batch_size})" in sentence
    assert sentence in (tmp_path / "summary.md").read_text()
    # the same figures from an inference run: no accumulation, a flag instead
    import dataclasses

    from batchscope.assemble import Measured, assemble
    from batchscope.plan import Limits

    inference = assemble(Measured(
        dataclasses.replace(report.model, mode=Mode.INFERENCE), report.run, None,
        report.batches, Limits(), global_batch=100))
    assert inference.recommendation.accumulation is None
    assert any(f.kind == FlagKind.GLOBAL_BATCH_IN_INFERENCE
               and "this run is inference" in flag_text(f) for f in inference.flags)
