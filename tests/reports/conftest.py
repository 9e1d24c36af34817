"""Fixtures for the report renderers: real report.json files of the three samples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from batchscope.records import Report
from batchscope.records.codec import decode_report

REPORTS = Path(__file__).resolve().parent.parent / "data" / "reports"
# Recorded with: diagnose samples/<name>.py --max-batch {64, 8, 16} --min-time 0.2 (CPU),
# at schema 1, and converted to schema 2 (scripts/convert_schema1_reports.py).
SAMPLES = ("mlp", "cnn", "llm_decode")


def load(name: str) -> dict[str, Any]:
    return json.loads((REPORTS / f"{name}.json").read_text(encoding="utf-8"))


def typed(doc: dict[str, Any]) -> Report:
    """A report dict (report.json's document, perhaps edited by a test) as the typed report
    every renderer reads, through the one loader."""
    return decode_report(doc, "test report")


@pytest.fixture(scope="session")
def sample_docs() -> dict[str, dict[str, Any]]:
    return {name: load(name) for name in SAMPLES}


@pytest.fixture(scope="session")
def sample_reports(sample_docs: dict[str, dict[str, Any]]) -> dict[str, Report]:
    """Each sample's typed report (frozen: change one with dataclasses.replace)."""
    return {name: typed(doc) for name, doc in sample_docs.items()}


@pytest.fixture(params=SAMPLES)
def sample_doc(request: pytest.FixtureRequest,
               sample_docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each sample's report dict (a deep copy: tests may change it, then call typed())."""
    return copy.deepcopy(sample_docs[request.param])
