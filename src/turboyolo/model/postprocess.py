"""Raw head outputs -> detections: decode, confidence filter, per-class NMS, rescale, clip.

Darknet semantics by default: a (box, class) pair is a detection when the objectness and
objectness x class probability both exceed ``conf_thres`` (multi-label); NMS runs per class on the
unclipped boxes in original-image pixels; boxes are clipped to the image last. The NMS is the cfg's
(``nms_kind`` of the last ``[yolo]``, as Darknet's detector reads it): plain IoU by default, DIoU-NMS
for ``greedynms`` (exponent 0.6) and ``diounms`` (exponent ``beta_nms``).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from torchvision.ops import batched_nms

from turboyolo.boxes import Letterbox, clip_xyxy, cxcywh_to_xyxy, pairwise_diou


def cell_grid(height: int, width: int, device=None) -> torch.Tensor:
    """``[1, 1, H, W, 2]`` float (x, y) index of every cell."""
    ys, xs = torch.meshgrid(
        torch.arange(height, device=device), torch.arange(width, device=device), indexing="ij"
    )
    return torch.stack((xs, ys), -1).view(1, 1, height, width, 2).float()


def decode_boxes(
    raw: torch.Tensor,
    head,
    grid: torch.Tensor,
    anchors: torch.Tensor,
    stride: torch.Tensor | float,
    max_log_wh: float | None = None,
) -> torch.Tensor:
    """One head's raw (tx, ty, tw, th) ``[..., 4]`` -> (cx, cy, w, h) in input pixels, Darknet's way.

    ``grid`` (cell x, y) and ``anchors`` (w, h in pixels) broadcast against ``raw[..., :2]``. Plain
    heads: xy = sigmoid(t) * s - (s - 1) / 2 + cell, wh = exp(t) * anchor (s = ``scale_x_y``). Heads
    with ``new_coords`` (YOLOv7; the convolution already applied the logistic): xy = t * s - (s - 1) / 2
    + cell, wh = (2 t)^2 * anchor. ``max_log_wh`` caps tw, th of plain heads (the loss: no overflow).
    """
    scale = head.scale_x_y
    if head.new_coords:
        xy, wh = raw[..., :2], (2 * raw[..., 2:4]).pow(2)
    else:
        log_wh = raw[..., 2:4] if max_log_wh is None else raw[..., 2:4].clamp(max=max_log_wh)
        xy, wh = raw[..., :2].sigmoid(), torch.exp(log_wh)
    if scale != 1.0:  # kept out of the plain case so YOLOv3's numbers stay bit for bit what they were
        xy = xy * scale - 0.5 * (scale - 1.0)
    return torch.cat(((xy + grid) * stride, wh * anchors), -1)


def decode(raw_outputs: Sequence[torch.Tensor], heads) -> torch.Tensor:
    """Decode raw heads to ``[B, N, 5 + C]``: (cx, cy, w, h) in input pixels, objectness, class probs.

    Args:
        raw_outputs: per head ``[B, A, H, W, 5 + C]`` as returned by ``Darknet.forward``.
        heads: the model's ``HeadInfo``s (stride, anchors, ``scale_x_y``, ``new_coords``).
    """
    decoded = []
    for raw, head in zip(raw_outputs, heads):
        batch, num_anchors, height, width, _ = raw.shape
        raw = raw.float()
        grid = cell_grid(height, width, raw.device)
        anchors = head.anchor_tensor(raw.device).view(1, num_anchors, 1, 1, 2)
        boxes = decode_boxes(raw[..., :4], head, grid, anchors, head.stride)
        probs = raw[..., 4:] if head.new_coords else raw[..., 4:].sigmoid()
        decoded.append(torch.cat((boxes, probs), -1).view(batch, -1, raw.shape[-1]))
    return torch.cat(decoded, 1)


def nms_options(heads) -> dict:
    """``nms_kind`` and ``beta_nms`` for :func:`postprocess`: the last head's, as Darknet's detector."""
    return {"nms_kind": heads[-1].nms_kind, "beta_nms": heads[-1].beta_nms}


def diou_nms(
    boxes: torch.Tensor, scores: torch.Tensor, classes: torch.Tensor, thres: float, beta: float
) -> torch.Tensor:
    """Darknet's ``diounms_sort``: per class, best first, drop a box whose DIoU-NMS overlap
    (:func:`turboyolo.boxes.pairwise_diou`) with a kept one exceeds ``thres``. Returns kept indices,
    best score first (as ``torchvision.ops.batched_nms``)."""
    kept = []
    for cls in classes.unique().tolist():
        index = (classes == cls).nonzero().flatten()
        index = index[scores[index].argsort(descending=True, stable=True)]
        over = (pairwise_diou(boxes[index].float(), beta) > thres).triu(1).cpu().numpy()
        removed = np.zeros(len(index), bool)
        for i in range(len(index)):
            if not removed[i]:
                removed |= over[i]
        kept.append(index[torch.from_numpy(~removed).to(index.device)])
    if not kept:
        return torch.zeros(0, dtype=torch.long, device=boxes.device)
    keep = torch.cat(kept)
    return keep[scores[keep].argsort(descending=True, stable=True)]


def postprocess(
    decoded: torch.Tensor,
    conf_thres: float = 0.25,
    nms_thres: float = 0.45,
    *,
    multi_label: bool = True,
    max_det: int | None = None,
    classes: Sequence[int] | None = None,
    letterboxes: Sequence[Letterbox] | None = None,
    nms_kind: str = "default",
    beta_nms: float = 0.6,
) -> list[torch.Tensor]:
    """Per image ``[n, 6]`` = (x1, y1, x2, y2, score, class), sorted by score.

    Boxes are in input pixels, or in original pixels (clipped) when ``letterboxes`` are given.
    ``multi_label=False`` keeps only the best class of each box (what auto-labelling wants).
    ``nms_kind``/``beta_nms``: the cfg's (:func:`nms_options`); DIoU-NMS measures distances relative
    to the original image's size when ``letterboxes`` are given, as Darknet does.
    """
    results = []
    for index, image in enumerate(decoded):
        objectness = image[:, 4]
        image = image[objectness > conf_thres]
        boxes = cxcywh_to_xyxy(image[:, :4])
        if multi_label:
            scores = image[:, 4:5] * image[:, 5:]
            box_index, class_index = (scores > conf_thres).nonzero(as_tuple=True)
            score = scores[box_index, class_index]
        else:
            score, class_index = (image[:, 4:5] * image[:, 5:]).max(1)
            box_index = (score > conf_thres).nonzero(as_tuple=True)[0]
            score, class_index = score[box_index], class_index[box_index]
        boxes = boxes[box_index]
        if classes is not None:
            wanted = torch.isin(class_index, torch.as_tensor(list(classes), device=class_index.device))
            boxes, score, class_index = boxes[wanted], score[wanted], class_index[wanted]
        letterbox = letterboxes[index] if letterboxes is not None else None
        if letterbox is not None:
            boxes = letterbox.to_original(boxes)
        if nms_kind == "default":
            keep = batched_nms(boxes, score, class_index, nms_thres)
        else:
            beta = beta_nms if nms_kind == "diounms" else 0.6
            size = (letterbox.orig_w, letterbox.orig_h) if letterbox is not None else (1.0, 1.0)
            relative = boxes / boxes.new_tensor(size * 2)
            keep = diou_nms(relative, score, class_index, nms_thres, beta)
        if max_det is not None:
            keep = keep[:max_det]
        boxes, score, class_index = boxes[keep], score[keep], class_index[keep]
        if letterbox is not None:
            boxes = clip_xyxy(boxes, letterbox.orig_w, letterbox.orig_h)
        results.append(torch.cat((boxes, score[:, None], class_index[:, None].float()), 1))
    return results
