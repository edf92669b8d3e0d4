"""Scores of likely label mistakes from out-of-sample predictions: one per given box, one per box the model
finds that no label covers (the kinds of :mod:`turboyolo.formats.issues`).

The evidence for a box is the predictions that overlap it. A confidence means different things per class
and per model (a detector is surer of large cells than of small platelets; IoU-valued objectness keeps
every score lower), so each is first made a chance (:class:`Calibration`): the share of that class's
predictions at that confidence that match a labelled box of their class, over the whole data set. Then,
with ``see(k, l)`` the calibrated confidence of the best class-``k`` prediction that matches label ``l``
(IoU >= 0.5):

- **class**: ``max_{k != c} see(k, l) * (1 - see(c, l))``, the suggestion that ``k``;
- **location**: ``(1 - see(c, l)) * conf(p)`` for the surest class-``c`` prediction ``p`` that overlaps
  ``l`` by 0.1-0.5 and matches no other label (the suggestion: ``p``'s box);
- **spurious**: ``1 - max_p conf(p) * ramp(IoU(p, l))`` over the predictions of any class that match no
  other label, the ramp rising from 0 at IoU 0.1 to 1 at 0.5: nothing there, or only far off;
- **missing**: ``conf(p) * (1 - max_l IoU(p, l))`` for a prediction that no label matches (IoU < 0.5)
  and that is not already a location suggestion, one per place (across classes, the surest).

A given box takes its likeliest kind (``ok`` when all are 0). An image's score is the chance that at
least one of its boxes is a mistake, the box scores taken as independent chances (``1 - prod(1 - s)``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.boxes import box_iou
from turboyolo.formats.issues import KINDS, LabelIssue

MATCH_IOU = 0.5  # a prediction this close to a label sees that label
NEAR_IOU = 0.1  # closer than this, a prediction is about another object
MISSING_FLOOR = 0.05  # missing boxes scored lower are not listed (the long tail of faint predictions)
MIN_SUPPORTS = 5  # matched predictions a class needs for its own calibration curve (else the pooled one)
TIE_BREAK = 1e-3  # share of the raw confidence in a calibrated one (orders the predictions of one step)


@dataclass
class ImageEvidence:
    """One image: its given boxes ``labels`` ``[L, 5]`` (class, x1, y1, x2, y2 in pixels) and the
    out-of-sample predictions ``preds`` ``[P, 6]`` (x1, y1, x2, y2, confidence, class)."""

    image: str
    width: int
    height: int
    labels: np.ndarray
    preds: np.ndarray

    def ious(self) -> np.ndarray:
        """``[P, L]`` IoU of every prediction with every given box."""
        return box_iou(self.preds[:, :4].astype(np.float64), self.labels[:, 1:5].astype(np.float64))


class Calibration:
    """Confidence -> the chance that a prediction of that class and confidence is a labelled object of
    that class: per class, the share of predictions that match a label of their class (IoU >=
    :data:`MATCH_IOU`) as a non-decreasing function of the confidence (isotonic regression over every
    image's predictions), linear between its steps; classes with too few predictions share one curve."""

    def __init__(self, evidences: Sequence[ImageEvidence], num_classes: int):
        confidence: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
        matched: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
        for evidence in evidences:
            ious = evidence.ious() if len(evidence.labels) and len(evidence.preds) else None
            for k in range(num_classes):
                mine = evidence.preds[:, 5] == k
                hits = np.zeros(int(mine.sum()), bool)
                if ious is not None:
                    hits = (ious[mine][:, evidence.labels[:, 0] == k] >= MATCH_IOU).any(1)
                confidence[k].append(evidence.preds[mine, 4])
                matched[k].append(hits)
        flat = [(np.concatenate(c + [np.zeros(0)]), np.concatenate(m + [np.zeros(0, bool)]))
                for c, m in zip(confidence, matched)]
        pooled = _isotonic(np.concatenate([c for c, _ in flat]), np.concatenate([m for _, m in flat]))
        self.curves = [_isotonic(c, m) if m.sum() >= MIN_SUPPORTS else pooled for c, m in flat]
        self.pooled = pooled

    def __call__(self, confidence: np.ndarray, classes: np.ndarray) -> np.ndarray:
        out = np.zeros(len(confidence))
        for k in np.unique(classes.astype(int)):
            x, y = self.curves[k] if 0 <= k < len(self.curves) else self.pooled
            mine = classes.astype(int) == k
            out[mine] = np.interp(confidence[mine], x, y) if len(x) else confidence[mine]
        # a step of the curve ranks its predictions by their own confidence
        return np.clip(out * (1 - TIE_BREAK) + TIE_BREAK * confidence, 0, 1)


def _isotonic(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The non-decreasing step function closest to ``y`` over ``x`` (pool adjacent violators), as its
    steps' mean x and value."""
    order = np.argsort(x, kind="stable")
    means, weights, xs = [], [], []
    for xi, yi in zip(x[order].tolist(), y[order].astype(float).tolist()):
        means.append(yi)
        weights.append(1.0)
        xs.append(xi)
        while len(means) > 1 and means[-2] >= means[-1]:
            w = weights[-2] + weights[-1]
            means[-2] = (means[-2] * weights[-2] + means[-1] * weights[-1]) / w
            xs[-2] = (xs[-2] * weights[-2] + xs[-1] * weights[-1]) / w
            weights[-2] = w
            del means[-1], weights[-1], xs[-1]
    return np.asarray(xs, np.float64), np.asarray(means, np.float64)


def score_image(evidence: ImageEvidence, calibration: Calibration, num_classes: int) -> list[LabelIssue]:
    """The rows of one image: one per given box (its likeliest kind), then its missing boxes."""
    labels, preds = evidence.labels, evidence.preds
    if len(preds) == 0:
        preds = np.zeros((0, 6))
    conf = calibration(preds[:, 4], preds[:, 5])
    ious = evidence.ious() if len(labels) and len(preds) else np.zeros((len(preds), len(labels)))
    matches = ious >= MATCH_IOU
    seen = np.zeros((len(labels), num_classes))  # calibrated raw_support
    for k in range(num_classes):
        mine = preds[:, 5] == k
        if mine.any() and len(labels):
            seen[:, k] = (matches[mine] * conf[mine, None]).max(0)
    label_cls = labels[:, 0].astype(int)
    own = seen[np.arange(len(labels)), label_cls] if len(labels) else np.zeros(0)
    rows, suggestions = [], set()
    for index in range(len(labels)):
        others = matches.copy()
        others[:, index] = False
        free = ~others.any(1)  # predictions that match no other label
        row, suggestion = _given_row(evidence, index, seen[index], own[index], conf, ious[:, index], free)
        rows.append(row)
        if suggestion is not None and own[index] <= 0.5:
            suggestions.add(suggestion)
    return rows + _missing_rows(evidence, conf, ious, suggestions)


def _given_row(evidence: ImageEvidence, index: int, seen: np.ndarray, own: float, conf: np.ndarray,
               iou: np.ndarray, free: np.ndarray) -> tuple[LabelIssue, int | None]:
    """A given box's row (its likeliest kind) and the prediction its location suggestion names."""
    cls = int(evidence.labels[index, 0])
    box = tuple(float(v) for v in evidence.labels[index, 1:5])
    preds = evidence.preds
    other = seen.copy()
    other[cls] = 0
    swap = int(np.argmax(other))
    scores = {"class": float(other[swap] * (1 - own))}
    near = (preds[:, 5] == cls) & (iou >= NEAR_IOU) & (iou < MATCH_IOU) & free
    where = int(np.argmax(np.where(near, conf, -1))) if near.any() else None
    scores["location"] = float((1 - own) * conf[where]) if where is not None else 0.0
    ramp = np.clip((iou - NEAR_IOU) / (MATCH_IOU - NEAR_IOU), 0, 1)
    usable = free | (iou >= MATCH_IOU)
    scores["spurious"] = float(1 - (conf * ramp * usable).max(initial=0.0))
    kind = max(scores, key=lambda name: scores[name])
    score = scores[kind]
    suggested_cls = suggested_box = None
    if kind == "class":
        suggested_cls = swap
    elif kind == "location":
        suggested_cls, suggested_box = cls, tuple(float(v) for v in preds[where, :4])
    if score <= 0:
        kind, score = "ok", 0.0
    row = LabelIssue(evidence.image, kind, round(score, 4), cls, box, suggested_cls, suggested_box,
                     evidence.width, evidence.height)
    return row, where


def _missing_rows(evidence: ImageEvidence, conf: np.ndarray, ious: np.ndarray,
                  suggestions: set[int]) -> list[LabelIssue]:
    """The predictions no label matches (nor a location suggestion takes), one per place, surest first."""
    preds = evidence.preds
    covered = ious.max(1, initial=0.0) if ious.size else np.zeros(len(preds))
    score = conf * (1 - covered)
    order = [p for p in np.argsort(-score, kind="stable")
             if covered[p] < MATCH_IOU and p not in suggestions and score[p] >= MISSING_FLOOR]
    kept: list[int] = []
    for p in order:
        if kept and box_iou(preds[p:p + 1, :4], preds[kept, :4]).max() >= MATCH_IOU:
            continue  # the same place under another class (multi-label predictions)
        kept.append(p)
    out = []
    for p in kept:
        box = tuple(float(v) for v in preds[p, :4])
        cls = int(preds[p, 5])
        out.append(LabelIssue(evidence.image, "missing", round(float(score[p]), 4), cls, box, cls, box,
                              evidence.width, evidence.height))
    return out


@dataclass
class ImageScore:
    """An image's place in the ranking: the chance it holds a mistake, and per kind its worst box."""

    image: str
    score: float
    kinds: dict[str, float]
    boxes: int  # given boxes
    issues: int  # rows of a kind other than ok


def image_score(image: str, rows: Sequence[LabelIssue], given_boxes: int) -> ImageScore:
    """``1 - prod(1 - s)`` over the image's rows; per kind the highest score."""
    scores = np.asarray([row.score for row in rows if row.kind != "ok"], np.float64)
    overall = float(1 - np.prod(1 - np.clip(scores, 0, 1))) if len(scores) else 0.0
    kinds = {kind: max((row.score for row in rows if row.kind == kind), default=0.0) for kind in KINDS}
    return ImageScore(image, round(overall, 4), kinds, given_boxes, int(len(scores)))


def score_all(evidences: Sequence[ImageEvidence], num_classes: int
              ) -> tuple[list[LabelIssue], list[ImageScore]]:
    """Every row (worst first) and every image's score (worst first)."""
    calibration = Calibration(evidences, num_classes)
    rows: list[LabelIssue] = []
    images = []
    for evidence in evidences:
        mine = score_image(evidence, calibration, num_classes)
        rows += mine
        images.append(image_score(evidence.image, mine, len(evidence.labels)))
    rows.sort(key=lambda row: -row.score)
    images.sort(key=lambda item: -item.score)
    return rows, images
