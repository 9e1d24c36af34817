"""A small CNN trained on synthetic images: a training-mode model file AND a real loop.

As a model file (``MODE = "train"``), ``diagnose samples/train_cnn.py`` sweeps the training
step (forward, cross-entropy loss, backward, SGD with momentum) over batch sizes.

As a script, ``python samples/train_cnn.py`` runs an ordinary training loop at batch 32 with
``batchscope.watch`` around it: the first steps are profiled in-process and a report for
batch 32, with estimates for larger batches, lands in ``batchscope-train-report/``. The
loss it prints is the same as with ``--no-watch`` (same seed): watching changes nothing.
"""

from __future__ import annotations

import argparse
from itertools import pairwise

import torch
from torch import nn
from torch.nn import functional as F

UNIT = "image"
MODE = "train"
NUM_CLASSES = 10
IMAGE_SIZE = 64
SEED = 0


class SmallCNN(nn.Module):
    """Four conv-BN-ReLU blocks, each halving the resolution, then a linear classifier."""

    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        layers: list[nn.Module] = []
        channels = [3, 32, 64, 128, 256]
        for c_in, c_out in pairwise(channels):
            layers += [nn.Conv2d(c_in, c_out, 3, padding=1, bias=False), nn.BatchNorm2d(c_out),
                       nn.ReLU(inplace=True), nn.MaxPool2d(2)]
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels[-1], num_classes)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.features(images)
        return self.head(torch.flatten(F.adaptive_avg_pool2d(x, 1), 1))


def build_model() -> nn.Module:
    torch.manual_seed(SEED)
    return SmallCNN()


def make_inputs(batch_size: int, seed: int = SEED) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return {
        "images": torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=g),
        "labels": torch.randint(0, NUM_CLASSES, (batch_size,), generator=g),
    }


def run(model: nn.Module, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return model(inputs["images"])


def loss(outputs: torch.Tensor, inputs: dict[str, torch.Tensor]) -> torch.Tensor:
    return F.cross_entropy(outputs, inputs["labels"])


def make_optimizer(model: nn.Module) -> torch.optim.Optimizer:
    return torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)


def train(steps: int, batch_size: int, use_watch: bool, out_dir: str) -> list[float]:
    """An ordinary training loop; ``batchscope.watch`` wraps it when asked."""
    import contextlib

    import batchscope

    model = build_model().train()
    optimizer = make_optimizer(model)
    losses = []
    context = (batchscope.watch(model, optimizer=optimizer, unit=UNIT, out_dir=out_dir)
               if use_watch else contextlib.nullcontext())
    with context as w:
        for step in range(steps):
            batch = make_inputs(batch_size, seed=SEED + step)  # a fresh synthetic batch
            value = loss(run(model, batch), batch)
            value.backward()
            optimizer.step()
            optimizer.zero_grad()
            losses.append(value.item())
            print(f"step {step:3d}  loss {value.item():.6f}", flush=True)
            if w is not None:
                w.step()
    if use_watch and w.report is not None and w.report.batches:
        b = w.report.batches[0]
        print(f"batchscope: batch {b.batch_size}: {b.throughput_per_s:,.1f} images/s measured; "
              f"report in {out_dir}/")
        for e in w.report.estimates:
            print(f"  estimate at batch {e.batch_size}: {e.throughput_per_s:,.1f} images/s")
    return losses


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-watch", action="store_true", help="run the same loop unwatched")
    parser.add_argument("--out", default="batchscope-train-report")
    args = parser.parse_args()
    train(args.steps, args.batch_size, not args.no_watch, args.out)


if __name__ == "__main__":
    main()
