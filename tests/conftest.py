from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "models"
SAMPLES = ROOT / "samples"


@pytest.fixture(autouse=True, scope="session")
def _ceilings_cache(tmp_path_factory):
    """Keep the tests' ceilings out of the user's cache; measured once per session. Sweeps
    skip the decision rounds (BATCHSCOPE_NO_ROUNDS=1: their fresh worker and interleaved
    blocks would be a third of the sweep tests' time) except in tests marked ``rounds``,
    which examine them."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("ceilings")))
    mp.setenv("BATCHSCOPE_NO_ROUNDS", "1")
    yield
    mp.undo()


@pytest.fixture(autouse=True)
def _decision_rounds(request, monkeypatch):
    """A test marked ``rounds`` runs its sweeps with the decision rounds, as users do."""
    if request.node.get_closest_marker("rounds") is not None:
        monkeypatch.delenv("BATCHSCOPE_NO_ROUNDS", raising=False)
        monkeypatch.delenv("BATCHSCOPE_NO_CONTROL", raising=False)


# Module fixtures that run real sweeps of the samples or measure this machine's ceilings
# (tens of seconds on 2 cores): every test that uses one is slow, whatever its own call
# costs. (Tests whose own call runs a sweep are marked where they are defined.)
SLOW_FIXTURES = frozenset({"ceilings", "cnn_runs", "seq_report", "decode_report", "decode",
                           "cnn", "mlp"})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """``pytest -m "not slow"`` (README's fast tier) leaves out the tests that sweep."""
    for item in items:
        if SLOW_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
