"""engine_runs.json (reports/engine_runs.py): an engine's calibration runs written beside
serving.json and read back by ``diagnose serve --engine-runs``."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from batchscope.cli import tools_app
from batchscope.errors import UsageError
from batchscope.records.engine import PrefillPoint
from batchscope.records.policy import Policy
from batchscope.reports.engine_runs import (
    ENGINE_RUNS_SCHEMA,
    read_engine_runs,
    write_engine_runs,
)
from batchscope.serving.engine_cost import fit_prefill
from tests.serving.conftest import decode_doc
from tests.serving.test_engine_step import engine_run, measurement

runner = CliRunner()


def test_engine_runs_json_reads_back_what_was_written(tmp_path):
    measured = measurement([engine_run(Policy.STATIC, 2, fit_prefill([]))])
    path = tmp_path / "engine_runs.json"
    write_engine_runs(path, measured, "model.py")
    record = read_engine_runs(path)
    assert record.schema == ENGINE_RUNS_SCHEMA and record.target == "model.py"
    assert record.measurement == measured


@pytest.mark.parametrize(("text", "words"), [
    ("{not json", "it is not JSON"),
    ('{"schema": 99}', "not an engine_runs.json of schema 1"),
    ('[1, 2]', "not an engine_runs.json of schema 1"),
    ('{"schema": 1, "target": "m.py", "measurement": {"engine": "transformers"}}',
     "not a valid engine_runs.json"),
])
def test_a_bad_engine_runs_file_is_one_sentence(tmp_path, text, words):
    path = tmp_path / "engine_runs.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=words):
        read_engine_runs(path)
    with pytest.raises(UsageError, match="cannot read"):
        read_engine_runs(tmp_path / "missing.json")


def test_serve_reuses_engine_runs_and_refuses_them_beside_engine(tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(decode_doc(target="model.py")))
    prefill = fit_prefill([PrefillPoint(40, 0.01), PrefillPoint(80, 0.02)])
    runs_file = tmp_path / "engine_runs.json"
    write_engine_runs(runs_file, measurement([engine_run(p, c, prefill) for p in Policy
                                               for c in (1, 4)]), "other.py")
    args = ["serve", str(report), "--requests", "20", "--rate", "5", "--caps", "2,4"]
    result = runner.invoke(tools_app, [*args, "--engine-runs", str(runs_file)])
    assert result.exit_code == 0, result.output
    assert "was measured on other.py" in result.output
    doc = json.loads((tmp_path / "serving.json").read_text())
    assert doc["engine"]["engine"] == "transformers"
    assert {s["policy"] for s in doc["engine"]["steps"]} == {"static", "continuous"}
    assert doc["prefill"]["source"] == "model"
    both = runner.invoke(tools_app, [*args, "--engine-runs", str(runs_file),
                                     "--engine", "transformers"])
    assert both.exit_code == 4 and "not both" in both.output
    (tmp_path / "bad.json").write_text("{}")
    bad = runner.invoke(tools_app, [*args, "--engine-runs", str(tmp_path / "bad.json")])
    assert bad.exit_code == 4 and "engine_runs.json" in bad.output
