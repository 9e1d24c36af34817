"""tiny_decode whose inputs run out of memory at the long context from batch 2 up: the grid
keeps what it measured and stops that context's row."""

from __future__ import annotations

import torch
from tiny_decode import Decoder, build_model  # noqa: F401 - the contract's functions
from tiny_decode import make_inputs as _make_inputs

UNIT = "token"
BATCH_SIZES = [1, 2, 4]
CONTEXTS = [16, 64]


def make_inputs(batch_size: int, context: int):
    if context == 64 and batch_size >= 2:
        raise torch.OutOfMemoryError("CPU out of memory (on cue: context 64, batch >= 2)")
    return _make_inputs(batch_size, context)
