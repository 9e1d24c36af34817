"""A MobileNetV2-shaped net (inverted residuals, depthwise convolutions) on 160x160 images:
its activations are large, so glibc maps and faults them in afresh every step (the
page-fault-heavy model of benchmarks/stability.py). ``IMAGE`` is read at call time, so a
variant may change it."""

from __future__ import annotations

import torch
from torch import nn

UNIT = "image"
MODE = "inference"
BATCH_SIZES = [1, 2, 4, 8, 16]
IMAGE = 160


def block(cin: int, cout: int, stride: int, expand: int = 6) -> nn.Module:
    mid = cin * expand
    return nn.Sequential(nn.Conv2d(cin, mid, 1, bias=False), nn.BatchNorm2d(mid), nn.ReLU6(),
                         nn.Conv2d(mid, mid, 3, stride, 1, groups=mid, bias=False),
                         nn.BatchNorm2d(mid), nn.ReLU6(), nn.Conv2d(mid, cout, 1, bias=False),
                         nn.BatchNorm2d(cout))


def build_model() -> nn.Module:
    torch.manual_seed(0)
    layers: list[nn.Module] = [nn.Conv2d(3, 32, 3, 2, 1, bias=False), nn.BatchNorm2d(32),
                               nn.ReLU6()]
    for cin, cout, stride in ((32, 16, 1), (16, 24, 2), (24, 32, 2), (32, 64, 2), (64, 96, 1),
                              (96, 160, 2)):
        layers.append(block(cin, cout, stride))
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(160, 1000)]
    return nn.Sequential(*layers)


def make_inputs(batch_size: int) -> torch.Tensor:
    return torch.randn(batch_size, 3, IMAGE, IMAGE)
