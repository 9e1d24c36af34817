"""samples/llm_decode.py with 16 blocks instead of 12: ~23% more FLOPs and bytes a step."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

_base = load("samples/llm_decode.py", "_decode_more_work")
_base.N_LAYER = 16
export(_base, globals())
