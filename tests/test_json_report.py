from __future__ import annotations

import json

import pytest

from batchscope.errors import UsageError
from batchscope.records import BatchResult, Status
from batchscope.records import SCHEMA, Report
from batchscope.reports.json_report import MAX_REPORT_BYTES, dumps, load_report, write_json


def minimal_report() -> Report:
    return Report(model={"target": "m.py", "unit": "sample"}, hardware=None,
                  batches=[BatchResult(1, Status.OOM, error="x")], recommendation=None, run={})


def test_round_trip_and_atomic_write(tmp_path):
    path = write_json(minimal_report(), tmp_path)
    data = load_report(path)
    assert data["schema"] == SCHEMA
    assert data["batches"][0]["status"] == "oom"
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_nan_is_never_written():
    report = minimal_report()
    report.run = {"wall_s": float("nan")}
    with pytest.raises(ValueError):
        dumps(report)


def test_reader_rejects_nan_wrong_schema_and_huge_files(tmp_path):
    bad = tmp_path / "nan.json"
    bad.write_text('{"schema": "%s", "x": NaN}' % SCHEMA)
    with pytest.raises(UsageError, match="NaN"):
        load_report(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/9"}))
    with pytest.raises(UsageError, match="schema"):
        load_report(other)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)
    with pytest.raises(UsageError, match="cap"):
        load_report(huge)


@pytest.mark.parametrize(("patch", "message"), [
    ({"batches": [{"batch_size": 1, "status": 3}]},
     "batches[0].status is a number, not a string"),
    ({"batches": [{"batch_size": 1, "status": "ok", "latency_s": {"median": "fast"}}]},
     "batches[0].latency_s.median is a string, not a number ≥ 0"),
    ({"recommendation": {"batch_size": True}},
     "recommendation.batch_size is a boolean, not a positive integer"),
    ({"model": {"unit": "token", "extra": {"deep": [1, 2, 10**309]}}},
     "model.extra.deep[2]: an integer is too large to be a measurement"),
    ({"batches": [{"batch_size": 1, "status": "ok", "ops": [None]}]},
     "batches[0].ops[0] is null, not an object"),
])
def test_load_report_names_the_bad_field(tmp_path, patch, message):
    doc = {"schema": SCHEMA, "batches": [], **patch}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError) as info:
        load_report(path)
    assert str(info.value) == f"{path} is not a batchscope report: {message}."
