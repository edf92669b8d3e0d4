"""The one function that draws boxes on an image (detect's drawings, label's contact sheet, the
training run's prediction pictures)."""

from __future__ import annotations

from collections.abc import Sequence

import cv2
import numpy as np

from turboyolo.errors import printable

Color = tuple[int, int, int]


def class_color(index: int) -> Color:
    """A stable, bright RGB colour per class index."""
    rng = np.random.default_rng(int(index))
    return tuple(int(v) for v in rng.integers(64, 256, 3))


def draw_boxes(image: np.ndarray, boxes_xyxy, colors: Color | Sequence[Color],
               labels: Sequence[str] | None = None, thickness: int | None = None) -> np.ndarray:
    """A copy of ``image`` (uint8 ``[H, W, 3]``, any channel order) with boxes and optional labels drawn.

    Args:
        boxes_xyxy: ``[n, 4]`` (x1, y1, x2, y2) in the image's pixels.
        colors: one colour for all boxes, or one per box (in the image's channel order).
        labels: text drawn above each box, or None.
        thickness: line width in pixels (default: 1 per 400 px of the longer side, at least 1).
    """
    out = np.ascontiguousarray(image).copy()
    boxes = np.asarray(boxes_xyxy, np.float64).reshape(-1, 4)
    if thickness is None:
        thickness = max(1, round(max(out.shape[:2]) / 400))
    single = len(colors) == 3 and all(isinstance(c, int | np.integer) for c in colors)
    for k, box in enumerate(boxes):
        color = tuple(int(c) for c in (colors if single else colors[k]))
        x1, y1, x2, y2 = (int(round(v)) for v in box)
        cv2.rectangle(out, (x1, y1), (x2, y2), color, thickness)
        if labels is not None:
            # printable: cv2 crashes (signal 11) on text that is not UTF-8, e.g. a name from odd bytes
            cv2.putText(out, printable(labels[k]), (x1, max(y1 - 4, 10)), cv2.FONT_HERSHEY_SIMPLEX,
                        0.4 * thickness, color, thickness)
    return out
