"""What ``turboyolo train --drop-suspect`` leaves out: the boxes or images an audit (``turboyolo audit``,
its ``label_issues.csv``) flags at ``--suspect-score`` or above.

``image``: every training image holding a flagged row (any kind) is left out. ``box``: the flagged given
boxes (kinds class, location, spurious) are dropped from the labels the loader reads (the files stay as
they are), and an image that lost a box or holds a flagged missing box keeps its other boxes but gets no
background ("no object") loss, so the object a box was about, or one nobody labelled, is never trained as
background (:attr:`turboyolo.data.scan.Sample.partial`, as ``--unreviewed ignore``).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from turboyolo.boxes import box_iou, cxcywh_to_xyxy
from turboyolo.data.scan import ScanResult
from turboyolo.formats.issues import SAME_BOX_IOU, LabelIssue
from turboyolo.rundir import RealPaths

SUSPECT_ACTIONS = ("image", "box")


def apply_suspects(result: ScanResult, issues: list[LabelIssue], score: float, action: str) -> str:
    """Change ``result``'s samples as ``action`` says for the rows of ``issues`` scored >= ``score``;
    returns the line that says what was left out (also in ``result.suspect_rule``)."""
    flagged: dict[str, list[LabelIssue]] = {}
    real = RealPaths()
    for issue in issues:
        if issue.kind != "ok" and issue.score >= score:
            flagged.setdefault(real(issue.image), []).append(issue)
    keys = [real(sample.image) for sample in result.samples]
    mine = set(keys)
    outside = len(set(flagged) - mine)
    if action == "image":
        before = len(result.samples)
        result.samples = [s for s, key in zip(result.samples, keys) if key not in flagged]
        line = f"{before - len(result.samples)} images left out (--drop-suspect, score >= {score:g})"
    else:
        dropped = stale = ignored = 0
        samples = []
        for sample, key in zip(result.samples, keys):
            rows = flagged.get(key)
            if rows:
                was_partial = sample.partial  # --unreviewed ignore's already: not this rule's
                sample, lost, unmatched = _drop_boxes(sample, rows)
                dropped, stale = dropped + lost, stale + unmatched
                ignored += int(sample.partial and not was_partial)
            samples.append(sample)
        result.samples = samples
        line = (f"{dropped} boxes dropped, {ignored} images without background loss (--drop-suspect, score "
                f">= {score:g})" + (f"; {stale} flagged boxes are no longer in their label files (changed "
                                    "since the audit): kept" if stale else ""))
    if outside and not (set(flagged) & mine):
        line += f"; none of the {outside} flagged images is a training image of this data set"
    result.suspect_rule = line
    return line


def _drop_boxes(sample, rows: list[LabelIssue]):
    """``sample`` without the given boxes ``rows`` flag, and how many were dropped and not found."""
    height, width = sample.hw
    labels = np.asarray(sample.labels, np.float32).reshape(-1, 5)
    boxes = cxcywh_to_xyxy(labels[:, 1:5].astype(np.float64)) * np.array([width, height, width, height])
    keep = np.ones(len(labels), bool)
    unmatched = 0
    for row in (r for r in rows if r.given):
        same = (labels[:, 0].astype(int) == row.cls) & keep
        ious = box_iou(np.asarray([row.box], np.float64), boxes)[0] if len(boxes) else np.zeros(0)
        candidates = np.where(same & (ious >= SAME_BOX_IOU))[0]
        if len(candidates):
            keep[candidates[np.argmax(ious[candidates])]] = False
        else:
            unmatched += 1
    partial = sample.partial or not keep.all() or any(not r.given for r in rows)
    return replace(sample, labels=labels[keep], partial=partial), int((~keep).sum()), unmatched
