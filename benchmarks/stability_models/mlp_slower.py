"""samples/mlp.py, the same work 15% slower (a spin after each forward)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

export(load("samples/mlp.py", "_mlp_slower"), globals(), slower=True)
