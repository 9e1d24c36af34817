"""Shared by the trainer-callback tests."""

from __future__ import annotations

import json

import pytest

from batchscope.hardware import microbench


@pytest.fixture(scope="session")
def quick_ceilings():
    """This CPU's ceilings, measured once and quickly (about a second): the callbacks are
    under test, not the calibration, which takes half a minute on a slow 2-core machine
    (and is measured again whenever other processes keep the CPU busy)."""
    return microbench.measure("cpu", quick=True)


@pytest.fixture
def use_quick_ceilings(quick_ceilings, monkeypatch):
    """``watch`` takes :func:`quick_ceilings` instead of this machine's cached ones."""
    monkeypatch.setattr("batchscope.hardware.load_or_measure",
                        lambda device, **kwargs: quick_ceilings)


def watched_batch(report_dir, unit: str, batch_size: int) -> tuple[dict, dict]:
    """The report a callback wrote to ``report_dir`` and its one batch, checked for what
    every watched training run has: the three files, training mode and ``unit``, one
    measured batch of ``batch_size``."""
    doc = json.loads((report_dir / "report.json").read_text())
    assert (report_dir / "report.html").exists()
    assert (report_dir / "summary.md").exists()
    assert doc["model"]["mode"] == "train" and doc["model"]["unit"] == unit
    (batch,) = doc["batches"]
    assert batch["batch_size"] == batch_size and batch["status"] == "ok"
    assert batch["latency_s"]["median"] > 0
    return doc, batch
