"""Raw head outputs -> detections: decode, confidence filter, per-class NMS, rescale, clip.

Darknet semantics by default: a (box, class) pair is a detection when the objectness and
objectness x class probability both exceed ``conf_thres`` (multi-label); NMS runs per class on the
unclipped boxes in original-image pixels; boxes are clipped to the image last. The NMS is the cfg's
(``nms_kind`` of the last ``[yolo]``, as Darknet's detector reads it): plain IoU by default, DIoU-NMS
for ``greedynms`` (exponent 0.6) and ``diounms`` (exponent ``beta_nms``).

Two caps bound the cost of an image full of candidates (a model early in training puts a box of every
class on every anchor): NMS examines at most ``max_candidates`` boxes per image, the best-scoring first,
and keeps at most ``max_det``. The plain NMS works through the candidates in score order, a block at a
time, and stops once ``max_det`` are kept: greedy NMS decides a box from the better-scoring boxes alone,
so stopping there changes nothing, and an image with many candidates costs a few blocks, not the
quadratic NMS of all of them. :class:`CapCounts` counts the images where a cap changed the output.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch
from torchvision.ops import box_iou, nms

from turboyolo.boxes import Letterbox, clip_xyxy, cxcywh_to_xyxy, pairwise_diou
from turboyolo.options import MAX_CANDIDATES, MAX_DET

MIN_BLOCK = 64  # candidates in the first block of the plain NMS (max_det if more); each next one doubles


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

    On the CPU on one intra-op thread, as :func:`postprocess` (:func:`one_thread`).
    """
    decoded = []
    with one_thread(raw_outputs[0].device):
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


@dataclass
class CapCounts:
    """How often :func:`postprocess`'s caps changed its output, summed over its calls (one evaluation).

    ``max_det``: images where NMS reached ``max_det`` detections with candidates left (lower-scoring
    detections dropped). ``candidates``: images with more than ``max_candidates`` candidates where NMS
    kept fewer than ``max_det`` of the best ``max_candidates``: only there can the pre-NMS cap change the
    output. ``most_candidates``: the most candidates one image had (boxes x classes over the threshold).
    """

    images: int = 0
    max_det: int = 0
    candidates: int = 0
    most_candidates: int = 0
    max_det_cap: int | None = MAX_DET
    max_candidates_cap: int | None = MAX_CANDIDATES

    def count(self, candidates: int, reached_max_det: bool, capped: bool) -> None:
        self.images += 1
        self.max_det += reached_max_det
        self.candidates += capped
        self.most_candidates = max(self.most_candidates, candidates)

    def summary(self) -> str:
        """One line naming each cap that bit and on how many images ('' when none did)."""
        parts = []
        if self.max_det:
            parts.append(f"{self.max_det_cap} detections (--max-det) reached on {self.max_det} of "
                         f"{self.images} images, lower-scoring ones dropped")
        if self.candidates:
            parts.append(f"candidates cut to the best {self.max_candidates_cap} (--max-candidates) before "
                         f"NMS on {self.candidates} images (up to {self.most_candidates} per image)")
        return f"caps: {'; '.join(parts)}" if parts else ""


def class_offset_boxes(boxes: torch.Tensor, classes: torch.Tensor,
                       span: torch.Tensor | None = None) -> torch.Tensor:
    """``boxes`` (float64) moved by class so that boxes of two classes never overlap: one NMS call is then
    per-class NMS for any box count (torchvision's ``batched_nms`` loops over the classes above a
    count). ``span``: more than the extent of every coordinate (negative ones too) of all the boxes that
    will be compared (default: these boxes'); float64 keeps the IoUs those of the float32 boxes (float32
    on MPS, which has no float64)."""
    boxes = boxes.to(wide(boxes))
    if span is None:
        span = boxes.max() - boxes.min() + 1 if len(boxes) else boxes.new_tensor(1.0)
    return boxes + classes.to(boxes.dtype)[:, None] * span


def wide(tensor: torch.Tensor) -> torch.dtype:
    """float64, where the device has it."""
    return torch.float32 if tensor.device.type == "mps" else torch.float64


def best_first(scores: torch.Tensor, count: int) -> torch.Tensor:
    """Indices of the ``count`` best ``scores``, best first, equal scores in input order (a stable sort
    of the scores, cut), sorting only the scores at or above the ``count``-th best."""
    if count >= len(scores):
        return scores.argsort(descending=True, stable=True)
    chosen = (scores >= scores.topk(count).values[-1]).nonzero().flatten()
    return chosen[scores[chosen].argsort(descending=True, stable=True)][:count]


def capped_nms(
    boxes: torch.Tensor,
    scores: torch.Tensor,
    classes: torch.Tensor,
    iou_thres: float,
    max_det: int | None = MAX_DET,
    max_candidates: int | None = MAX_CANDIDATES,
) -> tuple[torch.Tensor, bool, bool]:
    """Per-class NMS (``torchvision.ops.batched_nms``'s result) under the two caps.

    Returns the kept indices, best score first (ties in input order), and whether ``max_det`` and
    ``max_candidates`` changed the result (see :class:`CapCounts`). Blocks of candidates in score order,
    each twice the last: the boxes of a block that a kept box suppresses go, the rest get NMS among
    themselves.
    """
    total = len(scores)
    limit = total if max_candidates is None else min(total, max_candidates)
    block = limit if max_det is None else max(max_det, MIN_BLOCK)
    order = scores.new_zeros(0, dtype=torch.long)
    span = boxes.max().to(wide(boxes)) - boxes.min().to(wide(boxes)) + 1 if total else None
    kept: list[torch.Tensor] = []
    found = examined = 0
    while examined < limit:
        if examined + block > len(order):
            order = best_first(scores, min(examined + block, limit))
        index = order[examined : examined + block]
        examined, block = examined + len(index), 2 * block
        shifted = class_offset_boxes(boxes[index], classes[index], span)
        if kept:
            prior = torch.cat(kept)
            near = box_iou(shifted, class_offset_boxes(boxes[prior], classes[prior], span)) > iou_thres
            index, shifted = index[~near.any(1)], shifted[~near.any(1)]
        kept.append(index[nms(shifted, scores[index].to(shifted.dtype), iou_thres)])
        found += len(kept[-1])
        if max_det is not None and found >= max_det:
            break
    keep = torch.cat(kept) if kept else order
    full = max_det is not None and found >= max_det
    return keep[:max_det], full and (found > max_det or examined < total), examined < total and not full


def postprocess(
    decoded: torch.Tensor,
    conf_thres: float = 0.25,
    nms_thres: float = 0.45,
    *,
    multi_label: bool = True,
    max_det: int | None = MAX_DET,
    max_candidates: int | None = MAX_CANDIDATES,
    classes: Sequence[int] | None = None,
    letterboxes: Sequence[Letterbox] | None = None,
    nms_kind: str = "default",
    beta_nms: float = 0.6,
    caps: CapCounts | None = None,
) -> list[torch.Tensor]:
    """Per image ``[n, 6]`` = (x1, y1, x2, y2, score, class), sorted by score.

    Boxes are in input pixels, or in original pixels (clipped) when ``letterboxes`` are given.
    ``multi_label=False`` keeps only the best class of each box (what auto-labelling wants).
    ``nms_kind``/``beta_nms``: the cfg's (:func:`nms_options`); DIoU-NMS measures distances relative
    to the original image's size when ``letterboxes`` are given, as Darknet does. ``max_det`` and
    ``max_candidates``: the caps (``None``: none); ``caps`` counts where they changed the output. On the
    CPU on one intra-op thread (:func:`one_thread`).
    """
    if caps is not None:
        caps.max_det_cap, caps.max_candidates_cap = max_det, max_candidates
    settings = dict(conf_thres=conf_thres, nms_thres=nms_thres, multi_label=multi_label, max_det=max_det,
                    max_candidates=max_candidates, classes=classes, nms_kind=nms_kind, beta_nms=beta_nms)
    with one_thread(decoded.device):
        return [_one_image(image, letterboxes[index] if letterboxes is not None else None, caps, **settings)
                for index, image in enumerate(decoded)]


@contextmanager
def one_thread(device: torch.device) -> Iterator[None]:
    """One intra-op thread on the CPU: decode and NMS are small operations, where a second thread mostly
    waits at each one's barrier (on a busy machine, for its turn on a core)."""
    threads = torch.get_num_threads()
    if device.type != "cpu" or threads == 1:
        yield
        return
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _one_image(image: torch.Tensor, letterbox: Letterbox | None, caps: CapCounts | None, *, conf_thres: float,
               nms_thres: float, multi_label: bool, max_det: int | None, max_candidates: int | None,
               classes: Sequence[int] | None, nms_kind: str, beta_nms: float) -> torch.Tensor:
    """:func:`postprocess` of one image's decoded rows."""
    boxes, score, class_index = _candidates(image, conf_thres, multi_label, classes)
    if letterbox is not None:
        boxes = letterbox.to_original(boxes)
    if nms_kind == "default":
        keep, reached, capped = capped_nms(boxes, score, class_index, nms_thres, max_det, max_candidates)
    else:
        beta = beta_nms if nms_kind == "diounms" else 0.6
        size = (letterbox.orig_w, letterbox.orig_h) if letterbox is not None else (1.0, 1.0)
        best = score.argsort(descending=True, stable=True)[:max_candidates]
        relative = boxes[best] / boxes.new_tensor(size * 2)
        keep = best[diou_nms(relative, score[best], class_index[best], nms_thres, beta)]
        reached = max_det is not None and len(keep) > max_det
        capped = len(best) < len(score) and (max_det is None or len(keep) < max_det)
        keep = keep[:max_det]
    if caps is not None:
        caps.count(len(score), reached, capped)
    boxes, score, class_index = boxes[keep], score[keep], class_index[keep]
    if letterbox is not None:
        boxes = clip_xyxy(boxes, letterbox.orig_w, letterbox.orig_h)
    return torch.cat((boxes, score[:, None], class_index[:, None].float()), 1)


def _candidates(image: torch.Tensor, conf_thres: float, multi_label: bool, classes: Sequence[int] | None):
    """One image's (box xyxy, score, class) pairs over the confidence rule and the class filter."""
    image = image[image[:, 4] > conf_thres]
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
    return boxes, score, class_index
