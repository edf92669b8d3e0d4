"""Scores of likely label mistakes from out-of-sample predictions: one per given box, one per box the model
finds that no label covers (the kinds of :mod:`turboyolo.formats.issues`).

A confidence means different things per class and per model (a detector is surer of large cells than of
small platelets; IoU-valued objectness keeps every score lower), so each is first made a chance on this
data set (:mod:`turboyolo.audit.calibration`): ``chance(p)``, the share of that class's predictions at
that confidence that match a labelled box of their class. With ``see(k, l)`` the chance of the best
class-``k`` prediction that matches label ``l`` (IoU >= 0.5):

- **class**: ``max_{k != c} see(k, l) * (1 - see(c, l))``, the suggestion that ``k``;
- **location**: ``(1 - see(c, l)) * chance(p)`` for the surest class-``c`` prediction ``p`` that overlaps
  ``l`` by 0.1-0.5 and matches no other label (the suggestion: ``p``'s box);
- **spurious**: the chance that ``l`` is around nothing (:class:`~turboyolo.audit.calibration.NothingThere`)
  from the best sign of an object inside it, compared with what the labelled boxes of its class and
  boxes drawn where nobody drew one get;
- **missing**: ``chance(p) * (1 - max_l IoU(p, l))`` for a prediction that no label matches (IoU < 0.5)
  and that is not already a location suggestion, one per place (across classes, the surest).

Predictions that match another label say nothing about this one (neighbours in a crowd). A given box
takes its likeliest kind (``ok`` when all are 0). An image's score is its expected number of mistakes, the
sum of its rows' scores (``chance``: that of at least one, the scores taken as independent chances).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.audit.calibration import Calibration, NothingThere
from turboyolo.audit.evidence import MATCH_IOU, NEAR_IOU, ImageEvidence, sign_of_object
from turboyolo.boxes import box_iou
from turboyolo.formats.issues import KINDS, LabelIssue

ISSUE_FLOOR = 0.05  # rows scored lower are no issue: a given box is "ok", a missing one is not listed
SUGGESTS_FROM = 0.5  # a label seen this poorly (1 - see(c, l)) takes its location suggestion for itself


@dataclass
class Judges:
    """What turns evidence into chances on this data set (learnt once from every image)."""

    chance: Calibration
    nothing: NothingThere
    num_classes: int


def score_image(evidence: ImageEvidence, judges: Judges) -> list[LabelIssue]:
    """The rows of one image: one per given box (its likeliest kind), then its missing boxes."""
    labels, preds = evidence.labels, evidence.preds
    conf = judges.chance(preds[:, 4], preds[:, 5])
    ious = evidence.ious()
    matches = ious >= MATCH_IOU
    seen = np.zeros((len(labels), judges.num_classes))
    for k in range(judges.num_classes):
        mine = preds[:, 5] == k
        if mine.any() and len(labels):
            seen[:, k] = (matches[mine] * conf[mine, None]).max(0)
    rows, suggestions = [], set()
    for index in range(len(labels)):
        row, suggestion, own = _given_row(evidence, index, seen[index], conf, ious, matches, judges)
        rows.append(row)
        if suggestion is not None and 1 - own >= SUGGESTS_FROM:
            suggestions.add(suggestion)
    return rows + _missing_rows(evidence, conf, ious, suggestions)


def _given_row(evidence: ImageEvidence, index: int, seen: np.ndarray, conf: np.ndarray, ious: np.ndarray,
               matches: np.ndarray, judges: Judges) -> tuple[LabelIssue, int | None, float]:
    """A given box's row (its likeliest kind), the prediction its location suggestion names, and how well
    the model sees it as its own class."""
    cls = int(evidence.labels[index, 0])
    box = tuple(float(v) for v in evidence.labels[index, 1:5])
    preds, iou = evidence.preds, ious[:, index]
    usable = evidence.usable(matches, index)
    own = float(seen[cls])
    other = seen.copy()
    other[cls] = 0
    swap = int(np.argmax(other))
    scores = {"class": float(other[swap] * (1 - own))}
    near = (preds[:, 5] == cls) & (iou >= NEAR_IOU) & (iou < MATCH_IOU) & usable
    where = int(np.argmax(np.where(near, conf, -1))) if near.any() else None
    scores["location"] = float((1 - own) * conf[where]) if where is not None else 0.0
    scores["spurious"] = judges.nothing(sign_of_object(iou, preds[:, 4], usable), cls)
    kind = max(scores, key=lambda name: scores[name])
    score = scores[kind]
    suggested_cls = suggested_box = None
    if kind == "class":
        suggested_cls = swap
    elif kind == "location":
        suggested_cls, suggested_box = cls, tuple(float(v) for v in preds[where, :4])
    if score < ISSUE_FLOOR:  # its score stays: the image's expected mistakes count every row
        kind, suggested_cls, suggested_box = "ok", None, None
    row = LabelIssue(evidence.image, kind, round(score, 4), cls, box, suggested_cls, suggested_box,
                     evidence.width, evidence.height)
    return row, where, own


def _missing_rows(evidence: ImageEvidence, conf: np.ndarray, ious: np.ndarray,
                  suggestions: set[int]) -> list[LabelIssue]:
    """The predictions no label matches (nor a location suggestion takes), one per place, surest first."""
    preds = evidence.preds
    covered = ious.max(1, initial=0.0) if ious.size else np.zeros(len(preds))
    score = conf * (1 - covered)
    order = [p for p in np.argsort(-score, kind="stable")
             if covered[p] < MATCH_IOU and p not in suggestions and score[p] >= ISSUE_FLOOR]
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
    """An image's place in the ranking: its expected number of mistakes, the chance of at least one, and
    per kind its worst box."""

    image: str
    score: float
    chance: float
    kinds: dict[str, float]
    boxes: int  # given boxes
    issues: int  # rows of a kind other than ok


def image_score(image: str, rows: Sequence[LabelIssue], given_boxes: int) -> ImageScore:
    """The sum of the image's row scores, ``1 - prod(1 - s)``, and per kind the highest score."""
    scores = np.clip(np.asarray([row.score for row in rows], np.float64), 0, 1)
    chance = float(1 - np.prod(1 - scores)) if len(scores) else 0.0
    kinds = {kind: max((row.score for row in rows if row.kind == kind), default=0.0) for kind in KINDS}
    return ImageScore(image, round(float(scores.sum()), 4), round(chance, 4), kinds, given_boxes,
                      sum(row.kind != "ok" for row in rows))


def score_all(evidences: Sequence[ImageEvidence], num_classes: int
              ) -> tuple[list[LabelIssue], list[ImageScore]]:
    """Every row (worst first) and every image's score (worst first)."""
    judges = Judges(Calibration(evidences, num_classes), NothingThere(evidences, num_classes), num_classes)
    rows: list[LabelIssue] = []
    images = []
    for evidence in evidences:
        mine = score_image(evidence, judges)
        rows += mine
        images.append(image_score(evidence.image, mine, len(evidence.labels)))
    rows.sort(key=lambda row: -row.score)
    images.sort(key=lambda item: -item.score)
    return rows, images
