"""ResNet-50 v1.5 (torchvision's layout: the stride on the 3x3 convolution of each
bottleneck), inference on 224x224 images: the model of NVIDIA DeepLearningExamples'
published inference tables, written out here (torchvision does not install beside this
project's torch on every machine). 25.6M parameters, 8.2 GFLOP per image."""

from __future__ import annotations

import torch
from torch import nn

UNIT = "image"
MODE = "inference"


class Bottleneck(nn.Module):
    def __init__(self, in_ch: int, width: int, stride: int) -> None:
        super().__init__()
        out_ch = width * 4
        self.conv1 = nn.Conv2d(in_ch, width, 1, bias=False)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = nn.Conv2d(width, width, 3, stride=stride, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = nn.Conv2d(width, out_ch, 1, bias=False)
        self.bn3 = nn.BatchNorm2d(out_ch)
        self.relu = nn.ReLU(inplace=True)
        self.downsample: nn.Module | None = None
        if stride != 1 or in_ch != out_ch:
            self.downsample = nn.Sequential(nn.Conv2d(in_ch, out_ch, 1, stride=stride,
                                                      bias=False), nn.BatchNorm2d(out_ch))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x if self.downsample is None else self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        return self.relu(out + identity)


class ResNet50(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(3, 64, 7, stride=2, padding=3, bias=False)
        self.bn1 = nn.BatchNorm2d(64)
        self.relu = nn.ReLU(inplace=True)
        self.maxpool = nn.MaxPool2d(3, stride=2, padding=1)
        blocks: list[nn.Module] = []
        in_ch = 64
        for width, count, stride in ((64, 3, 1), (128, 4, 2), (256, 6, 2), (512, 3, 2)):
            for i in range(count):
                blocks.append(Bottleneck(in_ch, width, stride if i == 0 else 1))
                in_ch = width * 4
        self.layers = nn.Sequential(*blocks)
        self.avgpool = nn.AdaptiveAvgPool2d(1)
        self.fc = nn.Linear(2048, 1000)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        return self.fc(torch.flatten(self.avgpool(self.layers(x)), 1))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    return ResNet50().eval()


def make_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, 224, 224)
