"""YOLO label files (``cls cx cy w h`` per line, relative to the image) and importers.

Readers here parse and check one file; the data-set level policy (what is excluded, fixed or
counted) lives in :mod:`turboyolo.data.scan`, which uses :func:`parse_yolo_labels` for its reasons.
The importers of Pascal VOC XML and COCO JSON live in :mod:`turboyolo.formats.convert`.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

# Coordinates this far outside [0, 1] are clipped (and counted); further out the file is excluded.
CLIP_TOLERANCE = 0.01
# Overshoot this small comes from printing coordinates with 6 decimals; clipped without a report.
ROUNDING_SLACK = 2e-6


@dataclass
class LabelCheck:
    """Result of checking one label file's text.

    ``rows`` is float32 [N, 5] (cls, cx, cy, w, h) after fixes; ``error`` is set (and ``rows`` empty)
    when the file must be excluded, naming every line that cannot be used with its reason
    (``bad_lines`` of them); ``fixes`` lists what was repaired (clipped boxes, duplicates) by line.
    """

    rows: np.ndarray
    error: str | None = None
    fixes: list[str] = field(default_factory=list)
    bad_lines: int = 0


MAX_NAMED_LINES = 20  # bad lines named one by one in a file's reason; the rest are counted


def _empty() -> np.ndarray:
    return np.zeros((0, 5), dtype=np.float32)


def _line_problem(parts: list[str], num_classes: int | None) -> str | None:
    """Why one split line is not a usable ``cls cx cy w h`` row (None when it is)."""
    if len(parts) != 5:
        return f"{len(parts)} columns, expected 5 (cls cx cy w h)"
    try:
        values = [float(p) for p in parts]
    except ValueError:
        return "not a number"
    if not all(math.isfinite(v) for v in values):
        return "NaN or inf"
    cls = values[0]
    if cls != int(cls) or cls < 0:
        return f"class id {parts[0]} out of range (not a whole number >= 0)"
    if num_classes is not None and cls >= num_classes:
        return f"class id {parts[0]} out of range (names has {num_classes})"
    if values[3] <= 0 or values[4] <= 0:
        return "width/height <= 0"
    return None


# A text of only ``cls cx cy w h`` lines of plain numbers (spaces or tabs between, blank lines allowed):
# the common file, which :func:`_clean_rows` reads without judging it line by line.
_PLAIN_ROWS = re.compile(r"(?:[ \t]*(?:[-+.0-9eE]+[ \t]+){4}[-+.0-9eE]+[ \t]*(?:\r?\n|\Z)"
                         r"|[ \t]*(?:\r?\n|\Z))*")


def _clean_rows(text: str, num_classes: int | None) -> np.ndarray | None:
    """The rows of a label text that needs no fix and has no bad line, as :func:`parse_yolo_labels` would
    return them; None for any other text (the line-by-line check then names what it finds)."""
    if _PLAIN_ROWS.fullmatch(text) is None:
        return None
    try:
        arr = np.array([float(token) for token in text.split()], dtype=np.float64).reshape(-1, 5)
    except ValueError:
        return None
    cls = arr[:, 0]
    half = arr[:, 3:5] / 2
    if not (np.isfinite(arr).all() and (cls == np.floor(cls)).all() and (cls >= 0).all()
            and (num_classes is None or (cls < num_classes).all()) and (arr[:, 3:5] > 0).all()
            and (arr[:, 1:3] - half >= 0).all() and (arr[:, 1:3] + half <= 1).all()):
        return None
    arr32 = arr.astype(np.float32)
    if len(set(map(tuple, arr32.tolist()))) < len(arr32):  # duplicates: the check names them
        return None
    return arr32


def _lines(numbers: list[int]) -> str:
    return ("line " if len(numbers) == 1 else "lines ") + ", ".join(map(str, numbers))


def parse_yolo_labels(text: str, num_classes: int | None = None) -> LabelCheck:
    """Check YOLO label text line by line; see the module docstring of ``data.scan`` for the rules.

    Every line is judged on its own: a box up to ``CLIP_TOLERANCE`` outside the image is clipped (a
    fix); a line that cannot be used (not 5 numbers, NaN/inf, class id out of range, width or height
    <= 0, a box further outside) is named with its reason, and then the whole file is excluded (a box
    dropped from an image would teach the model that its object is background).

    Args:
        text: the file's content.
        num_classes: class ids must be integers in ``[0, num_classes)``; ``None`` skips the upper bound.

    Returns:
        A :class:`LabelCheck`. Blank lines are ignored; an empty file gives zero rows (background).
    """
    clean = _clean_rows(text, num_classes)
    if clean is not None:
        return LabelCheck(clean if len(clean) else _empty())
    rows: list[list[float]] = []
    numbers: list[int] = []
    problems: list[str] = []
    for line_no, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line:
            continue
        problem = ("comma separators (use spaces)" if "," in line
                   else _line_problem(line.split(), num_classes))
        if problem:
            problems.append(f"line {line_no}: {problem}: {line[:60]!r}")
        else:
            rows.append([float(p) for p in line.split()])
            numbers.append(line_no)
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 5)
    corners = np.stack([arr[:, 1] - arr[:, 3] / 2, arr[:, 2] - arr[:, 4] / 2,
                        arr[:, 1] + arr[:, 3] / 2, arr[:, 2] + arr[:, 4] / 2], axis=1)
    outside = np.max(np.maximum(-corners, corners - 1.0), axis=1, initial=0.0)  # per box
    for index in np.flatnonzero(outside > CLIP_TOLERANCE):
        far = f"{outside[index]:.3f}" if outside[index] < 1e3 else f"{outside[index]:.3g}"
        problems.append(f"line {numbers[index]}: box extends {far} outside the image "
                        f"(tolerance {CLIP_TOLERANCE})")
    if problems:
        problems.sort(key=lambda p: int(p.split(":", 1)[0].removeprefix("line ")))
        count, extra = len(problems), len(problems) - MAX_NAMED_LINES
        reason = (f"{count} bad lines: " if count > 1 else "") + "; ".join(problems[:MAX_NAMED_LINES])
        reason += f"; and {extra} more bad lines" if extra > 0 else ""
        return LabelCheck(_empty(), reason, bad_lines=count)
    if not len(arr):
        return LabelCheck(_empty())
    fixes: list[str] = []
    clipped = np.flatnonzero(outside > ROUNDING_SLACK)  # 6-decimal rounding at an edge is not a defect
    if len(clipped):
        fixes.append(f"{_lines([numbers[i] for i in clipped])}: box clipped to the image (up to "
                     f"{float(outside[clipped].max()):.4f} outside)")
    if np.any(outside > 0):
        corners = np.clip(corners, 0.0, 1.0)
        arr[:, 1:5] = np.stack([(corners[:, 0] + corners[:, 2]) / 2, (corners[:, 1] + corners[:, 3]) / 2,
                                corners[:, 2] - corners[:, 0], corners[:, 3] - corners[:, 1]], axis=1)
    arr32 = arr.astype(np.float32)
    first: dict[tuple, int] = {}  # each distinct row -> where it first appears (np.unique's axis=0 is slow)
    for index, row in enumerate(arr32.tolist()):
        first.setdefault(tuple(row), index)
    if len(first) < len(arr32):
        kept = set(first.values())
        dropped = [numbers[i] for i in range(len(arr32)) if i not in kept]
        fixes.append(f"{_lines(dropped)}: duplicate box removed")
        arr32 = arr32[sorted(kept)]
    return LabelCheck(arr32, None, fixes)


def format_yolo_rows(rows: np.ndarray | Sequence[Sequence[float]], with_conf: bool = False) -> str:
    """Text of a YOLO label file: ``cls cx cy w h`` (+ `` conf`` when ``with_conf``), 6 decimals."""
    arr = np.asarray(rows, dtype=np.float64).reshape(-1, 6 if with_conf else 5) if len(rows) else None
    if arr is None:
        return ""
    lines = []
    for row in arr:
        coords = " ".join(f"{v:.6f}" for v in row[1:5])
        line = f"{int(round(row[0]))} {coords}"
        if with_conf:
            line += f" {row[5]:.6f}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def boxes_to_yolo_rows(boxes_xyxy, classes, width: float, height: float, scores=None) -> np.ndarray:
    """Pixel boxes -> YOLO rows ``[n, 5]`` (cls, cx, cy, w, h relative), ``[n, 6]`` with ``scores``."""
    boxes = np.asarray(boxes_xyxy, np.float64).reshape(-1, 4)
    columns = [np.asarray(classes, np.float64).reshape(-1),
               (boxes[:, 0] + boxes[:, 2]) / 2 / width, (boxes[:, 1] + boxes[:, 3]) / 2 / height,
               (boxes[:, 2] - boxes[:, 0]) / width, (boxes[:, 3] - boxes[:, 1]) / height]
    if scores is not None:
        columns.append(np.asarray(scores, np.float64).reshape(-1))
    return np.column_stack(columns).reshape(-1, len(columns))


def write_yolo_labels(path: str | Path, rows: np.ndarray | Sequence[Sequence[float]],
                      with_conf: bool = False) -> None:
    """Write a YOLO label file atomically (temporary file + rename).

    Args:
        path: destination ``.txt``; parent folders are created.
        rows: [N, 5] (cls, cx, cy, w, h) relative, or [N, 6] with a trailing confidence when
            ``with_conf`` (the Darknet/Ultralytics ``save_conf`` layout). N may be 0 (empty file).
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(format_yolo_rows(rows, with_conf), encoding="utf-8")
    os.replace(tmp, path)


def write_names(path: str | Path, names: Sequence[str]) -> None:
    """Write a Darknet ``.names`` file (one class per line)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(f"{n}\n" for n in names), encoding="utf-8")
