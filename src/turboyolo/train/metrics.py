"""Detection metrics through the maintained COCO implementations (pycocotools or faster-coco-eval).

This module only converts YOLO ground truth and detections into COCO's format and reads the numbers
the evaluator computes: mAP@0.5, mAP@0.5:0.95, AP per class, and precision / recall / F1 at a
confidence threshold (from the evaluator's own IoU-0.5 matching). No AP is computed by hand here.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

BACKENDS = ("pycocotools", "faster-coco-eval")


@dataclass
class EvalResult:
    """Numbers of one evaluation. AP values are in [0, 1]; -1 where the class has no ground truth."""

    map50: float = 0.0
    map50_95: float = 0.0
    precision: float = 0.0  # at conf_thres, IoU 0.5
    recall: float = 0.0
    f1: float = 0.0
    ap50_per_class: list[float] = field(default_factory=list)
    ap_per_class: list[float] = field(default_factory=list)
    gt_per_class: list[int] = field(default_factory=list)
    num_images: int = 0
    num_detections: int = 0

    def as_dict(self) -> dict[str, float]:
        return {
            "mAP50": self.map50,
            "mAP50-95": self.map50_95,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
        }

    def table(self, names: Sequence[str]) -> str:
        """Per-class table: class, ground truths, AP@0.5, AP@0.5:0.95."""
        width = max([len("class"), *(len(n) for n in names)])
        lines = [f"{'class':<{width}}  {'boxes':>6}  {'AP50':>6}  {'AP50-95':>7}"]
        for index, name in enumerate(names):
            gt = self.gt_per_class[index] if index < len(self.gt_per_class) else 0
            ap50 = self.ap50_per_class[index] if index < len(self.ap50_per_class) else -1
            ap = self.ap_per_class[index] if index < len(self.ap_per_class) else -1
            cells = (f"{ap50:6.3f}  {ap:7.3f}") if gt else f"{'-':>6}  {'-':>7}"
            lines.append(f"{name:<{width}}  {gt:>6}  {cells}")
        lines.append(
            f"{'all':<{width}}  {sum(self.gt_per_class):>6}  {self.map50:6.3f}  {self.map50_95:7.3f}"
        )
        lines.append(
            f"P {self.precision:.3f}  R {self.recall:.3f}  F1 {self.f1:.3f} "
            f"({self.num_detections} detections on {self.num_images} images)"
        )
        return "\n".join(lines)


def yolo_to_coco_gt(
    labels: Sequence[np.ndarray], image_hw: Sequence[tuple[int, int]], num_classes: int
) -> dict:
    """Ground truth as a COCO dataset dict.

    Args:
        labels: per image, float ``[N, 5]`` (class, cx, cy, w, h) relative to the image.
        image_hw: per image, its (height, width) in pixels.
        num_classes: categories 0..num_classes-1 (COCO ids are the class indices + 1).

    Image ids are the list positions + 1; boxes become ``[x, y, w, h]`` in pixels.
    """
    images, annotations = [], []
    for index, (boxes, (height, width)) in enumerate(zip(labels, image_hw, strict=False)):
        image_id = index + 1
        images.append({"id": image_id, "height": int(height), "width": int(width)})
        boxes = np.asarray(boxes, dtype=np.float64).reshape(-1, 5)
        for cls, cx, cy, w, h in boxes:
            bw, bh = w * width, h * height
            annotations.append(
                {
                    "id": len(annotations) + 1,
                    "image_id": image_id,
                    "category_id": int(cls) + 1,
                    "bbox": [float(cx * width - bw / 2), float(cy * height - bh / 2), float(bw), float(bh)],
                    "area": float(bw * bh),
                    "iscrowd": 0,
                }
            )
    categories = [{"id": k + 1, "name": str(k)} for k in range(num_classes)]
    return {"images": images, "annotations": annotations, "categories": categories}


def detections_to_coco(detections: Sequence[np.ndarray]) -> list[dict]:
    """Per image ``[n, 6]`` (x1, y1, x2, y2, score, class) in original pixels -> COCO result dicts."""
    results = []
    for index, dets in enumerate(detections):
        dets = np.asarray(dets, dtype=np.float64).reshape(-1, 6)
        for x1, y1, x2, y2, score, cls in dets:
            results.append(
                {
                    "image_id": index + 1,
                    "category_id": int(cls) + 1,
                    "bbox": [float(x1), float(y1), float(x2 - x1), float(y2 - y1)],
                    "score": float(score),
                }
            )
    return results


def coco_evaluate(
    gt: dict,
    detections: list[dict],
    *,
    conf_thres: float = 0.25,
    max_det: int = 300,
    backend: str = "pycocotools",
) -> EvalResult:
    """Run the COCO evaluator on a ground-truth dict and COCO result dicts."""
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    num_classes = len(gt["categories"])
    gt_counts = np.bincount([a["category_id"] - 1 for a in gt["annotations"]], minlength=num_classes)
    result = EvalResult(
        num_images=len(gt["images"]),
        num_detections=len(detections),
        gt_per_class=[int(c) for c in gt_counts],
        ap50_per_class=[-1.0] * num_classes,
        ap_per_class=[-1.0] * num_classes,
    )
    if not gt["annotations"] or not detections:
        result.ap50_per_class = [0.0 if c else -1.0 for c in gt_counts]
        result.ap_per_class = list(result.ap50_per_class)
        return result
    evaluator = _run(gt, detections, max_det, backend)
    precision = np.asarray(evaluator.eval["precision"])  # [T, R, K, A, M]
    pr = precision[:, :, :, 0, -1]  # area "all", the largest maxDets
    ap_per_iou_class = np.where(pr > -1, pr, np.nan)
    with np.errstate(invalid="ignore"), warnings_off():
        ap = np.nanmean(ap_per_iou_class, axis=1)  # [T, K]
    cat_ids = list(evaluator.params.catIds)
    for k, cat_id in enumerate(cat_ids):
        cls = cat_id - 1
        if gt_counts[cls]:
            result.ap50_per_class[cls] = float(np.nan_to_num(ap[0, k]))
            result.ap_per_class[cls] = float(np.nan_to_num(np.nanmean(ap[:, k])))
    present = [c for c in range(num_classes) if gt_counts[c]]
    result.map50 = float(np.mean([result.ap50_per_class[c] for c in present])) if present else 0.0
    result.map50_95 = float(np.mean([result.ap_per_class[c] for c in present])) if present else 0.0
    result.precision, result.recall = _pr_at_conf(gt, detections, gt_counts, conf_thres, max_det, backend)
    denominator = result.precision + result.recall
    result.f1 = 2 * result.precision * result.recall / denominator if denominator else 0.0
    return result


@contextlib.contextmanager
def warnings_off():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        yield


def _run(gt: dict, detections: list[dict], max_det: int, backend: str):
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        if backend == "pycocotools":
            from pycocotools.coco import COCO
            from pycocotools.cocoeval import COCOeval

            coco_gt = COCO()
            coco_gt.dataset = {**gt, "annotations": [dict(a) for a in gt["annotations"]]}
            coco_gt.createIndex()
            coco_dt = coco_gt.loadRes([dict(d) for d in detections])
            evaluator = COCOeval(coco_gt, coco_dt, "bbox")
        else:
            from faster_coco_eval import COCO, COCOeval_faster

            coco_gt = COCO()
            coco_gt.dataset = {**gt, "annotations": [dict(a) for a in gt["annotations"]]}
            coco_gt.createIndex()
            coco_dt = coco_gt.loadRes([dict(d) for d in detections])
            evaluator = COCOeval_faster(coco_gt, coco_dt, "bbox", separate_eval=True)
        evaluator.params.maxDets = [1, 10, max_det]
        evaluator.evaluate()
        evaluator.accumulate()
    return evaluator


def _pr_at_conf(
    gt: dict, detections: list[dict], gt_counts: np.ndarray, conf_thres: float, max_det: int, backend: str
) -> tuple[float, float]:
    """Precision and recall of the detections scoring ``>= conf_thres``, at IoU 0.5.

    The evaluator is run again on those detections alone: its recall per class is then exactly the
    matched fraction of the ground truth, so true positives = recall * ground truths.
    """
    kept = [d for d in detections if d["score"] >= conf_thres]
    if not kept:
        return 0.0, 0.0
    evaluator = _run(gt, kept, max_det, backend)
    recall = np.asarray(evaluator.eval["recall"])[0, :, 0, -1]  # [K] at IoU 0.5, area all
    cat_ids = list(evaluator.params.catIds)
    true_pos = sum(float(r) * gt_counts[c - 1] for r, c in zip(recall, cat_ids, strict=False) if r > -1)
    return true_pos / len(kept), true_pos / max(int(gt_counts.sum()), 1)
