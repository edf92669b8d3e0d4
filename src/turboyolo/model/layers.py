"""Darknet layers as ``nn.Module``s, each built from one frozen spec.

Shapes: feature maps are ``[B, C, H, W]``; a YOLO head's output is ``[B, A, H, W, 5 + num_classes]``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from turboyolo.formats.darknet_cfg import ConvSpec, MaxPoolSpec

# Darknet normalises with (x - mean) / (sqrt(var) + 1e-6), not sqrt(var + eps): eval mode follows it.
DARKNET_BN_EPS = 1e-6
# Darknet updates running statistics as 0.99 * old + 0.01 * batch.
DARKNET_BN_MOMENTUM = 0.01


class DarknetBatchNorm2d(nn.BatchNorm2d):
    """BatchNorm whose inference matches Darknet's formula; training is ordinary batch statistics."""

    def __init__(self, num_features: int):
        super().__init__(num_features, eps=1e-5, momentum=DARKNET_BN_MOMENTUM)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return super().forward(x)
        scale = self.weight / (self.running_var.sqrt() + DARKNET_BN_EPS)
        shift = self.bias - self.running_mean * scale
        return x * scale.to(x.dtype).view(1, -1, 1, 1) + shift.to(x.dtype).view(1, -1, 1, 1)


def activation(name: str) -> nn.Module:
    if name == "leaky":
        return nn.LeakyReLU(0.1, inplace=True)
    if name == "relu":
        return nn.ReLU(inplace=True)
    if name == "logistic":
        return nn.Sigmoid()
    if name == "swish":
        return nn.SiLU(inplace=True)
    if name == "mish":
        return nn.Mish(inplace=True)
    return nn.Identity()


class ConvBlock(nn.Module):
    """Convolution, optional Darknet batch norm, activation."""

    def __init__(self, spec: ConvSpec, in_channels: int):
        super().__init__()
        self.conv = nn.Conv2d(
            in_channels, spec.filters, spec.size, spec.stride, spec.padding, bias=not spec.batch_normalize
        )
        self.bn = DarknetBatchNorm2d(spec.filters) if spec.batch_normalize else None
        self.act = activation(spec.activation)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.conv(x)
        if self.bn is not None:
            x = self.bn(x)
        return self.act(x)


class DarknetMaxPool(nn.Module):
    """Darknet's max-pool: padding split ``padding // 2`` before, the rest after, and never counted.

    Padding with -inf reproduces Darknet, which skips out-of-bounds positions (zero padding does not,
    for size=2 stride=1 it changes the result wherever activations are negative).
    """

    def __init__(self, spec: MaxPoolSpec):
        super().__init__()
        self.size, self.stride = spec.size, spec.stride
        before = spec.padding // 2
        self.pad = (before, spec.padding - before, before, spec.padding - before)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.pad):
            x = F.pad(x, self.pad, value=float("-inf"))
        return F.max_pool2d(x, self.size, self.stride)


class DepthMaxPool(nn.Module):
    """Darknet's ``maxpool_depth=1``: output channel ``g`` = max over input channels ``g, g + out, ...``
    (``out`` = ``out_channels``); ``[B, C, H, W] -> [B, out, H, W]``."""

    def __init__(self, out_channels: int):
        super().__init__()
        self.out_channels = out_channels

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, channels, height, width = x.shape
        groups = -(-channels // self.out_channels)
        missing = groups * self.out_channels - channels
        if missing:  # Darknet's loop stops at the last channel: pad the last group with -inf
            x = F.pad(x, (0, 0, 0, 0, 0, missing), value=float("-inf"))
        return x.view(batch, groups, self.out_channels, height, width).amax(1)


class Upsample(nn.Module):
    def __init__(self, stride: int):
        super().__init__()
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=self.stride, mode="nearest")


class Route(nn.Module):
    """Channel concatenation of earlier outputs (absolute indices); with ``groups`` > 1 only channel
    slice ``group_id`` of each source (Darknet's CSP split: ``groups=2 group_id=1`` = second half)."""

    def __init__(self, sources: tuple[int, ...], groups: int = 1, group_id: int = 0):
        super().__init__()
        self.sources, self.groups, self.group_id = sources, groups, group_id

    def forward(self, outputs: list[torch.Tensor | None]) -> torch.Tensor:
        tensors = [outputs[i] for i in self.sources]
        if self.groups > 1:
            tensors = [t.chunk(self.groups, 1)[self.group_id] for t in tensors]
        return tensors[0] if len(tensors) == 1 else torch.cat(tensors, 1)


class Shortcut(nn.Module):
    """Residual addition of an earlier output (absolute index) to the previous one."""

    def __init__(self, source: int, act: str):
        super().__init__()
        self.source = source
        self.act = activation(act)

    def forward(self, x: torch.Tensor, outputs: list[torch.Tensor | None]) -> torch.Tensor:
        return self.act(x + outputs[self.source])


class YoloHead(nn.Module):
    """Reshape a head convolution's output ``[B, A*(5+C), H, W]`` to ``[B, A, H, W, 5+C]`` (raw: what
    the convolution gave, logits, or probabilities when its activation is ``logistic``)."""

    def __init__(self, num_anchors: int, num_classes: int):
        super().__init__()
        self.num_anchors, self.num_outputs = num_anchors, num_classes + 5

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, _, height, width = x.shape
        return x.view(batch, self.num_anchors, self.num_outputs, height, width).permute(0, 1, 3, 4, 2)
