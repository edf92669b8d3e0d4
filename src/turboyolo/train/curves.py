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
to the image for ground truth, as the evaluation holds them. The matching is :mod:`turboyolo.train.ap`'s
(COCO's, vectorised; IoU in pycocotools' arithmetic).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.train.ap import (
    RECALL_POINTS,
    Pooled,
    class_score_order,
    effective_thresholds,
    greedy_match,
    group_order,
    interpolated_precision,
    match,
    overlapping_pairs,
    pool,
)

CONFIDENCE_POINTS = 1000


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
    return pooled_matches(pool(detections, labels, image_hw, num_classes), iou_thres)


def pooled_matches(pooled: Pooled, iou_thres: float = 0.5,
                   true_positive: np.ndarray | None = None) -> Matches:
    """:func:`match_detections` of detections and labels already pooled (:func:`turboyolo.train.ap.pool`);
    ``true_positive``: the verdicts when a caller matched them already."""
    if true_positive is None:
        true_positive = match(pooled, [iou_thres])[0][0] >= 0
    return Matches(scores=pooled.det_scores, classes=pooled.det_classes, true_positive=true_positive,
                   gt_per_class=pooled.gt_per_class, iou_thres=iou_thres)


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


def _score_order(scores: np.ndarray) -> np.ndarray:
    return np.argsort(-scores, kind="mergesort")  # COCO's stable order: equal scores keep input order


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
    by_class = class_score_order(matches.classes, matches.scores)
    bounds = np.searchsorted(matches.classes[by_class], np.arange(size + 1))
    for cls in np.flatnonzero(matches.gt_per_class):
        members = by_class[bounds[cls] : bounds[cls + 1]]
        gt = int(matches.gt_per_class[cls])
        scores = matches.scores[members]
        true_pos = np.cumsum(matches.true_positive[members])
        found = _above(scores, true_pos, grid)
        kept = _above(scores, np.arange(1, len(scores) + 1), grid)
        precision[cls] = np.divide(found, kept, out=np.zeros(points), where=kept > 0)
        recall[cls] = found / gt
        pr[cls] = interpolated_precision(matches.true_positive[members][None], gt)[0]
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
    return pooled_confusion(pool(detections, labels, image_hw, num_classes), conf_thres, iou_thres)


def pooled_confusion(pooled: Pooled, conf_thres: float = 0.25, iou_thres: float = 0.5) -> np.ndarray:
    """:func:`confusion_matrix` of detections and labels already pooled (:func:`turboyolo.train.ap.pool`)."""
    size = pooled.num_classes
    above = pooled.select(pooled.det_scores >= conf_thres)
    threshold = effective_thresholds([iou_thres])
    taken = np.zeros((1, len(above.gt_classes)), bool)
    det_to_gt, _ = match(above, threshold, taken=taken)
    left = det_to_gt[0] < 0
    # the detections left take, by score within their image, the free box of another class
    _, rank = group_order(above.det_image, above.det_scores)
    def wanted(det: np.ndarray, gt: np.ndarray) -> np.ndarray:
        return left[det] & ~taken[0, gt] & (above.det_classes[det] != above.gt_classes[gt])

    pairs = overlapping_pairs(above.det_image, above.gt_image, above.det_xywh, above.gt_xywh, threshold[0],
                              wanted)
    crossed = greedy_match(rank, above.det_image, pairs, threshold, len(rank), taken)
    det_to_gt = np.where(left, crossed[0], det_to_gt[0])
    truth = np.full(len(det_to_gt), size)  # background where a detection took nothing
    truth[det_to_gt >= 0] = above.gt_classes[det_to_gt[det_to_gt >= 0]]
    missed = above.gt_classes[~taken[0]]
    rows = np.concatenate([above.det_classes, np.full(len(missed), size)])
    columns = np.concatenate([truth, missed])
    counts = np.bincount(rows * (size + 1) + columns, minlength=(size + 1) ** 2)
    return counts.reshape(size + 1, size + 1).astype(np.int64)
