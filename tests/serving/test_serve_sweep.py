"""The real sweep of a decode model with CONTEXTS, and ``diagnose serve`` on its report."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from batchscope.api import Options, diagnose_file
from batchscope.cli import tools_app
from batchscope.contract import load_model_file
from batchscope.errors import ModelFileError
from batchscope.records import Status
from batchscope.records.serving import Policy, StepTimeSource
from batchscope.reports.json_report import load_report
from tests.conftest import MODELS
from tests.serving.conftest import decode_doc

runner = CliRunner()


@pytest.fixture(scope="module")
def decode_report(tmp_path_factory):
    out = tmp_path_factory.mktemp("tiny-decode")
    report = diagnose_file(MODELS / "tiny_decode.py",
                           Options(out_dir=str(out), min_time_s=0.05, measure_ceilings=False))
    return out, report


@pytest.mark.slow
def test_sweep_times_the_context_grid(decode_report):
    out, report = decode_report
    assert report.model.contexts == [16, 64]
    assert report.serving is not None
    grid = report.serving.context_grid
    assert {(p.batch_size, p.context) for p in grid} == {
        (b, c) for b in (1, 2, 4) for c in (16, 64)}
    assert all(p.status == Status.OK and p.latency_s is not None and p.latency_s.median > 0
               for p in grid)
    # make_inputs' KV caches: 2 layers x K and V x b x 2 heads x (c + 1) x 16 x 4 bytes,
    # plus the ids and positions (b x 8 bytes each).
    for p in grid:
        b, c = p.batch_size, p.context
        assert c is not None
        assert p.input_bytes == 2 * 2 * b * 2 * (c + 1) * 16 * 4 + 2 * b * 8
    what_if = report.serving.what_if
    assert what_if is not None
    # 2 x 2 x 2 heads x 16 x 4 bytes = 512 bytes of KV per token per row, from the grid.
    assert what_if.step_time.kv_bytes_per_token == pytest.approx(512)
    assert what_if.step_time.source == StepTimeSource.CONTEXT_GRID
    assert what_if.recommendation.policy == Policy.CONTINUOUS
    # report.json reads back into the same section.
    assert load_report(out / "report.json").serving == report.serving
    saved = json.loads((out / "report.json").read_text())
    assert "Simulated on these step times" in (out / "summary.md").read_text() + \
        saved["recommendation"]["explanation"]


def test_serve_command_writes_its_files(decode_report, tmp_path):
    out, _ = decode_report
    result = runner.invoke(tools_app, ["serve", str(out / "report.json"), "--requests", "60",
                                       "--output-tokens", "4:32", "--slo-tpot-ms", "500",
                                       "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "serving.json").read_text())
    assert data["schema"] == 2
    assert data["recommendation"]["cap"] in (1, 2, 4)
    # The pick's sentence beside its numbers, for a reader without batchscope.
    assert "p99 TPOT ≤ 500 ms" in data["recommendation"]["sentence"]
    assert "p99 TPOT ≤ 500 ms" in result.output
    page = (tmp_path / "serving.html").read_text()
    assert "Time per output token" in page and "connect-src" in page
    assert "| continuous |" in (tmp_path / "serving.md").read_text()


def test_serve_escapes_a_hostile_target(tmp_path):
    doc = decode_doc(target="<img src=x onerror=alert(1)>|@everyone")
    report = tmp_path / "report.json"
    report.write_text(json.dumps(doc))
    result = runner.invoke(tools_app, ["serve", str(report), "--requests", "40",
                                       "--rate", "1", "--rate", "2"])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "serving.html").read_text()
    assert "<img src=x" not in page
    md = (tmp_path / "serving.md").read_text()
    assert "<img" not in md and "@everyone" not in md


@pytest.mark.parametrize("args, match", [
    (["--rate", "-2"], "--rate must be a positive"),
    (["--rate", "nan"], "--rate must be a positive"),
    (["--output-tokens", "0"], "--output-tokens"),
    (["--kv-memory", "lots"], "--kv-memory"),
    (["--caps", "0"], "batch"),
    (["--slo-tpot-ms", "-5"], "--slo-tpot-ms"),
])
def test_serve_bad_options_exit_4(tmp_path, args, match):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc()))
    result = runner.invoke(tools_app, ["serve", str(report), *args])
    assert result.exit_code == 4, result.output
    assert match in result.output
    assert not (tmp_path / "serving.json").exists()


def test_serve_bad_inputs_exit_4(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc(contexts=False)))
    result = runner.invoke(tools_app, ["serve", str(report)])
    assert result.exit_code == 4 and "--context" in result.output
    empty = tmp_path / "empty.csv"
    empty.write_text("arrival_s,prompt_tokens,output_tokens\n")
    result = runner.invoke(tools_app, ["serve", str(report), "--context", "64",
                                       "--trace", str(empty)])
    assert result.exit_code == 4 and "holds no requests" in result.output
    hostile = decode_doc()
    hostile["serving"]["context_grid"] = [{"batch_size": "1", "context": 8, "status": "ok"}]
    report.write_text(json.dumps(hostile))
    result = runner.invoke(tools_app, ["serve", str(report)])
    assert result.exit_code == 4 and "context_grid[0].batch_size" in result.output
    result = runner.invoke(tools_app, ["serve", str(tmp_path / "missing.json")])
    assert result.exit_code == 4


def test_serve_refuses_a_report_that_is_not_a_decode_step(tmp_path):
    # An MLP's report: no context to take step times at, so no what-if (exit 4, one line).
    mlp = Path(__file__).resolve().parent.parent / "data" / "reports" / "mlp.json"
    result = runner.invoke(tools_app, ["serve", str(mlp), "--out", str(tmp_path)])
    assert result.exit_code == 4, result.output
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "--context" in lines[0]
    assert not (tmp_path / "serving.json").exists()


def test_contexts_in_the_contract(tmp_path):
    model = tmp_path / "m.py"
    base = ("import torch\n"
            "def build_model(): return torch.nn.Linear(4, 4)\n")
    model.write_text(base + "CONTEXTS = [8, 8]\ndef make_inputs(b, c): return torch.randn(b, 4)\n")
    with pytest.raises(ModelFileError, match="CONTEXTS lists a context twice"):
        load_model_file(model)
    model.write_text(base + "CONTEXTS = 'long'\ndef make_inputs(b, c): return torch.randn(b, 4)\n")
    with pytest.raises(ModelFileError, match="CONTEXTS must be a non-empty list"):
        load_model_file(model)
    model.write_text(base + "CONTEXTS = [8, 32]\ndef make_inputs(b): return torch.randn(b, 4)\n")
    with pytest.raises(ModelFileError, match="it is given the context too"):
        load_model_file(model)
    model.write_text(base + "def make_inputs(b, c=4): return torch.randn(b, c)\n")
    spec = load_model_file(model, contexts=[4, 16])  # --contexts
    assert spec.contexts == [4, 16] and spec.call_make_inputs(2).shape == (2, 4)
    assert load_model_file(model).contexts is None


@pytest.mark.slow
def test_a_grid_point_that_runs_out_of_memory_ends_its_row(tmp_path):
    report = diagnose_file(MODELS / "decode_oom_at_long_context.py",
                           Options(out_dir=str(tmp_path), min_time_s=0.05,
                                   measure_ceilings=False, op_breakdown=False))
    assert [b.status for b in report.batches] == [Status.OK] * 3  # the sweep, at context 16
    assert report.serving is not None and report.serving.what_if is not None
    grid = [(p.batch_size, p.context, p.status) for p in report.serving.context_grid]
    assert grid == [(1, 16, Status.OK), (2, 16, Status.OK), (4, 16, Status.OK),
                    (1, 64, Status.OK), (2, 64, Status.OOM)]
    assert "on cue" in report.serving.context_grid[-1].error
    # The what-if still runs from what was measured (batch 1 at two contexts).
    assert report.serving.what_if.step_time.source == StepTimeSource.CONTEXT_GRID
