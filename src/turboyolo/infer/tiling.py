"""Sliced detection of large images: overlapping full-resolution tiles, merged into one set of boxes.

A photo much larger than the network input loses its small objects when letterboxed whole (a 30 px tree
crown in a 2472 px photo is 5 px at 416). Here the model runs on ``tile`` x ``tile`` crops at full
resolution, stepping ``tile * (1 - overlap)``; the last tile of a row or column is shifted back inside
the image (never padded). Optionally the whole image is detected too (downscaled as usual), which finds
objects larger than a tile.

Merging (per class, highest score first; boxes in original pixels):
- a box is **cut** when it touches an edge of its tile that is not an image edge (within
  ``edge_margin`` px): the tile saw only part of the object;
- plain NMS (IoU > ``nms_thres``) removes duplicates from overlapping tiles;
- a cut box is joined with a box from another tile (into their union, keeping the higher score) when
  the two agree inside the strip both tiles saw: clipped to the intersection of the two tiles, their
  IoU is at least ``merge_thres``. That drops a cut part of an object a neighbouring tile saw whole,
  and joins the parts of an object larger than the overlap. Boxes that are not cut are never joined,
  so neighbouring objects stay apart.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from turboyolo.boxes import box_iou_pairs
from turboyolo.errors import ConfigError


@dataclass(frozen=True)
class TileOptions:
    """``tile``: side in original pixels; ``overlap``: fraction of a tile shared with its neighbour."""

    tile: int
    overlap: float = 0.2
    whole: bool = False
    edge_margin: float = 3.0
    merge_thres: float = 0.5

    def __post_init__(self):
        if self.tile < 32:
            raise ConfigError(f"--tile must be at least 32 px, got {self.tile}")
        if not 0 <= self.overlap < 1:
            raise ConfigError(f"--overlap must lie in [0, 1), got {self.overlap}")


def tile_origins(length: int, tile: int, overlap: float) -> list[int]:
    """Start offsets along one axis: step ``tile * (1 - overlap)``, the last tile ending at ``length``."""
    if length <= tile:
        return [0]
    step = max(1, int(round(tile * (1 - overlap))))
    origins = list(range(0, length - tile, step))
    origins.append(length - tile)
    return origins


def tile_windows(width: int, height: int, tile: int, overlap: float) -> list[tuple[int, int, int, int]]:
    """``(x0, y0, x1, y1)`` of every tile, row by row."""
    xs, ys = tile_origins(width, tile, overlap), tile_origins(height, tile, overlap)
    return [(x0, y0, min(x0 + tile, width), min(y0 + tile, height)) for y0 in ys for x0 in xs]


@dataclass
class Detections:
    """Boxes ``[n, 4]`` xyxy in original pixels, ``scores``, ``classes``, ``cut`` ``[n]``, and the
    ``windows`` ``[n, 4]`` (xyxy) of the tiles that saw them."""

    boxes: np.ndarray
    scores: np.ndarray
    classes: np.ndarray
    cut: np.ndarray
    windows: np.ndarray

    @classmethod
    def empty(cls) -> Detections:
        return cls(
            np.zeros((0, 4), np.float32),
            np.zeros(0, np.float32),
            np.zeros(0, np.int64),
            np.zeros(0, bool),
            np.zeros((0, 4), np.float32),
        )

    @classmethod
    def concat(cls, parts: Sequence[Detections]) -> Detections:
        if not parts:
            return cls.empty()
        return cls(
            *(
                np.concatenate([getattr(p, f) for p in parts])
                for f in ("boxes", "scores", "classes", "cut", "windows")
            )
        )


def shift_to_image(
    boxes: np.ndarray, window: tuple[int, int, int, int], image_wh: tuple[int, int], edge_margin: float
) -> tuple[np.ndarray, np.ndarray]:
    """Tile boxes -> image boxes, and which of them touch an inner tile edge (``cut``)."""
    x0, y0, x1, y1 = window
    width, height = image_wh
    shifted = np.asarray(boxes, np.float32) + np.array([x0, y0, x0, y0], np.float32)
    cut = np.zeros(len(shifted), bool)
    if x0 > 0:
        cut |= shifted[:, 0] <= x0 + edge_margin
    if y0 > 0:
        cut |= shifted[:, 1] <= y0 + edge_margin
    if x1 < width:
        cut |= shifted[:, 2] >= x1 - edge_margin
    if y1 < height:
        cut |= shifted[:, 3] >= y1 - edge_margin
    return shifted, cut


def _clip_to(boxes: np.ndarray, zones: np.ndarray) -> np.ndarray:
    return np.concatenate([np.maximum(boxes[:, :2], zones[:, :2]), np.minimum(boxes[:, 2:], zones[:, 2:])], 1)


def merge_detections(
    detections: Detections, nms_thres: float = 0.45, merge_thres: float = 0.5, max_det: int | None = None
) -> Detections:
    """NMS across tiles plus joining of cut boxes (see the module docstring); sorted by score."""
    kept: list[Detections] = []
    for cls in np.unique(detections.classes):
        index = np.flatnonzero(detections.classes == cls)
        index = index[np.argsort(-detections.scores[index], kind="stable")]
        boxes = detections.boxes[index].astype(np.float64)
        windows = detections.windows[index].astype(np.float64)
        scores, cut = detections.scores[index], detections.cut[index]
        alive = np.ones(len(index), bool)
        # Only boxes that intersect can interact: look them up in x1 order (a box of width <= max_width
        # intersecting [x1, x2] starts in [x1 - max_width, x2)), so a keeper costs its neighbourhood only.
        by_x1 = np.argsort(boxes[:, 0], kind="stable")
        x1_sorted = boxes[by_x1, 0]
        max_width = float((boxes[:, 2] - boxes[:, 0]).max()) if len(boxes) else 0.0
        out: list[tuple[np.ndarray, float, bool, np.ndarray]] = []
        for i in range(len(index)):
            if not alive[i]:
                continue
            alive[i] = False
            box, window, box_cut = boxes[i].copy(), windows[i].copy(), bool(cut[i])
            changed = True
            while changed:  # a joined box can reach further parts
                changed = False
                lo, hi = np.searchsorted(x1_sorted, [box[0] - max_width, box[2]], side="left")
                rest = by_x1[lo:hi]
                rest = rest[alive[rest]]
                if not len(rest):
                    break
                candidates = rest[box_cut | cut[rest]]
                # the strip both tiles saw; identical windows (same tile) give no evidence to join
                zones = np.concatenate(
                    [
                        np.maximum(window[:2], windows[candidates, :2]),
                        np.minimum(window[2:], windows[candidates, 2:]),
                    ],
                    1,
                )
                other_tile = (windows[candidates] != window).any(1)
                agree = box_iou_pairs(
                    _clip_to(np.broadcast_to(box, zones.shape), zones), _clip_to(boxes[candidates], zones)
                )
                joined = candidates[other_tile & (agree >= merge_thres)]
                # joining goes first: a cut part overlapping its whole object is absorbed, not suppressed
                alive[joined] = False
                rest = rest[alive[rest]]
                duplicate = box_iou_pairs(np.broadcast_to(box, (len(rest), 4)), boxes[rest]) > nms_thres
                alive[rest[duplicate]] = False
                if len(joined):
                    box = np.concatenate(
                        [
                            np.minimum(box[:2], boxes[joined, :2].min(0)),
                            np.maximum(box[2:], boxes[joined, 2:].max(0)),
                        ]
                    )
                    window = np.concatenate(
                        [
                            np.minimum(window[:2], windows[joined, :2].min(0)),
                            np.maximum(window[2:], windows[joined, 2:].max(0)),
                        ]
                    )
                    box_cut = box_cut or bool(cut[joined].any())
                    changed = True
            out.append((box, float(scores[i]), box_cut, window))
        if out:
            kept.append(
                Detections(
                    np.array([o[0] for o in out], np.float32),
                    np.array([o[1] for o in out], np.float32),
                    np.full(len(out), cls, np.int64),
                    np.array([o[2] for o in out], bool),
                    np.array([o[3] for o in out], np.float32),
                )
            )
    merged = Detections.concat(kept)
    order = np.argsort(-merged.scores, kind="stable")[:max_det]
    return Detections(*(getattr(merged, f)[order] for f in ("boxes", "scores", "classes", "cut", "windows")))


def detect_tiled(
    predict: Callable[[list[np.ndarray]], list],
    image: np.ndarray,
    options: TileOptions,
    *,
    batch_size: int = 8,
    nms_thres: float = 0.45,
    max_det: int | None = None,
) -> Detections:
    """Detect on one large image by tiles.

    Args:
        predict: runs the model on a list of uint8 RGB arrays and returns, per array, an object with
            ``boxes`` (xyxy in that array's pixels), ``scores`` and ``classes`` (e.g. a bound
            ``Predictor.predict_arrays``).
        image: uint8 ``[H, W, 3]`` RGB at full resolution.
    Returns:
        Merged :class:`Detections` in the image's pixels.
    """
    height, width = image.shape[:2]
    windows = tile_windows(width, height, options.tile, options.overlap)
    parts: list[Detections] = []
    for start in range(0, len(windows), batch_size):
        chunk = windows[start : start + batch_size]
        crops = [np.ascontiguousarray(image[y0:y1, x0:x1]) for x0, y0, x1, y1 in chunk]
        for window, prediction in zip(chunk, predict(crops)):
            boxes, cut = shift_to_image(prediction.boxes, window, (width, height), options.edge_margin)
            parts.append(
                Detections(
                    boxes,
                    np.asarray(prediction.scores, np.float32),
                    np.asarray(prediction.classes, np.int64),
                    cut,
                    np.tile(np.array(window, np.float32), (len(boxes), 1)),
                )
            )
    if options.whole and len(windows) > 1:
        [prediction] = predict([image])
        parts.append(
            Detections(
                np.asarray(prediction.boxes, np.float32),
                np.asarray(prediction.scores, np.float32),
                np.asarray(prediction.classes, np.int64),
                np.zeros(len(prediction.scores), bool),
                np.tile(np.array([0, 0, width, height], np.float32), (len(prediction.scores), 1)),
            )
        )
    return merge_detections(Detections.concat(parts), nms_thres, options.merge_thres, max_det)
