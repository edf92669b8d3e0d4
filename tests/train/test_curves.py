"""Per-detection matching, P/R/F1 curves and the confusion matrix: hand-built cases and pycocotools."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

from turboyolo.train.curves import (
    confusion_matrix,
    counts_at,
    curves,
    match_detections,
    precision_recall_at,
)
from turboyolo.train.metrics import coco_evaluate, detections_to_coco, yolo_to_coco_gt

# One 100 x 100 image, classes 0 (cat) and 1 (dog). Ground truth, pixels:
#   A cat (10..30, 10..30)   B dog (50..70, 50..70)   C cat (70..90, 10..30)   D dog (10..30, 60..80)
GT = [np.array([
    [0, 0.2, 0.2, 0.2, 0.2],
    [1, 0.6, 0.6, 0.2, 0.2],
    [0, 0.8, 0.2, 0.2, 0.2],
    [1, 0.2, 0.7, 0.2, 0.2],
])]
HW = [(100, 100)]
DETS = [np.array([
    [10, 10, 30, 30, 0.90, 0],  # d1 cat on A                                  -> (cat, cat)
    [11, 11, 31, 31, 0.85, 0],  # d7 a second cat on A (IoU 0.82), A is taken  -> (cat, background)
    [50, 50, 70, 70, 0.80, 0],  # d2 cat on dog B; the dog d3 takes B first     -> (cat, background)
    [70, 10, 90, 30, 0.70, 1],  # d4 dog on cat C, no dog there                 -> (dog, cat)
    [51, 51, 71, 71, 0.60, 1],  # d3 dog on B (IoU 0.82)                        -> (dog, dog)
    [40, 40, 45, 45, 0.50, 1],  # d5 dog on nothing                             -> (dog, background)
    [10, 60, 30, 80, 0.10, 1],  # d6 dog on D, below conf 0.25: D is missed     -> (background, dog)
])]
# rows predicted (cat, dog, background), columns true (cat, dog, background)
EXPECTED = np.array([
    [1, 0, 2],
    [1, 1, 1],
    [0, 1, 0],
])


def test_confusion_matrix_of_a_hand_built_case():
    matrix = confusion_matrix(DETS, GT, HW, num_classes=2, conf_thres=0.25, iou_thres=0.5)
    np.testing.assert_array_equal(matrix, EXPECTED)
    # the diagonal is the true positives behind P and R at the same confidence and IoU
    matches = match_detections(DETS, GT, HW, num_classes=2, iou_thres=0.5)
    true_pos, kept = counts_at(matches, 0.25)
    np.testing.assert_array_equal(np.diag(matrix)[:2], true_pos)
    np.testing.assert_array_equal(matrix[:2].sum(axis=1), kept)  # every kept detection is in its row
    np.testing.assert_array_equal(matrix[:, :2].sum(axis=0), matches.gt_per_class)  # every box in its column
    assert precision_recall_at(matches, 0.25) == pytest.approx((2 / 6, 2 / 4))


def test_confusion_matrix_follows_iou_thres():
    # At IoU 0.9 the dog d3 (IoU 0.82) no longer takes B; the cat d2 (IoU 1) does, as a confusion.
    matrix = confusion_matrix(DETS, GT, HW, num_classes=2, conf_thres=0.25, iou_thres=0.9)
    np.testing.assert_array_equal(matrix, [[1, 1, 1], [1, 0, 2], [0, 1, 0]])
    assert precision_recall_at(match_detections(DETS, GT, HW, 2, iou_thres=0.9), 0.25) == pytest.approx(
        (1 / 6, 1 / 4)
    )


def test_confusion_matrix_counts_d6_once_the_confidence_is_lower():
    matrix = confusion_matrix(DETS, GT, HW, num_classes=2, conf_thres=0.05)
    assert matrix[1, 1] == 2 and matrix[2, 1] == 0


def test_empty_images():
    no_dets = [np.zeros((0, 6))]
    matrix = confusion_matrix(no_dets, GT, HW, num_classes=2)
    np.testing.assert_array_equal(matrix, [[0, 0, 0], [0, 0, 0], [2, 2, 0]])
    matrix = confusion_matrix(DETS, [np.zeros((0, 5))], HW, num_classes=2, conf_thres=0.25)
    np.testing.assert_array_equal(matrix, [[0, 0, 3], [0, 0, 3], [0, 0, 0]])
    result = curves(match_detections(no_dets, GT, HW, 2))
    assert result.best_f1 == 0.0 and result.best_conf == 0.0 and not result.pr.any()
    assert precision_recall_at(match_detections([], [], [], 2), 0.5) == (0.0, 0.0)


def test_curves_by_confidence():
    result = curves(match_detections(DETS, GT, HW, 2))
    assert result.confidence.shape == (1000,) and result.f1.shape == (2, 1000)
    at = int(np.searchsorted(result.confidence, 0.65))  # detections >= 0.65: d1 d7 d2 d4
    assert result.precision_all[at] == pytest.approx(1 / 4) and result.recall_all[at] == pytest.approx(1 / 4)
    assert result.precision[0, at] == pytest.approx(1 / 3)  # cats d1 (TP) d7 d2
    assert result.recall[1, at] == 0.0 and result.precision[1, at] == 0.0  # dog d4 found no dog
    # best F1: all 7 detections find 3 of 4 boxes (d6 finds D): P 3/7, R 3/4, F1 6/11
    assert result.best_f1 == pytest.approx(6 / 11)
    assert result.best_conf <= 0.10 and result.best_conf > 0.09
    assert (result.best_precision, result.best_recall) == pytest.approx((3 / 7, 3 / 4))


def _random_case(seed: int, images: int = 12, classes: int = 3):
    rng = np.random.default_rng(seed)
    labels, sizes, dets = [], [], []
    for _ in range(images):
        n = int(rng.integers(0, 6))
        labels.append(np.column_stack([rng.integers(0, classes, n), rng.uniform(0.2, 0.8, (n, 2)),
                                       rng.uniform(0.05, 0.3, (n, 2))]))
        h, w = int(rng.integers(64, 200)), int(rng.integers(64, 200))
        sizes.append((h, w))
        # half the detections jitter a true box (so that matches happen), half are anywhere
        boxes = []
        for cls, cx, cy, bw, bh in labels[-1]:
            for _ in range(int(rng.integers(0, 3))):
                jitter = rng.normal(0, 0.15, 4) * [bw * w, bh * h, bw * w, bh * h]
                x1, y1 = (cx - bw / 2) * w + jitter[0], (cy - bh / 2) * h + jitter[1]
                x2, y2 = (cx + bw / 2) * w + jitter[2], (cy + bh / 2) * h + jitter[3]
                label = cls if rng.uniform() < 0.8 else rng.integers(0, classes)
                boxes.append([x1, y1, max(x2, x1 + 1), max(y2, y1 + 1), rng.uniform(), label])
        for _ in range(int(rng.integers(0, 5))):
            x1, y1 = rng.uniform(0, w * 0.7), rng.uniform(0, h * 0.7)
            boxes.append([x1, y1, x1 + rng.uniform(5, w * 0.3), y1 + rng.uniform(5, h * 0.3), rng.uniform(),
                          rng.integers(0, classes)])
        dets.append(np.array(boxes, dtype=np.float64).reshape(-1, 6))
    return dets, labels, sizes


def _pycocotools(gt: dict, dets: list[dict]):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    with contextlib.redirect_stdout(io.StringIO()):
        coco_gt = COCO()
        coco_gt.dataset = gt
        coco_gt.createIndex()
        evaluator = COCOeval(coco_gt, coco_gt.loadRes(dets), "bbox")
        evaluator.evaluate()
        evaluator.accumulate()
    return evaluator


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_matching_agrees_with_pycocotools(seed):
    dets, labels, sizes = _random_case(seed)
    gt = yolo_to_coco_gt(labels, sizes, num_classes=3)
    matches = match_detections(dets, labels, sizes, 3, iou_thres=0.5)
    assert matches.true_positive.any() and not matches.true_positive.all()
    gt_counts = np.bincount([a["category_id"] - 1 for a in gt["annotations"]], minlength=3)
    np.testing.assert_array_equal(matches.gt_per_class, gt_counts)
    # recall per class over all detections = COCO's recall at IoU 0.5 (area all, most detections)
    coco = _pycocotools(gt, detections_to_coco(dets))
    coco_recall = np.asarray(coco.eval["recall"])[0, :, 0, -1]
    true_pos, _ = counts_at(matches, 0.0)
    for cls in range(3):
        if matches.gt_per_class[cls]:
            assert true_pos[cls] / matches.gt_per_class[cls] == pytest.approx(coco_recall[cls])
    # the PR curve's area (COCO's 101-point interpolation) is COCO's AP@0.5 per class
    ap50 = coco_evaluate(gt, detections_to_coco(dets)).ap50_per_class
    ap = curves(matches).ap()
    for cls in range(3):
        if matches.gt_per_class[cls]:
            assert ap[cls] == pytest.approx(ap50[cls], abs=1e-12)
    # P / R at a confidence: COCO run on the detections above it finds the same true positives
    for conf in (0.3, 0.7):
        kept = [d[d[:, 4] >= conf] for d in dets]
        coco = _pycocotools(gt, detections_to_coco(kept))
        recall = np.asarray(coco.eval["recall"])[0, :, 0, -1]
        found = sum(r * g for r, g in zip(recall, matches.gt_per_class) if r > -1)
        precision, rec = precision_recall_at(matches, conf)
        assert rec == pytest.approx(found / matches.gt_per_class.sum())
        assert precision == pytest.approx(found / sum(len(k) for k in kept))


def test_each_box_is_taken_once_by_the_highest_score():
    # two detections on one box: the higher score is the true positive whatever the input order
    gt = [np.array([[0, 0.5, 0.5, 0.4, 0.4]])]
    dets = [np.array([[30, 30, 70, 70, 0.4, 0], [31, 31, 71, 71, 0.9, 0]])]
    matches = match_detections(dets, gt, [(100, 100)], 1)
    assert matches.true_positive.tolist() == [False, True]
    # a detection takes the free box of highest IoU (0.67 over 0.54), leaving the other one (x 10..50)
    # to the next detection; taking the first box above 0.5 would leave the second detection nothing
    gt = [np.array([[0, 0.3, 0.5, 0.4, 0.4], [0, 0.5, 0.5, 0.4, 0.4]])]
    dets = [np.array([[22, 30, 62, 70, 0.9, 0], [10, 30, 50, 70, 0.8, 0]])]
    assert match_detections(dets, gt, [(100, 100)], 1).true_positive.tolist() == [True, True]
