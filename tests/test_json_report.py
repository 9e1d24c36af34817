from __future__ import annotations

import json

import pytest

from batchscope.errors import UsageError
from batchscope.records import BatchResult, Status
from batchscope.report import SCHEMA, Report
from batchscope.reports.json_report import MAX_REPORT_BYTES, dumps, read_json, write_json


def minimal_report() -> Report:
    return Report(model={"target": "m.py", "unit": "sample"}, hardware=None,
                  batches=[BatchResult(1, Status.OOM, error="x")], recommendation=None, run={})


def test_round_trip_and_atomic_write(tmp_path):
    path = write_json(minimal_report(), tmp_path)
    data = read_json(path)
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
        read_json(bad)
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something/9"}))
    with pytest.raises(UsageError, match="schema"):
        read_json(other)
    huge = tmp_path / "huge.json"
    with open(huge, "wb") as f:
        f.truncate(MAX_REPORT_BYTES + 1)
    with pytest.raises(UsageError, match="cap"):
        read_json(huge)
