"""A tiny MLP whose small-batch step time is almost all fixed per-op overhead.

What it models: a small tabular/feature classifier: 64 input features, four Linear layers
(hidden width 64, ReLU between them), 10 outputs; 13,130 parameters, about 52 KB in fp32,
with seeded random weights.

Why it is interesting for batching: at batch 1 each layer moves about 17 KB and does about
8 kFLOP. Even at DRAM bandwidth that is well under a microsecond per layer, below the fixed
cost of launching one eager PyTorch op (a few microseconds of dispatch, allocation and
kernel start on a CPU, more on a GPU). So the step is **overhead-bound**: neither memory nor
compute limits it, and 32 rows cost barely more per step than one row (on a 2-core CPU
about 50 us against 30-40 us; 1024 rows take about 0.2 ms).
The throughput gain from batching here is large, but it comes from spreading a fixed cost
over more rows, not from reusing weights the way LLM decode does: the speedup alone does
not tell the two mechanisms apart, the per-op intensities and roofline times do. From a few
dozen rows up, the layers become real matrix multiplies whose roofline time exceeds the
fixed cost, and they turn compute-bound.
"""

from __future__ import annotations

import torch
from torch import nn

UNIT = "sample"
MODE = "inference"
# BATCH_SIZES is not set: the tool sweeps powers of two (up to --max-batch, 1024).

IN_FEATURES = 64
WIDTH = 64
OUT_FEATURES = 10
SEED = 0


def build_model() -> nn.Module:
    torch.manual_seed(SEED)
    model = nn.Sequential(
        nn.Linear(IN_FEATURES, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, WIDTH),
        nn.ReLU(),
        nn.Linear(WIDTH, OUT_FEATURES),
    )
    return model.eval()


def make_inputs(batch_size: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(batch_size, IN_FEATURES, generator=gen)
