"""mobilenet.py, the same work 15% slower (a spin after each forward)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

_base = load("benchmarks/stability_models/mobilenet.py", "_mobilenet_slower")
BATCH_SIZES = _base.BATCH_SIZES
export(_base, globals(), slower=True)
