"""An audit's suspected boxes on the review page (``turboyolo review DATA --issues RUN``).

The rows of the audit's ``label_issues.csv`` (:mod:`turboyolo.formats.issues`) scored at least
``DRAWN_FROM`` are kept per image; the images are ordered by the audit's image score
(``image_ranking.csv`` beside it, else their worst row). The page gets each row's boxes relative to the
image, as label files hold them, and finds the label a row is about by its class and box, so a row that a
fix or an edit has dealt with is no longer drawn. Every fix is an edit of the page's rows, saved by the
one save of :meth:`turboyolo.review.items.ReviewSet.save` (atomic, marks the image reviewed).
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field
from pathlib import Path

from turboyolo.formats.issues import (
    DRAWN_FROM,
    IMAGES_NAME,
    SAME_BOX_IOU,
    LabelIssue,
    issues_file,
    read_issues,
)
from turboyolo.rundir import RealPaths


@dataclass
class Suspicions:
    """The audit's rows worth a look, by image (real path), and each image's score."""

    by_image: dict[str, list[LabelIssue]]
    scores: dict[str, float]
    source: Path
    real: RealPaths = field(default_factory=RealPaths)  # the review's images by real path, folders once

    @classmethod
    def read(cls, source: str | Path) -> Suspicions:
        """The suspicions of an audit run directory (or of its ``label_issues.csv``).

        Raises:
            FlagError: no such file, or not an audit's list (names ``--issues``).
        """
        path = issues_file(source, "--issues")
        by_image: dict[str, list[LabelIssue]] = {}
        real = RealPaths()
        for row in read_issues(path, "--issues", at_least=DRAWN_FROM):
            by_image.setdefault(real(row.image), []).append(row)
        scores = {image: max(row.score for row in rows) for image, rows in by_image.items()}
        ranking = path.with_name(IMAGES_NAME)
        if ranking.is_file():  # the audit's own image score (the chance the image holds a mistake)
            with open(ranking, newline="", encoding="utf-8", errors="surrogateescape") as handle:
                for row in csv.DictReader(handle):
                    key = real(row.get("image", ""))
                    if key in scores:
                        try:
                            scores[key] = max(scores[key], float(row["score"]))
                        except (KeyError, TypeError, ValueError):
                            pass  # an edited ranking: the worst row's score stays
        return cls(by_image, scores, path, real)

    def score(self, image: str | Path) -> float:
        return self.scores.get(self.real(image), 0.0)

    def for_page(self, image: str | Path) -> list[dict]:
        """The rows of ``image`` for the page, worst first: kind, score, class, box ``[cx, cy, w, h]``
        relative to the image, and the suggestion (class and box, or None)."""
        out = []
        for row in self.by_image.get(self.real(image), []):
            if row.width <= 0 or row.height <= 0:
                continue  # a row without its image's size cannot be drawn
            out.append({"kind": row.kind, "score": row.score, "cls": row.cls, "box": _relative(row.box, row),
                        "same_iou": SAME_BOX_IOU,
                        "suggested_cls": row.suggested_cls,
                        "suggested_box": _relative(row.suggested_box, row) if row.suggested_box else None})
        return out


def _relative(box: tuple[float, float, float, float], row: LabelIssue) -> list[float]:
    x1, y1, x2, y2 = box
    return [round((x1 + x2) / 2 / row.width, 6), round((y1 + y2) / 2 / row.height, 6),
            round((x2 - x1) / row.width, 6), round((y2 - y1) / row.height, 6)]
