from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MODELS = Path(__file__).resolve().parent / "models"
SAMPLES = ROOT / "samples"


@pytest.fixture(autouse=True, scope="session")
def _ceilings_cache(tmp_path_factory):
    """Keep the tests' ceilings out of the user's cache; measured once per session."""
    mp = pytest.MonkeyPatch()
    mp.setenv("BATCHSCOPE_CACHE_DIR", str(tmp_path_factory.mktemp("ceilings")))
    yield
    mp.undo()
