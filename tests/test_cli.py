from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from batchscope.cli import diagnose_app, main, tools_app
from batchscope.errors import ExitCode
from tests.conftest import MODELS

runner = CliRunner()


def marker_model(tmp_path):
    marker = tmp_path / "imported"
    model = tmp_path / "model.py"
    model.write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "import torch\n"
        "def build_model(): return torch.nn.Linear(4, 4)\n"
        "def make_inputs(b): return torch.randn(b, 4)\n"
    )
    return model, marker


def test_bad_batch_sizes_exit_4_before_the_model_is_imported(tmp_path):
    model, marker = marker_model(tmp_path)
    for bad in ("0", "-1", "1.5", "two", "2,2"):
        result = runner.invoke(diagnose_app, [str(model), "--batch-sizes", bad,
                                              "--out", str(tmp_path / "o")])
        assert result.exit_code == 4, result.output
        assert "batch" in result.output
    for option, value in (("--dtype", "fp8"), ("--device", "tpu"), ("--memory-budget", "lots"),
                          ("--objective", "speed")):
        result = runner.invoke(diagnose_app, [str(model), option, value])
        assert result.exit_code == 4
    assert not marker.exists()


def test_unwritable_out_exits_4(tmp_path):
    model, marker = marker_model(tmp_path)
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = runner.invoke(diagnose_app, [str(model), "--out", str(blocker / "sub")])
    assert result.exit_code == 4 and "cannot write" in result.output
    assert not marker.exists()


@pytest.mark.slow
def test_contract_error_exits_4_with_one_sentence(tmp_path):
    result = runner.invoke(diagnose_app, [str(MODELS / "no_make_inputs.py"),
                                          "--out", str(tmp_path)])
    assert result.exit_code == 4
    assert "defines no make_inputs()" in result.output


@pytest.mark.slow
def test_cli_sweep_prints_summary_and_writes_json(tmp_path):
    result = runner.invoke(diagnose_app, [str(MODELS / "tiny.py"), "--out", str(tmp_path),
                                          "--batch-sizes", "1,2", "--min-time", "0.05",
                                          "--no-ops"])
    assert result.exit_code == 0, result.output
    assert "recommended batch size" in result.output
    data = json.loads((tmp_path / "report.json").read_text())
    assert [b["batch_size"] for b in data["batches"]] == [1, 2]


def test_hardware_prints_ceilings():
    result = runner.invoke(tools_app, ["hardware"])
    assert result.exit_code == 0, result.output
    # SI prefixes as report.html shows them (fmt.si): "14.4 GFLOP/s", "3.34 GB/s".
    assert re.search(r"\d [kMGTP]?FLOP/s", result.output)
    assert re.search(r"\d [kMGTP]?B/s", result.output)


@pytest.mark.slow
def test_trace_is_exported_per_batch_size(tmp_path):
    result = runner.invoke(diagnose_app, [str(MODELS / "tiny.py"), "--out", str(tmp_path),
                                          "--batch-sizes", "1,2", "--min-time", "0.05",
                                          "--trace"])
    assert result.exit_code == 0, result.output
    for b in (1, 2):
        trace = json.loads((tmp_path / "traces" / f"trace_b{b}.json").read_text())
        names = {e.get("name") for e in trace["traceEvents"]}
        assert "batchscope::step" in names and "aten::addmm" in names
    data = json.loads((tmp_path / "report.json").read_text())
    assert data["batches"][0]["trace_path"].endswith("trace_b1.json")


@pytest.mark.slow
def test_the_terminal_gets_no_profiler_chatter(tmp_path):
    # Kineto prints "USDT: ... profiler_start" around every capture unless told not to; the
    # worker's stderr is the user's terminal, so run the real command and read both streams.
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KINETO_LOG_LEVEL"}
    proc = subprocess.run([sys.executable, "-m", "batchscope", str(MODELS / "tiny.py"),
                           "--batch-sizes", "1,2", "--min-time", "0.05", "--device", "cpu",
                           "--out", str(tmp_path)],
                          capture_output=True, text=True, env=env, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    data = json.loads((tmp_path / "report.json").read_text())
    assert all(b["ops"] for b in data["batches"])  # the capture pass did run
    assert "USDT" not in proc.stdout + proc.stderr
    assert "profiler_start" not in proc.stdout + proc.stderr


def test_a_bug_exits_3_with_one_line_saying_so(monkeypatch, capsys, tmp_path):
    import batchscope.reports.compare as compare_module

    def broken(*args, **kwargs):
        raise RuntimeError("boom")

    monkeypatch.setattr(compare_module, "compare_files", broken)
    with pytest.raises(SystemExit) as info:
        main(["compare", str(tmp_path / "a.json"), str(tmp_path / "b.json")])
    assert info.value.code == ExitCode.INTERNAL
    err = capsys.readouterr().err
    assert "RuntimeError: boom" in err  # the traceback, for the bug report
    assert err.strip().splitlines()[-1] == \
        "internal error (a bug in batchscope, please report it): RuntimeError"


def test_help_lists_every_verb_with_an_example():
    # issue 18: the CLI tells its whole story
    from batchscope.cli import SUBCOMMANDS

    text = runner.invoke(diagnose_app, ["--help"]).output
    for verb in SUBCOMMANDS:
        assert f"diagnose {verb}" in text and f"e.g. diagnose {verb}" in text
    for verb in SUBCOMMANDS:
        assert "Example: diagnose " + verb in runner.invoke(tools_app, [verb, "--help"]).output


@pytest.mark.parametrize("typo, verb", [("hardwre", "hardware"), ("comapre", "compare"),
                                        ("serv", "serve")])
def test_a_mistyped_verb_suggests_the_nearest(typo, verb, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # no file of that name
    with pytest.raises(SystemExit) as stop:
        main([typo])
    assert stop.value.code == int(ExitCode.USAGE)
    assert f"did you mean `diagnose {verb}`?" in capsys.readouterr().err
    (tmp_path / typo).write_text("")  # a file of that name is a model file, not a typo
    from batchscope.cli import _nearest_subcommand

    assert _nearest_subcommand(typo) is None


def test_output_to_a_file_is_not_cut_to_80_columns():
    # A CI log is no terminal: rich laid the table out for 80 columns and wrapped each GPU's
    # peaks over three lines (a narrow sweep table cut "128 *" to "1…"). Every row whole.
    from batchscope.hardware.gpu_specs import SPECS

    listed = CliRunner().invoke(tools_app, ["hardware", "--list-gpus"], env={"COLUMNS": None})
    assert listed.exit_code == 0
    lines = listed.output.splitlines()
    for spec in SPECS:
        (row,) = [line for line in lines if f" {spec.product} " in line]
        assert all(dtype in row for dtype in spec.peak_flops_per_s), row
