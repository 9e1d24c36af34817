"""Hostile report.json by property: ``diagnose serve`` simulates or says one sentence, exit 4.

A decode report whose fields the what-if reads (contexts, the grid, op bytes, latencies,
memory) with one of them made hostile: the command ends in a what-if (exit 0) or in one
``error:`` line with exit 4, never a traceback.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from batchscope.cli import tools_app
from tests.reports.test_compare_properties import (
    DELETE,
    SETTINGS,
    dump,
    hostile_values,
    mutated,
)
from tests.serving.conftest import decode_doc

runner = CliRunner()
REAL = decode_doc(sizes=(1, 2, 4), grid_sizes=(1, 4))
# The paths the what-if reads, in the first batch, its ops and the first grid point.
PATHS = [("model", "contexts"), ("model", "contexts", 0), ("model", "available_memory_bytes"),
         ("model", "parameter_bytes"), ("model", "unit"), ("model", "target"),
         ("batches", 0, "latency_s", "median"), ("batches", 0, "status"),
         ("batches", 0, "batch_size"), ("batches", 0, "op_time_s"), ("batches", 0, "bytes"),
         ("batches", 0, "bytes", "state"), ("batches", 0, "ops"), ("batches", 0, "ops", 1),
         ("batches", 0, "ops", 1, "bytes", "state"), ("batches", 0, "ops", 1, "time_s"),
         ("serving",), ("serving", "context_grid"), ("serving", "context_grid", 0),
         ("serving", "context_grid", 0, "context"), ("serving", "context_grid", 0, "status"),
         ("serving", "context_grid", 0, "latency_s", "median"),
         ("serving", "context_grid", 0, "input_bytes")]


@pytest.fixture(scope="module")
def folder() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="serve-props-") as name:
        yield Path(name)


@pytest.mark.slow
@settings(SETTINGS, max_examples=80)
@given(path=st.sampled_from(PATHS), value=hostile_values)
def test_a_decode_report_with_one_hostile_field(folder: Path, path: tuple[Any, ...],
                                                value: Any) -> None:
    report = folder / "report.json"
    report.write_text(dump(mutated(path, value, REAL)), encoding="utf-8", errors="surrogatepass")
    result = runner.invoke(tools_app, ["serve", str(report), "--requests", "20", "--rate", "1",
                                       "--output-tokens", "4:8", "--context", "128"],
                           catch_exceptions=False)
    assert result.exit_code in (0, 4), result.output
    if result.exit_code == 4:
        lines = result.stderr.splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    assert "Traceback" not in result.output


@pytest.mark.parametrize("path, value", [
    (("batches", 0, "ops"), DELETE),  # the split at batch 1 missing (was a KeyError)
    (("serving", "context_grid", 0, "context"), 10**300),  # its square overflows (was a hang)
    (("model", "contexts", 0), 10**300),
    (("batches", 0, "latency_s", "median"), 1e-300),
])
def test_hostile_fields_found_before(folder: Path, path: tuple[Any, ...], value: Any) -> None:
    test_a_decode_report_with_one_hostile_field.hypothesis.inner_test(folder, path, value)
