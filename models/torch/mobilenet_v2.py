"""MobileNetV2 (Sandler et al., 2018) with torchvision's module layout, so torchvision's
ImageNet state_dict (``mobilenet_v2-b0353104.pth``) loads into it strictly.

Factory for ``deploykit convert torch models/torch/mobilenet_v2.py:build --weights ...``.
Input: float32 ``(N, 3, 224, 224)`` RGB, scaled to [0, 1], normalised with ImageNet
mean (0.485, 0.456, 0.406) and std (0.229, 0.224, 0.225). Output: 1000 logits.
"""

from __future__ import annotations

import torch
from torch import nn

# expansion t, output channels c, repeats n, first stride s
SETTINGS = [
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
]


def conv_bn_relu6(inputs: int, outputs: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> nn.Sequential:
    return nn.Sequential(
        nn.Conv2d(inputs, outputs, kernel, stride, (kernel - 1) // 2, groups=groups, bias=False),
        nn.BatchNorm2d(outputs),
        nn.ReLU6(inplace=True),
    )


class InvertedResidual(nn.Module):
    def __init__(self, inputs: int, outputs: int, stride: int, expansion: int) -> None:
        super().__init__()
        hidden = inputs * expansion
        self.use_residual = stride == 1 and inputs == outputs
        layers: list[nn.Module] = []
        if expansion != 1:
            layers.append(conv_bn_relu6(inputs, hidden, kernel=1))
        layers += [
            conv_bn_relu6(hidden, hidden, stride=stride, groups=hidden),
            nn.Conv2d(hidden, outputs, 1, bias=False),
            nn.BatchNorm2d(outputs),
        ]
        self.conv = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv(x) if self.use_residual else self.conv(x)


class MobileNetV2(nn.Module):
    def __init__(self, classes: int = 1000) -> None:
        super().__init__()
        channels = 32
        features: list[nn.Module] = [conv_bn_relu6(3, channels, stride=2)]
        for expansion, outputs, repeats, stride in SETTINGS:
            for index in range(repeats):
                features.append(InvertedResidual(channels, outputs, stride if index == 0 else 1, expansion))
                channels = outputs
        features.append(conv_bn_relu6(channels, 1280, kernel=1))
        self.features = nn.Sequential(*features)
        self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(1280, classes))

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        x = self.features(images)
        x = nn.functional.adaptive_avg_pool2d(x, 1).flatten(1)
        return self.classifier(x)


def build() -> MobileNetV2:
    return MobileNetV2()
