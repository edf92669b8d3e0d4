"""The builtin COCO AP (turboyolo.train.ap) against pycocotools on random cases in variety: the same
mAP@0.5, mAP@0.5:0.95 and AP per class (crowd-free data, as YOLO labels are)."""

from __future__ import annotations

import numpy as np
import pytest

from turboyolo.train.ap import IOU_THRESHOLDS, average_precision, match, pool
from turboyolo.train.metrics import coco_evaluate, detections_to_coco, evaluate_detections, yolo_to_coco_gt


def random_case(seed: int, images: int, classes: int, per_image: int, near: float = 0.6, tie_digits=None):
    """Labels of 0-9 boxes per image (some images empty), detections jittered around them (some of a
    wrong class, some duplicated) and scattered, images of varied sizes."""
    rng = np.random.default_rng(seed)
    labels, sizes, dets = [], [], []
    for _ in range(images):
        height, width = int(rng.integers(60, 500)), int(rng.integers(60, 700))
        count = int(rng.integers(0, 10)) if rng.uniform() > 0.1 else 0
        gt = np.column_stack([rng.integers(0, classes, count), rng.uniform(0.1, 0.9, (count, 2)),
                              rng.uniform(0.02, 0.5, (count, 2))])
        rows = []
        for _ in range(int(rng.integers(0, per_image + 1))):
            if count and rng.uniform() < near:
                cls, cx, cy, w, h = gt[rng.integers(count)]
                cx, cy = cx + rng.normal(0, 0.2 * w), cy + rng.normal(0, 0.2 * h)
                w, h = w * rng.uniform(0.6, 1.5), h * rng.uniform(0.6, 1.5)
                cls = cls if rng.uniform() < 0.85 else rng.integers(classes)
            else:
                cx, cy, w, h = rng.uniform(0, 1, 2).tolist() + rng.uniform(0.01, 0.6, 2).tolist()
                cls = rng.integers(classes)
            box = [(cx - w / 2) * width, (cy - h / 2) * height, (cx + w / 2) * width, (cy + h / 2) * height]
            rows.append([*box, rng.uniform(0.001, 1), cls])
            if rng.uniform() < 0.05:
                rows.append(list(rows[-1]))  # the same detection twice
        det = np.array(rows, np.float32).reshape(-1, 6)
        if tie_digits is not None:
            det[:, 4] = np.round(det[:, 4], tie_digits)  # many equal scores: COCO's order decides
        labels.append(gt.astype(np.float32))
        sizes.append((height, width))
        dets.append(det[np.argsort(-det[:, 4], kind="stable")] if rng.uniform() < 0.8 else det)
    return dets, labels, sizes


CASES = [  # seed, images, classes, detections per image (max), max_det, tie digits
    (0, 12, 3, 20, 100, None),
    (1, 40, 5, 60, 100, None),
    (2, 25, 80, 150, 300, None),
    (3, 30, 4, 40, 100, 1),  # score ties everywhere
    (4, 20, 2, 80, 10, None),  # max-det per image and class bites in the evaluator
    (5, 3, 1, 5, 100, None),
    (6, 60, 10, 30, 100, 2),
    (7, 20, 2, 30, 3, None),  # --max-det under 10: the evaluator must not read it at 10
]


@pytest.mark.parametrize("seed, images, classes, per_image, max_det, ties", CASES)
def test_builtin_ap_is_pycocotools(seed, images, classes, per_image, max_det, ties):
    dets, labels, sizes = random_case(seed, images, classes, per_image, tie_digits=ties)
    gt = yolo_to_coco_gt(labels, sizes, classes)
    reference = coco_evaluate(gt, detections_to_coco(dets), max_det=max_det)
    builtin = evaluate_detections(dets, labels, sizes, classes, max_det=max_det, backend="builtin")
    assert 0 < reference.map50 < 1 and reference.map50_95 < reference.map50  # something to get right
    assert builtin.map50 == pytest.approx(reference.map50, abs=1e-9)
    assert builtin.map50_95 == pytest.approx(reference.map50_95, abs=1e-9)
    np.testing.assert_allclose(builtin.ap50_per_class, reference.ap50_per_class, atol=1e-9)
    np.testing.assert_allclose(builtin.ap_per_class, reference.ap_per_class, atol=1e-9)
    assert builtin.gt_per_class == reference.gt_per_class
    assert builtin.num_detections == reference.num_detections
    # everything else is the backend's business: the same with the reference backend
    full = evaluate_detections(dets, labels, sizes, classes, max_det=max_det, backend="pycocotools")
    assert (full.precision, full.recall, full.best_f1) == (builtin.precision, builtin.recall, builtin.best_f1)
    np.testing.assert_array_equal(full.confusion, builtin.confusion)


def test_matches_are_pycocotools_per_threshold():
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    dets, labels, sizes = random_case(11, 15, 3, 30)
    gt = yolo_to_coco_gt(labels, sizes, 3)
    coco = COCO()
    coco.dataset = gt
    coco.createIndex()
    evaluator = COCOeval(coco, coco.loadRes(detections_to_coco(dets)), "bbox")
    evaluator.params.areaRng, evaluator.params.areaRngLbl = [[0, 1e10]], ["all"]
    evaluator.evaluate()
    pooled = pool(dets, labels, sizes, 3)
    det_to_gt, evaluated = match(pooled, IOU_THRESHOLDS, max_det=100)
    assert evaluated.all()
    # pycocotools' verdicts: loadRes numbers the results 1.. in the order given, the pooled order
    verdict = np.full((len(IOU_THRESHOLDS), len(pooled.det_scores)), -1)
    for entry in evaluator.evalImgs:
        for j, det_id in enumerate(entry["dtIds"] if entry is not None else []):
            verdict[:, det_id - 1] = entry["dtMatches"][:, j]
    annotation_ids = np.array([a["id"] for a in gt["annotations"]])
    ours = np.where(det_to_gt >= 0, annotation_ids[np.maximum(det_to_gt, 0)], 0)
    np.testing.assert_array_equal(ours, np.where(verdict > 0, verdict, 0))
    assert (ours[0] > 0).any() and (ours[0] == 0).any() and (ours[0] > 0).sum() > (ours[-1] > 0).sum()


def test_class_without_detections_or_ground_truth():
    labels = [np.array([[0, 0.5, 0.5, 0.2, 0.2], [2, 0.3, 0.3, 0.1, 0.1]], np.float32)]
    dets = [np.array([[40, 40, 60, 60, 0.9, 0], [0, 0, 5, 5, 0.8, 1]], np.float32)]
    pooled = pool(dets, labels, [(100, 100)], 3)
    ap = average_precision(pooled, *match(pooled))
    assert np.allclose(ap[:, 0], 1.0) and np.isnan(ap[:, 1]).all() and (ap[:, 2] == 0).all()
    result = evaluate_detections(dets, labels, [(100, 100)], 3)
    assert result.ap50_per_class == pytest.approx([1.0, -1.0, 0.0]) and result.map50 == pytest.approx(0.5)


def test_pool_refuses_lists_of_different_lengths():
    with pytest.raises(ValueError, match="one of each per image"):
        pool([np.zeros((0, 6))], [], [(10, 10)], 1)
