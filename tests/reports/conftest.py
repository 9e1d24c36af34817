"""Fixtures for the report renderers: real report.json files of the three samples."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

REPORTS = Path(__file__).resolve().parent.parent / "data" / "reports"
# Recorded with: diagnose samples/<name>.py --max-batch {64, 8, 16} --min-time 0.2 (CPU).
SAMPLES = ("mlp", "cnn", "llm_decode")


def load(name: str) -> dict[str, Any]:
    return json.loads((REPORTS / f"{name}.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def sample_docs() -> dict[str, dict[str, Any]]:
    return {name: load(name) for name in SAMPLES}


@pytest.fixture(params=SAMPLES)
def sample_doc(request: pytest.FixtureRequest,
               sample_docs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Each sample's report dict (a deep copy: tests may change it)."""
    return copy.deepcopy(sample_docs[request.param])
