"""ResNet-18-shaped image classifier on 224x224 RGB images (inference).

What it models: the ResNet-18 layout (7x7 stride-2 stem, 3x3 max-pool, four stages of two
BasicBlocks with 64-128-256-512 channels, batch norm, adaptive average pool, 1000-class fully
connected layer), 11.7M parameters with seeded random weights, in eval() mode. About
3.6 GFLOP per image.

Why it is interesting for batching: it is the counter-example to LLM decode. A convolution
reuses every weight at every output pixel (56x56 of them in the first stage), so even at
batch 1 its arithmetic intensity is tens to hundreds of FLOP/byte, above the ridge point:
the convs are already compute-bound and run at well over half of the machine's FLOP
ceiling (~140 GFLOP/s on a 2-core CPU whose matmul peak is ~190). A bigger batch adds
FLOPs in proportion, so images/s stays roughly flat (and may even drop as activations
outgrow the caches). Batching buys little here beyond amortising per-op overhead; the right
batch size is the smallest that meets the throughput target.
"""

from __future__ import annotations

import torch
from torch import nn

UNIT = "image"
MODE = "inference"
# BATCH_SIZES is not set: the tool sweeps powers of two until throughput plateaus.

NUM_CLASSES = 1000
IMAGE_SIZE = 224
SEED = 0


class BasicBlock(nn.Module):
    def __init__(self, in_ch: int, out_ch: int, stride: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(in_ch, out_ch, 3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_ch)
        self.conv2 = nn.Conv2d(out_ch, out_ch, 3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(
                nn.Conv2d(in_ch, out_ch, 1, stride=stride, bias=False), nn.BatchNorm2d(out_ch)
            )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return self.relu(out + identity)


class ResNet18(nn.Module):
    def __init__(self, num_classes: int = NUM_CLASSES) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        stages: list[nn.Module] = []
        in_ch = 64
        for out_ch, stride in [(64, 1), (128, 2), (256, 2), (512, 2)]:
            blocks = [BasicBlock(in_ch, out_ch, stride), BasicBlock(out_ch, out_ch, 1)]
            stages.append(nn.Sequential(*blocks))
            in_ch = out_ch
        self.layer1, self.layer2, self.layer3, self.layer4 = stages
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(512, num_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return self.fc(torch.flatten(self.avgpool(x), 1))


def build_model() -> nn.Module:
    torch.manual_seed(SEED)
    model = ResNet18()
    for m in model.modules():
        if isinstance(m, nn.Conv2d):
            nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
    return model.eval()


def make_inputs(batch_size: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(SEED + 1)
    return torch.randn(batch_size, 3, IMAGE_SIZE, IMAGE_SIZE, generator=gen)
