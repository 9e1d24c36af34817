"""One counter for every front end (issue 48): the sweep's worker and ``--target-gpu`` count
the same model file to the same FLOPs and bytes, weights, state and activations alike.

Before, ``--target-gpu`` counted 877 MFLOP of an encoder classifier whose sweep counted 70.7
kFLOP (the fused layers uncounted on the CPU, the slow path run on meta), and a decoder's
attention took its math path on meta (2-7% more bytes). The worker runs in-process here,
timing for a few milliseconds; both sides count one step."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from batchscope.contract import load_model_file
from batchscope.profiler.timing import TimingConfig
from batchscope.profiler.worker import Worker
from batchscope.profiler.worker_config import WorkerConfig
from batchscope.records import ByteSplit
from batchscope.target.predict import count_on_meta

MODELS = Path(__file__).resolve().parent.parent / "models"

CLASSIFIER = '''
import torch
from torch import nn

MODE = "{mode}"

class Classifier(nn.Module):
    def __init__(self):
        super().__init__()
        self.embed = nn.Embedding(100, 64)
        layer = nn.TransformerEncoderLayer(64, 4, {ff}, batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)
        self.head = nn.Linear(64, 10)

    def forward(self, ids):
        return self.head(self.encoder(self.embed(ids)).mean(dim=1))

def build_model():
    torch.manual_seed(0)
    return Classifier()

def make_inputs(batch_size):
    return torch.randint(0, 100, (batch_size, 16))
'''


def classifier_file(tmp_path: Path, mode: str = "inference", ff: int = 128) -> Path:
    """A stock nn.TransformerEncoder classifier as a user writes it from torch's docs."""
    path = tmp_path / f"classifier_{mode}_{ff}.py"
    path.write_text(CLASSIFIER.format(mode=mode, ff=ff), encoding="utf-8")
    return path


def sweep_counts(path: Path, batch_size: int) -> tuple[int | None, ByteSplit | None]:
    """What a sweep counts at ``batch_size``: the worker's own timing, capture and
    counting passes."""
    timing = TimingConfig(warmup_min_steps=1, warmup_min_s=0.0, measure_min_steps=2,
                          measure_min_s=0.0)
    worker = Worker(WorkerConfig(str(path), timing=timing), lambda reply: None)
    try:
        result = worker.measure(batch_size, first_step=True)
    finally:
        worker.sampler.close()
    assert result.ops, result.flags
    return result.flops, result.bytes


def target_counts(path: Path, batch_size: int) -> tuple[int, ByteSplit]:
    """What ``--target-gpu`` counts of the same file at ``batch_size`` (meta tensors)."""
    ops = count_on_meta(load_model_file(path), batch_size, torch.float32, peak=False).ops
    split = ByteSplit()
    for op in ops:
        split = split + op.bytes
    assert all(op.flops is not None for op in ops)
    return sum(op.flops or 0 for op in ops), split


@pytest.mark.parametrize("mode", ["inference", pytest.param("train", marks=pytest.mark.slow)])
def test_the_sweep_and_target_gpu_count_a_transformer_encoder_alike(
        tmp_path: Path, mode: str) -> None:
    path = classifier_file(tmp_path, mode)
    flops, split = sweep_counts(path, 2)
    assert flops is not None and flops > 10**6  # the fused layers counted: not 70 kFLOP
    assert (flops, split) == target_counts(path, 2)


def test_the_sweep_and_target_gpu_count_attention_alike(tmp_path: Path) -> None:
    path = MODELS / "tiny_decode.py"  # F.scaled_dot_product_attention over a KV cache
    assert sweep_counts(path, 2) == target_counts(path, 2)
