"""``Darknet(nn.Module)``: the network a Darknet ``.cfg`` describes.

The ``.cfg`` is the single source of truth: this module only turns a :class:`ModelSpec` into modules.
Strides and anchors are fixed at construction (``Darknet.heads``), never set during ``forward``.
``forward`` returns the raw head outputs; decoding and NMS live in :mod:`turboyolo.model.postprocess`.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from turboyolo.errors import ConfigError, WeightsError
from turboyolo.formats.darknet_cfg import (
    YOLO_DEFAULTS,
    ConvSpec,
    MaxPoolSpec,
    ModelSpec,
    RouteSpec,
    ShortcutSpec,
    UpsampleSpec,
    YoloSpec,
    resolve_index,
)
from turboyolo.model.layers import (
    ConvBlock,
    DarknetMaxPool,
    DepthMaxPool,
    Route,
    Shortcut,
    Upsample,
    YoloHead,
)


@dataclass(frozen=True)
class HeadInfo:
    """What the loss and the decoder need to know about one ``[yolo]`` head."""

    layer_index: int
    stride: int  # input pixels per grid cell
    anchors: tuple[tuple[float, float], ...]  # this head's anchors (w, h) in input pixels
    mask: tuple[int, ...]  # indices of ``anchors`` within ``all_anchors``
    all_anchors: tuple[tuple[float, float], ...]  # every anchor of the network, as Darknet matches
    num_classes: int
    ignore_thresh: float
    truth_thresh: float
    # AlexeyAB's [yolo] keys with Darknet's defaults filled in (YOLO_DEFAULTS); iou_normalizer stays
    # None when the cfg does not give it (turboyolo.train.loss documents what it then uses).
    scale_x_y: float = 1.0
    new_coords: bool = False
    iou_thresh: float = 1.0
    iou_loss: str = "mse"
    iou_normalizer: float | None = None
    obj_normalizer: float = 1.0
    cls_normalizer: float = 1.0
    max_delta: float = float("inf")
    nms_kind: str = "default"
    beta_nms: float = 0.6

    def anchor_tensor(self, device=None, dtype=torch.float32) -> torch.Tensor:
        """``[A, 2]`` anchor sizes in input pixels."""
        return torch.tensor(self.anchors, device=device, dtype=dtype)


class Darknet(nn.Module):
    """A Darknet network.

    Args:
        spec: the parsed ``.cfg``.

    ``forward(images)``: ``images`` float ``[B, C, H, W]`` in [0, 1] with H and W multiples of
    ``max_stride``; returns a list with one raw ``[B, A, H/stride, W/stride, 5 + num_classes]`` tensor
    per head (tx, ty, tw, th, objectness logit, class logits).
    """

    def __init__(self, spec: ModelSpec):
        super().__init__()
        self.spec = spec
        self.layers = nn.ModuleList()
        channels: list[int] = []
        scales: list[float] = []  # input pixels per output pixel, per layer
        heads: list[HeadInfo] = []
        in_channels, scale = spec.net.channels, 1.0
        for index, layer in enumerate(spec.layers):
            if isinstance(layer, ConvSpec):
                module: nn.Module = ConvBlock(layer, in_channels)
                out_channels, scale = layer.filters, scale * layer.stride
            elif isinstance(layer, MaxPoolSpec) and layer.maxpool_depth:
                module, out_channels = DepthMaxPool(layer.out_channels), layer.out_channels
            elif isinstance(layer, MaxPoolSpec):
                module, out_channels, scale = DarknetMaxPool(layer), in_channels, scale * layer.stride
            elif isinstance(layer, UpsampleSpec):
                module, out_channels, scale = Upsample(layer.stride), in_channels, scale / layer.stride
            elif isinstance(layer, RouteSpec):
                sources = tuple(resolve_index(ref, index) for ref in layer.layers)
                if len({scales[i] for i in sources}) > 1:
                    raise ConfigError(f"{spec.source}:{layer.line}: route joins layers of different sizes")
                uneven = [i for i in sources if channels[i] % layer.groups]
                if uneven:
                    raise ConfigError(
                        f"{spec.source}:{layer.line}: route groups={layer.groups} does not divide the "
                        f"{channels[uneven[0]]} channels of layer {uneven[0]}; fix groups= or that layer"
                    )
                module = Route(sources, layer.groups, layer.group_id)
                out_channels = sum(channels[i] // layer.groups for i in sources)
                scale = scales[sources[0]]
            elif isinstance(layer, ShortcutSpec):
                source = resolve_index(layer.from_, index)
                if channels[source] != in_channels or scales[source] != scale:
                    raise ConfigError(
                        f"{spec.source}:{layer.line}: shortcut adds layer {source} "
                        f"({channels[source]} channels) to {in_channels} channels"
                    )
                module, out_channels = Shortcut(source, layer.activation), in_channels
            elif isinstance(layer, YoloSpec):
                module, out_channels = YoloHead(len(layer.mask), layer.classes), in_channels
                heads.append(_head_info(index, layer, scale))
            else:  # pragma: no cover - the parser only makes the types above
                raise TypeError(layer)
            self.layers.append(module)
            channels.append(out_channels)
            scales.append(scale)
            in_channels = out_channels
        if not heads:
            raise ConfigError(f"{spec.source}: the network has no [yolo] layer; it cannot detect")
        self.heads: tuple[HeadInfo, ...] = tuple(heads)
        self.max_stride = int(max(scales))
        self._keep = self._referenced_outputs()

    @property
    def num_classes(self) -> int:
        return self.heads[0].num_classes

    def _referenced_outputs(self) -> frozenset[int]:
        keep = set()
        for module in self.layers:
            if isinstance(module, Route):
                keep.update(module.sources)
            elif isinstance(module, Shortcut):
                keep.add(module.source)
        return frozenset(keep)

    def forward(self, x: torch.Tensor) -> list[torch.Tensor]:
        outputs: list[torch.Tensor | None] = []
        head_outputs = []
        for index, module in enumerate(self.layers):
            if isinstance(module, Route):
                x = module(outputs)
            elif isinstance(module, Shortcut):
                x = module(x, outputs)
            elif isinstance(module, YoloHead):
                head_outputs.append(module(x))
            else:
                x = module(x)
            outputs.append(x if index in self._keep else None)
        return head_outputs

    def inference_copy(self, channels_last: bool = False) -> Darknet:
        """A copy for inference only, this network untouched: eval mode, batch norm folded into the
        convolutions (:meth:`ConvBlock.fold_batchnorm`), in channels_last memory format when asked (the
        CPU's faster layout for oneDNN)."""
        folded = copy.deepcopy(self).eval()
        for module in folded.layers:
            if isinstance(module, ConvBlock):
                module.fold_batchnorm()
        if channels_last:
            folded.to(memory_format=torch.channels_last)
        return folded.requires_grad_(False)

    def inference_copy_for(self, device: torch.device, dtype: torch.dtype = torch.float32,
                           autocast: torch.dtype | None = None, tuned: bool = False,
                           say: Callable[[str], object] = print) -> Darknet:
        """The inference copy as detection and ``turboyolo test`` run it on ``device`` in ``dtype`` (and
        under ``autocast``, if any): PyTorch's public modules, on the CPU in channels_last. ``tuned``
        (``--backend tuned``; CPU, plain float32 only): each layer on the fastest of its kernels on this
        machine (:mod:`turboyolo.model.cpu_kernels`, imported only here and only then; ``say`` gets its
        notes)."""
        cpu = device.type == "cpu"
        folded = self.inference_copy(channels_last=cpu).to(device, dtype)
        if tuned and cpu and dtype == torch.float32 and autocast is None:
            from turboyolo.model.cpu_kernels import tune_for_cpu

            tune_for_cpu(folded, say=say)
        return folded

    # ------------------------------------------------------------------ Darknet .weights as flat arrays

    def darknet_tensors(self, cutoff: int | None = None) -> list[tuple[int, list[torch.Tensor]]]:
        """Per convolution before ``cutoff`` (a layer count), its tensors in ``.weights`` file order:
        BN bias, BN weight, running mean, running var (or conv bias), then conv weight."""
        stop = len(self.layers) if cutoff is None else cutoff
        result = []
        for index, module in enumerate(self.layers[:stop]):
            if isinstance(module, ConvBlock):
                if module.bn is not None:
                    bn = module.bn
                    tensors = [bn.bias, bn.weight, bn.running_mean, bn.running_var]
                else:
                    tensors = [module.conv.bias]
                result.append((index, [t.data for t in tensors] + [module.conv.weight.data]))
        return result

    def load_flat_weights(self, flat: np.ndarray, cutoff: int | None = None, source: str = "weights") -> int:
        """Copy Darknet's flat float32 array into the network; returns the floats consumed.

        The array must end exactly on the last convolution before ``cutoff`` (all layers when None).
        """
        layout = self.darknet_tensors(cutoff)
        boundaries, total = [], 0
        for index, tensors in layout:
            total += sum(t.numel() for t in tensors)
            boundaries.append((index, total))
        if flat.size != total:
            raise WeightsError(_mismatch_message(source, flat.size, total, boundaries, cutoff))
        offset = 0
        with torch.no_grad():
            for _, tensors in layout:
                for tensor in tensors:
                    count = tensor.numel()
                    values = torch.from_numpy(flat[offset : offset + count].copy()).view_as(tensor)
                    tensor.copy_(values.to(tensor.dtype))
                    offset += count
        return offset

    def flat_weights(self, cutoff: int | None = None) -> np.ndarray:
        parts = [
            t.detach().float().cpu().reshape(-1).numpy() for _, ts in self.darknet_tensors(cutoff) for t in ts
        ]
        return np.concatenate(parts).astype(np.float32) if parts else np.zeros(0, np.float32)


def _head_info(index: int, layer: YoloSpec, stride: float) -> HeadInfo:
    options = {key: getattr(layer, key) for key in YOLO_DEFAULTS}
    for key, value in options.items():
        if value is None and key != "iou_normalizer":  # an absent iou_normalizer stays None: train/loss.py
            options[key] = YOLO_DEFAULTS[key]
    return HeadInfo(
        layer_index=index,
        stride=int(stride),
        anchors=tuple(layer.anchors[m] for m in layer.mask),
        mask=layer.mask,
        all_anchors=layer.anchors,
        num_classes=layer.classes,
        ignore_thresh=layer.ignore_thresh,
        truth_thresh=layer.truth_thresh,
        **options,
    )


def _mismatch_message(source: str, found: int, expected: int, boundaries, cutoff: int | None) -> str:
    nearest = min(boundaries, key=lambda b: abs(b[1] - found)) if boundaries else (0, 0)
    what = f"the first {cutoff} layers" if cutoff is not None else "the whole network"
    hint = f"the nearest layer boundary is after layer {nearest[0]} ({nearest[1]} floats)" + (
        f": if this is a backbone cut, name it .conv.{nearest[0] + 1} or pass --cutoff {nearest[0] + 1}"
        if nearest[1] == found
        else ""
    )
    return (
        f"{source}: {what} needs {expected} floats of weights but the file holds {found}; {hint}. "
        "Check that the .cfg (classes, filters) matches the weights."
    )
