"""engine_runs.json: an engine's calibration runs as ``diagnose serve --engine`` measured
them, written beside serving.json and read back by ``diagnose serve --engine-runs``.

A calibration takes one to three minutes of the engine's own time; its runs (every request
served, every forward call timed, the model's prefill) are all the fit needs, so a what-if
asked again (another trace, other caps, an SLO) reuses them instead of running the engine
again, and runs recorded on one machine can be fitted on another.

Example:
    >>> write_engine_runs(folder / "engine_runs.json", measurement, "model.py")  # doctest: +SKIP
    >>> read_engine_runs(folder / "engine_runs.json").measurement.engine  # doctest: +SKIP
    <Engine.TRANSFORMERS: 'transformers'>
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import msgspec

from batchscope.errors import UsageError
from batchscope.reports.json_report import atomic_write_text
from batchscope.serving.engines.runs import EngineMeasurement
from batchscope.typed_json import decode, to_builtins

ENGINE_RUNS_SCHEMA = 1
# An engine_runs.json of a calibration is a few hundred kB; anything far larger is not one.
MAX_ENGINE_RUNS_BYTES = 64 * 2**20


@dataclass(frozen=True)
class EngineRunsFile:
    """What engine_runs.json holds: the measurement and the model it was measured on."""

    schema: int
    target: str  # the report's model (a file, or hf:NAME) the engine served
    measurement: EngineMeasurement


def write_engine_runs(path: Path, measurement: EngineMeasurement, target: str) -> None:
    record = EngineRunsFile(ENGINE_RUNS_SCHEMA, target, measurement)
    atomic_write_text(path, json.dumps(to_builtins(record), allow_nan=False) + "\n")


def read_engine_runs(path: Path) -> EngineRunsFile:
    """Raises:
        UsageError: one sentence naming the file and what is wrong with it (exit 4).
    """
    try:
        size = path.stat().st_size
        if size > MAX_ENGINE_RUNS_BYTES:
            raise UsageError(f"{path} is {size:,} bytes, over the {MAX_ENGINE_RUNS_BYTES:,}-byte "
                             "cap of an engine_runs.json.")
        text = path.read_text(encoding="utf-8")
        value = json.loads(text)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}.") from None
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise UsageError(f"{path} is not an engine_runs.json: it is not JSON.") from None
    schema = value.get("schema") if isinstance(value, dict) else None
    if schema != ENGINE_RUNS_SCHEMA:
        raise UsageError(f"{path} is not an engine_runs.json of schema {ENGINE_RUNS_SCHEMA} "
                         f"(its schema: {schema!r}); write it again with diagnose serve "
                         "--engine.")
    try:
        record = decode(value, EngineRunsFile)
    except (msgspec.ValidationError, ValueError) as exc:
        raise UsageError(f"{path} is not a valid engine_runs.json: {exc}.") from None
    if not record.measurement.runs:
        raise UsageError(f"{path} holds no calibration run.")
    return record
