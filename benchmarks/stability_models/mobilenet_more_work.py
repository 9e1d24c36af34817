"""mobilenet.py on 179x179 images: 25% more pixels, so ~25% more FLOPs and activation bytes."""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _variants import export, load

_base = load("benchmarks/stability_models/mobilenet.py", "_mobilenet_more_work")
_base.IMAGE = 179
BATCH_SIZES = _base.BATCH_SIZES
export(_base, globals())
