"""Box formats and conversions. ``xyxy`` = (x1, y1, x2, y2); ``cxcywh`` = (center x, center y, w, h).

Shapes are ``[..., 4]``; functions work on torch tensors. IoU comes from ``torchvision.ops``.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torchvision.ops import box_iou  # noqa: F401  (re-exported: the one IoU the project uses)


def cxcywh_to_xyxy(boxes: torch.Tensor) -> torch.Tensor:
    cx, cy, w, h = boxes.unbind(-1)
    return torch.stack((cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2), -1)


def xyxy_to_cxcywh(boxes: torch.Tensor) -> torch.Tensor:
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack(((x1 + x2) / 2, (y1 + y2) / 2, x2 - x1, y2 - y1), -1)


def xyxy_to_xywh(boxes: torch.Tensor) -> torch.Tensor:
    """(x1, y1, x2, y2) -> COCO's (x, y, w, h)."""
    x1, y1, x2, y2 = boxes.unbind(-1)
    return torch.stack((x1, y1, x2 - x1, y2 - y1), -1)


def clip_xyxy(boxes: torch.Tensor, width: float, height: float) -> torch.Tensor:
    """Clip to [0, width] x [0, height] (Darknet clips to the image size, not size - 1)."""
    out = boxes.clone()
    out[..., 0::2] = out[..., 0::2].clamp(0, width)
    out[..., 1::2] = out[..., 1::2].clamp(0, height)
    return out


@dataclass(frozen=True)
class Letterbox:
    """How an original image was placed in the network input.

    ``network = original * ratio + pad`` per axis; ``ratio_x`` and ``ratio_y`` can differ by a rounding
    step (Darknet truncates the resized size to an integer).
    """

    ratio_x: float
    ratio_y: float
    pad_x: float
    pad_y: float
    orig_w: int
    orig_h: int

    @classmethod
    def from_meta(cls, meta) -> Letterbox:
        """From a loader ``ImageMeta`` (``ratio`` scalar or pair, ``pad`` pair, ``orig_hw``)."""
        ratio = meta.ratio if isinstance(meta.ratio, (tuple, list)) else (meta.ratio, meta.ratio)
        height, width = meta.orig_hw
        return cls(
            float(ratio[0]), float(ratio[1]), float(meta.pad[0]), float(meta.pad[1]), int(width), int(height)
        )

    def to_original(self, boxes_xyxy: torch.Tensor) -> torch.Tensor:
        out = boxes_xyxy.clone()
        out[..., 0::2] = (out[..., 0::2] - self.pad_x) / self.ratio_x
        out[..., 1::2] = (out[..., 1::2] - self.pad_y) / self.ratio_y
        return out
