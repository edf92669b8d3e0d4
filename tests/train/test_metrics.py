"""COCO conversion and AP on a hand-computed two-image case, through both evaluators."""

import numpy as np
import pytest

from turboyolo.train.metrics import coco_evaluate, detections_to_coco, evaluate_detections, yolo_to_coco_gt

# Image 1 is 100x100 with crowns A (10..30) and B (60..80); image 2 is 200 wide x 100 high with C.
LABELS = [np.array([[0, 0.2, 0.2, 0.2, 0.2], [0, 0.7, 0.7, 0.2, 0.2]]), np.array([[0, 0.2, 0.4, 0.2, 0.4]])]
SIZES = [(100, 100), (100, 200)]
# A found (0.9), a false positive (0.8), C found (0.7); B missed.
DETECTIONS = [
    np.array([[10, 10, 30, 30, 0.9, 0], [40, 40, 50, 50, 0.8, 0]]),
    np.array([[20, 20, 60, 60, 0.7, 0]]),
]
# Ranked: TP, FP, TP of 3 -> recall 1/3, 1/3, 2/3 and precision 1, 1/2, 2/3. COCO's 101-point
# interpolation: recall thresholds 0.00..0.33 (34 points) see 1.0, 0.34..0.66 (33 points) see 2/3.
EXPECTED_AP = (34 * 1.0 + 33 * 2 / 3) / 101


def test_yolo_to_coco_ground_truth_in_pixels():
    gt = yolo_to_coco_gt(LABELS, SIZES, num_classes=1)
    assert [im["width"] for im in gt["images"]] == [100, 200]
    boxes = [a["bbox"] for a in gt["annotations"]]
    assert np.allclose(boxes, [[10, 10, 20, 20], [60, 60, 20, 20], [20, 20, 40, 40]])
    assert [a["image_id"] for a in gt["annotations"]] == [1, 1, 2]
    assert all(a["category_id"] == 1 for a in gt["annotations"])


def test_detections_to_coco_xywh():
    results = detections_to_coco(DETECTIONS)
    assert results[2] == {"image_id": 2, "category_id": 1, "bbox": [20.0, 20.0, 40.0, 40.0], "score": 0.7}


@pytest.mark.parametrize("backend", ["pycocotools", "faster-coco-eval"])
def test_known_ap(backend):
    result = evaluate_detections(DETECTIONS, LABELS, SIZES, 1, conf_thres=0.75, backend=backend)
    assert result.map50 == pytest.approx(EXPECTED_AP, abs=1e-6)
    assert result.map50_95 == pytest.approx(EXPECTED_AP, abs=1e-6)  # exact boxes: every IoU threshold
    assert result.precision == pytest.approx(0.5)  # 0.9 TP and 0.8 FP are above 0.75
    assert result.recall == pytest.approx(1 / 3)
    assert result.f1 == pytest.approx(0.4)
    assert result.precision_per_class == pytest.approx([0.5])
    assert result.recall_per_class == pytest.approx([1 / 3])
    assert result.images_per_class == [2] and result.gt_per_class == [3]
    # Over all confidences F1 peaks at 2/3 (2 of 3 found, 2 of 3 right) from 0 up to the 0.7 detection:
    # the highest such confidence is reported.
    assert result.best_f1 == pytest.approx(2 / 3)
    assert result.best_conf == pytest.approx(0.7, abs=1e-3) and result.best_conf <= 0.7
    assert (result.best_precision, result.best_recall) == pytest.approx((2 / 3, 2 / 3))
    assert "best F1 0.667 at conf 0.700 (P 0.667 R 0.667)" in result.table(["crown"])


def test_iou_thres_drives_precision_and_recall():
    # C's detection (20, 20, 60, 60) on its box (20, 20, 60, 60) is exact; make it a half-overlap instead.
    shifted = [DETECTIONS[0], np.array([[40, 20, 80, 60, 0.7, 0]])]  # IoU 20*40 / (2*1600 - 800) = 1/3
    loose = evaluate_detections(shifted, LABELS, SIZES, 1, conf_thres=0.0, iou_thres=0.3)
    strict = evaluate_detections(shifted, LABELS, SIZES, 1, conf_thres=0.0, iou_thres=0.5)
    assert (loose.precision, loose.recall) == pytest.approx((2 / 3, 2 / 3))
    assert (strict.precision, strict.recall) == pytest.approx((1 / 3, 1 / 3))
    assert loose.map50 == strict.map50  # AP stays COCO's at 0.5 and 0.5:0.95
    assert (loose.iou_thres, strict.iou_thres) == (0.3, 0.5)


def test_per_class_rows():
    labels = [np.array([[0, 0.2, 0.2, 0.2, 0.2], [2, 0.7, 0.7, 0.2, 0.2]]), LABELS[1]]
    result = evaluate_detections(DETECTIONS, labels, SIZES, 3, conf_thres=0.75)
    rows = result.per_class_rows(["a", "b", "c"])
    assert [r["class"] for r in rows] == ["a", "b", "c"]
    assert [(r["images"], r["boxes"]) for r in rows] == [(2, 2), (0, 0), (1, 1)]
    assert rows[0]["P"] == pytest.approx(0.5) and rows[0]["R"] == pytest.approx(0.5)
    assert rows[1]["AP50"] == -1.0 and rows[2]["AP50"] == 0.0 and rows[2]["R"] == 0.0


def test_backends_agree_on_random_case():
    rng = np.random.default_rng(0)
    labels, sizes, dets = [], [], []
    for _ in range(6):
        n = rng.integers(0, 6)
        boxes = np.column_stack(
            [rng.integers(0, 3, n), rng.uniform(0.2, 0.8, (n, 2)), rng.uniform(0.05, 0.3, (n, 2))]
        )
        labels.append(boxes)
        sizes.append((int(rng.integers(64, 200)), int(rng.integers(64, 200))))
        h, w = sizes[-1]
        m = int(rng.integers(0, 10))
        x1, y1 = rng.uniform(0, w * 0.7, m), rng.uniform(0, h * 0.7, m)
        bw, bh = rng.uniform(5, w * 0.3, m), rng.uniform(5, h * 0.3, m)
        dets.append(np.column_stack([x1, y1, x1 + bw, y1 + bh, rng.uniform(0, 1, m), rng.integers(0, 3, m)]))
    gt = yolo_to_coco_gt(labels, sizes, num_classes=3)
    a = coco_evaluate(gt, detections_to_coco(dets), backend="pycocotools")
    b = coco_evaluate(gt, detections_to_coco(dets), backend="faster-coco-eval")
    assert a.map50 == pytest.approx(b.map50, abs=1e-9)
    assert a.map50_95 == pytest.approx(b.map50_95, abs=1e-9)
    assert a.ap50_per_class == pytest.approx(b.ap50_per_class, abs=1e-9)


def test_no_detections_is_zero():
    gt = yolo_to_coco_gt(LABELS, SIZES, num_classes=2)
    result = coco_evaluate(gt, [])
    assert result.map50 == 0.0 and result.ap50_per_class == [0.0, -1.0]
