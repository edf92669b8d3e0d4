"""Detection metrics: COCO's AP, the rest from per-detection matches.

mAP@0.5, mAP@0.5:0.95 and AP per class are COCO's box evaluation of the YOLO ground truth and the
detections, by one of three backends: ``builtin`` (the default: :mod:`turboyolo.train.ap`, pycocotools'
matching and accumulation vectorised in numpy on arrays), ``pycocotools`` (the reference: the official
numbers, on result dicts) or ``faster-coco-eval``. Precision,
recall and F1 at a confidence, their curves against the confidence, the best-F1 confidence and the
confusion matrix come from :mod:`turboyolo.train.curves`, which matches detections as COCO does at
``iou_thres`` (at 0.5 its recall is the evaluator's).
"""

from __future__ import annotations

import contextlib
import io
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from turboyolo.train.ap import IOU_THRESHOLDS, Pooled, average_precision, match, pool
from turboyolo.train.curves import (
    Curves,
    counts_at,
    curves,
    f1_score,
    pooled_confusion,
    pooled_matches,
    precision_recall_at,
)

if TYPE_CHECKING:
    from turboyolo.model.postprocess import CapCounts

BACKENDS = ("builtin", "pycocotools", "faster-coco-eval")
# The evaluation settings, declared once: `turboyolo train`'s evaluations (EvalArgs), `turboyolo test`
# (a checkpoint's own, else these) and engine.evaluate share them, so the same weights read the same
# precision / recall everywhere.
EVAL_CONF_THRES = 0.1  # score where precision, recall and F1 are read (AP uses every detection >= 0.001)
EVAL_IOU_THRES = 0.5  # IoU a detection needs with a ground truth to count as found
EVAL_NMS_THRES = 0.5  # IoU of per-class NMS


@dataclass
class EvalTiming:
    """Where an evaluation's time went: seconds waiting for the loader, in the forward passes, in decode +
    NMS (on the device's clock), and computing the metrics, over ``images`` images."""

    images: int = 0
    loading_s: float = 0.0
    inference_s: float = 0.0
    nms_s: float = 0.0
    metrics_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        per_image = 1000 / max(self.images, 1)
        return {"inference_ms": self.inference_s * per_image, "nms_ms": self.nms_s * per_image,
                "loading_ms": self.loading_s * per_image, "metrics_s": self.metrics_s}

    def summary(self) -> str:
        per_image = 1000 / max(self.images, 1)
        return (f"speed: {self.inference_s * per_image:.1f} ms inference, {self.nms_s * per_image:.1f} ms "
                f"decode+NMS, {self.loading_s * per_image:.1f} ms waiting for data per image; "
                f"metrics {self.metrics_s:.1f} s")


@dataclass
class EvalResult:
    """Numbers of one evaluation. AP values are in [0, 1]; -1 where the class has no ground truth.

    Precision, recall and F1 (overall and per class) are read at ``conf_thres`` with matches at
    ``iou_thres``; ``curves`` and ``confusion`` are filled by :func:`evaluate_detections`.
    """

    map50: float = 0.0
    map50_95: float = 0.0
    precision: float = 0.0  # at conf_thres, IoU iou_thres
    recall: float = 0.0
    f1: float = 0.0
    ap50_per_class: list[float] = field(default_factory=list)
    ap_per_class: list[float] = field(default_factory=list)
    gt_per_class: list[int] = field(default_factory=list)
    num_images: int = 0
    num_detections: int = 0
    conf_thres: float = 0.25
    iou_thres: float = 0.5
    precision_per_class: list[float] = field(default_factory=list)  # at conf_thres
    recall_per_class: list[float] = field(default_factory=list)
    images_per_class: list[int] = field(default_factory=list)  # images holding a box of the class
    best_conf: float = 0.0  # the confidence of the highest overall F1 (grid of 1000)
    best_f1: float = 0.0
    best_precision: float = 0.0
    best_recall: float = 0.0
    curves: Curves | None = None
    confusion: np.ndarray | None = None  # int64 [C + 1, C + 1]: (predicted, true), index C = background
    timing: EvalTiming | None = None  # filled by turboyolo.train.engine.evaluate
    caps: CapCounts | None = None  # where the NMS caps bit (engine.evaluate)

    def notes(self) -> list[str]:
        """The lines that say how the evaluation went: which NMS cap bit where, and the time split."""
        lines = [self.caps.summary()] if self.caps is not None and self.caps.summary() else []
        return lines + ([self.timing.summary()] if self.timing is not None else [])

    def as_dict(self) -> dict[str, float]:
        return {
            "mAP50": self.map50,
            "mAP50-95": self.map50_95,
            "precision": self.precision,
            "recall": self.recall,
            "f1": self.f1,
            "best_f1": self.best_f1,
            "best_f1_conf": self.best_conf,
        }

    @property
    def measured(self) -> bool:
        """False when the split holds no ground-truth box: then no AP, P or R was measured (they read 0)."""
        return sum(self.gt_per_class) > 0

    def headline(self) -> str:
        """The two mAPs, or that the split has no ground truth to measure them on."""
        if not self.measured:
            return (f"no ground truth in the split (0 boxes in {self.num_images} images): mAP not measured, "
                    f"{self.num_detections} detections cannot be scored")
        return f"mAP@0.5 {self.map50:.4f}  mAP@0.5:0.95 {self.map50_95:.4f}"

    def summary(self) -> str:
        """One line: P / R / F1 at ``conf_thres`` and the best F1 with its confidence and P / R there."""
        if not self.measured:
            return "P, R and F1 not measured (no ground truth)"
        return (
            f"P {self.precision:.3f} R {self.recall:.3f} F1 {self.f1:.3f} at conf {self.conf_thres:g}; "
            f"best F1 {self.best_f1:.3f} at conf {self.best_conf:.3f} "
            f"(P {self.best_precision:.3f} R {self.best_recall:.3f}), IoU {self.iou_thres:g}"
        )

    def per_class_rows(self, names: Sequence[str]) -> list[dict]:
        """Per class: class, images, boxes, P, R (at ``conf_thres``), AP50, AP50-95 (-1: no boxes)."""
        def at(values, index, default):
            return values[index] if index < len(values) else default

        return [
            {
                "class": name,
                "images": at(self.images_per_class, index, 0),
                "boxes": at(self.gt_per_class, index, 0),
                "P": at(self.precision_per_class, index, 0.0),
                "R": at(self.recall_per_class, index, 0.0),
                "AP50": at(self.ap50_per_class, index, -1.0),
                "AP50-95": at(self.ap_per_class, index, -1.0),
            }
            for index, name in enumerate(names)
        ]

    def table(self, names: Sequence[str]) -> str:
        """Per-class table (the rows of ``per_class.csv``) and the overall line."""
        width = max([len("class"), *(len(n) for n in names)])
        header = ("class", "images", "boxes", "P", "R", "AP50", "AP50-95")
        lines = [f"{header[0]:<{width}}  " + "  ".join(f"{h:>7}" for h in header[1:])]
        for row in self.per_class_rows(names):
            if row["boxes"]:
                cells = "  ".join(f"{row[k]:7.3f}" for k in header[3:])
            else:
                cells = "  ".join(f"{'-':>7}" for _ in header[3:])
            lines.append(f"{row['class']:<{width}}  {row['images']:>7}  {row['boxes']:>7}  {cells}")
        overall = (f"{self.precision:7.3f}  {self.recall:7.3f}  {self.map50:7.3f}  {self.map50_95:7.3f}"
                   if self.measured else "  ".join(f"{'-':>7}" for _ in header[3:]))
        lines.append(f"{'all':<{width}}  {self.num_images:>7}  {sum(self.gt_per_class):>7}  {overall}")
        lines.append(f"{self.summary()} ({self.num_detections} detections on {self.num_images} images)")
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
    max_det: int = 300,
    backend: str = "pycocotools",
) -> EvalResult:
    """AP of COCO result dicts on a ground-truth dict, by pycocotools or faster-coco-eval (P / R / F1
    left at 0)."""
    if backend not in BACKENDS[1:]:
        raise ValueError(f"backend must be one of {BACKENDS[1:]} for result dicts, got {backend!r}")
    num_classes = len(gt["categories"])
    gt_counts = np.bincount([a["category_id"] - 1 for a in gt["annotations"]], minlength=num_classes)
    ap = np.full((len(IOU_THRESHOLDS), num_classes), np.nan)
    if gt["annotations"] and detections:
        evaluator = _run(gt, detections, max_det, backend)
        precision = np.asarray(evaluator.eval["precision"])  # [T, R, K, A, M]
        pr = precision[:, :, :, 0, -1]  # area "all", the largest maxDets
        with np.errstate(invalid="ignore"), warnings_off():
            per_iou_class = np.nanmean(np.where(pr > -1, pr, np.nan), axis=1)  # [T, K]
        for k, cat_id in enumerate(evaluator.params.catIds):
            ap[:, cat_id - 1] = per_iou_class[:, k]
    return ap_result(ap, gt_counts, len(gt["images"]), len(detections))


def ap_result(ap: np.ndarray, gt_counts: np.ndarray, num_images: int, num_detections: int) -> EvalResult:
    """An :class:`EvalResult` with COCO's AP filled in from ``ap`` (``[T, C]`` per IoU threshold and class):
    -1 for a class without ground truth, 0 where its AP is undefined; the mAPs average the classes that
    have ground truth."""
    num_classes = len(gt_counts)
    result = EvalResult(num_images=num_images, num_detections=num_detections,
                        gt_per_class=[int(c) for c in gt_counts],
                        ap50_per_class=[-1.0] * num_classes, ap_per_class=[-1.0] * num_classes)
    with warnings_off():
        for cls in np.flatnonzero(gt_counts):
            result.ap50_per_class[cls] = float(np.nan_to_num(ap[0, cls]))
            result.ap_per_class[cls] = float(np.nan_to_num(np.nanmean(ap[:, cls])))
    present = np.flatnonzero(gt_counts)
    result.map50 = float(np.mean([result.ap50_per_class[c] for c in present])) if len(present) else 0.0
    result.map50_95 = float(np.mean([result.ap_per_class[c] for c in present])) if len(present) else 0.0
    return result


def builtin_evaluate(pooled: Pooled, *, max_det: int = 300,
                     also_at: float | None = None) -> tuple[EvalResult, np.ndarray | None]:
    """COCO's AP by :mod:`turboyolo.train.ap` on pooled arrays (what ``--backend builtin`` computes), and
    with ``also_at`` every detection's verdict at that IoU, matched in the same pass (``None`` where
    ``max_det`` left detections out of COCO's matching: the verdicts of all of them are not there)."""
    thresholds = IOU_THRESHOLDS if also_at is None else np.r_[IOU_THRESHOLDS, also_at]
    det_to_gt, evaluated = match(pooled, thresholds, max_det)
    ap = average_precision(pooled, det_to_gt[: len(IOU_THRESHOLDS)], evaluated)
    verdicts = det_to_gt[-1] >= 0 if also_at is not None and evaluated.all() else None
    return ap_result(ap, pooled.gt_per_class, pooled.num_images, len(pooled.det_scores)), verdicts


@contextlib.contextmanager
def warnings_off():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", category=RuntimeWarning)
        yield


def _run(gt: dict, detections: list[dict], max_det: int, backend: str):
    quiet = io.StringIO()
    with contextlib.redirect_stdout(quiet):
        if backend == "pycocotools":
            coco_gt = COCO()
            coco_gt.dataset = {**gt, "annotations": [dict(a) for a in gt["annotations"]]}
            coco_gt.createIndex()
            coco_dt = coco_gt.loadRes([dict(d) for d in detections])
            evaluator = COCOeval(coco_gt, coco_dt, "bbox")
        else:
            from faster_coco_eval import COCO as FasterCOCO  # optional: pip install faster-coco-eval
            from faster_coco_eval import COCOeval_faster

            coco_gt = FasterCOCO()
            coco_gt.dataset = {**gt, "annotations": [dict(a) for a in gt["annotations"]]}
            coco_gt.createIndex()
            coco_dt = coco_gt.loadRes([dict(d) for d in detections])
            evaluator = COCOeval_faster(coco_gt, coco_dt, "bbox", separate_eval=True)
        # read at the largest (index -1), which must be max_det: the library sorts the list
        evaluator.params.maxDets = [*(m for m in (1, 10) if m < max_det), max_det]
        evaluator.evaluate()
        evaluator.accumulate()
    return evaluator


def evaluate_detections(
    detections: Sequence[np.ndarray],
    labels: Sequence[np.ndarray],
    image_hw: Sequence[tuple[int, int]],
    num_classes: int,
    *,
    conf_thres: float = 0.25,
    iou_thres: float = 0.5,
    max_det: int = 300,
    backend: str = "builtin",
) -> EvalResult:
    """Every number of one evaluation: COCO AP, P / R / F1 at ``conf_thres``, curves, confusion matrix.

    Args:
        detections: per image, ``[n, 6]`` (x1, y1, x2, y2, score, class) in original pixels, every
            detection the AP should see (down to the evaluation's low confidence).
        labels: per image, ``[m, 5]`` (class, cx, cy, w, h) relative to the image.
        image_hw: per image, its (height, width).
        num_classes: classes 0..num_classes-1.
        conf_thres: where precision / recall / F1 and the confusion matrix are read.
        iou_thres: IoU of a match for precision / recall / F1, their curves and the confusion matrix
            (AP is always COCO's: at 0.5 and averaged over 0.5:0.95).
        max_det: detections per image the COCO evaluator keeps.
        backend: ``builtin``, ``pycocotools`` or ``faster-coco-eval`` (:data:`BACKENDS`).
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    pooled = pool(detections, labels, image_hw, num_classes)
    verdicts = None
    if backend == "builtin":
        result, verdicts = builtin_evaluate(pooled, max_det=max_det, also_at=iou_thres)
    else:
        gt = yolo_to_coco_gt(labels, image_hw, num_classes)
        result = coco_evaluate(gt, detections_to_coco(detections), max_det=max_det, backend=backend)
    matches = pooled_matches(pooled, iou_thres, verdicts)
    true_pos, kept = counts_at(matches, conf_thres)
    gt_counts = matches.gt_per_class
    result.conf_thres, result.iou_thres = conf_thres, iou_thres
    result.precision, result.recall = precision_recall_at(matches, conf_thres)
    result.f1 = f1_score(result.precision, result.recall)
    result.precision_per_class = [float(t / k) if k else 0.0 for t, k in zip(true_pos, kept)]
    result.recall_per_class = [float(t / g) if g else 0.0 for t, g in zip(true_pos, gt_counts)]
    holding = np.zeros((pooled.num_images, num_classes), bool)
    holding[pooled.gt_image, pooled.gt_classes] = True
    result.images_per_class = [int(n) for n in holding.sum(axis=0)]
    result.curves = curves(matches)
    result.best_conf, result.best_f1 = result.curves.best_conf, result.curves.best_f1
    result.best_precision, result.best_recall = result.curves.best_precision, result.curves.best_recall
    result.confusion = pooled_confusion(pooled, conf_thres=conf_thres, iou_thres=iou_thres)
    return result
