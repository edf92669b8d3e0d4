"""What a model's confidences mean on this data set, learnt from the data set itself.

:class:`Calibration`: a prediction's confidence -> the chance it is a labelled object of its class.
:class:`NothingThere`: the sign of an object inside a given box -> the chance the box is around nothing,
by comparing it with what the given boxes of its class get and with what boxes drawn where nobody drew
one get.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from turboyolo.audit.evidence import MATCH_IOU, NEAR_IOU, ImageEvidence, sign_of_object
from turboyolo.boxes import box_iou

MIN_SUPPORTS = 5  # matched predictions a class needs for its own calibration curve (else the pooled one)
TIE_BREAK = 1e-3  # share of the raw confidence in a calibrated one (orders the predictions of one step)
NOTHING_PRIOR = 0.05  # the share of given boxes taken to be around nothing, before the evidence
BACKGROUND_BOXES = 10  # boxes drawn per image where no box is, to learn what "nothing" gets
MIN_LABELLED = 20  # given boxes a class needs for its own distribution (else every class's)


class Calibration:
    """Confidence -> the chance that a prediction of that class and confidence is a labelled object of
    that class: per class, the share of predictions that match a label of their class (IoU >=
    :data:`MATCH_IOU`) as a non-decreasing function of the confidence (isotonic regression over every
    image's predictions), linear between its steps; classes with too few predictions share one curve."""

    def __init__(self, evidences: Sequence[ImageEvidence], num_classes: int):
        confidence: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
        matched: list[list[np.ndarray]] = [[] for _ in range(num_classes)]
        for evidence in evidences:
            hit = evidence.ious() >= MATCH_IOU
            for k in range(num_classes):
                mine = evidence.preds[:, 5] == k
                confidence[k].append(evidence.preds[mine, 4])
                matched[k].append(hit[mine][:, evidence.labels[:, 0] == k].any(1))
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
    steps' mean x and value. Equal x are one point first (their mean y, weighed by their count), so the
    curve does not depend on the order of tied confidences."""
    unique, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
    sums = np.bincount(inverse.reshape(-1), weights=y.astype(float), minlength=len(unique))
    means, weights, xs = [], [], []
    for xi, yi, wi in zip(unique.tolist(), (sums / counts).tolist(), counts.astype(float).tolist()):
        means.append(yi)
        weights.append(wi)
        xs.append(xi)
        while len(means) > 1 and means[-2] >= means[-1]:
            w = weights[-2] + weights[-1]
            means[-2] = (means[-2] * weights[-2] + means[-1] * weights[-1]) / w
            xs[-2] = (xs[-2] * weights[-2] + xs[-1] * weights[-1]) / w
            weights[-2] = w
            del means[-1], weights[-1], xs[-1]
    return np.asarray(xs, np.float64), np.asarray(means, np.float64)


class NothingThere:
    """The sign of an object in a given box (:func:`~turboyolo.audit.evidence.sign_of_object`) -> the
    chance the box is around nothing. Two references, both from this data set: the signs the given boxes
    of its class get (nearly all of them around something), and the signs of boxes drawn where no given
    box is (:data:`BACKGROUND_BOXES` per image, sizes of the image's own boxes, placed at random, IoU <=
    0.1 with every given box). Bayes' rule on the tails: ``p * P(background >= s) / (p * P(background >=
    s) + (1 - p) * P(labelled <= s))`` with ``p`` :data:`NOTHING_PRIOR`: high where a sign is as weak as
    what background gets and weaker than what real boxes of the class get; it falls as the sign grows."""

    def __init__(self, evidences: Sequence[ImageEvidence], num_classes: int, seed: int = 0):
        rng = np.random.default_rng(seed)
        labelled: list[list[float]] = [[] for _ in range(num_classes)]
        background: list[float] = []
        for evidence in evidences:
            ious = evidence.ious()
            matches = ious >= MATCH_IOU
            for index, cls in enumerate(evidence.labels[:, 0].astype(int)):
                usable = evidence.usable(matches, index)
                labelled[cls].append(sign_of_object(ious[:, index], evidence.preds[:, 4], usable))
            background += _background_signs(evidence, ~matches.any(1), rng)
        pooled = [value for values in labelled for value in values]
        self.background = np.sort(np.asarray(background, np.float64))
        self.labelled = [np.sort(np.asarray(v if len(v) >= MIN_LABELLED else pooled, np.float64))
                         for v in labelled]

    def __call__(self, sign: float, cls: int) -> float:
        background, labelled = self.background, self.labelled[cls]
        as_strong = (len(background) - np.searchsorted(background, sign, side="left") + 0.5) / (
            len(background) + 1)
        as_weak = (np.searchsorted(labelled, sign, side="right") + 0.5) / (len(labelled) + 1)
        nothing = NOTHING_PRIOR * as_strong
        return float(nothing / (nothing + (1 - NOTHING_PRIOR) * as_weak))


def _background_signs(evidence: ImageEvidence, unmatched: np.ndarray, rng: np.random.Generator
                      ) -> list[float]:
    """The signs of object in boxes drawn where no given box is (sizes of the image's boxes); the
    predictions that see a given box are no evidence there (as for a given box)."""
    if not len(evidence.labels):
        return []
    sizes = evidence.labels[:, 3:5] - evidence.labels[:, 1:3]
    out = []
    for _ in range(BACKGROUND_BOXES):
        for _ in range(30):  # a crowded image may have no room: fewer boxes
            w, h = sizes[rng.integers(len(sizes))]
            w, h = min(w, evidence.width - 1), min(h, evidence.height - 1)
            x, y = rng.uniform(0, evidence.width - w), rng.uniform(0, evidence.height - h)
            box = np.array([[x, y, x + w, y + h]])
            if box_iou(box, evidence.labels[:, 1:5]).max() <= NEAR_IOU:
                ious = box_iou(evidence.preds[:, :4], box)[:, 0] if len(evidence.preds) else np.zeros(0)
                out.append(sign_of_object(ious, evidence.preds[:, 4], unmatched | (ious >= MATCH_IOU)))
                break
    return out
