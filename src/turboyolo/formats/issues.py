"""``label_issues.csv``, the list of likely label mistakes ``turboyolo audit`` writes, read back by
``turboyolo review --issues`` and ``turboyolo train --drop-suspect``.

One row per given box (its most likely kind of mistake and how likely) and one per box the model found
that no label covers (kind ``missing``), worst first. Boxes are ``x1 y1 x2 y2`` in the image's pixels
(EXIF orientation applied, as every reader of the data set sees the image); ``suggested_*`` is the fix
(the class the model sees, the box it sees, or the box to add), empty where there is none. Kinds:

- ``missing``: a confident prediction that no label covers (the row's box is the prediction);
- ``class``: a label whose box the model sees as another class;
- ``location``: a label whose box the best same-class prediction overlaps poorly;
- ``spurious``: a label where the model sees nothing;
- ``ok``: a given box with none of these (score 0).
"""

from __future__ import annotations

import csv
import math
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from turboyolo.errors import FlagError

KINDS = ("missing", "class", "location", "spurious")
ISSUES_NAME = "label_issues.csv"
SAME_BOX_IOU = 0.9  # a row's box is a label's box at this IoU (the csv rounds to 0.1 px): train, review
DRAWN_FROM = 0.25  # the lowest score a suspected box is drawn with (the review page, the audit's sheets)
IMAGES_NAME = "image_ranking.csv"
COLUMNS = ("rank", "image", "kind", "score", "class", "class_name", "x1", "y1", "x2", "y2",
           "suggested_class", "suggested_class_name", "sx1", "sy1", "sx2", "sy2", "width", "height")

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class LabelIssue:
    """One row of ``label_issues.csv``: a given box (or a missing one) and how likely it is a mistake.

    ``score`` is in [0, 1] (higher: more likely a mistake of ``kind``); ``cls`` and ``box`` are the given
    box's (the predicted one for ``missing``); ``suggested_cls`` / ``suggested_box``: the fix, or None.
    """

    image: str
    kind: str
    score: float
    cls: int
    box: Box
    suggested_cls: int | None = None
    suggested_box: Box | None = None
    width: int = 0
    height: int = 0

    @property
    def given(self) -> bool:
        """Whether the row is about a box of the label file (every kind but ``missing``)."""
        return self.kind != "missing"


def _name(names: list[str], cls: int | None) -> str:
    return "" if cls is None else (names[cls] if 0 <= cls < len(names) else str(cls))


def write_issues(path: str | Path, issues: Iterable[LabelIssue], names: list[str]) -> Path:
    """Write ``issues`` (in their order: the caller sorts, worst first) as ``label_issues.csv``."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", newline="", encoding="utf-8", errors="surrogateescape") as handle:
        writer = csv.writer(handle)
        writer.writerow(COLUMNS)
        for rank, issue in enumerate(issues, start=1):
            box = [f"{v:.1f}" for v in issue.box]
            suggested = [f"{v:.1f}" for v in issue.suggested_box] if issue.suggested_box else [""] * 4
            writer.writerow([rank, issue.image, issue.kind, f"{issue.score:.4f}", issue.cls,
                             _name(names, issue.cls), *box,
                             "" if issue.suggested_cls is None else issue.suggested_cls,
                             _name(names, issue.suggested_cls), *suggested, issue.width, issue.height])
    os.replace(tmp, path)
    return path


def issues_file(source: str | Path, flag: str) -> Path:
    """The ``label_issues.csv`` that ``source`` names: the file, or an audit run directory holding it."""
    path = Path(source)
    if path.is_dir():
        path = path / ISSUES_NAME
    if not path.is_file():
        raise FlagError(f"{flag} {source}: no {ISSUES_NAME} there; give a `turboyolo audit` run directory "
                        f"(runs/audit/exp...) or its {ISSUES_NAME}")
    return path


def read_issues(source: str | Path, flag: str = "--issues", at_least: float | None = None
                ) -> list[LabelIssue]:
    """The rows of a ``label_issues.csv`` (or of the one in an audit run directory), in file order; with
    ``at_least``, only the rows of a kind of mistake (not ``ok``) scored at least that (read a row at a
    time: a large audit's list of a million rows is not held whole for the few thousand asked for).

    Raises:
        FlagError: no such file, or a file that is not an audit's list (the row and column named).
    """
    path = issues_file(source, flag)
    out = []
    try:
        with open(path, newline="", encoding="utf-8", errors="surrogateescape") as handle:
            reader = csv.reader(handle)
            header = next(reader, None)
            if header is not None and not set(COLUMNS) <= set(header):
                missing = ", ".join(sorted(set(COLUMNS) - set(header)))
                raise FlagError(f"{flag} {path}: not a `turboyolo audit` label list (no column {missing})")
            kind, score = (header.index("kind"), header.index("score")) if header else (0, 0)
            for line, values in enumerate(reader, start=2):
                if not values:
                    continue  # a blank line (an edited file)
                if len(values) != len(header):
                    raise _not_a_row(path, line, flag, f"{len(values)} fields, the header has {len(header)}")
                if at_least is not None and (_score(values[score], path, line, flag) < at_least
                                             or values[kind] == "ok"):
                    continue
                out.append(_issue(dict(zip(header, values)), path, line, flag))
    except OSError as err:
        raise FlagError(f"{flag} {path}: cannot read it ({err.strerror or err})") from None
    return out


def _issue(row: dict, path: Path, line: int, flag: str) -> LabelIssue:
    try:
        kind = row["kind"]
        if kind not in (*KINDS, "ok"):
            raise ValueError(f"kind {kind!r}")
        box = tuple(_number(row[key]) for key in ("x1", "y1", "x2", "y2"))
        suggested = tuple(_number(row[key]) for key in ("sx1", "sy1", "sx2", "sy2")) if row["sx1"] else None
        return LabelIssue(row["image"], kind, _score(row["score"], path, line, flag), int(row["class"]), box,
                          int(row["suggested_class"]) if row["suggested_class"] else None, suggested,
                          int(row["width"] or 0), int(row["height"] or 0))
    except (KeyError, TypeError, ValueError) as err:
        raise _not_a_row(path, line, flag, err) from None


def _score(text: str, path: Path, line: int, flag: str) -> float:
    try:
        score = _number(text)
        if not 0 <= score <= 1:
            raise ValueError(f"score {score}")
        return score
    except (TypeError, ValueError) as err:
        raise _not_a_row(path, line, flag, err) from None


def _not_a_row(path: Path, line: int, flag: str, err: Exception | str) -> FlagError:
    return FlagError(f"{flag} {path}:{line}: not a row of an audit's label list ({err}); rerun "
                     "`turboyolo audit` or fix the file")


def _number(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"{text!r} is not a finite number")
    return value
