"""Shared by the trainer-callback tests."""

from __future__ import annotations

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
