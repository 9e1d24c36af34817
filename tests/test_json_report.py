from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from batchscope.errors import UsageError
from batchscope.records import SCHEMA, BatchResult, ModelInfo, Report, RunInfo, Status
from batchscope.records.codec import decode_report
from batchscope.reports.json_report import MAX_REPORT_BYTES, dumps_report, load_report, write_json

# The smallest valid report.json: nothing measured, no hardware, no recommendation.
EMPTY: dict[str, Any] = {"schema": SCHEMA, "model": {"target": "m.py"}, "hardware": None,
                         "batches": [], "recommendation": None, "run": {}}


def minimal_report() -> Report:
    return Report(model=ModelInfo(target="m.py", unit="sample"), hardware=None,
                  batches=[BatchResult(1, Status.OOM, error="x")], recommendation=None,
                  run=RunInfo())


def test_round_trip_and_atomic_write(tmp_path: Path) -> None:
    report = minimal_report()
    path = write_json(report, tmp_path)
    assert json.loads(path.read_text(encoding="utf-8"))["schema"] == SCHEMA
    data = load_report(path)
    assert data == report  # every field back, typed
    assert data.batches[0].status == Status.OOM
    assert [p.name for p in tmp_path.iterdir()] == ["report.json"]  # no temp file left


def test_nan_is_never_written() -> None:
    report = dataclasses.replace(minimal_report(), run=RunInfo(wall_s=float("nan")))
    with pytest.raises(ValueError):
        dumps_report(report)


def test_reader_rejects_nan_wrong_schema_and_huge_files(tmp_path: Path) -> None:
    bad = tmp_path / "nan.json"
    bad.write_text(json.dumps(EMPTY)[:-1] + ', "x": NaN}')
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
     "batches[0].status is an integer, not a string"),
    ({"batches": [{"batch_size": 1, "status": "ok", "latency_s": {"median": "fast"}}]},
     "batches[0].latency_s.median is a string, not a number"),
    ({"batches": [{"batch_size": 1, "status": "ok", "latency_s": {
        "median": -1.0, "p25": 0.1, "p75": 0.2, "n": 3}}]},
     "batches[0].latency_s.median is -1.0, not a number ≥ 0"),
    ({"batches": [{"batch_size": 0, "status": "oom"}]},
     "batches[0].batch_size is 0, not an integer ≥ 1"),
    ({"recommendation": {"batch_size": True}},
     "recommendation.batch_size is a boolean, not an integer"),
    ({"model": {"target": "m.py", "extra": {"deep": [1, 2, 10**309]}}},
     "model.extra.deep[2] is an integer too large to be a measurement"),
    ({"batches": [{"batch_size": 1, "status": "ok", "ops": [None]}]},
     "batches[0].ops[0] is null, not an object"),
    ({"run": None}, "run is null, not an object"),
    ({"model": {"unit": "token"}}, "model.target is missing"),
    ({"run": {"ranks": {"two": []}}}, "a key in run.ranks is a string, not an integer"),
])
def test_load_report_names_the_bad_field(tmp_path: Path, patch: dict[str, object],
                                         message: str) -> None:
    doc = {**EMPTY, **patch}
    path = tmp_path / "r.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(UsageError) as info:
        load_report(path)
    assert str(info.value) == f"{path} is not a batchscope report: {message}."


@pytest.mark.parametrize(("value", "message"), [
    (float("nan"), "model.extra is NaN, not a finite number"),
    (float("-inf"), "model.extra is -Infinity, not a finite number"),
    (10**400, "model.extra is an integer too large to be a measurement"),
    ("\ud800", "model.extra holds a lone surrogate escape (not valid Unicode)"),
    ({1, 2}, "model.extra is a Python set, not a JSON value"),
    ({(1, 2): 3}, "a key in model.extra is a list, not a string"),
])
def test_a_dict_from_the_api_is_checked_like_a_file(value: object, message: str) -> None:
    # What json.loads never makes but a Python caller can: each refused in one sentence.
    doc = {**EMPTY, "model": {"target": "m.py", "extra": value}}
    with pytest.raises(UsageError) as info:
        decode_report(doc, "r")
    assert str(info.value) == f"r is not a batchscope report: {message}."


def test_a_report_that_holds_itself_is_refused() -> None:
    doc: dict[str, object] = dict(EMPTY)
    doc["model"] = {"target": "m.py", "self": doc}
    with pytest.raises(UsageError, match="nests deeper than"):
        decode_report(doc, "r")
