"""Contact sheets of an audit's worst rows: per kind, the first rows of ``label_issues.csv`` each drawn in a
crop of its image around the box, so a person sees at a glance whether they are mistakes.

In each crop: the row's box (red; for ``missing``, the box the model sees and nobody labelled), its
suggestion (green: the box or class the model sees), and the image's other given boxes (thin blue), so a
"missing" cell can be told from one a label already covers. The caption: rank, kind, score, class (and
suggested class).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import cv2
import numpy as np

from turboyolo.data.decode import load_image, save_image
from turboyolo.errors import DataError, printable
from turboyolo.formats.issues import LabelIssue

TILE = 192  # side of a crop on the sheet (px)
COLUMNS = 5
CAPTION = 30  # px of text under each crop
RED, GREEN, BLUE = (40, 40, 230), (40, 200, 40), (230, 140, 40)  # BGR


def draw_sheet(path: str | Path, rows: Sequence[LabelIssue], everything: Sequence[LabelIssue],
               names: Sequence[str]) -> Path | None:
    """Write the sheet of ``rows`` (ranked, worst first) to ``path``; ``everything``: all rows of the
    audit (for the other given boxes of each image). None when no row's image can be read."""
    given: dict[str, list[LabelIssue]] = {}
    for row in everything:
        if row.given:
            given.setdefault(row.image, []).append(row)
    tiles = []
    for rank, row in enumerate(rows, start=1):
        try:
            image = cv2.cvtColor(load_image(row.image), cv2.COLOR_RGB2BGR)
        except DataError:
            continue  # gone or damaged since the audit: the csv still lists it
        tiles.append((_crop(image, row, given.get(row.image, ())), _caption(rank, row, names)))
    if not tiles:
        return None
    columns = min(COLUMNS, len(tiles))
    lines = (len(tiles) + columns - 1) // columns
    sheet = np.full((lines * (TILE + CAPTION), columns * TILE, 3), 255, np.uint8)
    for k, (tile, caption) in enumerate(tiles):
        top, left = (k // columns) * (TILE + CAPTION), (k % columns) * TILE
        sheet[top : top + TILE, left : left + TILE] = tile
        for line, text in enumerate(caption):
            cv2.putText(sheet, text, (left + 3, top + TILE + 12 + 13 * line), cv2.FONT_HERSHEY_SIMPLEX, 0.36,
                        (0, 0, 0), 1, cv2.LINE_AA)
    return save_image(path, sheet)


def _crop(image: np.ndarray, row: LabelIssue, others: Sequence[LabelIssue]) -> np.ndarray:
    """A ``TILE``-square crop centred on the row's box, three times its size (at least 64 px)."""
    height, width = image.shape[:2]
    x1, y1, x2, y2 = row.box
    side = max(64.0, 3 * max(x2 - x1, y2 - y1))
    cx, cy = (x1 + x2) / 2, (y1 + y2) / 2
    left, top = int(round(cx - side / 2)), int(round(cy - side / 2))
    size = int(round(side))
    scale = TILE / size
    tile = np.full((TILE, TILE, 3), 127, np.uint8)  # grey outside the image; never a canvas of `size`
    sx1, sy1, sx2, sy2 = max(left, 0), max(top, 0), min(left + size, width), min(top + size, height)
    tx1, ty1 = int(round((sx1 - left) * scale)), int(round((sy1 - top) * scale))
    tx2, ty2 = int(round((sx2 - left) * scale)), int(round((sy2 - top) * scale))
    if sx2 > sx1 and sy2 > sy1 and tx2 > tx1 and ty2 > ty1:
        tile[ty1:ty2, tx1:tx2] = cv2.resize(image[sy1:sy2, sx1:sx2], (tx2 - tx1, ty2 - ty1),
                                            interpolation=cv2.INTER_AREA)

    def rect(box, color, thickness) -> None:
        a = (int(round((box[0] - left) * scale)), int(round((box[1] - top) * scale)))
        b = (int(round((box[2] - left) * scale)), int(round((box[3] - top) * scale)))
        cv2.rectangle(tile, a, b, color, thickness)

    for other in others:
        if other.box != row.box:
            rect(other.box, BLUE, 1)
    if row.suggested_box is not None and row.suggested_box != row.box:
        rect(row.suggested_box, GREEN, 2)
    rect(row.box, GREEN if row.kind == "missing" else RED, 2)
    return tile


def _caption(rank: int, row: LabelIssue, names: Sequence[str]) -> list[str]:
    def name(cls: int | None) -> str:
        return "" if cls is None else (names[cls] if 0 <= cls < len(names) else str(cls))

    change = f"{name(row.cls)} -> {name(row.suggested_cls)}" if row.kind == "class" else name(row.cls)
    return [f"{rank}. {row.kind} {row.score:.2f} {printable(change)}"[:34],
            printable(Path(row.image).name)[-30:]]
