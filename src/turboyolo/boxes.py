"""Box math, the one home: formats, conversions and IoU, for torch tensors and numpy arrays alike.

``xyxy`` = (x1, y1, x2, y2); ``cxcywh`` = (centre x, centre y, w, h); ``xywh`` = COCO's (x, y, w, h);
``wh`` = (w, h) of boxes that share a centre (anchor shapes). Shapes are ``[..., 4]`` (``[..., 2]``);
every function returns the type it is given (a tensor stays on its device). The loss, the anchor fit,
tiled detection, post-processing and export all use these.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TypeVar

import numpy as np
import torch

Boxes = TypeVar("Boxes", torch.Tensor, np.ndarray)


def _xp(boxes):
    return torch if isinstance(boxes, torch.Tensor) else np


def cxcywh_to_xyxy(boxes: Boxes) -> Boxes:
    xp = _xp(boxes)
    half = boxes[..., 2:4] / 2
    return xp.concatenate([boxes[..., :2] - half, boxes[..., :2] + half], -1)


def xyxy_to_cxcywh(boxes: Boxes) -> Boxes:
    xp = _xp(boxes)
    return xp.concatenate([(boxes[..., :2] + boxes[..., 2:4]) / 2, boxes[..., 2:4] - boxes[..., :2]], -1)


def xyxy_to_xywh(boxes: Boxes) -> Boxes:
    """(x1, y1, x2, y2) -> COCO's (x, y, w, h)."""
    xp = _xp(boxes)
    return xp.concatenate([boxes[..., :2], boxes[..., 2:4] - boxes[..., :2]], -1)


def aligned_iou(
    pred: torch.Tensor, target: torch.Tensor, kind: str = "iou", eps: float = 1e-9
) -> torch.Tensor:
    """IoU and its variants of box pairs, ``[..., 4] x [..., 4] -> [...]``, boxes as ``cxcywh``.

    ``kind``: ``iou``; ``giou`` = IoU - (enclosing area - union) / enclosing area (Rezatofighi et al.);
    ``diou`` = IoU - rho^2 / c^2 (rho: centre distance, c: diagonal of the enclosing box);
    ``ciou`` = DIoU - alpha * v with v = 4 / pi^2 (atan(w_t / h_t) - atan(w_p / h_p))^2 and
    alpha = v / (1 - IoU + v), held constant in the gradient (Zheng et al., AAAI 2020). Differentiable
    in ``pred``.
    """
    p1, p2 = pred[..., :2] - pred[..., 2:4] / 2, pred[..., :2] + pred[..., 2:4] / 2
    t1, t2 = target[..., :2] - target[..., 2:4] / 2, target[..., :2] + target[..., 2:4] / 2
    inter = (torch.min(p2, t2) - torch.max(p1, t1)).clamp(min=0).prod(-1)
    union = pred[..., 2:4].prod(-1) + target[..., 2:4].prod(-1) - inter
    iou = inter / (union + eps)
    if kind == "iou":
        return iou
    enclose_wh = torch.max(p2, t2) - torch.min(p1, t1)
    if kind == "giou":
        enclose = enclose_wh.prod(-1) + eps
        return iou - (enclose - union) / enclose
    diagonal = enclose_wh.pow(2).sum(-1) + eps
    centre = (pred[..., :2] - target[..., :2]).pow(2).sum(-1)
    if kind == "diou":
        return iou - centre / diagonal
    if kind != "ciou":
        raise ValueError(f"unknown IoU kind {kind!r}; use iou, giou, diou or ciou")
    v = (4 / math.pi**2) * (
        torch.atan(target[..., 2] / (target[..., 3] + eps)) - torch.atan(pred[..., 2] / (pred[..., 3] + eps))
    ).pow(2)
    with torch.no_grad():
        alpha = v / (1 - iou + v + eps)
    return iou - centre / diagonal - alpha * v


def pairwise_diou(boxes: torch.Tensor, beta: float) -> torch.Tensor:
    """Darknet's DIoU-NMS overlap of every pair, ``[N, 4] -> [N, N]`` (``xyxy``): IoU - (rho^2 / c^2)^beta
    (box.c ``box_diounms``; ``greedynms`` is the same with beta 0.6, ``box_diou``)."""
    iou = box_iou(boxes, boxes)
    lt = torch.min(boxes[:, None, :2], boxes[None, :, :2])
    rb = torch.max(boxes[:, None, 2:], boxes[None, :, 2:])
    diagonal = (rb - lt).pow(2).sum(-1)
    centres = (boxes[:, :2] + boxes[:, 2:]) / 2
    distance = (centres[:, None] - centres[None]).pow(2).sum(-1)
    ratio = torch.where(diagonal > 0, distance / diagonal.clamp(min=1e-12), torch.zeros_like(distance))
    return iou - ratio.pow(beta)


def clip_xyxy(boxes: torch.Tensor, width: float, height: float) -> torch.Tensor:
    """Clip to [0, width] x [0, height] (Darknet clips to the image size, not size - 1)."""
    out = boxes.clone()
    out[..., 0::2] = out[..., 0::2].clamp(0, width)
    out[..., 1::2] = out[..., 1::2].clamp(0, height)
    return out


def _area(boxes: Boxes) -> Boxes:
    xp = _xp(boxes)
    return xp.clip(boxes[..., 2:4] - boxes[..., :2], 0, None).prod(-1)


def box_iou(a: Boxes, b: Boxes) -> Boxes:
    """Pairwise IoU of xyxy boxes: ``[..., N, 4] x [..., M, 4] -> [..., N, M]`` (leading dims broadcast).

    Empty pairs (both boxes without area) give 0.
    """
    xp = _xp(a)
    a, b = a[..., :, None, :], b[..., None, :, :]
    lt = xp.maximum(a[..., :2], b[..., :2])
    rb = xp.minimum(a[..., 2:4], b[..., 2:4])
    inter = xp.clip(rb - lt, 0, None).prod(-1)
    union = _area(a) + _area(b) - inter
    return inter / xp.clip(union, 1e-9, None)


def box_iou_pairs(a: Boxes, b: Boxes) -> Boxes:
    """Element-wise IoU of xyxy boxes: ``[..., 4] x [..., 4] -> [...]`` (0 where both are empty)."""
    xp = _xp(a)
    lt = xp.maximum(a[..., :2], b[..., :2])
    rb = xp.minimum(a[..., 2:4], b[..., 2:4])
    inter = xp.clip(rb - lt, 0, None).prod(-1)
    return inter / xp.clip(_area(a) + _area(b) - inter, 1e-9, None)


def wh_iou(wh1: Boxes, wh2: Boxes) -> Boxes:
    """IoU of boxes sharing a centre, from widths and heights: ``[N, 2] x [K, 2] -> [N, K]``."""
    xp = _xp(wh1)
    inter = xp.minimum(wh1[:, None], wh2[None]).prod(-1)
    union = wh1.prod(-1)[:, None] + wh2.prod(-1)[None] - inter
    return inter / xp.clip(union, 1e-12, None)


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
