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
    """BatchNorm whose inference matches Darknet's formula, ``(x - mean) / (sqrt(var) + 1e-6)``.

    Training is PyTorch's batch norm over each mini-batch's statistics; the running statistics move by
    ``momentum`` (Darknet: 0.01) towards the batch's. Darknet's own training formula is a swapped module
    (``--bn-train darknet``: :class:`turboyolo.exact.modules.DarknetTrainingBatchNorm2d`).
    """

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
    """Convolution, optional Darknet batch norm, activation (Darknet's own float arithmetic, where a run
    asks for it, comes in by swapping ``conv``, ``bn`` and ``act``: :mod:`turboyolo.exact.modules`)."""

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

    @torch.no_grad()
    def fold_batchnorm(self) -> None:
        """Fold the batch norm's inference (Darknet's ``scale = weight / (sqrt(running_var) + 1e-6)``,
        ``shift = bias - running_mean * scale``) into the convolution, computed in float64: one
        convolution with a bias instead of convolution, multiply and add. For inference copies only:
        the block no longer trains or writes Darknet ``.weights`` as before."""
        if self.bn is None:
            return
        bn, conv = self.bn, self.conv
        scale = bn.weight.double() / (bn.running_var.double().sqrt() + DARKNET_BN_EPS)
        shift = bn.bias.double() - bn.running_mean.double() * scale
        folded = type(conv)(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                            groups=conv.groups, bias=True, device=conv.weight.device, dtype=conv.weight.dtype)
        folded.weight.copy_((conv.weight.double() * scale.view(-1, 1, 1, 1)).to(conv.weight.dtype))
        folded.bias.copy_(shift.to(conv.weight.dtype))
        self.conv, self.bn = folded, None


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

    def pad_is_read(self, height: int, width: int) -> bool:
        """Whether a window of the pool reaches into the padding at this input size.

        Darknet's output has ``(side + padding - size) // stride + 1`` positions per side; when nothing is
        padded before and the last window ends inside the input, the -inf border is never read (YOLOv3-tiny's
        stride-2 pools on even sides), and pooling the unpadded input gives the same numbers and gradients
        without the copy.
        """
        if self.pad[0] or self.pad[2]:
            return True
        for side, padding in ((height, self.pad[3]), (width, self.pad[1])):
            positions = (side + padding - self.size) // self.stride + 1
            if (positions - 1) * self.stride + self.size > side:
                return True
        return False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if any(self.pad) and self.pad_is_read(x.shape[-2], x.shape[-1]):
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
