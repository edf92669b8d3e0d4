"""Precision / recall / F1 curves and the confusion matrix, from which detection found which box.

COCO's evaluator (:mod:`turboyolo.train.metrics`) gives AP, but not the per-detection verdicts that the
curves users look at need. This module matches detections to ground truth the way COCO does at one
IoU threshold (greedy by score, per class, each ground-truth box taken once, the highest-IoU free box
first) and derives from the verdicts:

- precision, recall and F1 as functions of the confidence threshold, per class and over all classes,
  on a grid of :data:`CONFIDENCE_POINTS` confidences in [0, 1], and the confidence of the best F1;
- the precision-recall curve per class, interpolated at COCO's 101 recall points (its mean is COCO's
  AP at the same IoU threshold, so the curve and the AP table always agree);
- a ``(C + 1) x (C + 1)`` confusion matrix with a background row and column.

Boxes are ``xyxy`` in original-image pixels for detections and YOLO ``(cls, cx, cy, w, h)`` relative
to the image for ground truth, as the evaluation holds them. IoU is :func:`turboyolo.boxes.box_iou`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.boxes import box_iou

CONFIDENCE_POINTS = 1000
RECALL_POINTS = np.linspace(0.0, 1.0, 101)  # COCO's recall thresholds


@dataclass
class Matches:
    """Every detection's verdict at one IoU threshold, pooled over the images.

    Attributes:
        scores: float64 ``[D]`` detection confidences, in the images' order.
        classes: int64 ``[D]`` predicted classes.
        true_positive: bool ``[D]``: the detection took a ground-truth box of its class.
        gt_per_class: int64 ``[C]`` ground-truth boxes per class.
        iou_thres: the IoU a match needs.
    """

    scores: np.ndarray
    classes: np.ndarray
    true_positive: np.ndarray
    gt_per_class: np.ndarray
    iou_thres: float = 0.5

    @property
    def num_classes(self) -> int:
        return len(self.gt_per_class)


@dataclass
class Curves:
    """Precision / recall / F1 against the confidence threshold, and the interpolated PR curve.

    ``K`` = :data:`CONFIDENCE_POINTS`; ``C`` classes. At a confidence where a class has no detection
    left, its precision is 0 (as :func:`precision_recall_at` reports it). Rows of classes without
    ground truth are 0 (their recall is undefined).

    Attributes:
        confidence: ``[K]`` the thresholds, 0..1.
        precision, recall, f1: ``[C, K]`` per class, detections scoring ``>= confidence``.
        precision_all, recall_all, f1_all: ``[K]`` over all classes pooled (true positives over all
            detections and over all ground truth), the numbers EvalResult's P / R / F1 are.
        recall_points: ``[101]`` COCO's recall thresholds.
        pr: ``[C, 101]`` precision at each recall point (COCO's monotone envelope; 0 past the last
            recall reached).
        best_conf, best_f1, best_precision, best_recall: the grid point of the highest ``f1_all``
            (the highest such confidence on ties: the same F1 with the fewest detections; 0 when F1 is
            0 everywhere) and P / R there.
    """

    confidence: np.ndarray
    precision: np.ndarray
    recall: np.ndarray
    f1: np.ndarray
    precision_all: np.ndarray
    recall_all: np.ndarray
    f1_all: np.ndarray
    recall_points: np.ndarray
    pr: np.ndarray
    best_conf: float
    best_f1: float
    best_precision: float
    best_recall: float

    def ap(self) -> np.ndarray:
        """``[C]`` area under :attr:`pr` as COCO computes it (mean over the 101 recall points)."""
        return self.pr.mean(axis=1)


def labels_to_xyxy(labels: np.ndarray, image_hw: tuple[int, int]) -> np.ndarray:
    """YOLO ``[N, 5]`` (cls, cx, cy, w, h relative) -> float64 ``[N, 4]`` xyxy pixels of an image (h, w)."""
    labels = np.asarray(labels, dtype=np.float64).reshape(-1, 5)
    height, width = image_hw
    cx, cy, w, h = labels[:, 1] * width, labels[:, 2] * height, labels[:, 3] * width, labels[:, 4] * height
    return np.stack([cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2], axis=1)


def _iou(dets_xyxy: np.ndarray, gt_xyxy: np.ndarray) -> np.ndarray:
    """float64 ``[D, G]`` IoU (in float64 so that ties at the threshold match COCO's)."""
    return box_iou(np.asarray(dets_xyxy, np.float64).reshape(-1, 4),
                   np.asarray(gt_xyxy, np.float64).reshape(-1, 4))


def _greedy(iou: np.ndarray, allowed: np.ndarray, order: np.ndarray, iou_thres: float,
            gt_taken: np.ndarray, det_to_gt: np.ndarray) -> None:
    """COCO's matching: detections in ``order`` each take the free, allowed box of highest IoU.

    ``iou``/``allowed`` are ``[D, G]``; ``gt_taken`` ``[G]`` bool and ``det_to_gt`` ``[D]`` (-1 = none)
    are updated in place. A match needs ``IoU >= iou_thres`` (COCO caps the threshold at 1 - 1e-10 so
    that 1.0 means "identical"); on equal IoU the later box wins, as in COCO's loop.
    """
    threshold = min(iou_thres, 1 - 1e-10)
    candidates = allowed & (iou >= threshold)
    for det in order:
        if det_to_gt[det] >= 0 or not candidates[det].any():
            continue
        free = np.flatnonzero(candidates[det] & ~gt_taken)
        if not len(free):
            continue
        ious = iou[det, free]
        best = free[len(free) - 1 - int(np.argmax(ious[::-1]))]
        gt_taken[best] = True
        det_to_gt[det] = best


def _score_order(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="mergesort")  # COCO's stable order: equal scores keep input order


def match_detections(
    detections: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    image_hw: Sequence[tuple[int, int]],
    num_classes: int,
    iou_thres: float = 0.5,
) -> Matches:
    """Match every detection of every image to the ground truth of its class (COCO's rule).

    Args:
        detections: per image, ``[n, 6]`` (x1, y1, x2, y2, score, class) in original pixels.
        labels: per image, ``[m, 5]`` (class, cx, cy, w, h) relative to the image.
        image_hw: per image, its (height, width).
        num_classes: classes 0..num_classes-1.
        iou_thres: IoU a detection needs with a box of its class to take it.

    Detections are taken by score (highest first) within each image; each takes the not yet taken box
    of its class with the highest IoU ``>= iou_thres``. At IoU 0.5 this is the matching behind
    pycocotools' AP@0.5 (crowd boxes and area ranges aside, which YOLO labels do not have); detections
    are assumed capped per image as the evaluator's ``max_det`` caps them.
    """
    scores, classes, verdicts = [], [], []
    gt_counts = np.zeros(num_classes, np.int64)
    for dets, boxes, hw in zip(detections, labels, image_hw, strict=True):
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 5)
        gt_classes = boxes[:, 0].astype(np.int64)
        gt_counts += np.bincount(gt_classes, minlength=num_classes)[:num_classes]
        det_classes = dets[:, 5].astype(np.int64)
        det_to_gt = np.full(len(dets), -1)
        if len(dets) and len(boxes):
            iou = _iou(dets[:, :4], labels_to_xyxy(boxes, hw))
            same_class = det_classes[:, None] == gt_classes[None, :]
            _greedy(iou, same_class, _score_order(dets[:, 4]), iou_thres, np.zeros(len(boxes), bool),
                    det_to_gt)
        scores.append(dets[:, 4])
        classes.append(det_classes)
        verdicts.append(det_to_gt >= 0)
    return Matches(
        scores=np.concatenate(scores) if scores else np.zeros(0),
        classes=np.concatenate(classes) if classes else np.zeros(0, np.int64),
        true_positive=np.concatenate(verdicts) if verdicts else np.zeros(0, bool),
        gt_per_class=gt_counts,
        iou_thres=iou_thres,
    )


def counts_at(matches: Matches, conf: float) -> tuple[np.ndarray, np.ndarray]:
    """``(true positives [C], detections [C])`` among the detections scoring ``>= conf``."""
    kept = matches.scores >= conf
    size = matches.num_classes
    classes = matches.classes[kept]
    detections = np.bincount(classes, minlength=size)[:size]
    true_pos = np.bincount(classes[matches.true_positive[kept]], minlength=size)[:size]
    return true_pos, detections


def precision_recall_at(matches: Matches, conf: float) -> tuple[float, float]:
    """Precision and recall over all classes at ``conf`` (0 precision when nothing scores that high)."""
    true_pos, detections = counts_at(matches, conf)
    return (
        float(true_pos.sum() / max(int(detections.sum()), 1)),
        float(true_pos.sum() / max(int(matches.gt_per_class.sum()), 1)),
    )


def f1_score(precision, recall):
    """Elementwise ``2PR / (P + R)``, 0 where both are 0 (floats or arrays)."""
    p, r = np.asarray(precision, np.float64), np.asarray(recall, np.float64)
    total = p + r
    out = np.divide(2 * p * r, total, out=np.zeros_like(total), where=total > 0)
    return float(out) if out.ndim == 0 else out


def _above(sorted_desc: np.ndarray, cumulative: np.ndarray, grid: np.ndarray) -> np.ndarray:
    """For each grid value, ``cumulative`` at the count of ``sorted_desc`` scores ``>= value``."""
    count = np.searchsorted(-sorted_desc, -grid, side="right")
    return np.concatenate([[0], cumulative])[count]


def curves(matches: Matches, points: int = CONFIDENCE_POINTS) -> Curves:
    """P / R / F1 against the confidence (per class and pooled) and the PR curve per class."""
    grid = np.linspace(0.0, 1.0, points)
    size = matches.num_classes
    precision, recall = np.zeros((size, points)), np.zeros((size, points))
    pr = np.zeros((size, len(RECALL_POINTS)))
    for cls in range(size):
        chosen = matches.classes == cls
        gt = int(matches.gt_per_class[cls])
        if not gt:
            continue
        order = _score_order(matches.scores[chosen])
        scores = matches.scores[chosen][order]
        true_pos = np.cumsum(matches.true_positive[chosen][order])
        found = _above(scores, true_pos, grid)
        kept = _above(scores, np.arange(1, len(scores) + 1), grid)
        precision[cls] = np.divide(found, kept, out=np.zeros(points), where=kept > 0)
        recall[cls] = found / gt
        pr[cls] = _interpolated_pr(true_pos, gt)
    order = _score_order(matches.scores)
    scores = matches.scores[order]
    found = _above(scores, np.cumsum(matches.true_positive[order]), grid)
    kept = _above(scores, np.arange(1, len(scores) + 1), grid)
    precision_all = np.divide(found, kept, out=np.zeros(points), where=kept > 0)
    recall_all = found / max(int(matches.gt_per_class.sum()), 1)
    f1_all = f1_score(precision_all, recall_all)
    best = points - 1 - int(np.argmax(f1_all[::-1]))  # ties: the highest confidence, fewest detections
    if f1_all[best] == 0:
        best = 0  # nothing found at any confidence: no threshold is better than keeping everything
    return Curves(
        confidence=grid,
        precision=precision,
        recall=recall,
        f1=f1_score(precision, recall),
        precision_all=precision_all,
        recall_all=recall_all,
        f1_all=f1_all,
        recall_points=RECALL_POINTS.copy(),
        pr=pr,
        best_conf=float(grid[best]),
        best_f1=float(f1_all[best]),
        best_precision=float(precision_all[best]),
        best_recall=float(recall_all[best]),
    )


def _interpolated_pr(true_pos_cumulative: np.ndarray, num_gt: int) -> np.ndarray:
    """COCO's ``accumulate`` for one class: precision envelope read at the 101 recall points."""
    ranks = np.arange(1, len(true_pos_cumulative) + 1)
    recall = true_pos_cumulative / num_gt
    precision = true_pos_cumulative / ranks
    envelope = np.maximum.accumulate(precision[::-1])[::-1] if len(precision) else precision
    index = np.searchsorted(recall, RECALL_POINTS, side="left")
    out = np.zeros(len(RECALL_POINTS))
    reached = index < len(envelope)
    out[reached] = envelope[index[reached]]
    return out


def confusion_matrix(
    detections: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    image_hw: Sequence[tuple[int, int]],
    num_classes: int,
    conf_thres: float = 0.25,
    iou_thres: float = 0.5,
) -> np.ndarray:
    """``int64 [C + 1, C + 1]`` counts: row = predicted class, column = true class, index C = background.

    Only detections scoring ``>= conf_thres`` count. Per image, detections first take boxes of their
    own class exactly as :func:`match_detections` does (so the diagonal holds the true positives behind
    the precision and recall at ``conf_thres``); the detections left then take, by score, the free box
    of another class with the highest IoU ``>= iou_thres`` (a class confusion). Detections still
    unmatched count in (predicted class, background); boxes nobody took in (background, true class).
    The background-background cell stays 0.

    Args and box formats as :func:`match_detections`.
    """
    background = num_classes
    matrix = np.zeros((num_classes + 1, num_classes + 1), np.int64)
    for dets, boxes, hw in zip(detections, labels, image_hw, strict=True):
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        dets = dets[dets[:, 4] >= conf_thres]
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 5)
        det_classes = dets[:, 5].astype(np.int64)
        gt_classes = boxes[:, 0].astype(np.int64)
        det_to_gt = np.full(len(dets), -1)
        gt_taken = np.zeros(len(boxes), bool)
        if len(dets) and len(boxes):
            iou = _iou(dets[:, :4], labels_to_xyxy(boxes, hw))
            order = _score_order(dets[:, 4])
            same_class = det_classes[:, None] == gt_classes[None, :]
            _greedy(iou, same_class, order, iou_thres, gt_taken, det_to_gt)
            _greedy(iou, ~same_class, order, iou_thres, gt_taken, det_to_gt)
        matched = det_to_gt >= 0
        np.add.at(matrix, (det_classes[matched], gt_classes[det_to_gt[matched]]), 1)
        np.add.at(matrix, (det_classes[~matched], background), 1)
        np.add.at(matrix, (background, gt_classes[~gt_taken]), 1)
    return matrix
