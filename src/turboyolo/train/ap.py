"""COCO's box evaluation in numpy, vectorised: the matching of pycocotools' ``evaluateImg`` and the
101-point AP of its ``accumulate``, on arrays (no result dicts) and at every IoU threshold at once.

What pycocotools does, and what is done here the same way (area range "all", no crowd boxes: YOLO
labels have neither):

- IoU in its arithmetic (``maskApi.c`` ``bbIou``) on (x, y, w, h) boxes in pixels, ground truth made
  from the YOLO labels as :func:`turboyolo.train.metrics.yolo_to_coco_gt` makes it;
- per image and class, the best ``max_det`` detections by score (ties: input order) are evaluated, the
  rest are not seen at all;
- detections in score order each take the not yet taken ground-truth box of their image and class
  with the highest IoU ``>= t`` (``t`` capped at ``1 - 1e-10``; on equal IoU the later box);
- per class, detections pooled in score order (ties: image order, then input order), precision
  ``tp / (tp + fp + eps)`` made monotone from the right and read at the 101 recall points; AP is their
  mean, 0 for a class with ground truth and no detection, undefined (NaN) without ground truth.

The greedy matching is sequential only within one image and class: all of them advance together, one
detection each per round, and only detections that overlap a box of their class enough to match
anything take part. Its cost grows with the detections and their overlapping pairs, not with the
images.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

IOU_THRESHOLDS = np.linspace(0.5, 0.95, 10)  # COCO's, as pycocotools builds them
RECALL_POINTS = np.linspace(0.0, 1.0, 101)  # COCO's recall thresholds
PAIR_BLOCK = 4_000_000  # (detection, box) pairs whose IoU is computed at once (memory, not speed)


@dataclass
class Pooled:
    """Every detection and ground-truth box of an evaluation in flat arrays, images in order.

    Boxes are COCO's (x, y, w, h) in float64 pixels; classes are int64 indices; ``*_image`` the image's
    position. Ground-truth boxes of a class outside ``0..num_classes-1`` are left out.
    """

    det_image: np.ndarray
    det_xywh: np.ndarray
    det_scores: np.ndarray
    det_classes: np.ndarray
    gt_image: np.ndarray
    gt_xywh: np.ndarray
    gt_classes: np.ndarray
    num_classes: int
    num_images: int

    @property
    def gt_per_class(self) -> np.ndarray:
        return np.bincount(self.gt_classes, minlength=self.num_classes)[: self.num_classes]

    def select(self, chosen: np.ndarray) -> Pooled:
        """The same ground truth with the detections where ``chosen`` (bool ``[D]``) holds."""
        return Pooled(self.det_image[chosen], self.det_xywh[chosen], self.det_scores[chosen],
                      self.det_classes[chosen], self.gt_image, self.gt_xywh, self.gt_classes,
                      self.num_classes, self.num_images)


def pool(
    detections: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    image_hw: Sequence[tuple[int, int]],
    num_classes: int,
) -> Pooled:
    """Pool per-image detections ``[n, 6]`` (x1, y1, x2, y2, score, class; original pixels) and YOLO
    labels ``[m, 5]`` (class, cx, cy, w, h relative) of images of size (height, width)."""
    if not len(detections) == len(labels) == len(image_hw):
        raise ValueError(f"{len(detections)} images of detections, {len(labels)} of labels and "
                         f"{len(image_hw)} sizes: one of each per image")
    dets = [np.asarray(d, np.float64).reshape(-1, 6) for d in detections]
    gts = [np.asarray(g, np.float64).reshape(-1, 5) for g in labels]
    det = np.concatenate(dets) if dets else np.zeros((0, 6))
    gt = np.concatenate(gts) if gts else np.zeros((0, 5))
    hw = np.asarray(image_hw, np.float64).reshape(-1, 2)
    gt_image = np.repeat(np.arange(len(gts)), [len(g) for g in gts])
    height, width = hw[gt_image, 0], hw[gt_image, 1]
    bw, bh = gt[:, 3] * width, gt[:, 4] * height  # yolo_to_coco_gt's arithmetic, element by element
    gt_xywh = np.stack([gt[:, 1] * width - bw / 2, gt[:, 2] * height - bh / 2, bw, bh], 1)
    gt_classes = gt[:, 0].astype(np.int64)
    known = (gt_classes >= 0) & (gt_classes < num_classes)
    det_xywh = np.concatenate([det[:, :2], det[:, 2:4] - det[:, :2]], 1)
    return Pooled(
        det_image=np.repeat(np.arange(len(dets)), [len(d) for d in dets]),
        det_xywh=det_xywh, det_scores=det[:, 4], det_classes=det[:, 5].astype(np.int64),
        gt_image=gt_image[known], gt_xywh=gt_xywh[known], gt_classes=gt_classes[known],
        num_classes=num_classes, num_images=len(dets),
    )


def coco_iou(det_xywh: np.ndarray, gt_xywh: np.ndarray) -> np.ndarray:
    """IoU of each row of ``det_xywh`` with the same row of ``gt_xywh`` (``[P, 4]`` each), in pycocotools'
    arithmetic (``bbIou``): the same doubles, so ties at a threshold fall the same way."""
    dx, dy, dw, dh = det_xywh.T
    gx, gy, gw, gh = gt_xywh.T
    w = np.minimum(dw + dx, gw + gx) - np.maximum(dx, gx)
    h = np.minimum(dh + dy, gh + gy) - np.maximum(dy, gy)
    inter = np.where((w > 0) & (h > 0), w * h, 0.0)
    union = dw * dh + gw * gh - inter
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(inter > 0, inter / union, 0.0)


def effective_thresholds(thresholds: Sequence[float]) -> np.ndarray:
    """COCO caps a threshold at ``1 - 1e-10`` (1.0 means "identical")."""
    return np.minimum(np.asarray(thresholds, np.float64), 1 - 1e-10)


def group_order(keys: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The detections sorted by group key, then score (best first), then input position; and each
    detection's rank within its group. Detections that come best first within each group already (a
    detector's output, image by image) take one stable sort by key."""
    order = np.argsort(keys, kind="stable")
    sorted_keys, sorted_scores = keys[order], scores[order]
    same = sorted_keys[1:] == sorted_keys[:-1]
    if not np.all(sorted_scores[1:][same] <= sorted_scores[:-1][same]):
        order = np.lexsort((np.arange(len(keys)), -scores, keys))
        sorted_keys = keys[order]
        same = sorted_keys[1:] == sorted_keys[:-1]
    first = np.flatnonzero(np.r_[True, ~same]) if len(keys) else np.zeros(0, np.int64)
    starts = np.repeat(first, np.diff(np.r_[first, len(keys)]))
    rank = np.empty(len(keys), np.int64)
    rank[order] = np.arange(len(keys)) - starts
    return order, rank


def class_score_order(classes: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Indices sorted by class, then score (best first), then input position (COCO's pooled order per
    class). Two stable sorts; the class sort on the smallest integer type, which numpy radix-sorts."""
    by_score = np.argsort(-scores, kind="stable")
    small = np.uint16 if len(classes) and classes.max() < 2**16 and classes.min() >= 0 else np.int64
    return by_score[np.argsort(classes[by_score].astype(small), kind="stable")]


def overlapping_pairs(det_keys: np.ndarray, gt_keys: np.ndarray, det_xywh: np.ndarray, gt_xywh: np.ndarray,
                      threshold: float, wanted=None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(det, gt, iou)`` of every detection and ground-truth box with the same key and IoU ``>=
    threshold``, by detection then box index. ``wanted(det, gt)`` (bool arrays) may drop pairs before
    their IoU is computed."""
    gt_order = np.argsort(gt_keys, kind="stable")
    sorted_gt = gt_keys[gt_order]
    start = np.searchsorted(sorted_gt, det_keys, "left")
    count = np.searchsorted(sorted_gt, det_keys, "right") - start
    out = ([], [], [])
    candidates = np.flatnonzero(count)
    bounds = np.cumsum(count[candidates])
    cuts = np.searchsorted(bounds, np.arange(PAIR_BLOCK, bounds[-1] if len(bounds) else 0, PAIR_BLOCK))
    for block in np.split(candidates, cuts):
        n = count[block]
        det = np.repeat(block, n)
        within = np.arange(len(det)) - np.repeat(np.cumsum(n) - n, n)
        gt = gt_order[np.repeat(start[block], n) + within]
        if wanted is not None:
            keep = wanted(det, gt)
            det, gt = det[keep], gt[keep]
        iou = coco_iou(det_xywh[det], gt_xywh[gt])
        near = iou >= threshold
        for store, values in zip(out, (det[near], gt[near], iou[near])):
            store.append(values)
    return tuple(np.concatenate(v) if v else np.zeros(0, t) for v, t in zip(out, (np.int64, np.int64, float)))


def greedy_match(rank: np.ndarray, keys: np.ndarray, pairs: tuple[np.ndarray, np.ndarray, np.ndarray],
                 thresholds: np.ndarray, num_dets: int, taken: np.ndarray) -> np.ndarray:
    """COCO's greedy matching at every threshold: int32 ``[T, D]`` ground-truth index per detection (-1:
    none).

    Within each group (``keys``: detections that compete for the same boxes; two groups never share a
    box) detections go in ``rank`` order and take the free box of the highest IoU ``>= threshold``
    among their ``pairs`` (sorted by detection, then box; on equal IoU the later box). ``taken``
    (bool ``[T, G]``) starts with the boxes already taken and is updated.
    """
    det_to_gt = np.full((len(thresholds), num_dets), -1, np.int32)
    pair_det, pair_gt, pair_iou = pairs
    if not len(pair_det):
        return det_to_gt
    dets = np.flatnonzero(np.bincount(pair_det, minlength=num_dets))
    _, round_of = group_order(keys[dets], -rank[dets].astype(np.float64))  # compact rank among them
    pair_round = round_of[np.searchsorted(dets, pair_det)]
    order = np.lexsort((pair_gt, pair_det, pair_round))
    pair_det, pair_gt, pair_iou, pair_round = (a[order] for a in (pair_det, pair_gt, pair_iou, pair_round))
    edges = np.searchsorted(pair_round, np.arange(pair_round[-1] + 2))
    for lo, hi in zip(edges[:-1], edges[1:]):
        det, gt, iou = pair_det[lo:hi], pair_gt[lo:hi], pair_iou[lo:hi]
        first = np.flatnonzero(np.r_[True, det[1:] != det[:-1]])
        ok = ~taken[:, gt] & (iou >= thresholds[:, None])  # [T, P]
        value = np.where(ok, iou, -1.0)
        best = np.repeat(np.maximum.reduceat(value, first, axis=1), np.diff(np.r_[first, len(det)]), axis=1)
        position = np.where(ok & (value == best), np.arange(len(det)), -1)
        chosen = np.maximum.reduceat(position, first, axis=1)  # [T, detections of the round]
        t, d = np.nonzero(chosen >= 0)
        taken[t, gt[chosen[t, d]]] = True
        det_to_gt[t, det[first[d]]] = gt[chosen[t, d]]
    return det_to_gt


def match(pooled: Pooled, thresholds: Sequence[float] = IOU_THRESHOLDS, max_det: int | None = None,
          taken: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """COCO's matching within each image and class: ``(det_to_gt int32 [T, D], evaluated bool [D])``.

    ``evaluated``: the detection is among the best ``max_det`` of its image and class (all when
    ``None``); the others match nothing and are not scored. ``taken`` (bool ``[T, G]``, updated): the
    boxes taken, when the caller wants them.
    """
    thresholds = effective_thresholds(thresholds)
    classes = pooled.num_classes
    det_keys = pooled.det_image * classes + pooled.det_classes
    gt_keys = pooled.gt_image * classes + pooled.gt_classes
    _, rank = group_order(det_keys, pooled.det_scores)
    evaluated = np.ones(len(rank), bool) if max_det is None else rank < max_det
    inside = np.flatnonzero(evaluated)
    det, gt, iou = overlapping_pairs(det_keys[inside], gt_keys, pooled.det_xywh[inside], pooled.gt_xywh,
                                     thresholds.min())
    taken = np.zeros((len(thresholds), len(gt_keys)), bool) if taken is None else taken
    det_to_gt = greedy_match(rank, det_keys, (inside[det], gt, iou), thresholds, len(rank), taken)
    return det_to_gt, evaluated


def average_precision(pooled: Pooled, det_to_gt: np.ndarray, evaluated: np.ndarray) -> np.ndarray:
    """float64 ``[T, C]`` AP per threshold and class (COCO's ``accumulate``); NaN without ground truth."""
    gt_counts = pooled.gt_per_class
    chosen = np.flatnonzero(evaluated)
    order = chosen[class_score_order(pooled.det_classes[chosen], pooled.det_scores[chosen])]
    classes = pooled.det_classes[order]
    bounds = np.searchsorted(classes, np.arange(pooled.num_classes + 1))
    ap = np.full((len(det_to_gt), pooled.num_classes), np.nan)
    for cls in range(pooled.num_classes):
        if gt_counts[cls]:
            members = order[bounds[cls] : bounds[cls + 1]]
            ap[:, cls] = interpolated_precision(det_to_gt[:, members] >= 0, gt_counts[cls]).mean(axis=1)
    return ap


def interpolated_precision(true_positive: np.ndarray, num_gt: int) -> np.ndarray:
    """``[T, 101]`` precision at COCO's recall points of detections in score order (bool ``[T, n]``
    verdicts): the monotone envelope of ``tp / (tp + fp + eps)``, 0 past the last recall reached."""
    tp = np.cumsum(true_positive, axis=1).astype(np.float64)
    fp = np.cumsum(~true_positive, axis=1).astype(np.float64)
    recall = tp / num_gt
    precision = tp / (fp + tp + np.spacing(1))
    envelope = np.maximum.accumulate(precision[:, ::-1], axis=1)[:, ::-1]
    out = np.zeros((len(true_positive), len(RECALL_POINTS)))
    for row in range(len(true_positive)):
        index = np.searchsorted(recall[row], RECALL_POINTS, side="left")
        reached = index < envelope.shape[1]
        out[row, reached] = envelope[row, index[reached]]
    return out
