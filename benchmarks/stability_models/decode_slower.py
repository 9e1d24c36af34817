"""samples/llm_decode.py, the same work 15% slower (a spin after each forward)."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

export(load("samples/llm_decode.py", "_decode_slower"), globals(), slower=True)
