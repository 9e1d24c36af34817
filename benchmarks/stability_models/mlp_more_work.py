"""samples/mlp.py with hidden width 73 instead of 64: ~24% more FLOPs a step."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

_base = load("samples/mlp.py", "_mlp_more_work")
_base.WIDTH = 73
export(_base, globals())
