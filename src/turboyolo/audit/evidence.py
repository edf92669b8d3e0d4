"""What the audit weighs: an image's given boxes beside the out-of-sample predictions, and how much a
prediction says about a box by its overlap."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from turboyolo.boxes import box_iou

MATCH_IOU = 0.5  # a prediction this close to a label sees that label
NEAR_IOU = 0.1  # closer than this, a prediction is about another object


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
        """``[P, L]`` IoU of every prediction with every given box (empty when either is)."""
        if not len(self.labels) or not len(self.preds):
            return np.zeros((len(self.preds), len(self.labels)))
        return box_iou(self.preds[:, :4].astype(np.float64), self.labels[:, 1:5].astype(np.float64))

    def usable(self, matches: np.ndarray, index: int) -> np.ndarray:
        """``[P]``: the predictions that say something about given box ``index``: those that match no
        other given box (a neighbour's own prediction is no evidence about this one), or match this one
        too. ``matches``: ``ious() >= MATCH_IOU``."""
        others = matches.copy()
        others[:, index] = False
        return ~others.any(1) | matches[:, index]


def sign_of_object(ious: np.ndarray, confidence: np.ndarray, usable: np.ndarray) -> float:
    """The best sign of an object in a box: the highest confidence of a ``usable`` prediction, weighed by
    its overlap with the box, from full at IoU :data:`MATCH_IOU` down to none at :data:`NEAR_IOU`."""
    ramp = np.clip((ious - NEAR_IOU) / (MATCH_IOU - NEAR_IOU), 0, 1)
    return float((confidence * ramp * usable).max(initial=0.0))

